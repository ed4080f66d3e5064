//! Group start, end and simulated end: the interposer's group bookkeeping
//! around NCCL's, the held calls issued into NCCL's group at its outermost
//! end once agreed, and the PreMulSum ops destroyed while held calls used
//! them destroyed after NCCL's group closed.

use super::{Entry, forward, said};
use crate::hooks::{self, Ended, IN_PROGRESS, SUCCESS};
use crate::real::{API, Comm, Res, missing};
use std::ffi::c_void;

/// Carries out an outermost end: the held calls into NCCL's group, then
/// `end` (NCCL's end or simulated end), then the doomed ops.
fn finish(ended: Ended, end: impl FnOnce() -> Res) -> Res {
    let mut first = None;
    for (raw, stream, comm) in &ended.issue {
        let rc = said(forward(*comm, raw, *stream));
        if rc != SUCCESS && rc != IN_PROGRESS {
            first.get_or_insert(rc);
        }
    }
    // a refused group issued nothing: NCCL's (empty) group is closed all the same
    let rc = said(end());
    if let Ok(destroy) = API.red_op_destroy() {
        for (op, comm) in ended.doomed {
            // SAFETY: an op NCCL made on this communicator, whose
            // destruction the program asked for while held calls used it;
            // they have reached NCCL now.
            unsafe { destroy(op, comm as Comm) };
        }
    }
    ended.code.or(first).unwrap_or(rc)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupStart() -> Res {
    let start = real!(group_start);
    let _entry = Entry::enter();
    hooks::group_start();
    // SAFETY: no arguments (module doc).
    unsafe { start() }
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupEnd() -> Res {
    let end = real!(group_end);
    let _entry = Entry::enter();
    let rc = match hooks::group_end() {
        // SAFETY: no arguments (module doc).
        None => said(unsafe { end() }),
        // SAFETY: as above.
        Some(ended) => finish(ended, || unsafe { end() }),
    };
    // watch mode: the group's launches just enqueued are marked at their end
    hooks::land();
    rc
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGroupSimulateEnd(sim_info: *mut c_void) -> Res {
    let end = real!(group_simulate_end);
    let _entry = Entry::enter();
    match hooks::group_simulate_end() {
        // SAFETY: the program's argument (module doc).
        None => said(unsafe { end(sim_info) }),
        // SAFETY: as above.
        Some(ended) => finish(ended, || unsafe { end(sim_info) }),
    }
}
