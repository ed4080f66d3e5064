//! The conformance suite: the seed chapter's experiment (实验设计 to
//! 正式实验结果) as a library, run by `rankwise verify` and read back by
//! `rankwise summarize`.
//!
//! This module owns:
//! - `cases`: the suites as data (seed, full), two layers each: native
//!   (raw face, explicit pointers) and framework (typed face);
//! - `reference`: expected values from closed-form formulas that never call
//!   the engine, and the full suite's exact-in-every-type inputs;
//! - `records`: one CSV row per (rank, case) written by that rank, the
//!   judgement of a row (element-wise equality), and the run's manifest;
//! - `runner`: running a layer on the local engine, one communicator per
//!   layer, trace captured;
//! - `evidence`: the seed's four log facts, read from that trace;
//! - `summary`: reading the CSVs back, checking them against the suite,
//!   and aggregating records.
//!
//! It does not own the contract itself: buffer sizes, roles and in-place
//! equations come from `core`, the calls from `api`.

pub mod cases;
pub mod evidence;
pub mod records;
pub mod reference;
pub mod runner;
pub mod summary;
