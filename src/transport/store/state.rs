//! The store itself: keys with blocking reads, exchanges, each owner's
//! latest note and who has finished, behind one lock and one condition
//! variable. Ranks that are threads of one process share a [`Store`]
//! directly; the [`Hub`](super::Hub) serves one to ranks in other processes.

use super::{Item, Missing, Read, Share, SideChannel};
use crate::core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Instant;

/// One exchange while it lives.
struct Entry {
    owners: Vec<usize>,
    values: Vec<Option<Vec<u8>>>,
    /// parties that posted, will read, and have not yet
    unread: Vec<bool>,
}

impl Entry {
    fn new(owners: &[usize]) -> Entry {
        Entry {
            owners: owners.to_vec(),
            values: vec![None; owners.len()],
            unread: vec![false; owners.len()],
        }
    }
    fn all_posted(&self) -> bool {
        self.values.iter().all(Option::is_some)
    }
    fn spent(&self) -> bool {
        self.all_posted() && !self.unread.contains(&true)
    }
}

#[derive(Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    exchanges: HashMap<String, Entry>,
    notes: HashMap<usize, Vec<u8>>,
    finished: HashMap<usize, Option<String>>,
}

impl State {
    /// Whether a read of `it` can be answered: every party posted, or one
    /// that did not has finished (it never will).
    fn settled(&self, it: &Item<'_>) -> bool {
        let values = self.exchanges.get(it.key).map(|e| &e.values);
        let mut all = true;
        for (p, owner) in it.owners.iter().enumerate() {
            if values.is_none_or(|v| v[p].is_none()) {
                if self.finished.contains_key(owner) {
                    return true;
                }
                all = false;
            }
        }
        all
    }

    /// Every party's share of `it` now, the read counted.
    fn answer(&mut self, it: &Item<'_>) -> Vec<Share> {
        let entry = self.exchanges.get_mut(it.key);
        let shares = it
            .owners
            .iter()
            .enumerate()
            .map(
                |(p, owner)| match entry.as_ref().and_then(|e| e.values[p].clone()) {
                    Some(v) => Ok(v),
                    None => Err(match self.finished.get(owner) {
                        Some(reason) => Missing::Finished {
                            reason: reason.clone(),
                        },
                        None => Missing::Timeout,
                    }),
                },
            )
            .collect();
        if let Some(e) = entry {
            e.unread[it.me] = false;
        }
        self.drop_if_spent(it.key);
        shares
    }

    fn drop_if_spent(&mut self, key: &str) {
        if self.exchanges.get(key).is_some_and(Entry::spent) {
            self.exchanges.remove(key);
        }
    }
}

/// An item the store cannot take: the caller's mistake, said plainly.
fn malformed(it: &Item<'_>, entry: Option<&Entry>) -> Option<String> {
    if it.me >= it.owners.len() {
        return Some(format!(
            "exchange {}: party {} of {}",
            it.key,
            it.me,
            it.owners.len()
        ));
    }
    match entry {
        Some(e) if e.owners != it.owners => Some(format!(
            "exchange {}: its parties differ between posts ({} and {})",
            it.key,
            e.owners.len(),
            it.owners.len()
        )),
        _ => None,
    }
}

/// The store itself, for ranks in one process (and behind the [`Hub`](super::Hub)).
#[derive(Default)]
pub struct Store {
    state: Mutex<State>,
    changed: Condvar,
}

impl Store {
    pub fn new() -> Arc<Store> {
        Arc::new(Store::default())
    }
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// The value of `key` now, if set.
    pub fn peek(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).cloned()
    }
    /// Whether rank `rank` has finished, and its error.
    pub fn finished(&self, rank: usize) -> Option<Option<String>> {
        self.lock().finished.get(&rank).cloned()
    }
    /// Keys set and exchanges not yet spent, held now: what grows if
    /// something is kept that should not be. (Notes, one per owner, and
    /// finished marks are not counted.)
    pub fn key_count(&self) -> usize {
        let s = self.lock();
        s.map.len() + s.exchanges.len()
    }
    pub(super) fn set_value(&self, key: &str, value: &[u8]) {
        self.lock().map.insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
    }
    /// Sleeps until something changes or `deadline`; false once it has passed.
    fn wait_for_change<'s>(
        &'s self,
        s: MutexGuard<'s, State>,
        deadline: Instant,
    ) -> (MutexGuard<'s, State>, bool) {
        let now = Instant::now();
        if now >= deadline {
            return (s, false);
        }
        let s = self
            .changed
            .wait_timeout(s, deadline - now)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        (s, true)
    }
    pub(super) fn wait(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> std::result::Result<Vec<u8>, Missing> {
        let mut s = self.lock();
        loop {
            if let Some(v) = s.map.get(key) {
                return Ok(v.clone());
            }
            if let Some(reason) = s.finished.get(&owner) {
                return Err(Missing::Finished {
                    reason: reason.clone(),
                });
            }
            let more;
            (s, more) = self.wait_for_change(s, deadline);
            if !more {
                return Err(Missing::Timeout);
            }
        }
    }
    /// [`SideChannel::exchange`], or what is wrong with an item.
    pub(super) fn run_exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> std::result::Result<Vec<Vec<Share>>, String> {
        let mut s = self.lock();
        if let Some(why) = items
            .iter()
            .find_map(|it| malformed(it, s.exchanges.get(it.key)))
        {
            return Err(why);
        }
        if let Some((owner, note)) = note {
            s.notes.insert(owner, note.to_vec());
        }
        // waiters can only be answered once an exchange is complete (or a
        // party finished): only the last post wakes them, not every post
        let mut completed = false;
        for it in items {
            let Some(v) = it.value else { continue };
            let e = s
                .exchanges
                .entry(it.key.to_string())
                .or_insert_with(|| Entry::new(it.owners));
            e.values[it.me] = Some(v.to_vec());
            e.unread[it.me] = it.read != Read::Never;
            completed |= e.all_posted();
            s.drop_if_spent(it.key);
        }
        if completed {
            self.changed.notify_all();
        }
        loop {
            let waiting = items
                .iter()
                .any(|it| it.read == Read::Now && !s.settled(it));
            if !waiting {
                break;
            }
            let more;
            (s, more) = self.wait_for_change(s, deadline);
            if !more {
                break;
            }
        }
        Ok(items
            .iter()
            .map(|it| match it.read {
                Read::Now => s.answer(it),
                Read::Later | Read::Never => Vec::new(),
            })
            .collect())
    }
    /// The latest note `owner` left with an exchange.
    pub(super) fn note_of(&self, owner: usize) -> Option<Vec<u8>> {
        self.lock().notes.get(&owner).cloned()
    }
    /// Marks `rank` finished; the first report wins (a process that said
    /// why it failed keeps its reason when it then exits).
    pub fn mark_finished(&self, rank: usize, error: Option<&str>) {
        self.lock()
            .finished
            .entry(rank)
            .or_insert_with(|| error.map(str::to_string));
        self.changed.notify_all();
    }
}

pub(super) fn misused(why: String) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("the side channel refused a request: {why}"),
    )
}

impl SideChannel for Store {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.set_value(key, value);
        Ok(())
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        Ok(self.wait(key, owner, deadline))
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()> {
        self.mark_finished(rank, error);
        Ok(())
    }
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>> {
        self.run_exchange(items, note, deadline).map_err(misused)
    }
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>> {
        Ok(self.note_of(owner))
    }
}
