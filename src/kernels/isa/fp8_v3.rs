//! The fp8 types' block kernels with AVX2 and F16C: 16 elements at a time
//! decoded to two vectors of 8 floats through half (exact), computed in
//! f32 as the element functions do, and encoded through half: F16C's
//! rounding, then the half's top bits rounded to the type ([`encode`]
//! says why the two roundings give the element encoder's bits for every
//! value the kernels encode). Avg and PreMulSum are not fused for fp8:
//! `x·s` is rounded to the type before the sum, here by encoding it and
//! decoding it again in registers.

use super::super::Arith;
use super::super::arith::{Combine, combine as element};
use super::apply;
use crate::core::datatype::{Fp8, MiniFloat};
use std::arch::x86_64::*;

/// The 16 codes of `v` as floats, elements 0–7 and 8–15: each code moved
/// into the top of a half whose exponent field is one bit wider (e4m3)
/// or as wide (e5m2), converted by F16C, and scaled by the difference of
/// the biases (exact: every fp8 value is a half value times a power of
/// two within both ranges). e5m2 is half's top byte, its infinities and
/// NaNs included; e4m3 has no infinities, and its NaN codes are made
/// half NaNs before the conversion.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn decode(f: &MiniFloat, v: __m128i) -> (__m256, __m256) {
    let zero = _mm_setzero_si128();
    (
        widen(f, _mm_unpacklo_epi8(zero, v)),
        widen(f, _mm_unpackhi_epi8(zero, v)),
    )
}

/// [`decode`] for 8 codes, each in the top byte of a 16-bit lane.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn widen(f: &MiniFloat, w: __m128i) -> __m256 {
    let sign = _mm_and_si128(w, _mm_set1_epi16(0x8000_u16 as i16));
    let mag = _mm_and_si128(w, _mm_set1_epi16(0x7F00));
    let shift = _mm_cvtsi32_si128(f.mant_bits as i32 - 2);
    let mut h = _mm_or_si128(sign, _mm_srl_epi16(mag, shift));
    if !f.has_inf {
        let nan = _mm_cmpeq_epi16(mag, _mm_set1_epi16((f.nan_code as i16) << 8));
        h = _mm_or_si128(h, _mm_and_si128(nan, _mm_set1_epi16(0x7C00)));
    }
    let scale = _mm256_set1_ps(f32::from_bits(((15 - f.bias + 127) as u32) << 23));
    _mm256_mul_ps(_mm256_cvtph_ps(h), scale)
}

/// 16 floats, elements 0–7 in `a` and 8–15 in `b`, encoded as bytes:
/// each rounded to half by F16C after a scaling by the difference of the
/// biases (exact), which makes the fp8 code the top bits of the half's
/// magnitude, its subnormals included; then those bits rounded to nearest,
/// ties to even (a carry moving into the exponent), capped at the largest
/// finite code (`__NV_SATFINITE`; half's infinity lands above it), and a
/// NaN given the NaN code. The half rounding does not change the result
/// for the values the kernels encode, which are sums and products of two
/// fp8 values and the operands of Max and Min: those are exact in half
/// unless their terms lie so far apart that the value is nowhere near a
/// point halfway between two fp8 values, where the first rounding could
/// move it onto one; `tests::eight` checks every pair of values of both
/// formats against the element functions, which encode from f32 directly.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn encode(f: &MiniFloat, a: __m256, b: __m256) -> __m128i {
    let h = _mm256_set_m128i(to_half(f, b), to_half(f, a));
    let shift = _mm_cvtsi32_si128(10 - f.mant_bits as i32);
    let abs = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    let last = _mm256_and_si256(_mm256_srl_epi16(abs, shift), _mm256_set1_epi16(1));
    let bias = _mm256_set1_epi16((1 << (9 - f.mant_bits)) - 1);
    let code = _mm256_srl_epi16(_mm256_add_epi16(_mm256_add_epi16(abs, bias), last), shift);
    let code = _mm256_min_epu16(code, _mm256_set1_epi16(f.max_code as i16));
    let nan = _mm256_cmpgt_epi16(abs, _mm256_set1_epi16(0x7C00));
    let code = _mm256_blendv_epi8(code, _mm256_set1_epi16(f.nan_code as i16), nan);
    let sign = _mm256_srli_epi16::<8>(_mm256_and_si256(h, _mm256_set1_epi16(0x8000_u16 as i16)));
    let code = _mm256_or_si256(code, sign);
    _mm_packus_epi16(
        _mm256_castsi256_si128(code),
        _mm256_extracti128_si256::<1>(code),
    )
}

/// 8 floats scaled into [`encode`]'s halves.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn to_half(f: &MiniFloat, v: __m256) -> __m128i {
    let scale = _mm256_set1_ps(f32::from_bits(((f.bias - 15 + 127) as u32) << 23));
    _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(_mm256_mul_ps(v, scale))
}

/// The 16 elements of `x`, decoded.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load<T: Fp8 + Arith>(x: &[T]) -> (__m256, __m256) {
    let x = &x[..16];
    // SAFETY: `x` holds 16 one-byte elements (`Fp8` types are
    // `repr(transparent)` over u8); the load is unaligned.
    let v = unsafe { _mm_loadu_si128(x.as_ptr().cast()) };
    decode(&T::FORMAT, v)
}

/// `(a, b)` encoded into the 16 elements of `out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store<T: Fp8 + Arith>(out: &mut [T], (a, b): (__m256, __m256)) {
    let out = &mut out[..16];
    let v = encode(&T::FORMAT, a, b);
    // SAFETY: `out` holds 16 one-byte elements; the store is unaligned.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), v) }
}

/// `(a, b)` rounded to the type and widened again, in registers.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn rounded<T: Fp8 + Arith>((a, b): (__m256, __m256)) -> (__m256, __m256) {
    let f = &T::FORMAT;
    decode(f, encode(f, a, b))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn apply16<const OP: Combine>(a: (__m256, __m256), b: (__m256, __m256)) -> (__m256, __m256) {
    (apply::<OP>(a.0, b.0), apply::<OP>(a.1, b.1))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x0: &[T], x1: &[T]) {
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let mut out = acc.chunks_exact_mut(16);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(16)).zip(x1.chunks_exact(16)) {
        store(o, apply16::<OP>(load(a), load(b)));
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for ((o, a), b) in rest.iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
        *o = element::<T, OP>(*a, *b);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine_into<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x: &[T]) {
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(16);
    for (o, b) in (&mut out).zip(x.chunks_exact(16)) {
        let v = apply16::<OP>(load(o), load(b));
        store(o, v);
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, b) in rest.iter_mut().zip(&x[at..]) {
        *o = element::<T, OP>(*o, *b);
    }
}

/// `acc[i] = rnd(x[i]·s)`.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn scale<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    let sv = _mm256_set1_ps(s.to_f64() as f32);
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(16);
    for (o, a) in (&mut out).zip(x.chunks_exact(16)) {
        let (e, f) = load(a);
        store(o, (_mm256_mul_ps(e, sv), _mm256_mul_ps(f, sv)));
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, a) in rest.iter_mut().zip(&x[at..]) {
        *o = T::mul(*a, s);
    }
}

/// Whether some lane of `p` is below the type's normals without being
/// zero, or infinite (which the rounding makes the largest finite value).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn off_grid(f: &MiniFloat, p: __m256) -> bool {
    let a = _mm256_and_ps(p, _mm256_castsi256_ps(_mm256_set1_epi32(i32::MAX)));
    let min_normal = _mm256_set1_ps(f32::from_bits(((1 - f.bias + 127) as u32) << 23));
    let tiny = _mm256_and_ps(
        _mm256_cmp_ps::<_CMP_LT_OQ>(a, min_normal),
        _mm256_cmp_ps::<_CMP_GT_OQ>(a, _mm256_setzero_ps()),
    );
    let inf = _mm256_cmp_ps::<_CMP_EQ_OQ>(a, _mm256_set1_ps(f32::INFINITY));
    let off = _mm256_or_ps(tiny, inf);
    _mm256_testz_ps(off, off) == 0
}

/// `acc[i] = rnd(acc[i] + rnd(x[i]·s))`. With `s` a power of two no
/// larger than 1 in magnitude (every Avg at a power-of-two N), `x·s` is
/// `x`'s significand at a lower exponent, an fp8 value itself unless it
/// falls below the normals, or `x` is infinite: vectors with no such lane
/// skip the rounding.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_add<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    let sf = s.to_f64() as f32;
    let shrinks = sf != 0.0 && sf.abs() <= 1.0 && sf.to_bits() & 0x7F_FFFF == 0;
    let sv = _mm256_set1_ps(sf);
    let f = &T::FORMAT;
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(16);
    for (o, b) in (&mut out).zip(x.chunks_exact(16)) {
        let (e, g) = load(b);
        let p = (_mm256_mul_ps(e, sv), _mm256_mul_ps(g, sv));
        let (pe, pf) = if shrinks && !off_grid(f, p.0) && !off_grid(f, p.1) {
            p
        } else {
            rounded::<T>(p)
        };
        let (ae, af) = load(o);
        store(o, (_mm256_add_ps(ae, pe), _mm256_add_ps(af, pf)));
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, b) in rest.iter_mut().zip(&x[at..]) {
        *o = T::premul_add(*o, *b, s);
    }
}
