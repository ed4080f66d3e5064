//! Each collective and Send/Recv as it is made: the call's own checks
//! (`core::check_call`, `core::check_buffers` against the allocations this
//! process knows), its trace line, and the group it joins (`groups`). A
//! call outside a group is its own launch, agreed across ranks before
//! NCCL is called; an error is reported (`errors`).
//!
//! A call this rank's own checks refuse still takes its place in the
//! agreement: a notice of the refusal goes where its posts would be, so
//! ranks that made the call fail at once naming this rank and the call
//! (instead of waiting out their deadline while NCCL waits for this rank).
//!
//! A call made while its stream is being captured into a CUDA graph is
//! agreed once, at capture; the journal says so (replays never reach the
//! interposer).

use super::agreement::{agree_one, fail};
use super::comms::{Comm, CommState, Shared, comm, lock};
use super::errors::report;
use super::groups::{in_group, join_group};
use super::memory::Space;
use super::settings::{Checks, settings};
use crate::process;
use rankwise::agreement::Failure;
use rankwise::core::group::Queued;
use rankwise::core::{Call, DataType, Error, ErrorKind, RawCall, RedOp, check_buffers, check_call};
use std::sync::MutexGuard;

/// `ncclResult_t` codes the interposer returns itself.
pub const SUCCESS: i32 = 0;
pub const IN_PROGRESS: i32 = 7;

/// What the export does with a call.
pub enum Action {
    /// Call NCCL with the arguments as made.
    Forward,
    /// Call NCCL, then mark the end of the launch it enqueues on this
    /// communicator ([`super::watch::land_one`]).
    Land(Shared),
    /// Return this code without calling NCCL.
    Return(i32),
    /// The communicator is a child NCCL has finished making since: ask
    /// NCCL its rank and size (`children::ready`), then ask again.
    Settle,
}

/// A PreMulSum scalar from its bytes (one element of datatype `dt`, as
/// `ncclScalarHostImmediate` passes it); 0 for a code that is no datatype.
pub fn scalar_of(dt: i32, b: &[u8]) -> f64 {
    use rankwise::core::{F8E4M3, F8E5M2};
    let Some(t) = DataType::from_code(dt) else {
        return 0.0;
    };
    let mut w = [0u8; 8];
    let n = t.size().min(b.len()).min(8);
    w[..n].copy_from_slice(&b[..n]);
    match t {
        DataType::Int8 => w[0] as i8 as f64,
        DataType::Uint8 => w[0] as f64,
        DataType::Int32 => i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Uint32 => u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Int64 => i64::from_le_bytes(w) as f64,
        DataType::Uint64 => u64::from_le_bytes(w) as f64,
        DataType::Float16 => half::f16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::Bfloat16 => half::bf16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::Float32 => f32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Float64 => f64::from_le_bytes(w),
        DataType::Float8e4m3 => F8E4M3(w[0]).to_f32() as f64,
        DataType::Float8e5m2 => F8E5M2(w[0]).to_f32() as f64,
    }
}

/// Bytes of one element of datatype code `dt` (0 for no datatype).
pub fn element_size(dt: i32) -> usize {
    DataType::from_code(dt).map_or(0, |t| t.size())
}

/// A collective or Send/Recv on `handle`, with its stream.
pub fn call(handle: usize, raw: RawCall, stream: usize) -> Action {
    if settings().checks == Checks::Off || process::forked() {
        return Action::Forward;
    }
    let Some(c) = comm(handle) else {
        // a communicator made without the interposer (nothing to check
        // against), or a child NCCL has finished making since
        return match super::children::waiting(handle) {
            true => Action::Settle,
            false => Action::Forward,
        };
    };
    let grouped = in_group();
    let mut s = lock(&c);
    if let Some(why) = s.failed.clone() {
        let e = Error::new(
            ErrorKind::CommFailed,
            format!(
                "{}: this communicator failed earlier ({}); NCCL refuses calls on a failed communicator too",
                raw.func.name(),
                why.message
            ),
        );
        return Action::Return(report(&c, &mut s, &e, None));
    }
    if grouped && !s.grouped {
        join_group(&c, &mut s);
    }
    if !s.captured && crate::driver::capturing(stream) {
        s.captured = true;
        s.tracer.init_info(&format!(
            "rankwise: comm {handle:#x} rank {}: {} recorded into a CUDA graph: checked once at capture, replays unchecked",
            c.rank,
            raw.func.name()
        ));
    }
    let (n, me) = (c.nranks, c.rank);
    let checked = check_call(&raw, n, &|op| s.premul.get(&op).copied())
        .and_then(|call| check_buffers(&call, n, me, &Space::now()).map(|()| call));
    let watching = s.watch.as_ref().is_some_and(|w| !w.completion_only);
    let call = match checked {
        Ok(call) => call,
        // watch mode: the call is refused here alone, as in local mode
        Err(e) if watching => return Action::Return(report(&c, &mut s, &e, None)),
        Err(e) => return refuse(&c, s, &raw, &e, grouped),
    };
    let op_count = s.group.op_count();
    s.tracer.coll(&raw, op_count, handle, n);
    if watching {
        let marked = watched(&mut s, call, stream);
        drop(s);
        return landing(c, marked);
    }
    match s.group.queue(call) {
        Queued::Discarded => Action::Forward,
        Queued::Waiting => {
            s.pending.push((raw, stream));
            super::watch::grouped_call(&mut s, stream);
            Action::Return(SUCCESS)
        }
        Queued::LaunchNow => match launch(&c, s, None, Some(stream)) {
            Ok(marked) => landing(c, marked),
            Err(rc) => Action::Return(rc),
        },
    }
}

/// Forward, and land the launch's mark on `c` when it was marked.
fn landing(c: Shared, marked: bool) -> Action {
    match marked {
        true => Action::Land(c),
        false => Action::Forward,
    }
}

/// Watch mode: the call goes to NCCL at once on `stream`; its launch (the
/// call, or the group's at its outermost end) is numbered and folded into
/// the communicator's track. True when its start was marked on the stream.
fn watched(s: &mut CommState, call: Call, stream: usize) -> bool {
    if s.group.queue(call) != Queued::LaunchNow {
        if s.grouped {
            super::watch::grouped_call(s, stream);
        }
        return false;
    }
    let Some(mut l) = s.group.take() else {
        return false;
    };
    s.group.number(&mut l);
    let marked = super::watch::fold(s, &l, Some(stream));
    s.group.recycle(l);
    marked
}

/// The queued launch of `c`, numbered and agreed without the lock: Ok to
/// call NCCL (on `stream`, where its start is marked for the completion
/// check: true when it was), or the code to return. `refused`: this rank
/// refused it, and posts that notice instead (the call's own error was
/// reported).
fn launch(
    c: &Shared,
    mut s: MutexGuard<'_, CommState>,
    refused: Option<&str>,
    stream: Option<usize>,
) -> Result<bool, i32> {
    let Some(mut l) = s.group.take() else {
        return Ok(false);
    };
    s.group.number(&mut l);
    let (mut s, r) = agree_one(c, s, &l, refused);
    let marked = r.is_ok()
        && refused.is_none()
        && c.stop.raised().is_none()
        && super::watch::fold(&mut s, &l, stream);
    s.group.recycle(l);
    match (r, refused) {
        (Ok(()), None) => match c.stop.raised() {
            // aborted from another thread since: NCCL's communicator is gone
            Some(why) => {
                let e = Error::new(ErrorKind::CommFailed, why.to_string());
                Err(report(c, &mut s, &e, None))
            }
            None => Ok(marked),
        },
        (Ok(()), Some(_)) => Ok(false),
        (Err(f), Some(_)) => {
            // the ranks that made the call fail with it: so does this one
            fail(c, &mut s, f.error);
            Ok(false)
        }
        (Err(f), None) => Err(failed_launch(c, &mut s, f)),
    }
}

/// A launch that did not agree: the communicator fails (unless it was
/// stopped from outside: it left already) and the error is reported.
pub fn failed_launch(c: &Comm, s: &mut CommState, f: Failure) -> i32 {
    let e = match c.stop.raised() {
        Some(_) => {
            let e = f.error.on_rank(c.rank);
            s.failed.get_or_insert_with(|| e.clone());
            e
        }
        None => fail(c, s, f.error),
    };
    report(c, s, &e, f.detail.as_deref())
}

/// The call as a stand-in of its launch's place, when its checks refused
/// it: its function and peer are what the agreement numbers (a Send/Recv
/// whose peer is out of range has no place).
pub fn placeholder(raw: &RawCall, nranks: usize) -> Option<Call> {
    let in_range = usize::try_from(raw.root).is_ok_and(|r| r < nranks);
    if raw.func.is_p2p() && !in_range {
        return None;
    }
    Some(Call {
        func: raw.func,
        sendbuff: raw.sendbuff,
        recvbuff: raw.recvbuff,
        count: raw.count,
        datatype: DataType::from_code(raw.datatype).unwrap_or(DataType::Int8),
        op: RedOp::Sum,
        op_code: raw.op,
        root: if in_range { raw.root as usize } else { 0 },
    })
}

/// What a refusing rank's notice says.
pub fn refusal(e: &Error) -> String {
    format!("its call was refused there ({})", super::errors::words(e))
}

/// A call this rank's checks refused (`e`): reported, and in its launch's
/// place a notice (outside a group now; inside one, at the group's end).
fn refuse(
    c: &Shared,
    mut s: MutexGuard<'_, CommState>,
    raw: &RawCall,
    e: &Error,
    grouped: bool,
) -> Action {
    s.group.note_error(e);
    let code = report(c, &mut s, e, None);
    let Some(stand_in) = placeholder(raw, c.nranks) else {
        return Action::Return(code);
    };
    if grouped {
        // the group's end posts the notice; no call of it reaches NCCL
        s.refused_in_group = true;
        s.group.queue(stand_in);
        return Action::Return(code);
    }
    if s.group.queue(stand_in) == Queued::LaunchNow {
        let why = refusal(&e.clone().on_rank(c.rank));
        let _ = launch(c, s, Some(&why), None);
    }
    Action::Return(code)
}
