//! Every request the agreement makes of the store, in one place. On a link
//! with a stop ([`super::stop`]), each is counted in flight, refused once
//! the stop is raised, and one that may wait (it reads now, with a
//! deadline still ahead) waits on a helper thread, so that the stop ends
//! it at once; the exchanges it waits on are noted on the stop meanwhile
//! (a rank that leaves replaces its posts there with a notice). A link
//! without a stop asks the store directly.

use super::Link;
use super::stop::{Waiting, detached};
use crate::core::{Result, wire};
use crate::transport::store::{Item, Read, Share, SideChannel};
use std::time::Instant;

/// An item the helper thread owns.
struct Owned {
    key: String,
    owners: Vec<usize>,
    me: usize,
    value: Option<Vec<u8>>,
    read: Read,
}

impl Owned {
    fn of(it: &Item<'_>) -> Owned {
        Owned {
            key: it.key.to_string(),
            owners: it.owners.to_vec(),
            me: it.me,
            value: it.value.map(<[u8]>::to_vec),
            read: it.read,
        }
    }
    fn item(&self) -> Item<'_> {
        Item {
            key: &self.key,
            owners: &self.owners,
            me: self.me,
            value: self.value.as_deref(),
            read: self.read,
        }
    }
}

impl Link {
    /// [`SideChannel::exchange`](crate::transport::store::SideChannel::exchange)
    /// on this link's store.
    pub(super) fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>> {
        let Some(stop) = &self.stop else {
            return self.chan.exchange(items, note, deadline);
        };
        let watch = self.watch.clone().unwrap_or_else(|| stop.watch());
        let busy = stop.enter(&watch)?;
        let waits = items.iter().any(|it| it.read == Read::Now) && Instant::now() < deadline;
        if !waits {
            return self.chan.exchange(items, note, deadline);
        }
        let owned: Vec<Owned> = items.iter().map(Owned::of).collect();
        let held = stop.hold(
            owned
                .iter()
                .filter(|o| o.read != Read::Never)
                .map(|o| Waiting {
                    key: o.key.clone(),
                    owners: o.owners.clone(),
                    party: o.me,
                })
                .collect(),
        );
        let note = note.map(|(o, b)| (o, b.to_vec()));
        let chan = self.chan.clone();
        detached(&watch, move || {
            let _busy = (busy, held);
            let items: Vec<Item<'_>> = owned.iter().map(Owned::item).collect();
            let note = note.as_ref().map(|(o, b)| (*o, b.as_slice()));
            chan.exchange(&items, note, deadline)
        })?
    }

    /// [`SideChannel::get`](crate::transport::store::SideChannel::get) on
    /// this link's store.
    pub(super) fn get(&self, key: &str, owner: usize, deadline: Instant) -> Result<Share> {
        let Some(stop) = &self.stop else {
            return self.chan.get(key, owner, deadline);
        };
        let watch = self.watch.clone().unwrap_or_else(|| stop.watch());
        let busy = stop.enter(&watch)?;
        if Instant::now() >= deadline {
            return self.chan.get(key, owner, deadline);
        }
        let (chan, key) = (self.chan.clone(), key.to_string());
        detached(&watch, move || {
            let _busy = busy;
            chan.get(&key, owner, deadline)
        })?
    }

    /// [`SideChannel::set`](crate::transport::store::SideChannel::set) on
    /// this link's store.
    pub(super) fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        let _busy = match &self.stop {
            Some(stop) => Some(stop.enter(&self.watch.clone().unwrap_or_else(|| stop.watch()))?),
            None => None,
        };
        self.chan.set(key, value)
    }

    /// [`SideChannel::last_note`](crate::transport::store::SideChannel::last_note)
    /// of owner `owner`.
    pub(super) fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>> {
        let _busy = match &self.stop {
            Some(stop) => Some(stop.enter(&self.watch.clone().unwrap_or_else(|| stop.watch()))?),
            None => None,
        };
        self.chan.last_note(owner)
    }
}

/// Replaces this rank's posts in the exchanges `waiting` (those a request
/// of its waited on when it left) with a notice giving `why`, through
/// `chan` (the link's own connection may be held by that request): a peer
/// that comes later fails naming this rank, instead of finding its post
/// and entering NCCL alone.
pub fn give_notice(chan: &dyn SideChannel, waiting: &[Waiting], why: &str) -> Result<()> {
    if waiting.is_empty() {
        return Ok(());
    }
    let notice = wire::encode_notice(why);
    let items: Vec<Item<'_>> = waiting
        .iter()
        .map(|w| Item {
            key: &w.key,
            owners: &w.owners,
            me: w.party,
            value: Some(&notice),
            read: Read::Never,
        })
        .collect();
    chan.exchange(&items, None, Instant::now()).map(|_| ())
}
