//! The store itself: keys with blocking reads, exchanges, each owner's
//! latest note and who has finished, behind one lock. Ranks that are
//! threads of one process share a [`Store`] directly and wait on its
//! condition variable; the [`Hub`](super::Hub)'s event loop serves the same
//! state to ranks in other processes, and its requests that must wait are
//! parked here, indexed by the key they wait for, so that a change wakes
//! the loop (through its waker) only for the requests it may answer.
//!
//! Everything a peer can make the store keep is bounded: SET keys and bytes
//! per owner and in all, exchanges and their bytes. A request beyond a
//! bound is refused whole, before anything is changed. Nothing here does
//! I/O: the lock is never held across a socket.

use super::waits::{self, Edge};
use super::{Item, Missing, Read, Share, SideChannel, Wait};
use crate::core::{Error, ErrorKind, Result};
use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// How long a rank of this process waiting on the store spins before it
/// sleeps: the other ranks' posts come through the event loop's thread,
/// and waking a sleeper costs a few microseconds more than a look at a
/// counter, on the path of every launch the store agrees (the judge of
/// the hosts waits here for their leaders). Nothing when this process may
/// use one core only.
const SPIN: Duration = Duration::from_micros(20);

/// Whether waits spin: this process may use more than one core (asked
/// once: it is a system call).
fn spins() -> bool {
    static MANY: OnceLock<bool> = OnceLock::new();
    *MANY.get_or_init(|| crate::machine::cores() > 1)
}

/// Bytes of values and keys one owner may keep with SET.
pub(super) const MAX_OWNER_BYTES: usize = 64 << 20;
/// Keys one owner may keep with SET.
pub(super) const MAX_OWNER_KEYS: usize = 4096;
/// SET bytes and keys of all owners together.
pub(super) const MAX_SET_BYTES: usize = 1 << 30;
pub(super) const MAX_SET_KEYS: usize = 1 << 16;
/// Exchanges held at once (posted, not yet spent), and their bytes.
pub(super) const MAX_EXCHANGES: usize = 1 << 20;
pub(super) const MAX_EXCHANGE_BYTES: usize = 1 << 30;
/// What an exchange or a key costs besides its bytes, in the accounts.
const OVERHEAD: usize = 64;
/// How often the store looks for wait-for cycles while requests wait, and
/// how long a rank of this process waits before it asks for a look: a
/// launch that waits less costs no look.
pub(super) const LOOK_EVERY: std::time::Duration = std::time::Duration::from_millis(20);
pub(super) const LOOK_AFTER: std::time::Duration = std::time::Duration::from_millis(10);

/// A parked request's name in the index: the event loop's token of its
/// connection.
pub(super) type Token = usize;

/// One exchange while it lives.
struct Exchange {
    owners: Vec<usize>,
    values: Vec<Option<Vec<u8>>>,
    /// parties that posted, will read, and have not yet
    unread: Vec<bool>,
    /// what it counts for in the store's accounts
    bytes: usize,
}

impl Exchange {
    fn new(key: &str, owners: &[usize]) -> Exchange {
        Exchange {
            owners: owners.to_vec(),
            values: vec![None; owners.len()],
            unread: vec![false; owners.len()],
            bytes: OVERHEAD + key.len() + owners.len() * 10,
        }
    }
    fn all_posted(&self) -> bool {
        self.values.iter().all(Option::is_some)
    }
    fn spent(&self) -> bool {
        self.all_posted() && !self.unread.contains(&true)
    }
}

/// A key set with SET, and the owner it is counted against (none for the
/// ranks of this process).
struct Set {
    by: Option<usize>,
    value: Vec<u8>,
}

/// One owner's SET account.
#[derive(Default, Clone, Copy)]
struct Held {
    bytes: usize,
    keys: usize,
}

/// The event loop's parked requests, indexed by the key each waits for.
#[derive(Default)]
struct Parked {
    by_key: HashMap<String, Vec<Token>>,
    count: usize,
    /// requests whose key changed, for the loop to look at
    ready: Vec<Token>,
    /// an owner finished: every parked request may be answered
    everyone: bool,
}

#[derive(Default)]
pub(super) struct State {
    map: HashMap<String, Set>,
    held: HashMap<usize, Held>,
    set_total: Held,
    exchanges: HashMap<String, Exchange>,
    exchange_bytes: usize,
    notes: HashMap<usize, Vec<u8>>,
    finished: HashMap<usize, Option<String>>,
    /// owners marked finished because their connection closed, not by
    /// their own word: a later report (the launcher's, from the process's
    /// exit status) says it better and replaces the mark
    lost: HashSet<usize>,
    parked: Parked,
    /// something changed that this process's waiting ranks may want
    changed: bool,
    /// the event loop has parked requests to look at
    wake_loop: bool,
    /// owners found waiting in a cycle, each with its cycle by communicator
    /// ([`waits::scope`]), until they post again on that communicator
    in_cycle: HashMap<usize, HashMap<String, Vec<Wait>>>,
    /// the latest look for cycles
    looked: Option<Instant>,
}

fn refused(what: &str, bound: usize, unit: &str) -> String {
    format!("{what}: the store keeps at most {bound} {unit}")
}

impl State {
    /// The key's parked requests are worth a look.
    fn touch(&mut self, key: &str) {
        self.changed = true;
        if let Some(tokens) = self.parked.by_key.remove(key) {
            self.parked.ready.extend(tokens);
            self.wake_loop = true;
        }
    }

    /// Sets `key` for `by` (None: a rank of this process, counted in all
    /// only), or why the store refuses.
    pub(super) fn set(
        &mut self,
        by: Option<usize>,
        key: &str,
        value: &[u8],
    ) -> std::result::Result<(), String> {
        let cost = OVERHEAD + key.len() + value.len();
        let old = self
            .map
            .get(key)
            .map(|s| (s.by, OVERHEAD + key.len() + s.value.len()));
        let freed_total = old.map_or(0, |(_, c)| c);
        let total = self.set_total;
        if total.bytes - freed_total + cost > MAX_SET_BYTES {
            return Err(refused(
                &format!("SET {key}"),
                MAX_SET_BYTES,
                "bytes of keys and values in all",
            ));
        }
        if old.is_none() && total.keys >= MAX_SET_KEYS {
            return Err(refused(&format!("SET {key}"), MAX_SET_KEYS, "keys in all"));
        }
        if let Some(o) = by {
            let mine = self.held.get(&o).copied().unwrap_or_default();
            let (freed, same_key) = match old {
                Some((Some(p), c)) if p == o => (c, true),
                _ => (0, false),
            };
            if mine.bytes - freed + cost > MAX_OWNER_BYTES {
                return Err(refused(
                    &format!("SET {key} by owner {o}"),
                    MAX_OWNER_BYTES,
                    "bytes of keys and values per owner",
                ));
            }
            if !same_key && mine.keys >= MAX_OWNER_KEYS {
                return Err(refused(
                    &format!("SET {key} by owner {o}"),
                    MAX_OWNER_KEYS,
                    "keys per owner",
                ));
            }
        }
        // the previous value leaves its setter's account, the new one
        // enters the new setter's
        if let Some((prev, c)) = old {
            self.set_total.bytes -= c;
            self.set_total.keys -= 1;
            if let Some(p) = prev {
                let h = self.held.entry(p).or_default();
                h.bytes -= c;
                h.keys -= 1;
            }
        }
        self.set_total.bytes += cost;
        self.set_total.keys += 1;
        if let Some(o) = by {
            let h = self.held.entry(o).or_default();
            h.bytes += cost;
            h.keys += 1;
        }
        self.map.insert(
            key.to_string(),
            Set {
                by,
                value: value.to_vec(),
            },
        );
        self.touch(key);
        Ok(())
    }

    /// What a GET of `key` gets now: its value, or that `owner` finished;
    /// None while it must wait.
    pub(super) fn lookup(&self, key: &str, owner: usize) -> Option<Share> {
        if let Some(s) = self.map.get(key) {
            return Some(Ok(s.value.clone()));
        }
        self.finished.get(&owner).map(|reason| {
            Err(Missing::Finished {
                reason: reason.clone(),
            })
        })
    }

    /// Whether a GET of `key` can be answered now.
    pub(super) fn can_get(&self, key: &str, owner: usize) -> bool {
        self.map.contains_key(key) || self.finished.contains_key(&owner)
    }

    /// The exchange `it` names, when its parties are the item's.
    fn entry_of(&self, it: &Item<'_>) -> Option<&Exchange> {
        self.exchanges.get(it.key).filter(|e| e.owners == it.owners)
    }

    /// The cycle `it`'s party was found waiting on, on `it`'s communicator.
    fn cycle_of(&self, it: &Item<'_>) -> Option<&Vec<Wait>> {
        let mine = self.in_cycle.get(&it.owners[it.me])?;
        mine.get(waits::scope(it.key))
    }

    /// Whether a read of `it` can be answered: every party posted, or one
    /// that did not has finished (it never will).
    pub(super) fn settled(&self, it: &Item<'_>) -> bool {
        if self.cycle_of(it).is_some() {
            return true;
        }
        let values = self.entry_of(it).map(|e| &e.values);
        let mut all = true;
        for (p, owner) in it.owners.iter().enumerate() {
            if values.is_none_or(|v| v.get(p).is_none_or(Option::is_none)) {
                if self.finished.contains_key(owner) {
                    return true;
                }
                all = false;
            }
        }
        all
    }

    /// Whether every item read now can be answered.
    pub(super) fn all_settled(&self, items: &[Item<'_>]) -> bool {
        items
            .iter()
            .all(|it| it.read != Read::Now || self.settled(it))
    }

    /// Every party's share of `it` now, the read counted.
    fn answer(&mut self, it: &Item<'_>) -> Vec<Share> {
        let values = self.entry_of(it).map(|e| &e.values);
        let shares = it
            .owners
            .iter()
            .enumerate()
            .map(
                |(p, owner)| match values.and_then(|v| v.get(p)).cloned().flatten() {
                    Some(v) => Ok(v),
                    // a reader on a cycle hears the cycle, even from a
                    // peer that has since failed of it
                    None => Err(match (self.cycle_of(it), self.finished.get(owner)) {
                        (Some(cycle), _) => Missing::Cycle(cycle.clone()),
                        (None, Some(reason)) => Missing::Finished {
                            reason: reason.clone(),
                        },
                        (None, None) => Missing::Timeout,
                    }),
                },
            )
            .collect();
        if let Some(e) = self
            .exchanges
            .get_mut(it.key)
            .filter(|e| e.owners == it.owners)
            && let Some(u) = e.unread.get_mut(it.me)
        {
            *u = false;
        }
        self.drop_if_spent(it.key);
        shares
    }

    /// The answer to a request of `items`: every party's share of those it
    /// reads now, nothing for the others.
    pub(super) fn answers(&mut self, items: &[Item<'_>]) -> Vec<Vec<Share>> {
        items
            .iter()
            .map(|it| match it.read {
                Read::Now => self.answer(it),
                Read::Later | Read::Never => Vec::new(),
            })
            .collect()
    }

    fn drop_if_spent(&mut self, key: &str) {
        if self.exchanges.get(key).is_some_and(Exchange::spent)
            && let Some(e) = self.exchanges.remove(key)
        {
            self.exchange_bytes -= e.bytes;
        }
    }

    /// What is wrong with a request's items, if anything: a party out of
    /// range, parties that differ from an earlier post's or from another
    /// item's of the same request, a party that is not `by`'s own, a
    /// request that would take the store past its bounds.
    fn refusal(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        by: Option<usize>,
    ) -> Option<String> {
        if let (Some(o), Some((n, _))) = (by, note)
            && n != o
        {
            return Some(format!("a note for owner {n} on a connection of owner {o}"));
        }
        let mut in_request: HashMap<&str, &[usize]> = HashMap::new();
        let (mut new, mut bytes) = (0usize, 0usize);
        for it in items {
            if it.me >= it.owners.len() {
                return Some(format!(
                    "exchange {}: party {} of {}",
                    it.key,
                    it.me,
                    it.owners.len()
                ));
            }
            if let Some(o) = by
                && it.owners[it.me] != o
            {
                return Some(format!(
                    "exchange {}: party {} is owner {}, not this connection's owner {o}",
                    it.key, it.me, it.owners[it.me]
                ));
            }
            let earlier = self.exchanges.get(it.key).map(|e| e.owners.as_slice());
            let earlier = earlier.or_else(|| in_request.get(it.key).copied());
            match earlier {
                Some(e) if e != it.owners => {
                    return Some(format!(
                        "exchange {}: its parties differ between posts ({} and {})",
                        it.key,
                        e.len(),
                        it.owners.len()
                    ));
                }
                Some(_) => {}
                None => {
                    in_request.insert(it.key, it.owners);
                    new += 1;
                    bytes += OVERHEAD + it.key.len() + it.owners.len() * 10;
                }
            }
            bytes += it.value.map_or(0, <[u8]>::len);
        }
        if self.exchanges.len() + new > MAX_EXCHANGES {
            return Some(refused(
                "a new exchange",
                MAX_EXCHANGES,
                "exchanges at once",
            ));
        }
        if self.exchange_bytes + bytes > MAX_EXCHANGE_BYTES {
            return Some(refused(
                "a post",
                MAX_EXCHANGE_BYTES,
                "bytes of exchanges at once",
            ));
        }
        None
    }

    /// Posts a request's values and keeps its note, for `by` (None: a rank
    /// of this process), or why the store refuses it (then nothing changed).
    pub(super) fn post(
        &mut self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        by: Option<usize>,
    ) -> std::result::Result<(), String> {
        if let Some(why) = self.refusal(items, note, by) {
            return Err(why);
        }
        if let Some((owner, note)) = note {
            self.notes.insert(owner, note.to_vec());
        }
        for it in items {
            let Some(v) = it.value else { continue };
            // a party that posts again on the communicator of its cycle
            // has left the wait it was in; a post on another (watch mode's
            // thread posts under the rank's owner) says nothing of it
            let owner = it.owners[it.me];
            if let Some(mine) = self.in_cycle.get_mut(&owner) {
                mine.remove(waits::scope(it.key));
                if mine.is_empty() {
                    self.in_cycle.remove(&owner);
                }
            }
            let e = match self.exchanges.entry(it.key.to_string()) {
                Entry::Occupied(o) => o.into_mut(),
                Entry::Vacant(slot) => {
                    let e = Exchange::new(it.key, it.owners);
                    self.exchange_bytes += e.bytes;
                    slot.insert(e)
                }
            };
            // the refusal checked the party against these very owners
            let old = e.values[it.me].replace(v.to_vec()).map_or(0, |o| o.len());
            e.bytes = e.bytes - old + v.len();
            self.exchange_bytes = self.exchange_bytes - old + v.len();
            e.unread[it.me] = it.read != Read::Never;
            // waiters can only be answered once an exchange is complete
            // (or a party finished): only the last post wakes them
            if e.all_posted() {
                self.touch(it.key);
            }
            self.drop_if_spent(it.key);
        }
        Ok(())
    }

    /// The latest note `owner` left with an exchange.
    pub(super) fn note_of(&self, owner: usize) -> Option<Vec<u8>> {
        self.notes.get(&owner).cloned()
    }

    /// Marks `owner` finished; the first report wins (a process that said
    /// why it failed keeps its reason when it then exits), except over a
    /// mark its closed connection made.
    pub(super) fn finish(&mut self, owner: usize, reason: Option<&str>) {
        if self.lost.remove(&owner) {
            self.finished.insert(owner, reason.map(str::to_string));
        } else {
            self.finished
                .entry(owner)
                .or_insert_with(|| reason.map(str::to_string));
        }
        self.announce_finish();
    }

    /// `owner`'s last connection closed with `reason` before it said it
    /// finished: it is marked finished, so that its peers stop waiting for
    /// it now.
    pub(super) fn lost(&mut self, owner: usize, reason: &str) {
        if self.finished.contains_key(&owner) {
            return;
        }
        self.finished.insert(owner, Some(reason.to_string()));
        self.lost.insert(owner);
        self.announce_finish();
    }

    fn announce_finish(&mut self) {
        self.changed = true;
        if self.parked.count > 0 {
            self.parked.everyone = true;
            self.wake_loop = true;
        }
    }

    /// Looks for wait-for cycles among the exchanges ([`waits`]), at most
    /// every [`LOOK_EVERY`]: each party found on one is answered at once.
    pub(super) fn look_for_cycles(&mut self, now: Instant) {
        if self.looked.is_some_and(|t| now < t + LOOK_EVERY) {
            return;
        }
        self.looked = Some(now);
        let alive = |o: &usize| !self.finished.contains_key(o);
        let mut edges = Vec::new();
        for (key, e) in self.exchanges.iter().filter(|(_, e)| !e.all_posted()) {
            let waiting = (0..e.owners.len())
                .filter(|&p| e.values[p].is_some() && e.unread[p] && alive(&e.owners[p]));
            for party in waiting {
                for awaits in (0..e.owners.len()).filter(|&q| e.values[q].is_none()) {
                    if alive(&e.owners[awaits]) {
                        edges.push(Edge {
                            from: e.owners[party],
                            to: e.owners[awaits],
                            key,
                            party,
                            awaits,
                        });
                    }
                }
            }
        }
        let known = |(owner, comm): &(usize, &str)| {
            self.in_cycle
                .get(owner)
                .is_some_and(|m| m.contains_key(*comm))
        };
        let found: Vec<(usize, String, Vec<Wait>)> = waits::cycles(&edges)
            .into_iter()
            .filter(|(at, _)| !known(at))
            .map(|(at, ids)| {
                let steps = ids
                    .iter()
                    .map(|&i| Wait {
                        key: edges[i].key.to_string(),
                        party: edges[i].party,
                        awaits: edges[i].awaits,
                        note: self.notes.get(&edges[i].from).cloned(),
                    })
                    .collect();
                (at.0, at.1.to_string(), steps)
            })
            .collect();
        if !found.is_empty() {
            for (owner, comm, steps) in found {
                self.in_cycle.entry(owner).or_default().insert(comm, steps);
            }
            self.announce_finish();
        }
    }

    /// Whether the event loop has requests parked (and so cycles to look for).
    pub(super) fn has_parked(&self) -> bool {
        self.parked.count > 0
    }

    /// The event loop's request on `token` waits for `keys`.
    pub(super) fn park(&mut self, token: Token, keys: &[&str]) {
        self.parked.count += 1;
        for k in keys {
            self.parked
                .by_key
                .entry(k.to_string())
                .or_default()
                .push(token);
        }
    }

    /// `token`'s request that waited for `keys` is answered (or gone).
    pub(super) fn unpark(&mut self, token: Token, keys: &[&str]) {
        self.parked.count -= 1;
        for k in keys {
            if let Some(tokens) = self.parked.by_key.get_mut(*k) {
                tokens.retain(|t| *t != token);
                if tokens.is_empty() {
                    self.parked.by_key.remove(*k);
                }
            }
        }
    }

    /// The parked requests worth a look since the last call, and whether
    /// every parked request is.
    pub(super) fn take_ready(&mut self) -> (Vec<Token>, bool) {
        let everyone = std::mem::take(&mut self.parked.everyone);
        (std::mem::take(&mut self.parked.ready), everyone)
    }
}

/// The store itself, for ranks in one process (and behind the [`Hub`](super::Hub)).
#[derive(Default)]
pub struct Store {
    state: Mutex<State>,
    changed: Condvar,
    /// counts the changes `changed` is notified of: a wait spins on it for
    /// a moment before it sleeps ([`SPIN`])
    generation: AtomicU64,
    /// the waker of the event loop serving this store, when a hub does
    event_loop: OnceLock<Arc<mio::Waker>>,
}

impl Store {
    pub fn new() -> Arc<Store> {
        Arc::new(Store::default())
    }
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }
    /// Tells whoever waits that the state changed: this process's ranks
    /// (the condition variable) and the event loop (its waker).
    fn announce(&self, s: &mut State) {
        if std::mem::take(&mut s.changed) {
            self.generation.fetch_add(1, Ordering::Release);
            self.changed.notify_all();
        }
        // the loop looks at its parked requests after each of its turns:
        // only changes made by other threads need to wake it
        if std::mem::take(&mut s.wake_loop)
            && let Some(waker) = self.event_loop.get()
            && !super::server::in_loop()
        {
            let _ = waker.wake();
        }
    }
    /// Runs `f` on the state under the lock, then tells whoever waits.
    pub(super) fn with<R>(&self, f: impl FnOnce(&mut State) -> R) -> R {
        let mut s = self.lock();
        let r = f(&mut s);
        self.announce(&mut s);
        r
    }
    /// An event loop serves this store and wakes by `waker`.
    pub(super) fn attach(&self, waker: Arc<mio::Waker>) {
        let _ = self.event_loop.set(waker);
    }
    /// The value of `key` now, if set.
    pub fn peek(&self, key: &str) -> Option<Vec<u8>> {
        self.lock().map.get(key).map(|s| s.value.clone())
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
    /// Bytes held for SET keys and for exchanges, as the store counts them.
    pub fn held_bytes(&self) -> usize {
        let s = self.lock();
        s.set_total.bytes + s.exchange_bytes
    }
    /// Waits until something changes or `deadline`; false once it has
    /// passed. Spins first ([`SPIN`]), then sleeps on the condition
    /// variable.
    fn wait_for_change<'s>(
        &'s self,
        s: MutexGuard<'s, State>,
        deadline: Instant,
    ) -> (MutexGuard<'s, State>, bool) {
        let now = Instant::now();
        if now >= deadline {
            return (s, false);
        }
        // changes are counted under the lock: one counted after this look
        // is one this wait has not seen
        let seen = self.generation.load(Ordering::Acquire);
        let s = match spins() {
            true => {
                drop(s);
                self.spin(seen, (now + SPIN).min(deadline));
                let s = self.lock();
                if self.generation.load(Ordering::Acquire) != seen {
                    return (s, true);
                }
                s
            }
            false => s,
        };
        // a spin that reached the deadline sleeps for nothing: the caller
        // looks once more, and its next wait says the deadline passed
        let left = deadline.saturating_duration_since(Instant::now());
        let s = self
            .changed
            .wait_timeout(s, left)
            .unwrap_or_else(|p| p.into_inner())
            .0;
        (s, true)
    }

    /// Looks at the change counter, without the lock, until it differs
    /// from `seen` or `until`.
    fn spin(&self, seen: u64, until: Instant) {
        let mut turn = 0u32;
        while self.generation.load(Ordering::Acquire) == seen {
            turn = turn.wrapping_add(1);
            // the clock costs more than a look at the counter
            if turn.is_multiple_of(64) && Instant::now() >= until {
                return;
            }
            std::hint::spin_loop();
        }
    }
    fn wait(&self, key: &str, owner: usize, deadline: Instant) -> Share {
        let mut s = self.lock();
        loop {
            if let Some(share) = s.lookup(key, owner) {
                return share;
            }
            let more;
            (s, more) = self.wait_for_change(s, deadline);
            if !more {
                return Err(Missing::Timeout);
            }
        }
    }
    /// [`SideChannel::exchange`] for a rank of this process, or what is
    /// wrong with an item.
    fn run_exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> std::result::Result<Vec<Vec<Share>>, String> {
        let mut s = self.lock();
        s.post(items, note, None)?;
        self.announce(&mut s);
        // a wait that lasts asks for looks at the waits ([`waits`])
        let mut look = Instant::now() + LOOK_AFTER;
        loop {
            if s.all_settled(items) {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if now >= look {
                s.look_for_cycles(now);
                self.announce(&mut s);
                look = now + LOOK_EVERY;
                continue;
            }
            (s, _) = self.wait_for_change(s, deadline.min(look));
        }
        Ok(s.answers(items))
    }
    /// Marks `rank` finished; the first report wins (a process that said
    /// why it failed keeps its reason when it then exits).
    pub fn mark_finished(&self, rank: usize, error: Option<&str>) {
        self.with(|s| s.finish(rank, error));
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
        self.with(|s| s.set(None, key, value)).map_err(misused)
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
        Ok(self.with(|s| s.note_of(owner)))
    }
}
