//! NCCL's C entry points as this library exports them: every function of
//! NCCL 2.28's API. Each one hands its arguments to `hooks` as integers and
//! then calls the real function (from `real`) with exactly the arguments it
//! was given, or returns the code `hooks` chose without calling NCCL.
//! Rooms: `collectives` (every collective and Send/Recv), `groups` (group
//! start, end and simulated end), `comms` (making, asking about and ending
//! communicators), `misc` (versions and errors, memory, registration,
//! PreMulSum ops).
//!
//! Safety, for every export: the caller made an NCCL call, so its arguments
//! obey nccl.h's contract for that function (or are the program's bug, which
//! NCCL would have met anyway); the interposer passes them on unchanged to
//! the real function of the same signature, and reads through a pointer
//! argument only after the real call has written it (the new communicator,
//! the unique id, the allocation, the async error) or where nccl.h says it
//! holds a value (the PreMulSum scalar, the unique ids of
//! `ncclCommInitRankScalable`, the excluded ranks of `ncclCommShrink`, the
//! communicators of `ncclCommInitAll`).

use crate::hooks::{self, Action, IN_PROGRESS, SUCCESS};
use crate::real::{API, Comm, Res, Stream, missing};
use rankwise::core::{Func, RawCall};
use std::cell::Cell;
use std::ffi::{c_int, c_void};

/// Resolves a real entry point or returns `ncclSystemError` from the export.
macro_rules! real {
    ($f:ident) => {
        match API.$f() {
            Ok(f) => f,
            Err(why) => return missing(&why),
        }
    };
}

thread_local! {
    /// How many of these exports this thread is inside now.
    static DEPTH: Cell<u32> = const { Cell::new(0) };
}

/// This thread inside one of the exports, until dropped. NCCL calls its
/// own API from inside its functions: every `ncclCommUserRank`,
/// `ncclCommCount` or `ncclCommCuDevice` asks `ncclCommGetAsyncError`
/// whether the communicator is ready, and that call reaches this library
/// too. Such a call is NCCL's business, not the program's: an export
/// entered while the thread is already inside one ([`Entry::nested`])
/// passes it straight on, adding nothing (no checks, no calls of its own
/// into NCCL, which would recurse without end, and never the checker's
/// failure, which would fail NCCL's own readiness test).
pub(crate) struct Entry;

impl Entry {
    pub(crate) fn enter() -> Entry {
        DEPTH.with(|d| d.set(d.get() + 1));
        Entry
    }

    /// [`Entry::enter`], and whether this is the thread's outermost
    /// export (false: the call comes from NCCL), in one look at the
    /// thread's count: the path of every call.
    fn enter_outermost() -> (Entry, bool) {
        let outermost = DEPTH.with(|d| {
            let depth = d.get();
            d.set(depth + 1);
            depth == 0
        });
        (Entry, outermost)
    }

    /// Whether this thread is inside an export now: a call arriving now
    /// comes from NCCL.
    pub(crate) fn nested() -> bool {
        DEPTH.with(|d| d.get() > 0)
    }
}

impl Drop for Entry {
    fn drop(&mut self) {
        DEPTH.with(|d| d.set(d.get().saturating_sub(1)));
    }
}

/// Calls the real function of `raw.func` with `raw`'s arguments.
fn forward(comm: usize, raw: &RawCall, stream: usize) -> Res {
    let (s, r) = (raw.sendbuff as *const c_void, raw.recvbuff as *mut c_void);
    let (n, dt, op, root) = (raw.count, raw.datatype, raw.op, raw.root);
    let (c, st) = (comm as Comm, stream as Stream);
    // SAFETY: these are the arguments the program passed to this entry
    // point (module doc), given unchanged to NCCL's function of the same
    // signature; the checks only decided whether to call it.
    unsafe {
        match raw.func {
            Func::AllReduce => real!(all_reduce)(s, r, n, dt, op, c, st),
            Func::Reduce => real!(reduce)(s, r, n, dt, op, root, c, st),
            Func::Broadcast => real!(broadcast)(s, r, n, dt, root, c, st),
            Func::AllGather => real!(all_gather)(s, r, n, dt, c, st),
            Func::ReduceScatter => real!(reduce_scatter)(s, r, n, dt, op, c, st),
            Func::AlltoAll => real!(all_to_all)(s, r, n, dt, c, st),
            Func::Gather => real!(gather)(s, r, n, dt, root, c, st),
            Func::Scatter => real!(scatter)(s, r, n, dt, root, c, st),
            Func::Send => real!(send)(s, n, dt, root, c, st),
            Func::Recv => real!(recv)(r, n, dt, root, c, st),
        }
    }
}

/// The path of every collective and Send/Recv.
fn submit(comm: Comm, raw: RawCall, stream: Stream) -> Res {
    let (_entry, outermost) = Entry::enter_outermost();
    if !outermost {
        return forward(comm as usize, &raw, stream as usize);
    }
    let mut action = hooks::call(comm as usize, raw, stream as usize);
    if let Action::Settle = action {
        if let Some((rank, count)) = rank_and_count(comm as usize) {
            hooks::child_ready(comm as usize, rank, count);
        }
        action = hooks::call(comm as usize, raw, stream as usize);
    }
    match action {
        Action::Forward | Action::Settle => said(forward(comm as usize, &raw, stream as usize)),
        Action::Land(c) => {
            let rc = said(forward(comm as usize, &raw, stream as usize));
            // the launch just enqueued is marked at its end
            hooks::land_one(&c);
            rc
        }
        Action::Return(rc) => rc,
    }
}

/// NCCL's own code, noted when it is an error: `ncclGetLastError` then
/// gives NCCL's text on this thread.
fn said(rc: Res) -> Res {
    if rc != SUCCESS && rc != IN_PROGRESS {
        hooks::nccl_failed();
    }
    rc
}

/// The new communicator NCCL wrote through `comm`, if the call made one
/// (or began to: `ncclInProgress`).
fn made(rc: Res, comm: *mut Comm) -> Option<usize> {
    if (rc != SUCCESS && rc != IN_PROGRESS) || comm.is_null() {
        return None;
    }
    // SAFETY: NCCL returned success (or in progress, with the handle set)
    // after writing the new communicator through the program's pointer.
    let h = unsafe { *comm } as usize;
    (h != 0).then_some(h)
}

/// The rank and size NCCL gives communicator `h`, when it can say now (not
/// while NCCL is still making it).
fn rank_and_count(h: usize) -> Option<(c_int, c_int)> {
    let _entry = Entry::enter();
    let (ur, cc) = (API.comm_user_rank().ok()?, API.comm_count().ok()?);
    let (mut rank, mut count) = (-1, -1);
    // SAFETY: h is a communicator NCCL made; the out-pointers are ours.
    let ok = unsafe { ur(h as Comm, &mut rank) == SUCCESS && cc(h as Comm, &mut count) == SUCCESS };
    ok.then_some((rank, count))
}

#[allow(clippy::too_many_arguments)]
fn raw(func: Func, s: usize, r: usize, count: usize, dt: c_int, op: c_int, root: c_int) -> RawCall {
    RawCall {
        func,
        sendbuff: s,
        recvbuff: r,
        count,
        datatype: dt,
        op,
        root,
    }
}

mod collectives;
mod comms;
mod groups;
mod misc;
