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
//! last, at no cost of its own.
//!
//! [`Store`] serves ranks that are threads of one process; [`Hub`] serves
//! it over TCP on 127.0.0.1 to ranks that are processes ([`Client`]). The
//! process launcher starts the hub in the parent; the NCCL engine and the
//! interposer carry the ncclUniqueId, every launch's posts and every
//! Send/Recv pairing through it before NCCL is called (the interposer's
//! collectives between ranks of one host go through shared memory instead,
//! and use the store only to set that up and to hear of ranks that left).

use crate::core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// Why a wait for a key ended without it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Missing {
    /// The deadline passed.
    Timeout,
    /// The key's owner finished its program without setting it; `reason` is
    /// its error, None when it ended normally.
    Finished { reason: Option<String> },
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
    /// Rank `rank`'s program ended, with `error` when it failed.
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()>;
    /// Posts this rank's values of `items`, keeps `note` as owner
    /// `note.0`'s latest, then waits (until `deadline`) for the items it
    /// reads [`Read::Now`]: one answer per item, in order, with every
    /// party's share for those it reads and nothing for the others.
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>>;
    /// The latest note owner `owner` left with an exchange.
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>>;
}

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

/// The store itself, for ranks in one process (and behind the [`Hub`]).
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
    fn set_value(&self, key: &str, value: &[u8]) {
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
    fn wait(
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
    fn run_exchange(
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

fn misused(why: String) -> Error {
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
        Ok(self.lock().notes.get(&owner).cloned())
    }
}

// The wire: a request is one op byte and its fields; integers are little
// endian, strings and byte strings a u32 length and the bytes, an owner a
// u32. EXCHANGE: the wait in ms (u64), the note (a flag byte, then owner
// and bytes), the item count (u32), then per item its key, its owners (a
// count, then each), its party (u32), its value (a flag byte, then the
// bytes) and its read (0 now, 1 later, 2 never). Its answer: OK and per
// item a share count (u32) and the shares, or ERROR and why.
const SET: u8 = 1;
const GET: u8 = 2;
const FINISH: u8 = 3;
const EXCHANGE: u8 = 4;
const LAST_NOTE: u8 = 5;
const OK: u8 = 0;
const VALUE: u8 = 1;
const TIMEOUT: u8 = 2;
const FINISHED: u8 = 3;
const NONE: u8 = 4;
const ERROR: u8 = 5;
/// Longest key or value the hub accepts (a launch's posts are a few KiB).
const MAX_FIELD: usize = 64 << 20;
/// Most items or parties in one request the hub accepts.
const MAX_COUNT: usize = 1 << 20;

fn put_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(b.len()).map_err(|_| std::io::Error::other("field too long"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(b)
}
fn put_u32(w: &mut impl Write, x: usize) -> std::io::Result<()> {
    w.write_all(&(x as u32).to_le_bytes())
}
fn get_u32(r: &mut impl std::io::Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}
fn get_count(r: &mut impl std::io::Read) -> std::io::Result<usize> {
    let n = get_u32(r)? as usize;
    if n > MAX_COUNT {
        return Err(std::io::Error::other(format!(
            "a count of {n} is more than the hub accepts ({MAX_COUNT})"
        )));
    }
    Ok(n)
}
fn get_u64(r: &mut impl std::io::Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
fn get_u8(r: &mut impl std::io::Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}
fn get_bytes(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let len = get_u32(r)? as usize;
    if len > MAX_FIELD {
        return Err(std::io::Error::other(format!(
            "a field of {len} bytes is longer than the hub accepts ({MAX_FIELD})"
        )));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}
fn get_string(r: &mut impl std::io::Read) -> std::io::Result<String> {
    String::from_utf8(get_bytes(r)?).map_err(std::io::Error::other)
}
fn put_share(w: &mut impl Write, s: &Share) -> std::io::Result<()> {
    match s {
        Ok(v) => {
            w.write_all(&[VALUE])?;
            put_bytes(w, v)
        }
        Err(Missing::Timeout) => w.write_all(&[TIMEOUT]),
        Err(Missing::Finished { reason }) => {
            w.write_all(&[FINISHED, u8::from(reason.is_some())])?;
            put_bytes(w, reason.as_deref().unwrap_or_default().as_bytes())
        }
    }
}
fn get_share(r: &mut impl std::io::Read) -> std::io::Result<Share> {
    match get_u8(r)? {
        VALUE => Ok(Ok(get_bytes(r)?)),
        TIMEOUT => Ok(Err(Missing::Timeout)),
        FINISHED => {
            let failed = get_u8(r)? != 0;
            let reason = get_string(r)?;
            Ok(Err(Missing::Finished {
                reason: failed.then_some(reason),
            }))
        }
        x => Err(unexpected(x)),
    }
}
fn unexpected(x: u8) -> std::io::Error {
    std::io::Error::other(format!("unexpected answer {x}"))
}
fn read_code(r: Read) -> u8 {
    match r {
        Read::Now => 0,
        Read::Later => 1,
        Read::Never => 2,
    }
}
fn read_of(code: u8) -> std::io::Result<Read> {
    match code {
        0 => Ok(Read::Now),
        1 => Ok(Read::Later),
        2 => Ok(Read::Never),
        x => Err(std::io::Error::other(format!("unknown read {x}"))),
    }
}
/// A deadline `ms` from now, capped at a year.
fn deadline_in(ms: u64) -> Instant {
    Instant::now()
        .checked_add(Duration::from_millis(ms))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
}
fn millis_until(deadline: Instant) -> u64 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u64::MAX as u128) as u64
}

/// An exchange item as it arrives at the hub.
struct OwnedItem {
    key: String,
    owners: Vec<usize>,
    me: usize,
    value: Option<Vec<u8>>,
    read: Read,
}

fn get_item(r: &mut impl std::io::Read) -> std::io::Result<OwnedItem> {
    let key = get_string(r)?;
    let n = get_count(r)?;
    let owners = (0..n)
        .map(|_| get_u32(r).map(|o| o as usize))
        .collect::<std::io::Result<Vec<_>>>()?;
    let me = get_u32(r)? as usize;
    let value = match get_u8(r)? {
        0 => None,
        _ => Some(get_bytes(r)?),
    };
    let read = read_of(get_u8(r)?)?;
    Ok(OwnedItem {
        key,
        owners,
        me,
        value,
        read,
    })
}
/// The store served over TCP (127.0.0.1 unless [`Hub::start_on`] says
/// otherwise), one thread per connection. It lives as long as the process
/// that started it (the launcher's parent, or the interposed process that
/// made a communicator's ncclUniqueId).
pub struct Hub {
    addr: SocketAddr,
    store: Arc<Store>,
    /// connections being served now
    open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Hub {
    /// Listens on an ephemeral port of 127.0.0.1.
    pub fn start() -> Result<Hub> {
        Hub::start_on(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// Listens on an ephemeral port of `ip` (the interposer serves ranks on
    /// other hosts from the address NCCL's own bootstrap listens on).
    pub fn start_on(ip: std::net::IpAddr) -> Result<Hub> {
        let listener = TcpListener::bind((ip, 0)).map_err(|e| {
            Error::new(
                ErrorKind::System,
                format!("cannot listen on {ip} for the ranks' side channel: {e}"),
            )
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::System, format!("side channel address: {e}")))?;
        let store = Store::new();
        let served = store.clone();
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = open.clone();
        std::thread::Builder::new()
            .name("rankwise-hub".into())
            .spawn(move || {
                use std::sync::atomic::Ordering::SeqCst;
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let store = served.clone();
                    let open = counted.clone();
                    open.fetch_add(1, SeqCst);
                    // a connection that cannot get a thread is dropped: its rank
                    // sees the closed connection as an error
                    let gone = open.clone();
                    let spawned = std::thread::Builder::new()
                        .name("rankwise-hub-conn".into())
                        .spawn(move || {
                            serve(conn, &store);
                            gone.fetch_sub(1, SeqCst);
                        });
                    if spawned.is_err() {
                        open.fetch_sub(1, SeqCst);
                    }
                }
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::System,
                    format!("cannot start the side channel's thread: {e}"),
                )
            })?;
        Ok(Hub { addr, store, open })
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Connections being served now: a process that serves ranks of other
    /// processes waits for this to reach 0 before it exits.
    pub fn open_connections(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Answers one connection's requests until it closes.
fn serve(conn: TcpStream, store: &Store) {
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut r = BufReader::new(read_half);
    let mut w = BufWriter::new(conn);
    let answer =
        |r: &mut BufReader<TcpStream>, w: &mut BufWriter<TcpStream>| -> std::io::Result<()> {
            match get_u8(r)? {
                SET => {
                    let key = get_string(r)?;
                    let value = get_bytes(r)?;
                    store.set_value(&key, &value);
                    w.write_all(&[OK])?;
                }
                GET => {
                    let key = get_string(r)?;
                    let owner = get_u32(r)? as usize;
                    let deadline = deadline_in(get_u64(r)?);
                    put_share(w, &store.wait(&key, owner, deadline))?;
                }
                FINISH => {
                    let rank = get_u32(r)? as usize;
                    let failed = get_u8(r)? != 0;
                    let reason = get_string(r)?;
                    store.mark_finished(rank, failed.then_some(reason.as_str()));
                    w.write_all(&[OK])?;
                }
                EXCHANGE => {
                    let deadline = deadline_in(get_u64(r)?);
                    let note = match get_u8(r)? {
                        0 => None,
                        _ => Some((get_u32(r)? as usize, get_bytes(r)?)),
                    };
                    let n = get_count(r)?;
                    let owned = (0..n)
                        .map(|_| get_item(r))
                        .collect::<std::io::Result<Vec<_>>>()?;
                    let items: Vec<Item<'_>> = owned
                        .iter()
                        .map(|o| Item {
                            key: &o.key,
                            owners: &o.owners,
                            me: o.me,
                            value: o.value.as_deref(),
                            read: o.read,
                        })
                        .collect();
                    let note = note.as_ref().map(|(o, b)| (*o, b.as_slice()));
                    match store.run_exchange(&items, note, deadline) {
                        Ok(answers) => {
                            w.write_all(&[OK])?;
                            for shares in &answers {
                                put_u32(w, shares.len())?;
                                for s in shares {
                                    put_share(w, s)?;
                                }
                            }
                        }
                        Err(why) => {
                            w.write_all(&[ERROR])?;
                            put_bytes(w, why.as_bytes())?;
                        }
                    }
                }
                LAST_NOTE => {
                    let owner = get_u32(r)? as usize;
                    match store.lock().notes.get(&owner) {
                        Some(b) => {
                            w.write_all(&[VALUE])?;
                            put_bytes(w, b)?;
                        }
                        None => w.write_all(&[NONE])?,
                    }
                }
                op => return Err(std::io::Error::other(format!("unknown request {op}"))),
            }
            w.flush()
        };
    while answer(&mut r, &mut w).is_ok() {}
}

/// A rank's connection to the [`Hub`].
pub struct Client {
    conn: Mutex<(BufReader<TcpStream>, BufWriter<TcpStream>)>,
    addr: SocketAddr,
}

impl Client {
    /// Connects to the hub at `addr`, retrying until `deadline` (the parent
    /// may still be starting).
    pub fn connect(addr: SocketAddr, deadline: Instant) -> Result<Client> {
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let r = s.try_clone().map_err(|e| lost(addr, e))?;
                    return Ok(Client {
                        conn: Mutex::new((BufReader::new(r), BufWriter::new(s))),
                        addr,
                    });
                }
                Err(e) if Instant::now() >= deadline => return Err(lost(addr, e)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    fn request<T>(
        &self,
        send: impl FnOnce(&mut BufWriter<TcpStream>) -> std::io::Result<()>,
        recv: impl FnOnce(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let (r, w) = &mut *conn;
        send(w)
            .and_then(|()| w.flush())
            .and_then(|()| recv(r))
            .map_err(|e| lost(self.addr, e))
    }
}

fn lost(addr: SocketAddr, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::RemoteError,
        format!(
            "the ranks' side channel at {addr} is gone ({e}): the process that served it ended (the launcher, or under the interposer the process that made the ncclUniqueId)"
        ),
    )
}

fn expect_ok(r: &mut impl std::io::Read) -> std::io::Result<()> {
    match get_u8(r)? {
        OK => Ok(()),
        x => Err(unexpected(x)),
    }
}

impl SideChannel for Client {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[SET])?;
                put_bytes(w, key.as_bytes())?;
                put_bytes(w, value)
            },
            expect_ok,
        )
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        self.request(
            |w| {
                w.write_all(&[GET])?;
                put_bytes(w, key.as_bytes())?;
                put_u32(w, owner)?;
                w.write_all(&millis_until(deadline).to_le_bytes())
            },
            get_share,
        )
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[FINISH])?;
                put_u32(w, rank)?;
                w.write_all(&[u8::from(error.is_some())])?;
                put_bytes(w, error.unwrap_or_default().as_bytes())
            },
            expect_ok,
        )
    }
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>> {
        let answer = self.request(
            |w| {
                w.write_all(&[EXCHANGE])?;
                w.write_all(&millis_until(deadline).to_le_bytes())?;
                match note {
                    None => w.write_all(&[0])?,
                    Some((owner, b)) => {
                        w.write_all(&[1])?;
                        put_u32(w, owner)?;
                        put_bytes(w, b)?;
                    }
                }
                put_u32(w, items.len())?;
                for it in items {
                    put_bytes(w, it.key.as_bytes())?;
                    put_u32(w, it.owners.len())?;
                    for o in it.owners {
                        put_u32(w, *o)?;
                    }
                    put_u32(w, it.me)?;
                    match it.value {
                        None => w.write_all(&[0])?,
                        Some(v) => {
                            w.write_all(&[1])?;
                            put_bytes(w, v)?;
                        }
                    }
                    w.write_all(&[read_code(it.read)])?;
                }
                Ok(())
            },
            |r| match get_u8(r)? {
                OK => {
                    let mut answers = Vec::with_capacity(items.len());
                    for _ in items {
                        let n = get_count(r)?;
                        answers.push(
                            (0..n)
                                .map(|_| get_share(r))
                                .collect::<std::io::Result<_>>()?,
                        );
                    }
                    Ok(Ok(answers))
                }
                ERROR => Ok(Err(get_string(r)?)),
                x => Err(unexpected(x)),
            },
        )?;
        answer.map_err(misused)
    }
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>> {
        self.request(
            |w| {
                w.write_all(&[LAST_NOTE])?;
                put_u32(w, owner)
            },
            |r| match get_u8(r)? {
                VALUE => Ok(Some(get_bytes(r)?)),
                NONE => Ok(None),
                x => Err(unexpected(x)),
            },
        )
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    const ALL: [usize; 4] = [0, 1, 2, 3];

    /// Rank `me` of 4 posts `value` under `key` and reads everyone's.
    fn all4(ch: &dyn SideChannel, key: &str, me: usize, value: &[u8], ms: u64) -> Vec<Share> {
        let it = Item {
            key,
            owners: &ALL,
            me,
            value: Some(value),
            read: Read::Now,
        };
        ch.exchange(&[it], None, soon(ms)).unwrap().remove(0)
    }

    fn exercise(chans: Vec<Arc<dyn SideChannel>>) {
        assert_eq!(chans.len(), 4);
        // an allgather: every rank posts its value and reads everyone's, in
        // one request, leaving a note of where it is
        let got: Vec<Vec<Share>> = std::thread::scope(|s| {
            let hs: Vec<_> = chans
                .iter()
                .enumerate()
                .map(|(r, ch)| {
                    s.spawn(move || {
                        let value = [r as u8; 3];
                        let it = Item {
                            key: "x",
                            owners: &ALL,
                            me: r,
                            value: Some(&value),
                            read: Read::Now,
                        };
                        let note = format!("AllReduce (opCount {r})");
                        let mut a = ch
                            .exchange(&[it], Some((r, note.as_bytes())), soon(5_000))
                            .unwrap();
                        assert_eq!(a.len(), 1);
                        a.remove(0)
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            assert_eq!(gathered(g), Ok((0..4).map(|r| vec![r as u8; 3]).collect()));
        }
        // a key nobody sets times out; one whose owner finished says so
        let t = Instant::now();
        assert_eq!(
            chans[0].get("never", 1, soon(150)).unwrap(),
            Err(Missing::Timeout)
        );
        assert!(t.elapsed() >= Duration::from_millis(140));
        // a party that never posts: the wait runs out its deadline and names
        // it, and its note says where it was last
        let t = Instant::now();
        let it = Item {
            key: "late",
            owners: &[0, 3],
            me: 0,
            value: Some(b"zero"),
            read: Read::Now,
        };
        let a = chans[0].exchange(&[it], None, soon(150)).unwrap();
        assert!(t.elapsed() >= Duration::from_millis(140));
        assert_eq!(a, vec![vec![Ok(b"zero".to_vec()), Err(Missing::Timeout)]]);
        assert_eq!(
            chans[0].last_note(3).unwrap(),
            Some(b"AllReduce (opCount 3)".to_vec())
        );
        assert_eq!(chans[0].last_note(7).unwrap(), None);
        chans[1].finish(1, Some("rank 1 failed: boom")).unwrap();
        let t = Instant::now();
        assert_eq!(
            chans[0].get("never", 1, soon(10_000)).unwrap(),
            Err(Missing::Finished {
                reason: Some("rank 1 failed: boom".into())
            })
        );
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "no waiting on a finished owner"
        );
        // a party that finished without posting ends the exchange at once:
        // it can never complete; the others not there yet are named too
        chans[2].finish(2, None).unwrap();
        let t = Instant::now();
        let a = all4(&*chans[0], "y", 0, b"y0", 10_000);
        assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
        assert_eq!(
            gathered(a),
            Err(vec![
                (
                    1,
                    Missing::Finished {
                        reason: Some("rank 1 failed: boom".into())
                    }
                ),
                (2, Missing::Finished { reason: None }),
                (3, Missing::Timeout),
            ])
        );
        // a misused item is refused, not served
        let bad = Item {
            key: "bad",
            owners: &[0, 1],
            me: 2,
            value: Some(b""),
            read: Read::Now,
        };
        let e = chans[0].exchange(&[bad], None, soon(100)).unwrap_err();
        assert!(e.message.contains("party 2 of 2"), "{e}");
    }

    /// The reads of [`Read`]: posting now and reading later (ranks of a
    /// group spanning stores), and posting only (a rank that failed).
    fn reads(chans: &[Arc<dyn SideChannel>]) {
        let pair = [0usize, 1];
        let post = |me: usize, read| Item {
            key: "v",
            owners: &pair,
            me,
            value: Some(if me == 0 { b"a" } else { b"b" }),
            read,
        };
        let a = chans[0]
            .exchange(&[post(0, Read::Later)], None, soon(5_000))
            .unwrap();
        assert_eq!(a, vec![Vec::<Share>::new()], "nothing read yet");
        let b = chans[1]
            .exchange(&[post(1, Read::Never)], None, soon(5_000))
            .unwrap();
        assert_eq!(b, vec![Vec::<Share>::new()]);
        let read = Item {
            value: None,
            read: Read::Now,
            ..post(0, Read::Now)
        };
        let a = chans[0].exchange(&[read], None, soon(5_000)).unwrap();
        assert_eq!(a, vec![vec![Ok(b"a".to_vec()), Ok(b"b".to_vec())]]);
    }

    #[test]
    fn threads_share_one_store() {
        let s = Store::new();
        let chans: Vec<Arc<dyn SideChannel>> = (0..4).map(|_| s.clone() as _).collect();
        reads(&chans);
        assert_eq!(s.key_count(), 0, "both parties read or will not");
        exercise(chans);
    }

    #[test]
    fn processes_reach_the_hub_over_tcp() {
        let hub = Hub::start().unwrap();
        let chans: Vec<Arc<dyn SideChannel>> = (0..4)
            .map(|_| Arc::new(Client::connect(hub.addr(), soon(5_000)).unwrap()) as _)
            .collect();
        reads(&chans);
        assert_eq!(hub.store().key_count(), 0);
        exercise(chans);
        assert_eq!(
            hub.store().finished(1),
            Some(Some("rank 1 failed: boom".into()))
        );
        // what clients set, the parent reads directly; large values cross intact
        let c = Client::connect(hub.addr(), soon(5_000)).unwrap();
        c.set("counted", b"").unwrap();
        assert_eq!(hub.store().peek("counted"), Some(vec![]));
        assert!(hub.open_connections() >= 1);
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
        c.set("big", &big).unwrap();
        assert_eq!(c.get("big", 0, soon(1_000)).unwrap(), Ok(big.clone()));
        let it = Item {
            key: "alone",
            owners: &[9],
            me: 0,
            value: Some(&big),
            read: Read::Now,
        };
        assert_eq!(
            c.exchange(&[it], None, soon(1_000)).unwrap(),
            vec![vec![Ok(big)]]
        );
    }

    /// `rounds` launches on 4 ranks, as the interposer makes them: an
    /// AllReduce's exchange, a ring of Send/Recv pairs in the same request,
    /// then the pairs' verdicts, every 7th with rank 0 posting its verdict
    /// only (as a rank that failed does).
    fn launches(chans: &[Arc<dyn SideChannel>], rounds: usize, watch: impl Fn(usize) + Sync) {
        std::thread::scope(|s| {
            for (me, ch) in chans.iter().enumerate() {
                let watch = &watch;
                s.spawn(move || {
                    let (next, prev) = ((me + 1) % 4, (me + 3) % 4);
                    for i in 0..rounds {
                        let x = format!("x{i}");
                        let (sk, rk) = (format!("p{me}>{next}/{i}"), format!("p{prev}>{me}/{i}"));
                        let post = [me as u8; 80];
                        let items = [
                            Item {
                                key: &x,
                                owners: &ALL,
                                me,
                                value: Some(&post),
                                read: Read::Now,
                            },
                            Item {
                                key: &sk,
                                owners: &[me, next],
                                me: 0,
                                value: Some(&post),
                                read: Read::Now,
                            },
                            Item {
                                key: &rk,
                                owners: &[prev, me],
                                me: 1,
                                value: Some(&post),
                                read: Read::Now,
                            },
                        ];
                        let a = ch.exchange(&items, None, soon(20_000)).unwrap();
                        assert!(a.iter().flatten().all(Result::is_ok), "{a:?}");
                        let only_post = me == 0 && i % 7 == 0;
                        let verdicts: Vec<(String, [usize; 2], usize)> = [next, prev]
                            .iter()
                            .map(|&p| {
                                let (lo, hi) = (me.min(p), me.max(p));
                                (format!("v{lo}.{hi}/{i}"), [lo, hi], usize::from(me == hi))
                            })
                            .collect();
                        let items: Vec<Item<'_>> = verdicts
                            .iter()
                            .map(|(k, owners, party)| Item {
                                key: k,
                                owners,
                                me: *party,
                                value: Some(b""),
                                read: if only_post { Read::Never } else { Read::Now },
                            })
                            .collect();
                        ch.exchange(&items, None, soon(20_000)).unwrap();
                        watch(i);
                    }
                });
            }
        });
    }

    #[test]
    fn spent_exchanges_are_dropped_so_memory_follows_the_calls_in_flight() {
        let s = Store::new();
        let chans: Vec<Arc<dyn SideChannel>> = (0..4).map(|_| s.clone() as _).collect();
        let most = std::sync::atomic::AtomicUsize::new(0);
        launches(&chans, 10_000, |_| {
            most.fetch_max(s.key_count(), std::sync::atomic::Ordering::Relaxed);
        });
        assert_eq!(s.key_count(), 0, "every exchange was spent");
        // ranks are at most a launch apart: two launches' keys (an AllReduce,
        // 4 pairs and 4 verdicts each) at most
        let most = most.into_inner();
        assert!(most <= 18, "{most} keys held at once");
        // the same over TCP
        let hub = Hub::start().unwrap();
        let chans: Vec<Arc<dyn SideChannel>> = (0..4)
            .map(|_| Arc::new(Client::connect(hub.addr(), soon(5_000)).unwrap()) as _)
            .collect();
        launches(&chans, 1_000, |_| {});
        assert_eq!(hub.store().key_count(), 0);
    }

    #[test]
    fn a_closed_hub_is_an_error_not_a_hang() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let t = std::thread::spawn(move || {
            // accept one connection and drop it at once
            let _ = listener.accept();
        });
        let c = Client::connect(addr, soon(5_000)).unwrap();
        t.join().unwrap();
        let e = c.get("k", 0, soon(60_000)).unwrap_err();
        assert_eq!(e.kind, ErrorKind::RemoteError);
        assert!(e.message.contains("side channel"), "{e}");
    }
}
