//! bfloat16's block kernels with AVX2 (the layout, the rounding and the
//! fused step's cases are described in `isa.rs`).

use super::super::Arith;
use super::super::arith::{Combine, combine as element};
use super::super::fold::{PremulSteps, premul_fold};
use super::{FMA, SUM, SUM_TINY, Step, apply, two_sum_error};
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

/// `v` rounded to bfloat16 (to nearest, ties to even), as a float: the
/// bfloat16 value, exact, for a step that goes on computing with it (the
/// results stored take [`pack`], 16 lanes at once). `0x7FFF` plus the
/// kept part's last bit is written as `0x8000` minus one where that bit
/// is 0: a compare instead of a shift, which ran a few percent faster on
/// the project's Zen 1 machine.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn rounded(v: __m256) -> __m256 {
    let bits = _mm256_castps_si256(v);
    let last = _mm256_and_si256(bits, _mm256_set1_epi32(0x1_0000));
    let even = _mm256_cmpeq_epi32(last, _mm256_setzero_si256());
    let up = _mm256_add_epi32(_mm256_add_epi32(bits, _mm256_set1_epi32(0x8000)), even);
    _mm256_castsi256_ps(_mm256_and_si256(up, _mm256_set1_epi32(HIGH)))
}

/// The even- and odd-indexed lanes of [`load`]'s layout rounded to
/// bfloat16, in element order: [`round_kept`] on their top and low halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn pack(even: __m256i, odd: __m256i) -> __m256i {
    round_kept(kept(even, odd), lows(even, odd))
}

/// The top halves of [`load`]'s two layouts in element order: the
/// 16-bit values rounding keeps.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn kept(even: __m256i, odd: __m256i) -> __m256i {
    _mm256_blend_epi16::<0xAA>(_mm256_srli_epi32::<16>(even), odd)
}

/// The low halves of [`load`]'s two layouts in element order: what
/// rounding drops.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn lows(even: __m256i, odd: __m256i) -> __m256i {
    _mm256_blend_epi16::<0xAA>(even, _mm256_slli_epi32::<16>(odd))
}

/// 16 floats' top halves rounded to nearest, ties to even, by their low
/// halves, 16 bits wide: one more where the low half is above 0x8000, or
/// at 0x8000 with the kept part odd. `low − 0x8000` as a signed 16-bit
/// value is how far above the midpoint it lies; adding the kept part's
/// last bit (saturating, so 0xFFFF stays above) makes "round up" one
/// compare with zero. The same bits as [`rounded`]'s top halves, for the
/// register of 16 the cost of 8 lanes' rounding.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn round_kept(kept: __m256i, lows: __m256i) -> __m256i {
    let above = _mm256_xor_si256(lows, _mm256_set1_epi16(0x8000_u16 as i16));
    let odd = _mm256_and_si256(kept, _mm256_set1_epi16(1));
    let up = _mm256_cmpgt_epi16(_mm256_adds_epi16(above, odd), _mm256_setzero_si256());
    _mm256_sub_epi16(kept, up)
}

/// 16 bfloat16 into the 16 elements of `out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store(out: &mut [bf16], v: __m256i) {
    let out = &mut out[..16];
    // SAFETY: `out` holds 16 bfloat16, 32 bytes; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
}

// The element-wise ops' loops as half's (see there): no bounds checks in
// the loop, the lanes past the last whole vector out of it. A product of
// two bfloat16 values has at most 16 significant bits, and Max and Min
// return an operand, a bfloat16 value whose low half is zero (so rounding
// it changes nothing).

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn apply16<const OP: Combine>((ae, ao): (__m256, __m256), b: &[bf16]) -> __m256i {
    let (be, bo) = load(b);
    pack(
        _mm256_castps_si256(apply::<OP>(ae, be)),
        _mm256_castps_si256(apply::<OP>(ao, bo)),
    )
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine<const OP: Combine>(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]) {
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let mut out = acc.chunks_exact_mut(16);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(16)).zip(x1.chunks_exact(16)) {
        store(o, apply16::<OP>(load(a), b));
    }
    let rest = out.into_remainder();
    if !rest.is_empty() {
        let at = len - rest.len();
        combine_rest::<OP>(rest, &x0[at..], &x1[at..]);
    }
}

#[inline(never)]
fn combine_rest<const OP: Combine>(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]) {
    for ((o, a), b) in acc.iter_mut().zip(x0).zip(x1) {
        *o = element::<bf16, OP>(*a, *b);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine_into<const OP: Combine>(acc: &mut [bf16], x: &[bf16]) {
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(16);
    for (o, b) in (&mut out).zip(x.chunks_exact(16)) {
        let v = apply16::<OP>(load(o), b);
        store(o, v);
    }
    let rest = out.into_remainder();
    if !rest.is_empty() {
        let at = len - rest.len();
        for (o, b) in rest.iter_mut().zip(&x[at..]) {
            *o = element::<bf16, OP>(*o, *b);
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
        let (pe, po) = (_mm256_mul_ps(xe, sv), _mm256_mul_ps(xo, sv));
        store(
            &mut acc[i..],
            pack(_mm256_castps_si256(pe), _mm256_castps_si256(po)),
        );
    }
    for i in whole..acc.len() {
        acc[i] = bf16::mul(x[i], s);
    }
}

/// [`FMA`] for `s` a power of two, zero, infinite or NaN (no stored
/// significand bits), the section's first case. Any other `s` between
/// 2^-9 and 1 in magnitude (every Avg's 1/N among them): [`SUM`]. `x` is a
/// multiple of 2^-133 and `s` of 2^-16, so `x·s` is a multiple of 2^-149,
/// f32's smallest subnormal, with at most 16 significant bits, and no
/// larger than `x`: exact in f32. Other scalars: [`SUM_TINY`], which also
/// sets aside the products past f32's range.
#[inline(always)]
fn step_for(s: bf16) -> Step {
    let bits = s.to_bits();
    let exponent = (bits >> 7) & 0xFF;
    if bits & 0x7F == 0 {
        FMA
    } else if (127 - 9..127).contains(&exponent) {
        SUM
    } else {
        SUM_TINY
    }
}

/// Among the lanes of an f32 sum `s = acc + p` on a bfloat16 midpoint
/// ([`midpoints`], which the caller ANDs with this mask), those whose sum
/// is not exact, `acc` a bfloat16 value and `p = x·sv` a product exact in
/// f32 (at most 16 significant bits), found as those
/// where `s − p`, computed in f32, is not `acc`; and that difference, `d`
/// (one FMA, `s − x·sv` rounded once, which is `s − p` rounded since `p`
/// is exact: one instruction where the product and the difference took
/// two). Inexact needs a set bit below the sum's f32 unit, at most 2^-23
/// of the sum's top bit, which is one above the larger term's at most.
///
/// - `acc` the larger term: a midpoint `s` is `acc` plus an odd
///   multiple of half `acc`'s bfloat16 unit (a quarter of it after a
///   borrow into the binade below, a whole one after a carry into the
///   one above), and `p` is within half an f32 unit of `s − acc`. So
///   `p` reaches that high, and its 16 bits then end no lower than the
///   sum's f32 unit: the sum is exact. The one `p` that falls short,
///   sixteen ones ending half an f32 unit below, is not a product of
///   two bfloat16 significands (2^16 − 1 = 255·257; the largest such
///   product is 255² = 65025).
/// - An exact sum: `s − p` is `acc`, a float, so the f32 difference is
///   `acc` exactly.
/// - `p` the larger term and the sum inexact: `acc`'s bits end below
///   the sum's 24, so `acc` is less than 2^-8 of `p` and `s` within a
///   factor of two of `p`; the f32 difference is then exact (Sterbenz),
///   `acc` plus the sum's rounding error, which is not zero.
///
/// - `d` never overflows: `|p| ≤ |x|` (|s| < 1), so `|s − p|` is at most
///   `|acc|`, bfloat16's largest at most (2^128 − 2^120), plus the
///   sum's rounding error (at most 2^103), below f32's largest.
/// - NaN and infinite lanes: a NaN `d` compares unequal to nothing
///   (ordered compare), and an infinite `acc` or `x` makes `d` NaN or
///   `acc` itself.
///
/// So the lanes found are exactly the inexact ones, and the rounding
/// error `acc + p − s` is `acc − d`, exact: the difference of two floats
/// that is itself one.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn inexact(acc: __m256, (x, sv): (__m256, __m256), s: __m256) -> (__m256i, __m256) {
    let d = _mm256_fnmadd_ps(x, sv, s);
    (_mm256_castps_si256(_mm256_cmp_ps::<_CMP_NEQ_OQ>(d, acc)), d)
}

/// `s`'s bits moved one f32 unit towards `e` in the lanes of `mask`
/// (lanes on a midpoint whose sum `s` is off the exact value by `e`,
/// not zero): +1 on the bits when `e` has `s`'s sign (away from zero),
/// else −1, which puts the lane on the exact value's side of the
/// midpoint.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn toward(bits: __m256i, e: __m256, mask: __m256i) -> __m256 {
    let signs = _mm256_xor_si256(_mm256_castps_si256(e), bits);
    let step = _mm256_or_si256(_mm256_srai_epi32::<31>(signs), _mm256_set1_epi32(1));
    _mm256_castsi256_ps(_mm256_add_epi32(bits, _mm256_and_si256(mask, step)))
}

/// The fused step on 8 lanes, [`FMA`] and [`SUM_TINY`] ([`SUM`] takes 16
/// lanes at a time, [`sum16`]): the f32 sum's bits, moved off a midpoint
/// where the sum is not exact so that [`pack`] rounds them as it would the
/// exact value, and the lanes whose midpoint direction this could not
/// settle (movemask bits; only [`SUM_TINY`] has any), which the caller
/// computes again with the element step. [`SUM_TINY`] looks further only
/// at vectors with a lane on a midpoint, and there takes TwoSum's error
/// term.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn step<const STEP: Step>(acc: __m256, x: __m256, sv: __m256) -> (__m256i, i32) {
    let s = _mm256_fmadd_ps(x, sv, acc);
    let bits = _mm256_castps_si256(s);
    if STEP == FMA {
        return (bits, 0);
    }
    debug_assert!(STEP != SUM, "SUM's step is sum16");
    let mid = midpoints(s);
    if _mm256_testz_si256(mid, mid) == 1 {
        return (bits, 0);
    }
    let p = _mm256_mul_ps(x, sv);
    // e = acc + p − s exactly, when p = x·s is exact
    let e = two_sum_error(acc, p, s);
    // p is exact in f32 when it is at least 2^-134 (its 16 bits then
    // reach no lower than 2^-149) and finite
    let pm = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
    let p_ok = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_GE_OQ>(pm, _mm256_set1_ps(f32::from_bits(1 << 15))),
        _mm256_cmp_ps::<_CMP_LT_OQ>(pm, _mm256_set1_ps(f32::INFINITY)),
    );
    let unsettled = _mm256_movemask_ps(_mm256_andnot_ps(p_ok, _mm256_castsi256_ps(mid)));
    let off = _mm256_castps_si256(_mm256_cmp_ps::<_CMP_NEQ_OQ>(e, _mm256_setzero_ps()));
    (
        _mm256_castps_si256(toward(bits, e, _mm256_and_si256(mid, off))),
        unsettled,
    )
}

/// The lanes of `s` on a bfloat16 midpoint: the low half exactly 0x8000.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn midpoints(s: __m256) -> __m256i {
    let low = _mm256_and_si256(_mm256_castps_si256(s), _mm256_set1_epi32(0xFFFF));
    _mm256_cmpeq_epi32(low, _mm256_set1_epi32(0x8000))
}

/// [`SUM`]'s step on 16 lanes (both halves of [`load`]'s layout): the
/// lanes on a midpoint whose sum is inexact ([`inexact`]) are moved
/// towards the exact value, then all 16 are rounded. The two halves'
/// midpoint tests and inexact masks are interleaved into one register of
/// 16-bit lanes (the even elements' in the low halves of the 32-bit
/// lanes, the odd ones' in the high halves), the low halves [`round_kept`]
/// takes, so one compare finds the midpoints of all 16 and one AND and
/// one test the lanes to move; those are spread back over the 32-bit
/// lanes only where there are any.
///
/// Every vector is tested this way, with one branch, on a lane to move,
/// which is rarely taken on any data. A branch on a lane being on a
/// midpoint first (as [`SUM_TINY`] has it) is cheaper where none is, as
/// on sparse data (one rank holding each element, as `rankwise bench`
/// checks with) or equal inputs, but on random data a midpoint turns up in
/// about half of all vectors, and the mispredicted branch cost more than
/// the test (`examples/kernel_data.rs` in cache at N = 2: random data 0.48
/// ns per element with that branch, 0.31 without; sparse data 0.24 with it,
/// 0.30 without).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn sum16((ae, ao): (__m256, __m256), (xe, xo): (__m256, __m256), sv: __m256) -> __m256i {
    let se = _mm256_fmadd_ps(xe, sv, ae);
    let so = _mm256_fmadd_ps(xo, sv, ao);
    let (be, bo) = (_mm256_castps_si256(se), _mm256_castps_si256(so));
    let (off_e, de) = inexact(ae, (xe, sv), se);
    let (off_o, d_o) = inexact(ao, (xo, sv), so);
    // the low halves of both sums side by side, and of both masks (all
    // ones or all zeros over 32 bits, so either half of a lane will do)
    let lows = lows(be, bo);
    let mid = _mm256_cmpeq_epi16(lows, _mm256_set1_epi16(0x8000_u16 as i16));
    let wrong = _mm256_and_si256(mid, _mm256_blend_epi16::<0xAA>(off_e, off_o));
    if _mm256_testz_si256(wrong, wrong) == 1 {
        return round_kept(kept(be, bo), lows);
    }
    let we = _mm256_srai_epi32::<31>(_mm256_slli_epi32::<16>(wrong));
    let wo = _mm256_srai_epi32::<31>(wrong);
    pack(
        _mm256_castps_si256(toward(be, _mm256_sub_ps(ae, de), we)),
        _mm256_castps_si256(toward(bo, _mm256_sub_ps(ao, d_o), wo)),
    )
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
    if STEP == SUM {
        return store(out, sum16((ae, ao), (xe, xo), sv));
    }
    let (re, ue) = step::<STEP>(ae, xe, sv);
    let (ro, uo) = step::<STEP>(ao, xo, sv);
    store(out, pack(re, ro));
    if ue | uo != 0 {
        for ((o, a), b) in out.iter_mut().zip(x0).zip(x1) {
            *o = bf16::premul_add(bf16::mul(*a, s), *b, s);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_two_with<const STEP: Step>(acc: &mut [bf16], x0: &[bf16], x1: &[bf16], p: &Scalar) {
    let (s, sv) = (p.s, p.sv);
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
    let p = Scalar::new(s);
    by_step!(step_for(s), premul_two_with(acc, x0, x1, &p))
}

/// `premul_add` for the 16 elements of the chunks.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_add_16<const STEP: Step>(out: &mut [bf16], x: &[bf16], s: bf16, sv: __m256) {
    let (ae, ao) = load(out);
    let (xe, xo) = load(x);
    if STEP == SUM {
        let v = sum16((ae, ao), (xe, xo), sv);
        return store(out, v);
    }
    let (re, ue) = step::<STEP>(ae, xe, sv);
    let (ro, uo) = step::<STEP>(ao, xo, sv);
    if ue | uo == 0 {
        store(out, pack(re, ro));
    } else {
        for (o, b) in out.iter_mut().zip(x) {
            *o = bf16::premul_add(*o, *b, s);
        }
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_add_with<const STEP: Step>(acc: &mut [bf16], x: &[bf16], p: &Scalar) {
    let (s, sv) = (p.s, p.sv);
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
    let p = Scalar::new(s);
    by_step!(step_for(s), premul_add_with(acc, x, &p))
}

/// What the steps need of the scalar, computed once for a whole call's
/// blocks ([`premul_blocks`]) rather than for each.
struct Scalar {
    s: bf16,
    sv: __m256,
}

impl Scalar {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn new(s: bf16) -> Scalar {
        Scalar {
            s,
            sv: _mm256_set1_ps(bf16_to_f32(s)),
        }
    }
}

premul_blocks_by_step!(bf16);
