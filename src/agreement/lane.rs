//! The agreement's path through the shared-memory lane
//! ([`crate::transport::lane`]): setting it up through the store, posting a
//! round, and waiting for every rank's post of it. A rank that gives up on
//! a round (its deadline, or a peer that left) takes its post back, so a
//! rank that arrives later fails too instead of finding every post and
//! going on alone; a post already read stays read, so a timeout names only
//! the ranks that never came.

use super::round::Round;
use super::{Link, keys};
use crate::core::{Error, Result};
use crate::transport::lane::{Lane, Part, Stopped, Waited, join_with};
use crate::transport::store::{Item, Missing, Read, Share, SideChannel};
use std::path::Path;
use std::time::{Duration, Instant};

/// Sets up the lane for rank `rank` of the communicator named `key`, whose
/// store owners are `owners`, through `chan`: the lane when every rank
/// mapped the same segment, None (the store then carries everything, on
/// every rank) otherwise. Rank 0 makes the segment in `dir`; `wanted` is
/// this rank's `transport::lane::wanted`.
pub fn join(
    dir: &Path,
    chan: &dyn SideChannel,
    key: &str,
    rank: usize,
    owners: &[usize],
    wanted: bool,
    deadline: Instant,
) -> Option<Lane> {
    let mut round = 0;
    join_with(dir, rank, owners.len(), wanted, |value| {
        round += 1;
        let k = keys::lane_setup(key, round);
        let item = Item {
            key: &k,
            owners,
            me: rank,
            value: Some(value),
            read: Read::Now,
        };
        let answer = chan.exchange(&[item], None, deadline).ok()?;
        answer
            .into_iter()
            .next()?
            .into_iter()
            .collect::<Result<_, _>>()
            .ok()
    })
}

/// Posts a round's lane postings and leaves its note on the lane. A value
/// too large for a slot goes to the store first.
pub(super) fn post(r: &Round<'_>) -> Result<()> {
    let Some(lane) = &r.link.lane else {
        return Ok(());
    };
    if let Some(note) = r.note {
        lane.set_note(r.me, note);
    }
    for p in r.postings {
        let Some(seq) = p.lane_round else { continue };
        if p.value.len() > crate::transport::lane::SLOT_BYTES {
            let key = keys::overflow(&r.link.key, seq, r.me);
            r.link.set(&key, &p.value)?;
        }
        lane.post(r.me, seq, &p.value);
    }
    Ok(())
}

/// Whether rank `rank` has left, as the store says: its owner finished.
pub(super) fn gone(link: &Link, rank: usize) -> Option<(usize, Missing)> {
    match link.get(&keys::gone(&link.key), link.owner(rank), Instant::now()) {
        Ok(Err(m @ Missing::Finished { .. })) => Some((rank, m)),
        _ => None,
    }
}

/// The longest a lane wait goes without asking the store who left.
const ASK_AT_MOST: Duration = Duration::from_millis(200);

/// When a lane wait asks the store which of the ranks it waits for left:
/// at its first tick, then 10 ms later, doubling up to [`ASK_AT_MOST`].
/// Each question is a request per missing rank, so a long wait of many
/// ranks (64 on 2 cores take turns for ms) must not ask at every tick.
pub(super) struct Asking {
    next: Option<Instant>,
    gap: Duration,
}

impl Default for Asking {
    fn default() -> Asking {
        Asking {
            next: None,
            gap: Duration::from_millis(10),
        }
    }
}

impl Asking {
    /// Whether to ask now (and, if so, when next).
    pub(super) fn due(&mut self) -> bool {
        let now = Instant::now();
        if self.next.is_some_and(|t| now < t) {
            return false;
        }
        self.next = Some(now + self.gap);
        self.gap = (self.gap * 2).min(ASK_AT_MOST);
        true
    }
}

/// What ended a lane wait before every rank posted.
enum Ended {
    /// ranks that left, as the store says
    Left(Vec<(usize, Missing)>),
    /// this communicator's stop, or a signal
    Stopped(Error),
}

/// Every rank's share of lane round `seq`, in rank order. A rank that has
/// not posted is `Missing::Finished` once the store says it left (asked
/// every 10 ms of the wait), else `Missing::Timeout` at the deadline. A
/// stop raised meanwhile ends the wait with its error, this rank's post
/// taken back.
pub(super) fn shares(
    r: &Round<'_>,
    lane: &Lane,
    seq: u64,
    deadline: Instant,
) -> Result<Vec<Share>> {
    let link = r.link;
    let mut asking = Asking::default();
    let waited = lane.wait(seq, deadline, |missing| {
        if let Some(e) = link.watch.as_ref().and_then(|w| w.stopped()) {
            return Some(Ended::Stopped(e));
        }
        // a rank waiting in a pair for a side this rank has not made: a
        // cycle, which no deadline would end any better
        if let Some(counts) = r.pairs {
            let mine = super::cycle::text(r.note.unwrap_or_default());
            let cycle = missing.iter().find_map(|&q| {
                let theirs = lane.note(q)?;
                super::cycle::cycle(r.me, counts, &mine, q, &theirs)
            });
            if let Some(e) = cycle {
                return Some(Ended::Stopped(e));
            }
        }
        if !asking.due() {
            return None;
        }
        // a rank may post, finish the round and leave between the look at
        // its slot and the store's answer: it left only if it never posted
        let left: Vec<(usize, Missing)> = missing
            .iter()
            .filter_map(|&q| gone(link, q))
            .filter(|(q, _)| lane.read(*q, seq).is_none())
            .collect();
        (!left.is_empty()).then_some(Ended::Left(left))
    });
    let parts: Vec<std::result::Result<Part, Missing>> = match waited {
        Waited::All(parts) => parts.into_iter().map(Ok).collect(),
        Waited::Stopped { by, parts } => {
            lane.withdraw(r.me, seq);
            let left = match by {
                Some(Ended::Stopped(e)) => return Err(e),
                Some(Ended::Left(left)) => left,
                None => Vec::new(),
            };
            parts
                .into_iter()
                .enumerate()
                .map(|(q, p)| {
                    p.ok_or_else(|| {
                        left.iter()
                            .find(|(who, _)| *who == q)
                            .map_or(Missing::Timeout, |(_, m)| m.clone())
                    })
                })
                .collect()
        }
    };
    Ok(parts
        .into_iter()
        .enumerate()
        .map(|(rank, part)| match part {
            Ok(Part::Value(v)) => Ok(v),
            Ok(Part::InStore) => {
                let key = keys::overflow(&link.key, seq, rank);
                link.get(&key, link.owner(rank), deadline)
                    .unwrap_or(Err(Missing::Timeout))
            }
            Err(m) => Err(m),
        })
        .collect())
}

/// One round of words on the lane (the mpi engine's agreement): this
/// rank's `mine` posted as rank `me`'s part of round `seq`, then every
/// rank's read into `out` and `lens` as [`Lane::wait_words`] does, `tick`
/// asked as the wait goes on. A wait that `tick` or the deadline stops
/// takes this rank's post back before it returns.
#[allow(clippy::too_many_arguments)]
pub fn words<T>(
    lane: &Lane,
    me: usize,
    seq: u64,
    mine: &[u64],
    deadline: Instant,
    tick: impl FnMut(&[usize]) -> Option<T>,
    out: &mut [u64],
    lens: &mut [usize],
) -> std::result::Result<(), Stopped<T>> {
    lane.post_words(me, seq, mine);
    let got = lane.wait_words(seq, deadline, tick, out, lens);
    if got.is_err() {
        lane.withdraw(me, seq);
    }
    got
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::transport::store::Store;
    use std::time::Duration;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    fn join_all(dir: &Path, n: usize, wanted: impl Fn(usize) -> bool + Sync) -> Vec<Option<Lane>> {
        let store = Store::new();
        let owners: Vec<usize> = (100..100 + n).collect();
        std::thread::scope(|sc| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let (store, owners, wanted) = (&store, &owners, &wanted);
                    sc.spawn(move || join(dir, &**store, "c", r, owners, wanted(r), soon(10_000)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        })
    }

    #[test]
    fn ranks_of_one_host_join_one_segment_and_leave_no_file() {
        let dir = tempfile::tempdir().unwrap();
        let rings = join_all(dir.path(), 4, |_| true);
        let rings: Vec<Lane> = rings.into_iter().map(Option::unwrap).collect();
        rings[3].post(3, 0, b"from 3");
        assert_eq!(rings[0].read(3, 0), Some(Part::Value(b"from 3".to_vec())));
        assert!(rings.iter().all(|r| r.nonce() == rings[0].nonce()));
        let left = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(left, 0, "the segment's file is unlinked");
    }

    #[test]
    fn ranks_whose_directories_differ_share_no_segment() {
        // as ranks on two hosts: rank 1 looks for rank 0's segment in a
        // directory of its own, does not find it, and nobody takes the lane
        let (d0, d1) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let store = Store::new();
        let owners = [7, 8];
        let rings: Vec<Option<Lane>> = std::thread::scope(|sc| {
            let hs: Vec<_> = [d0.path(), d1.path()]
                .into_iter()
                .enumerate()
                .map(|(r, dir)| {
                    let (store, owners) = (&store, &owners);
                    sc.spawn(move || join(dir, &**store, "c", r, owners, true, soon(10_000)))
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(rings.iter().all(Option::is_none));
        for d in [&d0, &d1] {
            assert_eq!(std::fs::read_dir(d.path()).unwrap().count(), 0);
        }
    }

    #[test]
    fn one_rank_without_the_lane_keeps_every_rank_on_the_store() {
        let dir = tempfile::tempdir().unwrap();
        for no in [0, 2] {
            let rings = join_all(dir.path(), 3, |r| r != no);
            assert!(rings.iter().all(Option::is_none), "rank {no} says no");
        }
        let left = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(left, 0, "a segment not used is unlinked too");
    }
}
