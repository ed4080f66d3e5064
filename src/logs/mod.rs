//! `rankwise logs`: reads the NCCL_DEBUG=INFO logs people already have and
//! diagnoses hangs and contract mismatches across ranks.
//!
//! This module owns everything about NCCL-format log text; it speaks
//! `core`'s vocabulary (op kinds, datatypes, reduction ops) and depends on
//! no other part of rankwise (it reads NCCL's logs and rankwise's own trace,
//! which prints the same lines). The pipeline, one file per stage:
//!
//! - [`parse`]: one line → one typed record (COLL call, init, WARN), on raw
//!   bytes, without allocating;
//! - [`ingest`]: files (plain or gzip, one rank or many interleaved) → the
//!   [`model`]: per process, per comm pointer call streams, parsed in
//!   parallel segments, memory proportional to the calls kept;
//! - [`resolve`]: streams → communicators, each stream with its rank;
//! - [`analyze`]: runs the checks on every communicator — the collective
//!   order ([`collectives`], which tells how the ranks' streams part with
//!   [`align`]), Send/Recv ([`p2p`]) — and on the WARN lines
//!   ([`warnings`]), then the [`verdict`]; what they report is in
//!   [`findings`];
//! - [`summary`]: calls and bytes per communicator, rank and op;
//! - [`report`]: text and JSON;
//! - `synth` (with the `synth` feature only): multi-rank logs generated
//!   with one injected fault, for the tests and the speed measurement.

pub mod align;
pub mod analyze;
pub mod collectives;
pub mod findings;
pub mod ingest;
pub mod model;
pub mod p2p;
pub mod parse;
pub mod report;
pub mod resolve;
pub mod summary;
#[cfg(feature = "synth")]
pub mod synth;
#[cfg(test)]
mod testlog;
pub mod verdict;
pub mod warnings;

pub use analyze::analyze;
pub use findings::{Analysis, Finding, FindingKind, Severity};
pub use ingest::{InputError, Options, collect, collect_bytes, expand_paths};
pub use model::Collected;
pub use summary::{Summary, summarize};

/// Read `paths` (files or directories) and analyze them.
pub fn analyze_paths(paths: &[std::path::PathBuf], opts: Options) -> Result<Analysis, InputError> {
    let files = expand_paths(paths)?;
    Ok(analyze(&collect(&files, opts)?))
}
