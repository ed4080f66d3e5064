//! The `rankwise` command line and the suites its commands run, on the
//! `rankwise` library.
//!
//! Layers, top calls down: `commands` (every command's arguments and code;
//! `main.rs` only routes) → `verify` (the conformance suites, their per-rank
//! records and proofs), `bench` (nccl-tests' sweep and table), `misuse`
//! (the catalogue of contract violations), `check` (what `rankwise check`
//! preloads, runs and concludes) → the library (`rankwise`: core,
//! transports, agreement, engines, api, launchers, logs).
//!
//! This crate is where the command line's dependencies live (clap, csv,
//! indicatif), so the library, and the checker loaded into other people's
//! jobs (`librankwise_nccl.so`), link none of them.

pub mod bench;
pub mod check;
pub mod commands;
pub mod misuse;
pub mod verify;

/// The most ranks the commands that start threads accept: the local engine
/// runs one thread per rank.
pub const MAX_LOCAL_RANKS: usize = 256;
