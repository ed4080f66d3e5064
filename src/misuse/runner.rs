//! Running one misuse scenario on an engine: every rank's error, the time
//! it took to arrive, and the bytes changed outside the call's legal
//! outputs, judged against what the scenario expects.

use super::guards::Guards;
use crate::core::{Error, ErrorKind};
use crate::launch::{self, EngineKind, LaunchOptions};
use crate::trace::Tracer;
use crate::{Comm, Result};
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
    pub program: Program,
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

/// Runs one scenario on `engine`.
pub fn run(engine: EngineKind, s: &Scenario) -> Outcome {
    let timeout = if s.short_timeout {
        SHORT_TIMEOUT
    } else {
        Duration::from_secs(30)
    };
    let opts = LaunchOptions::default()
        .with_timeout(timeout)
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
    let expected: Vec<Option<ErrorKind>> = (0..s.ranks).map(s.expect).collect();
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
    let passed = ranks.iter().zip(&expected).all(|(o, want)| {
        o.error.as_ref().map(|e| e.kind) == *want && o.elapsed <= DEADLINE && o.violations == 0
    });
    Outcome {
        name: s.name,
        ranks,
        expected,
        passed,
    }
}
