//! `librankwise_nccl.so` in front of a stand-in NCCL (`tests/standin/nccl.rs`,
//! built here with `rustc` into `libnccl.so.2`: NCCL's C API over host
//! memory across processes), call by call: correct calls forwarded with
//! their results, each call's own checks, the `RANKWISE_CHECK` levels and
//! the journal. Every test starts N rank processes of this test binary
//! (`rank_main` is the rank program) with the interposer in `LD_PRELOAD`;
//! each rank dlopens the stand-in (`RTLD_GLOBAL`) and calls the NCCL API
//! through `dlsym(RTLD_DEFAULT)`, as a program linked against libnccl
//! would, so its calls meet the interposer first. None needs a GPU.

#[path = "support/programs.rs"]
mod programs;
#[path = "support/ranks.rs"]
mod ranks;
#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;

use ranks::*;

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    programs::rank_main();
}

#[test]
fn correct_calls_are_forwarded_and_give_the_closed_forms() {
    let run = run("forward", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.stdout(r).contains("forward ok"), "{}", run.stdout(r));
        assert!(run.errors(r).is_empty(), "rank {r}: {:?}", run.errors(r));
    }
}

#[test]
fn the_same_program_without_the_interposer_gives_the_same_results() {
    let run = run("forward", 3, false, &[]);
    run.assert_ok();
}

#[test]
fn every_argument_check_rejects_the_call_on_its_rank() {
    let run = run("argcheck", 2, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        let errs = run.errors(r).join("\n");
        for want in [
            "ncclInvalidArgument on rank",
            "Broadcast: root 2 is out of range: valid roots are 0..=1",
            "Send: peer -1 is out of range",
            "AllReduce: datatype code 12 is invalid",
            "AllReduce: reduction op code 9 is invalid",
            "AllReduce: sendbuff is NULL",
            "AllReduce: recvbuff is NULL",
            "AllGather: sendbuff",
            "is not the in-place form",
            "is misaligned",
            "the extent overruns by 16 bytes",
        ] {
            assert!(errs.contains(want), "rank {r} lacks {want:?}:\n{errs}");
        }
        assert_eq!(
            run.errors(r).len(),
            9,
            "one line per rejected call:\n{errs}"
        );
    }
}

#[test]
fn with_rankwise_check_0_calls_are_only_forwarded() {
    let run = run("unchecked", 4, true, &[("RANKWISE_CHECK", "0")]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.errors(r).is_empty(), "{:?}", run.errors(r));
    }
}

#[test]
fn with_rankwise_check_local_each_call_is_checked_on_its_own_rank_only() {
    let run = run("local", 4, true, &[("RANKWISE_CHECK", "local")]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.stdout(r).contains("local ok"), "{}", run.stdout(r));
        let errs = run.errors(r);
        assert_eq!(errs.len(), 1, "rank {r}: {errs:?}");
        assert!(
            errs[0].contains("Broadcast: root 4 is out of range: valid roots are 0..=3"),
            "{errs:?}"
        );
        assert!(
            !run.stderr(r).contains("side channel"),
            "rank {r}: {}",
            run.stderr(r)
        );
    }
    assert!(
        !id_names_a_side_channel(&run),
        "no side channel: the id is NCCL's own"
    );
}

#[test]
fn many_calls_in_a_row_each_agree_and_give_the_closed_form() {
    let run = run("percall", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.errors(r).is_empty(), "{:?}", run.errors(r));
        let line = run.stdout(r);
        assert!(line.contains("percall 300 calls"), "{line}");
    }
    eprintln!("{}", run.stdout(0).trim());
}

#[test]
fn the_journal_is_read_by_rankwise_logs_analyze() {
    let env = [("RANKWISE_DEBUG", "INFO"), ("RANKWISE_DEBUG_FILE", "")];
    // a correct run: the analyzer finds every rank and nothing wrong
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let pattern = pattern.to_str().unwrap();
    let ok = run("forward", 4, true, &[env[0], (env[1].0, pattern)]);
    ok.assert_ok();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Default::default()).unwrap();
    assert_eq!(a.problems, 0, "{}", a.verdict);
    let main = a
        .communicators
        .iter()
        .find(|c| c.nranks == 4)
        .expect("the 4-rank communicator");
    assert_eq!(main.ranks_seen, vec![0, 1, 2, 3]);
    // the skip: the journal alone says who skipped what
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let skip = run(
        "skip",
        4,
        true,
        &[env[0], (env[1].0, pattern.to_str().unwrap())],
    );
    skip.assert_ok();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Default::default()).unwrap();
    assert!(a.verdict.contains("rank 2"), "{}", a.verdict);
    assert!(a.verdict.contains("Broadcast"), "{}", a.verdict);
    let _ = ok.dir;
}
