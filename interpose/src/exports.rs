//! NCCL's C entry points as this library exports them. Each one hands its
//! arguments to `hooks` as integers and then calls the real function (from
//! `real`) with exactly the arguments it was given, or returns the code
//! `hooks` chose without calling NCCL.
//!
//! Safety, for every export: the caller made an NCCL call, so its arguments
//! obey nccl.h's contract for that function (or are the program's bug, which
//! NCCL would have met anyway); the interposer passes them on unchanged to
//! the real function of the same signature, and reads through a pointer
//! argument only after the real call has written it (the new communicator,
//! the unique id, the allocation) or where nccl.h says it holds a value
//! (the PreMulSum scalar, the unique ids of `ncclCommInitRankScalable`).

use crate::hooks::{self, Action, IN_PROGRESS, SUCCESS};
use crate::real::{API, Comm, Res, Stream, UniqueId, missing};
use rankwise::core::{Func, RawCall};
use std::ffi::{c_char, c_int, c_void};

/// Resolves a real entry point or returns `ncclSystemError` from the export.
macro_rules! real {
    ($f:ident) => {
        match API.$f() {
            Ok(f) => f,
            Err(why) => return missing(&why),
        }
    };
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
    match hooks::call(comm as usize, raw, stream as usize) {
        Action::Forward => forward(comm as usize, &raw, stream as usize),
        Action::Return(rc) => rc,
    }
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

// ---------------------------------------------------------------- collectives

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AllReduce,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        op,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Reduce,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        op,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Broadcast,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

/// The legacy in-place broadcast: `ncclBroadcast(buff, buff, ...)`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Broadcast,
        buff as usize,
        buff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AllGather,
        sendbuff as usize,
        recvbuff as usize,
        sendcount,
        datatype,
        0,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::ReduceScatter,
        sendbuff as usize,
        recvbuff as usize,
        recvcount,
        datatype,
        op,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AlltoAll,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Gather,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Scatter,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(Func::Send, sendbuff as usize, 0, count, datatype, 0, peer);
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(Func::Recv, 0, recvbuff as usize, count, datatype, 0, peer);
    submit(comm, c, stream)
}

// ---------------------------------------------------------------- groups

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> Res {
    let start = real!(group_start);
    hooks::group_start();
    // SAFETY: no arguments (module doc).
    unsafe { start() }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> Res {
    let end = real!(group_end);
    match hooks::group_end() {
        // SAFETY: no arguments (module doc).
        None => unsafe { end() },
        Some(Ok(calls)) => {
            let mut first = None;
            for (raw, stream, comm) in &calls {
                let rc = forward(*comm, raw, *stream);
                if rc != SUCCESS && rc != IN_PROGRESS {
                    first.get_or_insert(rc);
                }
            }
            // SAFETY: as above.
            let rc = unsafe { end() };
            first.unwrap_or(rc)
        }
        Some(Err(code)) => {
            // NCCL's group holds none of the refused calls: close it empty
            // SAFETY: as above.
            unsafe { end() };
            code
        }
    }
}

// ---------------------------------------------------------------- communicators

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> Res {
    let f = real!(get_unique_id);
    // SAFETY: the program's out-pointer, given to NCCL unchanged.
    let rc = unsafe { f(unique_id) };
    if rc == SUCCESS && !unique_id.is_null() {
        // SAFETY: NCCL just wrote a whole ncclUniqueId there.
        let id = unsafe { &mut *unique_id };
        let mut b = id.bytes();
        hooks::unique_id_made(&mut b);
        *id = UniqueId::from_bytes(&b);
    }
    rc
}

/// The new communicator NCCL wrote through `comm`, if the call made one.
fn made(rc: Res, comm: *mut Comm) -> Option<usize> {
    if (rc != SUCCESS && rc != IN_PROGRESS) || comm.is_null() {
        return None;
    }
    // SAFETY: NCCL returned success (or in progress, with the handle set)
    // after writing the new communicator through the program's pointer.
    let h = unsafe { *comm } as usize;
    (h != 0).then_some(h)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> Res {
    let f = real!(comm_init_rank);
    let mut b = id.bytes();
    let addr = hooks::init_id(&mut b);
    // SAFETY: the program's arguments, with the id restored to NCCL's bytes.
    let rc = unsafe { f(comm, nranks, UniqueId::from_bytes(&b), rank) };
    if let Some(h) = made(rc, comm) {
        hooks::initialised(h, rank, nranks, &b, addr);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRankConfig(
    comm: *mut Comm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
    config: *mut c_void,
) -> Res {
    let f = real!(comm_init_rank_config);
    let mut b = id.bytes();
    let addr = hooks::init_id(&mut b);
    // SAFETY: the program's arguments, with the id restored to NCCL's bytes.
    let rc = unsafe { f(comm, nranks, UniqueId::from_bytes(&b), rank, config) };
    if let Some(h) = made(rc, comm) {
        hooks::initialised(h, rank, nranks, &b, addr);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRankScalable(
    comm: *mut Comm,
    nranks: c_int,
    rank: c_int,
    n_id: c_int,
    ids: *mut UniqueId,
    config: *mut c_void,
) -> Res {
    let f = real!(comm_init_rank_scalable);
    let n = usize::try_from(n_id).unwrap_or(0);
    let (mut first, mut addr) = ([0u8; 128], None);
    if !ids.is_null() && n > 0 {
        // SAFETY: nccl.h: ids points to n_id unique ids, which the program
        // owns and NCCL only reads; restoring NCCL's bytes in place leaves
        // them as NCCL made them.
        let all = unsafe { std::slice::from_raw_parts_mut(ids, n) };
        for (i, id) in all.iter_mut().enumerate() {
            let mut b = id.bytes();
            let a = hooks::init_id(&mut b);
            *id = UniqueId::from_bytes(&b);
            if i == 0 {
                (first, addr) = (b, a);
            }
        }
    }
    // SAFETY: the program's arguments (module doc).
    let rc = unsafe { f(comm, nranks, rank, n_id, ids, config) };
    if let Some(h) = made(rc, comm) {
        hooks::initialised(h, rank, nranks, &first, addr);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommSplit(
    comm: Comm,
    color: c_int,
    key: c_int,
    newcomm: *mut Comm,
    config: *mut c_void,
) -> Res {
    let f = real!(comm_split);
    // SAFETY: the program's arguments (module doc).
    let rc = unsafe { f(comm, color, key, newcomm, config) };
    if rc == SUCCESS || rc == IN_PROGRESS {
        let child = made(rc, newcomm).unwrap_or(0);
        let rank_count = (child != 0).then(|| rank_and_count(child)).flatten();
        hooks::split(comm as usize, color, child, rank_count);
    }
    rc
}

/// The rank and size NCCL gives communicator `h`, when it can say now.
fn rank_and_count(h: usize) -> Option<(c_int, c_int)> {
    let (ur, cc) = (API.comm_user_rank().ok()?, API.comm_count().ok()?);
    let (mut rank, mut count) = (-1, -1);
    // SAFETY: h is a communicator NCCL just made; the out-pointers are ours.
    let ok = unsafe { ur(h as Comm, &mut rank) == SUCCESS && cc(h as Comm, &mut count) == SUCCESS };
    ok.then_some((rank, count))
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: Comm) -> Res {
    let f = real!(comm_destroy);
    hooks::gone(comm as usize, false);
    // SAFETY: the program's argument (module doc).
    unsafe { f(comm) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: Comm) -> Res {
    let f = real!(comm_abort);
    hooks::gone(comm as usize, true);
    // SAFETY: the program's argument (module doc).
    unsafe { f(comm) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(comm: Comm) -> *const c_char {
    if let Some(p) = hooks::last_error(comm as usize) {
        return p;
    }
    match API.get_last_error() {
        // SAFETY: the program's argument (module doc).
        Ok(f) => unsafe { f(comm) },
        Err(_) => c"rankwise: no NCCL defines ncclGetLastError".as_ptr(),
    }
}

// ---------------------------------------------------------------- memory and ops

#[unsafe(no_mangle)]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> Res {
    let f = real!(mem_alloc);
    // SAFETY: the program's arguments (module doc).
    let rc = unsafe { f(ptr, size) };
    if rc == SUCCESS && !ptr.is_null() {
        // SAFETY: NCCL wrote the allocation's address there.
        hooks::allocated(unsafe { *ptr } as usize, size);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclMemFree(ptr: *mut c_void) -> Res {
    let f = real!(mem_free);
    hooks::freed(ptr as usize);
    // SAFETY: the program's argument (module doc).
    unsafe { f(ptr) }
}

/// `ncclScalarHostImmediate`: the scalar is read from host memory at once.
const HOST_IMMEDIATE: c_int = 1;

#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpCreatePreMulSum(
    op: *mut c_int,
    scalar: *mut c_void,
    datatype: c_int,
    residence: c_int,
    comm: Comm,
) -> Res {
    let f = real!(red_op_create_pre_mul_sum);
    // SAFETY: the program's arguments (module doc).
    let rc = unsafe { f(op, scalar, datatype, residence, comm) };
    if rc == SUCCESS && !op.is_null() {
        let size = hooks::element_size(datatype);
        let value = if residence == HOST_IMMEDIATE && !scalar.is_null() && size > 0 {
            // SAFETY: nccl.h: a host-immediate scalar is one element of
            // `datatype` in host memory at `scalar`, which NCCL just read too.
            let b = unsafe { std::slice::from_raw_parts(scalar as *const u8, size) };
            hooks::scalar_of(datatype, b)
        } else {
            0.0
        };
        // SAFETY: NCCL wrote the new op's code there.
        hooks::premul_made(comm as usize, unsafe { *op }, value);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRedOpDestroy(op: c_int, comm: Comm) -> Res {
    let f = real!(red_op_destroy);
    hooks::premul_destroyed(comm as usize, op);
    // SAFETY: the program's arguments (module doc).
    unsafe { f(op, comm) }
}
