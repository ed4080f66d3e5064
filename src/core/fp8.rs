//! NCCL's 8-bit floats, `float8 e4m3fn` and `e5m2`: their formats, the
//! element types that carry them, and exact conversions to and from f32
//! (decoding by a table computed at compile time, encoding by integer
//! arithmetic checked against an exact reference).

use super::datatype::round_small;
use std::fmt;

/// Parameters of a small IEEE-like binary format.
pub(crate) struct MiniFloat {
    pub(crate) mant_bits: u32,
    pub(crate) bias: i32,
    /// e5m2 has infinities; e4m3fn has none and only one NaN pattern per sign.
    pub(crate) has_inf: bool,
    pub(crate) max_code: u8,
    pub(crate) nan_code: u8,
}

/// An fp8 type and its format (the kernels' vector code reads it).
#[cfg(x86_simd)]
pub(crate) trait Fp8: Copy {
    const FORMAT: MiniFloat;
    /// The value with code `c`.
    fn of_code(c: u8) -> Self;
    /// The value's code.
    fn code(self) -> u8;
}

const E4M3: MiniFloat = MiniFloat {
    mant_bits: 3,
    bias: 7,
    has_inf: false,
    max_code: 0x7E,
    nan_code: 0x7F,
};
const E5M2: MiniFloat = MiniFloat {
    mant_bits: 2,
    bias: 15,
    has_inf: true,
    max_code: 0x7B,
    nan_code: 0x7F,
};

impl MiniFloat {
    /// Every code's value, computed from the bit fields at compile time:
    /// decoding is one table lookup.
    const fn values(&self) -> [f32; 256] {
        let m = self.mant_bits;
        let mut out = [0f32; 256];
        let mut c = 0;
        while c < 256 {
            let sign = ((c as u32) & 0x80) << 24;
            let mag = (c & 0x7F) as u32;
            let exp_field = mag >> m;
            let mant = mag & ((1 << m) - 1);
            let exp_all_ones = (1 << (7 - m)) - 1;
            let bits = if self.has_inf && exp_field == exp_all_ones {
                if mant == 0 { 0x7F80_0000 } else { 0x7FC0_0000 }
            } else if !self.has_inf && mag == self.nan_code as u32 {
                0x7FC0_0000
            } else if exp_field == 0 {
                // mant × 2^(1 - bias - m): exact in f32
                let unit = f32::from_bits(((1 - self.bias - m as i32 + 127) as u32) << 23);
                (mant as f32 * unit).to_bits()
            } else {
                (((exp_field as i32 - self.bias + 127) as u32) << 23) | (mant << (23 - m))
            };
            out[c] = f32::from_bits(sign | bits);
            c += 1;
        }
        out
    }

    /// [`MiniFloat::encode_exact`] with integer arithmetic on the f32 bits:
    /// a normal result rounds the f32 significand to `mant_bits` bits (ties
    /// to even, a carry moving into the exponent); a subnormal one scales by
    /// a power of two (exact) and rounds to an integer.
    #[inline]
    fn encode(&self, x: f32) -> u8 {
        let bits = x.to_bits();
        let sign = ((bits >> 24) & 0x80) as u8;
        let abs = bits & 0x7FFF_FFFF;
        if abs > 0x7F80_0000 {
            return sign | self.nan_code;
        }
        let m = self.mant_bits;
        let shift = 23 - m;
        let min_normal = ((1 - self.bias + 127) as u32) << 23;
        let code = if abs < min_normal {
            let up = f32::from_bits(((self.bias - 1 + m as i32 + 127) as u32) << 23);
            round_small(f32::from_bits(abs) * up)
        } else {
            let rounded = abs + ((1 << (shift - 1)) - 1) + ((abs >> shift) & 1);
            (rounded >> shift) - (((127 - self.bias) as u32) << m)
        };
        sign | code.min(self.max_code as u32) as u8
    }

    /// The reference decoder, from the format's definition in f64 (the tests
    /// check the table against it).
    #[cfg(test)]
    fn decode_exact(&self, bits: u8) -> f32 {
        let sign: f64 = if bits & 0x80 != 0 { -1.0 } else { 1.0 };
        let mag = bits & 0x7F;
        let exp_field = (mag >> self.mant_bits) as i32;
        let mant = (mag & ((1 << self.mant_bits) - 1)) as f64;
        let exp_all_ones = (1 << (7 - self.mant_bits)) - 1;
        if self.has_inf && exp_field == exp_all_ones {
            return if mant == 0.0 {
                sign as f32 * f32::INFINITY
            } else {
                f32::NAN
            };
        }
        if !self.has_inf && mag == self.nan_code {
            return f32::NAN;
        }
        let scale = |e: i32| 2f64.powi(e);
        let v = if exp_field == 0 {
            mant * scale(1 - self.bias - self.mant_bits as i32)
        } else {
            (1.0 + mant / scale(self.mant_bits as i32)) * scale(exp_field - self.bias)
        };
        (sign * v) as f32
    }

    /// Round to nearest, ties to even, saturating to the largest finite value
    /// (NCCL converts with `__NV_SATFINITE`): the reference encoder, from
    /// the format's definition in f64 (the tests check [`MiniFloat::encode`]
    /// against it).
    #[cfg(test)]
    fn encode_exact(&self, x: f32) -> u8 {
        let sign: u8 = if x.is_sign_negative() { 0x80 } else { 0 };
        if x.is_nan() {
            return sign | self.nan_code;
        }
        let a = (x as f64).abs();
        if a.is_infinite() {
            return sign | self.max_code;
        }
        let m = self.mant_bits as i32;
        let emin = 1 - self.bias;
        let code: u32 = if a < 2f64.powi(emin) {
            // subnormal: integer multiples of 2^(emin - m); rounding up to
            // 2^m lands exactly on the smallest normal's code
            (a / 2f64.powi(emin - m)).round_ties_even() as u32
        } else {
            let mut e = a.log2().floor() as i32;
            // log2 may be off by one at exact powers of two
            if 2f64.powi(e) > a {
                e -= 1;
            } else if 2f64.powi(e + 1) <= a {
                e += 1;
            }
            let mut mant = ((a / 2f64.powi(e) - 1.0) * 2f64.powi(m)).round_ties_even() as u32;
            if mant == 1 << m {
                mant = 0;
                e += 1;
            }
            let biased = e + self.bias;
            if biased > 0x7F >> m {
                u32::MAX
            } else {
                ((biased as u32) << m) | mant
            }
        };
        sign | code.min(self.max_code as u32) as u8
    }
}

static E4M3_VALUES: [f32; 256] = E4M3.values();
static E5M2_VALUES: [f32; 256] = E5M2.values();

macro_rules! fp8_type {
    ($name:ident, $fmt:ident, $values:ident, $doc:literal) => {
        #[doc = $doc]
        #[derive(Clone, Copy, PartialEq, Eq, Hash, Default)]
        #[repr(transparent)]
        pub struct $name(pub u8);
        #[cfg(x86_simd)]
        impl Fp8 for $name {
            const FORMAT: MiniFloat = $fmt;
            fn of_code(c: u8) -> Self {
                $name(c)
            }
            fn code(self) -> u8 {
                self.0
            }
        }
        impl $name {
            pub fn from_f32(x: f32) -> Self {
                $name($fmt.encode(x))
            }
            pub fn to_f32(self) -> f32 {
                $values[self.0 as usize]
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}", self.to_f32())
            }
        }
    };
}
fp8_type!(
    F8E4M3,
    E4M3,
    E4M3_VALUES,
    "`ncclFloat8e4m3`: 1 sign, 4 exponent, 3 mantissa bits, no infinity, max 448."
);
fp8_type!(
    F8E5M2,
    E5M2,
    E5M2_VALUES,
    "`ncclFloat8e5m2`: 1 sign, 5 exponent, 2 mantissa bits, IEEE-like, max 57344."
);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn e4m3_known_values() {
        assert_eq!(F8E4M3::from_f32(1.0).0, 0x38);
        assert_eq!(F8E4M3::from_f32(448.0).0, 0x7E);
        assert_eq!(F8E4M3::from_f32(1e6).0, 0x7E, "saturates");
        assert_eq!(F8E4M3::from_f32(-1e6).0, 0xFE);
        assert_eq!(
            F8E4M3::from_f32(2f32.powi(-9)).0,
            0x01,
            "smallest subnormal"
        );
        assert_eq!(F8E4M3(0x01).to_f32(), 2f32.powi(-9));
        assert!(F8E4M3(0x7F).to_f32().is_nan());
        // 1.0625 is halfway between 1.0 (0x38) and 1.125 (0x39): ties to even
        assert_eq!(F8E4M3::from_f32(1.0625).0, 0x38);
        assert_eq!(F8E4M3::from_f32(1.1875).0, 0x3A);
    }

    #[test]
    fn e5m2_known_values() {
        assert_eq!(F8E5M2::from_f32(1.0).0, 0x3C);
        assert_eq!(F8E5M2(0x7B).to_f32(), 57344.0);
        assert_eq!(F8E5M2(0x7C).to_f32(), f32::INFINITY);
        assert!(F8E5M2(0x7D).to_f32().is_nan());
        assert_eq!(F8E5M2::from_f32(f32::INFINITY).0, 0x7B, "satfinite");
        assert_eq!(F8E5M2(0x01).to_f32(), 2f32.powi(-16));
    }

    #[test]
    fn fp8_round_trips_every_code() {
        for c in 0..=255u8 {
            let a = F8E4M3(c);
            if !a.to_f32().is_nan() {
                assert_eq!(F8E4M3::from_f32(a.to_f32()).0, c, "e4m3 code {c:#x}");
            }
            let b = F8E5M2(c);
            if b.to_f32().is_finite() {
                assert_eq!(F8E5M2::from_f32(b.to_f32()).0, c, "e5m2 code {c:#x}");
            }
        }
    }

    #[test]
    fn fp8_table_matches_the_reference_decoder() {
        for fmt in [&E4M3, &E5M2] {
            let table = fmt.values();
            for c in 0..=255u8 {
                let (got, want) = (table[c as usize], fmt.decode_exact(c));
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "code {c:#x}: {got} != {want}"
                );
            }
        }
    }

    #[test]
    fn fp8_fast_encoder_matches_the_reference() {
        // every value near a code or a midpoint between two codes (where
        // rounding decides), a sweep of all f32 bit patterns, and specials
        let mut xs: Vec<f32> = vec![0.0, -0.0, f32::INFINITY, f32::NEG_INFINITY, f32::NAN];
        xs.extend([f32::MAX, f32::MIN_POSITIVE, f32::from_bits(1), 1e-30, 1e30]);
        for fmt in [&E4M3, &E5M2] {
            let table = fmt.values();
            for c in 0..0x80usize {
                let (lo, hi) = (table[c], table[(c + 1).min(0x7F)]);
                for v in [lo, (lo + hi) / 2.0, hi * 1.5] {
                    if v.is_finite() {
                        for d in -3i32..=3 {
                            let b = (v.to_bits() as i32 + d).max(0) as u32;
                            xs.push(f32::from_bits(b));
                            xs.push(-f32::from_bits(b));
                        }
                    }
                }
            }
        }
        xs.extend((0..u32::MAX / 65_521).map(|k| f32::from_bits(k * 65_521)));
        for fmt in [&E4M3, &E5M2] {
            for &x in &xs {
                assert_eq!(
                    fmt.encode(x),
                    fmt.encode_exact(x),
                    "{x:e} ({:#010x}), {} mantissa bits",
                    x.to_bits(),
                    fmt.mant_bits
                );
            }
        }
    }

    #[test]
    fn fp8_rounds_to_nearest() {
        // every value between two neighbours goes to the nearer one
        for c in 0..0x7Du8 {
            let (lo, hi) = (F8E4M3(c).to_f32(), F8E4M3(c + 1).to_f32());
            if hi.is_nan() {
                break;
            }
            let below_mid = lo + (hi - lo) * 0.49;
            let above_mid = lo + (hi - lo) * 0.51;
            assert_eq!(F8E4M3::from_f32(below_mid).0, c);
            assert_eq!(F8E4M3::from_f32(above_mid).0, c + 1);
        }
    }
}
