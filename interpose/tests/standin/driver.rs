//! The stand-in's pretend CUDA driver: what the interposer asks of a driver
//! the process loaded. `cuStreamIsCapturing` says only `CAPTURING_STREAM`
//! is being captured. Events are over a pretend stream: an event is
//! reached as soon as it is recorded, since every call of the stand-in is
//! done when it returns. Two hooks a test program calls make the GPU hang:
//! `standin_stuck_kernel()` is a kernel on this process's stream that
//! never ends (events recorded after it are never reached, and calls made
//! after it return at once and never run, as work queued behind it); and
//! `standin_hang_next()` makes the next collective wait, as an NCCL kernel
//! whose network went away, until the stand-in's timeout.

use std::ffi::{c_int, c_void};

/// `standin_stuck_kernel` was called: this process's stream runs nothing more.
pub static STUCK: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// `standin_hang_next` was called: the next collective never finishes.
pub static HANG_NEXT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// A kernel that never ends, queued on this process's stream.
#[no_mangle]
pub extern "C" fn standin_stuck_kernel() {
    STUCK.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The next collective waits as if its peers' network were gone.
#[no_mangle]
pub extern "C" fn standin_hang_next() {
    HANG_NEXT.store(true, std::sync::atomic::Ordering::SeqCst);
}

/// The stream handle the stand-in's driver says is being captured into a
/// CUDA graph.
pub const CAPTURING_STREAM: usize = 0xca97;

/// The CUDA driver's `cuStreamIsCapturing`, as the stand-in's: only
/// [`CAPTURING_STREAM`] is capturing (status 1, active).
#[no_mangle]
pub unsafe extern "C" fn cuStreamIsCapturing(stream: *mut c_void, status: *mut c_int) -> c_int {
    *status = c_int::from(stream as usize == CAPTURING_STREAM);
    0
}

/// The driver's current context: one, pretend.
#[no_mangle]
pub unsafe extern "C" fn cuCtxGetCurrent(ctx: *mut *mut c_void) -> c_int {
    *ctx = 1 as *mut c_void;
    0
}

#[no_mangle]
pub extern "C" fn cuCtxSetCurrent(_ctx: *mut c_void) -> c_int {
    0
}

/// An event: whether the stream has reached it.
#[no_mangle]
pub unsafe extern "C" fn cuEventCreate(ev: *mut *mut c_void, _flags: u32) -> c_int {
    *ev = Box::into_raw(Box::new(std::sync::atomic::AtomicBool::new(true))) as *mut c_void;
    0
}

#[no_mangle]
pub unsafe extern "C" fn cuEventRecord(ev: *mut c_void, _stream: *mut c_void) -> c_int {
    let reached = !STUCK.load(std::sync::atomic::Ordering::SeqCst);
    (*(ev as *const std::sync::atomic::AtomicBool)).store(reached, std::sync::atomic::Ordering::SeqCst);
    0
}

/// `CUDA_SUCCESS` when reached, `CUDA_ERROR_NOT_READY` (600) when not.
#[no_mangle]
pub unsafe extern "C" fn cuEventQuery(ev: *mut c_void) -> c_int {
    match (*(ev as *const std::sync::atomic::AtomicBool)).load(std::sync::atomic::Ordering::SeqCst) {
        true => 0,
        false => 600,
    }
}

#[no_mangle]
pub unsafe extern "C" fn cuEventDestroy_v2(ev: *mut c_void) -> c_int {
    drop(Box::from_raw(ev as *mut std::sync::atomic::AtomicBool));
    0
}
