//! fp8 products with one scalar as table lookups on the codes: what
//! `fp8_v3` uses for Avg's and PreMulSum's `rnd(x·s)` instead of
//! widening, multiplying and rounding back.
//!
//! With `s` fixed, `rnd(x·s)` is a function of `x`'s code alone (its sign
//! the XOR of the two signs, its magnitude one of `|x|`'s magnitude). For
//! normal `x` and `s` whose product stays normal, it is `x`'s code plus a
//! step that depends only on `x`'s significand bits: the product of two
//! significands, `(2^M + m)(2^M + m_s)`, is rounded to M bits the same way
//! at every exponent, and moves the exponent by the same amount; the
//! saturation (`__NV_SATFINITE`) is a cap on the code. So one lookup in a
//! table of 2^M entries (a byte shuffle), an addition and a minimum give
//! the product's magnitude code. Below some code (subnormal `x`, products
//! that fall below the normals, where the rounding depends on the
//! exponent too) the magnitude codes are looked up whole, 16 to a table.
//!
//! Each table is filled from the element function `Arith::mul` and the
//! step table is checked against it on every code it covers, so the
//! lookups give the element function's bits by construction; where the
//! step does not hold, the whole-code tables take over. Tables are built
//! once per format and scalar code, on first use.

use super::super::Arith;
use crate::core::fp8::Fp8;
use std::sync::OnceLock;

/// At most this many whole-code tables (16 codes each): beyond it, the
/// blends cost about what the widening path does.
pub(crate) const MOST_TABLES: usize = 4;

/// `rnd(x·s)` for one scalar `s`, as tables on `x`'s magnitude code.
pub(crate) struct Products {
    /// Added (modulo 256) to a magnitude code at or above `low_end`,
    /// indexed by the code's low 4 bits (the significand bits and the
    /// exponent's lowest, the entries repeating every 2^M), so the byte
    /// shuffle takes the magnitude code itself as its index; the sum is
    /// capped at the largest finite code.
    pub(crate) steps: [u8; 16],
    /// The product's magnitude code for each magnitude code below
    /// `low_end`, 16 codes per table.
    pub(crate) low: [[u8; 16]; MOST_TABLES],
    /// The least magnitude code the steps hold for (every code up to the
    /// largest finite one checked).
    pub(crate) low_end: u8,
    /// The scalar is negative.
    pub(crate) negative: bool,
    /// No code the steps hold for steps past the largest finite code, so
    /// the cap changes nothing (every scalar of at most 1 in magnitude).
    pub(crate) uncapped: bool,
    /// Every step is the same (a power-of-two scalar: Avg at a
    /// power-of-two N), so an addition can replace the lookup.
    pub(crate) one_step: bool,
}

static E4M3: [OnceLock<Option<Products>>; 256] = [const { OnceLock::new() }; 256];
static E5M2: [OnceLock<Option<Products>>; 256] = [const { OnceLock::new() }; 256];

/// The tables for scalar `s`, or `None` where lookups do not apply: a NaN
/// or infinite `s`, or one so small that the steps hold only above more
/// than [`MOST_TABLES`] tables of codes.
pub(crate) fn products<T: Fp8 + Arith>(s: T) -> Option<&'static Products> {
    let cache = if T::FORMAT.has_inf { &E5M2 } else { &E4M3 };
    cache[s.code() as usize]
        .get_or_init(|| Products::new(s))
        .as_ref()
}

impl Products {
    fn new<T: Fp8 + Arith>(s: T) -> Option<Products> {
        let f = &T::FORMAT;
        let scalar = s.code() & 0x7F;
        if scalar > f.max_code {
            return None;
        }
        let top = f.max_code as usize;
        let mut product = [0u8; 128];
        for (c, p) in product.iter_mut().enumerate().take(top + 1) {
            *p = T::mul(T::of_code(c as u8), T::of_code(scalar)).code();
            // two positive finite values give a positive finite product
            // (saturated); anything else would break the sign rule
            if *p > f.max_code {
                return None;
            }
        }
        let steps = steps(f.mant_bits, f.bias, scalar);
        let holds = |c: usize| product[c] == (c as u8).wrapping_add(steps[c & 15]).min(f.max_code);
        let mut low_end = top + 1;
        while low_end > 0 && holds(low_end - 1) {
            low_end -= 1;
        }
        if low_end.div_ceil(16) > MOST_TABLES {
            return None;
        }
        let mut low = [[0u8; 16]; MOST_TABLES];
        for (c, p) in product.iter().enumerate().take(low_end) {
            low[c / 16][c % 16] = *p;
        }
        let uncapped = (low_end..=top).all(|c| (c as u8).wrapping_add(steps[c & 15]) <= f.max_code);
        Some(Products {
            steps,
            low,
            low_end: low_end as u8,
            negative: s.code() & 0x80 != 0,
            uncapped,
            one_step: steps.iter().all(|&k| k == steps[0]),
        })
    }
}

/// For a normal scalar magnitude code `scalar` (M = `mant`
/// significand bits), what `x·s` adds to a normal `x`'s magnitude code
/// for each value of `x`'s significand bits `m`, while the product stays
/// normal: the significands' product `(2^M + m)(2^M + m_s)`, in
/// `[2^2M, 2^(2M+2))`, rounded to M + 1 bits (to nearest, ties to even)
/// is `2^j·q`, `q` in `[2^M, 2^(M+1))`; the exponent field moves by
/// `e_s − bias + j` and the significand bits become `q − 2^M`; indexed by
/// the low 4 bits of `x`'s code, each `m` repeated. Zeros for
/// a subnormal or zero scalar (the whole-code tables then cover the codes
/// the check finds wrong).
fn steps(mant: u32, bias: i32, scalar: u8) -> [u8; 16] {
    let mut out = [0u8; 16];
    let e_s = (scalar >> mant) as i32;
    if e_s == 0 {
        return out;
    }
    let one = 1u32 << mant;
    let m_s = scalar as u32 & (one - 1);
    for (i, step) in out.iter_mut().enumerate() {
        let m = i & (one as usize - 1);
        let p = (one + m as u32) * (one + m_s);
        let mut j = (p >= 2 * one * one) as i32;
        let shift = mant + j as u32;
        let (mut q, rest, half) = (p >> shift, p & ((1 << shift) - 1), 1 << (shift - 1));
        if rest > half || (rest == half && q & 1 == 1) {
            q += 1;
        }
        if q == 2 * one {
            q = one;
            j += 1;
        }
        let moved = ((e_s - bias + j) << mant) + q as i32 - one as i32 - m as i32;
        *step = moved as u8;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{F8E4M3, F8E5M2};

    /// The tables' answer for magnitude code `c`, as the vector code
    /// computes it.
    fn looked_up(p: &Products, max: u8, c: u8) -> u8 {
        if c < p.low_end {
            p.low[c as usize / 16][c as usize % 16]
        } else if p.uncapped {
            c.wrapping_add(p.steps[c as usize % 16])
        } else {
            c.wrapping_add(p.steps[c as usize % 16]).min(max)
        }
    }

    fn every_scalar<T: Fp8 + Arith>() -> usize {
        let f = &T::FORMAT;
        let mut with_tables = 0;
        for s in 0..=255u8 {
            let Some(p) = products(T::of_code(s)) else {
                continue;
            };
            with_tables += 1;
            for x in 0..=255u8 {
                if x & 0x7F > f.max_code {
                    continue;
                }
                let want = T::mul(T::of_code(x), T::of_code(s)).code();
                let got = looked_up(p, f.max_code, x & 0x7F) | ((x ^ s) & 0x80);
                assert_eq!(got, want, "{} code {x:#04x} times {s:#04x}", T::DTYPE);
            }
        }
        with_tables
    }

    #[test]
    fn the_tables_give_the_element_product_for_every_code_and_scalar() {
        // every normal scalar takes tables: 256 codes less zeros and
        // subnormals (8 and 4 per sign) and NaN (e4m3: 1 per sign) or
        // infinities and NaN (e5m2: 4 per sign)
        let e4m3 = every_scalar::<F8E4M3>();
        let e5m2 = every_scalar::<F8E5M2>();
        assert_eq!(
            (e4m3, e5m2),
            (256 - 16 - 2, 256 - 8 - 8),
            "scalars with tables"
        );
    }

    #[test]
    fn the_steps_alone_hold_above_the_scalars_subnormal_products() {
        // Avg at N = 2 (s = 0.5) and PreMulSum(0.3): every normal x whose
        // product is normal takes the steps, so few codes need tables
        for s in [0.5, 0.3, 0.25] {
            let p = products(F8E4M3::from_f32(s)).unwrap();
            // 0.5 = 2^-1: products below 2^-6 are the codes under 2^-5, 16
            assert!(p.low_end <= 24, "e4m3 s = {s}: tables up to {}", p.low_end);
            // and a scalar below 1 never needs the cap; a power of two
            // steps every code alike
            assert!(p.uncapped, "e4m3 s = {s}: capped");
            assert_eq!(p.one_step, s != 0.3, "e4m3 s = {s}: one step");
            let p = products(F8E5M2::from_f32(s)).unwrap();
            assert!(p.low_end <= 12, "e5m2 s = {s}: tables up to {}", p.low_end);
            assert!(p.uncapped, "e5m2 s = {s}: capped");
            assert_eq!(p.one_step, s != 0.3, "e5m2 s = {s}: one step");
        }
    }
}
