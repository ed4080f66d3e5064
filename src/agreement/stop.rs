//! Ending a communicator's waits from outside them. A wait for other ranks
//! can be ended by its own communicator ([`Stop::raise`]: the rank aborted,
//! destroyed or revoked it from another thread, or its process is exiting)
//! or by the process ([`interrupt`]: a signal arrived that the program
//! handles, so Ctrl-C is not held back until the wait's deadline).
//!
//! Every wait looks at its [`Watch`]: the lane's waits each time they tick,
//! the store's between short slices of a wait that runs on a helper thread
//! ([`detached`]). The store answers a request only when it is settled, so
//! a request cannot be cut into slices on the same connection without
//! losing a post the store has already counted as read; instead the
//! request waits on a helper, and the rank walks away from it the moment
//! its stop is raised. The helper finishes on its own (at the request's
//! deadline at the latest) and its answer is dropped.
//!
//! A stop also counts the store requests of its communicator in flight
//! ([`Stop::busy`]): a rank that leaves while one is in flight cannot use
//! that connection (the request holds it), and says so on another.

use crate::core::{Error, ErrorKind, Result};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU64, AtomicUsize, Ordering};
use std::sync::mpsc::{Sender, channel};
use std::sync::{Arc, Condvar, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// How often a rank waiting for a helper looks at its stop.
const LOOK: Duration = Duration::from_millis(2);
/// How long a rank (and an idle helper) yields its core before it sleeps:
/// a launch's request is usually answered, and the next one handed over,
/// within this, and a thread woken from sleep costs more than the wait.
const YIELD: Duration = Duration::from_micros(50);

/// Signals the process has received that end waits, and the latest one.
static INTERRUPTS: AtomicU64 = AtomicU64::new(0);
static LAST_SIGNAL: AtomicI32 = AtomicI32::new(0);

/// The process received `signal` and the program handles it: every wait in
/// progress ends, naming it; waits that start later are not affected. Only
/// atomic stores: safe in a signal handler.
pub fn interrupt(signal: i32) {
    LAST_SIGNAL.store(signal, Ordering::SeqCst);
    INTERRUPTS.fetch_add(1, Ordering::SeqCst);
}

/// `SIGINT`, or `signal 40`.
pub fn signal_name(signal: i32) -> String {
    let name = match signal {
        libc::SIGINT => "SIGINT",
        libc::SIGTERM => "SIGTERM",
        libc::SIGHUP => "SIGHUP",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => return format!("signal {signal}"),
    };
    name.to_string()
}

#[derive(Default)]
struct Inner {
    raised: AtomicBool,
    why: OnceLock<String>,
    in_flight: AtomicUsize,
    /// the exchanges a request in flight waits on, by request
    waiting: Mutex<Vec<(u64, Vec<Waiting>)>>,
    requests: AtomicU64,
}

/// An exchange of the store a request in flight has posted to and waits
/// on: a rank that leaves meanwhile replaces its post there with a notice,
/// so a peer that comes later does not find the post and go on alone.
#[derive(Debug, Clone, PartialEq)]
pub struct Waiting {
    pub key: String,
    pub owners: Vec<usize>,
    pub party: usize,
}

/// One communicator's stop, shared by every thread that waits on it and
/// every thread that may end those waits.
#[derive(Clone, Default)]
pub struct Stop(Arc<Inner>);

impl Stop {
    pub fn new() -> Stop {
        Stop::default()
    }

    /// Ends every wait of this communicator, now and later, with `why`
    /// (the first reason given stays).
    pub fn raise(&self, why: impl Into<String>) {
        let _ = self.0.why.set(why.into());
        self.0.raised.store(true, Ordering::SeqCst);
    }

    /// Why this communicator's waits end, once raised.
    pub fn raised(&self) -> Option<&str> {
        if !self.0.raised.load(Ordering::SeqCst) {
            return None;
        }
        self.0.why.get().map(String::as_str)
    }

    /// A wait begins: what it looks at as it goes.
    pub fn watch(&self) -> Watch {
        Watch {
            stop: self.clone(),
            interrupts: INTERRUPTS.load(Ordering::SeqCst),
        }
    }

    /// Store requests of this communicator in flight now (their connection
    /// is taken until they end).
    pub fn busy(&self) -> usize {
        self.0.in_flight.load(Ordering::SeqCst)
    }

    /// Notes the exchanges a request waits on, until the guard drops.
    pub fn hold(&self, waiting: Vec<Waiting>) -> Held {
        let id = self.0.requests.fetch_add(1, Ordering::Relaxed);
        self.0
            .waiting
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .push((id, waiting));
        Held(self.clone(), id)
    }

    /// The exchanges requests in flight wait on now.
    pub fn waiting(&self) -> Vec<Waiting> {
        let w = self.0.waiting.lock().unwrap_or_else(|p| p.into_inner());
        w.iter().flat_map(|(_, ws)| ws.iter().cloned()).collect()
    }

    /// Counts one request in flight until the guard drops; refused once
    /// the stop is raised. The count is made before the stop is read, and
    /// [`Stop::raise`] sets the stop before the leaving rank reads the
    /// count: so either the request sees the stop, or the leaving rank sees
    /// the request.
    pub fn enter(&self, watch: &Watch) -> Result<InFlight> {
        self.0.in_flight.fetch_add(1, Ordering::SeqCst);
        let guard = InFlight(self.clone());
        match watch.stopped() {
            Some(e) => Err(e),
            None => Ok(guard),
        }
    }
}

/// One store request in flight ([`Stop::enter`]).
pub struct InFlight(Stop);

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.0.in_flight.fetch_sub(1, Ordering::SeqCst);
    }
}

/// The exchanges one request waits on ([`Stop::hold`]).
pub struct Held(Stop, u64);

impl Drop for Held {
    fn drop(&mut self) {
        let mut w = self.0.0.waiting.lock().unwrap_or_else(|p| p.into_inner());
        w.retain(|(id, _)| *id != self.1);
    }
}

/// What one wait looks at: its communicator's stop, and the signals that
/// arrived since it began.
#[derive(Clone)]
pub struct Watch {
    stop: Stop,
    interrupts: u64,
}

impl Watch {
    /// A watch nothing stops but a signal (waits of no communicator).
    pub fn signals_only() -> Watch {
        Stop::new().watch()
    }

    /// Why the wait must end now, if it must.
    pub fn stopped(&self) -> Option<Error> {
        if let Some(why) = self.stop.raised() {
            return Some(Error::new(
                ErrorKind::CommFailed,
                format!("the wait for the other ranks ended: {why}"),
            ));
        }
        if INTERRUPTS.load(Ordering::SeqCst) != self.interrupts {
            let sig = signal_name(LAST_SIGNAL.load(Ordering::SeqCst));
            return Some(Error::new(
                ErrorKind::CommFailed,
                format!("the wait for the other ranks ended: the process received {sig}"),
            ));
        }
        None
    }
}

// ---------------------------------------------------------------- helpers

type Job = Box<dyn FnOnce() -> Box<dyn FnOnce() + Send> + Send>;

/// Helper threads waiting for work.
fn idle() -> &'static Mutex<Vec<Sender<Job>>> {
    static IDLE: OnceLock<Mutex<Vec<Sender<Job>>>> = OnceLock::new();
    IDLE.get_or_init(Default::default)
}

/// A new helper: it runs each job, puts itself back among the idle ones,
/// then hands the job's answer over (so the rank it answers finds it idle
/// for its next request).
fn spawn_helper() -> Option<Sender<Job>> {
    let (tx, rx) = channel::<Job>();
    let me = tx.clone();
    std::thread::Builder::new()
        .name("rankwise-wait".into())
        .spawn(move || {
            while let Some(job) = next(&rx) {
                let deliver = job();
                idle()
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .push(me.clone());
                deliver();
            }
        })
        .ok()?;
    Some(tx)
}

/// A helper's next job: yielding for [`YIELD`] first, then asleep.
fn next(rx: &std::sync::mpsc::Receiver<Job>) -> Option<Job> {
    let start = Instant::now();
    while start.elapsed() < YIELD {
        if let Ok(job) = rx.try_recv() {
            return Some(job);
        }
        std::thread::yield_now();
    }
    rx.recv().ok()
}

/// Runs `job` on an idle helper (one is started when none is idle); gives
/// it back when no helper can run it.
fn hand(job: Job) -> std::result::Result<(), Job> {
    let spare = idle().lock().unwrap_or_else(|p| p.into_inner()).pop();
    let Some(tx) = spare.or_else(spawn_helper) else {
        return Err(job);
    };
    tx.send(job).map_err(|e| e.0)
}

struct Slot<T> {
    answer: Mutex<Option<T>>,
    ready: Condvar,
    /// set once the answer is in
    done: AtomicBool,
}

/// Runs `job` (a request that may wait in the store) on a helper thread and
/// waits for its answer while looking at `watch`: the answer, or the
/// watch's error as soon as it is stopped (the helper then finishes alone
/// and its answer is dropped). Where no thread can be started, `job` runs
/// here, unstoppable.
pub fn detached<T: Send + 'static>(
    watch: &Watch,
    job: impl FnOnce() -> T + Send + 'static,
) -> Result<T> {
    let slot = Arc::new(Slot {
        answer: Mutex::new(None),
        ready: Condvar::new(),
        done: AtomicBool::new(false),
    });
    let theirs = slot.clone();
    let run: Job = Box::new(move || {
        let answer = job();
        Box::new(move || {
            *theirs.answer.lock().unwrap_or_else(|p| p.into_inner()) = Some(answer);
            theirs.done.store(true, Ordering::Release);
            theirs.ready.notify_one();
        })
    });
    if let Err(run) = hand(run) {
        run()();
    }
    let start = Instant::now();
    while !slot.done.load(Ordering::Acquire) && start.elapsed() < YIELD {
        std::thread::yield_now();
    }
    let mut answer = slot.answer.lock().unwrap_or_else(|p| p.into_inner());
    loop {
        if let Some(a) = answer.take() {
            return Ok(a);
        }
        if let Some(e) = watch.stopped() {
            return Err(e);
        }
        answer = slot
            .ready
            .wait_timeout(answer, LOOK)
            .unwrap_or_else(|p| p.into_inner())
            .0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_raised_stop_ends_a_detached_wait_at_once_and_keeps_its_first_reason() {
        let stop = Stop::new();
        let watch = stop.watch();
        let raiser = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(50));
            raiser.raise("rank 0 called ncclCommAbort");
            raiser.raise("a later reason");
        });
        let start = Instant::now();
        let r = detached(&watch, || {
            std::thread::sleep(Duration::from_secs(2));
            7
        });
        let took = start.elapsed();
        t.join().unwrap();
        let e = r.unwrap_err();
        assert_eq!(e.kind, ErrorKind::CommFailed);
        assert_eq!(
            e.message,
            "the wait for the other ranks ended: rank 0 called ncclCommAbort"
        );
        assert!(took < Duration::from_millis(500), "took {took:?}");
        assert!(
            stop.enter(&stop.watch()).is_err(),
            "no request after a stop"
        );
    }

    #[test]
    fn a_detached_wait_gives_its_answer_and_counts_itself_in_flight() {
        let stop = Stop::new();
        let watch = stop.watch();
        let guard = stop.enter(&watch).unwrap();
        assert_eq!(stop.busy(), 1);
        assert_eq!(detached(&watch, || 40 + 2).unwrap(), 42);
        drop(guard);
        assert_eq!(stop.busy(), 0);
    }
}
