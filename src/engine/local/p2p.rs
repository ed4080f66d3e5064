//! Point-to-point on the local engine: the ordered channel of Sends from
//! one rank to another, and how a launch's Sends and Recvs meet in it. A
//! Send posts its buffer's address; the Recv copies straight from it while
//! the sender waits for the copy to complete.

use super::memory::Phase;
use super::sync::lock;
use super::world::{WaitFor, World};
use crate::core::{Error, ErrorKind, Func, Launch};
use std::collections::VecDeque;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};

/// One queued Send from `src` to `dst`.
#[derive(Debug, Clone)]
pub struct SendSlot {
    pub seq: u64,
    pub addr: usize,
    pub count: usize,
    pub datatype: crate::core::DataType,
    pub what: String,
}

#[derive(Default)]
pub struct PairQueue {
    pub slots: VecDeque<SendSlot>,
    /// Sends whose Recv rejected them, with the error both sides return.
    pub failures: Vec<(u64, Error)>,
    /// Sends claimed by the receiver (their data may be in flight).
    pub claimed: u64,
}

/// The ordered channel of Sends from one rank to another.
#[derive(Default)]
pub struct Pair {
    pub queue: Mutex<PairQueue>,
    /// Sends posted so far (mirror of the queue's sequence, for lock-free checks)
    pub posted: AtomicU64,
    /// Sends fully received (or rejected)
    pub completed: AtomicU64,
    /// Recvs the destination has started (only the destination touches it)
    pub next_recv: AtomicU64,
}

/// The Send/Recv part of one launch on rank `me`.
pub fn run(world: &Arc<World>, me: usize, launch: &Launch) -> Result<(), Error> {
    // post every Send first, so a group's Sends and Recvs can progress in any order
    let mut sent: Vec<(usize, u64)> = Vec::new();
    for c in launch.p2p.iter().filter(|c| c.func == Func::Send) {
        let pair = world.pair(me, c.root);
        let mut q = lock(&pair.queue);
        let seq = pair.posted.load(std::sync::atomic::Ordering::SeqCst);
        q.slots.push_back(SendSlot {
            seq,
            addr: c.sendbuff,
            count: c.count,
            datatype: c.datatype,
            what: format!(
                "Send #{seq} to rank {} (count {}, {}, opCount {:x})",
                c.root, c.count, c.datatype, launch.op_count
            ),
        });
        pair.posted
            .store(seq + 1, std::sync::atomic::Ordering::SeqCst);
        drop(q);
        sent.push((c.root, seq));
    }
    world.bump();
    let result = recv_all(world, me, launch).and_then(|()| await_sends(world, me, &sent, launch));
    if let Err(e) = &result {
        // fail first: a receiver that finds a withdrawn Send reports the
        // communicator's failure, which must already carry this reason
        world.fail(e.clone());
        withdraw_sends(world, me, &sent);
    }
    result
}

fn recv_all(world: &Arc<World>, me: usize, launch: &Launch) -> Result<(), Error> {
    use std::sync::atomic::Ordering::SeqCst;
    for c in launch.p2p.iter().filter(|c| c.func == Func::Recv) {
        let src = c.root;
        let pair = world.pair(src, me);
        let seq = pair.next_recv.fetch_add(1, SeqCst);
        let what = || {
            format!(
                "Recv #{seq} from rank {src} (count {}, {}, opCount {:x})",
                c.count, c.datatype, launch.op_count
            )
        };
        world.wait(me, WaitFor::Posted { src, dst: me, seq }, &what)?;
        let slot = {
            let mut q = lock(&pair.queue);
            match q.slots.front() {
                Some(s) if s.seq == seq => {
                    q.claimed = seq + 1;
                    q.slots.pop_front()
                }
                _ => None,
            }
        };
        let Some(slot) = slot else {
            return Err(world.failure(me));
        };
        if slot.count != c.count || slot.datatype != c.datatype {
            let err = Error::new(
                ErrorKind::Mismatch,
                format!(
                    "Send/Recv mismatch: rank {src}'s {} meets rank {me}'s {}: both sides must pass the same count and datatype",
                    slot.what,
                    what()
                ),
            );
            let mut q = lock(&pair.queue);
            q.failures.push((seq, err.clone()));
            pair.completed.store(seq + 1, SeqCst);
            drop(q);
            world.bump();
            return Err(err.on_rank(me));
        }
        // SAFETY: the sender stays blocked until `completed` passes this
        // Send; both extents were checked by their owners (memory.rs).
        let phase = unsafe { Phase::enter() };
        phase.copy(slot.addr, c.recvbuff, c.count * c.datatype.size());
        let q = lock(&pair.queue);
        pair.completed.store(seq + 1, SeqCst);
        drop(q);
        world.bump();
    }
    Ok(())
}

fn await_sends(
    world: &Arc<World>,
    me: usize,
    sent: &[(usize, u64)],
    launch: &Launch,
) -> Result<(), Error> {
    for &(dst, seq) in sent {
        let what = || {
            let c = launch
                .p2p
                .iter()
                .filter(|c| c.func == Func::Send && c.root == dst)
                .count();
            format!(
                "Send #{seq} to rank {dst} ({c} Send(s) to it in this launch, opCount {:x})",
                launch.op_count
            )
        };
        world.wait(me, WaitFor::Completed { src: me, dst, seq }, &what)?;
        let q = lock(&world.pair(me, dst).queue);
        if let Some((_, e)) = q.failures.iter().find(|(s, _)| *s == seq) {
            return Err(e.clone().on_rank(me));
        }
    }
    Ok(())
}

/// Takes back Sends nobody claimed and waits out copies in flight, so no
/// rank reads this rank's buffers after it returns.
fn withdraw_sends(world: &Arc<World>, me: usize, sent: &[(usize, u64)]) {
    use std::sync::atomic::Ordering::SeqCst;
    for &(dst, seq) in sent {
        let pair = world.pair(me, dst);
        let mut q = lock(&pair.queue);
        q.slots.retain(|s| s.seq != seq);
        let claimed = q.claimed;
        drop(q);
        world.wait_certain(|| pair.completed.load(SeqCst) >= claimed.min(seq + 1));
    }
}
