//! Reading NCCL-format INFO/WARN logs: parser and cross-rank analyzer.

pub mod ingest;
pub mod parse;
