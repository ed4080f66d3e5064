//! Half's block kernels with F16C: 8 lanes widened to f32 (exact),
//! computed there and rounded back (see the section in `isa.rs` for how
//! the conversions match the portable ones).

use super::super::Arith;
use super::super::arith::{Combine, combine as element};
use super::super::fold::{PremulSteps, premul_fold};
use super::{FMA, SUM, SUM_TINY, Step, apply, two_sum_error};
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

/// The lanes of `r = acc + p` (rounded to nearest in f32) that may round
/// to half the wrong way: rounding to nearest at 24 bits never crosses a
/// midpoint between two halves, which f32 holds, so a result off every
/// midpoint lies on the exact sum's side of each, and only a lane landing
/// exactly on one can be wrong. A lane whose `acc` is zero is exact (the
/// sum is `p`), and so is one below half's normals unless `TINY` (see
/// [`Step`]); the midpoints checked are those of half's normals.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn suspects<const TINY: bool>(acc: __m256, r: __m256) -> __m256 {
    let bits = _mm256_castps_si256(r);
    // half's last bit is f32's bit 13; a midpoint has bit 12 set and
    // the bits below it clear
    let low = _mm256_and_si256(bits, _mm256_set1_epi32(0x1FFF));
    let mut suspect = _mm256_castsi256_ps(_mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x1000)));
    if TINY {
        let a = _mm256_and_ps(r, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
        let low_range = _mm256_cmp_ps::<_CMP_LT_OQ>(a, _mm256_set1_ps(f32::from_bits(0x3880_0000)));
        let tiny = _mm256_and_ps(
            low_range,
            _mm256_cmp_ps::<_CMP_GT_OQ>(a, _mm256_setzero_ps()),
        );
        suspect = _mm256_or_ps(suspect, tiny);
    }
    let nonzero = _mm256_cmp_ps::<_CMP_NEQ_OQ>(acc, _mm256_setzero_ps());
    _mm256_and_ps(suspect, nonzero)
}

/// `r = acc + p` moved, where it must be, such that rounding it to half
/// rounds the exact sum once: only lanes of `suspect` ([`suspects`])
/// whose sum was inexact (TwoSum's error term) are rounded to odd.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn fixed(acc: __m256, p: __m256, r: __m256, suspect: __m256) -> __m256 {
    let e = two_sum_error(acc, p, r);
    let inexact = _mm256_cmp_ps::<_CMP_NEQ_UQ>(e, _mm256_setzero_ps());
    let wrong = _mm256_and_ps(suspect, inexact);
    if _mm256_testz_ps(wrong, wrong) != 0 {
        return r;
    }
    add_odd(acc, p, r)
}

// The element-wise ops' loops run once per block of a few cache lines
// (the engines' blocks): the chunks carry their length, so the loop has
// no bounds checks, and the few lanes past the last whole vector (none in
// the engines' blocks) go through a function of their own, which keeps the
// loop small enough to inline into the fold. Sum, Prod, Max and Min of two
// halves are exact in f32 (a product has at most 22 significant bits), so
// the one rounding is the store's.

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine<const OP: Combine>(acc: &mut [f16], x0: &[f16], x1: &[f16]) {
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let mut out = acc.chunks_exact_mut(8);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(8)).zip(x1.chunks_exact(8)) {
        store(o, apply::<OP>(load(a), load(b)));
    }
    let rest = out.into_remainder();
    if !rest.is_empty() {
        let at = len - rest.len();
        combine_rest::<OP>(rest, &x0[at..], &x1[at..]);
    }
}

#[inline(never)]
fn combine_rest<const OP: Combine>(acc: &mut [f16], x0: &[f16], x1: &[f16]) {
    for ((o, a), b) in acc.iter_mut().zip(x0).zip(x1) {
        *o = element::<f16, OP>(*a, *b);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine_into<const OP: Combine>(acc: &mut [f16], x: &[f16]) {
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(8);
    for (o, b) in (&mut out).zip(x.chunks_exact(8)) {
        let v = apply::<OP>(load(o), load(b));
        store(o, v);
    }
    let rest = out.into_remainder();
    if !rest.is_empty() {
        let at = len - rest.len();
        for (o, b) in rest.iter_mut().zip(&x[at..]) {
            *o = element::<f16, OP>(*o, *b);
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
/// result to half rounds the exact `acc + x·s` once. The product of two
/// halves is exact in f32 (22 significant bits at most, within f32's
/// range), so the FMA rounds the same sum as an addition of the product
/// would. Only vectors with a lane left by [`suspects`] pay TwoSum, and
/// only those where that lane's sum was inexact the rounding to odd (one
/// test per 16 lanes instead of per 8 measured no faster).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn step<const STEP: Step>(acc: __m256, x: __m256, sv: __m256) -> __m256 {
    let r = _mm256_fmadd_ps(x, sv, acc);
    let suspect = match STEP {
        FMA => return r,
        SUM => suspects::<false>(acc, r),
        _ => suspects::<true>(acc, r),
    };
    if _mm256_testz_ps(suspect, suspect) != 0 {
        return r;
    }
    fixed(acc, _mm256_mul_ps(x, sv), r, suspect)
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
#[inline]
fn premul_two_with<const STEP: Step>(acc: &mut [f16], x0: &[f16], x1: &[f16], p: &Scalar) {
    let (s, sv) = (p.s, p.sv);
    let shrinks = STEP == FMA && p.shrinks;
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let first = |a: &[f16]| {
        let product = _mm256_mul_ps(load(a), sv);
        if shrinks && !below_normal(product) {
            product
        } else {
            // rnd(x0·s), as half and back (exact)
            _mm256_cvtph_ps(_mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(product))
        }
    };
    let mut out = acc.chunks_exact_mut(8);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(8)).zip(x1.chunks_exact(8)) {
        store(o, step::<STEP>(first(a), load(b), sv));
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for ((o, a), b) in rest.iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
        *o = f16::premul_add(f16::mul(*a, s), *b, s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_two(acc: &mut [f16], x0: &[f16], x1: &[f16], s: f16) {
    let p = Scalar::new(s);
    by_step!(step_for(s), premul_two_with(acc, x0, x1, &p))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_add_with<const STEP: Step>(acc: &mut [f16], x: &[f16], p: &Scalar) {
    let (s, sv) = (p.s, p.sv);
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(8);
    for (o, b) in (&mut out).zip(x.chunks_exact(8)) {
        store(o, step::<STEP>(load(o), load(b), sv));
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, b) in rest.iter_mut().zip(&x[at..]) {
        *o = f16::premul_add(*o, *b, s);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_add(acc: &mut [f16], x: &[f16], s: f16) {
    let p = Scalar::new(s);
    by_step!(step_for(s), premul_add_with(acc, x, &p))
}

/// What the steps need of the scalar, computed once for a whole call's
/// blocks ([`premul_blocks`]) rather than for each.
struct Scalar {
    s: f16,
    sv: __m256,
    /// `|s|` is at most 1 (with the [`FMA`] step: a power of two no
    /// larger than 1, or zero)
    shrinks: bool,
}

impl Scalar {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn new(s: f16) -> Scalar {
        let f = f16_to_f32(s);
        Scalar {
            s,
            sv: _mm256_set1_ps(f),
            shrinks: f.abs() <= 1.0,
        }
    }
}

premul_blocks_by_step!(f16);
