//! How a rankwise process ends, shared by the commands and the launchers
//! that start rank processes: the exit codes, and the one way a failure is
//! said.
//!
//! Exit codes: 0 success; 1 a failed verification or bad input (with a
//! message saying what was expected); 2 a call the engine rejected (with its
//! `ncclResult_t` name), and clap's usage errors.

use std::process::ExitCode;

/// Exit code of a failed verification or bad input.
pub const FAILED: u8 = 1;
/// Exit code of a call the engine rejected.
pub const REJECTED: u8 = 2;

/// Prints `rankwise <cmd>: <msg>` to stderr and returns exit code 1.
pub fn fail(cmd: &str, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("rankwise {cmd}: {msg}");
    ExitCode::from(FAILED)
}
