//! What real NCCL 2.28.9 logged on an H200 (tests/fixtures/nccl-2.28.9-h200,
//! captured by `rankwise verify --engine nccl` and `nccl_fidelity fault` with
//! NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL; README "Observed on real
//! NCCL" says how), held against what rankwise does on the local engine.
//! These run anywhere: the logs are files.

use rankwise::launch::EngineKind;
use rankwise::verify::cases::{self, Suite};
use rankwise::verify::runner;
use std::path::{Path, PathBuf};
use std::time::Duration;

fn fixtures() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/nccl-2.28.9-h200")
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
