//! The fp8 types' block kernels with AVX2 and F16C, 16 elements at a
//! time. They compute on each code's half: the code moved into the top of
//! a half whose exponent field is one bit wider (e4m3) or as wide (e5m2),
//! which is the code's value times 2^(bias − 15), exactly (e5m2 is half's
//! top byte; every e4m3 value is a half value times 2^8). F16C widens the
//! halves to f32 and rounds results back to half, and [`encode`] rounds a
//! half's top bits to the code. Sums, maxima and minima of two values,
//! and products with the scalar, scale with their operands, so the f32
//! values encoded are the true results times 2^(bias − 15), exactly: the
//! same roundings as on the true values. A product of two halves carries
//! the factor twice and is scaled back once.
//!
//! e4m3 has no infinities, and its NaN codes would be finite halves:
//! where the result cannot be NaN otherwise (every op with a finite
//! scalar: sums and products saturate), the kernels leave NaN codes to
//! decode as garbage and set the lanes that read one afterwards, on the
//! bytes, which costs less than making NaN halves of them: NaN for Sum,
//! Prod, Avg and PreMulSum, the other operand for Max and Min (f32's max
//! and min return the operand that is not NaN).
//!
//! Avg and PreMulSum are not fused for fp8: `x·s` is rounded to the type
//! before the sum. The rounded products come from tables on the codes
//! (`fp8_products`, 32 at a time) wherever the scalar has them and no
//! code in the vector is NaN or infinite; the sum is then Sum's block.
//! Elsewhere the product is widened, multiplied and rounded in registers.

use super::super::Arith;
use super::super::arith::{ADD, Combine, MUL, combine as element};
use super::super::fold::{PremulSteps, premul_fold};
use super::apply;
use super::fp8_products::{MOST_TABLES, Products, products};
use crate::core::fp8::{Fp8, MiniFloat};
use std::arch::x86_64::*;

/// The halves of 16 codes, each in the top byte of a 16-bit lane: e5m2's
/// code is its half; e4m3's moves one bit right with its sign kept (the
/// arithmetic shift copies the sign into the exponent's top bit, which
/// the mask clears). With `nans`, e4m3's NaN codes are made half NaNs.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn halves(f: &MiniFloat, w: __m256i, nans: bool) -> __m256i {
    if f.has_inf {
        return w;
    }
    let h = _mm256_and_si256(
        _mm256_srai_epi16::<1>(w),
        _mm256_set1_epi16(0xBFFF_u16 as i16),
    );
    if !nans {
        return h;
    }
    let code = _mm256_set1_epi16((f.nan_code as i16) << 8);
    let nan = _mm256_cmpeq_epi16(_mm256_and_si256(w, _mm256_set1_epi16(0x7F00)), code);
    _mm256_or_si256(h, _mm256_and_si256(nan, _mm256_set1_epi16(0x7C00)))
}

/// The 16 codes of `v` as floats in half's scale, elements 0–7 and 8–15;
/// `nans` as in [`halves`].
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn decode(f: &MiniFloat, v: __m128i, nans: bool) -> (__m256, __m256) {
    let h = halves(f, _mm256_slli_epi16::<8>(_mm256_cvtepu8_epi16(v)), nans);
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(h)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(h)),
    )
}

/// [`decode`] on 32 codes: elements 0–7, 8–15, 16–23, 24–31. Each
/// 16-byte half of `v` is widened within its own half of the register
/// (codes 0–7 and 16–23 in one, 8–15 and 24–31 in the other), which
/// [`encode32`]'s packing undoes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn decode32(f: &MiniFloat, v: __m256i, nans: bool) -> [__m256; 4] {
    let zero = _mm256_setzero_si256();
    let lo = halves(f, _mm256_unpacklo_epi8(zero, v), nans);
    let hi = halves(f, _mm256_unpackhi_epi8(zero, v), nans);
    [
        _mm256_cvtph_ps(_mm256_castsi256_si128(lo)),
        _mm256_cvtph_ps(_mm256_castsi256_si128(hi)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(lo)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(hi)),
    ]
}

/// 16 floats as halves (F16C's rounding, to nearest even), `a`'s in the
/// low half of the register.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn to_halves(a: __m256, b: __m256) -> __m256i {
    _mm256_set_m128i(
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(b),
        _mm256_cvtps_ph::<_MM_FROUND_TO_NEAREST_INT>(a),
    )
}

/// 16 halves `h` of floats in half's scale as codes, one in the low byte
/// of each 16-bit lane: each float was rounded to half by F16C, which
/// makes the fp8 code the top bits of the half's magnitude, its
/// subnormals included; then those bits rounded to nearest, ties to even
/// (a carry moving into the exponent), capped at the largest finite code
/// (`__NV_SATFINITE`; half's infinity lands above it), and, with `nans`,
/// a NaN given the NaN code (without, no lane may be NaN). The half
/// rounding does not change the result for the values the kernels
/// encode, which are sums and products of two fp8 values and the
/// operands of Max and Min: those are exact in half unless their terms
/// lie so far apart that the value is nowhere near a point halfway
/// between two fp8 values, where the first rounding could move it onto
/// one; `tests::eight` checks every pair of values of both formats
/// against the element functions, which encode from f32 directly.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn codes(f: &MiniFloat, h: __m256i, nans: bool) -> __m256i {
    let (abs, up) = round_halves(f, h);
    let shift = _mm_cvtsi32_si128(10 - f.mant_bits as i32);
    let code = _mm256_srl_epi16(up, shift);
    let mut code = _mm256_min_epu16(code, _mm256_set1_epi16(f.max_code as i16));
    if nans {
        let nan = _mm256_cmpgt_epi16(abs, _mm256_set1_epi16(0x7C00));
        code = _mm256_blendv_epi8(code, _mm256_set1_epi16(f.nan_code as i16), nan);
    }
    let sign = _mm256_srli_epi16::<8>(_mm256_and_si256(h, _mm256_set1_epi16(0x8000_u16 as i16)));
    _mm256_or_si256(code, sign)
}

/// 16 floats in half's scale, elements 0–7 in `a` and 8–15 in `b`,
/// encoded as bytes ([`codes`]).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn encode(f: &MiniFloat, (a, b): (__m256, __m256), nans: bool) -> __m128i {
    let code = codes(f, to_halves(a, b), nans);
    _mm_packus_epi16(
        _mm256_castsi256_si128(code),
        _mm256_extracti128_si256::<1>(code),
    )
}

/// [`encode`] on 32 floats, elements 0–7, 8–15, 16–23, 24–31: the
/// register halves pair 0–7 with 16–23 and 8–15 with 24–31, so one
/// packing puts the bytes back in order.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn encode32(f: &MiniFloat, [a, b, c, d]: [__m256; 4], nans: bool) -> __m256i {
    _mm256_packus_epi16(
        codes(f, to_halves(a, c), nans),
        codes(f, to_halves(b, d), nans),
    )
}

/// The first steps of [`codes`] and [`rounded`]: the magnitudes of the
/// halves `h`, and those plus the increment that rounds the type's bits
/// (the top of the magnitude, above `10 − mant_bits`) to nearest, ties
/// to even.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn round_halves(f: &MiniFloat, h: __m256i) -> (__m256i, __m256i) {
    let shift = _mm_cvtsi32_si128(10 - f.mant_bits as i32);
    let abs = _mm256_and_si256(h, _mm256_set1_epi16(0x7FFF));
    let last = _mm256_and_si256(_mm256_srl_epi16(abs, shift), _mm256_set1_epi16(1));
    let bias = _mm256_set1_epi16((1 << (9 - f.mant_bits)) - 1);
    (abs, _mm256_add_epi16(_mm256_add_epi16(abs, bias), last))
}

/// The bytes of `v` that are e4m3 NaN codes, as a byte mask.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn nan_codes32(f: &MiniFloat, v: __m256i) -> __m256i {
    let mag = _mm256_and_si256(v, _mm256_set1_epi8(0x7F));
    _mm256_cmpeq_epi8(mag, _mm256_set1_epi8(f.nan_code as i8))
}

/// [`nan_codes32`] on 16 codes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn nan_codes(f: &MiniFloat, v: __m128i) -> __m128i {
    _mm256_castsi256_si128(nan_codes32(f, _mm256_castsi128_si256(v)))
}

/// The 16 codes of `x`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load<T: Fp8>(x: &[T]) -> __m128i {
    let x = &x[..16];
    // SAFETY: `x` holds 16 one-byte elements (`Fp8` types are
    // `repr(transparent)` over u8); the load is unaligned.
    unsafe { _mm_loadu_si128(x.as_ptr().cast()) }
}

/// 16 codes into `out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store<T: Fp8>(out: &mut [T], v: __m128i) {
    let out = &mut out[..16];
    // SAFETY: `out` holds 16 one-byte elements; the store is unaligned.
    unsafe { _mm_storeu_si128(out.as_mut_ptr().cast(), v) }
}

/// The 32 codes of `x`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn load32<T: Fp8>(x: &[T]) -> __m256i {
    let x = &x[..32];
    // SAFETY: `x` holds 32 one-byte elements; the load is unaligned.
    unsafe { _mm256_loadu_si256(x.as_ptr().cast()) }
}

/// 32 codes into `out`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn store32<T: Fp8>(out: &mut [T], v: __m256i) {
    let out = &mut out[..32];
    // SAFETY: `out` holds 32 one-byte elements; the store is unaligned.
    unsafe { _mm256_storeu_si256(out.as_mut_ptr().cast(), v) }
}

/// The bytes of `v` that are NaN or infinite codes, as a byte mask.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn odd_codes(f: &MiniFloat, v: __m256i) -> __m256i {
    let mag = _mm256_and_si256(v, _mm256_set1_epi8(0x7F));
    _mm256_cmpgt_epi8(mag, _mm256_set1_epi8(f.max_code as i8))
}

/// [`Products`]' tables in registers, each 16-byte table in both halves
/// (a byte shuffle looks up within each half).
struct Lookup {
    steps: __m256i,
    low: [__m256i; MOST_TABLES],
    tables: usize,
    low_end: i8,
    /// the scalar is negative
    negative: bool,
    /// an addition replaces the shuffle ([`Products::one_step`])
    one_step: bool,
    /// no code needs the cap ([`Products::uncapped`])
    uncapped: bool,
}

impl Lookup {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn new(p: &Products) -> Lookup {
        let wide = |t: &[u8; 16]| {
            // SAFETY: `t` holds 16 bytes; the load is unaligned.
            _mm256_broadcastsi128_si256(unsafe { _mm_loadu_si128(t.as_ptr().cast()) })
        };
        Lookup {
            steps: wide(&p.steps),
            low: p.low.each_ref().map(wide),
            tables: (p.low_end as usize).div_ceil(16),
            low_end: p.low_end as i8,
            negative: p.negative,
            one_step: p.one_step,
            uncapped: p.uncapped,
        }
    }

    /// `rnd(x·s)` for the 32 codes of `v`, or `None` where one of them is
    /// NaN or infinite.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn products(&self, f: &MiniFloat, v: __m256i) -> Option<__m256i> {
        let odd = odd_codes(f, v);
        (_mm256_testz_si256(odd, odd) == 1).then(|| self.finite_products(f, v))
    }

    /// `rnd(x·s)` for the 32 codes of `v`, none NaN or infinite: the
    /// magnitude code plus its step, capped at the largest finite code,
    /// or below `low_end` the whole-code table's entry; the sign the XOR
    /// of the two.
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn finite_products(&self, f: &MiniFloat, v: __m256i) -> __m256i {
        let mag = _mm256_and_si256(v, _mm256_set1_epi8(0x7F));
        // the shuffle reads the low 4 bits of each index (bit 7 is clear);
        // with one step every entry is the same, in every byte of `steps`
        let step = if self.one_step {
            self.steps
        } else {
            _mm256_shuffle_epi8(self.steps, mag)
        };
        let stepped = _mm256_add_epi8(mag, step);
        // below `low_end` the sum may wrap, but the tables' entry replaces it
        let mut r = if self.uncapped {
            stepped
        } else {
            _mm256_min_epu8(stepped, _mm256_set1_epi8(f.max_code as i8))
        };
        if self.tables > 0 {
            let mut low = _mm256_shuffle_epi8(self.low[0], mag);
            // a constant count, so the loop unrolls into tests of `tables`
            for k in 1..MOST_TABLES {
                if k < self.tables {
                    let past = _mm256_cmpgt_epi8(mag, _mm256_set1_epi8((16 * k - 1) as i8));
                    low = _mm256_blendv_epi8(low, _mm256_shuffle_epi8(self.low[k], mag), past);
                }
            }
            let above = _mm256_cmpgt_epi8(mag, _mm256_set1_epi8(self.low_end - 1));
            r = _mm256_blendv_epi8(low, r, above);
        }
        let r = _mm256_or_si256(r, _mm256_andnot_si256(mag, v));
        if self.negative {
            _mm256_xor_si256(r, _mm256_set1_epi8(0x80_u8 as i8))
        } else {
            r
        }
    }
}

/// `p` (in half's scale) rounded to the type, in registers: [`encode`]'s
/// rounding of the half's top bits, kept in place instead of shifted
/// down to a code (the half that [`decode`] would make of that code),
/// with its saturation, and with `nans` a NaN kept NaN.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn rounded(f: &MiniFloat, v: (__m256, __m256), nans: bool) -> (__m256, __m256) {
    let h = to_halves(v.0, v.1);
    let (abs, up) = round_halves(f, h);
    let shift = 10 - f.mant_bits as i32;
    let kept = _mm256_and_si256(up, _mm256_set1_epi16(!((1i32 << shift) - 1) as i16));
    let max = _mm256_set1_epi16(((f.max_code as i32) << shift) as i16);
    let mut r = _mm256_min_epu16(kept, max);
    if nans {
        let nan = _mm256_cmpgt_epi16(abs, _mm256_set1_epi16(0x7C00));
        r = _mm256_blendv_epi8(r, abs, nan);
    }
    let r = _mm256_or_si256(r, _mm256_and_si256(h, _mm256_set1_epi16(0x8000_u16 as i16)));
    (
        _mm256_cvtph_ps(_mm256_castsi256_si128(r)),
        _mm256_cvtph_ps(_mm256_extracti128_si256::<1>(r)),
    )
}

/// The op on 16 lanes in half's scale; a product scaled back once.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn apply16<const OP: Combine>(
    f: &MiniFloat,
    a: (__m256, __m256),
    b: (__m256, __m256),
) -> (__m256, __m256) {
    let (lo, hi) = (apply::<OP>(a.0, b.0), apply::<OP>(a.1, b.1));
    if OP != MUL || f.bias == 15 {
        return (lo, hi);
    }
    let back = _mm256_set1_ps(f32::from_bits(((15 - f.bias + 127) as u32) << 23));
    (_mm256_mul_ps(lo, back), _mm256_mul_ps(hi, back))
}

/// `a ⊕ b` on 16 codes.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block<T: Fp8, const OP: Combine>(a: __m128i, b: __m128i) -> __m128i {
    let f = &T::FORMAT;
    if f.has_inf {
        let v = apply16::<OP>(f, decode(f, a, true), decode(f, b, true));
        return encode(f, v, true);
    }
    let v = apply16::<OP>(f, decode(f, a, false), decode(f, b, false));
    let out = encode(f, v, false);
    let (na, nb) = (nan_codes(f, a), nan_codes(f, b));
    match OP {
        ADD | MUL => set_nans(f, out, _mm_or_si128(na, nb)),
        // the operand that is not NaN; both NaN: b
        _ => _mm_blendv_epi8(_mm_blendv_epi8(out, a, nb), b, na),
    }
}

/// `a ⊕ b` on 32 codes. e4m3's NaN codes are looked for in all 32 at
/// once and the lanes set only where there are any (rarely), instead of
/// blending every 16 as [`block`] does.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn block32<T: Fp8, const OP: Combine>(a: __m256i, b: __m256i) -> __m256i {
    let f = &T::FORMAT;
    let nans = f.has_inf;
    let (x, y) = (decode32(f, a, nans), decode32(f, b, nans));
    let lo = apply16::<OP>(f, (x[0], x[1]), (y[0], y[1]));
    let hi = apply16::<OP>(f, (x[2], x[3]), (y[2], y[3]));
    let out = encode32(f, [lo.0, lo.1, hi.0, hi.1], nans);
    if nans {
        return out;
    }
    let (na, nb) = (nan_codes32(f, a), nan_codes32(f, b));
    let any = _mm256_or_si256(na, nb);
    if _mm256_testz_si256(any, any) == 1 {
        return out;
    }
    match OP {
        ADD | MUL => _mm256_blendv_epi8(out, _mm256_set1_epi8(f.nan_code as i8), any),
        // the operand that is not NaN; both NaN: b
        _ => _mm256_blendv_epi8(_mm256_blendv_epi8(out, a, nb), b, na),
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x0: &[T], x1: &[T]) {
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let mut out = acc.chunks_exact_mut(32);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(32)).zip(x1.chunks_exact(32)) {
        store32(o, block32::<T, OP>(load32(a), load32(b)));
    }
    let rest = out.into_remainder();
    let mut at = len - rest.len();
    if len - at >= 16 {
        store(
            &mut acc[at..],
            block::<T, OP>(load(&x0[at..]), load(&x1[at..])),
        );
        at += 16;
    }
    for ((o, a), b) in acc[at..].iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
        *o = element::<T, OP>(*a, *b);
    }
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
pub fn combine_into<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x: &[T]) {
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(32);
    for (o, b) in (&mut out).zip(x.chunks_exact(32)) {
        let v = block32::<T, OP>(load32(o), load32(b));
        store32(o, v);
    }
    let rest = out.into_remainder();
    let mut at = len - rest.len();
    if len - at >= 16 {
        let v = block::<T, OP>(load(&acc[at..]), load(&x[at..]));
        store(&mut acc[at..], v);
        at += 16;
    }
    for (o, b) in acc[at..].iter_mut().zip(&x[at..]) {
        *o = element::<T, OP>(*o, *b);
    }
}

/// Whether the kernels must carry NaNs through the lanes for scalar `s`:
/// always for e5m2 (its infinities make NaNs); for e4m3 only when `s` is
/// NaN, since with a finite scalar a lane is NaN only where an operand is.
fn carries_nans(f: &MiniFloat, s: f32) -> bool {
    f.has_inf || s.is_nan()
}

/// `out` with the NaN code in the lanes of the byte mask `nan`.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn set_nans(f: &MiniFloat, out: __m128i, nan: __m128i) -> __m128i {
    _mm_blendv_epi8(out, _mm_set1_epi8(f.nan_code as i8), nan)
}

/// What the widening path of a scaled step needs to know of its scalar.
struct Scaled {
    sv: __m256,
    nans: bool,
    /// `s` is a power of two no larger than 1 in magnitude (every Avg at
    /// a power-of-two N)
    shrinks: bool,
    /// [`first_on_grid`] for `s`
    first: i8,
}

impl Scaled {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn new(f: &MiniFloat, s: f32) -> Scaled {
        Scaled {
            sv: _mm256_set1_ps(s),
            nans: carries_nans(f, s),
            shrinks: s != 0.0 && s.abs() <= 1.0 && s.to_bits() & 0x7F_FFFF == 0,
            // s = ±2^-k
            first: first_on_grid(f, 127 - ((s.to_bits() >> 23) & 0xFF).min(127)),
        }
    }
}

/// `rnd(x·s)` on 16 codes, widened.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale16(f: &MiniFloat, c: &Scaled, v: __m128i) -> __m128i {
    let (e, g) = decode(f, v, c.nans);
    let p = encode(f, (_mm256_mul_ps(e, c.sv), _mm256_mul_ps(g, c.sv)), c.nans);
    if c.nans {
        p
    } else {
        set_nans(f, p, nan_codes(f, v))
    }
}

/// `acc[i] = rnd(x[i]·s)`: 32 codes at a time by the tables
/// ([`fp8_products`](super::fp8_products)) where they apply, else widened.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn scale<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    scale_with(acc, x, &Scalar::new(s))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn scale_with<T: Fp8 + Arith>(acc: &mut [T], x: &[T], p: &Scalar<T>) {
    let f = &T::FORMAT;
    let (s, c, table) = (p.s, &p.c, &p.table);
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(32);
    for (o, a) in (&mut out).zip(x.chunks_exact(32)) {
        match table.as_ref().and_then(|t| t.products(f, load32(a))) {
            Some(p) => store32(o, p),
            None => {
                store(&mut o[..16], scale16(f, c, load(a)));
                store(&mut o[16..], scale16(f, c, load(&a[16..])));
            }
        }
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, a) in rest.iter_mut().zip(&x[at..]) {
        *o = T::mul(*a, s);
    }
}

/// For a scalar `±2^-k`, `k ≥ 0`, the least magnitude code (sign
/// cleared) whose product with the scalar is a code itself: a normal
/// whose exponent field exceeds `k` keeps its significand at an exponent
/// field of at least 1. Capped at 0x7F (an e4m3 NaN; e5m2's codes from
/// 0x7C up are infinities and NaNs, which [`off_grid`] sets aside).
fn first_on_grid(f: &MiniFloat, k: u32) -> i8 {
    (((k + 1) as u64) << f.mant_bits).min(0x7F) as i8
}

/// Whether some code of `v` times the scalar of [`first_on_grid`]'s
/// `first` may not be a code: nonzero below `first` (the product falls
/// below the normals), or infinite or NaN (an infinity, which the rounding
/// makes the largest finite value). e4m3's NaN lanes are set afterwards
/// (see the module's comment).
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn off_grid(f: &MiniFloat, v: __m128i, first: i8) -> bool {
    let mag = _mm_and_si128(v, _mm_set1_epi8(0x7F));
    let zero = _mm_cmpeq_epi8(mag, _mm_setzero_si128());
    let below = _mm_andnot_si128(zero, _mm_cmpgt_epi8(_mm_set1_epi8(first), mag));
    let off = if f.has_inf {
        let top = ((1i32 << (7 - f.mant_bits)) - 1) << f.mant_bits;
        _mm_or_si128(below, _mm_cmpgt_epi8(mag, _mm_set1_epi8(top as i8 - 1)))
    } else {
        below
    };
    _mm_testz_si128(off, off) == 0
}

/// `rnd(acc + rnd(x·s))` on 16 codes, widened. With `s` a power of two
/// no larger than 1 in magnitude, `x·s` is `x`'s significand at a lower
/// exponent, an fp8 value itself unless it falls below the normals, or
/// `x` is infinite: vectors with no such lane skip the rounding.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul16(f: &MiniFloat, c: &Scaled, va: __m128i, vx: __m128i) -> __m128i {
    let (e, g) = decode(f, vx, c.nans);
    let p = (_mm256_mul_ps(e, c.sv), _mm256_mul_ps(g, c.sv));
    let (pe, pg) = if c.shrinks && !off_grid(f, vx, c.first) {
        p
    } else {
        rounded(f, p, c.nans)
    };
    let (ae, ag) = decode(f, va, c.nans);
    let sum = encode(f, (_mm256_add_ps(ae, pe), _mm256_add_ps(ag, pg)), c.nans);
    if c.nans {
        sum
    } else {
        set_nans(f, sum, _mm_or_si128(nan_codes(f, va), nan_codes(f, vx)))
    }
}

/// `a + p` on 32 codes into `out`, `p` products from the tables (finite,
/// not NaN): Sum's step without the NaN handling neither operand needs,
/// unless `a_nans` (`a` a running result, which an earlier input may have
/// made NaN, or e5m2 infinite) and `a` holds such a code.
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn add_products32<T: Fp8>(out: &mut [T], a: __m256i, p: __m256i, a_nans: bool) {
    let f = &T::FORMAT;
    if a_nans {
        let odd = odd_codes(f, a);
        if _mm256_testz_si256(odd, odd) == 0 {
            return store32(out, block32::<T, ADD>(a, p));
        }
    }
    // two finite values: the sum is finite or saturates
    let (x, y) = (decode32(f, a, false), decode32(f, p, false));
    let sum: [__m256; 4] = std::array::from_fn(|i| _mm256_add_ps(x[i], y[i]));
    store32(out, encode32(f, sum, false));
}

/// `acc[i] = rnd(acc[i] + rnd(x[i]·s))`: the products by the tables
/// where they apply, then Sum's block; else widened.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_add<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    premul_add_with(acc, x, &Scalar::new(s))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_add_with<T: Fp8 + Arith>(acc: &mut [T], x: &[T], p: &Scalar<T>) {
    let f = &T::FORMAT;
    let (s, c, table) = (p.s, &p.c, &p.table);
    let len = acc.len();
    let x = &x[..len];
    let mut out = acc.chunks_exact_mut(32);
    for (o, b) in (&mut out).zip(x.chunks_exact(32)) {
        match table.as_ref().and_then(|t| t.products(f, load32(b))) {
            Some(p) => add_products32(o, load32(o), p, true),
            None => {
                let lo = premul16(f, c, load(o), load(b));
                let hi = premul16(f, c, load(&o[16..]), load(&b[16..]));
                store(o, lo);
                store(&mut o[16..], hi);
            }
        }
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for (o, b) in rest.iter_mut().zip(&x[at..]) {
        *o = T::premul_add(*o, *b, s);
    }
}

/// `acc[i] = rnd(rnd(x0[i]·s) + rnd(x1[i]·s))`: both products by the
/// tables where they apply, then Sum's block, in one pass; else
/// [`scale`]'s and [`premul_add`]'s widened steps.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_two<T: Fp8 + Arith>(acc: &mut [T], x0: &[T], x1: &[T], s: T) {
    premul_two_with(acc, x0, x1, &Scalar::new(s))
}

#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn premul_two_with<T: Fp8 + Arith>(acc: &mut [T], x0: &[T], x1: &[T], p: &Scalar<T>) {
    let f = &T::FORMAT;
    let Some(table) = &p.table else {
        scale_with(acc, x0, p);
        return premul_add_with(acc, x1, p);
    };
    let (s, c) = (p.s, &p.c);
    let len = acc.len();
    let (x0, x1) = (&x0[..len], &x1[..len]);
    let mut out = acc.chunks_exact_mut(32);
    for ((o, a), b) in (&mut out).zip(x0.chunks_exact(32)).zip(x1.chunks_exact(32)) {
        let (va, vb) = (load32(a), load32(b));
        let odd = _mm256_or_si256(odd_codes(f, va), odd_codes(f, vb));
        if _mm256_testz_si256(odd, odd) == 1 {
            let (p, q) = (table.finite_products(f, va), table.finite_products(f, vb));
            add_products32(o, p, q, false)
        } else {
            let lo = premul16(f, c, scale16(f, c, load(a)), load(b));
            let hi = premul16(f, c, scale16(f, c, load(&a[16..])), load(&b[16..]));
            store(o, lo);
            store(&mut o[16..], hi);
        }
    }
    let rest = out.into_remainder();
    let at = len - rest.len();
    for ((o, a), b) in rest.iter_mut().zip(&x0[at..]).zip(&x1[at..]) {
        *o = T::premul_add(T::mul(*a, s), *b, s);
    }
}

/// What the steps need of the scalar, computed once for a whole call's
/// blocks ([`premul_blocks`]) rather than for each: its tables loaded
/// into registers, and what the widening path needs.
struct Scalar<T> {
    s: T,
    c: Scaled,
    table: Option<Lookup>,
}

impl<T: Fp8 + Arith> Scalar<T> {
    #[target_feature(enable = "avx2,fma,f16c")]
    #[inline]
    fn new(s: T) -> Scalar<T> {
        Scalar {
            s,
            c: Scaled::new(&T::FORMAT, s.to_f64() as f32),
            table: products(s).map(|p| Lookup::new(p)),
        }
    }
}

/// Avg's and PreMulSum's blocks, as `fold::premul_fold` with this
/// module's steps, the scalar prepared once.
#[target_feature(enable = "avx2,fma,f16c")]
pub fn premul_blocks<'a, T: Fp8 + Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
    s: T,
) {
    let p = Scalar::new(s);
    premul_fold(
        block,
        starts,
        n,
        input,
        emit,
        PremulSteps {
            scale: |a: &mut [T], x: &[T]| scale_with(a, x, &p),
            two: |a: &mut [T], x0: &[T], x1: &[T]| premul_two_with(a, x0, x1, &p),
            add: |a: &mut [T], x: &[T]| premul_add_with(a, x, &p),
        },
    )
}
