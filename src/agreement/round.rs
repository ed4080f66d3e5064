//! One round of exchanges, on any number of communicators at once: each
//! communicator's postings go on its lane (a few stores, no waiting) or in
//! one request to its store; then every party's share of each posting this
//! rank reads comes back. A group across communicators posts on every one
//! before it reads any, so ranks that list them in different orders (or
//! whose communicators use different stores) do not wait on each other.
//! A communicator whose ranks span hosts ([`super::tier`]) takes its
//! collectives up and down its tier instead, each step on every
//! communicator before the next.

use super::tier::{Absent, Table, Tier};
use super::{Link, lane};
use crate::core::{Error, ErrorKind, Result, wire};
use crate::transport::store::{Item, Missing, Read, Share};
use std::time::Instant;

/// The store owners of an exchange's parties.
pub enum Parties {
    /// every rank of the communicator (a launch's collectives)
    All,
    /// two ranks' owners (a Send/Recv pair, or two ranks' verdicts)
    Two([usize; 2]),
}

/// One exchange this rank takes part in, held until its request is made.
pub struct Posting {
    pub key: String,
    pub parties: Parties,
    /// this rank's party in the exchange
    pub party: usize,
    pub value: Vec<u8>,
    /// the lane round that carries it instead of the store
    pub lane_round: Option<u64>,
    /// the tier round that carries it instead of the store
    pub tier_round: Option<u64>,
}

impl Posting {
    fn item<'a>(&'a self, link: &'a Link, read: Read) -> Item<'a> {
        Item {
            key: &self.key,
            owners: match &self.parties {
                Parties::All => &link.owners,
                Parties::Two(o) => o,
            },
            me: self.party,
            value: Some(&self.value),
            read,
        }
    }
}

/// One communicator's exchanges of one round.
pub struct Round<'a> {
    pub link: &'a Link,
    /// this rank of the communicator
    pub me: usize,
    pub postings: &'a [Posting],
    /// false: this rank only posts (it failed already)
    pub reads: bool,
    /// where this rank is, kept (by the lane or the store) for ranks that
    /// wait on it
    pub note: Option<&'a [u8]>,
    /// the Sends and Recvs this rank has made, when a wait on the lane is
    /// to look for a wait-for cycle with the ranks it waits for
    /// ([`super::cycle`])
    pub pairs: Option<&'a super::pairs::PairCounts>,
}

/// Makes one round on every communicator of `rounds`: per round, per
/// posting, every party's share when this rank reads it (nothing when it
/// only posts). A round that fails (its stop was raised, the store is
/// gone) takes back every lane post of `rounds`, so no rank arriving later
/// finds this rank's post and goes on alone.
pub fn exchange(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>> {
    let answers = post_and_read(rounds, deadline);
    if answers.is_err() {
        for r in rounds {
            if let Some(on) = &r.link.lane {
                for seq in r.postings.iter().filter_map(|p| p.lane_round) {
                    on.withdraw(r.me, seq);
                }
            }
        }
    }
    answers
}

fn post_and_read(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>> {
    for r in rounds {
        lane::post(r)?;
        if let (Some(t), Some(note)) = (&r.link.tier, r.note) {
            t.set_note(note);
        }
        if let Some((t, p, seq)) = tiered(r) {
            t.tell(r.link, seq, &p.value, r.note, deadline)?;
        }
    }
    let mut stored = store_exchange(rounds, deadline)?.into_iter();
    let mut up_and_down = tiers(rounds, deadline)?.into_iter();
    rounds
        .iter()
        .map(|r| {
            let mut from_store = stored.next().unwrap_or_default().into_iter();
            let mut from_tier = up_and_down.next().flatten();
            r.postings
                .iter()
                .map(|p| match (p.lane_round, &r.link.lane, p.tier_round) {
                    (Some(seq), Some(on), _) if r.reads => lane::shares(r, on, seq, deadline),
                    (Some(_), _, _) => Ok(Vec::new()),
                    (None, _, Some(_)) if r.reads => Ok(from_tier.take().unwrap_or_default()),
                    (None, _, Some(_)) => Ok(Vec::new()),
                    (None, _, None) => Ok(from_store.next().unwrap_or_default()),
                })
                .collect()
        })
        .collect()
}

/// A round's posting that goes up its communicator's tier, with the tier
/// and the tier round.
fn tiered<'a>(r: &Round<'a>) -> Option<(&'a Tier, &'a Posting, u64)> {
    let t: &Tier = r.link.tier.as_deref()?;
    r.postings
        .iter()
        .find_map(|p| p.tier_round.map(|seq| (t, p, seq)))
}

/// What a wait up or down the tier looks for a wait-for cycle with: this
/// rank's Send/Recv counts and its note, when the round has them.
fn cycle_of<'a>(r: &Round<'a>) -> Option<(&'a super::pairs::PairCounts, &'a [u8])> {
    r.pairs.map(|c| (c, r.note.unwrap_or_default()))
}

/// Why a rank this one waited on up or down the tier did not answer.
fn absent(what: &str, (rank, m): Absent) -> Error {
    match m {
        Missing::Cycle(steps) => super::cycle::waits_in_cycle(&steps),
        Missing::Timeout => Error::new(ErrorKind::Timeout, format!("rank {rank} {what} in time")),
        Missing::Finished { reason: None } => Error::new(
            ErrorKind::Deadlock,
            format!("rank {rank} finished its program: it {what}"),
        ),
        Missing::Finished { reason: Some(why) } => {
            Error::new(ErrorKind::RemoteError, format!("rank {rank} failed: {why}"))
        }
    }
}

/// A host leader's step of tier round `round`, and when it failed, its
/// host's ranks (which wait for the leader on their lane) told why at
/// once, not at their deadline.
fn tell_host<T>(
    r: &Round<'_>,
    t: &Tier,
    round: u64,
    deadline: Instant,
    step: Result<T>,
) -> Result<T> {
    if let Err(e) = &step {
        let why = format!(
            "rank {}, which leads this host's ranks, failed: {}",
            r.me, e.message
        );
        let _ = t.pass_on(r.link, round, &wire::encode_notice(&why), deadline);
    }
    step
}

/// Every rank's share of each round's tier posting (None for a round
/// without one), the steps of [`super::tier`] made on every communicator
/// before the next step.
fn tiers(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Option<Vec<Share>>>> {
    let on: Vec<Option<(&Tier, &Posting, u64)>> = rounds.iter().map(tiered).collect();
    let many = on.iter().flatten().count() > 1;
    let read = if many { Read::Later } else { Read::Now };
    let judge_gone =
        |a| wire::encode_notice(&absent("judges the hosts' posts and did not answer", a).message);
    // leaders: their host's table up to the judge (and, on a round of one
    // communicator, the judge's answer back in the same request)
    let mut ups: Vec<Option<Vec<Share>>> = vec![None; rounds.len()];
    let mut answers: Vec<Option<Vec<u8>>> = vec![None; rounds.len()];
    for (i, (r, t)) in rounds.iter().zip(&on).enumerate() {
        let Some((t, p, seq)) = t else { continue };
        if t.is_leader() {
            let table = tell_host(
                r,
                t,
                *seq,
                deadline,
                t.gather(r.link, *seq, &p.value, cycle_of(r), deadline),
            )?;
            if many || t.is_judge() {
                ups[i] = tell_host(
                    r,
                    t,
                    *seq,
                    deadline,
                    t.up(r.link, *seq, &table, (read, r.note), deadline),
                )?;
            } else {
                let heard = t.up_and_hear(r.link, *seq, &table, r.note, deadline);
                let heard = tell_host(r, t, *seq, deadline, heard)?;
                answers[i] = Some(heard.unwrap_or_else(judge_gone));
            }
        }
    }
    // the judge: every host's tables merged, and down to every leader
    let mut out: Vec<Option<Vec<Share>>> = vec![None; rounds.len()];
    for (i, (r, t)) in rounds.iter().zip(&on).enumerate() {
        let Some((t, _, seq)) = t else { continue };
        if t.is_judge() {
            let ups = match ups[i].take() {
                Some(u) => u,
                None => tell_host(r, t, *seq, deadline, t.judge_read(r.link, *seq, deadline))?,
            };
            let table: Table = t.merge(r.link, ups);
            let bytes = table.encode();
            tell_host(r, t, *seq, deadline, t.down(r.link, *seq, &table, deadline))?;
            t.keep_notes(&table);
            out[i] = Some(table.shares);
            answers[i] = Some(bytes);
        }
    }
    // the other leaders: the judge's table
    for (i, (r, t)) in rounds.iter().zip(&on).enumerate() {
        let Some((t, _, seq)) = t else { continue };
        if t.is_leader() && !t.is_judge() && answers[i].is_none() {
            let heard = tell_host(r, t, *seq, deadline, t.hear_judge(r.link, *seq, deadline))?;
            answers[i] = Some(heard.unwrap_or_else(judge_gone));
        }
    }
    // down to every host's ranks
    for (i, (r, t)) in rounds.iter().zip(&on).enumerate() {
        let (Some((t, _, seq)), Some(b)) = (t, &answers[i]) else {
            continue;
        };
        t.pass_on(r.link, *seq, b, deadline)?;
    }
    for (i, (r, t)) in rounds.iter().zip(&on).enumerate() {
        let Some((t, _, seq)) = t else { continue };
        if out[i].is_some() {
            continue;
        }
        let bytes = match answers[i].take() {
            Some(b) => b,
            None => match t.hear_leader(r.link, *seq, cycle_of(r), deadline)? {
                Ok(b) => b,
                Err(a) => {
                    return Err(absent(
                        "leads this host's ranks and did not pass on its answer",
                        a,
                    ));
                }
            },
        };
        if let Some(why) = wire::notice(&bytes) {
            return Err(Error::new(ErrorKind::RemoteError, why));
        }
        out[i] = Some(t.every_share(&bytes)?);
    }
    Ok(out)
}

/// The store's part of [`exchange`]: per round, the shares of its postings
/// that are not on a lane, in order. A launch on one communicator is one
/// request.
fn store_exchange(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>> {
    fn items<'a>(r: &Round<'a>, read: Read) -> Vec<Item<'a>> {
        r.postings
            .iter()
            .filter(|p| p.lane_round.is_none() && p.tier_round.is_none())
            .map(|p| p.item(r.link, read))
            .collect()
    }
    fn note<'a>(r: &Round<'a>) -> Option<(usize, &'a [u8])> {
        r.note.map(|n| (r.link.owner(r.me), n))
    }
    let busy: Vec<usize> = (0..rounds.len())
        .filter(|&i| {
            rounds[i]
                .postings
                .iter()
                .any(|p| p.lane_round.is_none() && p.tier_round.is_none())
        })
        .collect();
    let mut out = vec![Vec::new(); rounds.len()];
    if let [i] = busy[..] {
        let r = &rounds[i];
        let read = if r.reads { Read::Now } else { Read::Never };
        out[i] = r.link.exchange(&items(r, read), note(r), deadline)?;
        return Ok(out);
    }
    for &i in &busy {
        let r = &rounds[i];
        let read = if r.reads { Read::Later } else { Read::Never };
        r.link.exchange(&items(r, read), note(r), deadline)?;
    }
    for &i in &busy {
        let r = &rounds[i];
        let reads: Vec<Item<'_>> = items(r, Read::Now)
            .into_iter()
            .map(|it| Item { value: None, ..it })
            .collect();
        out[i] = if r.reads {
            r.link.exchange(&reads, None, deadline)?
        } else {
            vec![Vec::new(); reads.len()]
        };
    }
    Ok(out)
}
