//! One rank's end of a local communicator: the [`Engine`] the communicator
//! holds. Its memory is the rank's allocation registry; a launch's posts
//! travel in the mailboxes of the launch's own rendezvous (`exec`), so
//! agreement costs no extra exchange.

use super::exec::{Scratch, execute};
use super::world::{World, lock};
use crate::core::{Error, ErrorKind, Launch, Posted, Result};
use crate::engine::host_memory::Registry;
use crate::engine::{Capabilities, Engine, Memory};
use std::sync::Arc;

pub struct LocalEngine {
    world: Arc<World>,
    rank: usize,
    registry: Registry,
    scratch: Scratch,
    /// communicators duplicated from this one so far
    dups: u64,
}

impl LocalEngine {
    pub const CAPABILITIES: Capabilities = Capabilities {
        name: "local",
        diagnoses_deadlock: true,
        needs_staging: false,
    };

    pub(crate) fn new(world: Arc<World>, rank: usize) -> LocalEngine {
        LocalEngine {
            world,
            rank,
            registry: Registry::default(),
            scratch: Scratch::default(),
            dups: 0,
        }
    }
}

impl Engine for LocalEngine {
    fn capabilities(&self) -> Capabilities {
        LocalEngine::CAPABILITIES
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.world.n
    }
    fn handle(&self) -> usize {
        &self.world.entered[self.rank] as *const _ as usize
    }
    fn comm_id(&self) -> u64 {
        self.world.comm_id
    }
    fn memory(&self) -> &dyn Memory {
        &self.registry
    }
    fn memory_mut(&mut self) -> &mut dyn Memory {
        &mut self.registry
    }

    fn exchange(&mut self, _mine: &Posted) -> Result<Vec<Posted>> {
        // posts travel inside `launch`'s rendezvous; nothing calls this
        Err(Error::new(
            ErrorKind::Internal,
            "the local engine exchanges posts inside its launch rendezvous",
        ))
    }

    fn execute(&mut self, launch: &Launch) -> Result<()> {
        self.launch(launch)
    }

    /// One rendezvous carries the posts, compares them with
    /// [`crate::core::agree`] and moves the data (`exec`).
    fn launch(&mut self, launch: &Launch) -> Result<()> {
        execute(&self.world, self.rank, launch, &mut self.scratch)
    }

    fn failure(&self) -> Option<Error> {
        self.world
            .has_failed()
            .then(|| self.world.failure(self.rank))
    }

    /// Waits in any communicator of a launch see ranks blocked in the
    /// others, so using two communicators in opposite orders is diagnosed.
    fn dup(&mut self) -> Result<Box<dyn Engine>> {
        self.dups += 1;
        let key = (self.world.comm_id, self.dups);
        let child = {
            let threads = &self.world.threads;
            let mut dups = lock(&threads.dups);
            dups.entry(key)
                .or_insert_with(|| {
                    let id = self.world.comm_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.dups;
                    World::new(self.world.n, self.world.timeout, id, threads.clone())
                })
                .clone()
        };
        Ok(Box::new(LocalEngine::new(child, self.rank)))
    }

    fn synchronize(&mut self) -> Result<()> {
        // every launch returns complete
        Ok(())
    }

    fn finish(&mut self, error: Option<&Error>) {
        let threads = &self.world.threads;
        if let Some(e) = error
            && e.kind != ErrorKind::RemoteError
        {
            threads.fail_all(Error::new(
                ErrorKind::RemoteError,
                format!("rank {} failed: {e}", self.rank),
            ));
        }
        threads.finish(self.rank);
    }
}
