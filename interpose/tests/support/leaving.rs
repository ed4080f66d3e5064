//! The rank programs of the liveness tests: ranks that abort from another
//! thread, exit, get a signal, refuse a call or fork while their peers
//! wait for them. Each checks what it can see itself and prints what the
//! test reads.
#![allow(dead_code)]

use crate::ranks::*;
use std::ffi::c_int;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

fn ms(d: Duration) -> u128 {
    d.as_millis()
}

/// Every rank makes one AllReduce; then the last rank comes to the second
/// only after 1.5 s, while on every other rank a second thread aborts the
/// communicator 300 ms into the wait: the abort returns at once, and so
/// does the waiting call, naming it. The last rank then fails at once.
pub fn abort(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    if k.rank == k.n - 1 {
        std::thread::sleep(Duration::from_millis(1500));
        let t = Instant::now();
        let (rc, _) = k.all_reduce_i32(&[1; 4]);
        println!(
            "late rank: rc {rc} after {} ms: {}",
            ms(t.elapsed()),
            k.last_error()
        );
        return Ok(());
    }
    let (abort, comm) = (k.nccl.abort, k.comm as usize);
    let watchdog = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let at = Instant::now();
        // SAFETY: a live communicator, aborted once.
        let rc = unsafe { abort(comm as Comm) };
        (at, at.elapsed(), rc)
    });
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    let ended = Instant::now();
    let err = k.last_error();
    let (at, took, abort_rc) = watchdog.join().unwrap();
    expect_eq("ncclCommAbort rc", abort_rc, 0)?;
    println!(
        "abort took {} ms; the waiting call ended {} ms after it began: rc {rc}: {err}",
        ms(took),
        ms(ended.saturating_duration_since(at))
    );
    Ok(())
}

/// Every rank makes one AllReduce; then the last rank ends its program
/// without destroying the communicator (`ways`: returning normally, or
/// raising SIGTERM on itself), while the others wait for it in the next.
pub fn exit(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    if k.rank == k.n - 1 {
        std::thread::sleep(Duration::from_millis(200));
        if std::env::var("RANKWISE_TEST_SIGNAL").is_ok() {
            // SAFETY: raising a signal on this process.
            unsafe { libc::raise(libc::SIGTERM) };
            return Err("still alive after SIGTERM".into());
        }
        println!("exiting");
        return Ok(());
    }
    let t = Instant::now();
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    println!(
        "waiting rank: rc {rc} after {} ms: {}",
        ms(t.elapsed()),
        k.last_error()
    );
    Ok(())
}

static HANDLED: AtomicBool = AtomicBool::new(false);

extern "C" fn program_handler(_sig: c_int) {
    HANDLED.store(true, Ordering::SeqCst);
}

/// A program with its own SIGINT handler (as Python has): the signal
/// arrives while rank 0 waits for rank 1, which never comes; the wait ends
/// at once and the program's handler still runs.
pub fn interrupt() -> Result<(), String> {
    // SAFETY: a handler that only stores an atomic.
    unsafe { libc::signal(libc::SIGINT, program_handler as *const () as usize) };
    let k = Rank::start();
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    if k.rank == 1 {
        std::thread::sleep(Duration::from_millis(5000));
        return Ok(());
    }
    let sender = std::thread::spawn(|| {
        std::thread::sleep(Duration::from_millis(300));
        let at = Instant::now();
        // SAFETY: a signal to this process.
        unsafe { libc::kill(libc::getpid(), libc::SIGINT) };
        at
    });
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    let ended = Instant::now();
    let at = sender.join().unwrap();
    println!(
        "the call ended {} ms after SIGINT: rc {rc}, the program's handler ran: {}: {}",
        ms(ended.saturating_duration_since(at)),
        HANDLED.load(Ordering::SeqCst),
        k.last_error()
    );
    Ok(())
}

/// Every rank makes one AllReduce; then rank 2 passes a NULL recvbuff to
/// the next (alone, or in a group with a correct AllGather), which its
/// own checks refuse, while the others make it correctly.
pub fn refused(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    let nc = &k.nccl;
    let s = vec_of(nc, &[1i32; 4]);
    let r = if k.rank == 2 {
        std::ptr::null_mut()
    } else {
        alloc::<i32>(nc, 4)
    };
    let g = alloc::<i32>(nc, 4 * k.n);
    let grouped = std::env::var("RANKWISE_TEST_GROUPED").is_ok();
    let t = Instant::now();
    // SAFETY: buffers of 4 int32 (and 4n for the gather), or NULL on rank 2.
    let rc = unsafe {
        if grouped {
            (nc.group_start)();
            (nc.all_gather)(s as Ptr, g as Ptr, 4, INT32, k.comm, NULL);
            (nc.all_reduce)(s as Ptr, r as Ptr, 4, INT32, SUM, k.comm, NULL);
            (nc.group_end)()
        } else {
            (nc.all_reduce)(s as Ptr, r as Ptr, 4, INT32, SUM, k.comm, NULL)
        }
    };
    println!("rc {rc} after {} ms: {}", ms(t.elapsed()), k.last_error());
    Ok(())
}

/// Rank 0 (which serves the store) forks a child that exits at once; the
/// child ends promptly, and the parent's job still agrees: rank 1 comes to
/// the next AllReduce before rank 0 does, so a child that had told the
/// store rank 0 left would fail it.
pub fn fork(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    if k.rank == 0 {
        let t = Instant::now();
        // SAFETY: the child only calls exit (atexit handlers, then _exit).
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            // SAFETY: ends the child through its atexit handlers.
            unsafe { libc::exit(0) };
        }
        let mut status = 0;
        // SAFETY: waits for the child just forked.
        unsafe { libc::waitpid(pid, &mut status, 0) };
        println!("child exited with {status} after {} ms", ms(t.elapsed()));
        std::thread::sleep(Duration::from_millis(300));
    }
    let n = k.n as i32;
    let (rc, out) = k.all_reduce_i32(&[k.rank as i32, 1]);
    expect_eq(
        "AllReduce after the fork",
        (rc, out),
        (0, vec![n * (n - 1) / 2, n]),
    )?;
    println!("fork ok");
    Ok(())
}

/// The rank program of the liveness tests.
pub fn rank_main() {
    let Ok(scenario) = std::env::var("RANKWISE_TEST_SCENARIO") else {
        return;
    };
    let r = match scenario.as_str() {
        "interrupt" => interrupt(),
        s => {
            let k = Rank::start();
            match s {
                "abort" => abort(&k),
                "exit" => exit(&k),
                "refused" => refused(&k),
                "fork" => fork(&k),
                s => Err(format!("no scenario {s}")),
            }
        }
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}
