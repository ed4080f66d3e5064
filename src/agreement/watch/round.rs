//! One round of watch mode over the store: every rank posts its summary
//! into an exchange only the judging rank (rank 0) reads; the judge
//! answers each rank through an exchange of the two of them. A round costs
//! the store one value per rank each way, and each rank one request
//! (the judge two), whatever the number of ranks: nothing grows with its
//! square. Every exchange of a round completes (each party posts, each
//! reader reads), so the store keeps nothing per round.

use super::judge::Judge;
use super::wire::{Summary, Verdict};
use crate::core::{Error, ErrorKind, Result};
use crate::transport::store::{Item, Missing, Read, SideChannel, gathered};
use std::sync::Arc;
use std::time::Instant;

/// A rank's side of watch mode's rounds on one communicator.
pub struct Watcher {
    chan: Arc<dyn SideChannel>,
    key: String,
    owners: Vec<usize>,
    me: usize,
    round: u64,
    judge: Option<Judge>,
}

fn summaries_key(comm: &str, round: u64) -> String {
    format!("{comm}/w{round}")
}

fn verdict_key(comm: &str, round: u64, rank: usize) -> String {
    format!("{comm}/w{round}.{rank}")
}

fn left(what: &str, missing: &[(usize, Missing)]) -> Error {
    let who: Vec<String> = missing
        .iter()
        .map(|(r, m)| match m {
            Missing::Timeout => format!("rank {r} did not come"),
            Missing::Finished { reason: None } => format!("rank {r} left"),
            Missing::Finished { reason: Some(why) } => format!("rank {r} left ({why})"),
        })
        .collect();
    Error::new(
        ErrorKind::RemoteError,
        format!("{what}: {}", who.join("; ")),
    )
}

impl Watcher {
    /// Rank `me`'s watcher of the communicator named `key` in the store
    /// `chan`, whose ranks are store owners `owners`.
    pub fn new(chan: Arc<dyn SideChannel>, key: String, owners: Vec<usize>, me: usize) -> Watcher {
        Watcher {
            chan,
            key,
            owners,
            me,
            round: 0,
            judge: (me == 0).then(Judge::default),
        }
    }

    /// One round: posts `summary`, and returns the judge's verdict on
    /// every rank's (what to answer next round; a failure found). Every
    /// wait ends at `deadline`, or at once when a rank left.
    pub fn round(&mut self, summary: &Summary, deadline: Instant) -> Result<Verdict> {
        self.round += 1;
        let key = summaries_key(&self.key, self.round);
        let bytes = summary.encode();
        let read = match self.judge {
            Some(_) => Read::Now,
            None => Read::Never,
        };
        let item = Item {
            key: &key,
            owners: &self.owners,
            me: self.me,
            value: Some(&bytes),
            read,
        };
        let answer = self.chan.exchange(&[item], None, deadline)?;
        match &mut self.judge {
            Some(judge) => {
                let shares = answer.into_iter().next().unwrap_or_default();
                let values = gathered(shares).map_err(|m| left("watch", &m))?;
                let all = values
                    .iter()
                    .map(|v| Summary::decode(v))
                    .collect::<Result<Vec<_>>>()?;
                let verdict = judge.judge(&all);
                self.tell(&verdict, deadline)?;
                Ok(verdict)
            }
            None => self.hear(deadline),
        }
    }

    /// The judge's verdict to every other rank, one exchange each.
    fn tell(&self, verdict: &Verdict, deadline: Instant) -> Result<()> {
        let bytes = verdict.encode();
        let keys: Vec<String> = (1..self.owners.len())
            .map(|r| verdict_key(&self.key, self.round, r))
            .collect();
        let owners: Vec<[usize; 2]> = (1..self.owners.len())
            .map(|r| [self.owners[0], self.owners[r]])
            .collect();
        let items: Vec<Item<'_>> = keys
            .iter()
            .zip(&owners)
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

    /// This rank's verdict from the judge.
    fn hear(&self, deadline: Instant) -> Result<Verdict> {
        let key = verdict_key(&self.key, self.round, self.me);
        let owners = [self.owners[0], self.owners[self.me]];
        let item = Item {
            key: &key,
            owners: &owners,
            me: 1,
            value: Some(&[]),
            read: Read::Now,
        };
        let shares = self
            .chan
            .exchange(&[item], None, deadline)?
            .into_iter()
            .next()
            .unwrap_or_default();
        let values = gathered(shares).map_err(|m| left("watch", &m))?;
        let v = values.first().ok_or_else(|| {
            Error::new(
                ErrorKind::Internal,
                "the store answered a watch round with nothing",
            )
        })?;
        Verdict::decode(v)
    }
}
