//! Ranks of the local engine as threads of this process: the library's
//! front door (`rankwise::local::launch`).

pub use super::LaunchOptions;

use crate::api::Comm;
use crate::core::Result;
use crate::engine::local::Ranks;

/// Runs `program` on `nranks` ranks (threads) of one communicator and returns
/// every rank's value, or the first rank's error that is not merely a
/// consequence of another rank's failure.
pub fn launch<T, F>(nranks: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    launch_with(LaunchOptions::default(), nranks, program)
}

/// [`launch`] with explicit options (timeout, trace, poison, pinning).
pub fn launch_with<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    super::all_ok(launch_each(opts, nranks, program)?)
}

/// Like [`launch`], but returns each rank's own result, errors included.
pub fn launch_each<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    let pinned = opts.pin_threads
        && core_affinity::get_core_ids().is_some_and(|cores| nranks <= cores.len());
    let ranks = Ranks::new(nranks, opts.timeout, opts.check_agreement, pinned)?;
    let make = |rank: usize| {
        Ok(Comm::new(
            Box::new(ranks.engine(rank)),
            opts.tracer.for_rank(rank),
            opts.poison,
        ))
    };
    super::threads::run(nranks, opts.pin_threads, make, &program)
}
