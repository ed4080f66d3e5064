//! What the interposer does around each NCCL call, in safe code: the
//! exports (`exports.rs`) hand it the call's arguments as integers and
//! forward or refuse as it says.
//!
//! Per call: `core::check_call` and `core::check_buffers` (against the
//! allocations `ncclMemAlloc` and the CUDA driver know), the trace line,
//! then at launch (the call itself, or the outermost `ncclGroupEnd`) the
//! cross-rank agreement (`rankwise::agreement`: every rank's collectives
//! compared by `core::agree`, every Send paired with its peer's Recv, and
//! for launches with Sends or Recvs the peers' verdicts heard, so a
//! mismatch between two other ranks of an AlltoAllv is an error here too
//! instead of an NCCL hang). Only then is NCCL called. A launch is one
//! request to the side channel's store, plus one for the verdicts when it
//! has Sends or Recvs; on a communicator whose ranks share a host, its
//! collectives agree through shared memory instead, and a launch of
//! collectives alone asks nothing of the store.
//!
//! Rooms, one job each: `settings` (the switches, read once), `memory`
//! (the allocation registry), `comms` (the communicator registry: init,
//! split, destroy, abort), `calls` (per-call checks and groups),
//! `agreement` (the launch's agreement, and what a failure found there
//! does to the communicator).

mod agreement;
mod calls;
mod comms;
mod memory;
mod settings;

pub use calls::{
    Action, IN_PROGRESS, SUCCESS, call, element_size, group_end, group_start, scalar_of,
};
pub use comms::{
    forget_all, gone, init_id, initialised, last_error, premul_destroyed, premul_made, split,
    unique_id_made,
};
pub use memory::{allocated, freed};
pub use settings::say;
