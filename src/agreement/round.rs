//! One round of exchanges, on any number of communicators at once: each
//! communicator's postings go on its lane (a few stores, no waiting) or in
//! one request to its store; then every party's share of each posting this
//! rank reads comes back. A group across communicators posts on every one
//! before it reads any, so ranks that list them in different orders (or
//! whose communicators use different stores) do not wait on each other.

use super::{Link, lane};
use crate::core::Result;
use crate::transport::store::{Item, Read, Share};
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
    }
    let mut stored = store_exchange(rounds, deadline)?.into_iter();
    rounds
        .iter()
        .map(|r| {
            let mut from_store = stored.next().unwrap_or_default().into_iter();
            r.postings
                .iter()
                .map(|p| match (p.lane_round, &r.link.lane) {
                    (Some(seq), Some(on)) if r.reads => lane::shares(r, on, seq, deadline),
                    (Some(_), _) => Ok(Vec::new()),
                    (None, _) => Ok(from_store.next().unwrap_or_default()),
                })
                .collect()
        })
        .collect()
}

/// The store's part of [`exchange`]: per round, the shares of its postings
/// that are not on a lane, in order. A launch on one communicator is one
/// request.
fn store_exchange(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>> {
    fn items<'a>(r: &Round<'a>, read: Read) -> Vec<Item<'a>> {
        r.postings
            .iter()
            .filter(|p| p.lane_round.is_none())
            .map(|p| p.item(r.link, read))
            .collect()
    }
    fn note<'a>(r: &Round<'a>) -> Option<(usize, &'a [u8])> {
        r.note.map(|n| (r.link.owner(r.me), n))
    }
    let busy: Vec<usize> = (0..rounds.len())
        .filter(|&i| rounds[i].postings.iter().any(|p| p.lane_round.is_none()))
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
