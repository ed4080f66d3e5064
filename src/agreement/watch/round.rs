//! One round of watch mode: the ranks of each host hand their summaries to
//! their host's leader (its lowest rank) on a shared-memory lane of their
//! own, or through the store when they have none; each leader posts one
//! value for its host into an exchange that only the judge (rank 0, the
//! first host's leader) reads; the judge answers each leader through an
//! exchange of the two of them, and each leader its host's ranks the way
//! they came. The store carries two values per host and round, the judge
//! reads one per host: nothing grows with the ranks' square, and in the
//! common round (nothing to narrow down) nothing with the ranks at all
//! past their hosts. Every exchange of a round completes (each party
//! posts, each reader reads), so the store keeps nothing per round.
//!
//! [`Watcher::new`] makes every rank a host of its own (the flat form:
//! every rank posts to the store); [`Watcher::with_hosts`] groups them.

use super::hosts::{HostPost, each_needed};
use super::judge::Judge;
use super::wire::{Ask, Summary, Verdict};
use crate::agreement::keys;
use crate::agreement::tier::{hosts_of, place};
use crate::core::{Error, ErrorKind, Result};
use crate::transport::lane::{Lane, Part, SLOT_BYTES, Waited};
use crate::transport::store::{Item, Missing, Read, SideChannel, gathered};
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often a wait on the lane asks the store whether the ranks it waits
/// for left: seldom, so that the ranks of a host do not make the store's
/// load grow with them (a wait on the lane is normally a few ms).
const ASK_GONE: Duration = Duration::from_secs(1);

/// A rank's side of watch mode's rounds on one communicator.
pub struct Watcher {
    chan: Arc<dyn SideChannel>,
    key: String,
    owners: Vec<usize>,
    me: usize,
    round: u64,
    judge: Option<Judge>,
    /// every host's ranks, its leader first
    hosts: Vec<Vec<usize>>,
    /// this rank's host, and its place there
    host: usize,
    local: usize,
    /// this host's lane (None: its ranks meet in the store)
    lane: Option<Lane>,
    /// what the last verdict asked (what this round's summaries answer)
    ask: Ask,
}

fn left(what: &str, missing: &[(usize, Missing)]) -> Error {
    let who: Vec<String> = missing
        .iter()
        .map(|(r, m)| match m {
            Missing::Timeout => format!("rank {r} did not come"),
            Missing::Finished { reason: None } => format!("rank {r} left"),
            Missing::Finished { reason: Some(why) } => format!("rank {r} left ({why})"),
            Missing::Cycle(steps) => format!(
                "rank {r} waits in a cycle ({})",
                crate::agreement::cycle::waits_in_cycle(steps)
            ),
        })
        .collect();
    Error::new(
        ErrorKind::RemoteError,
        format!("{what}: {}", who.join("; ")),
    )
}

/// The one value of an exchange's answer that a rank reads.
fn only(
    answer: Vec<Vec<crate::transport::store::Share>>,
    parties: &[usize],
) -> Result<Vec<Vec<u8>>> {
    let shares = answer.into_iter().next().unwrap_or_default();
    gathered(shares).map_err(|m| {
        let m: Vec<(usize, Missing)> = m
            .into_iter()
            .map(|(p, why)| (parties.get(p).copied().unwrap_or(p), why))
            .collect();
        left("watch", &m)
    })
}

impl Watcher {
    /// Rank `me`'s watcher of the communicator named `key` in the store
    /// `chan`, whose ranks are store owners `owners`; every rank is a host
    /// of its own.
    pub fn new(chan: Arc<dyn SideChannel>, key: String, owners: Vec<usize>, me: usize) -> Watcher {
        let hosts = (0..owners.len()).map(|r| vec![r]).collect();
        Watcher {
            chan,
            key,
            owners,
            me,
            round: 0,
            judge: (me == 0).then(Judge::default),
            hosts,
            host: me,
            local: 0,
            lane: None,
            ask: Ask::default(),
        }
    }

    /// [`Watcher::new`] with the ranks grouped by host: every rank tells
    /// the others its `identity` (`agreement::tier::identity`) once, and the ranks
    /// of each host set up a lane of their own in `shm_dir` (None: they
    /// meet in the store).
    pub fn with_hosts(
        chan: Arc<dyn SideChannel>,
        key: String,
        owners: Vec<usize>,
        me: usize,
        identity: u64,
        shm_dir: Option<&Path>,
        deadline: Instant,
    ) -> Result<Watcher> {
        let mut w = Watcher::new(chan, key, owners, me);
        let k = keys::watch_hosts(&w.key);
        let id = identity.to_le_bytes();
        let item = Item {
            key: &k,
            owners: &w.owners,
            me,
            value: Some(&id),
            read: Read::Now,
        };
        let values = only(w.chan.exchange(&[item], None, deadline)?, &w.owners_ranks())?;
        w.hosts = hosts_of(&values)?;
        (w.host, w.local) = place(&w.hosts, me);
        let mine = w.hosts[w.host].clone();
        if mine.len() > 1 {
            let owners: Vec<usize> = mine.iter().map(|r| w.owners[*r]).collect();
            let dir = shm_dir.unwrap_or(Path::new("/dev/shm"));
            w.lane = crate::agreement::lane::join(
                dir,
                &*w.chan,
                &keys::watch_lane(&w.key, mine[0]),
                w.local,
                &owners,
                shm_dir.is_some(),
                deadline,
            );
        }
        Ok(w)
    }

    fn owners_ranks(&self) -> Vec<usize> {
        (0..self.owners.len()).collect()
    }

    /// The watcher whose judge names ranks that made no collective for
    /// `stall` while others are past them (rank 0's; the others' have no
    /// judge).
    pub fn stall_after(mut self, stall: Duration) -> Watcher {
        if self.judge.is_some() {
            self.judge = Some(Judge::with_stall(stall));
        }
        self
    }

    /// Whether this rank's host meets on a lane.
    pub fn on_lane(&self) -> bool {
        self.lane.is_some()
    }

    /// The hosts, each one's ranks with its leader first.
    pub fn hosts(&self) -> &[Vec<usize>] {
        &self.hosts
    }

    /// One round: posts `summary`, and returns the judge's verdict on
    /// every rank's (what to answer next round; a failure found). Every
    /// wait ends at `deadline`, or at once when a rank left.
    pub fn round(&mut self, summary: &Summary, deadline: Instant) -> Result<Verdict> {
        self.round += 1;
        let mine = &self.hosts[self.host];
        let verdict = if self.local == 0 {
            let mut parts = vec![(self.me, summary.clone())];
            if mine.len() > 1 {
                parts.extend(self.gather(summary, deadline)?);
            }
            let post = HostPost::of(parts, &self.ask);
            let v = self.ask_judge(&post, deadline)?;
            if self.hosts[self.host].len() > 1 {
                self.pass_on(&v, deadline)?;
            }
            v
        } else {
            self.tell_leader(summary, deadline)?;
            self.hear_leader(deadline)?
        };
        self.ask = verdict.ask;
        Ok(verdict)
    }

    /// This round's lane rounds: the summaries, then the verdict.
    fn seqs(&self) -> (u64, u64) {
        (2 * self.round, 2 * self.round + 1)
    }

    /// A leader's post for its host to the judge, and the verdict back.
    fn ask_judge(&mut self, post: &HostPost, deadline: Instant) -> Result<Verdict> {
        let key = keys::watch_round(&self.key, self.round);
        let leaders: Vec<usize> = self.hosts.iter().map(|h| h[0]).collect();
        let owners: Vec<usize> = leaders.iter().map(|r| self.owners[*r]).collect();
        let bytes = post.encode();
        let item = Item {
            key: &key,
            owners: &owners,
            me: self.host,
            value: Some(&bytes),
            read: match self.judge {
                Some(_) => Read::Now,
                None => Read::Never,
            },
        };
        let answer = self.chan.exchange(&[item], None, deadline)?;
        let n = self.owners.len();
        let ask = self.ask;
        let Some(judge) = &mut self.judge else {
            let owners = [owners[0], owners[self.host]];
            return self.hear(
                &keys::watch_verdict(&self.key, self.round, &self.host.to_string()),
                &owners,
                &[0, self.me],
                deadline,
            );
        };
        let mut folded = Vec::new();
        let mut each: Vec<Option<Summary>> = vec![None; n];
        for v in only(answer, &leaders)? {
            match HostPost::decode(&v, n)? {
                HostPost::Folded(s) => folded.push(s),
                HostPost::Each(parts) => {
                    for (r, s) in parts {
                        each[r] = Some(s);
                    }
                }
            }
        }
        let all: Vec<Summary> = if each_needed(&ask) {
            each.into_iter()
                .collect::<Option<Vec<_>>>()
                .ok_or_else(|| {
                    Error::new(
                        ErrorKind::Internal,
                        "a host leader left out a rank's summary the judge asked for",
                    )
                })?
        } else {
            folded
                .into_iter()
                .chain(each.into_iter().flatten())
                .collect()
        };
        let verdict = judge.judge(&all);
        let to: Vec<(String, [usize; 2])> = (1..self.hosts.len())
            .map(|h| {
                let key = keys::watch_verdict(&self.key, self.round, &h.to_string());
                (key, [owners[0], owners[h]])
            })
            .collect();
        self.send(&verdict, &to, deadline)?;
        Ok(verdict)
    }

    /// Reads the verdict posted for this rank under `key` (parties
    /// `owners`, the ranks `ranks`), posting nothing of its own.
    fn hear(
        &self,
        key: &str,
        owners: &[usize; 2],
        ranks: &[usize; 2],
        deadline: Instant,
    ) -> Result<Verdict> {
        let item = Item {
            key,
            owners,
            me: 1,
            value: Some(&[]),
            read: Read::Now,
        };
        let values = only(self.chan.exchange(&[item], None, deadline)?, ranks)?;
        let v = values.first().ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "the store answered a watch round with nothing",
            )
        })?;
        Verdict::decode(v)
    }

    /// The leader: the summaries of its host's other ranks, with their ranks.
    fn gather(&self, own: &Summary, deadline: Instant) -> Result<Vec<(usize, Summary)>> {
        let mine = &self.hosts[self.host];
        let values: Vec<Vec<u8>> = match &self.lane {
            Some(lane) => {
                let (seq, _) = self.seqs();
                self.lane_post(lane, seq, &own.encode())?;
                let mut asked = Instant::now();
                let waited = lane.wait(seq, deadline, |late| {
                    if asked.elapsed() < ASK_GONE {
                        return None;
                    }
                    asked = Instant::now();
                    // posted, and left, since the look at its slot: not missing
                    let gone: Vec<(usize, Missing)> = late
                        .iter()
                        .filter_map(|&l| self.gone(mine[l]).filter(|_| lane.read(l, seq).is_none()))
                        .collect();
                    (!gone.is_empty()).then_some(gone)
                });
                let parts = match waited {
                    Waited::All(parts) => parts,
                    Waited::Stopped { by: Some(gone), .. } => return Err(left("watch", &gone)),
                    Waited::Stopped { by: None, .. } => {
                        return Err(Error::new(
                            ErrorKind::Timeout,
                            "watch: a rank of this host did not post its summary in time",
                        ));
                    }
                };
                let mut values = Vec::with_capacity(parts.len());
                for (l, p) in parts.into_iter().enumerate() {
                    values.push(self.lane_value(p, mine[l], seq, deadline)?);
                }
                values.into_iter().skip(1).collect()
            }
            None => {
                let key = keys::watch_host(&self.key, mine[0], self.round);
                let owners: Vec<usize> = mine.iter().map(|r| self.owners[*r]).collect();
                let item = Item {
                    key: &key,
                    owners: &owners,
                    me: 0,
                    value: Some(&[]),
                    read: Read::Now,
                };
                only(self.chan.exchange(&[item], None, deadline)?, mine)?
                    .into_iter()
                    .skip(1)
                    .collect()
            }
        };
        mine[1..]
            .iter()
            .zip(values)
            .map(|(r, v)| Summary::decode(&v).map(|s| (*r, s)))
            .collect()
    }

    /// A host's other rank: its summary to the leader.
    fn tell_leader(&self, summary: &Summary, deadline: Instant) -> Result<()> {
        let bytes = summary.encode();
        let mine = &self.hosts[self.host];
        match &self.lane {
            Some(lane) => self.lane_post(lane, self.seqs().0, &bytes),
            None => {
                let key = keys::watch_host(&self.key, mine[0], self.round);
                let owners: Vec<usize> = mine.iter().map(|r| self.owners[*r]).collect();
                let item = Item {
                    key: &key,
                    owners: &owners,
                    me: self.local,
                    value: Some(&bytes),
                    read: Read::Never,
                };
                self.chan.exchange(&[item], None, deadline).map(|_| ())
            }
        }
    }

    /// The leader: the verdict to its host's other ranks.
    fn pass_on(&self, verdict: &Verdict, deadline: Instant) -> Result<()> {
        let bytes = verdict.encode();
        let mine = &self.hosts[self.host];
        if let Some(lane) = &self.lane {
            return self.lane_post(lane, self.seqs().1, &bytes);
        }
        let to: Vec<(String, [usize; 2])> = mine[1..]
            .iter()
            .map(|r| {
                let key = keys::watch_verdict(&self.key, self.round, &format!("m{r}"));
                (key, [self.owners[mine[0]], self.owners[*r]])
            })
            .collect();
        self.send(verdict, &to, deadline)
    }

    /// `verdict` into each exchange of `to` (its key, and the owners of
    /// the sender and the one who reads it), in one request.
    fn send(
        &self,
        verdict: &Verdict,
        to: &[(String, [usize; 2])],
        deadline: Instant,
    ) -> Result<()> {
        let bytes = verdict.encode();
        let items: Vec<Item<'_>> = to
            .iter()
            .map(|(key, owners)| Item {
                key,
                owners,
                me: 0,
                value: Some(&bytes),
                read: Read::Never,
            })
            .collect();
        if !items.is_empty() {
            self.chan.exchange(&items, None, deadline)?;
        }
        Ok(())
    }

    /// A host's other rank: the verdict from its leader.
    fn hear_leader(&self, deadline: Instant) -> Result<Verdict> {
        let leader = self.hosts[self.host][0];
        let Some(lane) = &self.lane else {
            let key = keys::watch_verdict(&self.key, self.round, &format!("m{}", self.me));
            let owners = [self.owners[leader], self.owners[self.me]];
            return self.hear(&key, &owners, &[leader, self.me], deadline);
        };
        let seq = self.seqs().1;
        let mut asked = Instant::now();
        let mut nap = Duration::from_micros(500);
        loop {
            if let Some(p) = lane.read(0, seq) {
                return Verdict::decode(&self.lane_value(p, leader, seq, deadline)?);
            }
            if Instant::now() >= deadline {
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!("watch: rank {leader}, this host's leader, sent no verdict in time"),
                ));
            }
            if asked.elapsed() >= ASK_GONE {
                asked = Instant::now();
                if let Some(gone) = self.gone(leader) {
                    // it may have answered and left since the look above
                    if lane.read(0, seq).is_none() {
                        return Err(left("watch", &[gone]));
                    }
                    continue;
                }
            }
            std::thread::sleep(nap);
            nap = (nap * 2).min(Duration::from_millis(4));
        }
    }

    /// Posts `value` on the lane as this rank's part of lane round `seq`,
    /// through the store when it is larger than a slot.
    fn lane_post(&self, lane: &Lane, seq: u64, value: &[u8]) -> Result<()> {
        if value.len() > SLOT_BYTES {
            self.chan
                .set(&keys::watch_overflow(&self.key, self.me, seq), value)?;
        }
        lane.post(self.local, seq, value);
        Ok(())
    }

    /// A lane part of `rank` in round `seq` as bytes: from the store when
    /// the slot says it is there.
    fn lane_value(&self, p: Part, rank: usize, seq: u64, deadline: Instant) -> Result<Vec<u8>> {
        match p {
            Part::Value(v) => Ok(v),
            Part::InStore => {
                let key = keys::watch_overflow(&self.key, rank, seq);
                match self.chan.get(&key, self.owners[rank], deadline)? {
                    Ok(v) => Ok(v),
                    Err(m) => Err(left("watch", &[(rank, m)])),
                }
            }
        }
    }

    /// `rank`, if the store says it left.
    fn gone(&self, rank: usize) -> Option<(usize, Missing)> {
        match self
            .chan
            .get(&keys::gone(&self.key), self.owners[rank], Instant::now())
        {
            Ok(Err(m @ Missing::Finished { .. })) => Some((rank, m)),
            _ => None,
        }
    }
}
