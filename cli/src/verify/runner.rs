//! Runs a plan on the local engine: one communicator per layer, every rank
//! running the layer's cases in order (as the seed ran each layer in one
//! process group) and writing its own CSV as it goes. The layer's trace is
//! captured in memory and saved beside the CSVs.
//!
//! A rank whose call fails unexpectedly records the failure, marks the
//! remaining cases "not run" and leaves: the communicator then fails on
//! every other rank at once (no waiting out a deadline), and every rank
//! file is still complete, so the summary shows exactly what failed.

use super::cases::{Actual, Expect, Layer, LayerPlan, Plan, Suite};
use super::records::{self, Manifest, ManifestLayer, RankWriter, Row};
use rankwise::core::{Error, ErrorKind};
use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::trace::Tracer;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What one layer's run left besides its CSVs.
#[derive(Debug)]
pub struct LayerRun {
    pub layer: Layer,
    /// Per rank: the communicator's opCount before each case (None for a
    /// rank whose program failed).
    pub op_counts: Vec<Option<Vec<u64>>>,
    /// The trace lines of all ranks, in print order.
    pub trace: Vec<String>,
    /// Ranks whose program ended in an error, with the error.
    pub failures: Vec<String>,
    pub elapsed: Duration,
}

/// The manifest a plan declares.
pub fn manifest(plan: &Plan, run_id: &str, engine: &str) -> Manifest {
    Manifest {
        tool: "rankwise".into(),
        version: env!("CARGO_PKG_VERSION").into(),
        run_id: run_id.into(),
        suite: plan.suite.name().into(),
        ranks: plan.n,
        engine: engine.into(),
        layers: plan
            .layers
            .iter()
            .map(|l| ManifestLayer {
                name: l.layer.name().into(),
                rows_per_rank: l.rows_per_rank(),
                rows: l.rows_per_rank() * plan.n,
                records: l.records(plan.n),
            })
            .collect(),
        adaptations: plan.adaptations.clone(),
    }
}

fn io(e: std::io::Error) -> Error {
    Error::new(ErrorKind::System, format!("cannot write a rank file: {e}"))
}

/// Runs one layer on `n` ranks of `engine`; `progress` is called once per row written.
pub fn run_layer(
    engine: EngineKind,
    plan: &LayerPlan,
    n: usize,
    run_id: &str,
    out: &Path,
    timeout: Duration,
    progress: &(dyn Fn() + Sync),
) -> Result<LayerRun, Error> {
    let start = Instant::now();
    let (tracer, lines) = Tracer::memory();
    let opts = LaunchOptions::default()
        .with_tracer(tracer)
        .with_timeout(timeout);
    let layer = plan.layer;
    #[cfg(feature = "mpi")]
    if engine == EngineKind::Mpi {
        return run_layer_mpi(opts, plan, n, run_id, out, &lines, start);
    }
    let (results, trace) = if engine.uses_processes() {
        let (results, trace) = run_layer_processes(engine, &opts, plan, n, run_id, out)?;
        // the children wrote their rows; the bar moves once they are in
        for _ in 0..plan.cases.len() * n {
            progress();
        }
        (results, trace)
    } else {
        let results = launch::launch_each(engine, opts, n, |comm| {
            run_rank(comm, plan, n, run_id, out, progress)
        })?;
        let trace = lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
        (results, trace)
    };
    Ok(layer_run(layer, results, trace, start))
}

/// What a layer left, from every rank's result and the trace.
fn layer_run(
    layer: Layer,
    results: Vec<Result<Vec<u64>, Error>>,
    trace: Vec<String>,
    start: Instant,
) -> LayerRun {
    let mut op_counts = Vec::with_capacity(results.len());
    let mut failures = Vec::new();
    for (rank, r) in results.into_iter().enumerate() {
        match r {
            Ok(ops) => op_counts.push(Some(ops)),
            Err(e) => {
                failures.push(format!("rank {rank}: {e}"));
                op_counts.push(None);
            }
        }
    }
    LayerRun {
        layer,
        op_counts,
        trace,
        failures,
        elapsed: start.elapsed(),
    }
}

/// A layer on the mpi engine, run by every process of the MPI job (this
/// one is one rank): each rank writes its own CSV; every rank's opCounts
/// come back from the launch and every rank's trace lines are gathered,
/// so each process holds the whole layer's record (rank 0 reports it).
#[cfg(feature = "mpi")]
fn run_layer_mpi(
    opts: LaunchOptions,
    plan: &LayerPlan,
    n: usize,
    run_id: &str,
    out: &Path,
    lines: &rankwise::trace::TraceBuffer,
    start: Instant,
) -> Result<LayerRun, Error> {
    let timeout = opts.timeout;
    let results =
        rankwise::mpi::launch_each(opts, n, |comm| run_rank(comm, plan, n, run_id, out, &|| {}))?;
    let mine = lines.lock().unwrap_or_else(|p| p.into_inner()).join("\n");
    let mut trace = Vec::new();
    for (rank, text) in rankwise::mpi::share(mine.as_bytes(), timeout)?
        .into_iter()
        .take(n)
        .enumerate()
    {
        let text = String::from_utf8(text).map_err(|_| {
            Error::new(
                ErrorKind::Internal,
                format!("rank {rank}'s trace lines are not UTF-8"),
            )
        })?;
        trace.extend(text.lines().map(str::to_string));
    }
    Ok(layer_run(plan.layer, results, trace, start))
}

/// One rank's run of a layer: every case in order, one CSV row each, into
/// the rank's own file; the communicator's opCount before each case.
fn run_rank(
    comm: &mut rankwise::Comm,
    plan: &LayerPlan,
    n: usize,
    run_id: &str,
    out: &Path,
    progress: &(dyn Fn() + Sync),
) -> Result<Vec<u64>, Error> {
    let layer = plan.layer;
    let rank = comm.rank();
    let mut w = RankWriter::create(&records::rank_file(out, layer.name(), rank)).map_err(io)?;
    let mut ops = Vec::with_capacity(plan.cases.len());
    let mut stopped: Option<(String, Error)> = None;
    for case in &plan.cases {
        ops.push(comm.op_count());
        let row = match &stopped {
            Some((why, _)) => not_run(run_id, case, n, rank, why),
            None => {
                let outcome = case.run(comm);
                if let Actual::Error(e) = &outcome.actual
                    && !matches!(case.expect(n, rank), Expect::Reject(_))
                {
                    let why = format!(
                        "rank {rank} stopped after {} / {} failed",
                        case.operation, case.variant
                    );
                    stopped = Some((why, e.clone()));
                }
                records::judge(run_id, case, n, rank, &outcome)
            }
        };
        w.write(&row).map_err(io)?;
        progress();
    }
    w.finish().map_err(io)?;
    match stopped {
        Some((_, e)) => Err(e),
        None => Ok(ops),
    }
}

/// The arguments of the `verify-layer` job: which layer of which plan, and
/// where its rows go.
#[derive(serde::Serialize, serde::Deserialize)]
struct LayerJob {
    suite: String,
    n: usize,
    layer: String,
    /// the layer's cases, so a child whose plan differs refuses to run
    cases: usize,
    run_id: String,
    out: PathBuf,
}

/// The jobs a rank process of the `rankwise` binary can run
/// (`launch::process`), by name.
pub const JOBS: [(&str, rankwise::launch::process::Handler); 1] = [("verify-layer", layer_job)];

/// The `verify-layer` job of a rank process: the same rank body as a
/// thread of the local engine runs; returns the opCounts.
pub fn layer_job(
    comm: &mut rankwise::Comm,
    args: &serde_json::Value,
) -> Result<serde_json::Value, Error> {
    let bad = |what: &str| Error::new(ErrorKind::InvalidUsage, format!("verify-layer job: {what}"));
    let job: LayerJob = serde_json::from_value(args.clone()).map_err(|e| bad(&e.to_string()))?;
    let suite = Suite::parse(&job.suite).ok_or_else(|| bad("unknown suite"))?;
    let layer = Layer::parse(&job.layer).ok_or_else(|| bad("unknown layer"))?;
    let plan = super::cases::plan(suite, job.n);
    let lp = plan
        .layer(layer)
        .ok_or_else(|| bad("layer not in the plan"))?;
    if lp.cases.len() != job.cases {
        return Err(bad(&format!(
            "the {} plan of {} has {} cases here, the launcher's has {}",
            job.layer,
            job.suite,
            lp.cases.len(),
            job.cases
        )));
    }
    let ops = run_rank(comm, lp, job.n, &job.run_id, &job.out, &|| {})?;
    serde_json::to_value(ops).map_err(|e| bad(&e.to_string()))
}

/// A layer on rank processes: each child writes its own CSV; their
/// opCounts and trace lines come back through the launcher.
#[allow(clippy::type_complexity)]
fn run_layer_processes(
    engine: EngineKind,
    opts: &LaunchOptions,
    plan: &LayerPlan,
    n: usize,
    run_id: &str,
    out: &Path,
) -> Result<(Vec<Result<Vec<u64>, Error>>, Vec<String>), Error> {
    let suite = plan_suite(plan, n);
    let args = serde_json::to_value(LayerJob {
        suite: suite.name().into(),
        n,
        layer: plan.layer.name().into(),
        cases: plan.cases.len(),
        run_id: run_id.into(),
        out: std::path::absolute(out).unwrap_or_else(|_| out.to_path_buf()),
    })
    .map_err(|e| Error::new(ErrorKind::Internal, e.to_string()))?;
    let job = launch::process::Job {
        name: "verify-layer".into(),
        args,
        capture_trace: true,
    };
    let reports = launch::process::run_job(engine, opts, n, &job, None)?;
    let mut trace = Vec::new();
    let mut results = Vec::with_capacity(n);
    for r in reports {
        trace.extend(r.trace);
        results.push(r.result.and_then(|v| {
            serde_json::from_value::<Vec<u64>>(v)
                .map_err(|e| Error::new(ErrorKind::Internal, format!("opCounts: {e}")))
        }));
    }
    Ok((results, trace))
}

/// Which suite declares this layer plan at N (the children rebuild the
/// plan from its name): the seed when its cases are the seed's.
fn plan_suite(plan: &LayerPlan, n: usize) -> Suite {
    let seed = super::cases::plan(Suite::Seed, n);
    match seed.layer(plan.layer) {
        Some(l) if l.cases.len() == plan.cases.len() => Suite::Seed,
        _ => Suite::Full,
    }
}

fn not_run(run_id: &str, case: &super::cases::Case, n: usize, rank: usize, why: &str) -> Row {
    Row {
        run_id: run_id.into(),
        layer: case.layer.name().into(),
        rank,
        world_size: n,
        operation: case.operation.clone(),
        variant: case.variant.clone(),
        pointer_relation: case.relation(n, rank),
        addresses: String::new(),
        dtype: case.dtype.name().into(),
        count: case.count(n, rank),
        expected: records::expected_text(&case.expect(n, rank)),
        actual: String::new(),
        correct: false,
        note: format!("not run: {why}"),
    }
}

/// Saves a layer's trace as `<run>/trace/<layer>.log`.
pub fn save_trace(out: &Path, run: &LayerRun) -> std::io::Result<()> {
    let dir = out.join("trace");
    std::fs::create_dir_all(&dir)?;
    let mut text = run.trace.join("\n");
    text.push('\n');
    std::fs::write(dir.join(format!("{}.log", run.layer.name())), text)
}

/// How many runs may share one second (and so one run id) under one
/// `runs` directory: `<id>`, `<id>-2`, … `<id>-10000`.
pub const MAX_RUNS_PER_SECOND: usize = 10_000;

/// Creates a run's directory and claims it for this run alone: `out` when
/// given (it must not exist, or be an empty directory), else a new
/// `<runs>/<run_id>` (`<run_id>-2`, `-3`, … when runs share a second).
///
/// Both steps are create-new operations, which the file system grants to
/// one caller only: the directory (`mkdir`), then its `manifest.json`
/// (`O_EXCL`), written in full later. So runs started together, in one
/// process or many, never share a directory, and of several runs given one
/// `--out` exactly one proceeds.
pub fn create_run_dir(out: Option<&Path>, runs: &Path, run_id: &str) -> Result<PathBuf, String> {
    let dir = match out {
        Some(p) => {
            create_out(p)?;
            p.to_path_buf()
        }
        None => create_numbered(runs, run_id)?,
    };
    let taken = || {
        format!(
            "{} already holds a run ({}): choose another --out (verify never overwrites a run)",
            dir.display(),
            records::MANIFEST
        )
    };
    match std::fs::File::options()
        .write(true)
        .create_new(true)
        .open(dir.join(records::MANIFEST))
    {
        Ok(_) => Ok(dir),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Err(taken()),
        Err(e) => Err(format!(
            "cannot create {}: {e}",
            dir.join(records::MANIFEST).display()
        )),
    }
}

/// `--out`: made here, or an empty directory made before.
fn create_out(p: &Path) -> Result<(), String> {
    if let Some(parent) = p.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
    }
    match std::fs::create_dir(p) {
        Ok(()) => return Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => return Err(format!("cannot create {}: {e}", p.display())),
    }
    if !p.is_dir() {
        return Err(format!(
            "{} exists and is not a directory: choose another --out",
            p.display()
        ));
    }
    if std::fs::symlink_metadata(p.join(records::MANIFEST)).is_ok() {
        return Err(format!(
            "{} already holds a run ({}): choose another --out (verify never overwrites a run)",
            p.display(),
            records::MANIFEST
        ));
    }
    let mut entries =
        std::fs::read_dir(p).map_err(|e| format!("cannot read {}: {e}", p.display()))?;
    let Some(first) = entries.next() else {
        return Ok(());
    };
    let name = first
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .unwrap_or_default();
    Err(format!(
        "{} is not empty (it holds {name}{}): choose another --out (verify writes only into a new or empty directory)",
        p.display(),
        if entries.next().is_some() {
            ", …"
        } else {
            ""
        }
    ))
}

/// The first of `<runs>/<id>`, `<id>-2`, … that this call creates.
fn create_numbered(runs: &Path, run_id: &str) -> Result<PathBuf, String> {
    std::fs::create_dir_all(runs).map_err(|e| format!("cannot create {}: {e}", runs.display()))?;
    for k in 1..=MAX_RUNS_PER_SECOND {
        let dir = match k {
            1 => runs.join(run_id),
            k => runs.join(format!("{run_id}-{k}")),
        };
        match std::fs::create_dir(&dir) {
            Ok(()) => return Ok(dir),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => return Err(format!("cannot create {}: {e}", dir.display())),
        }
    }
    Err(format!(
        "{} already holds {MAX_RUNS_PER_SECOND} runs with id {run_id}: choose a directory with --out",
        runs.display()
    ))
}

/// `20260710T073928Z`: the UTC time now, as the seed names its runs.
pub fn utc_run_id() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_secs())
        .unwrap_or(0);
    format_utc(secs)
}

/// Formats seconds since the Unix epoch as `YYYYMMDDTHHMMSSZ`.
pub fn format_utc(secs: u64) -> String {
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    // civil date from days since 1970-01-01 (Howard Hinnant's algorithm)
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z - era * 146_097;
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Barrier;

    /// `threads` threads each call `create_run_dir` at the same moment.
    fn at_once(
        threads: usize,
        call: impl Fn() -> Result<std::path::PathBuf, String> + Sync,
    ) -> Vec<Result<std::path::PathBuf, String>> {
        let start = Barrier::new(threads);
        std::thread::scope(|s| {
            let handles: Vec<_> = (0..threads)
                .map(|_| {
                    s.spawn(|| {
                        start.wait();
                        call()
                    })
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn runs_in_one_second_each_get_a_new_directory() {
        const THREADS: usize = 16;
        for _ in 0..20 {
            let tmp = tempfile::tempdir().unwrap();
            let runs = tmp.path().join("runs");
            let made = at_once(THREADS, || create_run_dir(None, &runs, "20260101T000000Z"));
            let mut dirs: Vec<_> = made.into_iter().map(|r| r.unwrap()).collect();
            dirs.sort();
            dirs.dedup();
            assert_eq!(dirs.len(), THREADS, "two runs got one directory: {dirs:?}");
            let mut expected: Vec<_> = (1..=THREADS)
                .map(|k| match k {
                    1 => runs.join("20260101T000000Z"),
                    k => runs.join(format!("20260101T000000Z-{k}")),
                })
                .collect();
            expected.sort();
            assert_eq!(dirs, expected);
        }
    }

    #[test]
    fn one_out_directory_goes_to_one_run() {
        const THREADS: usize = 16;
        for _ in 0..20 {
            let tmp = tempfile::tempdir().unwrap();
            let out = tmp.path().join("deep").join("out");
            let made = at_once(THREADS, || {
                create_run_dir(Some(&out), Path::new("unused"), "x")
            });
            let won: Vec<_> = made.iter().filter(|r| r.is_ok()).collect();
            assert_eq!(won.len(), 1, "{made:?}");
            for r in &made {
                if let Err(e) = r {
                    assert!(e.contains("choose another --out"), "{e}");
                }
            }
        }
    }

    #[test]
    fn an_existing_out_must_be_an_empty_directory() {
        let tmp = tempfile::tempdir().unwrap();
        let empty = tmp.path().join("empty");
        std::fs::create_dir(&empty).unwrap();
        assert_eq!(
            create_run_dir(Some(&empty), tmp.path(), "x"),
            Ok(empty.clone())
        );
        std::fs::create_dir(empty.join("raw")).unwrap();
        let e = create_run_dir(Some(&empty), tmp.path(), "x").unwrap_err();
        assert!(e.ends_with("empty already holds a run (manifest.json): choose another --out (verify never overwrites a run)"), "{e}");
        let notes = tmp.path().join("notes");
        std::fs::create_dir(&notes).unwrap();
        std::fs::write(notes.join("a.txt"), "").unwrap();
        let e = create_run_dir(Some(&notes), tmp.path(), "x").unwrap_err();
        assert!(e.ends_with("notes is not empty (it holds a.txt): choose another --out (verify writes only into a new or empty directory)"), "{e}");
        let e = create_run_dir(Some(&notes.join("a.txt")), tmp.path(), "x").unwrap_err();
        assert!(
            e.ends_with("a.txt exists and is not a directory: choose another --out"),
            "{e}"
        );
    }

    #[test]
    fn utc_format_known_instants() {
        assert_eq!(format_utc(0), "19700101T000000Z");
        assert_eq!(format_utc(951_782_400), "20000229T000000Z");
        // 2026-07-10 07:39:28 UTC, the seed's run
        assert_eq!(format_utc(1_783_669_168), "20260710T073928Z");
        assert_eq!(format_utc(4_102_444_799), "20991231T235959Z");
    }
}
