//! The side channel of engines whose ranks do not share memory: a key-value
//! store with blocking reads (≈ PyTorch's TCPStore). A rank sets keys it
//! owns and waits, under a deadline, for keys other ranks own; a rank whose
//! program ended is marked finished, so a wait for a key it never set ends
//! at once with who left and why, instead of running out its deadline.
//!
//! [`Store`] serves ranks that are threads of one process; [`Hub`] serves
//! it over TCP on 127.0.0.1 to ranks that are processes ([`Client`]). The
//! process launcher starts the hub in the parent; the NCCL engine carries
//! the ncclUniqueId, every launch's posts and every Send/Recv pairing
//! through it before NCCL is called.

use crate::core::{Error, ErrorKind, Result};
use std::collections::HashMap;
use std::io::{BufReader, BufWriter, Read, Write};
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

/// What ranks that share no memory share.
pub trait SideChannel: Send + Sync {
    /// Sets `key` (last write wins).
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
}

#[derive(Default)]
struct State {
    map: HashMap<String, Vec<u8>>,
    finished: HashMap<usize, Option<String>>,
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
    fn set_value(&self, key: &str, value: &[u8]) {
        self.lock().map.insert(key.to_string(), value.to_vec());
        self.changed.notify_all();
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
            let now = Instant::now();
            if now >= deadline {
                return Err(Missing::Timeout);
            }
            s = self
                .changed
                .wait_timeout(s, deadline - now)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
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
}

// The wire: a request is one op byte and its fields; strings and byte
// strings are a u32 length (little endian) and the bytes.
const SET: u8 = 1;
const GET: u8 = 2;
const FINISH: u8 = 3;
const OK: u8 = 0;
const VALUE: u8 = 1;
const TIMEOUT: u8 = 2;
const FINISHED: u8 = 3;
/// Longest key or value the hub accepts (a launch's posts are a few KiB).
const MAX_FIELD: usize = 64 << 20;

fn put_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(b.len()).map_err(|_| std::io::Error::other("field too long"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(b)
}
fn get_u32(r: &mut impl Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}
fn get_u64(r: &mut impl Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
fn get_u8(r: &mut impl Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}
fn get_bytes(r: &mut impl Read) -> std::io::Result<Vec<u8>> {
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
fn get_string(r: &mut impl Read) -> std::io::Result<String> {
    String::from_utf8(get_bytes(r)?).map_err(std::io::Error::other)
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
                    let wait = Duration::from_millis(get_u64(r)?);
                    let deadline = Instant::now()
                        .checked_add(wait)
                        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
                    match store.wait(&key, owner, deadline) {
                        Ok(v) => {
                            w.write_all(&[VALUE])?;
                            put_bytes(w, &v)?;
                        }
                        Err(Missing::Timeout) => w.write_all(&[TIMEOUT])?,
                        Err(Missing::Finished { reason }) => {
                            w.write_all(&[FINISHED, u8::from(reason.is_some())])?;
                            put_bytes(w, reason.unwrap_or_default().as_bytes())?;
                        }
                    }
                }
                FINISH => {
                    let rank = get_u32(r)? as usize;
                    let failed = get_u8(r)? != 0;
                    let reason = get_string(r)?;
                    store.mark_finished(rank, failed.then_some(reason.as_str()));
                    w.write_all(&[OK])?;
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

impl SideChannel for Client {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[SET])?;
                put_bytes(w, key.as_bytes())?;
                put_bytes(w, value)
            },
            |r| match get_u8(r)? {
                OK => Ok(()),
                x => Err(std::io::Error::other(format!("unexpected answer {x}"))),
            },
        )
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        let wait = deadline.saturating_duration_since(Instant::now());
        self.request(
            |w| {
                w.write_all(&[GET])?;
                put_bytes(w, key.as_bytes())?;
                w.write_all(&(owner as u32).to_le_bytes())?;
                w.write_all(&(wait.as_millis().min(u64::MAX as u128) as u64).to_le_bytes())
            },
            |r| match get_u8(r)? {
                VALUE => Ok(Ok(get_bytes(r)?)),
                TIMEOUT => Ok(Err(Missing::Timeout)),
                FINISHED => {
                    let failed = get_u8(r)? != 0;
                    let reason = get_string(r)?;
                    Ok(Err(Missing::Finished {
                        reason: failed.then_some(reason),
                    }))
                }
                x => Err(std::io::Error::other(format!("unexpected answer {x}"))),
            },
        )
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[FINISH])?;
                w.write_all(&(rank as u32).to_le_bytes())?;
                w.write_all(&[u8::from(error.is_some())])?;
                put_bytes(w, error.unwrap_or_default().as_bytes())
            },
            |r| match get_u8(r)? {
                OK => Ok(()),
                x => Err(std::io::Error::other(format!("unexpected answer {x}"))),
            },
        )
    }
}

/// Every rank's value, or each rank whose value did not come and why.
pub type Gathered = std::result::Result<Vec<Vec<u8>>, Vec<(usize, Missing)>>;

/// Every rank's value of `key_of(rank)`, in rank order, waiting until
/// `deadline`. Keys not there in time are reported together: `Err` lists
/// each missing rank with why (timed out, or finished without it).
pub fn gather(
    ch: &dyn SideChannel,
    n: usize,
    key_of: impl Fn(usize) -> String,
    deadline: Instant,
) -> Result<Gathered> {
    let mut out = Vec::with_capacity(n);
    let mut missing = Vec::new();
    for r in 0..n {
        // once one rank timed out the rest are only looked at, not waited for
        let until = if missing.is_empty() {
            deadline
        } else {
            Instant::now()
        };
        match ch.get(&key_of(r), r, until)? {
            Ok(v) => out.push(v),
            Err(m) => missing.push((r, m)),
        }
    }
    Ok(if missing.is_empty() {
        Ok(out)
    } else {
        Err(missing)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn soon(ms: u64) -> Instant {
        Instant::now() + Duration::from_millis(ms)
    }

    fn exercise(chans: Vec<Arc<dyn SideChannel>>) {
        let n = chans.len();
        // an allgather: every rank sets its key, then reads everyone's
        let got: Vec<Vec<Vec<u8>>> = std::thread::scope(|s| {
            let hs: Vec<_> = chans
                .iter()
                .enumerate()
                .map(|(r, ch)| {
                    s.spawn(move || {
                        ch.set(&format!("x/{r}"), &[r as u8; 3]).unwrap();
                        gather(&**ch, n, |k| format!("x/{k}"), soon(5_000))
                            .unwrap()
                            .unwrap()
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for g in got {
            assert_eq!(g, (0..n).map(|r| vec![r as u8; 3]).collect::<Vec<_>>());
        }
        // a key nobody sets times out; one whose owner finished says so
        let t = Instant::now();
        assert_eq!(
            chans[0].get("never", 1, soon(150)).unwrap(),
            Err(Missing::Timeout)
        );
        assert!(t.elapsed() >= Duration::from_millis(140));
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
        chans[2].finish(2, None).unwrap();
        let e = gather(&*chans[0], n, |k| format!("y/{k}"), soon(100))
            .unwrap()
            .unwrap_err();
        assert_eq!(e[0], (0, Missing::Timeout));
        assert!(
            e.contains(&(2, Missing::Finished { reason: None })),
            "{e:?}"
        );
        assert_eq!(e.len(), n, "every missing rank is listed: {e:?}");
    }

    #[test]
    fn threads_share_one_store() {
        let s = Store::new();
        exercise((0..4).map(|_| s.clone() as Arc<dyn SideChannel>).collect());
    }

    #[test]
    fn processes_reach_the_hub_over_tcp() {
        let hub = Hub::start().unwrap();
        let chans: Vec<Arc<dyn SideChannel>> = (0..4)
            .map(|_| Arc::new(Client::connect(hub.addr(), soon(5_000)).unwrap()) as _)
            .collect();
        exercise(chans);
        // what clients set, the parent reads directly
        assert_eq!(hub.store().peek("x/3"), Some(vec![3, 3, 3]));
        assert_eq!(
            hub.store().finished(1),
            Some(Some("rank 1 failed: boom".into()))
        );
        // large values cross intact
        let c = Client::connect(hub.addr(), soon(5_000)).unwrap();
        c.set("counted", b"").unwrap();
        assert!(hub.open_connections() >= 1);
        let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
        c.set("big", &big).unwrap();
        assert_eq!(c.get("big", 0, soon(1_000)).unwrap(), Ok(big));
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
