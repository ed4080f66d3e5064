//! `librankwise_nccl.so` in front of a stand-in NCCL (as in `calls.rs`),
//! across ranks: mismatched, skipped and unmatched calls, AlltoAllv splits
//! that are not transposes, ranks that never come or that left, and the
//! shared-memory lane. Every test starts N rank processes of this test
//! binary with the interposer in `LD_PRELOAD`. None needs a GPU.

#[path = "support/programs.rs"]
mod programs;
#[path = "support/ranks.rs"]
mod ranks;
#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;

use ranks::*;
use std::time::Duration;

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    programs::rank_main();
}

#[test]
fn a_count_mismatch_is_an_error_on_every_rank_naming_the_ranks() {
    let run = run("count", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        let errs = run.errors(r);
        let head = errs[0].split(" (comm ").next().unwrap();
        assert_eq!(
            head,
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: AllReduce #0: count differs: ranks 0,1,3 pass 4, rank 2 passes 5 [ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum]"
            )
        );
        assert!(
            errs[1].contains("this communicator failed earlier"),
            "{errs:?}"
        );
    }
    assert!(
        run.elapsed < Duration::from_secs(15),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn a_skipped_call_is_an_error_on_every_rank_naming_the_rank() {
    let run = run("skip", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        let e = &run.errors(r)[0];
        assert!(
            e.contains(
                "ranks 0,1,3 call Broadcast #1, rank 2 calls AllReduce #1; rank 2 skipped a call"
            ),
            "rank {r}: {e}"
        );
        assert!(
            e.contains(
                "[ranks 0,1,3: Broadcast count 4 int32 root 0; rank 2: AllReduce count 4 int32 sum]"
            ),
            "{e}"
        );
    }
}

/// Rank 0 Sends to rank 1, which waits in an AllReduce with the others:
/// rank 1 reads rank 0's note on the lane and names the wait-for cycle at
/// once, long before the 20 s deadline; every rank says it.
#[test]
fn an_unmatched_send_is_a_cycle_named_on_every_rank_at_once() {
    let run = run("unmatched", 4, true, &[("RANKWISE_TIMEOUT", "20")]);
    run.assert_ok();
    let cycle = "deadlock: rank 1 waits in AllReduce (opCount 0) for rank 0, which waits in Send (opCount 0) for rank 1's Recv #0 from rank 0, which rank 1 has not made: neither can go on";
    let e0 = run.errors(0).join("\n");
    assert!(
        e0.contains("Send #0 to rank 1 (count 16, int32, opCount 0) has no matching Recv"),
        "{e0}"
    );
    for r in 0..4 {
        let e = run.errors(r).join("\n");
        assert!(e.contains(cycle), "rank {r}: {e}");
    }
    assert!(
        run.elapsed < Duration::from_secs(10),
        "took {:?}",
        run.elapsed
    );
}

/// Each rank Sends to the next outside a group before it Recvs: every
/// Send waits for a Recv that comes only after the peer's own Send. The
/// store sees the four waits close a cycle and every rank names it, its
/// own step first, long before the 20 s deadline.
#[test]
fn a_ring_of_sends_outside_a_group_is_a_cycle_named_on_every_rank_at_once() {
    let run = run("ring_ungrouped", 4, true, &[("RANKWISE_TIMEOUT", "20")]);
    run.assert_ok();
    let step = |q: usize| {
        let to = (q + 1) % 4;
        format!("rank {q} waits in Send (opCount 0) for rank {to}'s Recv #0 from rank {q}")
    };
    for r in 0..4 {
        let steps: Vec<String> = (0..4).map(|k| step((r + k) % 4)).collect();
        let cycle = format!(
            "ncclInvalidUsage on rank {r}: deadlock: {}: each waits for the next, so none of them can go on",
            steps.join("; ")
        );
        let e = run.errors(r).join("\n");
        assert!(e.contains(&cycle), "rank {r}: {e}\nwanted: {cycle}");
    }
    assert!(
        run.elapsed < Duration::from_secs(10),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn alltoallv_splits_that_are_not_transposes_fail_every_rank() {
    let run = run("alltoallv", 4, true, &[]);
    run.assert_ok();
    let pair = "Send/Recv mismatch: rank 3's Send #0 to rank 2 (count 9, int32, opCount 0) meets rank 2's Recv #0 from rank 3 (count 10, int32, opCount 0)";
    for r in 0..4 {
        let e = run.errors(r).join("\n");
        assert!(e.contains(pair), "rank {r}: {e}");
        if r < 2 {
            assert!(e.contains("a peer of this group, found"), "rank {r}: {e}");
        }
    }
}

#[test]
fn a_rank_that_never_comes_is_named_with_where_it_was_last() {
    let run = run("late", 4, true, &[("RANKWISE_TIMEOUT", "2")]);
    run.assert_ok();
    assert!(id_names_a_side_channel(&run));
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains(&format!(
                "ncclRemoteError on rank {r}: rank 3 did not enter AllReduce #1 within 2s [rank 3 was last in AllReduce (opCount 0)]"
            )),
            "rank {r}: {e}"
        );
    }
    assert!(run.errors(3).is_empty(), "{:?}", run.errors(3));
}

#[test]
fn a_rank_that_never_comes_is_named_through_the_store_too() {
    let run = run(
        "late",
        4,
        true,
        &[("RANKWISE_TIMEOUT", "2"), ("RANKWISE_SHM", "0")],
    );
    run.assert_ok();
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains("rank 3 did not enter AllReduce #1 within 2s [rank 3 was last in AllReduce (opCount 0)]"),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn ranks_on_one_host_agree_through_shared_memory_unless_told_not_to() {
    for (shm, lane, other) in [
        (None, "through shared memory", "through the store"),
        (
            Some("0"),
            "through the store at 127.0.0.1:",
            "through shared memory",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("journal.%p.log");
        let mut env = vec![
            ("RANKWISE_DEBUG", "INFO"),
            ("RANKWISE_DEBUG_FILE", pattern.to_str().unwrap()),
        ];
        env.extend(shm.map(|v| ("RANKWISE_SHM", v)));
        let run = run("count", 4, true, &env);
        run.assert_ok();
        for r in 0..4 {
            let e = &run.errors(r)[0];
            assert!(
                e.contains("count differs: ranks 0,1,3 pass 4, rank 2 passes 5"),
                "RANKWISE_SHM={shm:?}, rank {r}: {e}"
            );
        }
        let j = journals(dir.path());
        // watch mode's thread says how it watches too, when it starts in
        // time: only the agreement's own line counts
        let agrees = format!("agrees with its peers {lane}");
        assert_eq!(j.matches(&agrees).count(), 4, "RANKWISE_SHM={shm:?}:\n{j}");
        assert!(!j.contains(other), "RANKWISE_SHM={shm:?}:\n{j}");
    }
}

/// Ranks on two simulated hosts: each host's ranks agree on a lane of
/// their own and one leader per host through the store, and a mismatch
/// reads as it does on one host, on every rank; a rank that never comes
/// is named with where it was last, which its host's leader saw.
#[test]
fn ranks_on_several_hosts_agree_through_their_host_leaders() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let env = [
        ("RANKWISE_DEBUG", "INFO"),
        ("RANKWISE_DEBUG_FILE", pattern.to_str().unwrap()),
    ];
    let run = run_on_hosts("count", 4, 2, &env);
    run.assert_ok();
    for r in 0..4 {
        let head = run.errors(r)[0]
            .split(" (comm ")
            .next()
            .unwrap()
            .to_string();
        assert_eq!(
            head,
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: AllReduce #0: count differs: ranks 0,1,3 pass 4, rank 2 passes 5 [ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum]"
            )
        );
    }
    let j = journals(dir.path());
    let line = "through shared memory on each of its 2 hosts, and the store at 127.0.0.1:";
    assert_eq!(j.matches(line).count(), 4, "{j}");
    let run = run_on_hosts("late", 4, 2, &[("RANKWISE_TIMEOUT", "2")]);
    run.assert_ok();
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains(&format!(
                "on rank {r}: rank 3 did not enter AllReduce #1 within 2s [rank 3 was last in AllReduce (opCount 0)]"
            )),
            "rank {r}: {e}"
        );
    }
}

#[test]
fn a_rank_that_finished_ends_the_wait_at_once() {
    let run = run("late", 4, true, &[("RANKWISE_TEST_LEAVE", "1")]);
    run.assert_ok();
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains("rank 3 finished its program without entering AllReduce #1"),
            "rank {r}: {e}"
        );
    }
    // RANKWISE_TIMEOUT is 20 s here
    assert!(
        run.elapsed < Duration::from_secs(10),
        "took {:?}",
        run.elapsed
    );
}
