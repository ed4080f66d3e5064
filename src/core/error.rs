//! Errors: every failure carries NCCL's `ncclResult_t` code, a finer kind
//! that tests and the misuse suite match on, the rank it happened on, and a
//! message that says what was expected and what was given.

use std::fmt;

/// NCCL's `ncclResult_t` values (2.30 adds `Timeout`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
pub enum ResultCode {
    Success = 0,
    UnhandledCudaError = 1,
    SystemError = 2,
    InternalError = 3,
    InvalidArgument = 4,
    InvalidUsage = 5,
    RemoteError = 6,
    InProgress = 7,
    Timeout = 8,
}

impl ResultCode {
    /// The C enumerator's name, e.g. `ncclInvalidArgument`.
    pub fn nccl_name(self) -> &'static str {
        match self {
            ResultCode::Success => "ncclSuccess",
            ResultCode::UnhandledCudaError => "ncclUnhandledCudaError",
            ResultCode::SystemError => "ncclSystemError",
            ResultCode::InternalError => "ncclInternalError",
            ResultCode::InvalidArgument => "ncclInvalidArgument",
            ResultCode::InvalidUsage => "ncclInvalidUsage",
            ResultCode::RemoteError => "ncclRemoteError",
            ResultCode::InProgress => "ncclInProgress",
            ResultCode::Timeout => "ncclTimeout",
        }
    }
    pub fn code(self) -> i32 {
        self as i32
    }

    /// This code as an NCCL of `version` (its `ncclGetVersion`, e.g. 22809
    /// for 2.28.9) knows it. `ncclTimeout` exists from 2.30 on (8 is
    /// `ncclNumResults` before); a wait for other ranks that timed out is
    /// then `ncclRemoteError`, NCCL's code for a call that failed because a
    /// remote rank did not respond or exited, which frameworks treat as
    /// the communicator's failure (2.13 on; `ncclSystemError` before).
    pub fn for_version(self, version: i32) -> ResultCode {
        match self {
            ResultCode::Timeout if version >= 23000 => self,
            ResultCode::Timeout | ResultCode::RemoteError if version < 21300 => {
                ResultCode::SystemError
            }
            ResultCode::Timeout => ResultCode::RemoteError,
            _ => self,
        }
    }
}

/// What went wrong, finer than the result code.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
pub enum ErrorKind {
    /// Root (or Send/Recv peer) outside `0..N`.
    InvalidRoot,
    /// Datatype code outside the 12 NCCL types.
    InvalidDatatype,
    /// Reduction op code that is neither built in nor a live PreMulSum.
    InvalidOp,
    /// A buffer the call must read or write is NULL.
    NullPointer,
    /// A pointer is not in a registered allocation, its extent runs past the
    /// end, or it is not aligned to its datatype's element size.
    OutOfBounds,
    /// Send and recv regions overlap other than by the op's in-place equation.
    IllegalOverlap,
    /// A typed-face buffer has the wrong number of elements.
    BadLength,
    /// Group misuse, send to self without a matching recv, and similar.
    InvalidUsage,
    /// Ranks disagree on a call (op, count, datatype, reduction, root, split).
    Mismatch,
    /// A Send/Recv that has no partner.
    Unmatched,
    /// Every live rank waits on another: the program can never progress.
    Deadlock,
    /// Another rank failed (error, panic, early exit); this rank cannot go on.
    RemoteError,
    /// A wait passed its deadline.
    Timeout,
    /// The communicator failed earlier and refuses further calls.
    CommFailed,
    /// A rank's program panicked.
    Panic,
    /// A bug in rankwise itself.
    Internal,
    /// The operating system refused something (thread, file).
    System,
}

impl ErrorKind {
    pub fn code(self) -> ResultCode {
        use ErrorKind::*;
        match self {
            InvalidRoot | InvalidDatatype | InvalidOp | NullPointer | OutOfBounds
            | IllegalOverlap | BadLength => ResultCode::InvalidArgument,
            InvalidUsage | Mismatch | Unmatched | Deadlock | CommFailed => ResultCode::InvalidUsage,
            RemoteError => ResultCode::RemoteError,
            Timeout => ResultCode::Timeout,
            Internal | Panic => ResultCode::InternalError,
            System => ResultCode::SystemError,
        }
    }
}

/// A rankwise error: kind (and so ncclResult_t), rank, message.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Error {
    pub kind: ErrorKind,
    /// The rank that reports the error, when known.
    pub rank: Option<usize>,
    pub message: String,
}

impl Error {
    pub fn new(kind: ErrorKind, message: impl Into<String>) -> Self {
        Error {
            kind,
            rank: None,
            message: message.into(),
        }
    }
    pub fn on_rank(mut self, rank: usize) -> Self {
        self.rank.get_or_insert(rank);
        self
    }
    pub fn code(&self) -> ResultCode {
        self.kind.code()
    }
}

impl fmt::Display for Error {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.rank {
            Some(r) => write!(
                f,
                "{} on rank {}: {}",
                self.code().nccl_name(),
                r,
                self.message
            ),
            None => write!(f, "{}: {}", self.code().nccl_name(), self.message),
        }
    }
}

impl std::error::Error for Error {}

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_match_nccl_h() {
        assert_eq!(ResultCode::InvalidArgument.code(), 4);
        assert_eq!(ResultCode::InvalidUsage.code(), 5);
        assert_eq!(ResultCode::RemoteError.code(), 6);
        assert_eq!(ResultCode::Timeout.code(), 8);
        assert_eq!(ErrorKind::InvalidRoot.code(), ResultCode::InvalidArgument);
        assert_eq!(ErrorKind::Deadlock.code(), ResultCode::InvalidUsage);
    }

    #[test]
    fn a_timeout_is_a_code_the_loaded_nccl_knows() {
        // nccl.h: ncclTimeout = 8 from 2.30.0; 8 is ncclNumResults in 2.28
        assert_eq!(ResultCode::Timeout.for_version(23003).code(), 8);
        assert_eq!(ResultCode::Timeout.for_version(22809).code(), 6);
        assert_eq!(ResultCode::Timeout.for_version(21300).code(), 6);
        assert_eq!(ResultCode::Timeout.for_version(21207).code(), 2);
        assert_eq!(ResultCode::RemoteError.for_version(21207).code(), 2);
        assert_eq!(ResultCode::InvalidUsage.for_version(21207).code(), 5);
    }

    #[test]
    fn display_names_code_and_rank() {
        let e = Error::new(ErrorKind::InvalidRoot, "root 4 is out of range").on_rank(2);
        assert_eq!(
            e.to_string(),
            "ncclInvalidArgument on rank 2: root 4 is out of range"
        );
        // the first rank set wins: errors relayed from another rank keep their origin
        assert_eq!(e.on_rank(3).rank, Some(2));
    }
}
