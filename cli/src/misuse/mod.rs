//! The misuse catalogue: programs that break a collective contract the way
//! real programs do, what NCCL 2.28.9 did with each (observed on an H200
//! with rankwise's checks off), and what rankwise must do instead: return the
//! expected error kind on every rank, fast, without touching memory outside
//! the call's legal outputs (every buffer sits between guard regions).
//!
//! `guards` owns the guarded buffers, `runner` runs one scenario on an
//! engine and judges it, `catalogue` holds the scenarios.

mod catalogue;
mod guards;
mod runner;

pub use catalogue::{catalogue, scenario};
pub use guards::Guards;
#[cfg(feature = "mpi")]
pub use runner::run_mpi;
pub use runner::{DEADLINE, Outcome, Program, RankOutcome, Scenario, expected, run, timeout};
