//! The communicators made from others, or many at once: a split's or a
//! shrink's child (named in its parent's store under a key of its own),
//! the ranks of `ncclCommInitAll` (all threads of this process: they agree
//! through a store of its own), and children NCCL has not finished making
//! when the call returns (a non-blocking communicator, a split inside a
//! group), which are registered once NCCL can say their rank and size: at
//! the first call on them, or when `ncclCommGetAsyncError` says they are
//! ready.

use super::comms::{comm, lock, register};
use super::settings::{Checks, settings};
use super::setup::Channel;
use crate::side;
use rankwise::transport::store::Store;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard, OnceLock};

/// A child waiting for NCCL to say its rank and size: its commId, its key
/// in the store and the store.
struct Child {
    comm_id: u64,
    key: String,
    channel: Option<Channel>,
}

fn waiting_children() -> MutexGuard<'static, HashMap<usize, Child>> {
    static W: OnceLock<Mutex<HashMap<usize, Child>>> = OnceLock::new();
    W.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// NCCL made the child `handle` (of rank and size `rank_count`, when it
/// could say yet) named `key` in `channel`'s store.
pub fn made(
    handle: usize,
    rank_count: Option<(i32, i32)>,
    comm_id: u64,
    key: String,
    channel: Option<Channel>,
) {
    let child = Child {
        comm_id,
        key,
        channel,
    };
    match rank_count {
        Some((rank, count)) => settle(handle, child, rank, count),
        None => {
            waiting_children().insert(handle, child);
        }
    }
}

fn settle(handle: usize, c: Child, rank: i32, count: i32) {
    if rank < 0 || count <= 0 || rank >= count {
        return;
    }
    register(
        handle,
        (rank as usize, count as usize),
        c.comm_id,
        c.key,
        c.channel,
    );
}

/// Whether `handle` is a child waiting for NCCL to finish it.
pub fn waiting(handle: usize) -> bool {
    waiting_children().contains_key(&handle)
}

/// NCCL says the waiting child `handle` has rank `rank` of `count`.
pub fn ready(handle: usize, rank: i32, count: i32) {
    if let Some(c) = waiting_children().remove(&handle) {
        settle(handle, c, rank, count);
    }
}

/// `NCCL_SHRINK_ABORT`: the parent's operations in progress end first.
const SHRINK_ABORT: i32 = 1;

/// Before a real `ncclCommShrink` of `parent` with `flags`: with
/// `NCCL_SHRINK_ABORT`, the parent's waits end now.
pub fn shrinking(parent: usize, flags: i32) {
    if flags & SHRINK_ABORT != 0
        && let Some(p) = comm(parent)
    {
        p.stop
            .raise("ncclCommShrink with NCCL_SHRINK_ABORT was called on this communicator");
    }
}

/// After a real `ncclCommShrink` of `parent` without the ranks `excluded`
/// (every rank that stays calls it): `child` is the new communicator, of
/// rank and size `rank_count` when NCCL could say.
pub fn shrunk(parent: usize, excluded: &[i32], child: usize, rank_count: Option<(i32, i32)>) {
    let Some(p) = comm(parent) else { return };
    let (key, channel, comm_id) = {
        let mut s = lock(&p);
        s.shrinks += 1;
        let mut gone: Vec<i32> = excluded.to_vec();
        gone.sort_unstable();
        let gone: Vec<String> = gone.iter().map(i32::to_string).collect();
        // the excluded ranks are in the name: ranks that disagree on them
        // never share an exchange
        let key = format!("{}.k{}x{}", s.key, s.shrinks, gone.join("-"));
        let id = side::hash(
            &[
                &s.comm_id.to_le_bytes()[..],
                b"shrink",
                &s.shrinks.to_le_bytes(),
            ]
            .concat(),
        );
        (key, s.channel.clone(), id)
    };
    if child != 0 {
        made(child, rank_count, comm_id, key, channel);
    }
}

/// After a real `ncclCommInitAll` made `handles` (rank i is `handles[i]`):
/// every rank is a thread of this process, and they agree through a store
/// of its own.
pub fn all_made(handles: &[usize]) {
    let checks = settings().checks;
    if checks == Checks::Off || handles.contains(&0) {
        return;
    }
    static ALLS: AtomicU64 = AtomicU64::new(0);
    let k = ALLS.fetch_add(1, Ordering::Relaxed);
    let key = format!("all{}.{k}", std::process::id());
    let comm_id = side::hash(key.as_bytes());
    let channel = (checks.across_ranks() && handles.len() > 1).then(|| Channel::Here(Store::new()));
    let n = handles.len();
    for (rank, &h) in handles.iter().enumerate() {
        register(h, (rank, n), comm_id, key.clone(), channel.clone());
    }
}
