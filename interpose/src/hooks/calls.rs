//! Each collective and Send/Recv as it is made: the call's own checks
//! (`core::check_call`, `core::check_buffers` against the allocations this
//! process knows), its trace line, and the group it joins (NCCL's groups
//! are per thread and span communicators). At launch (the call itself, or
//! the outermost `ncclGroupEnd`, whose calls are held back until then) the
//! launch is agreed across ranks before NCCL is called; an error is
//! reported on stderr, in the trace and through `ncclGetLastError`.

use super::agreement::{agree, agree_one, fail};
use super::comms::{CommState, Shared, comm, lock};
use super::memory::Space;
use super::settings::{Checks, say, settings};
use rankwise::core::group::Queued;
use rankwise::core::{Error, ErrorKind, Launch, RawCall, check_buffers, check_call};
use std::cell::RefCell;
use std::sync::MutexGuard;

/// `ncclResult_t` codes the interposer returns itself.
pub const SUCCESS: i32 = 0;
pub const IN_PROGRESS: i32 = 7;

/// The thread's `ncclGroupStart` nesting (NCCL's groups are per thread and
/// span communicators) and the communicators that queued calls in it.
#[derive(Default)]
struct ThreadGroup {
    depth: u32,
    touched: Vec<Shared>,
}

thread_local! {
    static GROUP: RefCell<ThreadGroup> = RefCell::new(ThreadGroup::default());
}

/// What the export does with a call.
pub enum Action {
    /// Call NCCL with the arguments as made.
    Forward,
    /// Return this code without calling NCCL.
    Return(i32),
}

/// A PreMulSum scalar from its bytes (one element of datatype `dt`, as
/// `ncclScalarHostImmediate` passes it); 0 for a code that is no datatype.
pub fn scalar_of(dt: i32, b: &[u8]) -> f64 {
    use rankwise::core::{DataType, F8E4M3, F8E5M2};
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
    rankwise::core::DataType::from_code(dt).map_or(0, |t| t.size())
}

/// Reports `e` as this rank's: one line on stderr, a WARN line in the trace,
/// `ncclGetLastError`'s text; the process aborts when asked to.
fn report(s: &mut CommState, e: &Error, detail: Option<&str>) -> i32 {
    let e = e.clone().on_rank(s.rank);
    let line = match detail {
        Some(d) => format!("{e} [{d}]"),
        None => e.to_string(),
    };
    say(&format!("rankwise: {line} (comm {:#x})", s.handle));
    s.tracer.warn(&line);
    s.last_error = std::ffi::CString::new(line).ok();
    if settings().abort {
        say("rankwise: RANKWISE_ABORT=1: aborting");
        std::process::abort();
    }
    e.code().code()
}

/// A collective or Send/Recv on `handle`, with its stream.
pub fn call(handle: usize, raw: RawCall, stream: usize) -> Action {
    if settings().checks == Checks::Off {
        return Action::Forward;
    }
    let Some(shared) = comm(handle) else {
        // a communicator made without the interposer: nothing to check against
        return Action::Forward;
    };
    let in_group = GROUP.with(|g| g.borrow().depth > 0);
    let mut s = lock(&shared);
    if let Some(why) = s.failed.clone() {
        let e = Error::new(
            ErrorKind::CommFailed,
            format!(
                "{}: this communicator failed earlier ({}); NCCL refuses calls on a failed communicator too",
                raw.func.name(),
                why.message
            ),
        );
        return Action::Return(report(&mut s, &e, None));
    }
    if in_group && !s.grouped {
        s.grouped = true;
        s.group.start();
        GROUP.with(|g| g.borrow_mut().touched.push(shared.clone()));
    }
    let (n, me) = (s.nranks, s.rank);
    let checked = check_call(&raw, n, &|c| s.premul.get(&c).copied())
        .and_then(|c| check_buffers(&c, n, me, &Space).map(|()| c));
    let call = match checked {
        Ok(c) => c,
        Err(e) => {
            s.group.note_error(&e);
            s.refused_in_group |= in_group;
            return Action::Return(report(&mut s, &e, None));
        }
    };
    let op_count = s.group.op_count();
    s.tracer.coll(&raw, op_count, handle, n);
    match s.group.queue(call) {
        Queued::Discarded => Action::Forward,
        Queued::Waiting => {
            s.pending.push((raw, stream));
            Action::Return(SUCCESS)
        }
        Queued::LaunchNow => {
            let Some(mut launch) = s.group.take() else {
                return Action::Forward;
            };
            s.group.number(&mut launch);
            let r = agree_one(&mut s, &launch);
            s.group.recycle(launch);
            match r {
                Ok(()) => Action::Forward,
                Err(f) => {
                    let e = fail(&mut s, f.error);
                    Action::Return(report(&mut s, &e, f.detail.as_deref()))
                }
            }
        }
    }
}

/// One call to hand NCCL at a group's end: the call, its stream, its
/// communicator.
pub type Issue = (RawCall, usize, usize);

/// `ncclGroupStart` (before the real one).
pub fn group_start() {
    if settings().checks != Checks::Off {
        GROUP.with(|g| g.borrow_mut().depth += 1);
    }
}

/// `ncclGroupEnd`: `None` for an inner end or nothing to check (call the
/// real one as is); otherwise the outermost end's verdict: the calls to
/// issue into NCCL's group before its end, or the error to return after
/// closing NCCL's (empty) group.
pub fn group_end() -> Option<Result<Vec<Issue>, i32>> {
    if settings().checks == Checks::Off {
        return None;
    }
    let touched = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return None;
        }
        g.depth -= 1;
        (g.depth == 0).then(|| std::mem::take(&mut g.touched))
    })?;
    if touched.is_empty() {
        return None;
    }
    let mut guards: Vec<MutexGuard<'_, CommState>> = touched.iter().map(|s| lock(s)).collect();
    let mut first_error: Option<i32> = None;
    let mut launches: Vec<(usize, Launch)> = Vec::new();
    for (i, s) in guards.iter_mut().enumerate() {
        s.grouped = false;
        let said = std::mem::take(&mut s.refused_in_group);
        let me = s.rank;
        match s.group.end(me) {
            Ok(true) => {
                if let Some(mut l) = s.group.take() {
                    s.group.number(&mut l);
                    launches.push((i, l));
                } else {
                    s.pending.clear();
                }
            }
            Ok(false) => {}
            Err(e) => {
                s.pending.clear();
                // the group's first refused call was said when it was made
                let code = if said {
                    e.code().code()
                } else {
                    report(s, &e, None)
                };
                first_error.get_or_insert(code);
            }
        }
    }
    if let Some(code) = first_error {
        for (i, l) in launches {
            guards[i].pending.clear();
            guards[i].group.recycle(l);
        }
        return Some(Err(code));
    }
    let result = {
        let mut pairs: Vec<(&mut CommState, &Launch)> = Vec::new();
        let mut rest: Vec<Option<&mut MutexGuard<'_, CommState>>> =
            guards.iter_mut().map(Some).collect();
        for (i, l) in &launches {
            if let Some(g) = rest[*i].take() {
                pairs.push((&mut **g, l));
            }
        }
        agree(&mut pairs)
    };
    let mut out = Vec::new();
    let mut code = None;
    for (i, l) in launches {
        let s = &mut guards[i];
        let pending = std::mem::take(&mut s.pending);
        match &result {
            Ok(()) => out.extend(pending.into_iter().map(|(r, st)| (r, st, s.handle))),
            Err(f) => {
                let e = fail(s, f.error.clone());
                let c = report(s, &e, f.detail.as_deref());
                code.get_or_insert(c);
            }
        }
        s.group.recycle(l);
    }
    Some(match code {
        Some(c) => Err(c),
        None => Ok(out),
    })
}
