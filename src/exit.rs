//! How a rankwise process ends, shared by the commands and the launchers
//! that start rank processes: the exit codes, and the one way a failure is
//! said.
//!
//! Exit codes: 0 success; 1 a failed verification or bad input (with a
//! message saying what was expected); 2 a call the engine rejected (with its
//! `ncclResult_t` name), and clap's usage errors; 3 a contract violation
//! the checker found in a program `rankwise check` ran.

use std::process::ExitCode;

/// Exit code of a failed verification or bad input.
pub const FAILED: u8 = 1;
/// Exit code of a call the engine rejected.
pub const REJECTED: u8 = 2;
/// Exit code of `rankwise check` when the checker found a contract
/// violation in the program it ran, whatever that program's own code.
pub const VIOLATION: u8 = 3;

/// Prints `rankwise <cmd>: <msg>` to stderr and returns exit code 1.
pub fn fail(cmd: &str, msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("rankwise {cmd}: {msg}");
    ExitCode::from(FAILED)
}
