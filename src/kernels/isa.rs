//! Which instructions the kernels run with, chosen once per process from
//! what the CPU reports, and the entry points compiled for each. All of
//! the kernels' `unsafe` is here.
//!
//! The loops themselves are the portable ones of `fold`, inlined into a
//! function compiled with more instructions enabled: on x86-64 with AVX2,
//! FMA and F16C (the x86-64-v3 level) the compiler vectorises them 8 floats
//! wide and the float and double Avg/PreMulSum step becomes one fused
//! multiply-add instruction instead of a libm call or an exact emulation.
//! Every path computes the same values (the step is rounded once on all of
//! them; `tests` hold each path to an exact reference), so which one runs
//! is invisible in the results.

use super::Arith;
use crate::core::RedOp;

/// An instruction set the kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The target's baseline (SSE2 on x86-64); runs everywhere.
    Portable,
    /// AVX2, FMA and F16C.
    #[cfg(all(target_arch = "x86_64", not(miri)))]
    X86V3,
}

impl Isa {
    /// The best instruction set this CPU has.
    #[inline]
    pub fn detected() -> Isa {
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        if Isa::X86V3.available() {
            return Isa::X86V3;
        }
        Isa::Portable
    }

    /// Every instruction set this CPU has, the portable one first.
    pub fn all_available() -> Vec<Isa> {
        let all = [
            Isa::Portable,
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            Isa::X86V3,
        ];
        all.into_iter().filter(|i| i.available()).collect()
    }

    /// Whether this CPU has the instruction set (the standard library
    /// caches what the CPU reports, so this is a load and a test).
    #[inline]
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(all(target_arch = "x86_64", not(miri)))]
            Isa::X86V3 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
        }
    }
}

/// `fold::fold_blocks` compiled for x86-64-v3, after checking the CPU.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn fold_blocks_x86_v3<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    assert!(
        Isa::X86V3.available(),
        "the x86-64-v3 kernels need AVX2, FMA and F16C, which this CPU lacks"
    );
    // SAFETY: the CPU has every feature the function is compiled with
    // (checked just above); it is otherwise an ordinary safe function.
    unsafe { fold_blocks_v3(block, starts, op, nranks, input, emit) }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
#[target_feature(enable = "avx2,fma,f16c")]
fn fold_blocks_v3<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    super::fold::fold_blocks::<T, true>(block, starts, op, nranks, input, emit)
}
