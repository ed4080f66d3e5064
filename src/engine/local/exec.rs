//! Executing one launch (a single call, or the fused calls of a group) on
//! one rank: publish, rendezvous, agree (compared by `core::agree`), move
//! data, complete. The launch's Send/Recv go through `p2p`.

use super::families::{self, Part};
use super::memory::Phase;
use super::post::{PAYLOAD_BYTES, PAYLOAD_WORDS};
use super::world::{WaitFor, World, lock};
use crate::core::{Call, Error, ErrorKind, Launch, Posted, agree};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;

/// Per-rank scratch reused across launches.
#[derive(Default)]
pub struct Scratch {
    /// collective launches this rank made on the communicator so far
    seq: u64,
    all: Vec<Posted>,
    /// every rank's call at one position of the launch
    one: Vec<Call>,
    /// inline launches: every rank's payload, [`PAYLOAD_WORDS`] words each
    inputs: Vec<u64>,
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
        super::p2p::run(world, me, launch)?;
    }
    Ok(())
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

/// The bytes a call spans, all ranks together, as [`alone`] and [`small`]
/// measure it: its largest per-rank buffer (the root's, for rooted calls)
/// times N.
fn span(c: &Call, n: usize) -> usize {
    let l = c.layout(n, c.root);
    l.send_elems.max(l.recv_elems) * c.datatype.size() * n
}

/// The most bytes ([`span`], summed over a launch's calls) one rank moves
/// for everyone.
fn alone_limit(oversubscribed: bool) -> usize {
    if oversubscribed {
        ALONE_BYTES_OVERSUBSCRIBED
    } else {
        ALONE_BYTES
    }
}

fn alone(all: &[Posted], oversubscribed: bool) -> bool {
    let n = all.len();
    let total: usize = all[0].calls.iter().map(|c| span(c, n)).sum();
    total <= alone_limit(oversubscribed)
}

/// Whether a single call is small enough to go inline: every rank posts a
/// copy of its send buffer and computes its own results from the copies.
/// Decided from fields the ranks must agree on (a rooted call's largest
/// buffers are the root's), so ranks with agreeing calls decide alike;
/// ranks that decide differently passed different calls, and the first to
/// read the posts reports the mismatch.
fn small(c: &Call, n: usize, oversubscribed: bool) -> bool {
    let send = c.layout(n, c.root).send_elems * c.datatype.size();
    send <= PAYLOAD_BYTES && span(c, n) <= alone_limit(oversubscribed)
}

/// One launch's collectives on rank `me`.
///
/// Every rank posts its launch in its mailbox (`post.rs`). A single small
/// call ([`small`]) then finishes without touching another rank's memory:
/// once every rank's post is there, each rank checks that they agree and
/// computes its own results from the posted payloads: one wait, and nothing
/// to hand over. A rank may leave that wait early (a timeout), since nobody
/// reads its buffers.
///
/// Other launches arrive at the launch's rendezvous. The last to arrive
/// coordinates: it reads every rank's posts, checks they agree, and either
/// (small launches, [`alone`]) moves all the data itself and releases the
/// others with the launch done, or releases them to move their shares in
/// parallel ([`move_parts`]), after which a completion rendezvous keeps
/// every buffer alive until all ranks are done. While the coordinator
/// works alone, every other rank is blocked in this call, so their posts
/// and buffers stay as posted; they do not read each other's posts in that
/// mode, which is why the one rendezvous suffices.
fn collectives(
    world: &Arc<World>,
    me: usize,
    launch: &Launch,
    scratch: &mut Scratch,
) -> Result<(), Error> {
    let seq = scratch.seq;
    scratch.seq += 1;
    let single = match launch.colls.as_slice() {
        [one] => Some(one),
        _ => None,
    };
    let inline = single.filter(|c| small(c, world.n, world.oversubscribed()));
    if single.is_none() {
        let mut slot = lock(&world.posted[me]);
        slot.op_count = launch.op_count;
        slot.calls.clear();
        slot.calls.extend_from_slice(&launch.colls);
    }
    let mailbox = &world.mailbox[me];
    match inline {
        Some(c) => {
            let bytes = c.layout(world.n, me).send_elems * c.datatype.size();
            // SAFETY: reads this rank's own send buffer, checked when the
            // call was made. No other rank writes it now: only the data
            // phase of a launch this rank takes part in could, and its last
            // launch completed while this one has not started.
            let phase = unsafe { Phase::enter() };
            mailbox.post(
                seq,
                launch.op_count,
                single,
                phase.view::<u8>(c.sendbuff, bytes),
            );
        }
        None => mailbox.post(seq, launch.op_count, single, &[]),
    }
    world.wake();
    if world.has_failed() {
        return Err(world.failure(me));
    }
    match inline {
        Some(c) => inline_launch(world, me, launch, scratch, seq, c),
        None => shared_launch(world, me, launch, scratch, seq),
    }
}

/// A small single call: wait for every post, agree, and compute this rank's
/// results from the payloads (see [`collectives`]).
fn inline_launch(
    world: &Arc<World>,
    me: usize,
    launch: &Launch,
    scratch: &mut Scratch,
    seq: u64,
    c: &Call,
) -> Result<(), Error> {
    world.wait(me, WaitFor::AllPosted { seq }, &|| launch.describe())?;
    let n = world.n;
    let fail = |e: Error| {
        let e = e.on_rank(me);
        world.fail(e.clone());
        e
    };
    // the common case compares a few words; any difference gets the full
    // comparison, which explains it (or finds it irrelevant)
    let key = world.mailbox[me].key(seq);
    if world.threads.check_agreement && world.mailbox.iter().any(|m| m.key(seq) != key) {
        read_posts(world, scratch, seq);
        agree::collectives(&scratch.all).map_err(fail)?;
    }
    let size = c.datatype.size();
    scratch.inputs.resize(n * PAYLOAD_WORDS, 0);
    for (r, words) in scratch.inputs.chunks_mut(PAYLOAD_WORDS).enumerate() {
        let used = (c.layout(n, r).send_elems * size).div_ceil(8);
        world.mailbox[r].payload(seq, &mut words[..used]);
    }
    let inputs = scratch.inputs.as_ptr() as usize;
    // SAFETY: reads only this rank's copies of the payloads and writes only
    // its own recv buffer, checked when the call was made. No other rank
    // touches that buffer in an inline launch (each computes its own
    // results), and this rank's last launch completed.
    let phase = unsafe { Phase::enter() };
    let moved = catch_unwind(AssertUnwindSafe(|| {
        families::own(&phase, me, n, c, |r| inputs + r * PAYLOAD_BYTES)
    }));
    moved.map_err(|_| {
        fail(Error::new(
            ErrorKind::Internal,
            format!("rank {me} panicked while computing {}", c.func),
        ))
    })
}

/// A launch whose ranks move data between each other's buffers (see
/// [`collectives`]).
fn shared_launch(
    world: &Arc<World>,
    me: usize,
    launch: &Launch,
    scratch: &mut Scratch,
    seq: u64,
) -> Result<(), Error> {
    let (generation, last) = world.arrival.arrive(world.n);
    let (verdict, done) = if last {
        // the coordinator
        read_posts(world, scratch, seq);
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
        if let Err(e) = world.wait(me, WaitFor::Arrival { generation }, &|| launch.describe()) {
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
        read_posts(world, scratch, seq);
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
    for i in 0..launch.colls.len() {
        if verdict.is_err() {
            break;
        }
        scratch.one.clear();
        scratch.one.extend(scratch.all.iter().map(|p| p.calls[i]));
        let calls = &scratch.one;
        let n = world.n;
        let moved = catch_unwind(AssertUnwindSafe(|| {
            if done {
                // alone: every rank's share in turn
                (0..n).for_each(|r| families::run(&phase, Part::share(r, n), calls));
            } else {
                move_parts(world, &phase, me, calls);
            }
            phase.fence();
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

/// Rank `me`'s work on one call of a launch whose ranks move their shares
/// in parallel: its share, or, for a call cut into parts
/// ([`families::parts_per_rank`]), its own share's parts in order (the
/// fixed split's locality when nobody is held back) and then whatever is
/// left of the others'.
fn move_parts(world: &World, phase: &Phase, me: usize, calls: &[Call]) {
    let n = world.n;
    // the calls agree: every rank cuts by rank 0's
    let per_rank = families::parts_per_rank(&calls[0], n);
    if per_rank == 1 {
        return families::run(phase, Part::share(me, n), calls);
    }
    let of = n * per_rank;
    for share in (0..n).map(|k| (me + k) % n) {
        while let Some(k) = world.claim(share, per_rank) {
            families::run(
                phase,
                Part {
                    index: share * per_rank + k,
                    of,
                },
                calls,
            );
        }
    }
}

/// Copies every rank's posted launch `seq` into `scratch.all`.
fn read_posts(world: &Arc<World>, scratch: &mut Scratch, seq: u64) {
    scratch.all.resize_with(world.n, Posted::default);
    for (r, dst) in scratch.all.iter_mut().enumerate() {
        if world.mailbox[r].load(seq, dst) {
            continue;
        }
        let src = lock(&world.posted[r]);
        dst.calls.clear();
        dst.calls.extend_from_slice(&src.calls);
    }
}
