//! The door every engine sits behind. A communicator ([`crate::Comm`])
//! holds one [`Engine`] per rank and does everything engines share itself,
//! from `core`: argument and buffer checks, the trace line, the zero-count
//! discard, group queueing and the opCount, AlltoAllv's lowering, and the
//! wording of every cross-rank mismatch. An engine only owns its memory,
//! how the ranks' signatures travel, how data moves, and how a stuck or
//! dead peer becomes an error.
//!
//! `local` runs ranks as threads of this process; `nccl` runs every call on
//! real NCCL (feature `nccl`, on by default; NCCL and CUDA are loaded at
//! run time); `mpi` runs ranks as the processes of an MPI job (feature
//! `mpi`).

pub mod host_memory;
pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
#[cfg(feature = "nccl")]
pub mod nccl;

use crate::core::{AddressSpace, Call, Error, Launch, Posted, Result, agree};

/// What an engine can do beyond the contract every engine meets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Capabilities {
    /// The engine's name as `--engine` spells it.
    pub name: &'static str,
    /// It sees every rank's waits, so a cycle of blocked Send/Recv or
    /// collectives entered in different orders is named as a deadlock
    /// (otherwise such a program ends in the engine's timeout).
    pub diagnoses_deadlock: bool,
    /// Its buffers are not host memory (device memory, say): the typed face's
    /// Rust slices must be copied into the engine's memory and back.
    pub needs_staging: bool,
}

/// The memory one rank's calls address: host allocations for engines whose
/// ranks run on CPUs, device memory for GPU engines. Addresses are plain
/// integers (0 is NULL) that may be offset freely; [`AddressSpace`] tells
/// the shared checks the extent of each, before any call touches it.
pub trait Memory: AddressSpace {
    /// `bytes` zeroed bytes (≈ `cudaMalloc` + `cudaMemset`); returns the base address.
    fn alloc(&mut self, bytes: usize) -> Result<usize>;
    /// Frees an allocation by its base address.
    fn free(&mut self, base: usize) -> Result<()>;
    /// Copies `src` to `addr`, which must lie inside one allocation.
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()>;
    /// Copies `dst.len()` bytes from `addr` into `dst`.
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()>;
    /// Sets `bytes` bytes at `addr` to `byte`.
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()>;
    /// Repeats `pattern` over up to `max_bytes` bytes at `addr`, stopping at
    /// the end of its allocation; returns the bytes written (0 when `addr`
    /// is not an allocation's). Poison mode fills undefined outputs with it.
    fn fill_pattern(&mut self, addr: usize, max_bytes: usize, pattern: &[u8]) -> usize;
}

/// One rank's end of a communicator on some engine. Object safe: a
/// communicator holds a `Box<dyn Engine>` and calls it once per launch.
pub trait Engine {
    fn capabilities(&self) -> Capabilities;
    fn rank(&self) -> usize;
    fn size(&self) -> usize;
    /// The address printed as `comm` in the trace: distinct per rank.
    fn handle(&self) -> usize;
    /// The id all ranks of the communicator share (printed as `commId`).
    fn comm_id(&self) -> u64;
    fn memory(&self) -> &dyn Memory;
    fn memory_mut(&mut self) -> &mut dyn Memory;

    /// Hands this rank's post of a launch to every rank and returns every
    /// rank's, in rank order. Engines that carry posts in their own
    /// rendezvous override [`Engine::launch`] instead and never call it.
    fn exchange(&mut self, mine: &Posted) -> Result<Vec<Posted>>;

    /// Moves the data of a launch every rank agreed on.
    fn execute(&mut self, launch: &Launch) -> Result<()>;

    /// A collective of count 0, which the communicator logged and dropped
    /// (NCCL's rule). An engine over a real library hands it on, so the
    /// library logs it too; by default nothing happens.
    fn discard(&mut self, _call: &Call) -> Result<()> {
        Ok(())
    }

    /// Runs one launch: every rank's posts compared by
    /// [`core::agree`](crate::core::agree) before any data moves, then the
    /// data. An engine whose rendezvous already carries the posts (the
    /// local engine) overrides this to do both in one step, still comparing
    /// with `core::agree`.
    fn launch(&mut self, launch: &Launch) -> Result<()> {
        if !launch.colls.is_empty() {
            let all = self.exchange(&launch.posted())?;
            agree::collectives(&all)?;
        }
        self.execute(launch)
    }

    /// Why the communicator failed, as this rank reports it; None while it
    /// works. A failed communicator runs nothing more (NCCL's async error).
    fn failure(&self) -> Option<Error>;

    /// A new communicator over the same ranks (≈ `ncclCommSplit` with one
    /// color): the k-th `dup` of a communicator is the same new one on
    /// every rank.
    fn dup(&mut self) -> Result<Box<dyn Engine>>;

    /// Waits until this rank's launched work is done (≈ `cudaStreamSynchronize`).
    fn synchronize(&mut self) -> Result<()>;

    /// This rank's program ended, with `error` when it failed: no call of
    /// it will reach any communicator again, and ranks waiting for it must
    /// learn why instead of waiting out their deadline.
    fn finish(&mut self, error: Option<&Error>);
}
