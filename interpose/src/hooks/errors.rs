//! How the interposer reports an error: one line on stderr, a WARN line in
//! the communicator's journal, the text `ncclGetLastError` returns on the
//! calling thread, and a code the loaded NCCL knows.
//!
//! `ncclGetLastError` answers per thread, whatever communicator it is
//! given (NCCL's own ignores it too, and PyTorch asks with NULL): the
//! interposer's latest error on this thread, unless NCCL failed a call on
//! this thread since, then NCCL's. The text lives until this thread's next
//! error, whatever is destroyed meanwhile.

use super::comms::{Comm, CommState};
use super::leaving;
use super::settings::{say, settings};
use rankwise::core::{Error, ResultCode};
use std::cell::RefCell;
use std::ffi::{CString, c_char};

/// `ncclGetVersion` of an NCCL that does not say: 2.28, whose codes end at
/// `ncclInProgress`.
const ASSUMED_VERSION: i32 = 22800;

thread_local! {
    /// The interposer's latest error on this thread, and whether it is
    /// still the latest error of any kind.
    static LAST: RefCell<(Option<CString>, bool)> = const { RefCell::new((None, false)) };
}

/// The `ncclResult_t` for `e` in the loaded NCCL: a timeout is
/// `ncclTimeout` only where that exists (`ResultCode::for_version`).
pub fn code_of(e: &Error) -> i32 {
    result_of(e).code()
}

fn result_of(e: &Error) -> ResultCode {
    let version = crate::real::version().unwrap_or(ASSUMED_VERSION);
    e.code().for_version(version)
}

/// `e` in words, headed by the code the program gets for it:
/// `ncclRemoteError on rank 0: rank 3 did not enter AllReduce #1 within 2s`.
pub fn words(e: &Error) -> String {
    let code = result_of(e).nccl_name();
    match e.rank {
        Some(r) => format!("{code} on rank {r}: {}", e.message),
        None => format!("{code}: {}", e.message),
    }
}

/// Reports `e` as rank `c.rank`'s: one line on stderr, a WARN line in the
/// journal, `ncclGetLastError`'s text on this thread; the process aborts
/// when asked to (its peers told first). The code to return.
pub fn report(c: &Comm, s: &mut CommState, e: &Error, detail: Option<&str>) -> i32 {
    let e = e.clone().on_rank(c.rank);
    let line = match detail {
        Some(d) => format!("{} [{d}]", words(&e)),
        None => words(&e),
    };
    say(&format!("rankwise: {line} (comm {:#x})", c.handle));
    s.tracer.warn(&line);
    if settings().abort {
        leaving::aborting(c.rank, &line);
        say("rankwise: RANKWISE_ABORT=1: aborting");
        std::process::abort();
    }
    remember(line);
    code_of(&e)
}

/// `line` is this thread's latest error.
fn remember(line: String) {
    let text = CString::new(line).unwrap_or_else(|e| {
        let mut b = e.into_vec();
        b.retain(|c| *c != 0);
        CString::new(b).unwrap_or_default()
    });
    LAST.with(|l| *l.borrow_mut() = (Some(text), true));
}

/// NCCL failed a call on this thread: its error is the latest now.
pub fn nccl_failed() {
    LAST.with(|l| l.borrow_mut().1 = false);
}

/// What `ncclGetLastError` returns on this thread when the interposer's
/// error is the latest: a pointer valid until this thread's next error.
pub fn last_error() -> Option<*const c_char> {
    LAST.with(|l| {
        let l = l.borrow();
        match &*l {
            (Some(text), true) => Some(text.as_ptr()),
            _ => None,
        }
    })
}
