//! The data phase of each collective family, one file per family. Each
//! function runs on rank `me` after every rank posted an agreed call
//! (`calls[r]` is rank r's), does this rank's share, and touches memory only
//! through the [`Phase`] token. Each file states why its reads and writes
//! never race, in-place forms included. Small calls take another path,
//! [`own`]: each rank computes only its own results from copies of every
//! rank's input.
//!
//! Speed (see BENCHMARKS.md): the work is split so that every rank moves an
//! equal share and every input byte is read from memory once. Large copies
//! go in chunks that stay in cache between the N destinations they are
//! written to; large reductions go a few cache lines at a time, reduced in
//! registers and stored straight to every output. When a call's outputs are
//! large ([`streaming`]) they are written with non-temporal stores, which
//! skip reading each destination line before overwriting it.

mod alltoall;
mod broadcast;
mod gather;
mod own;
mod reduction;

pub use own::own;

use super::memory::Phase;
use crate::core::{Call, Func};

/// Outputs (all ranks together) at least this large are written with
/// streaming stores: far beyond the private caches, they would only evict
/// the inputs.
pub const STREAM_BYTES: usize = 4 << 20;

/// Bytes per piece of a large copy: a piece read once stays in L2 while it
/// is written to every destination.
pub const COPY_CHUNK: usize = 64 << 10;

/// Whether a call writing `out_bytes` bytes (all ranks) streams its stores.
pub fn streaming(out_bytes: usize) -> bool {
    out_bytes >= STREAM_BYTES
}

/// Copies with the store kind chosen for the whole call.
#[inline]
fn copy(p: &Phase, stream: bool, src: usize, dst: usize, bytes: usize) {
    if stream {
        p.copy_stream(src, dst, bytes);
    } else {
        p.copy(src, dst, bytes);
    }
}

/// Moves rank `me`'s share of the call; its stores are ordered (fenced)
/// when this returns.
pub fn run(p: &Phase, me: usize, calls: &[Call]) {
    share(p, me, calls);
    p.fence();
}

fn share(p: &Phase, me: usize, calls: &[Call]) {
    match calls[me].func {
        Func::AllReduce => reduction::all_reduce(p, me, calls),
        Func::Reduce => reduction::reduce(p, me, calls),
        Func::ReduceScatter => reduction::reduce_scatter(p, me, calls),
        Func::AllGather => gather::all_gather(p, me, calls),
        Func::Gather => gather::gather(p, me, calls),
        Func::Broadcast => broadcast::broadcast(p, me, calls),
        Func::Scatter => broadcast::scatter(p, me, calls),
        Func::AlltoAll => alltoall::all_to_all(p, me, calls),
        Func::Send | Func::Recv => unreachable!("point-to-point calls do not run as collectives"),
    }
}
