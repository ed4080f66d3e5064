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

use super::p2p::Pair;
use super::sync::{Barrier, PARK, Padded, Patience};
use crate::core::{Error, ErrorKind, Func};
use std::collections::HashMap;
use std::sync::atomic::{
    AtomicBool, AtomicU64, AtomicUsize,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::{Arc, Condvar, Mutex, Weak};

pub use super::sync::lock;
use std::time::{Duration, Instant};

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
    pub(super) fn ready(&self) -> bool {
        self.world.ready(&self.on)
    }
}

/// One rank thread, whichever communicator it is in.
#[derive(Default)]
pub struct RankState {
    pub finished: AtomicBool,
    pub(super) blocked: AtomicBool,
    pub(super) wait: Mutex<Option<Wait>>,
}

/// The rank threads of one launch: their states, the progress counter and
/// the parking place, shared by all communicators they use, so a wait in one
/// communicator sees a rank blocked in another.
pub struct Threads {
    pub ranks: Vec<Padded<RankState>>,
    patience: Patience,
    pub(super) epoch: AtomicU64,
    sleepers: AtomicUsize,
    park_lock: Mutex<()>,
    park: Condvar,
    /// every communicator of the launch (to fail them all when a rank fails)
    pub worlds: Mutex<Vec<Weak<World>>>,
    /// communicators created by `dup`: (parent comm id, k) -> child
    pub dups: Mutex<HashMap<(u64, u64), Arc<World>>>,
    /// serialises recording failures (see `fail_each`)
    failing: Mutex<()>,
    /// compare every rank's calls before moving data (see `LaunchOptions`)
    pub check_agreement: bool,
}

impl Threads {
    /// `pinned`: each rank runs on a core of its own, so waits spin instead
    /// of yielding.
    pub fn new(n: usize, check_agreement: bool, pinned: bool) -> Arc<Threads> {
        Arc::new(Threads {
            check_agreement,
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

pub struct World {
    pub n: usize,
    pub comm_id: u64,
    pub timeout: Duration,
    pub threads: Arc<Threads>,
    pub arrival: Padded<Barrier>,
    pub done: Padded<Barrier>,
    pub pairs: Vec<Pair>,
    /// group launches' calls (a single call's are in its mailbox)
    pub posted: Vec<Padded<Mutex<crate::core::Posted>>>,
    /// each rank's posts of its collective launches
    pub mailbox: Vec<super::post::Mailbox>,
    /// `(g + 1) << 1 | alone`: the coordinator of collective generation `g`
    /// released the other ranks, having done the whole launch (`alone`) or
    /// for them to move their shares
    go: Padded<AtomicU64>,
    /// the coordinator's agreement verdict for the released generation
    pub verdict: Mutex<Option<Error>>,
    /// per rank share: its parts of the current launch's calls claimed so
    /// far (see [`World::claim`])
    claimed: Vec<Padded<AtomicU64>>,
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
            claimed: (0..n).map(|_| Padded::default()).collect(),
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

    /// Claims the next of the `parts` parts of rank `share`'s share of the
    /// call being moved; None when all are taken. Every count is 0 when a
    /// call's data phase starts: the rendezvous that completes a call
    /// clears them before anyone passes it ([`World::complete`]). Relaxed:
    /// the data the parts move is ordered by the rendezvous around them.
    pub fn claim(&self, share: usize, parts: usize) -> Option<usize> {
        let claimed = &self.claimed[share];
        let mut next = claimed.load(Relaxed);
        while next < parts as u64 {
            match claimed.compare_exchange_weak(next, next + 1, Relaxed, Relaxed) {
                Ok(_) => return Some(next as usize),
                Err(now) => next = now,
            }
        }
        None
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

    /// Passes the completion rendezvous of the current call, whose last
    /// arrival clears the counts of claimed parts for the next (every rank
    /// is past its claims then, and none can start the next call's yet);
    /// a count still 0 is only read, so a call that was not cut leaves the
    /// counters' lines where they are.
    pub fn complete(&self) {
        let clear = || {
            for c in self.claimed.iter().filter(|c| c.load(Relaxed) != 0) {
                c.store(0, Relaxed);
            }
        };
        let (generation, last) = self.done.arrive_then(self.n, clear);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_finished_rank_turns_a_wait_into_a_diagnosis() {
        let w = World::new(2, Duration::from_secs(60), 1, Threads::new(2, true, false));
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
            Threads::new(2, true, false),
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
