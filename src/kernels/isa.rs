//! Which instructions the kernels run with, chosen once per process from
//! what the CPU reports, and the entry points compiled for each. All of
//! the kernels' `unsafe` is here.
//!
//! The loops are the portable ones of `fold`, inlined into a function
//! compiled with more instructions enabled: on x86-64 with AVX2, FMA and
//! F16C (the x86-64-v3 level) the compiler vectorises them 8 floats wide
//! and the float and double Avg/PreMulSum step becomes one fused
//! multiply-add instruction instead of a libm call or an exact emulation.
//! Half's and bfloat16's Sum, Avg and PreMulSum take explicit vector code
//! here instead (the compiler cannot turn the portable bit-level half
//! conversions into F16C's, and its bfloat16 loops ran at a fifth of
//! float's speed per byte, benches/kernels.rs). Their fused step is the
//! f32 FMA alone where the scalar has no significand bits (a power of two:
//! every Avg with N a power of two), where rounding that to 16 bits
//! rounds the exact value once (the sections below say why); otherwise
//! the f32 sum, unless a lane lands exactly on a 16-bit midpoint without
//! being exact, which bfloat16 settles with an error term and half by
//! rounding the sum to odd.
//! Every path computes the same values (the step is rounded once on all
//! of them; `tests` hold each path to an exact reference and to each
//! other, the 16-bit blocks on every value of the type), so which one
//! runs never shows.

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

/// How the 16-bit types' fused step `rnd(acc + x·s)` is computed for a
/// given scalar (each type's `step_for` says which scalars take which).
#[cfg(all(target_arch = "x86_64", not(miri)))]
type Step = u8;
/// The f32 FMA alone: rounding it to 16 bits rounds the exact value once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
const FMA: Step = 0;
/// The f32 sum, and a correction for the lanes that may land on a 16-bit
/// midpoint without being exact; every product `x·s` is exact in f32.
#[cfg(all(target_arch = "x86_64", not(miri)))]
const SUM: Step = 1;
/// As [`SUM`], for scalars small enough that products may fall below the
/// 16-bit type's normals (half) or be inexact in f32 (bfloat16).
#[cfg(all(target_arch = "x86_64", not(miri)))]
const SUM_TINY: Step = 2;

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

/// `acc[i] = rnd(rnd(x0[i]·s) + x1[i]·s)`, the sum rounded once.
#[cfg(all(target_arch = "x86_64", not(miri)))]
#[inline]
pub(super) fn half_premul_two(
    acc: &mut [half::f16],
    x0: &[half::f16],
    x1: &[half::f16],
    s: half::f16,
) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_add`.
    unsafe { half_v3::premul_two(acc, x0, x1, s) }
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod half_v3 {
    use super::super::Arith;
    use super::{FMA, SUM, SUM_TINY, Step};
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
    /// inexact and even) in vector form. `s` is `a + b` rounded to nearest.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn add_odd(a: __m256, b: __m256, s: __m256) -> __m256 {
        let e = two_sum_error(a, b, s);
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

    /// TwoSum: `a + b - s` exactly, for `s` the sum rounded to nearest.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn two_sum_error(a: __m256, b: __m256, s: __m256) -> __m256 {
        let bb = _mm256_sub_ps(s, a);
        _mm256_add_ps(_mm256_sub_ps(a, _mm256_sub_ps(s, bb)), _mm256_sub_ps(b, bb))
    }

    /// `acc + p` rounded to f32 such that rounding the result to half
    /// rounds the exact sum once. The sum rounded to nearest does, unless a
    /// lane lands exactly on a midpoint between two halves without being
    /// exact: rounding to nearest at 24 bits never crosses a midpoint,
    /// which f32 holds, so a result off every midpoint lies on the exact
    /// sum's side of each. A lane whose `acc` is zero is exact (the sum is
    /// `p`), and so is one below half's normals unless `TINY` (see
    /// [`Step`]); the midpoints checked are those of half's normals. Only
    /// vectors with a lane left pay TwoSum, and only those where that
    /// lane's sum was inexact the rounding to odd.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn settled<const TINY: bool>(acc: __m256, p: __m256) -> __m256 {
        let r = _mm256_add_ps(acc, p);
        let bits = _mm256_castps_si256(r);
        // half's last bit is f32's bit 13; a midpoint has bit 12 set and
        // the bits below it clear
        let low = _mm256_and_si256(bits, _mm256_set1_epi32(0x1FFF));
        let mut suspect = _mm256_castsi256_ps(_mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x1000)));
        if TINY {
            let a = _mm256_and_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
            let low_range =
                _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(f32::from_bits(0x3880_0000)));
            let tiny = _mm256_and_ps(
                low_range,
                _mm256_cmp_ps::<_CMP_GT_OQ>(a, _mm256_setzero_ps()),
            );
            suspect = _mm256_or_ps(suspect, tiny);
        }
        let nonzero = _mm256_cmp_ps::<_CMP_NEQ_OQ>(acc, _mm256_setzero_ps());
        let suspect = _mm256_and_ps(suspect, nonzero);
        if _mm256_testz_ps(suspect, suspect) != 0 {
            return r;
        }
        let e = two_sum_error(acc, p, r);
        let inexact = _mm256_cmp_ps::<_CMP_NEQ_UQ>(e, _mm256_setzero_ps());
        let wrong = _mm256_and_ps(suspect, inexact);
        if _mm256_testz_ps(wrong, wrong) != 0 {
            return r;
        }
        add_odd(acc, p, r)
    }

    // Sum's loops run once per block of a few cache lines (the engines'
    // blocks): the chunks carry their length, so the loop has no bounds
    // checks, and the few lanes past the last whole vector (none in the
    // engines' blocks) go through a function of their own, which keeps the
    // loop small enough to inline into the fold.

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub fn add(acc: &mut [f16], x0: &[f16], x1: &[f16]) {
        let len = acc.len();
        let (x0, x1) = (&x0[..len], &x1[..len]);
        let mut out = acc.chunks_exact_mut(8);
        for ((o, a), b) in (&mut out).zip(x0.chunks_exact(8)).zip(x1.chunks_exact(8)) {
            store(o, _mm256_add_ps(load(a), load(b)));
        }
        let rest = out.into_remainder();
        if !rest.is_empty() {
            let at = len - rest.len();
            add_rest(rest, &x0[at..], &x1[at..]);
        }
    }

    #[inline(never)]
    fn add_rest(acc: &mut [f16], x0: &[f16], x1: &[f16]) {
        for ((o, a), b) in acc.iter_mut().zip(x0).zip(x1) {
            *o = f16::add(*a, *b);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub fn add_into(acc: &mut [f16], x: &[f16]) {
        let len = acc.len();
        let x = &x[..len];
        let mut out = acc.chunks_exact_mut(8);
        for (o, b) in (&mut out).zip(x.chunks_exact(8)) {
            let sum = _mm256_add_ps(load(o), load(b));
            store(o, sum);
        }
        let rest = out.into_remainder();
        if !rest.is_empty() {
            let at = len - rest.len();
            for (o, b) in rest.iter_mut().zip(&x[at..]) {
                *o = f16::add(*o, *b);
            }
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

    /// With `s` a power of two, zero, infinite or NaN (no stored
    /// significand bits), [`FMA`]: `x·s` then has at most 11 significant
    /// bits, like `acc`, and the f32 FMA rounds the exact sum once at 24
    /// bits: for that to be inexact the two terms must be 13 binades apart,
    /// and then the sum is the larger term, a half value, moved by less
    /// than a 2^-12 fraction (never onto a midpoint), or the larger term
    /// exactly (a midpoint only when `x·s` is below half's normals, where
    /// any nonzero `acc`, at least 2^-24, is within f32's 24 bits of it and
    /// the sum is exact): rounding it to half rounds the exact value once.
    /// With any other `s` of at least 2^-4 in magnitude, [`SUM`]: `x` is a
    /// multiple of 2^-24 and `s` of 2^-14, so the exact sum is a multiple
    /// of 2^-38 and, below half's normals (2^-14), has at most 24
    /// significant bits: the f32 sum is exact there and needs no check.
    /// Smaller scalars: [`SUM_TINY`].
    #[inline(always)]
    fn step_for(s: f16) -> Step {
        let bits = s.to_bits();
        if bits & 0x3FF == 0 {
            FMA
        } else if (bits >> 10) & 0x1F >= 15 - 4 {
            SUM
        } else {
            SUM_TINY
        }
    }

    /// The fused step on 8 lanes, rounded to f32 such that rounding the
    /// result to half rounds the exact `acc + x·s` once.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn step<const STEP: Step>(acc: __m256, x: __m256, sv: __m256) -> __m256 {
        match STEP {
            FMA => _mm256_fmadd_ps(x, sv, acc),
            // the product of two halves is exact in f32
            SUM => settled::<false>(acc, _mm256_mul_ps(x, sv)),
            _ => settled::<true>(acc, _mm256_mul_ps(x, sv)),
        }
    }

    /// Whether some lane of `p` is below half's normals without being
    /// zero (NaN is not).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn below_normal(p: __m256) -> bool {
        let a = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
        let low = _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(f32::from_bits(0x3880_0000)));
        let tiny = _mm256_and_ps(low, _mm256_cmp_ps::<_CMP_GT_OQ>(a, _mm256_setzero_ps()));
        _mm256_testz_ps(tiny, tiny) == 0
    }

    /// The first pair, `rnd(x0·s)` then the step. With `s` a power of two
    /// no larger than 1 in magnitude, or zero (`shrinks`: every Avg at a
    /// power-of-two N), `x0·s` is exact in f32 and, unless it falls below
    /// half's normals without being zero, a half value itself (at most 11
    /// significant bits, an exponent no larger than `x0`'s; an infinite or
    /// NaN `x0` gives an infinite or NaN product, NaN payloads aside): then
    /// `rnd(x0·s)` is the product, and 8 lanes skip F16C's round trip,
    /// which the conversions' throughput on Zen 1 makes the larger part of
    /// the pair's time.
    #[target_feature(enable = "avx2,fma,f16c")]
    fn premul_two_with<const STEP: Step>(acc: &mut [f16], x0: &[f16], x1: &[f16], s: f16) {
        let sv = _mm256_set1_ps(f16_to_f32(s));
        let shrinks = STEP == FMA && f16_to_f32(s).abs() <= 1.0;
        let len = acc.len();
        let (x0, x1) = (&x0[..len], &x1[..len]);
        let mut out = acc.chunks_exact_mut(8);
        for ((o, a), b) in (&mut out).zip(x0.chunks_exact(8)).zip(x1.chunks_exact(8)) {
            let p = _mm256_mul_ps(load(a), sv);
            let first = if shrinks && !below_normal(p) {
                p
            } else {
                // rnd(x0·s), as half and back (exact)
                _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(p))
            };
            store(o, step::<STEP>(first, load(b), sv));
        }
        let rest = out.into_remainder();
        let at = len - rest.len();
        for ((o, a), b) in rest.iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
            *o = f16::premul_add(f16::mul(*a, s), *b, s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_two(acc: &mut [f16], x0: &[f16], x1: &[f16], s: f16) {
        match step_for(s) {
            FMA => premul_two_with::<FMA>(acc, x0, x1, s),
            SUM => premul_two_with::<SUM>(acc, x0, x1, s),
            _ => premul_two_with::<SUM_TINY>(acc, x0, x1, s),
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn premul_add_with<const STEP: Step>(acc: &mut [f16], x: &[f16], s: f16) {
        let sv = _mm256_set1_ps(f16_to_f32(s));
        let len = acc.len();
        let x = &x[..len];
        let mut out = acc.chunks_exact_mut(8);
        for (o, b) in (&mut out).zip(x.chunks_exact(8)) {
            let r = step::<STEP>(load(o), load(b), sv);
            store(o, r);
        }
        let rest = out.into_remainder();
        let at = len - rest.len();
        for (o, b) in rest.iter_mut().zip(&x[at..]) {
            *o = f16::premul_add(*o, *b, s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_add(acc: &mut [f16], x: &[f16], s: f16) {
        match step_for(s) {
            FMA => premul_add_with::<FMA>(acc, x, s),
            SUM => premul_add_with::<SUM>(acc, x, s),
            _ => premul_add_with::<SUM_TINY>(acc, x, s),
        }
    }
}

// -------------------------------------------------------- bfloat16 with AVX2
//
// bfloat16 is the top half of a float: 16 elements load as one 256-bit
// register whose 32-bit lanes hold two elements each, the odd-indexed one
// already in the top half (masking off the low half gives it as a float)
// and the even-indexed one in the low half (a shift up gives it). Each
// half is computed 8 lanes wide as floats, and the results go back into
// one register by a shift and a 16-bit blend, all within the 128-bit
// halves of the register (Zen 1 executes 256-bit operations as two
// 128-bit ones; an operation across the halves costs more).
//
// Rounding back is the integer rounding of `core::datatype::f32_to_bf16`
// (add 0x7FFF plus the kept part's last bit, keep the top half). That
// function also passes a NaN's top bits through rather than rounding them;
// here no NaN has a nonzero low half (every NaN is a widened input, which
// the float operations return quiet with its bits, or the default NaN), so
// the addition cannot carry into the kept part and gives the same quiet
// NaN.
//
// The fused step `rnd(acc + x·s)`, acc a bfloat16 value: `fma(x, s, acc)`
// in f32 is the exact value rounded once at 24 bits, and rounding that to
// bfloat16 rounds the exact value once unless it landed exactly on a
// midpoint between two bfloat16 values without being exact (double
// rounding: the ulps of f32 and bfloat16 differ by 2^16 in every binade,
// subnormals included, so a value that is not on a midpoint is on the
// same side of every midpoint as the exact value). Two cases:
//
// - `s` a power of two (every Avg with N a power of two), zero, infinite
//   or NaN: never. `x·s` then has at most 8 significant bits, like `acc`.
//   An inexact f32 sum needs the two terms 16 binades apart, and then the
//   larger one decides: if it is `acc`, a bfloat16 value, the sum lies
//   within a 2^-16 fraction of it, nowhere near a midpoint; if it is `x·s`,
//   the sum's bits below the larger term's 8 are either nonzero (not a
//   midpoint) or it equals `x·s` exactly, which is only a midpoint when
//   `x·s` is in bfloat16's subnormal range, where every nonzero `acc`
//   (at least 2^-133) is within 24 bits of it and the sum is exact.
// - any other `s`: a lane of the f32 result that is a midpoint takes the
//   direction of the exact value from TwoSum's error term (exact when
//   `x·s` is exact in f32, i.e. not below 2^-134 nor past the largest
//   float; lanes where that fails go through the portable element step).
//   With `s` of at least 2^-9 every finite product is exact, and a lane on
//   a midpoint can be inexact only when `x·s` is 17 or more binades above
//   `acc` (`far_apart`), so the error term is computed for the vectors
//   with such a lane alone: real data and the benchmark's small integers
//   land on midpoints often, but with their terms that far apart rarely.

#[cfg(all(target_arch = "x86_64", not(miri)))]
macro_rules! bf16_entry {
    ($($(#[$doc:meta])* $name:ident => $inner:ident($($arg:ident: $t:ty),*);)*) => {$(
        $(#[$doc])*
        #[cfg(all(target_arch = "x86_64", not(miri)))]
        #[inline]
        pub(super) fn $name($($arg: $t),*) {
            assert!(Isa::X86V3.available(), "AVX2 and FMA needed");
            // SAFETY: the CPU has every feature the function is compiled
            // with (checked just above); it is otherwise an ordinary safe
            // function.
            unsafe { bf16_v3::$inner($($arg),*) }
        }
    )*};
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
use half::bf16;

#[cfg(all(target_arch = "x86_64", not(miri)))]
bf16_entry! {
    /// `acc[i] = rnd(x0[i] + x1[i])`; the slices are at least `acc`'s length.
    bf16_add => add(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]);
    /// `acc[i] = rnd(acc[i] + x[i])`.
    bf16_add_into => add_into(acc: &mut [bf16], x: &[bf16]);
    /// `acc[i] = rnd(x[i]·s)`.
    bf16_scale => scale(acc: &mut [bf16], x: &[bf16], s: bf16);
    /// `acc[i] = rnd(rnd(x0[i]·s) + x1[i]·s)`, the sum rounded once.
    bf16_premul_two => premul_two(acc: &mut [bf16], x0: &[bf16], x1: &[bf16], s: bf16);
    /// `acc[i] = rnd(acc[i] + x[i]·s)`, rounded once.
    bf16_premul_add => premul_add(acc: &mut [bf16], x: &[bf16], s: bf16);
}

#[cfg(all(target_arch = "x86_64", not(miri)))]
mod bf16_v3 {
    use super::super::Arith;
    use super::{FMA, SUM, SUM_TINY, Step};
    use crate::core::datatype::bf16_to_f32;
    use half::bf16;
    use std::arch::x86_64::*;

    /// The top half of a 32-bit lane.
    const HIGH: i32 = 0xFFFF_0000_u32 as i32;

    /// 16 bfloat16 of `x` as floats (exact): the even-indexed elements'
    /// lanes and the odd-indexed ones'.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn load(x: &[bf16]) -> (__m256, __m256) {
        let x = &x[..16];
        // SAFETY: `x` holds 16 bfloat16, 32 bytes; the load is unaligned.
        let v = unsafe { _mm256_loadu_si256(x.as_ptr().cast()) };
        let even = _mm256_slli_epi32::<16>(v);
        let odd = _mm256_and_si256(v, _mm256_set1_epi32(HIGH));
        (_mm256_castsi256_ps(even), _mm256_castsi256_ps(odd))
    }

    /// `v` rounded to bfloat16 (to nearest, ties to even) in each lane's
    /// top half; the low half is left over (see the section's comment).
    /// `0x7FFF` plus the kept part's last bit is written as `0x8000` minus
    /// one where that bit is 0: a compare instead of a shift, which ran a
    /// few percent faster on the project's Zen 1 machine.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn round(v: __m256) -> __m256i {
        let bits = _mm256_castps_si256(v);
        let last = _mm256_and_si256(bits, _mm256_set1_epi32(0x1_0000));
        let even = _mm256_cmpeq_epi32(last, _mm256_setzero_si256());
        _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x8000)), even)
    }

    /// [`round`] as a float: the bfloat16 value, exact.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn rounded(v: __m256) -> __m256 {
        _mm256_castsi256_ps(_mm256_and_si256(round(v), _mm256_set1_epi32(HIGH)))
    }

    /// The top halves of the even- and odd-indexed lanes of [`load`]'s
    /// layout into the 16 elements of `out`.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn store(out: &mut [bf16], even: __m256i, odd: __m256i) {
        let out = &mut out[..16];
        let v = _mm256_blend_epi16::<0xAA>(_mm256_srli_epi32::<16>(even), odd);
        // SAFETY: `out` holds 16 bfloat16, 32 bytes; the store is unaligned.
        unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
    }

    // Sum's loops as half's (see there): no bounds checks in the loop, the
    // lanes past the last whole vector out of it.

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn sum16((ae, ao): (__m256, __m256), b: &[bf16]) -> (__m256i, __m256i) {
        let (be, bo) = load(b);
        (round(_mm256_add_ps(ae, be)), round(_mm256_add_ps(ao, bo)))
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub fn add(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]) {
        let len = acc.len();
        let (x0, x1) = (&x0[..len], &x1[..len]);
        let mut out = acc.chunks_exact_mut(16);
        for ((o, a), b) in (&mut out).zip(x0.chunks_exact(16)).zip(x1.chunks_exact(16)) {
            let (e, od) = sum16(load(a), b);
            store(o, e, od);
        }
        let rest = out.into_remainder();
        if !rest.is_empty() {
            let at = len - rest.len();
            add_rest(rest, &x0[at..], &x1[at..]);
        }
    }

    #[inline(never)]
    fn add_rest(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]) {
        for ((o, a), b) in acc.iter_mut().zip(x0).zip(x1) {
            *o = bf16::add(*a, *b);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    pub fn add_into(acc: &mut [bf16], x: &[bf16]) {
        let len = acc.len();
        let x = &x[..len];
        let mut out = acc.chunks_exact_mut(16);
        for (o, b) in (&mut out).zip(x.chunks_exact(16)) {
            let (e, od) = sum16(load(o), b);
            store(o, e, od);
        }
        let rest = out.into_remainder();
        if !rest.is_empty() {
            let at = len - rest.len();
            for (o, b) in rest.iter_mut().zip(&x[at..]) {
                *o = bf16::add(*o, *b);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn scale(acc: &mut [bf16], x: &[bf16], s: bf16) {
        let sv = _mm256_set1_ps(bf16_to_f32(s));
        let whole = acc.len() / 16 * 16;
        for i in (0..whole).step_by(16) {
            // the product rounded to f32, then to bfloat16, as `mul` does
            let (xe, xo) = load(&x[i..]);
            store(
                &mut acc[i..],
                round(_mm256_mul_ps(xe, sv)),
                round(_mm256_mul_ps(xo, sv)),
            );
        }
        for i in whole..acc.len() {
            acc[i] = bf16::mul(x[i], s);
        }
    }

    /// [`FMA`] for `s` a power of two, zero, infinite or NaN (no stored
    /// significand bits), the section's first case. Any other `s` of at
    /// least 2^-9 in magnitude: [`SUM`]. `x` is a multiple of 2^-133 and
    /// `s` of 2^-16, so `x·s` is a multiple of 2^-149, f32's smallest
    /// subnormal, with at most 16 significant bits: exact in f32 unless it
    /// overflows, and then the sum is infinite in f32 and in bfloat16
    /// alike. Smaller scalars: [`SUM_TINY`].
    #[inline(always)]
    fn step_for(s: bf16) -> Step {
        let bits = s.to_bits();
        if bits & 0x7F == 0 {
            FMA
        } else if (bits >> 7) & 0xFF >= 127 - 9 {
            SUM
        } else {
            SUM_TINY
        }
    }

    /// Whether each lane's f32 sum `acc + p` may land on a bfloat16
    /// midpoint without being exact (all ones) or cannot (zero), `acc` a
    /// bfloat16 value and `p` a product exact in f32 (at most 16
    /// significant bits). Inexact needs a set bit below the sum's f32 unit,
    /// and that unit is at most 2^-23 of the sum's top bit, one above the
    /// larger term's at most.
    ///
    /// - `acc` the larger term: a midpoint `r` is `acc` plus an odd
    ///   multiple of half `acc`'s bfloat16 unit (a quarter of it after a
    ///   borrow into the binade below, a whole one after a carry into the
    ///   one above), and `p` is within half an f32 unit of `r − acc`. So
    ///   `p` reaches that high, and its 16 bits then end no lower than the
    ///   sum's f32 unit: the sum is exact. The one `p` that falls short,
    ///   sixteen ones ending half an f32 unit below, is not a product of
    ///   two bfloat16 significands (2^16 − 1 = 255·257; the largest such
    ///   product is 255² = 65025).
    /// - `p` the larger term: `acc`'s bits, at most 8, end within the
    ///   sum's 24 unless `acc`'s top bit lies 17 or more binades below
    ///   `p`'s, which `|p| > 2^16·|acc|` flags (a zero `acc` leaves `p`
    ///   itself).
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn far_apart(acc: __m256, p: __m256) -> __m256i {
        let magnitude = _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX));
        let a = _mm256_and_ps(acc, magnitude);
        let b = _mm256_and_ps(p, magnitude);
        // exact: a power of two times a bfloat16 value below 2^128
        let scaled = _mm256_mul_ps(a, _mm256_set1_ps(65536.0));
        let far = _mm256_and_ps(
            _mm256_cmp_ps::<_CMP_GT_OQ>(b, scaled),
            _mm256_cmp_ps::<_CMP_NEQ_OQ>(a, _mm256_setzero_ps()),
        );
        _mm256_castps_si256(far)
    }

    /// The fused step on 8 lanes: the rounded bits, and the lanes whose
    /// midpoint direction this could not settle (movemask bits; only
    /// [`SUM_TINY`] has any), which the caller computes again with the
    /// element step. [`SUM`] looks at a lane on a midpoint only when its
    /// terms are [`far_apart`], so most midpoints, which are exact, cost
    /// no error term.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn step<const STEP: Step>(acc: __m256, x: __m256, sv: __m256) -> (__m256i, i32) {
        let s = _mm256_fmadd_ps(x, sv, acc);
        if STEP == FMA {
            return (round(s), 0);
        }
        let bits = _mm256_castps_si256(s);
        let low = _mm256_and_si256(bits, _mm256_set1_epi32(0xFFFF));
        let mut mid = _mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x8000));
        if _mm256_testz_si256(mid, mid) == 1 {
            return (round(s), 0);
        }
        let p = _mm256_mul_ps(x, sv);
        if STEP == SUM {
            mid = _mm256_and_si256(mid, far_apart(acc, p));
            if _mm256_testz_si256(mid, mid) == 1 {
                return (round(s), 0);
            }
        }
        // TwoSum: e = acc + p − s exactly, when p = x·s is exact
        let bb = _mm256_sub_ps(s, acc);
        let e = _mm256_add_ps(
            _mm256_sub_ps(acc, _mm256_sub_ps(s, bb)),
            _mm256_sub_ps(p, bb),
        );
        let unsettled = if STEP == SUM {
            0
        } else {
            // p is exact in f32 when it is at least 2^-134 (its 16 bits
            // then reach no lower than 2^-149) and finite
            let pm = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
            let p_ok = _mm256_and_ps(
                _mm256_cmp_ps::<_CMP_GE_OQ>(pm, _mm256_set1_ps(f32::from_bits(1 << 15))),
                _mm256_cmp_ps::<_CMP_LT_OQ>(pm, _mm256_set1_ps(f32::INFINITY)),
            );
            _mm256_movemask_ps(_mm256_andnot_ps(p_ok, _mm256_castsi256_ps(mid)))
        };
        // at a midpoint that is not the exact value, one f32 unit towards
        // it: +1 on the bits when e has s's sign (away from zero), else −1
        let inexact = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_NEQ_OQ>(e, _mm256_setzero_ps()));
        let signs = _mm256_xor_si256(_mm256_castps_si256(e), bits);
        let step = _mm256_or_si256(_mm256_srai_epi32::<31>(signs), _mm256_set1_epi32(1));
        let delta = _mm256_and_si256(_mm256_and_si256(mid, inexact), step);
        let stepped = _mm256_castsi256_ps(_mm256_add_epi32(bits, delta));
        (round(stepped), unsettled)
    }

    /// `premul_two` for the 16 elements of the chunks. `rnd(x0·s)` is the
    /// f32 product itself when the product's low halves are all zero (a
    /// bfloat16 value already: the rounding adds less than a unit of the
    /// kept part and the mask removes it), as it is on most data with a
    /// power-of-two `s`; the check is cheaper than the rounding.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn premul_two_16<const STEP: Step>(
        out: &mut [bf16],
        x0: &[bf16],
        x1: &[bf16],
        s: bf16,
        sv: __m256,
    ) {
        let (ae, ao) = load(x0);
        let (pe, po) = (_mm256_mul_ps(ae, sv), _mm256_mul_ps(ao, sv));
        let low = _mm256_or_si256(_mm256_castps_si256(pe), _mm256_castps_si256(po));
        let (ae, ao) = if STEP == FMA && _mm256_testz_si256(low, _mm256_set1_epi32(0xFFFF)) == 1 {
            (pe, po)
        } else {
            (rounded(pe), rounded(po))
        };
        let (xe, xo) = load(x1);
        let (re, ue) = step::<STEP>(ae, xe, sv);
        let (ro, uo) = step::<STEP>(ao, xo, sv);
        store(out, re, ro);
        if ue | uo != 0 {
            for ((o, a), b) in out.iter_mut().zip(x0).zip(x1) {
                *o = bf16::premul_add(bf16::mul(*a, s), *b, s);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn premul_two_with<const STEP: Step>(acc: &mut [bf16], x0: &[bf16], x1: &[bf16], s: bf16) {
        let sv = _mm256_set1_ps(bf16_to_f32(s));
        let len = acc.len();
        let (x0, x1) = (&x0[..len], &x1[..len]);
        let mut out = acc.chunks_exact_mut(16);
        for ((o, a), b) in (&mut out).zip(x0.chunks_exact(16)).zip(x1.chunks_exact(16)) {
            premul_two_16::<STEP>(o, a, b, s, sv);
        }
        let rest = out.into_remainder();
        let at = len - rest.len();
        for ((o, a), b) in rest.iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
            *o = bf16::premul_add(bf16::mul(*a, s), *b, s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_two(acc: &mut [bf16], x0: &[bf16], x1: &[bf16], s: bf16) {
        match step_for(s) {
            FMA => premul_two_with::<FMA>(acc, x0, x1, s),
            SUM => premul_two_with::<SUM>(acc, x0, x1, s),
            _ => premul_two_with::<SUM_TINY>(acc, x0, x1, s),
        }
    }

    /// `premul_add` for the 16 elements of the chunks.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn premul_add_16<const STEP: Step>(out: &mut [bf16], x: &[bf16], s: bf16, sv: __m256) {
        let (ae, ao) = load(out);
        let (xe, xo) = load(x);
        let (re, ue) = step::<STEP>(ae, xe, sv);
        let (ro, uo) = step::<STEP>(ao, xo, sv);
        if ue | uo == 0 {
            store(out, re, ro);
        } else {
            for (o, b) in out.iter_mut().zip(x) {
                *o = bf16::premul_add(*o, *b, s);
            }
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    fn premul_add_with<const STEP: Step>(acc: &mut [bf16], x: &[bf16], s: bf16) {
        let sv = _mm256_set1_ps(bf16_to_f32(s));
        let len = acc.len();
        let x = &x[..len];
        let mut out = acc.chunks_exact_mut(16);
        for (o, b) in (&mut out).zip(x.chunks_exact(16)) {
            premul_add_16::<STEP>(o, b, s, sv);
        }
        let rest = out.into_remainder();
        let at = len - rest.len();
        for (o, b) in rest.iter_mut().zip(&x[at..]) {
            *o = bf16::premul_add(*o, *b, s);
        }
    }

    #[target_feature(enable = "avx2,fma,f16c")]
    pub fn premul_add(acc: &mut [bf16], x: &[bf16], s: bf16) {
        match step_for(s) {
            FMA => premul_add_with::<FMA>(acc, x, s),
            SUM => premul_add_with::<SUM>(acc, x, s),
            _ => premul_add_with::<SUM_TINY>(acc, x, s),
        }
    }
}
