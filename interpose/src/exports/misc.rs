//! Versions and errors, memory, buffer and window registration, and
//! PreMulSum ops: passed to NCCL, with what the checks need noted on the
//! way (allocations, scalars) and the checker's own error text where it
//! is the latest.

use super::Entry;
use crate::hooks::{self, SUCCESS};
use crate::real::{API, Comm, Res, missing};
use std::ffi::{c_char, c_int, c_void};

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetVersion(version: *mut c_int) -> Res {
    let f = real!(get_version);
    let _entry = Entry::enter();
    // SAFETY: the program's argument (module doc).
    unsafe { f(version) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetErrorString(result: Res) -> *const c_char {
    match API.get_error_string() {
        // SAFETY: the program's argument (module doc).
        Ok(f) => unsafe { f(result) },
        Err(_) => c"rankwise: no NCCL defines ncclGetErrorString".as_ptr(),
    }
}

/// NCCL's own deprecated `void ncclResetDebugInit()`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclResetDebugInit() {
    if let Ok(f) = API.reset_debug_init() {
        // SAFETY: no arguments (module doc).
        unsafe { f() }
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGetLastError(comm: Comm) -> *const c_char {
    // per thread, whatever communicator is named (NCCL's ignores it too)
    if let Some(p) = hooks::last_error() {
        return p;
    }
    match API.get_last_error() {
        // SAFETY: the program's argument (module doc).
        Ok(f) => unsafe { f(comm) },
        Err(_) => c"rankwise: no NCCL defines ncclGetLastError".as_ptr(),
    }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclMemAlloc(ptr: *mut *mut c_void, size: usize) -> Res {
    let f = real!(mem_alloc);
    let _entry = Entry::enter();
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
    let _entry = Entry::enter();
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
    let _entry = Entry::enter();
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
    let _entry = Entry::enter();
    if hooks::premul_destroyed(comm as usize, op) {
        // held calls of the open group use it: destroyed at its end
        return SUCCESS;
    }
    // SAFETY: the program's arguments (module doc).
    unsafe { f(op, comm) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommRegister(
    comm: Comm,
    buff: *mut c_void,
    size: usize,
    handle: *mut *mut c_void,
) -> Res {
    let f = real!(comm_register);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    unsafe { f(comm, buff, size, handle) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommDeregister(comm: Comm, handle: *mut c_void) -> Res {
    let f = real!(comm_deregister);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    unsafe { f(comm, handle) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommWindowRegister(
    comm: Comm,
    buff: *mut c_void,
    size: usize,
    win: *mut *mut c_void,
    win_flags: c_int,
) -> Res {
    let f = real!(comm_window_register);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    unsafe { f(comm, buff, size, win, win_flags) }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclCommWindowDeregister(comm: Comm, win: *mut c_void) -> Res {
    let f = real!(comm_window_deregister);
    let _entry = Entry::enter();
    // SAFETY: the program's arguments (module doc).
    unsafe { f(comm, win) }
}
