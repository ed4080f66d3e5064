//! The integration tests' one door to every engine: a test runs its rank
//! program through [`launch`] or [`launch_each`] once per engine of
//! [`engines`], so an engine joins the whole suite by joining
//! `EngineKind::ALL`.
//!
//! `RANKWISE_TEST_ENGINES=local,nccl` picks (and orders) the engines; by
//! default every engine of this build that can run here. An engine that
//! cannot run here (no GPU, say) is reported as skipped on stderr, never
//! silently dropped.

use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::{Comm, Result};
use std::sync::Once;

/// The engines to run each test on.
pub fn engines() -> Vec<EngineKind> {
    let wanted: Vec<EngineKind> = match std::env::var("RANKWISE_TEST_ENGINES") {
        Ok(list) if !list.trim().is_empty() => list
            .split(',')
            .map(|s| {
                s.trim()
                    .parse()
                    .unwrap_or_else(|e| panic!("RANKWISE_TEST_ENGINES: {e}"))
            })
            .collect(),
        _ => EngineKind::ALL.to_vec(),
    };
    static SKIPS: Once = Once::new();
    let mut skipped = Vec::new();
    let runnable = wanted
        .into_iter()
        .filter(|e| match e.available() {
            Ok(()) => true,
            Err(why) => {
                skipped.push(format!("SKIPPED: engine {e}: {why}"));
                false
            }
        })
        .collect();
    SKIPS.call_once(|| {
        for line in &skipped {
            eprintln!("{line}");
        }
    });
    runnable
}

/// Runs `program` on `n` ranks of `engine` with `opts`; each rank's result.
pub fn launch_each<T, F>(
    engine: EngineKind,
    opts: LaunchOptions,
    n: usize,
    program: F,
) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    // names the engine in a failing test's captured output
    eprintln!("engine {engine}, {n} ranks");
    launch::launch_each(engine, opts, n, program)
}

/// Runs `program` on `n` ranks of `engine` with default options; every
/// rank's value, or the error that caused the others.
pub fn launch<T, F>(engine: EngineKind, n: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
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
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    launch::all_ok(launch_each(engine, opts, n, program)?)
}
