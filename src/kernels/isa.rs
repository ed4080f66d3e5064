//! Which instructions the kernels run with, chosen once per process from
//! what the CPU reports, and the entry points compiled for each. All of
//! the kernels' `unsafe` is here.
//!
//! The loops are the portable ones of `fold`, inlined into a function
//! compiled with more instructions enabled: on x86-64 with AVX2, FMA and
//! F16C (the x86-64-v3 level) the compiler vectorises them 8 floats wide
//! and the float and double Avg/PreMulSum step becomes one fused
//! multiply-add instruction instead of a libm call or an exact emulation.
//! Half's Sum, Avg and PreMulSum and bfloat16's Avg and PreMulSum take
//! explicit vector code here instead (the compiler cannot turn the
//! portable bit-level half conversions into F16C's, and its bfloat16 step
//! ran at a fifth of float's speed per byte, benches/kernels.rs). Every path computes the same values (the step is
//! rounded once on all of them; `tests` hold each path to an exact
//! reference and to each other), so which one runs never shows.

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

// ------------------------------------------------------------ half with F16C
//
// Half's steps widen to f32 (exact), compute there, and round back to
// half: the bit-level conversions of `arith` and F16C's `vcvtph2ps` /
// `vcvtps2ph` (immediate 0: to nearest, ties to even, whatever MXCSR says)
// give the same bits for every value, NaN aside, whose payload is not part
// of the contract (both set the quiet bit and keep the top bits). The sum
// and the fused step are the portable ones written 8 lanes wide, so the
// values are the same; the lanes past the last multiple of 8 take the
// portable element functions.

/// `acc[i] = rnd(x0[i] + x1[i])`; the slices are at least `acc`'s length.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn half_add(acc: &mut [half::f16], x0: &[half::f16], x1: &[half::f16]) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: the CPU has every feature the function is compiled with.
    unsafe { half_v3::add(acc, x0, x1) }
}

/// `acc[i] = rnd(acc[i] + x[i])`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn half_add_into(acc: &mut [half::f16], x: &[half::f16]) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_add`.
    unsafe { half_v3::add_into(acc, x) }
}

/// `acc[i] = rnd(x[i]·s)`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn half_scale(acc: &mut [half::f16], x: &[half::f16], s: half::f16) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_add`.
    unsafe { half_v3::scale(acc, x, s) }
}

/// `acc[i] = rnd(acc[i] + x[i]·s)`, rounded once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn half_premul_add(acc: &mut [half::f16], x: &[half::f16], s: half::f16) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_add`.
    unsafe { half_v3::premul_add(acc, x, s) }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod half_v3 {
    use super::super::Arith;
    use crate::core::datatype::f16_to_f32;
    use half::f16;
    use std::arch::x86_64::*;

    /// The 8 halves of `x` as floats (exact).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load(x: &[f16]) -> __m256 {
        let x = &x[..8];
        // SAFETY: `x` holds 8 halves, 16 bytes; the load is unaligned.
        let h = unsafe { _mm_loadu_si128(x.as_ptr().cast()) };
        _mm256_cvtph_ps(h)
    }

    /// 8 floats rounded to half into the 8 elements of `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn store(out: &mut [f16], v: __m256) {
        let out = &mut out[..8];
        let h = _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(v);
        // SAFETY: `out` holds 8 halves, 16 bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), h) }
    }

    /// `a + b` rounded to odd at f32's precision, 8 lanes: `fused`'s
    /// `add_odd_f32` (TwoSum, then one step to the odd neighbour when
    /// inexact and even) in vector form.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub(super) fn add_odd(a: __m256, b: __m256) -> __m256 {
        let s = _mm256_add_ps(a, b);
        let bb = _mm256_sub_ps(s, a);
        let e = _mm256_add_ps(_mm256_sub_ps(a, _mm256_sub_ps(s, bb)), _mm256_sub_ps(b, bb));
        let bits = _mm256_castps_si256(s);
        let one = _mm256_set1_epi32(1);
        let magnitude = _mm256_and_ps(s, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
        let finite = _mm256_cmp_ps::<_CMP_LT_OQ>(magnitude, _mm256_set1_ps(f32::INFINITY));
        let inexact = _mm256_cmp_ps::<_CMP_NEQ_OQ>(e, _mm256_setzero_ps());
        let mask = _mm256_castps_si256(_mm256_and_ps(inexact, finite));
        // +1 (away from zero) when e has s's sign, else -1
        let signs = _mm256_xor_si256(_mm256_castps_si256(e), bits);
        let step = _mm256_or_si256(_mm256_srai_epi32::<31>(signs), one);
        // all ones when the last bit is even
        let even = _mm256_sub_epi32(_mm256_and_si256(bits, one), one);
        let delta = _mm256_and_si256(_mm256_and_si256(step, even), mask);
        _mm256_castsi256_ps(_mm256_add_epi32(bits, delta))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn add(acc: &mut [f16], x0: &[f16], x1: &[f16]) {
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            store(&mut acc[i..], _mm256_add_ps(load(&x0[i..]), load(&x1[i..])));
        }
        for i in whole..acc.len() {
            acc[i] = f16::add(x0[i], x1[i]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn add_into(acc: &mut [f16], x: &[f16]) {
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let sum = _mm256_add_ps(load(&acc[i..]), load(&x[i..]));
            store(&mut acc[i..], sum);
        }
        for i in whole..acc.len() {
            acc[i] = f16::add(acc[i], x[i]);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scale(acc: &mut [f16], x: &[f16], s: f16) {
        let sv = _mm256_set1_ps(f16_to_f32(s));
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            // the product of two halves is exact in f32: one rounding
            store(&mut acc[i..], _mm256_mul_ps(load(&x[i..]), sv));
        }
        for i in whole..acc.len() {
            acc[i] = f16::mul(x[i], s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_add(acc: &mut [f16], x: &[f16], s: f16) {
        let sv = _mm256_set1_ps(f16_to_f32(s));
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let r = add_odd(load(&acc[i..]), _mm256_mul_ps(load(&x[i..]), sv));
            store(&mut acc[i..], r);
        }
        for i in whole..acc.len() {
            acc[i] = f16::premul_add(acc[i], x[i], s);
        }
    }
}

// -------------------------------------------------------- bfloat16 with AVX2
//
// Avg and PreMulSum only: Sum stays in the baseline's code (`arith`).
// bfloat16 is the top half of a float: widening is a shift, and rounding
// back is the integer rounding of `core::datatype::f32_to_bf16` (to nearest,
// ties to even; a NaN quiet with its payload's top bits), written 8 lanes
// wide. The fused step is `fused`'s block path per 8 lanes: through f32 when
// the 8 products are exact there, else those 8 lanes through the exact
// element step.

/// `acc[i] = rnd(x[i]·s)`.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn bf16_scale(acc: &mut [half::bf16], x: &[half::bf16], s: half::bf16) {
    assert!(Isa::X86V3.available(), "AVX2 needed");
    // SAFETY: the CPU has every feature the function is compiled with.
    unsafe { bf16_v3::scale(acc, x, s) }
}

/// `acc[i] = rnd(acc[i] + x[i]·s)`, rounded once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn bf16_premul_add(acc: &mut [half::bf16], x: &[half::bf16], s: half::bf16) {
    assert!(Isa::X86V3.available(), "AVX2 needed");
    // SAFETY: as in `bf16_scale`.
    unsafe { bf16_v3::premul_add(acc, x, s) }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod bf16_v3 {
    use super::super::Arith;
    use super::half_v3::add_odd;
    use crate::core::datatype::bf16_to_f32;
    use half::bf16;
    use std::arch::x86_64::*;

    /// The 8 bfloat16 of `x` as floats (exact: a shift).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load(x: &[bf16]) -> __m256 {
        let x = &x[..8];
        // SAFETY: `x` holds 8 bfloat16, 16 bytes; the load is unaligned.
        let h = unsafe { _mm_loadu_si128(x.as_ptr().cast()) };
        _mm256_castsi256_ps(_mm256_slli_epi32::<16>(_mm256_cvtepu16_epi32(h)))
    }

    /// 8 floats rounded to bfloat16 into the 8 elements of `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn store(out: &mut [bf16], v: __m256) {
        let out = &mut out[..8];
        let bits = _mm256_castps_si256(v);
        let lsb = _mm256_and_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(1));
        let bias = _mm256_add_epi32(_mm256_set1_epi32(0x7FFF), lsb);
        let rounded = _mm256_srli_epi32::<16>(_mm256_add_epi32(bits, bias));
        let quiet = _mm256_or_si256(_mm256_srli_epi32::<16>(bits), _mm256_set1_epi32(0x40));
        let magnitude = _mm256_and_si256(bits, _mm256_set1_epi32(i32::MAX));
        let nan = _mm256_cmpgt_epi32(magnitude, _mm256_set1_epi32(0x7F80_0000));
        let code = _mm256_blendv_epi8(rounded, quiet, nan);
        // 8 codes below 2^16 into 8 halves: pack within each 128-bit
        // lane, then gather the two lanes' low quarters
        let packed = _mm256_packus_epi32(code, code);
        let both = _mm256_permute4x64_epi64::<0b1000>(packed);
        // SAFETY: `out` holds 8 bfloat16, 16 bytes; the store is unaligned.
        unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), _mm256_castsi256_si128(both)) }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scale(acc: &mut [bf16], x: &[bf16], s: bf16) {
        let sv = _mm256_set1_ps(bf16_to_f32(s));
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            // the product rounded to f32, then to bfloat16, as `mul` does
            store(&mut acc[i..], _mm256_mul_ps(load(&x[i..]), sv));
        }
        for i in whole..acc.len() {
            acc[i] = bf16::mul(x[i], s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_add(acc: &mut [bf16], x: &[bf16], s: bf16) {
        let sw = bf16_to_f32(s);
        let sv = _mm256_set1_ps(sw);
        // a zero, infinite or NaN scalar makes every product exactly what
        // f32 computes
        let any_product = if sw == 0.0 || !sw.is_finite() { -1 } else { 0 };
        let always = _mm256_castsi256_ps(_mm256_set1_epi32(any_product));
        let abs = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        let inf = _mm256_set1_ps(f32::INFINITY);
        let min = _mm256_set1_ps(f32::MIN_POSITIVE);
        let whole = acc.len() / 8 * 8;
        for i in (0..whole).step_by(8) {
            let xv = load(&x[i..]);
            let p = _mm256_mul_ps(xv, sv);
            // exact in f32: normal and finite, or x zero, infinite or NaN
            let pm = _mm256_and_ps(p, abs);
            let in_range = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GE_OQ>(pm, min),
                _mm256_cmp_ps::<_CMP_LT_OQ>(pm, inf),
            );
            let x_zero = _mm256_cmp_ps::<_CMP_EQ_OQ>(xv, _mm256_setzero_ps());
            let x_special = _mm256_cmp_ps::<_CMP_NLT_UQ>(_mm256_and_ps(xv, abs), inf);
            let exact = _mm256_or_ps(
                _mm256_or_ps(in_range, always),
                _mm256_or_ps(x_zero, x_special),
            );
            if _mm256_movemask_ps(exact) == 0xFF {
                let r = add_odd(load(&acc[i..]), p);
                store(&mut acc[i..], r);
            } else {
                for k in i..i + 8 {
                    acc[k] = bf16::premul_add(acc[k], x[k], s);
                }
            }
        }
        for i in whole..acc.len() {
            acc[i] = bf16::premul_add(acc[i], x[i], s);
        }
    }
}
