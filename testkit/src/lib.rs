//! Test support the rankwise crates' tests share (not published):
//!
//! - [`engines`]: the one door every engine-parameterised test goes
//!   through, so an engine joins the whole suite by joining
//!   `EngineKind::ALL`;
//! - [`synth`]: multi-rank NCCL logs with one injected fault, for the
//!   integration tests, the examples and the speed measurement of
//!   `rankwise logs`.

pub mod engines;
pub mod synth;

/// Says on the real stderr that something was skipped: the test harness
/// captures `eprintln!` of passing tests, and a skip must be seen.
pub fn skipped(what: impl std::fmt::Display) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr().lock(), "SKIPPED: {what}");
}
