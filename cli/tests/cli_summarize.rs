//! `rankwise summarize RUN_DIR` reads the CSVs alone and fails on any
//! tampering: a deleted row, a flipped value, a duplicated row, a missing
//! rank file, a foreign row, a rewritten reference.

mod common;
use common::{rankwise, verified_run};
use std::path::Path;

fn summarize(run: &Path) -> common::Out {
    rankwise(&["summarize", run.to_str().unwrap()])
}

/// Rewrites one rank file through `edit` (lines without the trailing newline).
fn edit_lines(path: &Path, edit: impl FnOnce(&mut Vec<String>)) {
    let text = std::fs::read_to_string(path).unwrap();
    let mut lines: Vec<String> = text.lines().map(String::from).collect();
    edit(&mut lines);
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

#[test]
fn an_intact_run_passes_with_the_aggregated_table() {
    let (_tmp, run) = verified_run(4);
    let out = summarize(&run).expect(0);
    assert!(
        out.stdout.contains("layer      operation      variant"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains(
        "native     Reduce         root 3                          recvbuff == NULL (non-root)"
    ));
    assert!(out.stdout.contains("92 rows, 24 records, all PASS"));
    let j = rankwise(&["summarize", run.to_str().unwrap(), "--json"])
        .expect(0)
        .json();
    assert_eq!(j["rows"], 92);
    assert_eq!(j["records_total"], 24);
    assert_eq!(j["pass"], true);
}

#[test]
fn a_deleted_row_fails() {
    let (_tmp, run) = verified_run(4);
    edit_lines(&run.join("raw/native/rank1.csv"), |l| {
        l.remove(3);
    });
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr.contains("raw/native/rank1.csv has 8 rows, but suite seed declares 9 per rank for layer native at N=4"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr
            .contains("raw/native/rank1.csv: row for AllGather / out-of-place is missing"),
        "{}",
        out.stderr
    );
    assert!(out.stdout.contains("FAIL"));
}

#[test]
fn a_flipped_value_fails() {
    let (_tmp, run) = verified_run(4);
    // rank 2's in-place AllReduce: change the actual column only
    edit_lines(&run.join("raw/native/rank2.csv"), |l| {
        let row = l
            .iter_mut()
            .find(|x| x.contains(",AllReduce,in-place,"))
            .unwrap();
        *row = row.replace("\"[10, 46, 12]\",true", "\"[10, 46, 13]\",true");
    });
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr.contains(
            "raw/native/rank2.csv line 3: AllReduce / in-place: marked correct, but actual [10, 46, 13] differs from expected [10, 46, 12]"
        ),
        "{}",
        out.stderr
    );
}

#[test]
fn a_rewritten_expectation_or_an_incorrect_row_fails() {
    let (_tmp, run) = verified_run(4);
    // both expected and actual rewritten consistently: the reference catches it
    edit_lines(&run.join("raw/framework/rank0.csv"), |l| {
        let row = l
            .iter_mut()
            .find(|x| x.contains(",AllReduce,SUM/int64,"))
            .unwrap();
        *row = row.replace("[10, 46, 12]", "[10, 46, 99]");
    });
    // a row that says it failed
    edit_lines(&run.join("raw/framework/rank3.csv"), |l| {
        let row = l.iter_mut().find(|x| x.contains(",Send/Recv,")).unwrap();
        *row = row.replace(",true,", ",false,");
    });
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr.contains("AllReduce / SUM/int64: expected column [10, 46, 99] is not the suite's reference [10, 46, 12]"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("raw/framework/rank3.csv line 14: Send/Recv / grouped ring of 4: incorrect: expected [2, 102], actual [2, 102]"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_duplicated_row_fails() {
    let (_tmp, run) = verified_run(4);
    edit_lines(&run.join("raw/framework/rank1.csv"), |l| {
        let dup = l[5].clone();
        l.push(dup);
    });
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("raw/framework/rank1.csv has 15 rows, but suite seed declares 14"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("raw/framework/rank1.csv line 16: duplicated row for Broadcast / root 2 (first at line 6)"),
        "{}",
        out.stderr
    );
}

#[test]
fn a_missing_rank_file_fails() {
    let (_tmp, run) = verified_run(4);
    std::fs::remove_file(run.join("raw/framework/rank3.csv")).unwrap();
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("missing rank file raw/framework/rank3.csv: the run declares 4 rank(s)"),
        "{}",
        out.stderr
    );
}

#[test]
fn foreign_rows_files_and_manifests_fail() {
    let (_tmp, run) = verified_run(3);
    // a row from another case name
    edit_lines(&run.join("raw/native/rank0.csv"), |l| {
        l[1] = l[1].replace(",AllReduce,out-of-place,", ",AllReduce,sideways,");
    });
    // a file for a rank the run does not have
    std::fs::copy(
        run.join("raw/native/rank0.csv"),
        run.join("raw/native/rank3.csv"),
    )
    .unwrap();
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("AllReduce / sideways is not a case of suite seed at N=3"),
        "{}",
        out.stderr
    );
    assert!(
        out.stderr.contains("unexpected file raw/native/rank3.csv"),
        "{}",
        out.stderr
    );
    // a manifest that claims another N: the rows no longer match what the suite declares
    let m = std::fs::read_to_string(run.join("manifest.json")).unwrap();
    std::fs::write(
        run.join("manifest.json"),
        m.replace("\"ranks\": 3", "\"ranks\": 2"),
    )
    .unwrap();
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("world size column says 3, the run has 2"),
        "{}",
        out.stderr
    );
}

#[test]
fn not_a_run_directory() {
    let tmp = tempfile::tempdir().unwrap();
    let out = summarize(tmp.path()).expect(1);
    assert!(
        out.stderr
            .contains("has no manifest.json: not a rankwise run directory"),
        "{}",
        out.stderr
    );
    let out = summarize(&tmp.path().join("nope")).expect(1);
    assert!(out.stderr.contains("is not a directory"), "{}", out.stderr);
    let (_run_tmp, run) = verified_run(1);
    let m = std::fs::read_to_string(run.join("manifest.json")).unwrap();
    std::fs::write(
        run.join("manifest.json"),
        m.replace("\"ranks\": 1", "\"ranks\": 99999999999"),
    )
    .unwrap();
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("declares 99999999999 ranks: rankwise verify writes runs of 1 to 256 ranks (raw/native holds 1 rank file(s), raw/framework holds 1 rank file(s))"),
        "{}",
        out.stderr
    );
    std::fs::write(tmp.path().join("manifest.json"), "{").unwrap();
    let out = summarize(tmp.path()).expect(1);
    assert!(
        out.stderr.contains("is not a valid manifest"),
        "{}",
        out.stderr
    );
}

/// A run of engine `torch` (`python -m rankwise.verify_torch`) holds the
/// framework layer only; every other engine's run holds both.
#[test]
fn a_torch_run_is_its_framework_layer_alone() {
    let edit_manifest = |run: &Path, engine: &str, keep_native: bool| {
        let path = run.join("manifest.json");
        let mut m: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
        m["engine"] = engine.into();
        if !keep_native {
            m["layers"]
                .as_array_mut()
                .unwrap()
                .retain(|l| l["name"] != "native");
        }
        std::fs::write(&path, m.to_string()).unwrap();
    };
    let (_tmp, run) = verified_run(4);
    std::fs::remove_dir_all(run.join("raw/native")).unwrap();
    // a torch manifest that still lists the native layer
    edit_manifest(&run, "torch", true);
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr.contains(
            "manifest.json lists layer native, which a run of engine torch does not write"
        ),
        "{}",
        out.stderr
    );
    edit_manifest(&run, "torch", false);
    let out = summarize(&run).expect(0);
    assert!(out.stdout.contains("engine torch"), "{}", out.stdout);
    assert!(
        out.stdout
            .contains("framework 56 rows in 14 records: 56 rows, 14 records, all PASS"),
        "{}",
        out.stdout
    );
    // the same framework-only run under another engine's name misses a layer
    edit_manifest(&run, "local", false);
    let out = summarize(&run).expect(1);
    assert!(
        out.stderr
            .contains("manifest.json lists no layer native, which suite seed declares"),
        "{}",
        out.stderr
    );
}
