//! The `nccl` engine: every call on real NCCL, after the same checks,
//! trace and agreement as on the local engine. Layered as cudarc layers
//! CUDA libraries, each file with one job:
//!
//! - `library`: finding and loading libnccl (and the CUDA driver) at run
//!   time, and saying where it looked when it cannot;
//! - `ffi`: NCCL's entry points over cudarc's `nccl::sys` types, and the
//!   result codes;
//! - `cuda`: the driver calls (device, context, stream, copies) over
//!   cudarc's `driver::result`;
//! - `memory`: device allocations behind [`crate::engine::Memory`], with the
//!   allocation table the shared checks read;
//! - `engine`: one rank's communicator ([`NcclEngine`]).
//!
//! The launchers make the ranks: one process each (`launch::process`, the
//! usual way, and the only way to put several ranks on one GPU) or threads
//! of one process with one GPU each (`launch::nccl`).

pub mod cuda;
pub mod engine;
pub mod ffi;
pub mod library;
pub mod memory;
pub mod raw;

pub use engine::{NcclEngine, Options};

/// Ok when NCCL and a GPU are here; otherwise everything looked for.
pub fn available() -> std::result::Result<(), String> {
    let nccl = library::nccl().map_err(|e| e.to_string());
    let gpus = cuda::device_count().map_err(|e| e.message);
    match (nccl, gpus) {
        (Ok(_), Ok(n)) if n > 0 => Ok(()),
        (Ok(_), Ok(_)) => Err("the CUDA driver loads but reports no GPU".into()),
        (Err(e), Ok(_)) => Err(e),
        (Ok(_), Err(e)) => Err(e),
        (Err(a), Err(b)) => Err(format!("{a}; {b}")),
    }
}

/// `NCCL 2.28.9 (/path/libnccl.so.2, found via …)`, or why there is none.
pub fn describe() -> String {
    match library::nccl() {
        Ok(n) => n.describe(),
        Err(e) => e.to_string(),
    }
}

/// GPUs the driver reports (0 without a driver).
pub fn device_count() -> usize {
    cuda::device_count().unwrap_or(0)
}
