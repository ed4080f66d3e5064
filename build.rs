//! One name for a condition the library's code tests in many places:
//! `x86_simd` is set where the x86-64 vector code (the kernels' AVX2, FMA
//! and F16C paths, the streaming stores and prefetches) is compiled in,
//! on an x86-64 target outside Miri, which cannot run it.

fn main() {
    println!("cargo::rustc-check-cfg=cfg(x86_simd)");
    println!("cargo::rerun-if-changed=build.rs");
    let x86 = std::env::var("CARGO_CFG_TARGET_ARCH").as_deref() == Ok("x86_64");
    // cargo-miri runs build scripts natively and tells them so here
    let miri = std::env::var_os("CARGO_CFG_MIRI").is_some();
    if x86 && !miri {
        println!("cargo::rustc-cfg=x86_simd");
    }
}
