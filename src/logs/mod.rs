//! Reading NCCL-format INFO/WARN logs: parser and cross-rank analyzer.
