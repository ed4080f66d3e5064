//! What real NCCL 2.28.9 logged on an H200 (tests/fixtures/nccl-2.28.9-h200,
//! captured by `rankwise verify --engine nccl` and `nccl_fidelity fault` with
//! NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL; docs/findings/real-nccl.md
//! says how), held against what rankwise does on the local engine.
//! These run anywhere: the logs are files.

use rankwise::launch::EngineKind;
use rankwise_cli::verify::cases::{self, Suite};
use rankwise_cli::verify::runner;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../tests/fixtures/nccl-2.28.9-h200")
}

/// (op, opCount, count, datatype, op, root) of each COLL line.
type Coll = (String, String, String, String, String, String);

fn colls<'a>(lines: impl Iterator<Item = &'a str>) -> Vec<Coll> {
    let mut out = Vec::new();
    for l in lines {
        let Some((_, body)) = l.split_once(" NCCL INFO ") else {
            continue;
        };
        let Some((func, rest)) = body.split_once(": opCount ") else {
            continue;
        };
        let w: Vec<&str> = rest.split_whitespace().collect();
        let field = |name: &str| {
            w.iter()
                .position(|x| *x == name)
                .and_then(|i| w.get(i + 1))
                .map(|s| s.to_string())
                .unwrap_or_default()
        };
        out.push((
            func.to_string(),
            w[0].to_string(),
            field("count"),
            field("datatype"),
            field("op"),
            field("root"),
        ));
    }
    out
}

/// The local engine's trace of one seed layer at N, per rank.
fn local_trace(n: usize, layer: usize) -> Vec<Vec<Coll>> {
    let plan = cases::plan(Suite::Seed, n);
    let tmp = tempfile::tempdir().unwrap();
    let run = runner::run_layer(
        EngineKind::Local,
        &plan.layers[layer],
        n,
        "fixture",
        tmp.path(),
        Duration::from_secs(60),
        &|| {},
    )
    .unwrap();
    (0..n)
        .map(|r| {
            let tag = format!("[{r}] NCCL INFO");
            colls(
                run.trace
                    .iter()
                    .map(String::as_str)
                    .filter(|l| l.contains(&tag)),
            )
        })
        .collect()
}

fn nccl_log(dir: &Path, layer: &str, rank: usize) -> Vec<Coll> {
    let text = std::fs::read_to_string(dir.join(format!("nccl-{layer}.rank{rank}.log"))).unwrap();
    colls(text.lines())
}

#[test]
fn at_four_ranks_the_local_trace_is_nccls_log_call_for_call() {
    let dir = fixtures().join("seed4");
    for (i, layer) in ["native", "framework"].into_iter().enumerate() {
        let local = local_trace(4, i);
        for (r, mine) in local.iter().enumerate() {
            let theirs = nccl_log(&dir, layer, r);
            assert!(!theirs.is_empty());
            assert_eq!(*mine, theirs, "{layer} rank {r}");
        }
    }
    // what the equality covers: a count-0 call logged at the current opCount,
    // which it does not advance, and an AlltoAllv's pairs under one opCount
    let f = nccl_log(&dir, "framework", 0);
    let zero = f
        .iter()
        .position(|c| c.0 == "AllReduce" && c.2 == "0")
        .unwrap();
    assert_eq!(f[zero].1, f[zero + 1].1);
    assert_eq!(
        f.iter().filter(|c| c.1 == "9").count(),
        8,
        "4 Send/Recv pairs at opCount 9"
    );
}

#[test]
fn at_one_rank_nccl_logs_every_call_at_opcount_0() {
    let dir = fixtures().join("seed1");
    for (i, layer) in ["native", "framework"].into_iter().enumerate() {
        let theirs = nccl_log(&dir, layer, 0);
        assert!(theirs.len() > 5);
        assert!(theirs.iter().all(|c| c.1 == "0"), "{layer}: {theirs:?}");
        // every other field is the local engine's, call for call
        let strip = |v: &[Coll]| -> Vec<Coll> {
            v.iter()
                .map(|c| {
                    (
                        c.0.clone(),
                        String::new(),
                        c.2.clone(),
                        c.3.clone(),
                        c.4.clone(),
                        c.5.clone(),
                    )
                })
                .collect()
        };
        let local = local_trace(1, i);
        assert_eq!(strip(&local[0]), strip(&theirs), "{layer}");
    }
}

fn analyze(scenario: &str) -> String {
    analyze_in("faults", scenario)
}

/// `rankwise logs analyze` of the four rank logs `DIR/SCENARIO.rank<r>.log`.
fn analyze_in(dir: &str, scenario: &str) -> String {
    let dir = fixtures().join(dir);
    let files: Vec<PathBuf> = (0..4)
        .map(|r| dir.join(format!("{scenario}.rank{r}.log")))
        .collect();
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(["logs", "analyze"])
        .args(&files)
        .output()
        .unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn the_analyzer_names_the_faulty_rank_and_call_in_each_injected_fault() {
    let first = |s: &str| s.lines().next().unwrap_or("").to_string();
    // each rank waited for its call, so the skipping rank logged only the
    // call it made instead: one call cannot show a skip, and it is told as
    // what it is, a different call at #0
    let a = analyze("skipped-collective");
    assert!(
        first(&a).contains(
            "rank 2 issued AllReduce (count 16 int32 sum) where ranks 0-1,3 issued Broadcast"
        ),
        "{a}"
    );
    let a = analyze("count-mismatch");
    assert!(
        first(&a)
            .contains("rank 2 has count 1000 where ranks 0-1,3 have count 1024 at AllReduce #0"),
        "{a}"
    );
    let a = analyze("unmatched-send");
    assert!(
        first(&a).contains("rank 0's Send #0 to rank 1 (count 16 int32) has no matching Recv"),
        "{a}"
    );
    // every rank's communicator ended in ncclCommAbort after rankwise's deadline
    for s in ["skipped-collective", "count-mismatch", "unmatched-send"] {
        for r in 0..4 {
            let log = std::fs::read_to_string(fixtures().join(format!("faults/{s}.rank{r}.log")))
                .unwrap();
            assert!(log.contains("Abort COMPLETE"), "{s} rank {r}");
        }
    }
}

#[test]
fn a_pytorch_rank_that_skips_a_broadcast_is_told_as_a_skip() {
    // scripts/capture_torch_skip.sh: 4 PyTorch ranks, rank 2 leaves out
    // broadcast(src=0) and goes on; calls are enqueued without waiting, so
    // every rank logged its whole sequence before the job hung
    let a = analyze_in("torch-skip", "skipped-broadcast");
    let first = a.lines().next().unwrap_or("");
    assert!(
        first.starts_with(
            "likely hang: rank 2 skipped Broadcast #1 (count 16 float32 root 0, called by ranks 0-1,3 at opCount 1,"
        ),
        "{a}"
    );
    assert!(
        first.contains("its calls from #1 on match the others' from #2 on; from there its opCount runs 1 behind theirs"),
        "{a}"
    );
}

/// One scenario of `nccl_fidelity misuse --checks-off` as recorded: per
/// rank, the error rankwise's engine returned (a timeout once NCCL did not
/// finish), NCCL's own answers to raw calls, and whether the job itself
/// failed (a rank that panicked).
struct Unchecked {
    errors: Vec<Option<String>>,
    nccl: Vec<Vec<(String, String)>>,
    job_failed: Vec<bool>,
}

fn unchecked_run() -> BTreeMap<String, Unchecked> {
    let text = std::fs::read_to_string(fixtures().join("misuse-unchecked.jsonl")).unwrap();
    let mut out = BTreeMap::new();
    for line in text.lines() {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let ranks = v["per_rank"].as_array().unwrap();
        assert_eq!(ranks.len() as u64, v["ranks"].as_u64().unwrap());
        out.insert(
            v["scenario"].as_str().unwrap().to_string(),
            Unchecked {
                errors: ranks
                    .iter()
                    .map(|r| r["error"].as_str().map(str::to_string))
                    .collect(),
                nccl: ranks
                    .iter()
                    .map(|r| {
                        r["nccl"]
                            .as_array()
                            .map(|a| {
                                a.iter()
                                    .map(|o| {
                                        let s = |k: &str| o[k].as_str().unwrap_or("").to_string();
                                        (s("result"), s("last_error"))
                                    })
                                    .collect()
                            })
                            .unwrap_or_default()
                    })
                    .collect(),
                job_failed: ranks.iter().map(|r| r["job_error"].is_string()).collect(),
            },
        );
    }
    out
}

/// The misuse table's "what NCCL did" column (`verify --suite misuse`) is
/// what NCCL 2.28.9 did in the recorded run with rankwise's checks off:
/// each text's claim (who hangs, who returns, NCCL's result code and its
/// quoted WARN text) is checked against the run, scenario by scenario.
#[test]
fn the_misuse_tables_nccl_column_is_what_nccl_did() {
    let log = std::fs::read_to_string(fixtures().join("misuse-unchecked.stderr.log")).unwrap();
    assert!(
        log.contains("NCCL version 2.28.9+cuda13.0"),
        "the run's NCCL"
    );
    let run = unchecked_run();
    let catalogue = rankwise_cli::misuse::catalogue();
    assert_eq!(run.len(), catalogue.len(), "every scenario was run");
    for s in catalogue {
        let u = &run[s.name];
        let hung: Vec<usize> = (0..s.ranks)
            .filter(|r| {
                u.errors[*r]
                    .as_deref()
                    .is_some_and(|e| e.starts_with("ncclTimeout"))
            })
            .collect();
        let clean: Vec<usize> = (0..s.ranks)
            .filter(|r| {
                u.errors[*r].is_none()
                    && !u.job_failed[*r]
                    && u.nccl[*r].iter().all(|(res, _)| res == "ncclSuccess")
            })
            .collect();
        let all: Vec<usize> = (0..s.ranks).collect();
        let t = s.nccl;
        let who = format!("{}: {t:?}", s.name);
        if t.starts_with("every rank hangs") {
            assert_eq!(hung, all, "{who}");
        } else if let Some(rest) = t.strip_prefix("ranks 0-2 hang") {
            assert!(rest.is_empty(), "{who}");
            assert_eq!(hung, vec![0, 1, 2], "{who}");
            assert!(u.errors[3].is_none(), "{who}");
        } else if t.starts_with("the other ranks hang") {
            let others: Vec<usize> = all.iter().copied().filter(|r| !u.job_failed[*r]).collect();
            assert_eq!(others.len(), s.ranks - 1, "{who}: one rank failed itself");
            assert_eq!(hung, others, "{who}");
        } else if t.starts_with("returns") || t.starts_with("both return") || t.starts_with("waits")
        {
            assert_eq!(clean, all, "{who}: no rank has an error");
        } else if t.starts_with("no error to keep") {
            assert_eq!(hung, all, "{who}");
        } else if t.starts_with("accepted (ncclInProgress)") {
            for r in &all {
                assert_eq!(u.nccl[*r][0].0, "ncclInProgress", "{who}: rank {r}");
            }
        } else {
            // an error NCCL reported: its code and its quoted text
            let code = ["ncclInvalidArgument", "ncclInvalidUsage"]
                .into_iter()
                .find(|c| t.contains(c))
                .unwrap_or_else(|| panic!("{who}: names no outcome the run can check"));
            let quoted = t
                .split('"')
                .nth(1)
                .unwrap_or_else(|| panic!("{who}: quotes no text"));
            let said = |r: usize| {
                let errs = u.errors[r].iter().map(String::as_str);
                let raw = u.nccl[r].iter().flat_map(|(a, b)| [a.as_str(), b.as_str()]);
                errs.chain(raw).collect::<Vec<_>>().join(" | ")
            };
            let saying: Vec<usize> = all
                .iter()
                .copied()
                .filter(|r| said(*r).contains(code) && said(*r).contains(quoted))
                .collect();
            if t.starts_with("Send returns; Recv") {
                assert_eq!(saying, vec![1], "{who}");
                assert!(u.errors[0].is_none(), "{who}");
            } else {
                assert_eq!(saying, all, "{who}");
            }
        }
        // hangs named only where the run hung
        if !t.contains("hang") {
            assert!(hung.is_empty(), "{who}: ranks {hung:?} hung");
        }
    }
}
