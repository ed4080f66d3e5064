//! How the ranks of a communicator agree on a launch before any data
//! moves, over the transports: what each rank posts, in which rounds,
//! through which channel, and what a rank concludes from what came back.
//! Comparing posts and wording a mismatch is `core::agree`'s; moving bytes
//! is `transport`'s; this floor is everything in between, written once for
//! the NCCL engine and the checker (`librankwise_nccl.so`), and, for its
//! lane rounds, the mpi engine.
//!
//! A launch (one call, or the calls of a group) makes at most two rounds
//! per communicator ([`agree`]):
//!
//! 1. **Posts and pairs.** The launch's collectives are one exchange among
//!    all ranks (on the shared-memory lane when the communicator has one,
//!    else in the store); each of its Sends and Recvs to another rank is an
//!    exchange with that peer in the store ([`pairs`]). Everything this
//!    rank has for the store goes in one request. Then `core::agree`
//!    compares the collectives and [`pairs::meet`] each pair.
//! 2. **Verdicts**, only for launches with Sends or Recvs: each rank tells
//!    every peer it heard from what it found, and a rank whose own pairs
//!    matched reads its peers' findings, so a pair that failed between two
//!    other ranks stops this one too.
//!
//! A rank that does not come is a Timeout naming where it was last; a rank
//! that left (its owner finished in the store) ends the wait at once
//! ([`missing`]). Calls on several communicators in one group post on every
//! one before reading any, so ranks that list them in different orders do
//! not wait on each other.
//!
//! A communicator's waits can be ended from outside ([`stop`]: its rank
//! aborted it from another thread, the process is exiting or got a
//! signal); a wait so ended takes this rank's lane post back and returns
//! the stop's reason.
//!
//! Rooms: [`keys`] names every value in the store; `ask` makes every
//! request of the store; `round` makes one round of exchanges on any
//! number of communicators; [`lane`] is the shared-memory path (set-up
//! through the store, posting, waiting, taking a post back); `launch` the
//! first round of a launch, `verdicts` the second; [`pairs`] pairs Sends
//! with Recvs; [`missing`] words a wait that ended without a post;
//! [`stop`] ends waits from outside. Every wait of the agreement is in
//! `ask` and [`lane`].

mod ask;
pub mod cycle;
pub mod keys;
pub mod lane;
mod launch;
pub mod missing;
pub mod pairs;
mod round;
pub mod stop;
pub mod tier;
mod verdicts;
pub mod watch;

#[cfg(test)]
mod tests;

pub use ask::give_notice;

use crate::core::{Error, Launch, Posted, Result};
use crate::transport::lane::Lane;
use crate::transport::store::SideChannel;
use pairs::PairCounts;
use std::sync::Arc;
use std::time::{Duration, Instant};
use stop::{Stop, Watch};

/// A communicator's channel to its peers, as one rank holds it.
pub struct Link {
    /// The side channel: the store, in this process or over TCP.
    pub chan: Arc<dyn SideChannel>,
    /// The communicator's name in the store ([`keys`]).
    pub key: String,
    /// Each rank's owner id in the store, in rank order: the store marks
    /// owners finished, and a wait for a rank that finished ends at once.
    pub owners: Vec<usize>,
    /// The lane through shared memory, when every rank is on this host: a
    /// launch's collectives agree there instead of in the store.
    pub lane: Option<Lane>,
    /// The ranks grouped by host, when they span hosts and some share one
    /// ([`tier`]): a launch's collectives agree through the host leaders
    /// instead of every rank in the store.
    pub tier: Option<Box<tier::Tier>>,
    /// What ends this communicator's waits from outside (None: only their
    /// deadlines end them).
    stop: Option<Stop>,
    /// The current launch's watch of `stop`, from its start.
    watch: Option<Watch>,
}

impl Link {
    pub fn new(chan: Arc<dyn SideChannel>, key: String, owners: Vec<usize>) -> Link {
        Link {
            chan,
            key,
            owners,
            lane: None,
            tier: None,
            stop: None,
            watch: None,
        }
    }

    /// The link with waits that `stop` ends.
    pub fn with_stop(mut self, stop: Stop) -> Link {
        self.stop = Some(stop);
        self
    }

    /// Whether a store request of this link is in flight now, holding its
    /// connection.
    pub fn busy(&self) -> bool {
        self.stop.as_ref().is_some_and(|s| s.busy() > 0)
    }

    /// A launch begins: its waits look at the stop from now on.
    fn begin(&mut self) {
        self.watch = self.stop.as_ref().map(Stop::watch);
    }

    /// Sets up the lane when every rank of the communicator can map it
    /// ([`lane::join`]), else the tier when the ranks span hosts and some
    /// share one ([`tier::Tier::join`]). Every rank must call it at the
    /// same point, after no launch or after the same ones.
    pub fn join_lane(&mut self, me: usize, wanted: bool, deadline: Instant) {
        // counted in flight: a rank that leaves meanwhile says so elsewhere
        let _busy = match &self.stop {
            Some(s) => match s.enter(&s.watch()) {
                Ok(g) => Some(g),
                Err(_) => return,
            },
            None => None,
        };
        let dir = crate::transport::lane::segment_dir();
        self.lane = lane::join(
            &dir,
            &*self.chan,
            &self.key,
            me,
            &self.owners,
            wanted,
            deadline,
        );
        if self.lane.is_none() && self.owners.len() > 2 {
            let id = tier::identity(&dir);
            self.tier = tier::Tier::join(self, me, id, &dir, wanted, deadline).map(Box::new);
        }
    }

    /// The error of this launch's stop, once it is raised.
    fn stopped(&self) -> Option<Error> {
        self.watch.as_ref().and_then(|w| w.stopped())
    }

    /// Rank `rank`'s owner id in the store.
    pub fn owner(&self, rank: usize) -> usize {
        self.owners[rank]
    }
}

/// One rank of a communicator as the agreement sees it: its channel to
/// the others (None: only what this rank can check alone, its Sends to
/// itself against its Recvs from itself), and how its rounds and pairs
/// are numbered so far.
pub struct Peers {
    me: usize,
    nranks: usize,
    link: Option<Link>,
    /// collective rounds made: round k is the lane's round k and the
    /// store's exchange [`keys::collectives`] k, alike on every rank
    rounds: u64,
    pairs: PairCounts,
}

impl Peers {
    pub fn new(me: usize, nranks: usize, link: Option<Link>) -> Peers {
        Peers {
            me,
            nranks,
            link,
            rounds: 0,
            pairs: PairCounts::new(nranks),
        }
    }

    pub fn rank(&self) -> usize {
        self.me
    }

    pub fn nranks(&self) -> usize {
        self.nranks
    }

    pub fn link(&self) -> Option<&Link> {
        self.link.as_ref()
    }

    /// Collective rounds made so far.
    pub fn rounds(&self) -> u64 {
        self.rounds
    }

    /// This rank leaves (its program ended, or it failed with `why`): ranks
    /// waiting for its posts stop waiting and say so.
    pub fn leave(&self, why: Option<&str>) -> Result<()> {
        match &self.link {
            Some(l) => l.chan.finish(l.owner(self.me), why),
            None => Ok(()),
        }
    }

    /// Every rank's post of a round of collectives, in rank order: this
    /// rank's `mine` shown to the others (the first round of [`agree`]
    /// without the comparison). A rank without a link has only its own.
    pub fn exchange(&mut self, mine: &Posted, timeout: Duration) -> Result<Vec<Posted>> {
        if let Some(l) = &mut self.link {
            l.begin();
        }
        launch::exchange(self, mine, timeout).map_err(|f| f.error)
    }
}

/// Why a launch did not agree: the error every rank returns, and for the
/// checker's error line, what else is known (both sides of a mismatch in
/// full, or where a missing rank was last).
#[derive(Debug, Clone)]
pub struct Failure {
    pub error: Error,
    pub detail: Option<String>,
}

impl From<Error> for Failure {
    fn from(error: Error) -> Failure {
        Failure {
            error,
            detail: None,
        }
    }
}

/// The cross-rank agreement of one launch per communicator (see the
/// module doc), each wait bounded by `timeout`: Ok when every rank posted
/// the same collectives and every pair matched, on this rank and, for
/// launches with Sends or Recvs, on every peer it paired with.
pub fn agree(launches: &mut [(&mut Peers, &Launch)], timeout: Duration) -> Result<(), Failure> {
    settle(launches, None, timeout)
}

/// A launch this rank refused (a call of it failed this rank's own
/// checks, `why` says how), in its place in the agreement: every rank of
/// each communicator finds a notice where this rank's posts would be, so
/// ranks that made the calls fail at once, naming this rank and the call,
/// instead of waiting out their deadline (and no rank enters NCCL alone).
/// Ok when every rank refused it too; otherwise the error of the ranks
/// that made it, whose communicator is now failed.
pub fn refuse(
    launches: &mut [(&mut Peers, &Launch)],
    why: &str,
    timeout: Duration,
) -> Result<(), Failure> {
    settle(launches, Some(why), timeout)
}

fn settle(
    launches: &mut [(&mut Peers, &Launch)],
    refused: Option<&str>,
    timeout: Duration,
) -> Result<(), Failure> {
    let deadline = Instant::now() + timeout;
    for (p, _) in launches.iter_mut() {
        if let Some(l) = &mut p.link {
            l.begin();
        }
    }
    let pairings = launch::first_round(launches, refused, deadline, timeout)?;
    verdicts::second_round(launches, &pairings, deadline, timeout)
}
