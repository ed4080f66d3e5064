//! A program with a deliberate fault, run on every engine with rankwise's
//! NCCL-format trace (RANKWISE_DEBUG's lines, captured in memory and written
//! to a file), is diagnosed by `rankwise logs` the same way an NCCL log is.

use rankwise::launch::{EngineKind, LaunchOptions};
use rankwise::logs::{self, FindingKind};
use rankwise::trace::Tracer;
use rankwise::{Comm, RedOp, Result};
use rankwise_testkit::engines::{engines, launch_each};
use std::path::PathBuf;

/// Runs `program` on 4 ranks of `engine` with the trace captured, writes
/// every rank's trace lines to one file and analyzes it. Each rank hands
/// back its own lines whether its program failed or not: on an engine whose
/// ranks are processes, each process's tracer sees only its own rank.
fn trace_and_analyze(
    engine: EngineKind,
    program: impl Fn(&mut Comm) -> Result<()> + Sync,
) -> (logs::Analysis, PathBuf, tempfile::TempDir) {
    let (tracer, lines) = Tracer::memory();
    let per_rank = launch_each(
        engine,
        LaunchOptions::default().with_tracer(tracer),
        4,
        |c| {
            let _ = program(c);
            let tag = format!(" [{}] NCCL", c.rank());
            let mine: Vec<String> = lines
                .lock()
                .unwrap()
                .iter()
                .filter(|l| l.contains(&tag))
                .cloned()
                .collect();
            Ok(mine)
        },
    )
    .unwrap();
    let all: Vec<String> = per_rank
        .into_iter()
        .map(|r| r.expect("every rank returns its lines"))
        .collect::<Vec<_>>()
        .concat();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rankwise-trace.log");
    std::fs::write(&path, all.join("\n") + "\n").unwrap();
    // a rank that returns early leaves nothing in the trace to say the job
    // hung; these programs are run to show what a hang looks like
    let files = logs::expand_paths(std::slice::from_ref(&path)).unwrap();
    let c = logs::collect(&files, logs::Options::default()).unwrap();
    let a = logs::analyze_with(&c, &logs::Settings { hung: true });
    (a, path, dir)
}

fn first_error(a: &logs::Analysis) -> &logs::Finding {
    a.findings
        .iter()
        .find(|f| f.severity == logs::Severity::Error)
        .unwrap_or_else(|| panic!("no error finding: {}", a.verdict))
}

#[test]
fn a_count_mismatch_is_named_with_its_rank_and_position() {
    for engine in engines() {
        let (a, _, _dir) = trace_and_analyze(engine, |c| {
            let mut x = vec![1.0f32; 1024];
            c.all_reduce(&mut x, RedOp::Sum)?;
            c.all_reduce(&mut x, RedOp::Sum)?;
            let n = if c.rank() == 2 { 1000 } else { 1024 };
            c.all_reduce(&mut x[..n], RedOp::Sum)
        });
        let f = first_error(&a);
        assert_eq!(f.kind, FindingKind::CountMismatch, "{}", a.verdict);
        assert_eq!(f.ranks, vec![2]);
        assert_eq!(f.position, Some(2), "the third collective, #2");
        let c = &a.communicators[0];
        assert_eq!(c.nranks, 4);
        assert_eq!(c.ranks_seen, vec![0, 1, 2, 3]);
    }
}

#[test]
fn a_rank_that_skips_a_call_is_named() {
    for engine in engines() {
        let (a, _, _dir) = trace_and_analyze(engine, |c| {
            let mut x = vec![1i64; 8];
            c.all_reduce(&mut x, RedOp::Sum)?;
            if c.rank() != 3 {
                c.broadcast(&mut x, 0)?;
            }
            c.all_reduce(&mut x, RedOp::Sum)
        });
        let f = first_error(&a);
        assert!(
            matches!(f.kind, FindingKind::OpMismatch | FindingKind::Stopped),
            "{:?}: {}",
            f.kind,
            a.verdict
        );
        assert_eq!(f.ranks, vec![3], "{}", a.verdict);
        assert_eq!(f.position, Some(1));
    }
}

#[test]
fn a_rank_that_stops_is_a_likely_hang() {
    for engine in engines() {
        let (a, _, _dir) = trace_and_analyze(engine, |c| {
            let mut x = vec![1u8; 4];
            c.all_reduce(&mut x, RedOp::Sum)?;
            if c.rank() == 1 {
                return Ok(());
            }
            c.all_reduce(&mut x, RedOp::Max)
        });
        let f = first_error(&a);
        assert_eq!(f.kind, FindingKind::Stopped, "{}", a.verdict);
        assert_eq!(f.ranks, vec![1]);
        assert!(
            a.verdict
                .starts_with("hang: rank 1 never issued AllReduce #1"),
            "{}",
            a.verdict
        );
    }
}

#[test]
fn the_binary_reads_the_trace_file_and_exits_1() {
    for engine in engines() {
        let (_, path, _dir) = trace_and_analyze(engine, |c| {
            let mut x = vec![0i32; 2];
            let root = if c.rank() == 0 { 1 } else { 0 };
            c.broadcast(&mut x, root)
        });
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_rankwise"))
            .args(["logs", "analyze"])
            .arg(&path)
            .output()
            .unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert_eq!(out.status.code(), Some(1), "{text}");
        assert!(text.to_lowercase().contains("root"), "{text}");
    }
}
