//! Every bad or unusual input a user has been seen to give, with the exit
//! code and the message fragments rankwise must answer with. Each table
//! lives in `tests/bad_inputs/<area>.rs`; this file runs them all.
//!
//! Every row runs under limits that turn the failures users met into test
//! failures rather than a stuck or swapping CI: a 120-second deadline (a hang
//! is killed and reported) and a 4 GiB address-space limit (an input that
//! makes rankwise allocate in proportion to a number it read dies on it).

#[path = "bad_inputs/bench.rs"]
mod bench;
#[path = "bad_inputs/logs.rs"]
mod logs;
#[path = "bad_inputs/run.rs"]
mod run;
#[path = "bad_inputs/settings.rs"]
mod settings;
#[path = "bad_inputs/summarize.rs"]
mod summarize;

use std::io::Read;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

/// One bad input and the answer it must get.
pub struct Bad {
    /// The arguments after `rankwise`; `{dir}` stands for the row's own
    /// empty temporary directory.
    pub args: &'static [&'static str],
    /// Environment variables set for the row (RANKWISE_* are otherwise removed).
    pub env: &'static [(&'static str, &'static str)],
    /// Writes the files the row reads into its directory.
    pub setup: fn(&Path),
    /// The exit code.
    pub code: i32,
    /// Fragments that must all appear in stdout + stderr.
    pub says: &'static [&'static str],
}

/// A `setup` for rows that read no file.
pub fn nothing(_: &Path) {}

/// `Bad` with no environment and no files.
pub const fn bad(args: &'static [&'static str], code: i32, says: &'static [&'static str]) -> Bad {
    Bad {
        args,
        env: &[],
        setup: nothing,
        code,
        says,
    }
}

// generous: the 5 GiB line alone takes 3 s on an idle 2-core machine and
// over 30 s when other builds share it; a hang is what this bounds
const DEADLINE: Duration = Duration::from_secs(120);
/// `ulimit -v`, in KiB.
const ADDRESS_SPACE_KIB: u64 = 4 << 20;

/// Runs one row; returns what was wrong with the answer, if anything.
fn check(row: &Bad) -> Option<String> {
    let tmp = tempfile::tempdir().unwrap();
    (row.setup)(tmp.path());
    let dir = tmp.path().to_str().unwrap();
    let args: Vec<String> = row.args.iter().map(|a| a.replace("{dir}", dir)).collect();
    let mut cmd = Command::new("sh");
    cmd.arg("-c")
        .arg(format!(
            "ulimit -v {ADDRESS_SPACE_KIB} && exec \"$0\" \"$@\""
        ))
        .arg(env!("CARGO_BIN_EXE_rankwise"))
        .args(&args)
        .current_dir(tmp.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    for (k, _) in std::env::vars() {
        if k.starts_with("RANKWISE_") {
            cmd.env_remove(k);
        }
    }
    for (k, v) in row.env {
        cmd.env(k, v);
    }
    let mut child = cmd.spawn().expect("start rankwise");
    // drain both pipes on threads so a chatty child cannot block on a full pipe
    let mut out_pipe = child.stdout.take().unwrap();
    let mut err_pipe = child.stderr.take().unwrap();
    let out_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = out_pipe.read_to_end(&mut s);
        s
    });
    let err_reader = std::thread::spawn(move || {
        let mut s = Vec::new();
        let _ = err_pipe.read_to_end(&mut s);
        s
    });
    let start = Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break Some(s);
        }
        if start.elapsed() > DEADLINE {
            let _ = child.kill();
            let _ = child.wait();
            break None;
        }
        std::thread::sleep(Duration::from_millis(5));
    };
    let stdout = String::from_utf8_lossy(&out_reader.join().unwrap()).into_owned();
    let stderr = String::from_utf8_lossy(&err_reader.join().unwrap()).into_owned();
    let shown = || {
        let cut = |s: &str| s.chars().take(2000).collect::<String>();
        format!("stdout:\n{}\nstderr:\n{}", cut(&stdout), cut(&stderr))
    };
    let Some(status) = status else {
        return Some(format!("still running after {DEADLINE:?}\n{}", shown()));
    };
    let mut wrong = Vec::new();
    if stderr.contains("panicked") {
        wrong.push("a panic reached the user".to_string());
    }
    match status.code() {
        Some(c) if c == row.code => {}
        Some(c) => wrong.push(format!("exit code {c}, expected {}", row.code)),
        None => wrong.push(format!(
            "killed by a signal ({status}), expected exit {}",
            row.code
        )),
    }
    let all = format!("{stdout}{stderr}");
    for frag in row.says {
        if !all.contains(frag) {
            wrong.push(format!("does not say {frag:?}"));
        }
    }
    (!wrong.is_empty()).then(|| format!("{}\n{}", wrong.join("; "), shown()))
}

/// Runs every row of a table and reports all the wrong answers at once.
fn check_table(area: &str, rows: &[Bad]) {
    let failures: Vec<String> = rows
        .iter()
        .filter_map(|row| {
            check(row).map(|why| {
                let env: Vec<String> = row.env.iter().map(|(k, v)| format!("{k}={v} ")).collect();
                format!("{}rankwise {}: {why}", env.concat(), row.args.join(" "))
            })
        })
        .collect();
    assert!(
        failures.is_empty(),
        "{} of {} {area} row(s) answered wrongly:\n\n{}",
        failures.len(),
        rows.len(),
        failures.join("\n\n")
    );
    assert!(!rows.is_empty(), "the {area} table has no rows");
}

#[test]
fn bench_inputs() {
    check_table("bench", bench::ROWS);
}

#[test]
fn logs_inputs() {
    check_table("logs", logs::ROWS);
}

#[test]
fn run_inputs() {
    check_table("run", run::ROWS);
}

#[test]
fn settings_inputs() {
    check_table("settings", settings::ROWS);
}

#[test]
fn summarize_and_explain_inputs() {
    check_table("summarize and explain", summarize::ROWS);
}
