//! The nccl engine from the outside. Where NCCL or a GPU is missing, the
//! tests that need them print a SKIPPED line naming what was missing and
//! pass; the tests of what a machine without them sees run there instead.

#![cfg(feature = "nccl")]

use rankwise::launch::EngineKind;
use std::process::Command;

fn rankwise() -> Command {
    Command::new(env!("CARGO_BIN_EXE_rankwise"))
}

/// A SKIPPED line on the real stderr: the test harness captures what
/// `eprintln!` prints for passing tests, not direct writes.
fn skipped(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {line}");
}

/// None when the engine can run here; otherwise prints the SKIPPED line.
fn gpu_or_skip(test: &str) -> Option<()> {
    match EngineKind::Nccl.available() {
        Ok(()) => Some(()),
        Err(why) => {
            skipped(&format!("{test}: the nccl engine cannot run here: {why}"));
            None
        }
    }
}

#[test]
fn without_nccl_the_engine_says_where_it_looked() {
    if EngineKind::Nccl.available().is_ok() {
        skipped("without_nccl_the_engine_says_where_it_looked: NCCL and a GPU are here");
        return;
    }
    let tmp = tempfile::tempdir().unwrap();
    let missing = tmp.path().join("libnccl.so.2");
    let out = rankwise()
        .args(["verify", "--engine", "nccl", "--ranks", "2", "--out"])
        .arg(tmp.path().join("run"))
        .env("RANKWISE_NCCL_LIBRARY", &missing)
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(&format!(
            "looked for {} via RANKWISE_NCCL_LIBRARY: no such file",
            missing.display()
        )),
        "{err}"
    );
    assert!(!tmp.path().join("run").exists(), "nothing is written");
    // without the variable: the loader's search and PyTorch's wheel
    let out = rankwise()
        .args(["verify", "--engine", "nccl", "--ranks", "2", "--out"])
        .arg(tmp.path().join("run2"))
        .env_remove("RANKWISE_NCCL_LIBRARY")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("libnccl.so.2 via the dynamic loader's search"),
        "{err}"
    );
    assert!(
        err.contains("nvidia/nccl/lib/libnccl.so.2") || err.contains("python3"),
        "{err}"
    );
}

#[test]
fn the_engine_is_listed_and_describes_its_library() {
    assert!(EngineKind::ALL.contains(&EngineKind::Nccl));
    let d = EngineKind::Nccl.describe();
    assert!(d.starts_with("nccl ("), "{d}");
    if EngineKind::Nccl.available().is_ok() {
        assert!(d.contains("NCCL 2."), "{d}");
    } else {
        assert!(d.contains("no usable NCCL library"), "{d}");
    }
}

#[test]
fn seed_suite_passes_on_two_rank_processes() {
    let Some(()) = gpu_or_skip("seed_suite_passes_on_two_rank_processes") else {
        return;
    };
    let tmp = tempfile::tempdir().unwrap();
    let out = rankwise()
        .args(["verify", "--engine", "nccl", "--ranks", "2", "--out"])
        .arg(tmp.path().join("run"))
        .output()
        .unwrap();
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(text.contains("engine nccl (NCCL 2."), "{text}");
    assert!(text.contains("46 rows, 24 records, all PASS"), "{text}");
    for r in 0..2 {
        assert!(
            tmp.path()
                .join(format!("run/raw/native/rank{r}.csv"))
                .is_file()
        );
    }
}

#[test]
fn a_count_mismatch_is_an_error_on_every_rank_not_a_hang() {
    let Some(()) = gpu_or_skip("a_count_mismatch_is_an_error_on_every_rank_not_a_hang") else {
        return;
    };
    let o = rankwise_cli::misuse::run(
        EngineKind::Nccl,
        &rankwise_cli::misuse::scenario("count-mismatch").unwrap(),
    );
    // in-process ranks need a GPU each; with fewer, the launcher says so
    if rankwise::engine::nccl::device_count() < 4 {
        let e = o.ranks[0].error.as_ref().unwrap();
        assert!(e.message.contains("need 4 GPUs"), "{e}");
        skipped("the in-process count mismatch: fewer than 4 GPUs");
        return;
    }
    assert!(o.passed, "{}", o.problems().join("; "));
}
