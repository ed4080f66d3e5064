//! Every scenario of the misuse catalogue: the expected error on every rank,
//! and no byte changed outside the call's legal outputs. The time to each
//! error is what `rankwise verify --suite misuse` measures and reports
//! against its deadline; these tests do not time anything, so a loaded
//! machine cannot fail them.

use rankwise::launch::EngineKind;
use rankwise_cli::misuse;

/// The engines the misuse runner drives: it times every rank and checks
/// their guard regions from one process, so engines whose ranks are
/// processes (mpi) are reported as skipped here.
fn engines() -> Vec<EngineKind> {
    rankwise_testkit::engines::engines()
        .into_iter()
        .filter(|e| {
            let threads = e.name() != "mpi";
            if !threads {
                rankwise_testkit::engines::skipped(format!(
                    "misuse scenarios on engine {e}: the runner needs every rank in one process"
                ));
            }
            threads
        })
        .collect()
}

fn check(name: &str) {
    let s = misuse::scenario(name).unwrap_or_else(|| panic!("no scenario {name}"));
    for engine in engines() {
        let o = misuse::run(engine, &s);
        for (r, (got, want)) in o.ranks.iter().zip(&o.expected).enumerate() {
            let kind = got.error.as_ref().map(|e| e.kind);
            assert_eq!(kind, *want, "{name} on {engine}: rank {r}: {:?}", got.error);
            if let Some(e) = &got.error {
                assert_eq!(e.rank, Some(r), "{name} on {engine}: {e}");
            }
            assert_eq!(
                got.violations, 0,
                "{name} on {engine}: rank {r} changed bytes outside its legal outputs"
            );
        }
    }
}

macro_rules! scenarios {
    ($($test:ident => $name:literal),* $(,)?) => {
        $(#[test] fn $test() { check($name); })*

        #[test]
        fn every_catalogued_scenario_has_a_test() {
            let tested = [$($name),*];
            for s in misuse::catalogue() {
                assert!(tested.contains(&s.name), "scenario {} has no test", s.name);
            }
        }
    };
}

scenarios! {
    count_mismatch => "count-mismatch",
    datatype_mismatch => "datatype-mismatch",
    redop_mismatch => "redop-mismatch",
    premulsum_scalar_mismatch => "premulsum-scalar-mismatch",
    root_mismatch => "root-mismatch",
    op_kind_mismatch => "op-kind-mismatch",
    skipped_collective => "skipped-collective",
    rank_never_arrives => "rank-never-arrives",
    rank_finishes_early => "rank-finishes-early",
    ungrouped_ring => "ungrouped-ring",
    unmatched_send => "unmatched-send",
    zero_count_send_skipped => "zero-count-send-skipped",
    send_recv_count_mismatch => "send-recv-count-mismatch",
    send_recv_datatype_mismatch => "send-recv-datatype-mismatch",
    alltoallv_transposed_splits => "alltoallv-transposed-splits",
    invalid_root => "invalid-root",
    null_root_recvbuff => "null-root-recvbuff",
    out_of_bounds_extent => "out-of-bounds-extent",
    illegal_overlap => "illegal-overlap",
    group_end_without_start => "group-end-without-start",
    send_to_self_without_recv => "send-to-self-without-recv",
    rank_panics_mid_collective => "rank-panics-mid-collective",
    communicators_in_opposite_order => "communicators-in-opposite-order",
    use_after_error => "use-after-error",
    bad_datatype_code => "bad-datatype-code",
    bad_op_code => "bad-op-code",
}

#[test]
fn the_messages_say_what_happened() {
    for engine in engines() {
        let o = misuse::run(engine, &misuse::scenario("count-mismatch").unwrap());
        let e = o.ranks[0].error.as_ref().unwrap();
        assert!(
            e.message
                .contains("AllReduce #0: count differs: ranks 0,1,3 pass 1024, rank 2 passes 1000"),
            "{e}"
        );
        let o = misuse::run(engine, &misuse::scenario("skipped-collective").unwrap());
        let e = o.ranks[0].error.as_ref().unwrap();
        assert!(
            e.message.contains(
                "ranks 0,1,3 call Broadcast #0, rank 2 calls AllReduce #0; rank 2 skipped a call"
            ),
            "{e}"
        );
        if !engine.capabilities().diagnoses_deadlock {
            // such engines end these scenarios in their timeout instead
            continue;
        }
        let o = misuse::run(engine, &misuse::scenario("ungrouped-ring").unwrap());
        let e = o.ranks[0].error.as_ref().unwrap();
        assert!(
            e.message.contains("0 -> 1 -> 2 -> 3 -> 0")
                && e.message
                    .contains("wrap these Send/Recv calls in one group"),
            "{e}"
        );
        let o = misuse::run(engine, &misuse::scenario("rank-never-arrives").unwrap());
        let e = o.ranks[0].error.as_ref().unwrap();
        assert!(
            e.message
                .contains("rank 3: running outside rankwise [no call yet]"),
            "{e}"
        );
    }
}

#[test]
fn verify_suite_misuse_passes_and_reports_every_scenario() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(["verify", "--suite", "misuse", "--json"])
        .output()
        .unwrap();
    let v: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let rows = v["scenarios"].as_array().unwrap();
    assert_eq!(rows.len(), misuse::catalogue().len());
    for (r, s) in rows.iter().zip(misuse::catalogue()) {
        assert_eq!(r["scenario"], s.name);
        assert_eq!(r["guard_violations"], 0, "{r}");
        let kinds: Vec<Option<String>> = (0..s.ranks)
            .map(|k| (s.expect)(k).map(|k| format!("{k:?}")))
            .collect();
        let got: Vec<Option<String>> = r["errors"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["kind"].as_str().map(str::to_string))
            .collect();
        assert_eq!(got, kinds, "{r}");
        // every rank's time is reported; the deadline is the table's to
        // judge, and on a loaded machine it alone may fail a row
        let times = r["seconds_to_error"].as_array().unwrap();
        assert_eq!(times.len(), s.ranks, "{r}");
        assert!(times.iter().all(|t| t.as_f64().unwrap() >= 0.0), "{r}");
        if r["passed"] != true {
            let problems = r["problems"].as_array().unwrap();
            assert!(
                problems
                    .iter()
                    .all(|p| p.as_str().unwrap().contains(" took ")),
                "{r}"
            );
        }
    }
    let ring = rows
        .iter()
        .find(|r| r["scenario"] == "ungrouped-ring")
        .unwrap();
    assert_eq!(ring["rankwise"], "Deadlock on all 4 ranks");
    assert_eq!(ring["errors"][0]["name"], "ncclInvalidUsage");
    // it exits 0 exactly when every row passed
    let all_passed = v["passed"].as_u64().unwrap() as usize == rows.len();
    assert_eq!(
        out.status.success(),
        all_passed,
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}
