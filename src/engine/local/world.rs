//! The shared state of one local communicator (`World`) and of the rank
//! threads of one launch (`Threads`, shared by every communicator the
//! threads create): rendezvous, waits that never hang, failure propagation
//! and deadlock diagnosis across communicators.
//!
//! Every wait spins briefly, yields, then parks on a condition variable with
//! a short timeout. A parked waiter re-checks, in order: its condition, the
//! communicator's failure flag, its deadline, and whether every live rank is
//! parked on a condition nobody can satisfy (a deadlock: then the waiters get
//! a diagnosis instead of hanging). Any state change bumps `epoch`, so the
//! deadlock check is exact: it sees all live ranks parked on unsatisfiable
//! conditions with no change during its scan.

use crate::core::{Error, ErrorKind, Func};
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, Weak};
use std::time::{Duration, Instant};

/// Busy-wait rounds before yielding, when every rank has a core of its own:
/// a few microseconds (a `pause` takes tens of nanoseconds), enough for a
/// peer that is about to arrive. More only costs when the peer is not
/// running (the machine is busy with other work): then every microsecond
/// spent spinning is one the peer waits for its core.
const SPINS: u32 = 128;
/// `yield_now` rounds before parking, with a core per rank.
const YIELDS: u32 = 50;
/// When ranks outnumber cores, a spinning rank only delays the rank it waits
/// for (which needs its core): such waits yield at once, and keep yielding
/// longer before they park (a park and its wake-up cost a few microseconds).
const YIELDS_OVERSUBSCRIBED: u32 = 2000;
const PARK: Duration = Duration::from_millis(2);

/// How a wait spends its time before it parks.
#[derive(Debug, Clone, Copy)]
struct Patience {
    spins: u32,
    yields: u32,
    /// more ranks than cores
    oversubscribed: bool,
}

/// Busy-wait rounds before yielding when every rank has a core of its own
/// (pinned): about a millisecond. No peer needs this core, and yielding it
/// would hand it to whatever else the machine runs for a whole time slice,
/// so the rank keeps its core like an MPI process polling.
const SPINS_PINNED: u32 = 20_000;

impl Patience {
    fn pinned() -> Patience {
        Patience {
            spins: SPINS_PINNED,
            yields: YIELDS,
            oversubscribed: false,
        }
    }

    fn for_ranks(n: usize) -> Patience {
        let cores = std::thread::available_parallelism()
            .map(|c| c.get())
            .unwrap_or(1);
        if n > cores {
            Patience {
                spins: 0,
                yields: YIELDS_OVERSUBSCRIBED,
                oversubscribed: true,
            }
        } else {
            Patience {
                spins: SPINS,
                yields: YIELDS,
                oversubscribed: false,
            }
        }
    }

    /// One round of waiting: spin, yield, or false when it is time to park.
    #[inline]
    fn idle(&self, round: u32) -> bool {
        if round < self.spins {
            std::hint::spin_loop();
            true
        } else if round < self.spins + self.yields {
            std::thread::yield_now();
            true
        } else {
            false
        }
    }
}

/// A value alone on its cache lines (128 bytes: adjacent-line prefetch
/// pairs lines), so ranks writing neighbouring values do not invalidate
/// each other's copies (false sharing).
#[derive(Default)]
#[repr(align(128))]
pub struct Padded<T>(pub T);

impl<T> std::ops::Deref for Padded<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Locks a mutex, ignoring poisoning: the engine's protected data stays
/// consistent across a panic (panics are caught and turned into errors).
pub fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

/// What a parked rank waits for; any thread can evaluate it.
#[derive(Debug, Clone)]
pub enum WaitFor {
    /// all ranks to arrive at collective generation `generation`
    Arrival { generation: u64 },
    /// all ranks to post their collective launch number `seq`
    AllPosted { seq: u64 },
    /// rank `src` to post Send number `seq` to `dst`
    Posted { src: usize, dst: usize, seq: u64 },
    /// rank `dst` to complete the Recv of Send number `seq` from `src`
    Completed { src: usize, dst: usize, seq: u64 },
}

#[derive(Clone)]
pub struct Wait {
    /// the communicator the condition belongs to
    pub world: Arc<World>,
    pub on: WaitFor,
    /// what the rank is doing, e.g. `AllReduce (opCount 3)`
    pub what: String,
}

impl Wait {
    fn ready(&self) -> bool {
        self.world.ready(&self.on)
    }
}

/// One rank thread, whichever communicator it is in.
#[derive(Default)]
pub struct RankState {
    pub finished: AtomicBool,
    blocked: AtomicBool,
    wait: Mutex<Option<Wait>>,
}

/// The rank threads of one launch: their states, the progress counter and
/// the parking place, shared by all communicators they use, so a wait in one
/// communicator sees a rank blocked in another.
pub struct Threads {
    pub ranks: Vec<Padded<RankState>>,
    patience: Patience,
    epoch: AtomicU64,
    sleepers: AtomicUsize,
    park_lock: Mutex<()>,
    park: Condvar,
    /// every communicator of the launch (to fail them all when a rank fails)
    pub worlds: Mutex<Vec<Weak<World>>>,
    /// communicators created by `dup`: (parent comm id, k) -> child
    pub dups: Mutex<HashMap<(u64, u64), Arc<World>>>,
    /// fill buffers the contract leaves undefined (see `LaunchOptions::poison`)
    pub poison: bool,
    /// serialises recording failures (see `fail_each`)
    failing: Mutex<()>,
    /// compare every rank's calls before moving data (see `LaunchOptions`)
    pub check_agreement: bool,
}

impl Threads {
    /// `pinned`: each rank runs on a core of its own, so waits spin instead
    /// of yielding.
    pub fn new(n: usize, poison: bool, check_agreement: bool, pinned: bool) -> Arc<Threads> {
        Arc::new(Threads {
            check_agreement,
            poison,
            failing: Mutex::new(()),
            ranks: (0..n).map(|_| Padded::default()).collect(),
            patience: if pinned {
                Patience::pinned()
            } else {
                Patience::for_ranks(n)
            },
            epoch: AtomicU64::new(0),
            sleepers: AtomicUsize::new(0),
            park_lock: Mutex::new(()),
            park: Condvar::new(),
            worlds: Mutex::default(),
            dups: Mutex::default(),
        })
    }

    /// Wakes parked waiters, if any (see [`World::wake`]).
    pub fn wake(&self) {
        if self.sleepers.load(SeqCst) > 0 {
            self.bump();
        }
    }

    /// Records a state change and wakes parked waiters.
    pub fn bump(&self) {
        self.epoch.fetch_add(1, SeqCst);
        if self.sleepers.load(SeqCst) > 0 {
            let _g = lock(&self.park_lock);
            self.park.notify_all();
        }
    }

    /// A rank's program ended: no communicator will see it again.
    pub fn finish(&self, me: usize) {
        self.ranks[me].finished.store(true, SeqCst);
        self.bump();
    }

    /// Parks briefly unless `ready` already holds.
    fn park_unless(&self, ready: impl Fn() -> bool) {
        self.sleepers.fetch_add(1, SeqCst);
        let g = lock(&self.park_lock);
        if !ready() {
            let _ = self.park.wait_timeout(g, PARK);
        }
        self.sleepers.fetch_sub(1, SeqCst);
    }

    /// A rank's program ended: no communicator will see it again.
    /// Fails every communicator of the launch (a rank's program failed).
    pub fn fail_all(&self, err: Error) {
        let worlds: Vec<Arc<World>> = lock(&self.worlds)
            .iter()
            .filter_map(Weak::upgrade)
            .collect();
        let refs: Vec<&World> = worlds.iter().map(|w| &**w).collect();
        self.fail_each(&refs, err);
    }

    /// Fails several communicators as one step: nobody sees one failed and
    /// acts before the others carry the same reason.
    pub fn fail_each(&self, worlds: &[&World], err: Error) {
        {
            let _one_at_a_time = lock(&self.failing);
            for w in worlds {
                w.set_failure(err.clone());
            }
        }
        self.bump();
    }
}

/// A generation barrier that a waiter can leave (withdraw from) only while
/// the generation is incomplete, so nobody proceeds past a rank that left.
#[derive(Default)]
pub struct Barrier {
    /// generation << 32 | ranks present
    word: AtomicU64,
}

const PRESENT: u64 = 0xFFFF_FFFF;

impl Barrier {
    /// Arrives; returns the generation and whether this arrival completed it.
    pub fn arrive(&self, n: usize) -> (u64, bool) {
        let w = self.word.fetch_add(1, SeqCst);
        let generation = w >> 32;
        if (w & PRESENT) + 1 == n as u64 {
            // all present: nobody can withdraw or arrive until this store
            self.word.store((generation + 1) << 32, SeqCst);
            (generation, true)
        } else {
            (generation, false)
        }
    }
    pub fn passed(&self, generation: u64) -> bool {
        self.word.load(SeqCst) >> 32 != generation
    }
    /// Leaves generation `generation`; false when it completed meanwhile (then the
    /// caller must take part in the phase after all).
    pub fn withdraw(&self, generation: u64, n: usize) -> bool {
        loop {
            let w = self.word.load(SeqCst);
            if w >> 32 != generation {
                return false;
            }
            if w & PRESENT == n as u64 {
                std::hint::spin_loop();
                continue;
            }
            if self.word.compare_exchange(w, w - 1, SeqCst, SeqCst).is_ok() {
                return true;
            }
        }
    }
}

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

pub struct World {
    pub n: usize,
    pub comm_id: u64,
    pub timeout: Duration,
    pub threads: Arc<Threads>,
    pub arrival: Padded<Barrier>,
    pub done: Padded<Barrier>,
    pub pairs: Vec<Pair>,
    /// group launches' calls (a single call's are in its mailbox)
    pub posted: Vec<Padded<Mutex<super::post::Posted>>>,
    /// each rank's posts of its collective launches
    pub mailbox: Vec<super::post::Mailbox>,
    /// `(g + 1) << 1 | alone`: the coordinator of collective generation `g`
    /// released the other ranks, having done the whole launch (`alone`) or
    /// for them to move their shares
    go: Padded<AtomicU64>,
    /// the coordinator's agreement verdict for the released generation
    pub verdict: Mutex<Option<Error>>,
    /// per rank: the last launch it entered on this communicator, packed as
    /// `(func index << 56 | opCount) + 1`, 0 for none
    pub entered: Vec<Padded<AtomicU64>>,
    failed: AtomicBool,
    failure: Mutex<Option<Error>>,
}

impl World {
    pub fn new(n: usize, timeout: Duration, comm_id: u64, threads: Arc<Threads>) -> Arc<World> {
        let w = Arc::new(World {
            n,
            comm_id,
            timeout,
            threads: threads.clone(),
            arrival: Padded::default(),
            done: Padded::default(),
            pairs: (0..n * n).map(|_| Pair::default()).collect(),
            posted: (0..n).map(|_| Padded::default()).collect(),
            mailbox: (0..n).map(|_| Default::default()).collect(),
            go: Padded::default(),
            verdict: Mutex::new(None),
            entered: (0..n).map(|_| Padded::default()).collect(),
            failed: AtomicBool::new(false),
            failure: Mutex::new(None),
        });
        lock(&threads.worlds).push(Arc::downgrade(&w));
        w
    }

    /// More ranks than cores.
    pub fn oversubscribed(&self) -> bool {
        self.threads.patience.oversubscribed
    }

    /// Releases the ranks waiting in collective generation `generation`.
    pub fn release(&self, generation: u64, alone: bool) {
        self.go
            .store(((generation + 1) << 1) | u64::from(alone), SeqCst);
        self.wake();
    }

    /// Some(alone) once generation `generation` is released.
    pub fn released(&self, generation: u64) -> Option<bool> {
        let w = self.go.load(SeqCst);
        (w >> 1 > generation).then_some(w & 1 == 1)
    }

    /// Wakes parked waiters after a change that only unblocks them (a
    /// rendezvous completing). Cheaper than [`World::bump`] when nobody is
    /// parked: the deadlock check needs no epoch change here, since the rank
    /// completing a rendezvous is never one it counts as blocked, and every
    /// rank that leaves a blocked wait bumps the epoch itself.
    pub fn wake(&self) {
        self.threads.wake();
    }

    /// Records that rank `me` entered launch `op_count` starting with `func`.
    pub fn enter(&self, me: usize, func: Func, op_count: u64) {
        let idx = func.index() as u64;
        // read only for diagnostics: no ordering needed beyond its own value
        self.entered[me].store(((idx << 56) | (op_count & ((1 << 56) - 1))) + 1, Relaxed);
    }

    fn last_entered(&self, r: usize) -> String {
        match self.entered[r].load(SeqCst) {
            0 => "no call yet".to_string(),
            v => {
                let v = v - 1;
                format!(
                    "last entered {} (opCount {:x})",
                    Func::ALL[(v >> 56) as usize],
                    v & ((1 << 56) - 1)
                )
            }
        }
    }

    pub fn bump(&self) {
        self.threads.bump();
    }

    pub fn pair(&self, src: usize, dst: usize) -> &Pair {
        &self.pairs[src * self.n + dst]
    }

    pub fn has_failed(&self) -> bool {
        self.failed.load(SeqCst)
    }

    /// Marks the communicator failed; the first reason wins.
    pub fn fail(&self, err: Error) {
        self.threads.fail_each(&[self], err);
    }

    fn set_failure(&self, err: Error) {
        let mut f = lock(&self.failure);
        if f.is_none() {
            *f = Some(err);
        }
        self.failed.store(true, SeqCst);
    }

    /// The reason the communicator failed, as rank `me` reports it.
    pub fn failure(&self, me: usize) -> Error {
        let f = lock(&self.failure).clone();
        let mut e = f.unwrap_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "communicator failed for an unknown reason",
            )
        });
        e.rank = Some(me);
        e
    }

    fn ready(&self, on: &WaitFor) -> bool {
        match *on {
            WaitFor::Arrival { generation } => self.released(generation).is_some(),
            WaitFor::AllPosted { seq } => self.mailbox.iter().all(|m| m.has(seq)),
            WaitFor::Posted { src, dst, seq } => self.pair(src, dst).posted.load(SeqCst) > seq,
            WaitFor::Completed { src, dst, seq } => {
                self.pair(src, dst).completed.load(SeqCst) > seq
            }
        }
    }

    /// Waits until `on` holds. Errors when the communicator fails, the
    /// deadline passes, or every live rank is stuck.
    pub fn wait(
        self: &Arc<Self>,
        me: usize,
        on: WaitFor,
        what: &dyn Fn() -> String,
    ) -> Result<(), Error> {
        let mut round = 0;
        loop {
            if self.ready(&on) {
                return Ok(());
            }
            if self.has_failed() {
                return Err(self.failure(me));
            }
            if !self.threads.patience.idle(round) {
                break;
            }
            round += 1;
        }
        // a timeout past what an Instant can hold never expires
        let deadline = Instant::now().checked_add(self.timeout);
        let state = &self.threads.ranks[me];
        *lock(&state.wait) = Some(Wait {
            world: self.clone(),
            on: on.clone(),
            what: what(),
        });
        state.blocked.store(true, SeqCst);
        self.bump();
        let result = loop {
            if self.ready(&on) {
                break Ok(());
            }
            if self.has_failed() {
                break Err(self.failure(me));
            }
            if deadline.is_some_and(|d| Instant::now() >= d) {
                self.fail(self.timeout_error(me, &what()));
                continue;
            }
            if let Some((err, worlds)) = self.threads.detect_deadlock() {
                let refs: Vec<&World> = worlds.iter().map(|w| &**w).collect();
                self.threads.fail_each(&refs, err);
                continue;
            }
            self.threads
                .park_unless(|| self.ready(&on) || self.has_failed());
        };
        state.blocked.store(false, SeqCst);
        *lock(&state.wait) = None;
        self.bump();
        result
    }

    /// Waits for a condition that is certain to hold soon (every rank that
    /// passed the arrival rendezvous reaches completion): no deadline and no
    /// failure exit, since leaving early would free buffers others still use.
    pub fn wait_certain(&self, ready: impl Fn() -> bool) {
        let mut i = 0u32;
        while !ready() {
            if !self.threads.patience.idle(i) {
                self.threads.park_unless(&ready);
            }
            i = i.saturating_add(1);
        }
    }

    /// Passes the completion rendezvous of the current launch.
    pub fn complete(&self) {
        let (generation, last) = self.done.arrive(self.n);
        if last {
            self.wake();
        } else {
            self.wait_certain(|| self.done.passed(generation));
        }
    }

    fn timeout_error(&self, me: usize, what: &str) -> Error {
        let states: Vec<String> = (0..self.n)
            .map(|r| {
                format!(
                    "{} [{}]",
                    self.threads.describe_rank(r),
                    self.last_entered(r)
                )
            })
            .collect();
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{what} timed out after {:?} on rank {me}; {}",
                self.timeout,
                states.join("; ")
            ),
        )
    }
}

impl Threads {
    fn describe_rank(&self, r: usize) -> String {
        let s = &self.ranks[r];
        if s.finished.load(SeqCst) {
            return format!("rank {r}: finished its program");
        }
        match &*lock(&s.wait) {
            Some(w) if s.blocked.load(SeqCst) => format!(
                "rank {r}: waiting in {} on comm {:#x}",
                w.what, w.world.comm_id
            ),
            _ => format!("rank {r}: running outside rankwise"),
        }
    }

    /// Some(diagnosis, communicators to fail) when every live rank waits on
    /// a condition that no rank can make true.
    fn detect_deadlock(&self) -> Option<(Error, Vec<Arc<World>>)> {
        let e0 = self.epoch.load(SeqCst);
        let mut waits: Vec<(usize, Wait)> = Vec::new();
        for (r, s) in self.ranks.iter().enumerate() {
            if s.finished.load(SeqCst) {
                continue;
            }
            if !s.blocked.load(SeqCst) {
                return None;
            }
            let w = lock(&s.wait).clone()?;
            if w.ready() {
                return None;
            }
            waits.push((r, w));
        }
        if waits.is_empty() || self.epoch.load(SeqCst) != e0 {
            return None;
        }
        let mut worlds: Vec<Arc<World>> = Vec::new();
        for (_, w) in &waits {
            if !worlds.iter().any(|x| Arc::ptr_eq(x, &w.world)) {
                worlds.push(w.world.clone());
            }
        }
        Some((self.diagnose(&waits, worlds.len() > 1), worlds))
    }

    fn diagnose(&self, waits: &[(usize, Wait)], several_comms: bool) -> Error {
        let n = self.ranks.len();
        let finished = |r: usize| self.ranks[r].finished.load(SeqCst);
        let wait_of = |r: usize| waits.iter().find(|(w, _)| *w == r).map(|(_, w)| w);
        let states: Vec<String> = (0..n).map(|r| self.describe_rank(r)).collect();
        // the rank each waiter depends on, for point-to-point waits
        let peer_of = |w: &Wait| match w.on {
            WaitFor::Posted { src, .. } => Some(src),
            WaitFor::Completed { dst, .. } => Some(dst),
            WaitFor::Arrival { .. } | WaitFor::AllPosted { .. } => None,
        };
        for (r, w) in waits {
            let Some(peer) = peer_of(w) else { continue };
            let needs = if matches!(w.on, WaitFor::Posted { .. }) {
                "Send"
            } else {
                "Recv"
            };
            if finished(peer) {
                return Error::new(
                    ErrorKind::Unmatched,
                    format!(
                        "rank {r} waits in {} but rank {peer} finished its program without the matching {needs}; {}",
                        w.what,
                        states.join("; ")
                    ),
                );
            }
            if let Some(pw) = wait_of(peer)
                && peer_of(pw).is_none()
            {
                return Error::new(
                    ErrorKind::Unmatched,
                    format!(
                        "rank {r} waits in {} but rank {peer} waits in {} and will never post the matching {needs}; {}",
                        w.what,
                        pw.what,
                        states.join("; ")
                    ),
                );
            }
        }
        // a cycle of point-to-point waits: the classic ungrouped ring
        if let Some((start, _)) = waits.iter().find(|(_, w)| peer_of(w).is_some()) {
            let mut path = vec![*start];
            let mut cur = *start;
            while let Some(next) = wait_of(cur).and_then(peer_of) {
                if let Some(pos) = path.iter().position(|r| *r == next) {
                    let cycle: Vec<String> = path[pos..]
                        .iter()
                        .chain([&next])
                        .map(|r| r.to_string())
                        .collect();
                    return Error::new(
                        ErrorKind::Deadlock,
                        format!(
                            "deadlock: {}: each rank blocks in a Send/Recv that waits on the next; wrap these Send/Recv calls in one group; {}",
                            cycle.join(" -> "),
                            states.join("; ")
                        ),
                    );
                }
                path.push(next);
                cur = next;
            }
        }
        let gone: Vec<String> = (0..n)
            .filter(|r| finished(*r))
            .map(|r| r.to_string())
            .collect();
        let why = if several_comms {
            "ranks wait in collectives of different communicators: every rank must use its communicators in the same order".to_string()
        } else if gone.is_empty() {
            "ranks wait in calls that can never match".to_string()
        } else {
            format!(
                "rank{} {} finished without entering the call the others wait in",
                if gone.len() > 1 { "s" } else { "" },
                gone.join(",")
            )
        };
        Error::new(
            ErrorKind::Deadlock,
            format!("deadlock: {why}; {}", states.join("; ")),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn barrier_completes_and_withdraw_blocks_completion() {
        let b = Barrier::default();
        assert_eq!(b.arrive(3), (0, false));
        assert_eq!(b.arrive(3), (0, false));
        assert!(b.withdraw(0, 3), "an incomplete generation can be left");
        assert_eq!(b.arrive(3), (0, false), "two present again, not three");
        assert!(!b.passed(0));
        assert_eq!(b.arrive(3), (0, true));
        assert!(b.passed(0));
        assert!(!b.withdraw(0, 3), "a completed generation cannot be left");
    }

    #[test]
    fn a_finished_rank_turns_a_wait_into_a_diagnosis() {
        let w = World::new(
            2,
            Duration::from_secs(60),
            1,
            Threads::new(2, false, true, false),
        );
        w.threads.finish(1);
        let (generation, _) = w.arrival.arrive(2);
        // the 60 s timeout is never reached: the diagnosis (Deadlock, not
        // Timeout) comes from the finished rank
        let e = w
            .wait(0, WaitFor::Arrival { generation }, &|| {
                "AllReduce (opCount 0)".into()
            })
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Deadlock);
        assert!(
            e.message.contains("rank 1 finished without entering"),
            "{}",
            e.message
        );
        assert!(
            e.message
                .contains("rank 0: waiting in AllReduce (opCount 0)"),
            "{}",
            e.message
        );
    }

    #[test]
    fn timeout_names_the_missing_rank() {
        let w = World::new(
            2,
            Duration::from_millis(50),
            1,
            Threads::new(2, false, true, false),
        );
        // rank 1 is "running" (neither blocked nor finished): no deadlock, so the deadline fires
        let (generation, _) = w.arrival.arrive(2);
        let e = w
            .wait(0, WaitFor::Arrival { generation }, &|| {
                "Broadcast (opCount 4)".into()
            })
            .unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert!(
            e.message.contains("Broadcast (opCount 4) timed out"),
            "{}",
            e.message
        );
        assert!(
            e.message.contains("rank 1: running outside rankwise"),
            "{}",
            e.message
        );
    }
}
