//! The data phase of each collective family, one file per family. Each
//! function runs on rank `me` after every rank posted an agreed call
//! (`calls[r]` is rank r's), does this rank's share, and touches memory only
//! through the [`Phase`] token. Each file states why its reads and writes
//! never race, in-place forms included.

mod alltoall;
mod broadcast;
mod gather;
mod reduction;

use super::memory::Phase;
use crate::core::{Call, Func};

pub fn run(p: &Phase, me: usize, calls: &[&Call]) {
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
