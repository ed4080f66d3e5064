//! Running one misuse scenario on an engine: every rank's error, the time
//! it took to arrive, and the bytes changed outside the call's legal
//! outputs, judged against what the scenario expects.

use super::guards::Guards;
use rankwise::core::{Error, ErrorKind};
use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::trace::Tracer;
use rankwise::{Comm, Result};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Every rank must have its error within this time.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// The wait timeout for scenarios where a rank never arrives.
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

/// A scenario's rank program.
pub type Program = fn(&mut Comm, &mut Guards) -> Result<()>;

/// One misuse scenario.
pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    /// What NCCL 2.28.9 did with it, rankwise's checks off (observed).
    pub nccl: &'static str,
    pub ranks: usize,
    /// The error kind each rank must return (None: the rank succeeds).
    pub expect: fn(usize) -> Option<ErrorKind>,
    pub short_timeout: bool,
    /// The expected kinds come from deadlock diagnosis (a cycle of waits,
    /// a Send whose peer waits elsewhere): an engine without it
    /// ([`rankwise::engine::Capabilities::diagnoses_deadlock`]) can only end
    /// the scenario in its timeout, so there every rank must return
    /// Timeout, and the scenario runs with the short timeout to stay
    /// within [`DEADLINE`] ([`expected`], [`timeout`]).
    pub needs_diagnosis: bool,
    pub program: Program,
}

/// What each rank of `s` must return on `engine`: the scenario's own
/// kinds, or Timeout on every rank where the kinds need a deadlock
/// diagnosis that the engine does not make.
pub fn expected(s: &Scenario, engine: EngineKind) -> Vec<Option<ErrorKind>> {
    if s.needs_diagnosis && !engine.capabilities().diagnoses_deadlock {
        vec![Some(ErrorKind::Timeout); s.ranks]
    } else {
        (0..s.ranks).map(s.expect).collect()
    }
}

/// The wait timeout `s` runs with on `engine`.
pub fn timeout(s: &Scenario, engine: EngineKind) -> Duration {
    if s.short_timeout || (s.needs_diagnosis && !engine.capabilities().diagnoses_deadlock) {
        SHORT_TIMEOUT
    } else {
        Duration::from_secs(30)
    }
}

/// What one rank did.
#[derive(Debug, Clone)]
pub struct RankOutcome {
    pub error: Option<Error>,
    pub elapsed: Duration,
    pub violations: usize,
}

/// What a scenario did on every rank, and whether that passes.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: &'static str,
    pub ranks: Vec<RankOutcome>,
    pub expected: Vec<Option<ErrorKind>>,
    pub passed: bool,
}

impl Outcome {
    pub fn slowest(&self) -> Duration {
        self.ranks
            .iter()
            .map(|r| r.elapsed)
            .max()
            .unwrap_or_default()
    }
    /// `Mismatch on all 4 ranks`, or `OutOfBounds on 1; RemoteError on 0,2,3`.
    pub fn summary(&self) -> String {
        let kind = |r: &RankOutcome| {
            r.error
                .as_ref()
                .map(|e| format!("{:?}", e.kind))
                .unwrap_or_else(|| "ok".into())
        };
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (r, o) in self.ranks.iter().enumerate() {
            let k = kind(o);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, rs)) => rs.push(r),
                None => groups.push((k, vec![r])),
            }
        }
        if groups.len() == 1 {
            return format!("{} on all {} ranks", groups[0].0, self.ranks.len());
        }
        groups.sort_by_key(|(_, rs)| rs.len());
        groups
            .iter()
            .map(|(k, rs)| {
                format!(
                    "{k} on {}",
                    rs.iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
    /// Why it failed, for the report.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (r, (o, want)) in self.ranks.iter().zip(&self.expected).enumerate() {
            match (&o.error, want) {
                (None, Some(w)) => out.push(format!("rank {r}: no error, expected {w:?}")),
                (Some(e), Some(w)) if e.kind != *w => {
                    out.push(format!("rank {r}: {e} (expected {w:?})"))
                }
                (Some(e), None) => out.push(format!("rank {r}: {e} (expected success)")),
                _ => {}
            }
            if o.elapsed > DEADLINE {
                out.push(format!(
                    "rank {r}: took {:?} (limit {DEADLINE:?})",
                    o.elapsed
                ));
            }
            if o.violations > 0 {
                out.push(format!(
                    "rank {r}: {} bytes changed outside the call's legal outputs",
                    o.violations
                ));
            }
        }
        out
    }
}

/// Runs one scenario on `engine` (ranks as threads of this process; the
/// mpi engine's processes run it with [`run_mpi`]).
pub fn run(engine: EngineKind, s: &Scenario) -> Outcome {
    let opts = LaunchOptions::default()
        .with_timeout(timeout(s, engine))
        .with_tracer(Tracer::off());
    let extra: Mutex<Vec<(Duration, usize)>> = Mutex::new(vec![(Duration::ZERO, 0); s.ranks]);
    let start = Instant::now();
    let results = launch::launch_each(engine, opts, s.ranks, |c| {
        let mut g = Guards::default();
        let r = (s.program)(c, &mut g);
        let v = g.violations(c);
        extra.lock().unwrap_or_else(|p| p.into_inner())[c.rank()] = (start.elapsed(), v);
        r
    });
    let extra = extra.into_inner().unwrap_or_else(|p| p.into_inner());
    let ranks: Vec<RankOutcome> = match results {
        Ok(rs) => rs
            .into_iter()
            .zip(extra)
            .map(|(r, (t, v))| RankOutcome {
                error: r.err(),
                // a rank that panicked recorded nothing: its time is the launch's
                elapsed: if t.is_zero() { start.elapsed() } else { t },
                violations: v,
            })
            .collect(),
        Err(e) => vec![
            RankOutcome {
                error: Some(e),
                elapsed: start.elapsed(),
                violations: 0
            };
            s.ranks
        ],
    };
    judge(s, ranks, expected(s, engine))
}

fn judge(s: &Scenario, ranks: Vec<RankOutcome>, expected: Vec<Option<ErrorKind>>) -> Outcome {
    let passed = ranks.len() == expected.len()
        && ranks.iter().zip(&expected).all(|(o, want)| {
            o.error.as_ref().map(|e| e.kind) == *want && o.elapsed <= DEADLINE && o.violations == 0
        });
    Outcome {
        name: s.name,
        ranks,
        expected,
        passed,
    }
}

/// One rank's outcome as it crosses between processes.
#[cfg(feature = "mpi")]
#[derive(serde::Serialize, serde::Deserialize)]
struct WireOutcome {
    error: Option<Error>,
    seconds: f64,
    violations: usize,
}

/// Runs one scenario on the mpi engine, one rank per process: every
/// process of the MPI job must call it, in the same order, and each gets
/// every rank's outcome (the job needs at least `s.ranks` processes; the
/// others take no part). Each rank times its own error from the start of
/// the launch, which every process enters together, and checks its own
/// guards; a rank whose program fails or panics tells the others at once.
#[cfg(feature = "mpi")]
pub fn run_mpi(s: &Scenario) -> Result<Outcome> {
    let engine = EngineKind::Mpi;
    let opts = LaunchOptions::default()
        .with_timeout(timeout(s, engine))
        .with_tracer(Tracer::off());
    let start = Instant::now();
    let results = rankwise::mpi::launch_each(opts, s.ranks, |c| {
        let rank = c.rank();
        let mut g = Guards::default();
        let r = rankwise::launch::run_catching(rank, || (s.program)(c, &mut g));
        let seconds = start.elapsed().as_secs_f64();
        let violations = g.violations(c);
        if let Err(e) = &r {
            // as a failing program ends: the others learn why at once
            c.finish(Some(e));
        }
        Ok(WireOutcome {
            error: r.err(),
            seconds,
            violations,
        })
    })?;
    let ranks = results
        .into_iter()
        .map(|r| match r {
            Ok(w) => RankOutcome {
                error: w.error,
                elapsed: Duration::from_secs_f64(w.seconds.max(0.0)),
                violations: w.violations,
            },
            Err(e) => RankOutcome {
                error: Some(e),
                elapsed: start.elapsed(),
                violations: 0,
            },
        })
        .collect();
    Ok(judge(s, ranks, expected(s, engine)))
}
