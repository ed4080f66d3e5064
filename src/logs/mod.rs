//! `rankwise logs`: reads the NCCL_DEBUG=INFO logs people already have and
//! diagnoses hangs and contract mismatches across ranks.
//!
//! This module owns everything about NCCL-format log text, and depends on
//! no other part of rankwise (it reads NCCL's logs and rankwise's own trace,
//! which prints the same lines). The pipeline, one file per stage:
//!
//! - [`parse`]: one line → one typed record (COLL call, init, WARN), on raw
//!   bytes, without allocating;
//! - [`ingest`]: files (plain or gzip, one rank or many interleaved) → per
//!   process, per comm pointer call streams, parsed in parallel segments,
//!   memory proportional to the calls kept;
//! - [`analyze`]: streams → communicators → findings (first divergence,
//!   unmatched Send/Recv, invalid arguments, zero-count calls) and a verdict;
//!   also the per-op call and byte summary;
//! - [`report`]: text and JSON;
//! - [`cli`]: the `rankwise logs` subcommands;
//! - `synth` (with the `synth` feature only): multi-rank logs generated
//!   with one injected fault, for the tests and the speed measurement.

pub mod analyze;
pub mod cli;
pub mod ingest;
pub mod model;
pub mod parse;
pub mod report;
#[cfg(feature = "synth")]
pub mod synth;

pub use analyze::{Analysis, Finding, FindingKind, Severity, Summary, analyze, summarize};
pub use ingest::{InputError, Options, collect, collect_bytes, expand_paths};
pub use model::Collected;

/// Read `paths` (files or directories) and analyze them.
pub fn analyze_paths(paths: &[std::path::PathBuf], opts: Options) -> Result<Analysis, InputError> {
    let files = expand_paths(paths)?;
    Ok(analyze(&collect(&files, opts)?))
}
