//! The side channel of engines whose ranks do not share memory: a key-value
//! store with blocking reads (≈ PyTorch's TCPStore), and exchanges. A rank
//! sets keys it owns and waits, under a deadline, for keys other ranks own;
//! a rank whose program ended is marked finished, so a wait for a key it
//! never set ends at once with who left and why, instead of running out its
//! deadline.
//!
//! An exchange is what every launch's agreement is made of: its parties
//! (the ranks of a collective, or the two ends of a Send/Recv pair) each
//! post one value under the exchange's key and read everyone's. One request
//! ([`SideChannel::exchange`]) posts this rank's values of any number of
//! exchanges and answers all of them, so a launch costs one round trip
//! instead of one per key. The store drops an exchange once every party
//! has posted and every party that reads has read, so its memory follows
//! the launches in flight, not the launches made; an exchange a party
//! never came to stays (one per failure, not per call). A request also
//! carries a note (where its rank is: `AllReduce (opCount 3)`); the store
//! keeps each owner's latest, which names where a rank that never came was
//! last, at no cost of its own. Parties that wait for each other in a
//! cycle (each posted in an exchange another has not, within one
//! communicator's exchanges) can never be answered: the store looks for
//! such cycles while requests wait and answers each party in one at once
//! with the cycle ([`waits`]).
//!
//! [`Store`] serves ranks that are threads of one process; [`Hub`] serves
//! it over TCP (on 127.0.0.1, or under the interposer on the address of
//! NCCL's bootstrap) to ranks that are processes ([`Client`]), and only to
//! holders of the job's [`Key`]: every connection proves it at its start,
//! and is then bound to the owner it proved, so a rank can post, keep
//! notes and finish for itself only. The process launcher starts the hub
//! in the parent; the NCCL engine and the interposer carry the
//! ncclUniqueId, every launch's posts and every Send/Recv pairing through
//! it before NCCL is called (the interposer's collectives between ranks of
//! one host go through shared memory instead, and use the store only to
//! set that up and to hear of ranks that left). Everything it keeps or
//! reads for a peer is bounded, and no wait outlives its deadline
//! (`docs/design/agreement.md` gives the protocol, `docs/reference/limits.md`
//! the bounds).
//!
//! Six rooms: [`state`] is the store itself (exchanges, keys, notes, who
//! finished, parked requests) for ranks in one process; [`waits`] finds
//! wait-for cycles among its exchanges; [`auth`] the key
//! and the handshake; [`codec`] the wire format of a request and its
//! answer; [`server`] serves a store over TCP from one event loop
//! ([`Hub`]); [`client`] is a rank's connection to it ([`Client`]). This
//! module holds what they share: the [`SideChannel`] every engine and the
//! interposer talk to, and the shapes of its answers.

mod auth;
mod client;
mod codec;
#[cfg(test)]
mod fuzz;
#[cfg(test)]
mod hostile;
#[cfg(test)]
mod liveness;
mod server;
mod state;
#[cfg(test)]
mod tests;
mod waits;

pub use auth::Key;
pub use client::Client;
pub use server::Hub;
pub use state::Store;

use crate::core::Result;
use std::time::Instant;

/// Why a wait for a key ended without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The deadline passed.
    Timeout,
    /// The key's owner finished its program without setting it; `reason` is
    /// its error, None when it ended normally.
    Finished { reason: Option<String> },
    /// The reading party waits in a wait-for cycle the store found among
    /// its exchanges: each step's party posted and waits for the next
    /// step's, the last for the first (the reader's own step first).
    Cycle(Vec<Wait>),
}

/// One step of a wait-for cycle: party `party` of exchange `key` posted
/// and waits for party `awaits`, which has not posted there; `note` is
/// the waiting party's owner's latest note.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Wait {
    pub key: String,
    pub party: usize,
    pub awaits: usize,
    pub note: Option<Vec<u8>>,
}

/// What one party of an exchange posted, or why it did not.
pub type Share = std::result::Result<Vec<u8>, Missing>;

/// When a party of an exchange reads the others' values.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Read {
    /// In the same request: it waits until every party has posted (or one
    /// that has not finished), or the deadline.
    Now,
    /// In a later request of its own that posts nothing: ranks that must
    /// post on several stores before waiting on any.
    Later,
    /// Never: it only posts (a rank that already failed tells its peers).
    Never,
}

/// This rank's part in one exchange of a request.
#[derive(Debug, Clone, Copy)]
pub struct Item<'a> {
    /// The exchange's name, unique among the store's exchanges while it lives.
    pub key: &'a str,
    /// The store owner of each party, in party order: a party that has not
    /// posted is reported finished when its owner is.
    pub owners: &'a [usize],
    /// This rank's party.
    pub me: usize,
    /// This rank's value; None when an earlier request posted it.
    pub value: Option<&'a [u8]>,
    pub read: Read,
}

/// What ranks that share no memory share.
pub trait SideChannel: Send + Sync {
    /// Sets `key` (last write wins); the store keeps it.
    fn set(&self, key: &str, value: &[u8]) -> Result<()>;
    /// Waits until `key` is set, until `deadline`, or until rank `owner`
    /// (the rank that sets it) has finished.
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>>;
    /// Rank `rank`'s program ended, with `error` when it failed. Over a
    /// [`Client`], `rank` is the owner the connection proved: the hub
    /// refuses a FINISH for anyone else.
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()>;
    /// Posts this rank's values of `items`, keeps `note` as owner
    /// `note.0`'s latest, then waits (until `deadline`) for the items it
    /// reads [`Read::Now`]: one answer per item, in order, with every
    /// party's share for those it reads and nothing for the others. Over a
    /// [`Client`], each item's party and the note's owner must be the
    /// connection's owner.
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>>;
    /// The latest note owner `owner` left with an exchange.
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>>;
}

/// Every rank's value, or each rank whose value did not come and why.
pub type Gathered = std::result::Result<Vec<Vec<u8>>, Vec<(usize, Missing)>>;

/// An exchange's answer as [`Gathered`]: every party's value, or each
/// party whose value did not come and why.
pub fn gathered(shares: Vec<Share>) -> Gathered {
    let mut values = Vec::with_capacity(shares.len());
    let mut missing = Vec::new();
    for (p, s) in shares.into_iter().enumerate() {
        match s {
            Ok(v) => values.push(v),
            Err(m) => missing.push((p, m)),
        }
    }
    if missing.is_empty() {
        Ok(values)
    } else {
        Err(missing)
    }
}
