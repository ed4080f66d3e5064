//! `librankwise_nccl.so` in front of the stand-in NCCL, where ranks end or
//! give up while their peers wait: an abort from another thread, a rank
//! that exits or is ended by a signal without destroying its communicator,
//! a Ctrl-C in a program that handles it, a call one rank's checks refused,
//! a fork. Every wait must end at once with a reason that names the rank,
//! never at `RANKWISE_TIMEOUT` (20 s in every test here). Rank processes
//! of this test binary, as in `calls.rs`.

#[path = "support/leaving.rs"]
mod leaving;
#[path = "support/ranks.rs"]
mod ranks;
#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;

use ranks::*;
use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    leaving::rank_main();
}

/// The number after `what` in `line` (`abort took 3 ms` → 3).
fn number_after(line: &str, what: &str) -> u64 {
    let at = line
        .find(what)
        .unwrap_or_else(|| panic!("no {what:?} in {line:?}"))
        + what.len();
    line[at..]
        .trim_start()
        .split(|c: char| !c.is_ascii_digit())
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number after {what:?} in {line:?}"))
}

#[test]
fn an_abort_from_another_thread_ends_the_wait_at_once_on_every_rank() {
    for shm in ["1", "0"] {
        let run = run("abort", 3, true, &[("RANKWISE_SHM", shm)]);
        run.assert_ok();
        for r in 0..2 {
            let out = run.stdout(r);
            assert!(
                number_after(&out, "abort took") < 100,
                "SHM={shm} rank {r}: {out}"
            );
            assert!(
                number_after(&out, "the waiting call ended") < 100,
                "SHM={shm} rank {r}: {out}"
            );
            assert!(
                out.contains(&format!(
                    "rc 5: ncclInvalidUsage on rank {r}: AllReduce (opCount 1): the wait for the other ranks ended: ncclCommAbort was called on this communicator"
                )),
                "SHM={shm} rank {r}: {out}"
            );
        }
        // the late rank finds no post of the ranks that aborted: it fails
        // at once, naming them, instead of entering NCCL alone
        let late = run.stdout(2);
        assert!(number_after(&late, "after") < 1000, "SHM={shm}: {late}");
        assert!(
            late.contains("rank 0 called ncclCommAbort"),
            "SHM={shm}: {late}"
        );
        assert!(!late.contains("rc 0 "), "SHM={shm}: {late}");
    }
}

#[test]
fn a_rank_that_exits_without_destroying_its_communicator_fails_its_peers_at_once() {
    let run = run("exit", 3, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        let out = run.stdout(r);
        assert!(number_after(&out, "after") < 5000, "rank {r}: {out}");
        assert!(
            out.contains(
                "rank 2 failed: rank 2's process exited without destroying the communicator"
            ),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn a_rank_ended_by_sigterm_tells_its_peers_and_still_dies_of_it() {
    let run = run("exit", 3, true, &[("RANKWISE_TEST_SIGNAL", "1")]);
    let status = run.outputs[2].status;
    assert_eq!(status.signal(), Some(libc::SIGTERM), "rank 2: {status}");
    for r in 0..2 {
        assert!(run.outputs[r].status.success(), "{}", run.stderr(r));
        let out = run.stdout(r);
        assert!(number_after(&out, "after") < 5000, "rank {r}: {out}");
        assert!(
            out.contains("rank 2 failed: rank 2's process was ended by SIGTERM"),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn ctrl_c_in_a_program_that_handles_it_ends_the_wait_at_once() {
    let run = run("interrupt", 2, true, &[]);
    run.assert_ok();
    let out = run.stdout(0);
    // rank 1 comes after 5 s; RANKWISE_TIMEOUT is 20 s
    assert!(number_after(&out, "the call ended") < 1000, "{out}");
    assert!(out.contains("the program's handler ran: true"), "{out}");
    assert!(
        out.contains("the wait for the other ranks ended: the process received SIGINT"),
        "{out}"
    );
}

#[test]
fn a_call_one_rank_refused_fails_the_others_at_once_naming_the_rank_and_the_call() {
    for grouped in [false, true] {
        let mut env = vec![];
        if grouped {
            env.push(("RANKWISE_TEST_GROUPED", "1"));
        }
        let run = run("refused", 4, true, &env);
        run.assert_ok();
        let refused = run.stdout(2);
        assert!(
            refused.contains("\nrc 4 after"),
            "grouped {grouped}: {refused}"
        );
        assert!(refused.contains("AllReduce: recvbuff is NULL"), "{refused}");
        for r in [0, 1, 3] {
            let out = run.stdout(r);
            assert!(
                number_after(&out, "after") < 5000,
                "grouped {grouped} rank {r}: {out}"
            );
            let what = match grouped {
                false => "AllReduce #1",
                true => "AllGather #1",
            };
            let want = format!(
                "rank 2 will not make {what}: its call was refused there (ncclInvalidArgument on rank 2: AllReduce: recvbuff is NULL but rank 2 must receive 4 elements"
            );
            assert!(out.contains(&want), "grouped {grouped} rank {r}: {out}");
        }
    }
}

#[test]
fn a_forked_child_exits_at_once_and_leaves_its_parents_job_alone() {
    let run = run("fork", 2, true, &[]);
    run.assert_ok();
    let out = run.stdout(0);
    assert!(out.contains("child exited with 0"), "{out}");
    assert!(number_after(&out, "after") < 2000, "{out}");
    for r in 0..2 {
        assert!(
            run.stdout(r).contains("fork ok"),
            "rank {r}: {}",
            run.stdout(r)
        );
    }
    assert!(run.elapsed < Duration::from_secs(15), "{:?}", run.elapsed);
}
