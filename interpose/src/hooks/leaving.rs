//! How a rank leaves a communicator, and how its peers hear of it: every
//! way a communicator or its process ends tells the store, whose waiting
//! ranks then fail at once naming this rank and why, instead of waiting
//! out their deadline; and ends this rank's own waits on it.
//!
//! - `ncclCommDestroy`, `ncclCommAbort` (from any thread: the waiting call
//!   returns at once, naming the abort), `ncclCommRevoke`;
//! - a failure found across ranks (`agreement::fail`);
//! - the process's normal exit with communicators it never destroyed, and
//!   a signal whose default action ends it (`crate::process`);
//! - `RANKWISE_ABORT=1` ending the process after an error line.
//!
//! A forked child leaves nothing: the communicators are its parent's.

use super::comms::{Comm, comm, lock, unregister, unregister_all};
use super::setup::{Channel, Exit};
use crate::process;
use rankwise::agreement::give_notice;
use rankwise::agreement::stop::{Waiting, signal_name};
use rankwise::core::{Error, ErrorKind};
use rankwise::transport::store::SideChannel;
use std::sync::OnceLock;
use std::sync::atomic::{Ordering, fence};
use std::sync::mpsc::{self, Receiver};
use std::time::{Duration, Instant};

/// How long a process that is ending waits for its peers to be told.
const TELL_AT_EXIT: Duration = Duration::from_secs(1);

/// Ends `comm`'s waits (they return `stopped`) and tells its peers this
/// rank left, with `why` (None: its program ended normally, as at a
/// destroy). Where a request in flight holds the channel's connection,
/// another connection tells them: the answer to wait for, if any.
pub fn leave(comm: &Comm, why: Option<&str>, stopped: &str) -> Option<Receiver<()>> {
    comm.stop.raise(stopped);
    // pairs with the set-up's fence: either it sees the stop, or this
    // sees its exit (and a set-up not yet there tells the store itself)
    fence(Ordering::SeqCst);
    let exit = comm.exit.get()?;
    tell(comm, exit, why)
}

/// Tells the store rank `exit.owner` left, and replaces its posts in the
/// exchanges a request in flight waits on with a notice: through the
/// link's own connection when it is free, else through another one (the
/// answer to wait for).
fn tell(comm: &Comm, exit: &Exit, why: Option<&str>) -> Option<Receiver<()>> {
    let notice = why.map_or_else(|| format!("rank {} left", comm.rank), str::to_string);
    let say =
        move |chan: &dyn SideChannel, owner: usize, why: Option<&str>, waiting: &[Waiting]| {
            let _ = chan.finish(owner, why);
            let _ = give_notice(chan, waiting, &notice);
        };
    let waiting = comm.stop.waiting();
    if comm.stop.busy() == 0 || matches!(exit.channel, Channel::Here(_)) {
        say(&*exit.chan, exit.owner, why, &waiting);
        return None;
    }
    let (channel, owner, why) = (exit.channel.clone(), exit.owner, why.map(str::to_string));
    let (tx, rx) = mpsc::channel();
    std::thread::Builder::new()
        .name("rankwise-leave".into())
        .spawn(move || {
            if let Ok(chan) = channel.open(owner) {
                say(&*chan, owner, why.as_deref(), &waiting);
            }
            let _ = tx.send(());
        })
        .ok()?;
    Some(rx)
}

/// `ncclCommDestroy` / `ncclCommAbort` of `handle`, before NCCL's: the
/// rank leaves; a call of another thread waiting on it returns at once.
pub fn gone(handle: usize, abort: bool) {
    let Some(c) = unregister(handle) else {
        return;
    };
    if !abort {
        // watch mode: the last calls are compared before the rank leaves
        super::watch::finish(&c);
    }
    let failed = lock(&c).failed.clone();
    let rank = c.rank;
    let (why, what) = match abort {
        true => (
            Some(format!("rank {rank} called ncclCommAbort")),
            "ncclCommAbort",
        ),
        false => (None, "ncclCommDestroy"),
    };
    let why = failed.map(|e| super::errors::words(&e)).or(why);
    let stopped = format!("{what} was called on this communicator");
    let _ = leave(&c, why.as_deref(), &stopped);
}

/// `ncclCommRevoke` of `handle`: its peers hear of it, its waits end, and
/// the checker refuses its collectives from now on (NCCL allows only
/// destroy, split and shrink after a revoke).
pub fn revoked(handle: usize) {
    let Some(c) = comm(handle) else {
        return;
    };
    let why = format!("rank {} revoked the communicator (ncclCommRevoke)", c.rank);
    {
        let mut s = lock(&c);
        s.failed
            .get_or_insert_with(|| Error::new(ErrorKind::CommFailed, why.clone()));
    }
    let _ = leave(
        &c,
        Some(&why),
        "ncclCommRevoke was called on this communicator",
    );
}

/// Every communicator this process still has leaves with `why(rank)`,
/// its peers told within [`TELL_AT_EXIT`] (the process is ending).
fn leave_all(why: impl Fn(usize) -> String, stopped: &str) {
    let all = unregister_all();
    let answers: Vec<Receiver<()>> = all
        .iter()
        .filter_map(|c| leave(c, Some(&why(c.rank)), stopped))
        .collect();
    let deadline = Instant::now() + TELL_AT_EXIT;
    for a in answers {
        let _ = a.recv_timeout(deadline.saturating_duration_since(Instant::now()));
    }
}

/// The process exits normally: communicators it did not destroy leave.
pub fn forget_all() {
    if process::forked() {
        return;
    }
    super::watch::finish_all();
    leave_all(
        |r| format!("rank {r}'s process exited without destroying the communicator"),
        "the process is exiting",
    );
}

extern "C" fn at_exit() {
    forget_all();
}

/// A signal whose default action ends the process arrived (on the
/// signals' watcher thread).
fn ended_by(sig: i32) {
    let name = signal_name(sig);
    leave_all(
        |r| format!("rank {r}'s process was ended by {name}"),
        &format!("the process received {name}"),
    );
}

/// `RANKWISE_ABORT=1`: the process aborts after `line`; its peers hear why.
pub fn aborting(rank: usize, line: &str) {
    leave_all(
        |_| {
            format!(
                "rank {rank} aborted its process on a rankwise error (RANKWISE_ABORT=1): {line}"
            )
        },
        "the process is aborting",
    );
}

/// Hooks the process's exit, forks and ending signals (once, at its first
/// communicator with a side channel).
pub fn watch_process() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        process::watch_forks();
        process::at_exit(at_exit);
        process::catch_signals(ended_by);
    });
}
