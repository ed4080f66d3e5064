//! Embeds `librankwise_nccl.so` in the `rankwise` binary, for `rankwise
//! check`.
//!
//! The checker library is this package's build dependency (`rankwise-nccl`,
//! a cdylib), so cargo has linked it before this script runs, into the
//! `deps` folder of the host's profile directory: `OUT_DIR/../../../deps`
//! for a native build, `<target dir>/<profile>/deps` when `--target` is
//! given (build dependencies are always the host's). The script copies it
//! into `OUT_DIR` (so a later build of the workspace that relinks the
//! library cannot change the bytes between here and `include_bytes!`) and
//! names a digest of it for the file name the command writes it under.

use std::hash::Hasher;
use std::path::{Path, PathBuf};

const LIB: &str = "librankwise_nccl.so";

fn main() {
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let profile = std::env::var("PROFILE").expect("cargo sets PROFILE");
    let built = candidates(&out, &profile)
        .into_iter()
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{LIB} is not where cargo links the build dependency rankwise-nccl (looked in {})",
                candidates(&out, &profile)
                    .iter()
                    .map(|p| p.display().to_string())
                    .collect::<Vec<_>>()
                    .join(", ")
            )
        });
    println!("cargo:rerun-if-changed={}", built.display());
    let bytes = std::fs::read(&built).expect("the built checker library reads");
    let embedded = out.join(LIB);
    std::fs::write(&embedded, &bytes).expect("OUT_DIR is writable");
    // FNV-1a over the bytes: a name that changes with the library, not a
    // security property (the command compares the whole file anyway)
    let mut h = Fnv(0xcbf2_9ce4_8422_2325);
    h.write(&bytes);
    println!(
        "cargo:rustc-env=RANKWISE_CHECKER_PATH={}",
        embedded.display()
    );
    println!(
        "cargo:rustc-env=RANKWISE_CHECKER_DIGEST={:016x}",
        h.finish()
    );
}

/// Where cargo puts the host's build dependencies, native build first.
fn candidates(out: &Path, profile: &str) -> Vec<PathBuf> {
    let build = out.ancestors().nth(3).unwrap_or(out);
    let mut v = vec![build.join("deps").join(LIB)];
    // with --target: OUT_DIR is <target dir>/<triple>/<profile>/build/<pkg>/out
    if let Some(target_dir) = out.ancestors().nth(5) {
        v.push(target_dir.join(profile).join("deps").join(LIB));
    }
    v
}

struct Fnv(u64);

impl Hasher for Fnv {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for b in bytes {
            self.0 = (self.0 ^ u64::from(*b)).wrapping_mul(0x0000_0100_0000_01b3);
        }
    }
}
