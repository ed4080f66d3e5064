//! The integration tests' one door to every engine: a test runs its rank
//! program through [`launch`] or [`launch_each`] once per engine of
//! [`engines`], so an engine joins the whole suite by joining
//! `EngineKind::ALL`.
//!
//! `RANKWISE_TEST_ENGINES=local,mpi` picks (and orders) the engines; by
//! default every engine of this build that can run here. An engine that
//! cannot run here (no GPU, say) is reported as skipped on stderr, never
//! silently dropped.
//!
//! The mpi engine runs one rank per process: run a test binary under
//! `mpirun -n 4 … --test-threads=1` with `RANKWISE_TEST_ENGINES=mpi`, and
//! every process runs every test; each launch's results are shared by all
//! processes (serialised), so each process checks every rank's outputs.

use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::{Comm, Result};
use serde::{Serialize, de::DeserializeOwned};
use std::sync::Once;

pub use crate::skipped;

/// The engines to run each test on.
pub fn engines() -> Vec<EngineKind> {
    let asked = std::env::var("RANKWISE_TEST_ENGINES")
        .ok()
        .filter(|l| !l.trim().is_empty());
    let wanted: Vec<EngineKind> = match &asked {
        Some(list) => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("RANKWISE_TEST_ENGINES: {e}"))
            })
            .collect(),
        None => EngineKind::ALL.to_vec(),
    };
    static SKIPS: Once = Once::new();
    let mut skipped = Vec::new();
    let runnable = wanted
        .into_iter()
        .filter(|e| {
            let why = match e.available() {
                // one rank per process: only in a job made for it, or every
                // process would also run the other engines' copies of a test
                Ok(()) if e.name() == "mpi" && asked.is_none() => Err(
                    "runs only where asked for: RANKWISE_TEST_ENGINES=mpi mpirun -n 4 <test binary> --test-threads=1 (.ci/run does)".to_string(),
                ),
                Err(why) if e.name() == "mpi" => Err(format!(
                    "{why}; run RANKWISE_TEST_ENGINES=mpi mpirun -n 4 <test binary> --test-threads=1 (.ci/run does)"
                )),
                other => other,
            };
            match why {
                Ok(()) => true,
                Err(why) => {
                    skipped.push(format!("engine {e}: {why}"));
                    false
                }
            }
        })
        .collect();
    SKIPS.call_once(|| {
        for line in &skipped {
            crate::skipped(line);
        }
    });
    runnable
}

/// The most ranks one launch of `engine` can have here, where there is
/// such a bound: the mpi engine has as many as the job has processes.
pub fn max_ranks(engine: EngineKind) -> Option<usize> {
    match engine {
        #[cfg(feature = "mpi")]
        EngineKind::Mpi => rankwise::mpi::job_size().ok(),
        _ => None,
    }
}

/// Whether `engine` can run `n` ranks here; where it cannot, says once per
/// engine that `what` skips such launches.
pub fn fits(engine: EngineKind, n: usize, what: &str) -> bool {
    let Some(max) = max_ranks(engine) else {
        return true;
    };
    if n <= max {
        return true;
    }
    static SAID: std::sync::Mutex<Vec<String>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{what} on {engine}");
    let mut said = SAID.lock().unwrap();
    if !said.contains(&key) {
        skipped(format!(
            "{key}: launches of more than {max} ranks (this job's processes) are skipped"
        ));
        said.push(key);
    }
    false
}

/// Runs `program` on `n` ranks of `engine` with `opts`; each rank's result.
pub fn launch_each<T, F>(
    engine: EngineKind,
    opts: LaunchOptions,
    n: usize,
    program: F,
) -> Result<Vec<Result<T>>>
where
    T: Send + Serialize + DeserializeOwned,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    // names the engine in a failing test's captured output
    eprintln!("engine {engine}, {n} ranks");
    match engine {
        #[cfg(feature = "mpi")]
        EngineKind::Mpi => {
            // every process must make the same launches in the same order
            static ONE_AT_A_TIME: std::sync::Mutex<()> = std::sync::Mutex::new(());
            // a test that failed while holding it does not make the
            // others fail: only a second test running at once does
            let _alone = match ONE_AT_A_TIME.try_lock() {
                Ok(guard) => guard,
                Err(std::sync::TryLockError::Poisoned(p)) => p.into_inner(),
                Err(std::sync::TryLockError::WouldBlock) => {
                    panic!("tests on the mpi engine run one at a time: pass --test-threads=1")
                }
            };
            rankwise::mpi::launch_each(opts, n, program)
        }
        _ => launch::launch_each(engine, opts, n, program),
    }
}

/// Runs `program` on `n` ranks of `engine` with default options; every
/// rank's value, or the error that caused the others.
pub fn launch<T, F>(engine: EngineKind, n: usize, program: F) -> Result<Vec<T>>
where
    T: Send + Serialize + DeserializeOwned,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    launch::all_ok(launch_each(engine, LaunchOptions::default(), n, program)?)
}

/// As [`launch`], with `opts`.
pub fn launch_with<T, F>(
    engine: EngineKind,
    opts: LaunchOptions,
    n: usize,
    program: F,
) -> Result<Vec<T>>
where
    T: Send + Serialize + DeserializeOwned,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    launch::all_ok(launch_each(engine, opts, n, program)?)
}
