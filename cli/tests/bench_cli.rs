//! `rankwise bench` through the binary: the table, the exit code, JSON and
//! the SVG plot, on tiny sizes.

use std::process::Command;

fn bench(args: &[&str]) -> (i32, String, String) {
    let out = Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .arg("bench")
        .args(args)
        .output()
        .expect("rankwise runs");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

#[test]
fn tiny_sweep_prints_the_table_and_reports_nothing_wrong() {
    let (code, out, err) = bench(&[
        "all", "--ranks", "3", "-b", "8", "-e", "4K", "-f", "8", "-n", "2", "-w", "1", "-r", "all",
    ]);
    assert_eq!(code, 0, "{out}\n{err}");
    assert!(out.contains("# Out of bounds values : 0 OK"), "{out}");
    assert!(out.contains("# Avg bus bandwidth    : "), "{out}");
    assert!(out.contains("copy bandwidth 1 thread"), "{out}");
    assert!(
        out.contains("time    algbw    busbw  #wrong  %bound"),
        "{out}"
    );
    // sizes 8, 64, 512, 4096 bytes: AllReduce 4 rows, Reduce 4 per root x 3
    // roots, ReduceScatter 3 (8 bytes is less than one float per rank)
    let rows = out
        .lines()
        .filter(|l| !l.starts_with('#') && l.contains(" sum "))
        .count();
    assert_eq!(rows, 4 + 12 + 3, "{out}");
    // %bound is a number on every row, both placements (3 ranks on any
    // number of cores), with no flag asked for it
    for l in out
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
    {
        let pct: Vec<&str> = l.split_whitespace().filter(|w| w.ends_with('%')).collect();
        // AlltoAll has no in-place form: N/A in every in-place column
        let want = if l.contains("N/A") { 1 } else { 2 };
        assert_eq!(pct.len(), want, "{l}");
        for p in pct {
            let v: f64 = p.trim_end_matches('%').parse().expect("a number");
            assert!(v >= 0.0 && v.is_finite(), "{l}");
        }
    }
    assert!(
        out.contains("# ReduceScatter float: sizes below one element per rank left out: [8]"),
        "{out}"
    );
}

#[test]
fn json_and_plot() {
    let dir = tempfile::tempdir().unwrap();
    let svg = dir.path().join("bw.svg");
    let (code, out, err) = bench(&[
        "all_gather,broadcast",
        "--ranks",
        "2",
        "-b",
        "1K",
        "-e",
        "64K",
        "-f",
        "4",
        "-n",
        "2",
        "-w",
        "0",
        "--json",
        "--plot",
        svg.to_str().unwrap(),
    ]);
    assert_eq!(code, 0, "{err}");
    let v: serde_json::Value = serde_json::from_str(&out).expect("one JSON document");
    assert_eq!(v["out_of_bounds"], 0);
    assert_eq!(v["rows"].as_array().unwrap().len(), 2 * 4);
    assert!(v["machine"]["cores"].as_u64().unwrap() >= 1);
    let text = std::fs::read_to_string(&svg).unwrap();
    assert!(
        text.starts_with("<svg")
            && text.contains("AllGather copy bound")
            && text.contains("polyline")
    );
}

#[test]
fn bad_arguments_exit_1_with_a_reason_and_usage_errors_2() {
    let (code, _, err) = bench(&["broadcast", "--ranks", "2", "-r", "2"]);
    assert_eq!(code, 1);
    assert!(
        err.contains("root 2 is out of range: valid roots are 0..=1"),
        "{err}"
    );
    // clap's own usage errors
    let (code, _, err) = bench(&["allreduce", "-b", "1X"]);
    assert_eq!(code, 2, "{err}");
}

#[test]
fn checking_off_is_said_not_hidden() {
    let (code, out, _) = bench(&[
        "allreduce",
        "--ranks",
        "2",
        "-b",
        "8",
        "-e",
        "8",
        "-n",
        "1",
        "-c",
        "0",
    ]);
    assert_eq!(code, 0);
    assert!(out.contains("WARNING: checking is disabled"), "{out}");
    assert!(out.contains("Out of bounds values : N/A"), "{out}");
}
