//! The local engine: ranks are threads of this process sharing one address
//! space. Every rank posts its call in its mailbox (`post`). A small call
//! carries a copy of its send buffer there, and each rank computes its own
//! results from the copies (`families::own`). A larger one needs no staging
//! copies: after every rank has posted, each rank moves its share of the
//! data directly between the other ranks' buffers (`families`).
//! Point-to-point calls meet in per-pair queues (`p2p`). Every wait is
//! bounded (`world`, `sync`), and a wait no rank can end is diagnosed
//! (`diagnose`). [`LocalEngine`] is one rank's end of a communicator.

mod diagnose;
mod engine;
pub(crate) mod exec;
mod families;
pub use families::last_level_cache;
pub mod memory;
mod p2p;
mod post;
mod sync;
pub(crate) mod world;

pub use crate::launch::LaunchOptions;
pub use engine::LocalEngine;

use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use world::World;

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

pub fn launch_with<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    crate::launch::all_ok(launch_each(opts, nranks, program)?)
}

/// Like [`launch`], but returns each rank's own result, errors included.
pub fn launch_each<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    if nranks == 0 {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            "a communicator needs at least 1 rank, 0 given",
        ));
    }
    if nranks > u32::MAX as usize / 2 {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            format!("{nranks} ranks is more than the local engine supports"),
        ));
    }
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ^ ((std::process::id() as u64) << 32);
    let pinned = opts.pin_threads
        && core_affinity::get_core_ids().is_some_and(|cores| nranks <= cores.len());
    let world = World::new(
        nranks,
        opts.timeout,
        id,
        world::Threads::new(nranks, opts.check_agreement, pinned),
    );
    let make = |rank: usize| {
        let engine = LocalEngine::new(world.clone(), rank);
        Ok(Comm::new(
            Box::new(engine),
            opts.tracer.for_rank(rank),
            opts.poison,
        ))
    };
    crate::launch::threads::run(nranks, opts.pin_threads, make, &program)
}
