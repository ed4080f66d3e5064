//! An exact reference for the kernels' tests, written from the formats'
//! definitions and sharing nothing with the kernels: every value is a big
//! integer times a power of two, so `a + x·s` is computed without error and
//! then rounded once to the format (precision, exponent range, round to
//! nearest with ties to even, overflow to infinity), IEEE 754's special
//! cases included.

use num_bigint::{BigInt, BigUint, Sign};

/// A binary floating-point format, by its parameters.
#[derive(Clone, Copy, Debug)]
pub struct Format {
    /// significant bits, the implicit one included
    pub precision: u32,
    /// exponent of the smallest normal value
    pub min_exp: i32,
    /// exponent of the largest finite values
    pub max_exp: i32,
}

pub const HALF: Format = Format {
    precision: 11,
    min_exp: -14,
    max_exp: 15,
};
pub const BFLOAT16: Format = Format {
    precision: 8,
    min_exp: -126,
    max_exp: 127,
};
pub const FLOAT: Format = Format {
    precision: 24,
    min_exp: -126,
    max_exp: 127,
};
pub const DOUBLE: Format = Format {
    precision: 53,
    min_exp: -1022,
    max_exp: 1023,
};

/// A finite `v` as `m · 2^e`.
fn split(v: f64) -> (BigInt, i32) {
    let bits = v.to_bits();
    let exp = ((bits >> 52) & 0x7FF) as i32;
    let frac = bits & ((1 << 52) - 1);
    let (m, e) = if exp == 0 {
        (frac, -1074)
    } else {
        (frac | 1 << 52, exp - 1075)
    };
    let m = BigInt::from(m);
    (if v.is_sign_negative() { -m } else { m }, e)
}

/// `2^q` for `-1074 <= q <= 1023`, built from its bits.
fn pow2(q: i32) -> f64 {
    assert!((-1074..=1023).contains(&q), "2^{q} is not a double");
    if q >= -1022 {
        f64::from_bits(((q + 1023) as u64) << 52)
    } else {
        f64::from_bits(1 << (q + 1074))
    }
}

/// `m · 2^e` rounded once to `f`; `m` nonzero.
fn round(f: Format, m: &BigInt, e: i32) -> f64 {
    let neg = m.sign() == Sign::Minus;
    let mag: BigUint = m.magnitude().clone();
    let p = f.precision as i32;
    let top = e + mag.bits() as i32 - 1;
    // the exponent of the last kept bit: p bits below the top, but never
    // finer than the subnormals' spacing
    let q = (top - (p - 1)).max(f.min_exp - (p - 1));
    let r = if q <= e {
        mag << (e - q) as u64
    } else {
        let shift = (q - e) as u64;
        let mut r: BigUint = &mag >> shift;
        let rem = &mag - (&r << shift);
        let half = BigUint::from(1u8) << (shift - 1);
        if rem > half || (rem == half && r.bit(0)) {
            r += 1u8;
        }
        r
    };
    let r = u64::try_from(r).expect("p + 1 bits fit in 64");
    let value = if r != 0 && 63 - r.leading_zeros() as i32 + q > f.max_exp {
        f64::INFINITY
    } else {
        // exact: r has at most p + 1 bits and 2^q is a double
        r as f64 * pow2(q)
    };
    if neg { -value } else { value }
}

/// `a + x·s` rounded once to `f`. The arguments are values of `f` (as
/// doubles); the result is one too.
pub fn fma(f: Format, a: f64, x: f64, s: f64) -> f64 {
    if a.is_nan() || x.is_nan() || s.is_nan() {
        return f64::NAN;
    }
    let product_negative = x.is_sign_negative() != s.is_sign_negative();
    if x.is_infinite() || s.is_infinite() {
        if x == 0.0 || s == 0.0 {
            return f64::NAN; // 0 · ∞
        }
        let p = if product_negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        };
        return if a.is_infinite() && a != p {
            f64::NAN
        } else {
            p
        };
    }
    if a.is_infinite() {
        return a;
    }
    let (ma, ea) = split(a);
    let (mx, ex) = split(x);
    let (ms, es) = split(s);
    let (mp, ep) = (mx * ms, ex + es);
    let e = ea.min(ep);
    let sum = (ma << (ea - e) as u32) + (mp.clone() << (ep - e) as u32);
    if sum.sign() == Sign::NoSign {
        // an exact zero is -0 only when both terms are zeros of that sign
        let both_negative_zeros =
            a == 0.0 && a.is_sign_negative() && mp.sign() == Sign::NoSign && product_negative;
        return if both_negative_zeros { -0.0 } else { 0.0 };
    }
    round(f, &sum, e)
}

/// `a + b` rounded once to `f`.
pub fn add(f: Format, a: f64, b: f64) -> f64 {
    fma(f, a, b, 1.0)
}

/// `x · s` rounded once to `f` (a zero keeps the product's sign).
pub fn mul(f: Format, x: f64, s: f64) -> f64 {
    let negative = x.is_sign_negative() != s.is_sign_negative();
    fma(f, if negative { -0.0 } else { 0.0 }, x, s)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reference against facts about the formats, computed by hand.
    #[test]
    fn rounds_as_the_formats_define() {
        let p = |e: i32| 2f64.powi(e);
        // ties to even, and a hair above a tie
        assert_eq!(add(FLOAT, 1.0, p(-24)), 1.0);
        assert_eq!(add(FLOAT, 1.0 + p(-23), p(-24)), 1.0 + p(-22));
        assert_eq!(fma(FLOAT, 1.0, p(-24), 1.0 + p(-52)), 1.0 + p(-23));
        // overflow: the largest float plus half its spacing is infinite
        let max = (2.0 - p(-23)) * p(127);
        assert_eq!(add(FLOAT, max, p(103)), f64::INFINITY);
        assert_eq!(add(FLOAT, max, p(102)), max);
        // subnormals: half's smallest is 2^-24, half of it ties to 0
        assert_eq!(mul(HALF, p(-24), 0.5), 0.0);
        assert_eq!(mul(HALF, p(-24), 0.75), p(-24));
        assert_eq!(mul(HALF, -p(-24), 0.25).to_bits(), (-0.0f64).to_bits());
        // bfloat16 keeps 8 bits: 1 + 2^-8 ties to 1, 1 + 3·2^-8 to 1 + 2^-6
        assert_eq!(add(BFLOAT16, 1.0, p(-8)), 1.0);
        assert_eq!(add(BFLOAT16, 1.0, 3.0 * p(-8)), 1.0 + p(-6));
        // double: the exact product's low bits decide
        assert_eq!(fma(DOUBLE, -1.0, 1.0 + p(-52), 1.0 - p(-52)), -p(-104));
        // special values and signed zeros
        assert!(fma(FLOAT, f64::INFINITY, -1.0, f64::INFINITY).is_nan());
        assert!(fma(FLOAT, 1.0, 0.0, f64::INFINITY).is_nan());
        assert_eq!(fma(FLOAT, 1.0, -2.0, f64::INFINITY), f64::NEG_INFINITY);
        assert_eq!(add(FLOAT, -0.0, -0.0).to_bits(), (-0.0f64).to_bits());
        assert_eq!(add(FLOAT, -0.0, 0.0).to_bits(), 0);
        assert_eq!(add(FLOAT, 1.0, -1.0).to_bits(), 0);
    }
}
