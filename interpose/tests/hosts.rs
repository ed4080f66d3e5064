//! `librankwise_nccl.so` in front of the stand-in NCCL on simulated hosts
//! in network namespaces (`support/netns.rs`): 4 ranks on 2 hosts, each
//! host a namespace of its own on one bridge, so the store listens on
//! host 0's address (10.231.0.1) and host 1's ranks reach it only across
//! the bridge. A correct program, a mismatch in strict mode, a ring of
//! Sends outside a group (a wait-for cycle across the hosts) and a bug in
//! watch mode are checked as on one host; a host cut off the network
//! mid-job fails every rank's call within the timeout and a little more.
//! Every test makes its namespaces and removes them, and says it is
//! skipped where they cannot be made (not root, no `ip`).

#[path = "support/netns.rs"]
mod netns;
#[path = "support/programs.rs"]
mod programs;
#[path = "support/ranks.rs"]
mod ranks;
#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;

use ranks::*;
use std::path::Path;
use std::time::{Duration, Instant};

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    programs::rank_main();
}

/// The longest any test here lets its ranks run: a hang fails the test.
const LIMIT: Duration = Duration::from_secs(60);

/// Runs `scenario` on 2 ranks per host of `net` with `env`, every rank
/// keeping a journal (`RANKWISE_DEBUG=INFO`) in the directory that comes
/// back with the run.
fn journaled(net: &netns::Net, scenario: &str, env: &[(&str, &str)]) -> (Run, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let journal = dir
        .path()
        .join("journal.%p.log")
        .to_str()
        .unwrap()
        .to_string();
    let mut env = env.to_vec();
    env.extend([
        ("RANKWISE_DEBUG", "INFO"),
        ("RANKWISE_DEBUG_FILE", &journal),
    ]);
    let run = net.run(scenario, 2, &env, None, LIMIT);
    run.assert_ok();
    (run, dir)
}

/// How many of the ranks' journals say they agree through shared memory
/// on each host and the store at host 0's address: not on loopback, so
/// host 1's ranks reached it across the bridge.
fn agree_across_the_bridge(dir: &Path) -> usize {
    journals(dir)
        .matches("through shared memory on each of its 2 hosts, and the store at 10.231.0.1:")
        .count()
}

/// Every collective and Send/Recv pattern, and a split, each output
/// checked against its closed form on every rank (`programs::forward`).
#[test]
fn a_correct_program_runs_unchanged_on_two_hosts() {
    let Some(net) = netns::or_skip("a_correct_program_runs_unchanged_on_two_hosts", 2) else {
        return;
    };
    let (run, dir) = journaled(&net, "forward", &[]);
    for r in 0..4 {
        assert!(
            run.stdout(r).contains("forward ok"),
            "rank {r}: {}",
            run.stdout(r)
        );
        assert!(run.errors(r).is_empty(), "rank {r}: {:?}", run.errors(r));
    }
    assert_eq!(
        agree_across_the_bridge(dir.path()),
        4,
        "{}",
        journals(dir.path())
    );
}

#[test]
fn a_count_mismatch_is_named_alike_on_every_rank_of_two_hosts() {
    let Some(net) = netns::or_skip(
        "a_count_mismatch_is_named_alike_on_every_rank_of_two_hosts",
        2,
    ) else {
        return;
    };
    let (run, dir) = journaled(&net, "count", &[]);
    for r in 0..4 {
        let errs = run.errors(r);
        assert_eq!(
            errs[0].split(" (comm ").next().unwrap(),
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: AllReduce #0: count differs: ranks 0,1,3 pass 4, rank 2 passes 5 [ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum]"
            )
        );
        assert!(
            errs[1].contains("this communicator failed earlier"),
            "{errs:?}"
        );
    }
    assert_eq!(
        agree_across_the_bridge(dir.path()),
        4,
        "{}",
        journals(dir.path())
    );
}

/// A ring of Sends made outside a group whose cycle crosses the bridge
/// twice (rank 1 on host 0 waits for rank 2 on host 1, rank 3 for rank
/// 0): the store names it on every rank at once, each its own step first,
/// long before the 20 s deadline.
#[test]
fn a_ring_of_sends_across_two_hosts_is_a_cycle_named_at_once() {
    let Some(net) = netns::or_skip(
        "a_ring_of_sends_across_two_hosts_is_a_cycle_named_at_once",
        2,
    ) else {
        return;
    };
    let run = net.run(
        "ring_ungrouped",
        2,
        &[("RANKWISE_TIMEOUT", "20")],
        None,
        LIMIT,
    );
    run.assert_ok();
    for r in 0..4 {
        let steps: Vec<String> = (0..4)
            .map(|k| {
                let (q, to) = ((r + k) % 4, (r + k + 1) % 4);
                format!("rank {q} waits in Send (opCount 0) for rank {to}'s Recv #0 from rank {q}")
            })
            .collect();
        let e = run.errors(r).join("\n");
        assert!(
            e.contains(&format!("deadlock: {}: each waits", steps.join("; "))),
            "rank {r}: {e}"
        );
    }
    assert!(
        run.elapsed < Duration::from_secs(10),
        "took {:?}",
        run.elapsed
    );
}

/// Watch mode (`RANKWISE_CHECK=watch`, as in `watch.rs`): a count
/// mismatch after a few correct steps is named on every rank within a
/// second, the communicator failed there (a call refused, and
/// `ncclCommGetAsyncError` saying so).
#[test]
fn watch_mode_names_a_count_mismatch_on_every_rank_of_two_hosts() {
    let Some(net) = netns::or_skip(
        "watch_mode_names_a_count_mismatch_on_every_rank_of_two_hosts",
        2,
    ) else {
        return;
    };
    let env = [
        ("RANKWISE_CHECK", "watch"),
        ("RANKWISE_STANDIN_NULL", "1"),
        ("RANKWISE_TEST_BUG", "count"),
    ];
    let (run, dir) = journaled(&net, "watch", &env);
    for r in 0..4 {
        let line = run.errors(r).first().cloned().unwrap_or_else(|| {
            panic!(
                "rank {r} said nothing:\n{}\n{}",
                run.stdout(r),
                run.stderr(r)
            )
        });
        assert_eq!(
            line.split(" (comm ").next().unwrap(),
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: watch: collective launch 11 on this communicator differs: AllReduce #15: count differs: ranks 0,1,3 pass 4, rank 2 passes 5 [ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum]"
            )
        );
        // `watch rc 5 async 5 after 230 ms and 21 calls: ...`
        let out = run.stdout(r);
        let seen = out
            .lines()
            .find_map(|l| l.strip_prefix("watch rc "))
            .unwrap_or_else(|| panic!("rank {r}: {out}"));
        let words: Vec<&str> = seen.split(' ').collect();
        assert_eq!((words[0], words[2]), ("5", "5"), "rank {r}: {seen}");
        let ms: u64 = words[4].parse().unwrap();
        assert!(ms < 1000, "rank {r}: named after {ms} ms");
    }
    let j = journals(dir.path());
    assert!(j.contains("10.231.0.1:"), "{j}");
    assert!(!j.contains("127.0.0.1"), "{j}");
}

/// Host 1 cut off the bridge while every rank is between two AllReduces
/// (`programs::cut`): no post of host 1 reaches the store, and no answer
/// comes back to it. With `RANKWISE_TIMEOUT=2` every rank's next call
/// fails within a few seconds: host 0's naming host 1's ranks as not
/// having come, host 1's leader naming the store's address as not
/// answering, and the other rank of host 1 told that by its leader at
/// once. Rank 0, which serves the store, gives the cut host's connections
/// at most about 10 s at its exit (its own, the timeout and a margin).
#[test]
fn a_host_cut_off_the_network_fails_every_rank_within_the_timeout() {
    let Some(net) = netns::or_skip(
        "a_host_cut_off_the_network_fails_every_rank_within_the_timeout",
        2,
    ) else {
        return;
    };
    let mut during = |dir: &Path| {
        let t = Instant::now();
        while (0..4).any(|r| !dir.join(format!("ready.{r}")).exists()) {
            assert!(
                t.elapsed() < Duration::from_secs(30),
                "not every rank got ready"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        net.cut(1).unwrap();
        std::fs::write(dir.join("cut"), b"").unwrap();
    };
    let run = net.run(
        "cut",
        2,
        &[("RANKWISE_TIMEOUT", "2")],
        Some(&mut during),
        LIMIT,
    );
    run.assert_ok();
    let took = |r: usize| -> (u64, String) {
        let out = run.stdout(r);
        let line = out
            .lines()
            .find_map(|l| l.strip_prefix("cut rc 6 after "))
            .unwrap_or_else(|| panic!("rank {r}: {out}\n{}", run.stderr(r)));
        let (ms, what) = line.split_once(" ms: ").unwrap();
        (ms.parse().unwrap(), what.to_string())
    };
    for r in [0, 1] {
        let (ms, what) = took(r);
        eprintln!("rank {r}: {ms} ms: {what}; ended at {:?}", run.ended[r]);
        assert!(
            what.starts_with(&format!(
                "ncclRemoteError on rank {r}: ranks 2,3 did not enter AllReduce #3 within 2s [rank 2 was last in AllReduce (opCount 2); where rank 3 was last is not known: its host did not say]"
            )),
            "rank {r}: {what}"
        );
        // the judge waits for the leaders a second past the timeout
        assert!((2000..4000).contains(&ms), "rank {r}: {ms} ms");
    }
    let (ms, what) = took(2);
    eprintln!("rank 2: {ms} ms: {what}; ended at {:?}", run.ended[2]);
    assert!(
        what.starts_with("ncclRemoteError on rank 2: the ranks' side channel at 10.231.0.1:")
            && what.contains("did not answer within the request's deadline")
            && what.ends_with("its host may be gone or unreachable"),
        "{what}"
    );
    // rank 2 tells its host's other rank why, as soon as it knows
    let (ms3, what3) = took(3);
    eprintln!("rank 3: {ms3} ms: {what3}; ended at {:?}", run.ended[3]);
    let said = what.split_once(": ").unwrap().1;
    assert_eq!(
        what3,
        format!("ncclRemoteError on rank 3: rank 2, which leads this host's ranks, failed: {said}")
    );
    assert!(
        ms3 < ms + 100,
        "rank 3 after {ms3} ms, rank 2 after {ms} ms"
    );
    // keepalive and the limit on unacknowledged bytes close the cut
    // host's connections within about 10 s: rank 0 need not wait out the
    // 30 s it gives the others' connections at its exit
    assert!(
        run.ended[0] < Duration::from_secs(25),
        "rank 0 ended at {:?}",
        run.ended[0]
    );
    // the leader's last request ends at the timeout, two graces of a
    // second and its 750 ms overrun at most, and a little for the wakeup
    for (ms, what) in [(ms, &what), (ms3, &what3)] {
        assert!((2000..5500).contains(&ms), "{ms} ms: {what}");
    }
}
