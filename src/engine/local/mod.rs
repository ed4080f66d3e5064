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
pub use families::{last_level_cache, reduction_block_bytes, streams_footprint};
pub mod memory;
mod p2p;
mod post;
mod sync;
pub(crate) mod world;

pub use engine::LocalEngine;
/// Where the engine changes path (tests place calls on both sides): a call
/// of at most [`PAYLOAD_BYTES`] rides in the mailbox; below
/// [`ALONE_BYTES`] (or [`ALONE_BYTES_OVERSUBSCRIBED`] with more ranks than
/// cores) one rank computes a launch alone.
pub use exec::{ALONE_BYTES, ALONE_BYTES_OVERSUBSCRIBED};
pub use post::PAYLOAD_BYTES;

use crate::core::{Error, ErrorKind, Result};
use std::sync::Arc;
use std::time::Duration;
use world::World;

/// The ranks of one new communicator in this process: each rank's thread
/// takes its end with [`Ranks::engine`] (the launcher, `launch::local`,
/// makes the threads).
pub struct Ranks {
    world: Arc<World>,
}

impl Ranks {
    /// `nranks` ranks whose waits last at most `timeout`. Without
    /// `check_agreement` the ranks skip the cross-rank comparison (see
    /// `LaunchOptions::without_agreement_checks`); `pinned` says the
    /// launcher pins rank r's thread to core r, so waits may spin longer.
    pub fn new(
        nranks: usize,
        timeout: Duration,
        check_agreement: bool,
        pinned: bool,
    ) -> Result<Ranks> {
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
        let world = World::new(
            nranks,
            timeout,
            id,
            world::Threads::new(nranks, check_agreement, pinned),
        );
        Ok(Ranks { world })
    }

    /// Rank `rank`'s end of the communicator.
    pub fn engine(&self, rank: usize) -> LocalEngine {
        LocalEngine::new(self.world.clone(), rank)
    }
}
