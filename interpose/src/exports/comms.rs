//! Making, asking about and ending communicators: init (one rank, all of a
//! process's devices, scalable), split and shrink, finalize, destroy,
//! abort, revoke, and the questions a program asks of one (its async
//! error, size, device, rank).

use super::{Entry, made, rank_and_count, said};
use crate::hooks::{self, IN_PROGRESS, SUCCESS};
use crate::real::{API, Comm, Res, UniqueId, missing};
use std::ffi::{c_int, c_void};

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetUniqueId(unique_id: *mut UniqueId) -> Res {
    let f = real!(get_unique_id);
    let _entry = Entry::enter();
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

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitRank(
    comm: *mut Comm,
    nranks: c_int,
    id: UniqueId,
    rank: c_int,
) -> Res {
    let f = real!(comm_init_rank);
    let _entry = Entry::enter();
    let mut b = id.bytes();
    let addr = hooks::init_id(&mut b);
    // SAFETY: the program's arguments, with the id restored to NCCL's bytes.
    let rc = said(unsafe { f(comm, nranks, UniqueId::from_bytes(&b), rank) });
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
    let _entry = Entry::enter();
    let mut b = id.bytes();
    let addr = hooks::init_id(&mut b);
    // SAFETY: the program's arguments, with the id restored to NCCL's bytes.
    let rc = said(unsafe { f(comm, nranks, UniqueId::from_bytes(&b), rank, config) });
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
    let _entry = Entry::enter();
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
    let rc = said(unsafe { f(comm, nranks, rank, n_id, ids, config) });
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
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    let rc = said(unsafe { f(comm, color, key, newcomm, config) });
    if rc == SUCCESS || rc == IN_PROGRESS {
        let child = made(rc, newcomm).unwrap_or(0);
        let rank_count = (child != 0).then(|| rank_and_count(child)).flatten();
        hooks::split(comm as usize, color, child, rank_count);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDestroy(comm: Comm) -> Res {
    let f = real!(comm_destroy);
    let _entry = Entry::enter();
    hooks::gone(comm as usize, false);
    // SAFETY: the program's argument (module doc).
    unsafe { f(comm) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommAbort(comm: Comm) -> Res {
    let f = real!(comm_abort);
    let _entry = Entry::enter();
    hooks::gone(comm as usize, true);
    // SAFETY: the program's argument (module doc).
    unsafe { f(comm) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommInitAll(comm: *mut Comm, ndev: c_int, devlist: *const c_int) -> Res {
    let f = real!(comm_init_all);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    let rc = said(unsafe { f(comm, ndev, devlist) });
    let n = usize::try_from(ndev).unwrap_or(0);
    if rc == SUCCESS && !comm.is_null() && n > 0 {
        // SAFETY: nccl.h: comm points to ndev communicators, which NCCL
        // just wrote.
        let handles: Vec<usize> = unsafe { std::slice::from_raw_parts(comm, n) }
            .iter()
            .map(|c| *c as usize)
            .collect();
        hooks::all_made(&handles);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommShrink(
    comm: Comm,
    exclude_ranks: *mut c_int,
    exclude_count: c_int,
    newcomm: *mut Comm,
    config: *mut c_void,
    shrink_flags: c_int,
) -> Res {
    let f = real!(comm_shrink);
    let _entry = Entry::enter();
    let n = usize::try_from(exclude_count).unwrap_or(0);
    let excluded: Vec<c_int> = if exclude_ranks.is_null() || n == 0 {
        Vec::new()
    } else {
        // SAFETY: nccl.h: exclude_ranks holds exclude_count ranks, which
        // NCCL only reads.
        unsafe { std::slice::from_raw_parts(exclude_ranks, n) }.to_vec()
    };
    hooks::shrinking(comm as usize, shrink_flags);
    // SAFETY: the program's arguments (module doc).
    let rc = said(unsafe {
        f(
            comm,
            exclude_ranks,
            exclude_count,
            newcomm,
            config,
            shrink_flags,
        )
    });
    if rc == SUCCESS || rc == IN_PROGRESS {
        let child = made(rc, newcomm).unwrap_or(0);
        let rank_count = (child != 0).then(|| rank_and_count(child)).flatten();
        hooks::shrunk(comm as usize, &excluded, child, rank_count);
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommFinalize(comm: Comm) -> Res {
    let f = real!(comm_finalize);
    let _entry = Entry::enter();
    // SAFETY: the program's argument (module doc).
    said(unsafe { f(comm) })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommRevoke(comm: Comm, revoke_flags: c_int) -> Res {
    let f = real!(comm_revoke);
    let _entry = Entry::enter();
    hooks::revoked(comm as usize);
    // SAFETY: the program's arguments (module doc).
    said(unsafe { f(comm, revoke_flags) })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommGetAsyncError(comm: Comm, async_error: *mut Res) -> Res {
    let f = real!(comm_get_async_error);
    let nested = Entry::nested();
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc), or NCCL's own.
    let rc = unsafe { f(comm, async_error) };
    if nested || rc != SUCCESS || async_error.is_null() {
        return rc;
    }
    // SAFETY: NCCL returned success after writing the async error there.
    let theirs = unsafe { *async_error };
    if theirs == SUCCESS
        && hooks::child_waiting(comm as usize)
        && let Some((rank, count)) = rank_and_count(comm as usize)
    {
        // a child NCCL finished making since its split: registered now
        hooks::child_ready(comm as usize, rank, count);
    }
    if theirs == SUCCESS
        && let Some(code) = hooks::async_error(comm as usize)
    {
        // SAFETY: as above: the program's out-pointer, written by NCCL.
        unsafe { *async_error = code };
    }
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommCount(comm: Comm, count: *mut c_int) -> Res {
    let f = real!(comm_count);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    said(unsafe { f(comm, count) })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommCuDevice(comm: Comm, device: *mut c_int) -> Res {
    let f = real!(comm_cu_device);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    said(unsafe { f(comm, device) })
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommUserRank(comm: Comm, rank: *mut c_int) -> Res {
    let f = real!(comm_user_rank);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    said(unsafe { f(comm, rank) })
}
