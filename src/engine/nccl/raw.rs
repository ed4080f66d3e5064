//! NCCL called directly, past every rankwise check: for measuring what
//! NCCL itself does with what rankwise refuses (bad codes, NULL buffers,
//! extents past an allocation, overlaps, group misuse), and the cost of a
//! bare call. A communicator's [`crate::Comm::handle`] on the nccl engine is
//! its `ncclComm_t`; buffers come from [`crate::Comm::alloc`].

use super::cuda::Stream;
use super::ffi::{self, SUCCESS, ncclComm_t};
use super::library;
use crate::core::{Error, ErrorKind, Func, RawCall, Result};
use std::ffi::{c_int, c_void};
use std::time::{Duration, Instant};

/// What NCCL returned for one call.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Outcome {
    /// The `ncclResult_t`, as its enumerator's name.
    pub result: String,
    pub code: i32,
    /// `ncclGetLastError` afterwards (NCCL's WARN text), "" when none.
    pub last_error: String,
}

fn api() -> Result<&'static ffi::Api> {
    library::nccl()
        .map(|n| &n.api)
        .map_err(|e| Error::new(ErrorKind::System, e.to_string()))
}

fn outcome(handle: usize, code: c_int) -> Result<Outcome> {
    let api = api()?;
    let comm = handle as ncclComm_t;
    // SAFETY: returns a NUL-terminated string owned by NCCL, or NULL.
    let p = unsafe { (api.get_last_error)(comm) };
    let last_error = if p.is_null() {
        String::new()
    } else {
        // SAFETY: non-NULL and NUL-terminated.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    Ok(Outcome {
        result: ffi::result_name(code).to_string(),
        code,
        last_error,
    })
}

/// A stream for raw calls, on the calling thread's current GPU.
pub fn stream() -> Result<Stream> {
    Stream::new()
}

/// Issues `call` to NCCL exactly as given (codes, NULLs, counts), on
/// communicator `handle` and `stream`; does not wait for it.
///
/// # Safety
/// `handle` must be a live communicator of this process, the pointers must
/// be NULL or addresses NCCL may read and write for the call's extent, and
/// every rank of the communicator must make a matching call (else NCCL may
/// wait forever inside a later call).
pub unsafe fn call(handle: usize, stream: &Stream, c: &RawCall) -> Result<Outcome> {
    let api = api()?;
    let comm = handle as ncclComm_t;
    let st = stream.0 as ffi::cudaStream_t;
    let (s, r) = (c.sendbuff as *const c_void, c.recvbuff as *mut c_void);
    let (n, dt, op, root) = (c.count, c.datatype, c.op, c.root);
    // SAFETY: the caller's contract above.
    let code = unsafe {
        match c.func {
            Func::AllReduce => (api.all_reduce)(s, r, n, dt, op, comm, st),
            Func::Reduce => (api.reduce)(s, r, n, dt, op, root, comm, st),
            Func::Broadcast => (api.broadcast)(s, r, n, dt, root, comm, st),
            Func::AllGather => (api.all_gather)(s, r, n, dt, comm, st),
            Func::ReduceScatter => (api.reduce_scatter)(s, r, n, dt, op, comm, st),
            Func::AlltoAll => (api.all_to_all)(s, r, n, dt, comm, st),
            Func::Gather => (api.gather)(s, r, n, dt, root, comm, st),
            Func::Scatter => (api.scatter)(s, r, n, dt, root, comm, st),
            Func::Send => (api.send)(s, n, dt, root, comm, st),
            Func::Recv => (api.recv)(r, n, dt, root, comm, st),
        }
    };
    outcome(handle, code)
}

/// `ncclGroupStart`.
pub fn group_start(handle: usize) -> Result<Outcome> {
    // SAFETY: no arguments.
    let code = unsafe { (api()?.group_start)() };
    outcome(handle, code)
}

/// `ncclGroupEnd`.
pub fn group_end(handle: usize) -> Result<Outcome> {
    // SAFETY: no arguments.
    let code = unsafe { (api()?.group_end)() };
    outcome(handle, code)
}

/// `ncclCommGetAsyncError` of communicator `handle`.
///
/// # Safety
/// `handle` must be a live communicator of this process.
pub unsafe fn async_error(handle: usize) -> Result<Outcome> {
    let mut st: c_int = SUCCESS;
    // SAFETY: the caller's contract; st is a valid out-pointer.
    let code = unsafe { (api()?.comm_get_async_error)(handle as ncclComm_t, &mut st) };
    if code != SUCCESS {
        return outcome(handle, code);
    }
    outcome(handle, st)
}

/// Waits until the communicator has issued its work and `stream` is idle,
/// or until `timeout`: Ok(true) done, Ok(false) timed out (nothing aborted).
///
/// # Safety
/// `handle` must be a live communicator of this process.
pub unsafe fn wait(handle: usize, stream: &Stream, timeout: Duration) -> Result<bool> {
    let deadline = Instant::now() + timeout;
    loop {
        // SAFETY: the caller's contract.
        let a = unsafe { async_error(handle)? };
        if a.code != SUCCESS && a.code != ffi::IN_PROGRESS {
            return Err(Error::new(
                ErrorKind::RemoteError,
                format!("NCCL's async error: {} {}", a.result, a.last_error),
            ));
        }
        if a.code == SUCCESS && stream.query()? {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            return Ok(false);
        }
        std::thread::yield_now();
    }
}
