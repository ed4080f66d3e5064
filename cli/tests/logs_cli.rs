//! `rankwise logs` through the binary: output, JSON and exit codes.

use rankwise_testkit::synth::{Fault, FaultKind, Rng, Spec, Style};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

fn rankwise(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(args)
        .output()
        .unwrap()
}

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

fn generate(dir: &Path, kind: FaultKind, seed: u64) -> Fault {
    let spec = Spec {
        nranks: 4,
        steps: 60,
        seed,
        p2p_percent: 20,
        period: None,
        style: Style::default(),
    };
    let fault = spec.place(kind, &mut Rng::new(seed)).unwrap();
    for (name, bytes) in spec.render(fault) {
        std::fs::write(dir.join(name), bytes).unwrap();
    }
    fault
}

#[test]
fn clean_logs_exit_0() {
    let dir = tempfile::tempdir().unwrap();
    generate(dir.path(), FaultKind::None, 5);
    let o = rankwise(&["logs", "analyze", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}{}", stdout(&o), stderr(&o));
    assert!(stdout(&o).starts_with("no divergence: 1 communicator, 4 rank streams"));
}

#[test]
fn a_hang_exits_1_with_the_verdict_first() {
    let dir = tempfile::tempdir().unwrap();
    let Fault::Stop { rank, at } = generate(dir.path(), FaultKind::Stop, 9) else {
        panic!()
    };
    // nothing in the logs says the job hung: the end is skew, exit 0
    let o = rankwise(&["logs", "analyze", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stdout(&o));
    assert!(
        stdout(&o).contains(&format!("if it hung here, rank {rank} never issued ")),
        "{}",
        stdout(&o)
    );
    let o = rankwise(&["logs", "analyze", "--hung", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    let first = out.lines().next().unwrap();
    assert!(
        first.starts_with(&format!("hang: rank {rank} never issued "))
            && first.contains(&format!(" #{at} ")),
        "{first}"
    );
    assert!(out.contains("first divergence: collective #"), "{out}");

    let o = rankwise(&[
        "logs",
        "analyze",
        "--hung",
        "--json",
        dir.path().to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    let f = &j["findings"][0];
    assert_eq!(f["kind"], "stopped");
    assert_eq!(f["severity"], "error");
    assert_eq!(f["ranks"], serde_json::json!([rank]));
    assert_eq!(f["position"], serde_json::json!(at));
    assert_eq!(
        j["communicators"][0]["divergence"]["position"],
        serde_json::json!(at)
    );
    assert_eq!(j["verdict"].as_str().unwrap(), out.lines().next().unwrap());
}

#[test]
fn real_fixtures_report_the_invalid_arguments() {
    // the two one-rank logs whose programs passed bad codes (the H200
    // captures beside them hold other faults)
    let logs = [
        fixtures().join("nccl-2.28.9-1rank-init-coll.log"),
        fixtures().join("nccl-2.28.9-1rank-torch-ctypes.log"),
    ];
    let o = rankwise(&[
        "logs",
        "analyze",
        logs[0].to_str().unwrap(),
        logs[1].to_str().unwrap(),
    ]);
    assert_eq!(o.status.code(), Some(1));
    let out = stdout(&o);
    assert!(out.starts_with("invalid argument: "), "{out}");
    assert!(out.contains("WARN AllReduce : invalid type 42"), "{out}");
    assert!(
        out.contains("reduction operation 42 unknown to this communicator"),
        "{out}"
    );
}

#[test]
fn summary_prints_calls_and_bytes() {
    let f = fixtures().join("nccl-2.28.9-1rank-init-coll.log");
    let o = rankwise(&["logs", "summary", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    // AllReduce int64×3 and float32×0: 2 calls, 24 bytes; AlltoAll int64×6, N = 1: 48 bytes
    let row = |op: &str| {
        out.lines()
            .find(|l| l.split_whitespace().nth(2) == Some(op))
            .unwrap_or_else(|| panic!("no {op} row in {out}"))
            .split_whitespace()
            .map(str::to_string)
            .collect::<Vec<_>>()
    };
    assert_eq!(row("AllReduce")[3], "2");
    assert!(row("AllReduce").last().unwrap() == "(24)");
    assert!(row("AlltoAll").last().unwrap() == "(48)");
    let o = rankwise(&["logs", "summary", "--json", f.to_str().unwrap()]);
    let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    assert_eq!(
        j["communicators"][0]["ranks"][0]["bytes"],
        serde_json::json!(24 + 32 + 48)
    );
}

#[test]
fn bad_input_exits_1_without_a_panic() {
    let o = rankwise(&["logs", "analyze", "/nonexistent/rank0.log"]);
    assert_eq!(o.status.code(), Some(1));
    assert!(
        stderr(&o).contains("cannot read '/nonexistent/rank0.log'"),
        "{}",
        stderr(&o)
    );
    assert!(!stderr(&o).contains("panicked"));

    let dir = tempfile::tempdir().unwrap();
    let o = rankwise(&["logs", "summary", dir.path().to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no log files found"), "{}", stderr(&o));

    let f = dir.path().join("app.log");
    std::fs::write(&f, "hello\nworld\n").unwrap();
    let o = rankwise(&["logs", "analyze", f.to_str().unwrap()]);
    assert_eq!(o.status.code(), Some(1));
    assert!(stderr(&o).contains("no NCCL lines"), "{}", stderr(&o));

    // a usage error is clap's
    let o = rankwise(&["logs", "analyze"]);
    assert_eq!(o.status.code(), Some(2));
}

/// The fixture with every COLL line's count made unreadable (`count x3`),
/// and without its WARN line: nothing left to analyse.
fn every_call_malformed(dir: &Path) -> (PathBuf, String, usize) {
    let text = std::fs::read_to_string(fixtures().join("nccl-2.28.9-1rank-init-coll.log")).unwrap();
    let lines: Vec<String> = text
        .lines()
        .filter(|l| !l.contains(" NCCL WARN "))
        .map(|l| {
            if l.contains(": opCount ") {
                l.replacen(" count ", " count x", 1)
            } else {
                l.to_string()
            }
        })
        .collect();
    let first = lines.iter().position(|l| l.contains(": opCount ")).unwrap();
    let path = dir.join("broken.log");
    std::fs::write(&path, lines.join("\n")).unwrap();
    (path, lines[first].clone(), first + 1)
}

#[test]
fn a_log_whose_every_call_is_malformed_is_bad_input() {
    let dir = tempfile::tempdir().unwrap();
    let (path, first, line_no) = every_call_malformed(dir.path());
    for cmd in ["analyze", "summary"] {
        let o = rankwise(&["logs", cmd, path.to_str().unwrap()]);
        assert_eq!(
            o.status.code(),
            Some(1),
            "{cmd}: {}{}",
            stdout(&o),
            stderr(&o)
        );
        assert_eq!(stdout(&o), "", "{cmd}");
        assert_eq!(
            stderr(&o),
            format!(
                "rankwise logs: no call could be read: all 4 COLL lines in 1 file are malformed (4 malformed NCCL lines in all); the first is {}:{line_no}, where count is 'x3', expected an unsigned 64-bit integer: {first}\n",
                path.display()
            ),
            "{cmd}"
        );
    }
}

/// The problems listed (lines `  - …` after `problems:`).
fn problems(out: &str) -> Vec<&str> {
    out.lines()
        .skip_while(|l| *l != "problems:")
        .skip(1)
        .take_while(|l| l.starts_with("  - "))
        .collect()
}

#[test]
fn a_log_given_twice_lists_its_warn_once() {
    let dir = tempfile::tempdir().unwrap();
    let f = dir.path().join("rank0.log");
    std::fs::copy(fixtures().join("nccl-2.28.9-1rank-init-coll.log"), &f).unwrap();
    let copy = dir.path().join("console.log");
    std::fs::copy(&f, &copy).unwrap();
    let f = f.to_str().unwrap();
    let dot = format!("{}/./rank0.log", dir.path().display());
    for (second, note) in [
        (
            f,
            format!("  {f}: also given as {f}, the same file; read once"),
        ),
        (
            &dot,
            format!("  {f}: also given as {dot}, the same file; read once"),
        ),
        (
            copy.to_str().unwrap(),
            format!(
                "  - {} repeats the 4 calls of vm:473 comm 0x209db0f0 already read from {f}; skipped, with that process's WARN lines there",
                copy.display()
            ),
        ),
    ] {
        let o = rankwise(&["logs", "analyze", f, second]);
        assert_eq!(o.status.code(), Some(1));
        let out = stdout(&o);
        let listed = problems(&out);
        assert_eq!(listed.len(), 1, "{out}");
        assert!(
            listed[0]
                .contains("WARN Broadcast : invalid root 1 (root should be in the 0..1 range)"),
            "{out}"
        );
        assert!(out.lines().any(|l| l == note), "{note:?} not in\n{out}");
        let o = rankwise(&["logs", "analyze", "--json", f, second]);
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        let roots = j["findings"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|f| f["kind"] == "invalid_root")
            .count();
        assert_eq!(roots, 1, "{second}");
    }
}
