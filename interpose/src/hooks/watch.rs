//! Watch mode (`RANKWISE_CHECK=watch`) around NCCL: every call goes to
//! NCCL at once, after its own checks; each launch is folded into its
//! communicator's `rankwise::agreement::watch::Track` (no wait, no
//! request, nothing allocated once warm), and a thread per communicator
//! runs the background rounds every [`INTERVAL`]. When the judge finds a
//! contract violation, every rank says it (the error line, the journal)
//! and fails the communicator: every later call on it is refused with the
//! reason, `ncclCommGetAsyncError` reports it (a framework's watchdog,
//! PyTorch's among them, aborts the communicator on that), and its peers
//! are told. A communicator being destroyed, or a process exiting, first
//! finishes the rounds under way, so the last calls of a program are
//! compared too.
//!
//! Where the process has the CUDA driver, each launch (collectives, or
//! Sends and Recvs alone) is also marked on its stream just before NCCL
//! enqueues it and just after
//! (`rankwise::agreement::watch::flight`): the rounds then carry how far
//! each rank's stream has run, and a launch one rank's stream never
//! reaches, or that no rank finishes, is named once it has lasted
//! `RANKWISE_TIMEOUT` (a hang, failing the communicator as a mismatch
//! does). A launch enqueued while its stream is captured into a CUDA graph
//! is not marked.

use super::comms::{Agreement, Comm, CommState, Shared, lock};
use super::settings::{Checks, say, settings};
use super::{agreement, errors, setup};
use crate::driver::{Cuda, CudaEvent};
use rankwise::agreement::tier;
use rankwise::agreement::watch::flight::{Flight, Flights};
use rankwise::agreement::watch::{Ask, Summary, Track, Watcher};
use rankwise::core::{Error, ErrorKind, Launch};
use rankwise::transport::store::SideChannel;
use std::cell::RefCell;
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, Sender};
use std::time::{Duration, Instant};

/// Time between two rounds.
pub const INTERVAL: Duration = Duration::from_millis(100);

/// How long a communicator's end waits for its last rounds.
const LAST_ROUNDS: Duration = Duration::from_secs(5);

/// A communicator's watch: its track, its launches in flight, and how its
/// thread is told to finish.
pub struct Watching {
    /// strict mode's completion check: the launches were agreed before
    /// NCCL got them, and the rounds look for launches that do not finish
    pub completion_only: bool,
    /// the communicator's name in the store
    key: String,
    pub track: Track,
    closing: Arc<AtomicBool>,
    done: Option<Receiver<()>>,
    /// the driver's events (None: the process has no CUDA driver)
    cuda: Option<Cuda>,
    flights: Flights<CudaEvent>,
    /// the stream of the open group's first call here
    stream: Option<usize>,
    /// the watch thread has entered the events' context
    entered: bool,
}

impl Drop for Watching {
    /// The communicator is gone: its events go back to the driver.
    fn drop(&mut self) {
        if let Some(cuda) = self.cuda.as_mut() {
            self.flights.clear(cuda);
        }
    }
}

thread_local! {
    /// Communicators whose launch in this thread's group was marked at its
    /// start and whose end NCCL's group end has yet to return from
    /// ([`land`]).
    static LANDING: RefCell<Vec<Shared>> = const { RefCell::new(Vec::new()) };
}

/// Folds launch `l` into its communicator's watch, about to go to NCCL on
/// `stream` (None: the stream of the group's first call), and marks its
/// start (the hot path). True when it was marked: its end is to be marked
/// once NCCL returns ([`land_one`]; a group's, [`fold_in_group`]).
pub fn fold(s: &mut CommState, l: &Launch, stream: Option<usize>) -> bool {
    let captured = s.captured;
    let Some(w) = s.watch.as_mut() else {
        return false;
    };
    let stream = stream.or(w.stream.take());
    let (Some(mark), Some(cuda), Some(stream)) = (w.track.fold(l), w.cuda.as_mut(), stream) else {
        return false;
    };
    !captured && w.flights.depart(cuda, mark, stream)
}

/// [`fold`] for a group's launch `l` on `c`: when it was marked, [`land`]
/// marks its end once NCCL's group end returns.
pub fn fold_in_group(c: &Shared, s: &mut CommState, l: &Launch) {
    if fold(s, l, None) {
        LANDING.with(|landing| landing.borrow_mut().push(c.clone()));
    }
}

/// NCCL returned from the call that enqueued `c`'s marked launch: marks
/// its end.
pub fn land_one(c: &Comm) {
    if let Some(w) = lock(c).watch.as_mut()
        && let Some(cuda) = w.cuda.as_mut()
    {
        w.flights.land(cuda);
    }
}

/// A call of an open group on `s`'s communicator was made on `stream`.
pub fn grouped_call(s: &mut CommState, stream: usize) {
    if let Some(w) = s.watch.as_mut() {
        w.stream.get_or_insert(stream);
    }
}

/// The open group was refused: nothing of it reaches NCCL.
pub fn grouped_call_refused(s: &mut CommState) {
    if let Some(w) = s.watch.as_mut() {
        w.stream = None;
    }
}

/// NCCL's group end returned: marks the ends of the group's launches
/// this thread marked at their start.
pub fn land() {
    LANDING.with(|l| {
        // the vector stays for the next group: nothing allocated once warm
        for c in l.borrow_mut().drain(..) {
            land_one(&c);
        }
    });
}

/// Where `w`'s oldest unfinished launch is (the watch thread, each round).
fn flight(w: &mut Watching) -> Flight {
    let Some(cuda) = w.cuda.as_mut() else {
        return Flight::Unknown;
    };
    if !w.entered {
        w.entered = cuda.enter();
        if !w.entered {
            return Flight::Unknown;
        }
    }
    w.flights.poll(cuda, Instant::now())
}

/// The watch of rank `rank` of `nranks` in mode `checks`, with its thread
/// started once the communicator is registered ([`start`]): watch mode's
/// always, strict mode's (its completion check) where the process has the
/// CUDA driver, whose events alone can tell a launch that does not finish.
pub fn new(rank: usize, nranks: usize, checks: Checks, key: &str) -> Option<Box<Watching>> {
    let cuda = Cuda::new();
    let completion_only = match checks {
        Checks::Watch => false,
        Checks::Full if cuda.is_some() => true,
        _ => return None,
    };
    Some(Box::new(Watching {
        completion_only,
        key: key.to_string(),
        track: Track::new(rank, nranks),
        closing: Arc::new(AtomicBool::new(false)),
        done: None,
        cuda,
        flights: Flights::default(),
        stream: None,
        entered: false,
    }))
}

/// Starts `c`'s rounds on a thread of its own.
pub fn start(c: &Shared) {
    let (tx, rx) = mpsc::channel();
    let closing = {
        let mut s = lock(c);
        let Some(w) = s.watch.as_mut() else { return };
        w.done = Some(rx);
        w.closing.clone()
    };
    let comm = c.clone();
    let spawned = std::thread::Builder::new()
        .name("rankwise-watch".into())
        .spawn(move || run(&comm, &closing, tx));
    if spawned.is_err() {
        say(&format!(
            "rankwise: rank {} of comm {:#x}: no thread for watch mode: this communicator gets the local checks only",
            c.rank, c.handle
        ));
    }
}

/// Finishes `c`'s rounds under way (it is being destroyed, or the process
/// is exiting), for at most [`LAST_ROUNDS`].
pub fn finish(c: &Comm) {
    let done = {
        let mut s = lock(c);
        let Some(w) = s.watch.as_mut() else { return };
        w.closing.store(true, Ordering::SeqCst);
        // strict mode agreed every launch: no last calls to compare
        w.done.take().filter(|_| !w.completion_only)
    };
    if let Some(done) = done {
        let _ = done.recv_timeout(LAST_ROUNDS);
    }
}

/// Finishes the rounds of every communicator still registered, at once
/// (the process is exiting normally).
pub fn finish_all() {
    let all = super::comms::registered();
    for c in &all {
        if let Some(w) = lock(c).watch.as_mut() {
            w.closing.store(true, Ordering::SeqCst);
        }
    }
    for c in &all {
        finish(c);
    }
}

/// The rounds of `c`, until it ends, a rank leaves or a failure is found.
/// (`done` is dropped when it returns: that tells [`finish`].)
fn run(c: &Comm, closing: &AtomicBool, done: Sender<()>) {
    let _done = done;
    let Some(mut watcher) = watcher_of(c, closing) else {
        return;
    };
    let completion = lock(c).watch.as_ref().is_some_and(|w| w.completion_only);
    let mut ask = Ask::default();
    // rounds in a row that asked for nothing, once closing
    let mut quiet = 0;
    loop {
        if !closing.load(Ordering::SeqCst) {
            let until = Instant::now() + INTERVAL;
            while Instant::now() < until {
                if c.stop.raised().is_some() || closing.load(Ordering::SeqCst) {
                    break;
                }
                std::thread::sleep(Duration::from_millis(5));
            }
        }
        if c.stop.raised().is_some() || (completion && closing.load(Ordering::SeqCst)) {
            return;
        }
        let summary = {
            let mut s = lock(c);
            match s.watch.as_mut() {
                Some(w) => Summary {
                    flight: flight(w),
                    closing: closing.load(Ordering::SeqCst),
                    ..w.track.summary(&ask)
                },
                None => return,
            }
        };
        let deadline = Instant::now() + settings().timeout;
        let verdict = match watcher.round(&summary, deadline) {
            Ok(v) => v,
            Err(e) => {
                // a peer that left ends the watch (its leaving is said
                // where it matters); anything else is said in the journal
                if e.kind != ErrorKind::RemoteError {
                    lock(c).tracer.init_info(&format!(
                        "rankwise: comm {:#x} rank {}: watch mode stopped: {}",
                        c.handle, c.rank, e.message
                    ));
                }
                return;
            }
        };
        if let Some((what, sides)) = verdict.failure {
            failed(c, &what, &sides, verdict.hang);
            return;
        }
        ask = verdict.ask;
        if closing.load(Ordering::SeqCst) {
            quiet = if ask == Ask::default() { quiet + 1 } else { 0 };
            if quiet >= 2 {
                return;
            }
        }
    }
}

/// The side channel of `c`, once its set-up is done (None: it has none,
/// or the communicator ended first). Watch mode finishes the set-up here;
/// strict mode's rounds open a connection of their own once the set-up
/// has one (they never take the agreement out: a launch that found it
/// taken would take this thread for another thread's call).
fn link_of(c: &Comm, closing: &AtomicBool) -> Option<(Arc<dyn SideChannel>, String, Vec<usize>)> {
    let (completion, key) = {
        let s = lock(c);
        let w = s.watch.as_ref()?;
        (w.completion_only, w.key.clone())
    };
    if completion {
        // strict mode: a connection of the rounds' own, so that a round
        // waiting for its peers holds up neither a launch's agreement nor
        // a leaving rank's word to its peers
        loop {
            if let Some(exit) = c.exit.get() {
                let chan = exit.channel.open(exit.owner).ok()?;
                let owners = setup::owners(&key, c.nranks);
                return Some((chan, key, owners));
            }
            if c.stop.raised().is_some() || closing.load(Ordering::SeqCst) {
                return None;
            }
            std::thread::sleep(Duration::from_millis(5));
        }
    }
    loop {
        let mut s = lock(c);
        match &s.agreement {
            Agreement::Ready(p) => {
                let l = p.link()?;
                return Some((l.chan.clone(), l.key.clone(), l.owners.clone()));
            }
            Agreement::Setting(_) => {
                let a = std::mem::replace(&mut s.agreement, Agreement::Out);
                drop(s);
                let ready = setup::ready(c, a);
                let mut s = lock(c);
                match ready {
                    Ok((peers, line)) => {
                        if let Some(line) = line {
                            s.tracer.init_info(&line);
                        }
                        s.agreement = Agreement::Ready(peers);
                    }
                    Err(_) => {
                        s.agreement = Agreement::Ready(rankwise::agreement::Peers::new(
                            c.rank, c.nranks, None,
                        ));
                        return None;
                    }
                }
                continue;
            }
            _ => {}
        }
        drop(s);
        if c.stop.raised().is_some() || closing.load(Ordering::SeqCst) {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// The watcher of `c` over its side channel, once its set-up is done
/// (None: it has none).
fn watcher_of(c: &Comm, closing: &AtomicBool) -> Option<Watcher> {
    let watcher = link_of(c, closing).map(|(chan, key, owners)| {
        let dir = settings()
            .shm_dir
            .clone()
            .unwrap_or_else(|| "/dev/shm".into());
        let lanes = settings().shm.then(|| PathBuf::from(&dir));
        let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
        Watcher::with_hosts(
            chan,
            key,
            owners,
            c.rank,
            tier::identity(std::path::Path::new(&dir)),
            lanes.as_deref(),
            deadline,
        )
        .map(|w| w.stall_after(settings().timeout))
    });
    let s = lock(c);
    match watcher? {
        Ok(w) => {
            let hosts = w.hosts();
            s.tracer.init_info(&format!(
                "rankwise: comm {:#x} rank {} watches with its peers: {} hosts, this one's ranks {:?}{}",
                c.handle,
                c.rank,
                hosts.len(),
                hosts.iter().find(|h| h.contains(&c.rank)).map_or(&[][..], |h| &h[..]),
                if w.on_lane() { " through shared memory" } else { "" }
            ));
            Some(w)
        }
        Err(e) => {
            s.tracer.init_info(&format!(
                "rankwise: comm {:#x} rank {}: watch mode could not start: {}",
                c.handle, c.rank, e.message
            ));
            None
        }
    }
}

/// The judge found a contract violation or a hang: this rank says it, and
/// the communicator fails.
fn failed(c: &Comm, what: &str, sides: &str, hang: bool) {
    let kind = if hang {
        ErrorKind::Timeout
    } else {
        ErrorKind::Mismatch
    };
    let mut s = lock(c);
    // strict mode's completion check speaks as strict mode does
    let watch = s.watch.as_ref().is_some_and(|w| !w.completion_only);
    let e = Error::new(
        kind,
        format!("{}{what}", if watch { "watch: " } else { "" }),
    );
    let e = agreement::fail(c, &mut s, e);
    let detail = (!sides.is_empty()).then_some(sides);
    errors::report(c, &mut s, &e, detail);
}
