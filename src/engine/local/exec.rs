//! Executing one launch (a single call, or the fused calls of a group) on
//! one rank: publish, rendezvous, agree, move data, complete.

use super::memory::Phase;
use super::world::{SendSlot, WaitFor, World, lock};
use super::{agree, families};
use crate::core::{Call, DataType, Error, ErrorKind, Func, RedOp};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// What a rank publishes for the collective part of a launch.
#[derive(Debug, Default, Clone)]
pub struct Posted {
    pub op_count: u64,
    pub calls: Vec<Call>,
}

/// A launch of a single collective, posted without a lock: one cache line
/// of atomics that the coordinator reads in one transfer (a mutex and a
/// vector would take two or three). The owner writes it before arriving at
/// the launch's rendezvous and readers read it after, so the rendezvous
/// orders the accesses, and nobody reads it once the owner can post again
/// (the module doc of [`collectives`] says why).
#[derive(Default)]
pub struct OnePost {
    /// 1: this launch is the one call below; 0: read `World::posted`
    single: AtomicU64,
    op_count: AtomicU64,
    /// func index | datatype code << 8 | op kind << 16 | op code << 32
    head: AtomicU64,
    sendbuff: AtomicU64,
    recvbuff: AtomicU64,
    count: AtomicU64,
    root: AtomicU64,
    /// PreMulSum's scalar, as bits
    scalar: AtomicU64,
}

impl OnePost {
    fn store(&self, op_count: u64, c: Option<&Call>) {
        let Some(c) = c else {
            self.single.store(0, Relaxed);
            return;
        };
        let func = Func::ALL.iter().position(|f| *f == c.func).unwrap_or(0) as u64;
        let (kind, scalar) = match c.op {
            RedOp::Sum => (0, 0.0),
            RedOp::Prod => (1, 0.0),
            RedOp::Max => (2, 0.0),
            RedOp::Min => (3, 0.0),
            RedOp::Avg => (4, 0.0),
            RedOp::PreMulSum(s) => (5, s),
        };
        let head =
            func | (c.datatype.code() as u64) << 8 | kind << 16 | (c.op_code as u32 as u64) << 32;
        self.op_count.store(op_count, Relaxed);
        self.head.store(head, Relaxed);
        self.sendbuff.store(c.sendbuff as u64, Relaxed);
        self.recvbuff.store(c.recvbuff as u64, Relaxed);
        self.count.store(c.count as u64, Relaxed);
        self.root.store(c.root as u64, Relaxed);
        self.scalar.store(scalar.to_bits(), Relaxed);
        self.single.store(1, Relaxed);
    }

    /// The posted call, when the launch is a single one.
    fn load(&self, into: &mut Posted) -> bool {
        if self.single.load(Relaxed) == 0 {
            return false;
        }
        let head = self.head.load(Relaxed);
        let op = match (head >> 16) & 0xFF {
            0 => RedOp::Sum,
            1 => RedOp::Prod,
            2 => RedOp::Max,
            3 => RedOp::Min,
            4 => RedOp::Avg,
            _ => RedOp::PreMulSum(f64::from_bits(self.scalar.load(Relaxed))),
        };
        let call = Call {
            func: Func::ALL[(head & 0xFF) as usize],
            sendbuff: self.sendbuff.load(Relaxed) as usize,
            recvbuff: self.recvbuff.load(Relaxed) as usize,
            count: self.count.load(Relaxed) as usize,
            datatype: DataType::from_code(((head >> 8) & 0xFF) as i32).unwrap_or(DataType::Int8),
            op,
            op_code: (head >> 32) as u32 as i32,
            root: self.root.load(Relaxed) as usize,
        };
        into.op_count = self.op_count.load(Relaxed);
        into.calls.clear();
        into.calls.push(call);
        true
    }
}

/// The work of one launch, in call order.
#[derive(Debug, Default)]
pub struct Launch {
    pub op_count: u64,
    pub colls: Vec<Call>,
    pub p2p: Vec<Call>,
}

/// Per-rank scratch reused across launches.
#[derive(Default)]
pub struct Scratch {
    all: Vec<Posted>,
    /// every rank's call at one position of the launch
    one: Vec<Call>,
}

pub fn execute(
    world: &Arc<World>,
    me: usize,
    launch: &Launch,
    scratch: &mut Scratch,
) -> Result<(), Error> {
    if let Some(first) = launch.colls.first().or(launch.p2p.first()) {
        world.enter(me, first.func, launch.op_count);
    }
    if !launch.colls.is_empty() {
        collectives(world, me, launch, scratch)?;
    }
    if !launch.p2p.is_empty() {
        p2p(world, me, launch)?;
    }
    Ok(())
}

fn describe(launch: &Launch) -> String {
    let first = launch
        .colls
        .first()
        .or(launch.p2p.first())
        .map(|c| c.func.name())
        .unwrap_or("group");
    let n = launch.colls.len() + launch.p2p.len();
    if n > 1 {
        format!(
            "a group of {n} calls starting with {first} (opCount {:x})",
            launch.op_count
        )
    } else {
        format!("{first} (opCount {:x})", launch.op_count)
    }
}

/// A launch this small is done entirely by the last rank to arrive: one
/// rendezvous instead of two, and no rank waits for another's share (bytes
/// of the largest per-rank buffer, times N, summed over the fused calls).
/// Small, because the coordinator changes from launch to launch and every
/// output line it writes was last written by another core: beyond a few
/// lines those transfers cost more than the second rendezvous saves.
pub const ALONE_BYTES: usize = 1 << 10;
/// With more ranks than cores a rendezvous costs context switches, which
/// outweigh far more line transfers.
pub const ALONE_BYTES_OVERSUBSCRIBED: usize = 32 << 10;

fn alone(all: &[Posted], oversubscribed: bool) -> bool {
    let n = all.len();
    let total: usize = all[0]
        .calls
        .iter()
        .map(|c| {
            // the root's buffers are the largest of rooted calls
            let l = c.layout(n, c.root);
            l.send_elems.max(l.recv_elems) * c.datatype.size() * n
        })
        .sum();
    total
        <= if oversubscribed {
            ALONE_BYTES_OVERSUBSCRIBED
        } else {
            ALONE_BYTES
        }
}

/// One launch's collectives on rank `me`.
///
/// Every rank posts its calls and arrives at the launch's rendezvous. The
/// last to arrive coordinates: it reads every rank's posts, checks they
/// agree, and either (small launches, [`alone`]) moves all the data itself
/// and releases the others with the launch done, or releases them to move
/// their shares in parallel, after which a completion rendezvous keeps every
/// buffer alive until all ranks are done. While the coordinator works alone,
/// every other rank is blocked in this call, so their posts and buffers stay
/// as posted; they do not read each other's posts in that mode, which is why
/// the one rendezvous suffices.
fn collectives(
    world: &Arc<World>,
    me: usize,
    launch: &Launch,
    scratch: &mut Scratch,
) -> Result<(), Error> {
    if let [one] = launch.colls.as_slice() {
        world.one[me].store(launch.op_count, Some(one));
    } else {
        world.one[me].store(launch.op_count, None);
        let mut slot = lock(&world.posted[me]);
        slot.op_count = launch.op_count;
        slot.calls.clear();
        slot.calls.extend_from_slice(&launch.colls);
    }
    if world.has_failed() {
        return Err(world.failure(me));
    }
    let (generation, last) = world.arrival.arrive(world.n);
    let (verdict, done) = if last {
        // the coordinator
        read_posts(world, scratch);
        let verdict = if world.threads.check_agreement {
            agree::collectives(&scratch.all)
        } else {
            Ok(())
        };
        let done = verdict.is_ok() && alone(&scratch.all, world.oversubscribed());
        if !done {
            *lock(&world.verdict) = verdict.clone().err();
            world.release(generation, false);
        }
        (verdict, done)
    } else {
        if let Err(e) = world.wait(me, WaitFor::Arrival { generation }, &|| describe(launch)) {
            if world.arrival.withdraw(generation, world.n) {
                return Err(e);
            }
            // leaving fails when the generation completed meanwhile: then
            // this rank takes part after all
            world.wait_certain(|| world.released(generation).is_some());
        }
        if world.released(generation) == Some(true) {
            // the coordinator did everything (and agreed: it only works alone
            // then); a failure now can only be its own, raised before release
            if world.has_failed() {
                return Err(world.failure(me));
            }
            return Ok(());
        }
        read_posts(world, scratch);
        let verdict = match lock(&world.verdict).clone() {
            Some(e) => Err(e),
            None => Ok(()),
        };
        (verdict, false)
    };
    // SAFETY: between arrival and the release (alone) or the completion
    // rendezvous (shares), with every rank's buffers checked locally and
    // agreed above (memory.rs module doc). Alone, the coordinator runs every
    // rank's share in turn; the shares' reads and writes are disjoint as in
    // parallel (each family's module doc), so their order does not matter.
    let phase = unsafe { Phase::enter() };
    let mut result = verdict.clone().map_err(|e| e.on_rank(me));
    let ranks = if done { 0..world.n } else { me..me + 1 };
    for i in 0..launch.colls.len() {
        if verdict.is_err() {
            break;
        }
        scratch.one.clear();
        scratch.one.extend(scratch.all.iter().map(|p| p.calls[i]));
        let calls = &scratch.one;
        let moved = catch_unwind(AssertUnwindSafe(|| {
            for r in ranks.clone() {
                families::run(&phase, r, calls);
            }
        }));
        if moved.is_err() {
            result = Err(Error::new(
                ErrorKind::Internal,
                format!("rank {me} panicked while moving data of {}", calls[me].func),
            )
            .on_rank(me));
        }
        if !done {
            world.complete();
        }
    }
    if !done && verdict.is_err() {
        world.complete();
    }
    if let Err(e) = &result {
        world.fail(e.clone());
    }
    if done {
        world.release(generation, true);
    }
    result
}

/// Copies every rank's posted calls into `scratch.all`.
fn read_posts(world: &Arc<World>, scratch: &mut Scratch) {
    scratch.all.resize_with(world.n, Posted::default);
    for (r, dst) in scratch.all.iter_mut().enumerate() {
        if world.one[r].load(dst) {
            continue;
        }
        let src = lock(&world.posted[r]);
        dst.op_count = src.op_count;
        dst.calls.clear();
        dst.calls.extend_from_slice(&src.calls);
    }
}

fn p2p(world: &Arc<World>, me: usize, launch: &Launch) -> Result<(), Error> {
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
        withdraw_sends(world, me, &sent);
        world.fail(e.clone());
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

#[cfg(test)]
mod tests {
    use super::{ALONE_BYTES, ALONE_BYTES_OVERSUBSCRIBED};
    use crate::core::{ErrorKind, RedOp};
    use crate::engine::local::{LaunchOptions, launch, launch_each};
    use std::time::Duration;

    fn quick() -> LaunchOptions {
        LaunchOptions::default().with_timeout(Duration::from_secs(20))
    }

    #[test]
    fn small_and_large_launches_alternate_correctly() {
        // the coordinator works alone below ALONE_BYTES and with everyone above
        // elements of f32: 4x either threshold in bytes
        let big = ALONE_BYTES.max(ALONE_BYTES_OVERSUBSCRIBED);
        for n in [2, 3, 5] {
            let outs = launch(n, |c| {
                let r = c.rank() as f32;
                let mut sums = Vec::new();
                for len in [1, big, 3, big + 1, 2] {
                    let mut x = vec![r + 1.0; len];
                    c.all_reduce(&mut x, RedOp::Sum)?;
                    sums.push((x[0], x[len - 1]));
                }
                Ok(sums)
            })
            .unwrap();
            let total = (1..=n).sum::<usize>() as f32;
            for s in outs {
                assert!(
                    s.iter().all(|&(a, b)| a == total && b == total),
                    "{n} ranks: {s:?}"
                );
            }
        }
    }

    #[test]
    fn a_mismatch_fails_every_rank_small_or_large() {
        for len in [4usize, ALONE_BYTES_OVERSUBSCRIBED] {
            let res = launch_each(quick(), 3, |c| {
                let mut x = vec![1i32; if c.rank() == 1 { len + 1 } else { len }];
                c.all_reduce(&mut x, RedOp::Sum)
            })
            .unwrap();
            for (r, e) in res.iter().enumerate() {
                let e = e.as_ref().expect_err("every rank fails");
                assert_eq!(e.kind, ErrorKind::Mismatch, "rank {r}: {e}");
                assert!(e.message.contains("count differs"), "{}", e.message);
            }
        }
    }

    #[test]
    fn a_rank_that_skips_the_call_is_named_not_waited_for() {
        let res = launch_each(quick(), 3, |c| {
            if c.rank() == 2 {
                return Ok(());
            }
            let mut x = [1u8; 4];
            c.all_reduce(&mut x, RedOp::Sum)
        })
        .unwrap();
        for r in &res[..2] {
            let e = r.as_ref().expect_err("waiting ranks fail");
            assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
            assert!(
                e.message.contains("rank 2 finished without entering"),
                "{}",
                e.message
            );
        }
    }
}
