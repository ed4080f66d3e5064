//! The process's own events, as the interposer hooks them: its normal exit
//! (`atexit`), a fork (`pthread_atfork`), and the signals that end it
//! (SIGINT, SIGTERM, SIGHUP). With `real` and `exports`, this module holds
//! all of the crate's `unsafe`.
//!
//! - Exit: the functions given to [`at_exit`] run at a normal exit, in the
//!   reverse order of their registration, except in a forked child: the
//!   communicators, connections and stores they tend are the parent's.
//! - Fork: a child is marked ([`forked`]) before it runs any code of its
//!   own; the hooks then leave it alone (it neither uses the parent's
//!   channels nor waits at exit for the parent's peers).
//! - Signals: each handler chains the program's own. One whose default
//!   action ends the process first asks a watcher thread to tell the
//!   peers (a signal handler may not lock, allocate or use sockets: it
//!   writes the signal's number into a pipe and waits for the answer on
//!   another, 1.5 s at most), then restores the default action and raises
//!   the signal again, so the process ends as it would have. One that the
//!   program handles ends the waits in progress
//!   (`rankwise::agreement::stop::interrupt`) before the program's handler
//!   runs, so a Ctrl-C reaches a Python program at once instead of after
//!   the wait's deadline. A signal the program ignores stays ignored. A
//!   program that installs handlers after its first communicator replaces
//!   these (and the peers are then told at its exit instead).

use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, AtomicI32, Ordering};
use std::sync::{Mutex, OnceLock};

static FORKED: AtomicBool = AtomicBool::new(false);

/// Whether this process is a child forked from the one that loaded the
/// interposer's communicators.
pub fn forked() -> bool {
    FORKED.load(Ordering::Relaxed)
}

extern "C" fn in_child() {
    FORKED.store(true, Ordering::Relaxed);
}

/// Marks forked children ([`forked`]); once per process.
pub fn watch_forks() {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        // SAFETY: `in_child` only stores an atomic, which is async-signal
        // safe as pthread_atfork's child handlers must be; libc keeps the
        // pointer to a function that lives as long as the process.
        unsafe { libc::pthread_atfork(None, None, Some(in_child)) };
    });
}

// ---------------------------------------------------------------- exit

fn exits() -> &'static Mutex<Vec<extern "C" fn()>> {
    static E: OnceLock<Mutex<Vec<extern "C" fn()>>> = OnceLock::new();
    E.get_or_init(Default::default)
}

extern "C" fn run_exits() {
    if forked() {
        return;
    }
    let fs: Vec<extern "C" fn()> = exits().lock().unwrap_or_else(|p| p.into_inner()).clone();
    for f in fs.iter().rev() {
        f();
    }
}

/// Runs `f` when the process exits normally, after the functions given
/// later (as `atexit` orders them), and never in a forked child.
pub fn at_exit(f: extern "C" fn()) {
    static ONCE: OnceLock<()> = OnceLock::new();
    exits().lock().unwrap_or_else(|p| p.into_inner()).push(f);
    ONCE.get_or_init(|| {
        // SAFETY: run_exits takes no arguments and does not unwind (the
        // functions it runs lock, send and sleep, and catch what fails);
        // atexit keeps the pointer to a function that lives as long as the
        // process.
        unsafe { libc::atexit(run_exits) };
    });
}

// ---------------------------------------------------------------- signals

/// The signals whose arrival the peers hear of.
pub const SIGNALS: [c_int; 3] = [libc::SIGINT, libc::SIGTERM, libc::SIGHUP];

/// The program's own action for each of [`SIGNALS`], as found when the
/// handlers were installed.
static PREVIOUS: [OnceLock<libc::sigaction>; 3] =
    [OnceLock::new(), OnceLock::new(), OnceLock::new()];
/// The pipes to and from the watcher thread: its ends stay open for the
/// process's life.
static TO_WATCHER: AtomicI32 = AtomicI32::new(-1);
static FROM_WATCHER: AtomicI32 = AtomicI32::new(-1);

/// How long a dying process waits for its peers to be told.
const TELL_MS: c_int = 1500;

fn index_of(sig: c_int) -> Option<usize> {
    SIGNALS.iter().position(|s| *s == sig)
}

extern "C" fn on_signal(sig: c_int, info: *mut libc::siginfo_t, ctx: *mut libc::c_void) {
    let Some(prev) = index_of(sig).and_then(|i| PREVIOUS[i].get()) else {
        return;
    };
    if prev.sa_sigaction == libc::SIG_DFL {
        if !forked() {
            tell_watcher(sig);
        }
        // SAFETY: sigaction and raise are async-signal-safe; `prev` is the
        // default action found at install. The raised signal is blocked
        // while this handler runs and is delivered, with its default
        // action, when it returns.
        unsafe {
            libc::sigaction(sig, prev, std::ptr::null_mut());
            libc::raise(sig);
        }
        return;
    }
    rankwise::agreement::stop::interrupt(sig);
    if prev.sa_flags & libc::SA_SIGINFO != 0 {
        // SAFETY: the program installed this three-argument handler for
        // `sig` (SA_SIGINFO); it is called as the kernel would have called it.
        let f: extern "C" fn(c_int, *mut libc::siginfo_t, *mut libc::c_void) =
            unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig, info, ctx);
    } else {
        // SAFETY: the program installed this one-argument handler for `sig`.
        let f: extern "C" fn(c_int) = unsafe { std::mem::transmute(prev.sa_sigaction) };
        f(sig);
    }
}

/// From the handler: asks the watcher to tell the peers, and waits for
/// its answer (or [`TELL_MS`]). Only write, poll and read: all
/// async-signal-safe.
fn tell_watcher(sig: c_int) {
    let (to, from) = (
        TO_WATCHER.load(Ordering::SeqCst),
        FROM_WATCHER.load(Ordering::SeqCst),
    );
    if to < 0 || from < 0 {
        return;
    }
    let b = sig.to_le_bytes();
    // SAFETY: a write of 4 bytes from a local buffer to an open pipe.
    if unsafe { libc::write(to, b.as_ptr().cast(), b.len()) } != b.len() as isize {
        return;
    }
    let mut pfd = libc::pollfd {
        fd: from,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, owned here.
    if unsafe { libc::poll(&mut pfd, 1, TELL_MS) } > 0 {
        let mut ack = [0u8; 4];
        // SAFETY: a read of at most 4 bytes into a local buffer.
        unsafe { libc::read(from, ack.as_mut_ptr().cast(), ack.len()) };
    }
}

/// Blocks [`SIGNALS`] on this thread; the mask it had.
fn block_signals() -> libc::sigset_t {
    // SAFETY: all-zero sigset_t values are valid, and sigemptyset,
    // sigaddset and pthread_sigmask only write the sets they are given.
    unsafe {
        let (mut set, mut old): (libc::sigset_t, libc::sigset_t) =
            (std::mem::zeroed(), std::mem::zeroed());
        libc::sigemptyset(&mut set);
        for s in SIGNALS {
            libc::sigaddset(&mut set, s);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, &mut old);
        old
    }
}

/// Gives this thread back the mask `old`.
fn restore_signals(old: libc::sigset_t) {
    // SAFETY: a mask pthread_sigmask returned on this thread.
    unsafe { libc::pthread_sigmask(libc::SIG_SETMASK, &old, std::ptr::null_mut()) };
}

/// A pipe's (read, write) ends, close-on-exec.
fn pipe() -> Option<(c_int, c_int)> {
    let mut fds = [-1; 2];
    // SAFETY: pipe2 writes two descriptors into the array it is given.
    (unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } == 0).then_some((fds[0], fds[1]))
}

/// Installs the handlers of [`SIGNALS`] (once per process): `tell(signal)`
/// runs on the watcher thread when one arrives whose default action ends
/// the process.
pub fn catch_signals(tell: fn(c_int)) {
    static ONCE: OnceLock<()> = OnceLock::new();
    ONCE.get_or_init(|| {
        let (Some((req_r, req_w)), Some((ack_r, ack_w))) = (pipe(), pipe()) else {
            return;
        };
        // the watcher is born with the signals blocked, so none is ever
        // handled on it (a handler there would wait for itself)
        let blocked = block_signals();
        let watcher = std::thread::Builder::new()
            .name("rankwise-signals".into())
            .spawn(move || {
                loop {
                    let mut b = [0u8; 4];
                    // SAFETY: a read of 4 bytes into a local buffer.
                    let n = unsafe { libc::read(req_r, b.as_mut_ptr().cast(), b.len()) };
                    if n != 4 {
                        if n < 0
                            && std::io::Error::last_os_error().kind()
                                == std::io::ErrorKind::Interrupted
                        {
                            continue;
                        }
                        return;
                    }
                    tell(c_int::from_le_bytes(b));
                    // SAFETY: a write of 4 bytes from a local buffer.
                    unsafe { libc::write(ack_w, b.as_ptr().cast(), b.len()) };
                }
            });
        restore_signals(blocked);
        if watcher.is_err() {
            return;
        }
        TO_WATCHER.store(req_w, Ordering::SeqCst);
        FROM_WATCHER.store(ack_r, Ordering::SeqCst);
        for (i, &sig) in SIGNALS.iter().enumerate() {
            // SAFETY: an all-zero sigaction is a valid value of the type.
            let mut prev: libc::sigaction = unsafe { std::mem::zeroed() };
            // SAFETY: with a NULL new action, sigaction only reads the
            // current one into `prev`.
            if unsafe { libc::sigaction(sig, std::ptr::null(), &mut prev) } != 0
                || prev.sa_sigaction == libc::SIG_IGN
            {
                continue;
            }
            let prev = PREVIOUS[i].get_or_init(|| prev);
            // SAFETY: a zeroed sigaction is valid; the new action calls
            // on_signal with the program's own mask and flags (SA_SIGINFO
            // added), and on_signal reads PREVIOUS, set above before the
            // handler can run.
            unsafe {
                let mut act: libc::sigaction = std::mem::zeroed();
                act.sa_sigaction = on_signal as *const () as usize;
                act.sa_mask = prev.sa_mask;
                act.sa_flags = if prev.sa_sigaction == libc::SIG_DFL {
                    libc::SA_SIGINFO | libc::SA_RESTART
                } else {
                    (prev.sa_flags | libc::SA_SIGINFO) & !libc::SA_RESETHAND
                };
                libc::sigaction(sig, &act, std::ptr::null_mut());
            }
        }
    });
}
