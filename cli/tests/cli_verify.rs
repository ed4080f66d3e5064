//! `rankwise verify` through the binary: the seed's result at N=4, the
//! adapted suite at other N, the run directory it leaves, the evidence, and
//! bad input.

mod common;
use common::rankwise;

fn verify_json(n: usize, suite: &str) -> (tempfile::TempDir, serde_json::Value) {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = rankwise(&[
        "verify",
        "--ranks",
        &n.to_string(),
        "--suite",
        suite,
        "--out",
        run.to_str().unwrap(),
        "--json",
    ])
    .expect(0);
    let v = out.json();
    (tmp, v)
}

fn layer<'a>(v: &'a serde_json::Value, name: &str) -> &'a serde_json::Value {
    v["layers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|l| l["layer"] == name)
        .unwrap_or_else(|| panic!("no layer {name}"))
}

#[test]
fn seed_suite_at_4_ranks_is_the_seeds_92_rows_in_24_records() {
    let (tmp, v) = verify_json(4, "seed");
    assert_eq!(v["pass"], true);
    assert_eq!(v["rows"], 92);
    assert_eq!(v["records_total"], 24);
    assert_eq!(layer(&v, "native")["rows"], 36);
    assert_eq!(layer(&v, "native")["records"], 10);
    assert_eq!(layer(&v, "framework")["rows"], 56);
    assert_eq!(layer(&v, "framework")["records"], 14);
    assert!(v["adaptations"].as_array().unwrap().is_empty());
    // the four log facts, all shown by the trace
    let facts = v["evidence"].as_array().unwrap();
    assert_eq!(facts.len(), 4);
    assert!(facts.iter().all(|f| f["pass"] == true), "{facts:#?}");
    assert!(
        facts[0]["details"][0]
            .as_str()
            .unwrap()
            .contains("AllReduce: opCount 2 ")
    );
    assert!(
        facts[1]["details"][0]
            .as_str()
            .unwrap()
            .starts_with("rank 0, opCount 9: Send peer 0 count 2, Recv peer 0 count 2")
    );
    assert!(
        facts[2]["details"][0]
            .as_str()
            .unwrap()
            .contains("Send counts [1, 2, 3, 4] = input splits [1, 2, 3, 4], Recv counts [1, 2, 3, 4] = output splits [1, 2, 3, 4]")
    );
    // Reduce root 3: a root record and a NULL-recvbuff record
    let records = v["records"].as_array().unwrap();
    let reduce: Vec<&serde_json::Value> = records
        .iter()
        .filter(|r| r["layer"] == "native" && r["operation"] == "Reduce")
        .collect();
    assert_eq!(reduce.len(), 2);
    assert!(
        reduce
            .iter()
            .any(|r| r["pointer_relation"] == "recvbuff == NULL (non-root)"
                && r["ranks"] == serde_json::json!([0, 1, 2]))
    );
    // the run directory: manifest, one CSV per rank and layer, traces
    let run = tmp.path().join("run");
    assert!(run.join("manifest.json").exists());
    assert!(run.join("trace/framework.log").exists());
    for layer in ["native", "framework"] {
        for r in 0..4 {
            assert!(run.join(format!("raw/{layer}/rank{r}.csv")).exists());
        }
    }
    let rank2 = std::fs::read_to_string(run.join("raw/native/rank2.csv")).unwrap();
    let rs: Vec<&str> = rank2
        .lines()
        .filter(|l| l.contains(",ReduceScatter,in-place,"))
        .collect();
    assert_eq!(rs.len(), 1);
    assert!(
        rs[0].contains("\"[624, 628, 632]\",\"[624, 628, 632]\",true"),
        "{}",
        rs[0]
    );
    assert!(rs[0].contains("recvbuff == sendbuff + rank*recvcount"));
    assert!(rs[0].contains("+ 24 bytes (6 elements)"), "{}", rs[0]);
    let reduce_rows: Vec<&str> = rank2
        .lines()
        .filter(|l| l.contains(",Reduce,root 3,"))
        .collect();
    assert!(
        reduce_rows[0].ends_with(",int32,2,,,true,no output contract"),
        "{}",
        reduce_rows[0]
    );
    assert!(reduce_rows[0].contains("recvbuff (nil)"));
}

#[test]
fn seed_suite_adapts_to_any_n() {
    for n in [1usize, 2, 3, 5, 8] {
        let (_tmp, v) = verify_json(n, "seed");
        assert_eq!(v["pass"], true, "N={n}");
        assert_eq!(layer(&v, "native")["rows"], 9 * n, "N={n}");
        assert_eq!(layer(&v, "framework")["rows"], 14 * n, "N={n}");
        // at N=1 Reduce has no non-root rows, so no NULL-recvbuff record
        let native_records = if n == 1 { 9 } else { 10 };
        assert_eq!(layer(&v, "native")["records"], native_records, "N={n}");
        assert_eq!(layer(&v, "framework")["records"], 14, "N={n}");
        assert_eq!(v["rows"], 23 * n);
        let adapted = v["adaptations"].as_array().unwrap();
        assert_eq!(adapted.is_empty(), n >= 4, "N={n}: {adapted:?}");
        if n <= 3 {
            assert!(
                adapted.iter().any(|a| a
                    .as_str()
                    .unwrap()
                    .contains(&format!("seed root 3 is not a rank of a {n}-rank communicator: root {} used instead", n - 1))),
                "{adapted:?}"
            );
        }
        assert!(
            v["evidence"]
                .as_array()
                .unwrap()
                .iter()
                .all(|f| f["pass"] == true),
            "N={n}"
        );
    }
}

#[test]
fn full_suite_passes_and_covers_the_2_28_ops() {
    let (_tmp, v) = verify_json(3, "full");
    assert_eq!(v["pass"], true);
    let records = v["records"].as_array().unwrap();
    for op in ["AlltoAll", "Gather", "Scatter"] {
        assert!(
            records
                .iter()
                .any(|r| r["layer"] == "native" && r["operation"] == op),
            "{op}"
        );
    }
    for variant in [
        "f8e4m3 avg count 13 in-place",
        "bfloat16 prod count 7 out-of-place",
        "uint8 min count 0 in-place",
        "double max count 1 out-of-place",
    ] {
        assert!(
            records
                .iter()
                .any(|r| r["operation"] == "AllReduce" && r["variant"] == variant),
            "{variant}"
        );
    }
    // every legal root of every rooted op
    for op in ["Reduce", "Broadcast", "Gather", "Scatter"] {
        for root in 0..3 {
            let v = format!("int32 count 5 root {root} in-place");
            assert!(
                records
                    .iter()
                    .any(|r| r["operation"] == op && r["variant"] == v),
                "{op} {v}"
            );
        }
    }
    assert!(layer(&v, "native")["rows"].as_u64().unwrap() > 5000);
}

#[test]
fn text_output_has_the_tables_and_plain_progress_lines() {
    let tmp = tempfile::tempdir().unwrap();
    let run = tmp.path().join("run");
    let out = rankwise(&["verify", "--out", run.to_str().unwrap()]).expect(0);
    let s = &out.stdout;
    assert!(s.contains("native: 36 rows from 4 rank(s)"), "{s}");
    assert!(s.contains("layer      rank rows  records  result"), "{s}");
    assert!(s.contains("sendbuff == recvbuff + rank*sendcount"));
    assert!(s.contains("PASS  the invalid root 4 is rejected at the argument check on every rank"));
    assert!(s.contains(
        "native 36 rows in 10 records, framework 56 rows in 14 records: 92 rows, 24 records, all PASS"
    ));
}

#[test]
fn default_out_is_a_utc_timestamp_under_runs() {
    let tmp = tempfile::tempdir().unwrap();
    common::rankwise_in(tmp.path(), &["verify", "--ranks", "2"]).expect(0);
    let runs: Vec<String> = std::fs::read_dir(tmp.path().join("runs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert_eq!(runs.len(), 1);
    let id = &runs[0];
    assert_eq!(id.len(), 16, "{id}");
    assert!(
        id.starts_with("20") && id.as_bytes()[8] == b'T' && id.ends_with('Z'),
        "{id}"
    );
}

#[test]
fn bad_input_is_refused_clearly() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("o");
    let o = out.to_str().unwrap();
    let e = rankwise(&["verify", "--ranks", "0", "--out", o]).expect(1);
    assert!(
        e.stderr.contains("--ranks must be at least 1"),
        "{}",
        e.stderr
    );
    // an engine this build does not have is a usage error listing those it has
    let e = rankwise(&["verify", "--engine", "gloo", "--out", o]).expect(2);
    assert!(e.stderr.contains("invalid value 'gloo'"), "{}", e.stderr);
    assert!(e.stderr.contains("possible values: local"), "{}", e.stderr);
    let e = rankwise(&["verify", "--suite", "huge", "--out", o]).expect(1);
    assert!(
        e.stderr
            .contains("unknown suite 'huge': expected seed, full or misuse")
    );
    let e = rankwise(&["verify", "--ranks", "100000", "--out", o]).expect(1);
    assert!(e.stderr.contains("at most 256"), "{}", e.stderr);
    rankwise(&["verify", "--ranks", "2", "--out", o]).expect(0);
    let e = rankwise(&["verify", "--ranks", "2", "--out", o]).expect(1);
    assert!(e.stderr.contains("already holds a run"), "{}", e.stderr);
    let e = rankwise(&["verify", "--ranks", "two"]).expect(2);
    assert!(e.stderr.contains("invalid value 'two'"));
}

/// Starts `count` `rankwise verify` processes at once in `dir` and returns
/// each one's exit code, stdout and stderr.
fn verify_at_once(dir: &std::path::Path, count: usize, args: &[&str]) -> Vec<common::Out> {
    let children: Vec<std::process::Child> = (0..count)
        .map(|_| {
            std::process::Command::new(env!("CARGO_BIN_EXE_rankwise"))
                .arg("verify")
                .args(args)
                .current_dir(dir)
                .env_remove("RANKWISE_DEBUG")
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("start rankwise")
        })
        .collect();
    children
        .into_iter()
        .map(|c| {
            let o = c.wait_with_output().expect("wait for rankwise");
            common::Out {
                code: o.status.code().unwrap_or(-1),
                stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
                stderr: String::from_utf8_lossy(&o.stderr).into_owned(),
            }
        })
        .collect()
}

#[test]
fn runs_started_together_get_their_own_directories() {
    // run ids are per second: runs started together share one, and each
    // must still get a directory of its own
    const RUNS: usize = 8;
    let tmp = tempfile::tempdir().unwrap();
    let outs = verify_at_once(tmp.path(), RUNS, &["--ranks", "2"]);
    let mut dirs: Vec<String> = Vec::new();
    for o in outs {
        let o = o.expect(0);
        assert!(o.stdout.contains("all PASS"), "{}", o.stdout);
        let dir = o
            .stdout
            .lines()
            .find_map(|l| l.strip_prefix("writing "))
            .unwrap_or_else(|| panic!("no run directory in:\n{}", o.stdout));
        dirs.push(dir.to_string());
    }
    dirs.sort();
    dirs.dedup();
    assert_eq!(dirs.len(), RUNS, "shared run directories: {dirs:?}");
    let on_disk = std::fs::read_dir(tmp.path().join("runs")).unwrap().count();
    assert_eq!(on_disk, RUNS, "{dirs:?}");
    for d in &dirs {
        common::rankwise(&["summarize", tmp.path().join(d).to_str().unwrap()]).expect(0);
    }
}

#[test]
fn one_out_directory_takes_one_run() {
    const RUNS: usize = 4;
    let tmp = tempfile::tempdir().unwrap();
    let outs = verify_at_once(tmp.path(), RUNS, &["--ranks", "2", "--out", "same"]);
    let (won, lost): (Vec<_>, Vec<_>) = outs.into_iter().partition(|o| o.code == 0);
    assert_eq!(
        won.len(),
        1,
        "exactly one run may write into same/: {:?}",
        won.iter().map(|o| &o.stdout).collect::<Vec<_>>()
    );
    for o in lost {
        let o = o.expect(1);
        assert!(
            o.stderr.contains("rankwise verify: same ")
                && o.stderr.contains("choose another --out"),
            "{}",
            o.stderr
        );
    }
    common::rankwise(&["summarize", tmp.path().join("same").to_str().unwrap()]).expect(0);
}

#[test]
fn an_out_directory_that_holds_files_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("notes");
    std::fs::create_dir(&out).unwrap();
    std::fs::write(out.join("todo.txt"), "keep me\n").unwrap();
    let e = rankwise(&["verify", "--ranks", "2", "--out", out.to_str().unwrap()]).expect(1);
    assert!(
        e.stderr.contains("is not empty (it holds todo.txt)"),
        "{}",
        e.stderr
    );
    assert_eq!(
        std::fs::read_dir(&out).unwrap().count(),
        1,
        "nothing written"
    );
    // an empty directory, or a file where the directory should be
    let empty = tmp.path().join("empty");
    std::fs::create_dir(&empty).unwrap();
    rankwise(&["verify", "--ranks", "2", "--out", empty.to_str().unwrap()]).expect(0);
    let e = rankwise(&["verify", "--out", out.join("todo.txt").to_str().unwrap()]).expect(1);
    assert!(
        e.stderr.contains("exists and is not a directory"),
        "{}",
        e.stderr
    );
}

/// A build without the `mpi` feature says so for every command that takes
/// `--engine mpi`, and how to get it, before anything runs.
#[cfg(not(feature = "mpi"))]
#[test]
fn a_build_without_mpi_says_how_to_get_it() {
    let tmp = tempfile::tempdir().unwrap();
    let o = tmp.path().join("o");
    let o = o.to_str().unwrap();
    for args in [
        vec!["verify", "--engine", "mpi", "--ranks", "2", "--out", o],
        vec!["verify", "--engine", "mpi", "--suite", "misuse"],
        vec![
            "run",
            "all_reduce",
            "--ranks",
            "2",
            "--count",
            "1",
            "--engine",
            "mpi",
        ],
        vec![
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "-e",
            "64",
            "--engine",
            "mpi",
        ],
    ] {
        let e = rankwise(&args).expect(1);
        assert!(
            e.stderr
                .contains("this build has no mpi engine (build with `--features mpi`"),
            "{args:?}: {}",
            e.stderr
        );
    }
}
