//! The RANKWISE_* trace variables through the binary: a trace file that
//! fails is said once per process, however many ranks trace into it.
//! (Every bad value of every variable is a row of tests/bad_inputs/settings.rs.)

use std::process::Command;

fn run_traced(file: &str) -> (i32, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(["run", "all_gather", "--ranks", "8", "--count", "3"])
        .env("RANKWISE_DEBUG", "INFO")
        .env("RANKWISE_DEBUG_FILE", file)
        .env_remove("RANKWISE_TIMEOUT")
        .env_remove("RANKWISE_POISON")
        .env_remove("RANKWISE_DEBUG_SUBSYS")
        .output()
        .expect("run the rankwise binary");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn a_full_trace_file_is_said_once() {
    // 8 ranks each print an INIT and a COLL line into the one file
    let (code, stderr) = run_traced("/dev/full");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr.matches("write failed").count(),
        1,
        "one report for the lost trace:\n{stderr}"
    );
    assert!(
        stderr.contains(
            "rankwise: trace file /dev/full: write failed: No space left on device (os error 28) (later trace lines are lost)"
        ),
        "{stderr}"
    );
}

#[test]
fn a_trace_file_that_cannot_be_opened_is_said_once() {
    let tmp = tempfile::tempdir().unwrap();
    let path = tmp.path().join("missing-dir").join("trace.log");
    let (code, stderr) = run_traced(path.to_str().unwrap());
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stderr.matches("cannot open RANKWISE_DEBUG_FILE").count(),
        1,
        "{stderr}"
    );
    // the lines themselves go to stderr instead: every rank's COLL line
    assert_eq!(
        stderr.matches("NCCL INFO AllGather: opCount 0").count(),
        8,
        "{stderr}"
    );
}
