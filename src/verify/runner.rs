//! Runs a plan on the local engine: one communicator per layer, every rank
//! running the layer's cases in order (as the seed ran each layer in one
//! process group) and writing its own CSV as it goes. The layer's trace is
//! captured in memory and saved beside the CSVs.
//!
//! A rank whose call fails unexpectedly records the failure, marks the
//! remaining cases "not run" and leaves: the communicator then fails on
//! every other rank at once (no waiting out a deadline), and every rank
//! file is still complete, so the summary shows exactly what failed.

use super::cases::{Actual, Expect, Layer, LayerPlan, Plan};
use super::records::{self, Manifest, ManifestLayer, RankWriter, Row};
use crate::core::{Error, ErrorKind};
use crate::engine::local::{self, LaunchOptions};
use crate::trace::Tracer;
use std::path::Path;
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

/// Runs one layer on `plan.n` local ranks; `progress` is called once per row written.
pub fn run_layer(
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
    let results = local::launch_each(opts, n, |comm| {
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
    })?;
    let mut op_counts = Vec::with_capacity(n);
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
    let trace = lines.lock().unwrap_or_else(|p| p.into_inner()).clone();
    Ok(LayerRun {
        layer,
        op_counts,
        trace,
        failures,
        elapsed: start.elapsed(),
    })
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

    #[test]
    fn utc_format_known_instants() {
        assert_eq!(format_utc(0), "19700101T000000Z");
        assert_eq!(format_utc(951_782_400), "20000229T000000Z");
        // 2026-07-10 07:39:28 UTC, the seed's run
        assert_eq!(format_utc(1_783_669_168), "20260710T073928Z");
        assert_eq!(format_utc(4_102_444_799), "20991231T235959Z");
    }
}
