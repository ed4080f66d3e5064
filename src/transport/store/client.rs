//! A rank's connection to the [`Hub`](super::Hub): the handshake that
//! proves the job's key (and that the hub holds it too), then one request
//! at a time, each written whole and its answer read whole.
//!
//! No wait outlives its deadline: every read and write of a request runs
//! under the socket timeouts left until the request's deadline (or its
//! start, if later) plus [`SLACK`] (requests that carry no deadline get
//! [`PLAIN_WAIT`]), and TCP keepalive probes a quiet connection. A store
//! whose host vanishes without a word fails the request within its
//! deadline + 1 s, with an error naming the store's address.
//!
//! A request no call waits on (a look: a GET whose deadline has passed,
//! what the store holds now; a FINISH; a LAST_NOTE) whose answer has not
//! begun to arrive by its bound fails alone: its answer is owed, and the
//! next request a call waits on (a GET or EXCHANGE with a deadline ahead,
//! a SET) reads and drops it first, under its own bound. The looks a rank
//! makes while it waits (has a peer left?) would otherwise end the rank's
//! call at the first stall of over [`SLACK`], a TCP retransmission, however
//! far its deadline. While an answer is owed, a request no call waits on
//! fails at once unless the answer has begun to arrive, so a failing
//! rank's FINISH does not stall it again on a store found silent. After
//! any other failed read or write the connection's bytes are out of step,
//! so every later request fails with the same error.

use super::auth::{self, Key};
use super::codec::{self, Bad, HEAD, MAX_ANSWER, MAX_FRAME};
use super::state::misused;
use super::{Item, Missing, Share, SideChannel};
use crate::core::{Error, ErrorKind, Result};
use std::io::{ErrorKind as Io, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long past its deadline a request may take to come back: the
/// store answers at the deadline, and the answer has to travel. Under a
/// second, so a rank whose store went quiet has failed by the deadline
/// + 1 s even when its thread is woken late.
pub(super) const SLACK: Duration = Duration::from_millis(750);
/// The bound of a request that has no deadline of its own (SET, FINISH,
/// LAST_NOTE).
pub(super) const PLAIN_WAIT: Duration = Duration::from_secs(10);
/// Longest single try to connect (the hub may still be starting).
const CONNECT_TRY: Duration = Duration::from_secs(1);

/// A rank's connection to the [`Hub`](super::Hub), speaking for one owner.
pub struct Client {
    conn: Mutex<Conn>,
    addr: SocketAddr,
    owner: usize,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("addr", &self.addr)
            .field("owner", &self.owner)
            .finish()
    }
}

struct Conn {
    stream: TcpStream,
    /// a request's frame, then its answer's
    buf: Vec<u8>,
    /// the socket's timeouts as last set
    read_timeout: Option<Duration>,
    write_timeout: Option<Duration>,
    /// the answer of a request no call waited on that did not come in
    /// time, still to be read
    owed: bool,
    /// why the connection can no longer be used
    broken: Option<Error>,
}

impl Client {
    /// Connects to the hub at `addr` as `owner` and proves `key`, retrying
    /// the connection until `deadline` (the parent may still be starting);
    /// the handshake ends by `deadline` + [`SLACK`].
    pub fn connect(addr: SocketAddr, key: &Key, owner: usize, deadline: Instant) -> Result<Client> {
        let owner32 = u32::try_from(owner).map_err(|_| {
            Error::new(
                ErrorKind::InvalidUsage,
                format!("owner {owner} does not fit the side channel's 32 bits"),
            )
        })?;
        let stream = loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match try_connect(addr, left.clamp(Duration::from_millis(10), CONNECT_TRY)) {
                Ok(s) => break s,
                Err(e) if Instant::now() >= deadline => return Err(lost(addr, &e)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        };
        let mut conn = Conn {
            stream,
            buf: Vec::new(),
            read_timeout: None,
            write_timeout: None,
            owed: false,
            broken: None,
        };
        handshake(
            &mut conn,
            addr,
            key,
            owner32,
            deadline.max(Instant::now()) + SLACK,
        )?;
        Ok(Client {
            conn: Mutex::new(conn),
            addr,
            owner,
        })
    }

    /// The owner this connection proved it speaks for.
    pub fn owner(&self) -> usize {
        self.owner
    }

    /// Sends the request `put` writes and reads its answer's body, all
    /// before `until`; then `read` decodes it. A request no call `waits`
    /// on leaves its answer owed when it has not begun by then, instead of
    /// breaking the connection.
    fn request<T>(
        &self,
        until: Instant,
        waits: bool,
        put: impl FnOnce(&mut Vec<u8>),
        read: impl FnOnce(&[u8]) -> std::result::Result<T, Bad>,
    ) -> Result<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(e) = &conn.broken {
            return Err(e.clone());
        }
        let c = &mut *conn;
        if c.owed {
            // the late answer, dropped unread; only a request a call waits
            // on waits for it, the others would stall their caller again
            // for the silence already found
            if !waits && !c.owed_has_come() {
                return Err(still_silent(self.addr));
            }
            c.read_frame(until)
                .map_err(|e| c.fail(self.addr, e, waits))?;
            c.owed = false;
        }
        codec::begin(&mut c.buf);
        put(&mut c.buf);
        codec::seal(&mut c.buf, MAX_FRAME).map_err(misused)?;
        c.write_all_by(until)
            .map_err(|e| c.fail(self.addr, e, true))?;
        c.read_frame(until).map_err(|e| {
            let owed = c.fail(self.addr, e, waits);
            c.owed = c.broken.is_none();
            owed
        })?;
        let answer = read(&c.buf[HEAD..]);
        if c.buf.capacity() > 1 << 20 {
            c.buf = Vec::new();
        }
        answer.map_err(|bad| match bad {
            Bad::Refused(why) => misused(why),
            Bad::Garbled(why) => {
                let e = lost(self.addr, &std::io::Error::other(why));
                c.broken = Some(e.clone());
                e
            }
        })
    }
}

fn try_connect(addr: SocketAddr, timeout: Duration) -> std::io::Result<TcpStream> {
    let s = socket2::Socket::new(
        socket2::Domain::for_address(addr),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    s.connect_timeout(&addr.into(), timeout)?;
    s.set_tcp_nodelay(true)?;
    super::server::quiet_peers_fail(socket2::SockRef::from(&s));
    Ok(s.into())
}

/// The handshake: the hub's hello, this rank's proof, the hub's proof.
fn handshake(c: &mut Conn, addr: SocketAddr, key: &Key, owner: u32, until: Instant) -> Result<()> {
    let io = |e: std::io::Error| match e.kind() {
        Io::TimedOut => silent(addr),
        _ => lost(addr, &e),
    };
    let mut hello = [0u8; auth::HELLO_LEN];
    c.read_exact_by(&mut hello, until).map_err(io)?;
    let server_nonce = auth::read_hello(&hello).map_err(|why| stranger(addr, &why))?;
    let mut client_nonce = [0u8; auth::NONCE];
    auth::fill_random(&mut client_nonce)?;
    c.buf.clear();
    c.buf
        .extend_from_slice(&auth::proof(key, &server_nonce, &client_nonce, owner));
    c.write_all_by(until).map_err(io)?;
    let mut accept = [0u8; auth::ACCEPT_LEN];
    match c.read_exact_by(&mut accept, until) {
        Ok(()) => {}
        Err(e) if e.kind() == Io::UnexpectedEof || e.kind() == Io::ConnectionReset => {
            return Err(Error::new(
                ErrorKind::RemoteError,
                format!(
                    "the ranks' side channel at {addr} closed the connection at the handshake: this rank's key is not the job's (the launcher's RANKWISE_WORKER_KEY, or under the interposer the key in the ncclUniqueId)"
                ),
            ));
        }
        Err(e) => return Err(io(e)),
    }
    if !auth::check_accept(key, &server_nonce, &client_nonce, owner, &accept) {
        return Err(stranger(addr, "it does not hold the job's key"));
    }
    Ok(())
}

impl Conn {
    /// Whether the owed answer has begun to arrive (or the connection
    /// ended, which reading it will tell), without waiting.
    fn owed_has_come(&mut self) -> bool {
        if self.stream.set_nonblocking(true).is_err() {
            return true;
        }
        let came = !matches!(self.stream.peek(&mut [0u8; 1]), Err(e) if e.kind() == Io::WouldBlock);
        let _ = self.stream.set_nonblocking(false);
        came
    }

    /// The error of a read or write that failed with `e`. It breaks the
    /// connection unless no call `waits` on the request and the read timed
    /// out before any byte of its answer came ([`Conn::read_frame`] leaves
    /// what it read in `buf`): the bytes are then still in step, one
    /// answer behind.
    fn fail(&mut self, addr: SocketAddr, e: std::io::Error, waits: bool) -> Error {
        let timed_out = e.kind() == Io::TimedOut;
        let err = if timed_out {
            silent(addr)
        } else {
            lost(addr, &e)
        };
        if waits || !timed_out || !self.buf.is_empty() {
            self.broken = Some(err.clone());
        }
        err
    }

    /// Sets the socket's read (or write) timeout to at most what is left
    /// until `until`; a timeout already set is kept while it is no more
    /// than that and within half a second of it, so a steady stream of
    /// requests with one timeout costs no system call.
    fn arm(&mut self, write: bool, until: Instant) -> std::io::Result<()> {
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(Io::TimedOut.into());
        }
        let set = if write {
            &mut self.write_timeout
        } else {
            &mut self.read_timeout
        };
        if set.is_some_and(|t| t <= left && t + Duration::from_millis(500) >= left) {
            return Ok(());
        }
        if write {
            self.stream.set_write_timeout(Some(left))?;
        } else {
            self.stream.set_read_timeout(Some(left))?;
        }
        *set = Some(left);
        Ok(())
    }

    /// Writes `buf` whole before `until`.
    fn write_all_by(&mut self, until: Instant) -> std::io::Result<()> {
        let mut at = 0;
        while at < self.buf.len() {
            self.arm(true, until)?;
            match self.stream.write(&self.buf[at..]) {
                Ok(0) => return Err(Io::WriteZero.into()),
                Ok(n) => at += n,
                Err(e) if e.kind() == Io::Interrupted => {}
                Err(e) if e.kind() == Io::WouldBlock => return Err(Io::TimedOut.into()),
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// Fills `out` before `until`.
    fn read_exact_by(&mut self, out: &mut [u8], until: Instant) -> std::io::Result<()> {
        let mut at = 0;
        while at < out.len() {
            at += self.read_some(&mut out[at..], until)?;
        }
        Ok(())
    }

    fn read_some(&mut self, out: &mut [u8], until: Instant) -> std::io::Result<usize> {
        loop {
            self.arm(false, until)?;
            match self.stream.read(out) {
                Ok(0) => {
                    return Err(std::io::Error::new(
                        Io::UnexpectedEof,
                        "it closed the connection",
                    ));
                }
                Ok(n) => return Ok(n),
                Err(e) if e.kind() == Io::Interrupted => {}
                Err(e) if e.kind() == Io::WouldBlock => return Err(Io::TimedOut.into()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Reads one answer frame, head and body, into `buf`, before `until`.
    fn read_frame(&mut self, until: Instant) -> std::io::Result<()> {
        let mut buf = std::mem::take(&mut self.buf);
        buf.clear();
        buf.resize(buf.capacity().max(4096), 0);
        let mut have = 0;
        let r = loop {
            if have >= HEAD {
                let need = match codec::frame_len(&buf[..HEAD], MAX_ANSWER) {
                    Ok(n) => HEAD + n,
                    Err(why) => break Err(std::io::Error::other(why)),
                };
                // one answer per request: nothing may follow it
                if have > need {
                    break Err(std::io::Error::other("more bytes than one answer"));
                }
                if have == need {
                    break Ok(());
                }
                if buf.len() < need {
                    buf.resize(need, 0);
                }
            }
            match self.read_some(&mut buf[have..], until) {
                Ok(n) => have += n,
                Err(e) => break Err(e),
            }
        };
        buf.truncate(have);
        self.buf = buf;
        r
    }
}

fn lost(addr: SocketAddr, e: &std::io::Error) -> Error {
    // a loopback address is refused on every host but the server's own:
    // the likelier cause when ranks span hosts
    let why = if addr.ip().is_loopback() && e.kind() == std::io::ErrorKind::ConnectionRefused {
        " or, if this rank runs on another host than that process, the address is loopback, which only that host reaches (NCCL put it in the ncclUniqueId: NCCL_SOCKET_IFNAME picks the interface)"
    } else {
        ""
    };
    Error::new(
        ErrorKind::RemoteError,
        format!(
            "the ranks' side channel at {addr} is gone ({e}): the process that served it ended (the launcher, or under the interposer the process that made the ncclUniqueId){why}"
        ),
    )
}

fn silent(addr: SocketAddr) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "the ranks' side channel at {addr} did not answer within the request's deadline and {SLACK:?} more: its host may be gone or unreachable"
        ),
    )
}

fn still_silent(addr: SocketAddr) -> Error {
    Error::new(
        ErrorKind::Timeout,
        format!(
            "the ranks' side channel at {addr} has still not answered an earlier request: its host may be gone or unreachable"
        ),
    )
}

fn stranger(addr: SocketAddr, why: &str) -> Error {
    Error::new(
        ErrorKind::RemoteError,
        format!("what listens at {addr} is not this job's side channel: {why}"),
    )
}

impl SideChannel for Client {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        // a post a call waits on (a lane's overflow)
        self.request(
            Instant::now() + PLAIN_WAIT,
            true,
            |b| codec::put_set(b, key, value),
            codec::read_ok,
        )
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        let now = Instant::now();
        self.request(
            deadline.max(now) + SLACK,
            deadline > now,
            |b| codec::put_get(b, key, owner, deadline),
            codec::read_share,
        )
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()> {
        self.request(
            Instant::now() + PLAIN_WAIT,
            false,
            |b| codec::put_finish(b, rank, error),
            codec::read_ok,
        )
    }
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>> {
        self.request(
            deadline.max(Instant::now()) + SLACK,
            true,
            |b| codec::put_exchange(b, items, note, deadline),
            |body| codec::read_shares(body, items),
        )
    }
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>> {
        self.request(
            Instant::now() + PLAIN_WAIT,
            false,
            |b| codec::put_last_note(b, owner),
            codec::read_note,
        )
    }
}
