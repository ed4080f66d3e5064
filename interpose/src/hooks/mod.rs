//! What the interposer does around each NCCL call, in safe code: the
//! exports (`exports`) hand it the call's arguments as integers and
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
//! collectives alone asks nothing of the store. No lock is held while a
//! launch waits for its peers, and every wait ends at once when its
//! communicator is aborted, destroyed or revoked, or the process gets a
//! signal it handles.
//!
//! Rooms, one job each: `settings` (the switches, read once), `memory`
//! (the allocation registry), `comms` (the communicator registry, init
//! and split), `setup` (a communicator's side channel and lane, set up on
//! a thread of its own), `children` (shrink, `ncclCommInitAll`, children
//! NCCL finishes later), `calls` (per-call checks, refusals, CUDA graph
//! capture), `groups` (groups, their ends, held PreMulSum ops),
//! `agreement` (the launch's agreement, without locks, and what a failure
//! found there does to the communicator), `leaving` (destroy, abort,
//! revoke, exit, signals: the peers told), `errors` (the error line,
//! `ncclGetLastError`'s text, codes of the loaded NCCL), `watch` (watch
//! mode: calls forwarded at once, compared in the background).

mod agreement;
mod calls;
mod children;
mod comms;
mod errors;
mod groups;
mod leaving;
mod memory;
mod settings;
mod setup;
mod watch;

pub use calls::{Action, IN_PROGRESS, SUCCESS, call, element_size, scalar_of};
pub use children::{all_made, ready as child_ready, shrinking, shrunk, waiting as child_waiting};
pub use comms::{
    async_error, init_id, initialised, premul_destroyed, premul_made, split, unique_id_made,
};
pub use errors::{last_error, nccl_failed};
pub use groups::{Ended, group_end, group_simulate_end, group_start};
pub use leaving::{forget_all, gone, revoked};
pub use memory::{allocated, freed};
pub use settings::say;
pub use watch::{land, land_one};
