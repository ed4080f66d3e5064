//! Strict mode across hosts: a round of collectives in which the ranks of
//! each host meet on a shared-memory lane of their own, and only one rank
//! per host (its leader, the host's lowest rank) uses the store. A round
//! goes up and comes back down:
//!
//! 1. every rank posts its value on its host's lane ([`Tier::tell`]);
//! 2. each leader reads its host's values, and the notes of ranks that did
//!    not come ([`Tier::gather`]), into one [`Table`];
//! 3. each leader posts its host's table to an exchange of the leaders
//!    that only the judge (rank 0, the first host's leader) reads
//!    ([`Tier::up`]);
//! 4. the judge merges the tables into one for every rank and answers each
//!    leader through an exchange of the two of them ([`Tier::down`]);
//! 5. each leader hears it ([`Tier::hear_judge`]) and posts it on its lane
//!    ([`Tier::pass_on`]), where its host's ranks read it
//!    ([`Tier::hear_leader`]).
//!
//! Every rank ends with every rank's value, as from the flat exchange, and
//! compares them itself, so a mismatch is worded alike on every rank. The
//! store carries two values per host and round, and a table whose values
//! are all alike is one value and a count: nothing at one process grows
//! with the square of the ranks. A caller that makes rounds on several
//! communicators at once makes each step on all of them before the next
//! (`round::exchange`): each step waits only on earlier steps of others.
//!
//! A host without a lane (shared memory refused) meets in the store: its
//! ranks post to an exchange its leader reads, and the leader answers
//! each of them in an exchange of two.

use super::lane::gone;
use super::{Link, keys};
pub use table::Table;

mod table;
use crate::core::{Result, wire};
use crate::transport::lane::{Lane, Part, SLOT_BYTES, Waited};
use crate::transport::store::{Item, Missing, Read, Share};
use std::path::Path;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long each step up the tier may wait past the round's deadline: a
/// leader waits for its ranks until the deadline, then still has to post,
/// so the judge waits a little longer for the leaders, and so on down.
pub const GRACE: Duration = Duration::from_secs(1);

/// Where a rank runs, as a number every rank of the same host (and the
/// same segment directory, which is how tests make hosts on one machine)
/// computes alike: the host's name and boot, and the directory.
pub fn identity(shm_dir: &Path) -> u64 {
    let read = |p: &str| std::fs::read(p).unwrap_or_default();
    [
        read("/proc/sys/kernel/hostname"),
        read("/proc/sys/kernel/random/boot_id"),
        shm_dir.as_os_str().as_encoded_bytes().to_vec(),
    ]
    .iter()
    .fold(wire::fnv1a(b"host"), |h, part| {
        let mut b = h.to_le_bytes().to_vec();
        b.extend_from_slice(part);
        wire::fnv1a(&b)
    })
}

/// The ranks of each host, from every rank's identity: hosts in the order
/// of their lowest rank, each host's ranks in order (its leader first).
pub fn group(ids: &[u64]) -> Vec<Vec<usize>> {
    let mut hosts: Vec<(u64, Vec<usize>)> = Vec::new();
    for (r, id) in ids.iter().enumerate() {
        match hosts.iter_mut().find(|(h, _)| h == id) {
            Some((_, ranks)) => ranks.push(r),
            None => hosts.push((*id, vec![r])),
        }
    }
    hosts.into_iter().map(|(_, ranks)| ranks).collect()
}

/// The ranks of each host ([`group`]) from the identities every rank
/// posted (8 bytes each, in rank order); an error names a garbled one.
pub fn hosts_of(values: &[Vec<u8>]) -> crate::core::Result<Vec<Vec<usize>>> {
    let ids = values
        .iter()
        .enumerate()
        .map(|(r, v)| {
            <[u8; 8]>::try_from(&v[..])
                .map(u64::from_le_bytes)
                .map_err(|_| {
                    crate::core::Error::new(
                        crate::core::ErrorKind::Internal,
                        format!("rank {r}'s host identity is garbled ({} bytes)", v.len()),
                    )
                })
        })
        .collect::<crate::core::Result<Vec<u64>>>()?;
    Ok(group(&ids))
}

/// Where rank `me` is among `hosts`: its host, and its place there (0:
/// the host's leader).
pub fn place(hosts: &[Vec<usize>], me: usize) -> (usize, usize) {
    let host = hosts.iter().position(|h| h.contains(&me)).unwrap_or(0);
    let local = hosts[host].iter().position(|r| *r == me).unwrap_or(0);
    (host, local)
}

/// A party that did not answer: its rank, and why.
pub type Absent = (usize, Missing);

/// One rank's place in the hosts of a communicator.
pub struct Tier {
    /// the tier's name in the store, under the communicator's
    ns: String,
    /// every host's ranks, its leader first
    hosts: Vec<Vec<usize>>,
    host: usize,
    /// this rank's place in its host
    local: usize,
    me: usize,
    /// this host's lane (None: its ranks meet in the store)
    lane: Option<Lane>,
    /// where the ranks that did not come to the last round were, as the
    /// judge's table told
    heard: Mutex<Vec<(usize, Vec<u8>)>>,
}

impl Tier {
    /// Rank `me`'s tier over `hosts` (each host's ranks, leader first),
    /// its host meeting on `lane` (None: in the store), named `ns`.
    pub fn new(ns: String, hosts: Vec<Vec<usize>>, me: usize, lane: Option<Lane>) -> Tier {
        let (host, local) = place(&hosts, me);
        Tier {
            ns,
            hosts,
            host,
            local,
            me,
            lane,
            heard: Mutex::new(Vec::new()),
        }
    }

    /// Sets the tier up for rank `me` of `link`'s communicator: every rank
    /// tells the others its host `identity` once; None when the ranks are
    /// all on one host or each on a host of its own (the flat exchange is
    /// as good then). The ranks of each host set up a lane of their own in
    /// `dir` when `wanted`. Every rank must call it at the same point.
    pub fn join(
        link: &Link,
        me: usize,
        identity: u64,
        dir: &Path,
        wanted: bool,
        deadline: Instant,
    ) -> Option<Tier> {
        let ns = keys::tier(&link.key);
        let k = keys::tier_hosts(&ns);
        let id = identity.to_le_bytes();
        let item = Item {
            key: &k,
            owners: &link.owners,
            me,
            value: Some(&id),
            read: Read::Now,
        };
        // any rank missing or garbled: the flat exchange, which names it
        let answer = link.exchange(&[item], None, deadline).ok()?;
        let values: Vec<Vec<u8>> = answer
            .into_iter()
            .next()?
            .into_iter()
            .map(|s| s.ok())
            .collect::<Option<_>>()?;
        let hosts = hosts_of(&values).ok()?;
        if hosts.len() < 2 || hosts.len() == values.len() {
            return None;
        }
        let mut t = Tier::new(ns, hosts, me, None);
        let mine = &t.hosts[t.host];
        if mine.len() > 1 {
            let owners: Vec<usize> = mine.iter().map(|r| link.owner(*r)).collect();
            t.lane = super::lane::join(
                dir,
                &*link.chan,
                &keys::tier_lane(&t.ns, mine[0]),
                t.local,
                &owners,
                wanted,
                deadline,
            );
        }
        Some(t)
    }

    pub fn hosts(&self) -> &[Vec<usize>] {
        &self.hosts
    }

    pub fn is_leader(&self) -> bool {
        self.local == 0
    }

    pub fn is_judge(&self) -> bool {
        self.host == 0 && self.local == 0
    }

    pub fn on_lane(&self) -> bool {
        self.lane.is_some()
    }

    fn mine(&self) -> &[usize] {
        &self.hosts[self.host]
    }

    /// Lane rounds of tier round `round`: the ranks' values, the answer.
    fn seqs(round: u64) -> (u64, u64) {
        (2 * round, 2 * round + 1)
    }

    /// Where this rank is (`note`), on its host's lane for a leader that
    /// waits on it; without a lane, the store keeps it with each request.
    pub fn set_note(&self, note: &[u8]) {
        if let Some(lane) = &self.lane {
            lane.set_note(self.local, note);
        }
    }

    /// Step 1, every rank: its value of round `round` to its leader (with
    /// `note`, where it is, when it goes through the store). Never waits
    /// in the store; the store's acknowledgement may take as long as the
    /// leader waits for the value (`deadline`).
    pub fn tell(
        &self,
        link: &Link,
        round: u64,
        value: &[u8],
        note: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<()> {
        let mine = self.mine();
        if mine.len() < 2 {
            return Ok(());
        }
        match &self.lane {
            Some(lane) => self.lane_post(link, lane, Self::seqs(round).0, value),
            None if self.is_leader() => Ok(()),
            None => {
                let key = keys::tier_host(&self.ns, mine[0], round);
                let owners: Vec<usize> = mine.iter().map(|r| link.owner(*r)).collect();
                let item = Item {
                    key: &key,
                    owners: &owners,
                    me: self.local,
                    value: Some(value),
                    read: Read::Never,
                };
                let note = note.map(|n| (link.owner(self.me), n));
                link.exchange(&[item], note, deadline).map(|_| ())
            }
        }
    }

    /// Step 2, a leader: its host's table of round `round` (`own` first),
    /// waiting for its ranks until `deadline` or until the store says one
    /// left. With `cycle` (this rank's Send/Recv counts and where it is),
    /// a rank of the host whose note shows it waiting for a side this
    /// rank has not made ends the wait with the cycle ([`super::cycle`]).
    pub fn gather(
        &self,
        link: &Link,
        round: u64,
        own: &[u8],
        cycle: Option<(&super::pairs::PairCounts, &[u8])>,
        deadline: Instant,
    ) -> Result<Table> {
        let mine = self.mine();
        let mut t = Table::of(vec![Ok(own.to_vec())]);
        if mine.len() < 2 {
            return Ok(t);
        }
        let Some(lane) = &self.lane else {
            let key = keys::tier_host(&self.ns, mine[0], round);
            let owners: Vec<usize> = mine.iter().map(|r| link.owner(*r)).collect();
            let item = Item {
                key: &key,
                owners: &owners,
                me: 0,
                value: Some(own),
                read: Read::Now,
            };
            let shares = link
                .exchange(&[item], None, deadline)?
                .into_iter()
                .next()
                .unwrap_or_default();
            let mut t = Table::of(shares);
            t.shares.resize(mine.len(), Err(Missing::Timeout));
            for (l, note) in t.notes.iter_mut().enumerate() {
                if t.shares[l] == Err(Missing::Timeout) {
                    *note = link.last_note(link.owner(mine[l])).ok().flatten();
                }
            }
            return Ok(t);
        };
        let seq = Self::seqs(round).0;
        let mut asking = super::lane::Asking::default();
        let waited = lane.wait(seq, deadline, |late| {
            if let Some(e) = link.stopped() {
                return Some(Err(e));
            }
            if let Some((counts, note)) = cycle {
                let here = super::cycle::text(note);
                let found = late.iter().find_map(|&l| {
                    let theirs = lane.note(l)?;
                    super::cycle::cycle(self.me, counts, &here, mine[l], &theirs)
                });
                if let Some(e) = found {
                    return Some(Err(e));
                }
            }
            if !asking.due() {
                return None;
            }
            let left: Vec<Absent> = late
                .iter()
                .filter_map(|&l| gone(link, mine[l]).map(|(_, m)| (l, m)))
                // posted, and left, since the look at its slot: not missing
                .filter(|(l, _)| lane.read(*l, seq).is_none())
                .collect();
            (!left.is_empty()).then_some(Ok(left))
        });
        let (parts, left) = match waited {
            Waited::All(parts) => (parts.into_iter().map(Some).collect(), Vec::new()),
            Waited::Stopped {
                by: Some(Err(e)), ..
            } => return Err(e),
            Waited::Stopped { by, parts } => (parts, by.and_then(|b| b.ok()).unwrap_or_default()),
        };
        t.shares.clear();
        t.notes = vec![None; mine.len()];
        for (l, p) in parts.into_iter().enumerate() {
            let share = match p {
                Some(p) => self.lane_value(link, p, mine[l], seq, deadline)?,
                None => {
                    let m = left.iter().find(|(w, _)| *w == l).map(|(_, m)| m.clone());
                    if m.is_none() {
                        t.notes[l] = lane.note(l);
                    }
                    Err(m.unwrap_or(Missing::Timeout))
                }
            };
            t.shares.push(share);
        }
        t.shares[0] = Ok(own.to_vec());
        Ok(t)
    }

    /// Step 3, a leader: its host's table to the judge. The judge reads
    /// every host's (each leader's post, or why it is missing) when `read`
    /// is `Read::Now`, in a later [`Tier::judge_read`] when `Read::Later`.
    pub fn up(
        &self,
        link: &Link,
        round: u64,
        table: &Table,
        (read, note): (Read, Option<&[u8]>),
        deadline: Instant,
    ) -> Result<Option<Vec<Share>>> {
        let key = keys::tier_up(&self.ns, round);
        let owners = self.leader_owners(link);
        let bytes = table.encode();
        let item = Item {
            key: &key,
            owners: &owners,
            me: self.host,
            value: Some(&bytes),
            read: if self.is_judge() { read } else { Read::Never },
        };
        let note = note.map(|n| (link.owner(self.me), n));
        let answer = link.exchange(&[item], note, deadline + GRACE)?;
        Ok((self.is_judge() && read == Read::Now)
            .then(|| answer.into_iter().next().unwrap_or_default()))
    }

    /// Steps 3 and 5 in one request, a leader but the judge on a round of
    /// one communicator: its host's table up, and the judge's table back.
    pub fn up_and_hear(
        &self,
        link: &Link,
        round: u64,
        table: &Table,
        note: Option<&[u8]>,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Absent>> {
        let up = keys::tier_up(&self.ns, round);
        let owners = self.leader_owners(link);
        let bytes = table.encode();
        let down = keys::tier_down(&self.ns, round, &self.host.to_string());
        let pair = [link.owner(0), link.owner(self.me)];
        let items = [
            Item {
                key: &up,
                owners: &owners,
                me: self.host,
                value: Some(&bytes),
                read: Read::Never,
            },
            Item {
                key: &down,
                owners: &pair,
                me: 1,
                value: Some(&[]),
                read: Read::Now,
            },
        ];
        let note = note.map(|n| (link.owner(self.me), n));
        let answer = link.exchange(&items, note, deadline + 2 * GRACE)?;
        let share = answer
            .into_iter()
            .nth(1)
            .and_then(|s| s.into_iter().next())
            .unwrap_or(Err(Missing::Timeout));
        Ok(share.map_err(|m| (0, m)))
    }

    /// Step 3, the judge, after [`Tier::up`] with `Read::Later`.
    pub fn judge_read(&self, link: &Link, round: u64, deadline: Instant) -> Result<Vec<Share>> {
        let key = keys::tier_up(&self.ns, round);
        let owners = self.leader_owners(link);
        let item = Item {
            key: &key,
            owners: &owners,
            me: 0,
            value: None,
            read: Read::Now,
        };
        Ok(link
            .exchange(&[item], None, deadline + GRACE)?
            .into_iter()
            .next()
            .unwrap_or_default())
    }

    fn leader_owners(&self, link: &Link) -> Vec<usize> {
        self.hosts.iter().map(|h| link.owner(h[0])).collect()
    }

    /// The judge: every rank's share from every host leader's post (`ups`,
    /// in host order). A host whose leader did not post gives its ranks
    /// the leader's absence; a leader that left with a notice in place of
    /// its post gives its ranks that notice as their value. A leader that
    /// did not come is noted where the store last saw it.
    pub fn merge(&self, link: &Link, ups: Vec<Share>) -> Table {
        let n = self.hosts.iter().map(Vec::len).sum();
        let mut all = Table::of(vec![Err(Missing::Timeout); n]);
        for (h, up) in self.hosts.iter().zip(ups) {
            let host = match &up {
                Ok(b) if wire::notice(b).is_some() => Ok(Table::of(vec![Ok(b.clone()); h.len()])),
                Ok(b) => Table::decode(b, h.len()),
                Err(m) => {
                    let mut t = Table::of(vec![Err(m.clone()); h.len()]);
                    if *m == Missing::Timeout {
                        t.notes[0] = link.last_note(link.owner(h[0])).ok().flatten();
                    }
                    Ok(t)
                }
            };
            let host = host.unwrap_or_else(|e| {
                let why = Missing::Finished {
                    reason: Some(format!("rank {}, its host's leader: {}", h[0], e.message)),
                };
                Table::of(vec![Err(why); h.len()])
            });
            for ((r, s), note) in h.iter().zip(host.shares).zip(host.notes) {
                all.shares[*r] = s;
                all.notes[*r] = note;
            }
        }
        all
    }

    /// Step 4, the judge: the merged table to every other leader. Never
    /// waits in the store; the acknowledgement may take as long as the
    /// leaders wait for the table ([`Tier::hear_judge`]).
    pub fn down(&self, link: &Link, round: u64, table: &Table, deadline: Instant) -> Result<()> {
        let bytes = table.encode();
        let keys: Vec<(String, [usize; 2])> = (1..self.hosts.len())
            .map(|h| {
                let key = keys::tier_down(&self.ns, round, &h.to_string());
                (key, [link.owner(0), link.owner(self.hosts[h][0])])
            })
            .collect();
        send(link, &bytes, &keys, deadline + 2 * GRACE)
    }

    /// Step 5, a leader but the judge: the judge's table, or why the judge
    /// did not send it.
    pub fn hear_judge(
        &self,
        link: &Link,
        round: u64,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Absent>> {
        let key = keys::tier_down(&self.ns, round, &self.host.to_string());
        let owners = [link.owner(0), link.owner(self.me)];
        hear(link, &key, &owners, 0, deadline + 2 * GRACE)
    }

    /// Step 6, a leader: the table to its host's ranks. Never waits in
    /// the store; the acknowledgement may take as long as the ranks wait
    /// for the table ([`Tier::hear_leader`]).
    pub fn pass_on(&self, link: &Link, round: u64, table: &[u8], deadline: Instant) -> Result<()> {
        let mine = self.mine();
        if mine.len() < 2 {
            return Ok(());
        }
        if let Some(lane) = &self.lane {
            return self.lane_post(link, lane, Self::seqs(round).1, table);
        }
        let keys: Vec<(String, [usize; 2])> = mine[1..]
            .iter()
            .map(|r| {
                let key = keys::tier_down(&self.ns, round, &format!("m{r}"));
                (key, [link.owner(mine[0]), link.owner(*r)])
            })
            .collect();
        send(link, table, &keys, deadline + 4 * GRACE)
    }

    /// Step 6, a rank but its host's leader: the table from its leader, or
    /// why the leader did not send it.
    /// With `cycle` (this rank's Send/Recv counts and where it is), a
    /// leader whose note shows it waiting for a side this rank has not made
    /// ends the wait with the cycle ([`super::cycle`]).
    pub fn hear_leader(
        &self,
        link: &Link,
        round: u64,
        cycle: Option<(&super::pairs::PairCounts, &[u8])>,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Absent>> {
        let leader = self.mine()[0];
        // past the leader's last request (2 graces, and the 750 ms a
        // request may overrun its deadline), so a leader that fails there
        // tells its ranks why before they give up on it
        let deadline = deadline + 4 * GRACE;
        let Some(lane) = &self.lane else {
            let key = keys::tier_down(&self.ns, round, &format!("m{}", self.me));
            let owners = [link.owner(leader), link.owner(self.me)];
            return hear(link, &key, &owners, leader, deadline);
        };
        let seq = Self::seqs(round).1;
        let (start, mut asking) = (Instant::now(), super::lane::Asking::default());
        loop {
            if let Some(p) = lane.read(0, seq) {
                return Ok(self
                    .lane_value(link, p, leader, seq, deadline)?
                    .map_err(|m| (leader, m)));
            }
            if let Some(e) = link.stopped() {
                return Err(e);
            }
            if Instant::now() >= deadline {
                return Ok(Err((leader, Missing::Timeout)));
            }
            if start.elapsed() >= Duration::from_millis(2) && asking.due() {
                let found = cycle.and_then(|(counts, note)| {
                    let here = super::cycle::text(note);
                    super::cycle::cycle(self.me, counts, &here, leader, &lane.note(0)?)
                });
                let gone = || gone(link, leader).map(|(_, m)| Ok(Err((leader, m))));
                if let Some(end) = found.map(Err).or_else(gone) {
                    // it may have answered (and left) since the look above
                    if lane.read(0, seq).is_none() {
                        return end;
                    }
                    continue;
                }
            }
            // as a lane wait does: the core given away, then short naps
            if start.elapsed() < Duration::from_millis(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    /// Every rank's share from the judge's table as heard (`bytes`),
    /// keeping the notes of ranks that did not come for [`Tier::note`].
    pub fn every_share(&self, bytes: &[u8]) -> Result<Vec<Share>> {
        let n = self.hosts.iter().map(Vec::len).sum();
        let t = Table::decode(bytes, n)?;
        self.keep_notes(&t);
        Ok(t.shares)
    }

    /// The judge's own [`Tier::every_share`].
    pub fn keep_notes(&self, t: &Table) {
        let notes: Vec<(usize, Vec<u8>)> = t
            .notes
            .iter()
            .enumerate()
            .filter_map(|(r, n)| n.clone().map(|n| (r, n)))
            .collect();
        *self.heard.lock().unwrap_or_else(|p| p.into_inner()) = notes;
    }

    /// Where `rank` was last, when the last round's table said (it did not
    /// come to it).
    pub fn note(&self, rank: usize) -> Option<Vec<u8>> {
        let heard = self.heard.lock().unwrap_or_else(|p| p.into_inner());
        heard
            .iter()
            .find(|(r, _)| *r == rank)
            .map(|(_, n)| n.clone())
    }

    /// Posts `value` on the lane as this rank's part of lane round `seq`,
    /// through the store when it is larger than a slot.
    fn lane_post(&self, link: &Link, lane: &Lane, seq: u64, value: &[u8]) -> Result<()> {
        if value.len() > SLOT_BYTES {
            link.set(&keys::tier_overflow(&self.ns, self.me, seq), value)?;
        }
        lane.post(self.local, seq, value);
        Ok(())
    }

    /// A lane part of `rank` in lane round `seq` as a share: from the store
    /// when the slot says it is there.
    fn lane_value(
        &self,
        link: &Link,
        p: Part,
        rank: usize,
        seq: u64,
        deadline: Instant,
    ) -> Result<Share> {
        match p {
            Part::Value(v) => Ok(Ok(v)),
            Part::InStore => {
                let key = keys::tier_overflow(&self.ns, rank, seq);
                link.get(&key, link.owner(rank), deadline)
            }
        }
    }
}

/// `value` into each exchange of `to` (its key, and the owners of the
/// sender and the one who reads it), in one request that does not wait in
/// the store; its acknowledgement may take until `read_by`, when the
/// readers stop waiting.
fn send(link: &Link, value: &[u8], to: &[(String, [usize; 2])], read_by: Instant) -> Result<()> {
    let items: Vec<Item<'_>> = to
        .iter()
        .map(|(key, owners)| Item {
            key,
            owners,
            me: 0,
            value: Some(value),
            read: Read::Never,
        })
        .collect();
    if !items.is_empty() {
        link.exchange(&items, None, read_by)?;
    }
    Ok(())
}

/// Reads what party 0 (rank `from`) of the exchange `key` of two (store
/// owners `owners`) sent this rank, posting nothing of its own.
fn hear(
    link: &Link,
    key: &str,
    owners: &[usize; 2],
    from: usize,
    deadline: Instant,
) -> Result<std::result::Result<Vec<u8>, Absent>> {
    let item = Item {
        key,
        owners,
        me: 1,
        value: Some(&[]),
        read: Read::Now,
    };
    let shares = link.exchange(&[item], None, deadline)?;
    let share = shares
        .into_iter()
        .next()
        .and_then(|s| s.into_iter().next())
        .unwrap_or(Err(Missing::Timeout));
    Ok(share.map_err(|m| (from, m)))
}

#[cfg(test)]
mod tests;
