//! The store served over TCP by one thread: an event loop (mio) over
//! non-blocking sockets, whatever the number of connections.
//!
//! A connection is first a handshake ([`super::auth`]): the hello goes out
//! at once, a client that does not prove the job's key within
//! [`HANDSHAKE_TIME`] (or proves another) is closed with nothing kept, and
//! when [`MAX_HANDSHAKES`] are under way the oldest gives way to the newest,
//! so strangers that open connections and say nothing cannot lock the
//! job's ranks out. A proven connection is bound to the owner it proved:
//! FINISH marks that owner only, an exchange item's party must be it, its
//! notes are kept under it.
//!
//! Then requests, one at a time per connection: the next is not read
//! before the answer to the last is written out. A request the state can
//! answer is answered at once; a GET or EXCHANGE that must wait is parked
//! in the state under its keys and answered when a post or a finish wakes
//! it, or when its deadline passes. Answers are built under the store's
//! lock and written by the loop after it is released: a client that does
//! not read its answer holds up nobody, and is closed once it has read
//! nothing for [`WRITE_STALL`]. Peer bytes are decoded by [`super::codec`]'s
//! pure functions, bounded; nothing a peer sends can panic the loop.
//!
//! This file owns the sockets: accepting, the handshake, reading and
//! writing, closing, the timers. [`requests`] owns what a request does to
//! the store and how it is answered.

mod requests;

use super::auth::{self, Key};
use super::codec::{self, HEAD, MAX_FRAME};
use super::state::{LOOK_EVERY, Store};
use crate::core::{Error, ErrorKind, Result};
use mio::net::{TcpListener, TcpStream};
use mio::{Events, Interest, Poll, Token, Waker};
use requests::Waiting;
use std::cell::Cell;
use std::collections::{BTreeSet, HashMap, VecDeque};
use std::io::{ErrorKind as Io, Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::SeqCst};
use std::time::{Duration, Instant};

/// Connections at once, handshakes included; more are closed at accept.
pub(super) const MAX_CONNECTIONS: usize = 4096;
/// Handshakes under way at once; a new one closes the oldest beyond.
pub(super) const MAX_HANDSHAKES: usize = 256;
/// How long a new connection has to prove the key.
pub(super) const HANDSHAKE_TIME: Duration = Duration::from_secs(5);
/// How long a client may leave its answer unread before it is closed.
pub(super) const WRITE_STALL: Duration = Duration::from_secs(30);
/// Bytes read from a socket at a time.
const CHUNK: usize = 64 << 10;

const LISTENER: Token = Token(0);
const WAKER: Token = Token(1);

thread_local! {
    /// This thread is a hub's event loop: changes it makes to its store
    /// need no waking, it looks at its parked requests after each turn.
    static IN_LOOP: Cell<bool> = const { Cell::new(false) };
}

/// Whether this thread is a hub's event loop.
pub(super) fn in_loop() -> bool {
    IN_LOOP.with(Cell::get)
}

/// What a hub has seen, for its owner and for tests.
#[derive(Default)]
struct Counts {
    /// connections that proved the key and are open now
    open: AtomicUsize,
    /// connections closed before or at the handshake: wrong key, too slow,
    /// beyond the bounds
    refused: AtomicUsize,
}

/// The store served over TCP (127.0.0.1 unless [`Hub::start_on`] says
/// otherwise) to the holders of its key, by one thread. It serves until
/// dropped (the interposer's hubs live as long as their process).
pub struct Hub {
    addr: SocketAddr,
    store: Arc<Store>,
    counts: Arc<Counts>,
    stop: Arc<AtomicBool>,
    waker: Arc<Waker>,
    thread: Option<std::thread::JoinHandle<()>>,
}

fn system(what: &str, e: std::io::Error) -> Error {
    Error::new(ErrorKind::System, format!("{what}: {e}"))
}

impl Hub {
    /// Listens on an ephemeral port of 127.0.0.1, for holders of `key`.
    pub fn start(key: Key) -> Result<Hub> {
        Hub::start_on(Ipv4Addr::LOCALHOST.into(), key)
    }

    /// Listens on an ephemeral port of `ip` (the interposer serves ranks on
    /// other hosts from the address NCCL's own bootstrap listens on), for
    /// holders of `key`.
    pub fn start_on(ip: IpAddr, key: Key) -> Result<Hub> {
        let std_listener = std::net::TcpListener::bind((ip, 0)).map_err(|e| {
            system(
                &format!("cannot listen on {ip} for the ranks' side channel"),
                e,
            )
        })?;
        let addr = std_listener
            .local_addr()
            .map_err(|e| system("side channel address", e))?;
        std_listener
            .set_nonblocking(true)
            .map_err(|e| system("side channel listener", e))?;
        let mut listener = TcpListener::from_std(std_listener);
        let poll = Poll::new().map_err(|e| system("side channel event loop", e))?;
        poll.registry()
            .register(&mut listener, LISTENER, Interest::READABLE)
            .map_err(|e| system("side channel event loop", e))?;
        let waker = Arc::new(
            Waker::new(poll.registry(), WAKER).map_err(|e| system("side channel waker", e))?,
        );
        let store = Store::new();
        let counts = Arc::new(Counts::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut server = Server {
            poll,
            listener,
            key,
            store: store.clone(),
            counts: counts.clone(),
            conns: HashMap::new(),
            owners: HashMap::new(),
            next: 2,
            handshakes: VecDeque::new(),
            shaking: 0,
            timers: BTreeSet::new(),
            accept_again: None,
            scratch: vec![0; CHUNK],
        };
        let (stopped, attached) = (stop.clone(), waker.clone());
        let thread = std::thread::Builder::new()
            .name("rankwise-hub".into())
            .spawn(move || {
                IN_LOOP.with(|c| c.set(true));
                server.store.attach(attached);
                server.run(&stopped);
            })
            .map_err(|e| system("cannot start the side channel's thread", e))?;
        Ok(Hub {
            addr,
            store,
            counts,
            stop,
            waker,
            thread: Some(thread),
        })
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Connections that proved the key and are open now: a process that
    /// serves ranks of other processes waits for this to reach 0 before it
    /// exits.
    pub fn open_connections(&self) -> usize {
        self.counts.open.load(SeqCst)
    }
    /// Connections closed before or at the handshake so far.
    pub fn refused_connections(&self) -> usize {
        self.counts.refused.load(SeqCst)
    }
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

impl Drop for Hub {
    fn drop(&mut self) {
        self.stop.store(true, SeqCst);
        let _ = self.waker.wake();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Where a connection is.
enum Phase {
    /// Waiting for the client's proof; the nonce the hello carried.
    Handshake { nonce: [u8; auth::NONCE] },
    /// Proven: every request speaks for this owner.
    Ready { owner: usize },
}

struct Conn {
    stream: TcpStream,
    phase: Phase,
    /// bytes read and not yet taken: at most one message and one chunk
    input: Vec<u8>,
    /// the answer being written, and how much of it is out
    output: Vec<u8>,
    sent: usize,
    waiting: Option<Waiting>,
    /// the connection's one timer: its handshake's end, its wait's
    /// deadline, or how long its unread answer may sit
    timer: Option<Instant>,
}

/// What a connection's turn ends in.
enum Turn {
    Keep,
    Close(Gone),
}

/// Why a connection closed.
enum Gone {
    /// the peer closed it, or it failed
    Peer,
    /// the hub closed it: what the peer did
    Dropped(String),
}

impl Gone {
    /// The reason the store gives for an owner whose last connection
    /// closed this way before it said it finished.
    fn reason(&self) -> String {
        match self {
            Gone::Peer => LOST.to_string(),
            Gone::Dropped(why) => {
                format!("the side channel closed its connection before it finished: {why}")
            }
        }
    }
}

/// What a rank whose connection closed without a FINISH is marked with.
pub(super) const LOST: &str = "its connection to the side channel closed without finishing (its process was killed, crashed, or exited without saying so)";

struct Server {
    poll: Poll,
    listener: TcpListener,
    key: Key,
    store: Arc<Store>,
    counts: Arc<Counts>,
    conns: HashMap<usize, Conn>,
    /// proven connections open per owner: when an owner's last one closes
    /// before it said it finished, its peers hear that it left
    owners: HashMap<usize, usize>,
    /// tokens are never reused, so a stale one in the state's index is
    /// only a needless look
    next: usize,
    /// connections in their handshake, oldest first (some may be past it),
    /// and how many are in it
    handshakes: VecDeque<usize>,
    shaking: usize,
    timers: BTreeSet<(Instant, usize)>,
    /// accepting failed for want of descriptors: try again then
    accept_again: Option<Instant>,
    scratch: Vec<u8>,
}

impl Server {
    fn run(&mut self, stop: &AtomicBool) {
        let mut events = Events::with_capacity(1024);
        let mut parked = false;
        loop {
            let now = Instant::now();
            let next = self.timers.first().map(|(t, _)| *t);
            let next = match (next, self.accept_again) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            let mut timeout = next.map(|t| t.saturating_duration_since(now));
            // while requests wait, a look for wait-for cycles now and then
            if parked {
                timeout = Some(timeout.map_or(LOOK_EVERY, |t| t.min(LOOK_EVERY)));
            }
            if let Err(e) = self.poll.poll(&mut events, timeout)
                && e.kind() != Io::Interrupted
            {
                // nothing to serve with: the ranks see their connections
                // close and say so
                return;
            }
            if stop.load(SeqCst) {
                return;
            }
            for ev in events.iter() {
                match ev.token() {
                    LISTENER => self.accept_all(),
                    WAKER => {}
                    Token(t) if ev.is_error() => self.close(t, Gone::Peer),
                    Token(t) => self.turn(t),
                }
            }
            if self.accept_again.is_some_and(|t| t <= Instant::now()) {
                self.accept_again = None;
                self.accept_all();
            }
            parked = self.store.with(|s| {
                let parked = s.has_parked();
                if parked {
                    s.look_for_cycles(Instant::now());
                }
                parked
            });
            self.wake_ready();
            self.expire(Instant::now());
        }
    }

    fn accept_all(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => self.admit(stream),
                Err(e) if e.kind() == Io::WouldBlock => return,
                Err(e) if e.kind() == Io::Interrupted => {}
                Err(_) => {
                    // out of descriptors (or memory): the connection waits
                    // in the backlog; try again shortly
                    self.accept_again = Some(Instant::now() + Duration::from_millis(50));
                    return;
                }
            }
        }
    }

    /// A new connection: refused beyond the bounds, else sent the hello.
    fn admit(&mut self, mut stream: TcpStream) {
        if self.conns.len() >= MAX_CONNECTIONS {
            self.counts.refused.fetch_add(1, SeqCst);
            return;
        }
        while self
            .handshakes
            .front()
            .is_some_and(|t| !self.in_handshake(*t))
        {
            self.handshakes.pop_front();
        }
        while self.shaking >= MAX_HANDSHAKES {
            let Some(oldest) = self.handshakes.pop_front() else {
                break;
            };
            if self.in_handshake(oldest) {
                self.counts.refused.fetch_add(1, SeqCst);
                self.close(oldest, Gone::Peer);
            }
        }
        let mut nonce = [0u8; auth::NONCE];
        if auth::fill_random(&mut nonce).is_err() {
            self.counts.refused.fetch_add(1, SeqCst);
            return;
        }
        let _ = stream.set_nodelay(true);
        quiet_peers_fail(socket2::SockRef::from(&stream));
        let t = self.next;
        self.next += 1;
        let interest = Interest::READABLE | Interest::WRITABLE;
        if self
            .poll
            .registry()
            .register(&mut stream, Token(t), interest)
            .is_err()
        {
            self.counts.refused.fetch_add(1, SeqCst);
            return;
        }
        let deadline = Instant::now() + HANDSHAKE_TIME;
        self.conns.insert(
            t,
            Conn {
                stream,
                phase: Phase::Handshake { nonce },
                input: Vec::new(),
                output: auth::hello(&nonce).to_vec(),
                sent: 0,
                waiting: None,
                timer: Some(deadline),
            },
        );
        self.timers.insert((deadline, t));
        self.handshakes.push_back(t);
        self.shaking += 1;
        self.turn(t);
    }

    fn in_handshake(&self, t: usize) -> bool {
        self.conns
            .get(&t)
            .is_some_and(|c| matches!(c.phase, Phase::Handshake { .. }))
    }

    fn set_timer(&mut self, t: usize, when: Option<Instant>) {
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        if c.timer == when {
            return;
        }
        if let Some(old) = c.timer.take() {
            self.timers.remove(&(old, t));
        }
        if let Some(w) = when {
            self.timers.insert((w, t));
        }
        c.timer = when;
    }

    /// Closes connection `t`; the last connection of an owner that had not
    /// said it finished marks it finished with `why`.
    fn close(&mut self, t: usize, why: Gone) {
        let Some(mut c) = self.conns.remove(&t) else {
            return;
        };
        if let Some(old) = c.timer {
            self.timers.remove(&(old, t));
        }
        if let Some(w) = &c.waiting {
            self.store.with(|s| s.unpark(t, &w.keys()));
        }
        match c.phase {
            Phase::Ready { owner } => {
                self.counts.open.fetch_sub(1, SeqCst);
                let left = self.owners.get_mut(&owner).map_or(0, |n| {
                    *n -= 1;
                    *n
                });
                if left == 0 {
                    self.owners.remove(&owner);
                    self.store.with(|s| s.lost(owner, &why.reason()));
                }
            }
            Phase::Handshake { .. } => self.shaking -= 1,
        }
        let _ = self.poll.registry().deregister(&mut c.stream);
    }

    /// Serves connection `t` as far as it can go now.
    fn turn(&mut self, t: usize) {
        if let Turn::Close(why) = self.step(t) {
            self.close(t, why);
        }
    }

    fn step(&mut self, t: usize) -> Turn {
        // reads stop once a read comes back short: the socket was empty
        // then, and epoll (edge-triggered) reports any byte that comes later
        let mut drained = false;
        loop {
            let Some(c) = self.conns.get_mut(&t) else {
                return Turn::Keep;
            };
            if c.sent < c.output.len() {
                match c.stream.write(&c.output[c.sent..]) {
                    Ok(0) => return Turn::Close(Gone::Peer),
                    Ok(n) => {
                        c.sent += n;
                        if matches!(c.phase, Phase::Ready { .. }) {
                            self.set_timer(t, None);
                        }
                    }
                    Err(e) if e.kind() == Io::WouldBlock => {
                        if matches!(c.phase, Phase::Ready { .. }) && c.timer.is_none() {
                            self.set_timer(t, Some(Instant::now() + WRITE_STALL));
                        }
                        return Turn::Keep;
                    }
                    Err(e) if e.kind() == Io::Interrupted => {}
                    Err(_) => return Turn::Close(Gone::Peer),
                }
                continue;
            }
            if !c.output.is_empty() {
                c.output.clear();
                c.sent = 0;
                if c.output.capacity() > CHUNK {
                    c.output.shrink_to(CHUNK);
                }
            }
            if c.waiting.is_some() {
                return Turn::Keep;
            }
            match self.take_message(t) {
                Some(Ok(())) => continue,
                Some(Err(why)) => return Turn::Close(why),
                None => {}
            }
            if drained {
                return Turn::Keep;
            }
            let c = self.conns.get_mut(&t).expect("looked up above");
            match c.stream.read(&mut self.scratch) {
                Ok(0) => return Turn::Close(Gone::Peer),
                Ok(n) => {
                    c.input.extend_from_slice(&self.scratch[..n]);
                    drained = n < self.scratch.len();
                }
                Err(e) if e.kind() == Io::WouldBlock => return Turn::Keep,
                Err(e) if e.kind() == Io::Interrupted => {}
                Err(_) => return Turn::Close(Gone::Peer),
            }
        }
    }

    /// Takes one whole message off `t`'s input and acts on it: Some(Ok)
    /// when it did, Some(Err) when the connection must close, None when
    /// no whole message is there yet.
    fn take_message(&mut self, t: usize) -> Option<std::result::Result<(), Gone>> {
        let c = self.conns.get_mut(&t)?;
        match c.phase {
            Phase::Handshake { nonce } => {
                let proof: &[u8; auth::PROOF_LEN] =
                    c.input.get(..auth::PROOF_LEN)?.try_into().ok()?;
                let Some((owner, client_nonce)) = auth::check_proof(&self.key, &nonce, proof)
                else {
                    self.counts.refused.fetch_add(1, SeqCst);
                    return Some(Err(Gone::Peer));
                };
                c.input.drain(..auth::PROOF_LEN);
                c.output = auth::accept(&self.key, &nonce, &client_nonce, owner).to_vec();
                c.sent = 0;
                c.phase = Phase::Ready {
                    owner: owner as usize,
                };
                self.counts.open.fetch_add(1, SeqCst);
                *self.owners.entry(owner as usize).or_default() += 1;
                self.shaking -= 1;
                self.set_timer(t, None);
                Some(Ok(()))
            }
            Phase::Ready { owner } => {
                let len = match codec::frame_len(c.input.get(..HEAD)?, MAX_FRAME) {
                    Ok(n) => n,
                    // a frame the store will not read cannot be skipped
                    Err(why) => return Some(Err(Gone::Dropped(why))),
                };
                let body = c.input.get(HEAD..HEAD + len)?;
                let decoded = codec::decode_request(body);
                c.input.drain(..HEAD + len);
                if c.input.capacity() > 2 * CHUNK && c.input.len() <= CHUNK {
                    c.input.shrink_to(CHUNK);
                }
                match decoded {
                    Ok(request) => self.serve(t, owner, request),
                    Err(why) => self.answer(t, |out| codec::put_error(out, &why)),
                }
                Some(Ok(()))
            }
        }
    }

    /// Acts on the timers that are due: a handshake too slow, a wait past
    /// its deadline, an answer left unread too long.
    fn expire(&mut self, now: Instant) {
        while let Some(&(when, t)) = self.timers.first() {
            if when > now {
                return;
            }
            self.timers.remove(&(when, t));
            let Some(c) = self.conns.get_mut(&t) else {
                continue;
            };
            c.timer = None;
            match c.phase {
                Phase::Handshake { .. } => {
                    self.counts.refused.fetch_add(1, SeqCst);
                    self.close(t, Gone::Peer);
                }
                Phase::Ready { .. } if c.waiting.is_some() => self.look(t, true),
                Phase::Ready { .. } => {
                    let why = format!("it left an answer unread for {WRITE_STALL:?}");
                    self.close(t, Gone::Dropped(why));
                }
            }
        }
    }
}

/// A connection to a peer that goes quiet fails within about 10 s,
/// whatever the deadlines: keepalive probes find a peer that vanished
/// while nothing was sent, and a limit on unacknowledged bytes one that
/// vanished with an answer on its way (keepalive does not probe then, so
/// a host cut off the network held the hub's exit for its 30 s).
pub(super) fn quiet_peers_fail(s: socket2::SockRef<'_>) {
    let keepalive = socket2::TcpKeepalive::new()
        .with_time(Duration::from_secs(5))
        .with_interval(Duration::from_secs(1))
        .with_retries(5);
    let _ = s.set_tcp_keepalive(&keepalive);
    let _ = s.set_tcp_user_timeout(Some(Duration::from_secs(10)));
}
