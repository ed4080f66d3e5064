//! The tests' stand-in NCCL (`tests/standin/nccl.rs`: NCCL's C API over
//! host memory), built with the rustc cargo uses into `dir/libnccl.so.2`.
//! Shared by the interposer's tests and `examples/call_cost.rs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// Builds the stand-in into `dir` and returns the library's path.
pub fn build(dir: &Path) -> PathBuf {
    let out = dir.join("libnccl.so.2");
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/standin/nccl.rs");
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let st = Command::new(rustc)
        .args(["--edition", "2021", "--crate-type", "cdylib", "-O"])
        .args(["-A", "warnings"])
        .args(["-C", "link-arg=-Wl,-soname,libnccl.so.2", "-o"])
        .arg(&out)
        .arg(&src)
        .status()
        .expect("rustc runs");
    assert!(st.success(), "building the stand-in NCCL failed");
    out
}
