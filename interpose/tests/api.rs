//! `librankwise_nccl.so` in front of the stand-in NCCL, across the rest of
//! NCCL 2.28's API: communicators made many at once (`ncclCommInitAll`,
//! several ranks initialised from one thread in a group), without
//! blocking, or by shrinking; `ncclGroupSimulateEnd`; a PreMulSum op
//! destroyed while a held call uses it; `ncclGetLastError(NULL)` and
//! `ncclCommGetAsyncError`; the timeout's code in the loaded version; CUDA
//! graph capture in the journal. Rank processes of this test binary, as in
//! `calls.rs`.

#[path = "support/api.rs"]
mod api;
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
    api::rank_main();
}

/// The interposer's error lines of `run`'s rank `r`, whole.
fn said(run: &Run, r: usize) -> String {
    run.errors(r).join("\n")
}

#[test]
fn init_all_of_4_ranks_in_one_process_is_registered_and_checked() {
    let run = run("init_all", 1, true, &[]);
    run.assert_ok();
    assert!(run.stdout(0).contains("init_all ok"), "{}", run.stdout(0));
    assert!(
        run.elapsed < Duration::from_secs(10),
        "RANKWISE_TIMEOUT is 20 s: {:?}",
        run.elapsed
    );
    let e = said(&run, 0);
    for r in 0..4 {
        assert!(
            e.contains(&format!(
                "ncclInvalidUsage on rank {r}: AllReduce #1: count differs: ranks 0,1,3 pass 4, rank 2 passes 5"
            )),
            "rank {r}:\n{e}"
        );
    }
}

#[test]
fn ranks_initialised_from_one_thread_in_a_group_never_stall_and_are_checked() {
    let run = run("grouped_init", 1, true, &[]);
    run.assert_ok();
    let out = run.stdout(0);
    assert!(out.contains("grouped_init ok"), "{out}");
    assert!(
        run.elapsed < Duration::from_secs(10),
        "RANKWISE_TIMEOUT is 20 s: {:?}",
        run.elapsed
    );
    assert!(
        said(&run, 0).contains("rank 2 passes 5"),
        "{}",
        said(&run, 0)
    );
}

#[test]
fn a_shrunk_communicator_is_registered_and_checked() {
    let run = run("shrink", 4, true, &[]);
    run.assert_ok();
    for r in 0..3 {
        let out = run.stdout(r);
        assert!(
            out.contains("count differs: ranks 0,2 pass 4, rank 1 passes 5"),
            "rank {r}: {out}"
        );
    }
}

#[test]
fn non_blocking_communicators_and_splits_return_at_once_and_are_checked() {
    let run = run("non_blocking", 3, true, &[]);
    run.assert_ok();
    for r in 0..3 {
        let out = run.stdout(r);
        assert!(out.contains("non_blocking ok"), "rank {r}: {out}");
        let ms: u64 = out
            .split("non-blocking init took ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|s| s.parse().ok())
            .unwrap();
        assert!(ms < 1000, "rank {r}: {out}");
        let e = said(&run, r);
        assert!(e.contains("rank 1 passes 5"), "rank {r}:\n{e}");
        if r % 2 == 0 {
            assert!(
                e.contains("rank 1 passes 5")
                    && e.contains("count differs: rank 0 passes 4, rank 1 passes 5"),
                "rank {r}:\n{e}"
            );
        }
    }
}

#[test]
fn a_simulated_group_end_leaves_the_next_group_and_call_to_run() {
    let run = run("simulate", 2, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        assert!(run.stdout(r).contains("simulate ok"), "{}", run.stdout(r));
        assert!(run.errors(r).is_empty(), "{:?}", run.errors(r));
    }
}

#[test]
fn a_premulsum_op_destroyed_before_the_group_end_outlives_the_held_call() {
    let run = run("premul", 2, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        assert!(run.stdout(r).contains("premul ok"), "{}", run.stdout(r));
    }
}

#[test]
fn get_last_error_of_null_is_this_threads_and_outlives_destroy() {
    let run = run("last_error", 2, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        let out = run.stdout(r);
        assert!(
            out.contains("last_error ok: ncclInvalidArgument on rank"),
            "{out}"
        );
    }
}

#[test]
fn get_async_error_reports_the_checkers_failure() {
    let run = run("async_error", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        assert!(
            run.stdout(r).contains("async_error ok"),
            "{}",
            run.stdout(r)
        );
    }
}

#[test]
fn a_timeout_is_a_code_of_the_loaded_version() {
    for (version, code) in [("22809", 6), ("23003", 8)] {
        let env = [
            ("RANKWISE_TIMEOUT", "1"),
            ("RANKWISE_STANDIN_VERSION", version),
        ];
        let run = run("timeout_code", 3, true, &env);
        run.assert_ok();
        for r in 0..2 {
            let out = run.stdout(r);
            let name = if code == 8 {
                "ncclTimeout"
            } else {
                "ncclRemoteError"
            };
            assert!(
                out.contains(&format!("timeout rc {code}: {name} on rank {r}: ")),
                "{version}: {out}"
            );
            assert!(
                out.contains("rank 2 did not enter AllReduce #1 within 1s"),
                "{out}"
            );
        }
    }
}

#[test]
fn a_call_captured_into_a_cuda_graph_is_said_in_the_journal() {
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let env = [
        ("RANKWISE_DEBUG", "INFO"),
        ("RANKWISE_DEBUG_FILE", pattern.to_str().unwrap()),
    ];
    let run = run("capture", 2, true, &env);
    run.assert_ok();
    let j = journals(dir.path());
    let line = "AllReduce recorded into a CUDA graph: checked once at capture, replays unchecked";
    assert_eq!(j.matches(line).count(), 2, "{j}");
}
