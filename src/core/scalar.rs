//! One element of any datatype, held exactly ([`Scalar`]), its text form,
//! and the rule for which decimals are elements of a datatype.
//!
//! An f64 cannot carry every 64-bit integer, so values that travel between
//! an input file, the engine, the reference and the output are carried as a
//! `Scalar`: integers as `i128` (which holds every int8..uint64 value),
//! floats as `f64` (which holds every value of every float type rankwise
//! has: fp8, half, bfloat16, float and double).
//!
//! Text: [`fmt::Display`] prints the shortest decimal that reads back to
//! the same element, and `inf`, `-inf`, `nan` for the non-finite floats;
//! [`Scalar::parse`] reads a decimal, correctly rounded, and accepts it only
//! if it denotes an element of the datatype exactly.

use super::{DataType, Element, F8E4M3, F8E5M2};
use half::{bf16, f16};
use std::fmt;

/// One element of some datatype: `Int` for the integer types, `Float` for
/// the float types. Equality is bitwise: `0.0 != -0.0`, and a NaN equals a
/// NaN with the same bits.
#[derive(Debug, Clone, Copy)]
pub enum Scalar {
    Int(i128),
    Float(f64),
}

impl PartialEq for Scalar {
    fn eq(&self, other: &Scalar) -> bool {
        match (self, other) {
            (Scalar::Int(a), Scalar::Int(b)) => a == b,
            (Scalar::Float(a), Scalar::Float(b)) => a.to_bits() == b.to_bits(),
            _ => false,
        }
    }
}
impl Eq for Scalar {}

impl fmt::Display for Scalar {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Scalar::Int(i) => write!(f, "{i}"),
            Scalar::Float(x) if x.is_nan() => f.write_str("nan"),
            Scalar::Float(x) if x.is_infinite() => {
                f.write_str(if x > 0.0 { "inf" } else { "-inf" })
            }
            // Rust prints the shortest digits that read back to the same
            // f64, positionally (the verify CSVs' format)
            Scalar::Float(x) => write!(f, "{x}"),
        }
    }
}

/// A type's largest magnitude for a message: `65504`, `1.7976931348623157e308`.
fn limit_text(x: f64) -> String {
    if x < 1e16 {
        format!("{x}")
    } else {
        format!("{x:e}")
    }
}

/// Longest piece of a rejected input quoted back in an error.
const QUOTE_CHARS: usize = 48;

impl Scalar {
    /// A value given by a closed-form formula in f64 (an integral value for
    /// the integer types), as an element of `dt`.
    pub fn from_f64(dt: DataType, x: f64) -> Scalar {
        if dt.is_float() {
            Scalar::Float(x)
        } else {
            Scalar::Int(x as i128)
        }
    }

    /// The value as an f64: exact for floats and for integers up to 2^53.
    pub fn to_f64(self) -> f64 {
        match self {
            Scalar::Int(i) => i as f64,
            Scalar::Float(x) => x,
        }
    }

    /// The value as an integer (a float truncated toward zero, saturating).
    pub fn to_i128(self) -> i128 {
        match self {
            Scalar::Int(i) => i,
            Scalar::Float(x) => x as i128,
        }
    }

    /// The element of `dt` this value becomes when written into a buffer of
    /// that type ([`Element::from_scalar`]): integers keep their low bits
    /// (two's complement), floats round to nearest, ties to even (fp8
    /// saturates to its largest finite value; an e5m2 infinity stays one).
    pub fn to_type(self, dt: DataType) -> Scalar {
        fn through<T: Element>(s: Scalar) -> Scalar {
            T::from_scalar(s).to_scalar()
        }
        use DataType::*;
        match dt {
            Int8 => through::<i8>(self),
            Uint8 => through::<u8>(self),
            Int32 => through::<i32>(self),
            Uint32 => through::<u32>(self),
            Int64 => through::<i64>(self),
            Uint64 => through::<u64>(self),
            Float16 => through::<f16>(self),
            Float32 => through::<f32>(self),
            Float64 => through::<f64>(self),
            Bfloat16 => through::<bf16>(self),
            Float8e4m3 => through::<F8E4M3>(self),
            Float8e5m2 => through::<F8E5M2>(self),
        }
    }

    /// Reads `text` as an element of `dt`: a decimal (`-12`, `0.5`,
    /// `1.5e-3`; JSON's number syntax, a leading `+` allowed), or for the
    /// float types `inf`, `-inf`, `+inf`, `infinity`, `nan` (any case).
    /// A float decimal is rounded correctly to f64 first, then must be a
    /// value of `dt` exactly; an integer decimal must be integral and in
    /// the type's range. The error says what the text is and what the type
    /// holds.
    pub fn parse(text: &str, dt: DataType) -> Result<Scalar, String> {
        let t = text.trim();
        let Some(d) = Decimal::split(t) else {
            let word = t.trim_start_matches(['+', '-']).to_ascii_lowercase();
            if matches!(word.as_str(), "inf" | "infinity" | "nan") {
                if !dt.is_float() {
                    return Err(format!(
                        "{} is not an integer: {dt} holds {}",
                        quote(t),
                        holds(dt)
                    ));
                }
                let neg = t.starts_with('-');
                let x = match (word.as_str(), neg) {
                    ("nan", _) => f64::NAN,
                    (_, false) => f64::INFINITY,
                    (_, true) => f64::NEG_INFINITY,
                };
                return float_in(t, x, dt);
            }
            return Err(format!(
                "{} is not a number: {dt} takes {}",
                quote(t),
                if dt.is_float() {
                    "a decimal such as -1.5e3, or \"inf\", \"-inf\", \"nan\""
                } else {
                    "an integer such as -12"
                }
            ));
        };
        if dt.is_float() {
            // Rust's parse is correctly rounded for any number of digits
            let x: f64 = t
                .trim_start_matches('+')
                .parse()
                .map_err(|e| format!("{} is not a number: {e}", quote(t)))?;
            if x.is_infinite() {
                return Err(format!(
                    "{} is out of range: {dt} holds magnitudes up to {}",
                    quote(t),
                    limit_text(max_finite(dt))
                ));
            }
            return float_in(t, x, dt);
        }
        let v = d.integer().map_err(|why| match why {
            NotInt::Fraction => format!("{} is not an integer: {dt} holds {}", quote(t), holds(dt)),
            NotInt::TooLarge => format!("{} is out of range: {dt} holds {}", quote(t), holds(dt)),
        })?;
        let (lo, hi) = dt.int_range().unwrap_or((0, 0));
        if v < lo || v > hi {
            return Err(format!(
                "{} is out of range: {dt} holds {}",
                quote(t),
                holds(dt)
            ));
        }
        Ok(Scalar::Int(v))
    }
}

/// `x` (read from `text`) as an element of float type `dt`, if it is one.
fn float_in(text: &str, x: f64, dt: DataType) -> Result<Scalar, String> {
    let got = Scalar::Float(x).to_type(dt);
    let Scalar::Float(y) = got else {
        return Err(format!(
            "{} is not a float: {dt} is an integer type",
            quote(text)
        ));
    };
    if got == Scalar::Float(x) || (x.is_nan() && y.is_nan()) {
        return Ok(got);
    }
    if x.is_infinite() {
        return Err(format!(
            "{} is not a value of {dt}: {dt} has no infinities (its largest magnitude is {})",
            quote(text),
            limit_text(max_finite(dt))
        ));
    }
    if x.abs() > max_finite(dt) {
        return Err(format!(
            "{} is out of range: {dt} holds magnitudes up to {}",
            quote(text),
            limit_text(max_finite(dt))
        ));
    }
    Err(format!(
        "{} is not exactly representable as {dt} (the nearest {dt} is {got})",
        quote(text)
    ))
}

/// The largest finite value of a float type.
fn max_finite(dt: DataType) -> f64 {
    use DataType::*;
    match dt {
        Float16 => f16::MAX.to_f64(),
        Float32 => f32::MAX as f64,
        Bfloat16 => bf16::MAX.to_f64(),
        Float8e4m3 => 448.0,
        Float8e5m2 => 57344.0,
        _ => f64::MAX,
    }
}

/// What an integer type holds, for messages: `the integers -128..=127`.
fn holds(dt: DataType) -> String {
    let (lo, hi) = dt.int_range().unwrap_or((0, 0));
    format!("only the integers {lo}..={hi}")
}

/// The input as quoted back in a message, shortened if long.
fn quote(text: &str) -> String {
    if text.chars().count() <= QUOTE_CHARS {
        text.to_string()
    } else {
        let head: String = text.chars().take(QUOTE_CHARS).collect();
        format!("{head}… ({} characters)", text.chars().count())
    }
}

/// A decimal's parts: `[sign] int [. frac] [e exp]`.
struct Decimal<'a> {
    negative: bool,
    int: &'a str,
    frac: &'a str,
    /// None: no exponent
    exp: Option<(bool, &'a str)>,
}

enum NotInt {
    Fraction,
    TooLarge,
}

impl<'a> Decimal<'a> {
    /// Splits a decimal, or None if `t` is not one. Digits are ASCII only;
    /// at least one digit before or after the point.
    fn split(t: &'a str) -> Option<Decimal<'a>> {
        let (negative, rest) = match t.as_bytes().first()? {
            b'-' => (true, &t[1..]),
            b'+' => (false, &t[1..]),
            _ => (false, t),
        };
        let (mant, exp) = match rest.find(['e', 'E']) {
            Some(i) => (&rest[..i], Some(&rest[i + 1..])),
            None => (rest, None),
        };
        let (int, frac) = match mant.find('.') {
            Some(i) => (&mant[..i], &mant[i + 1..]),
            None => (mant, ""),
        };
        let digits = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
        if !digits(int) || !digits(frac) || (int.is_empty() && frac.is_empty()) {
            return None;
        }
        let exp = match exp {
            None => None,
            Some(e) => {
                let (neg, ds) = match e.as_bytes().first()? {
                    b'-' => (true, &e[1..]),
                    b'+' => (false, &e[1..]),
                    _ => (false, e),
                };
                if ds.is_empty() || !digits(ds) {
                    return None;
                }
                Some((neg, ds))
            }
        };
        Some(Decimal {
            negative,
            int,
            frac,
            exp,
        })
    }

    /// The exact integer the decimal denotes, if it is one that fits i128.
    fn integer(&self) -> Result<i128, NotInt> {
        // value = digits × 10^scale
        let all = format!("{}{}", self.int, self.frac);
        let significant = all.trim_start_matches('0');
        let trimmed = significant.trim_end_matches('0');
        if trimmed.is_empty() {
            return Ok(0);
        }
        // exponents beyond ±10^6 saturate: the answer no longer depends on them
        let exp: i64 = match self.exp {
            None => 0,
            Some((neg, ds)) => {
                let mag = ds
                    .trim_start_matches('0')
                    .bytes()
                    .try_fold(0i64, |a, b| {
                        let v = a * 10 + i64::from(b - b'0');
                        (v <= 1_000_000).then_some(v)
                    })
                    .unwrap_or(1_000_001);
                if neg { -mag } else { mag }
            }
        };
        let scale = exp - self.frac.len() as i64 + (significant.len() - trimmed.len()) as i64;
        if scale < 0 {
            return Err(NotInt::Fraction);
        }
        // 10^39 > i128::MAX: anything with more digits is too large
        if trimmed.len() as i64 + scale > 39 {
            return Err(NotInt::TooLarge);
        }
        let mut v: i128 = 0;
        for b in trimmed.bytes().map(|b| i128::from(b - b'0')) {
            v = v
                .checked_mul(10)
                .and_then(|v| v.checked_add(b))
                .ok_or(NotInt::TooLarge)?;
        }
        for _ in 0..scale {
            v = v.checked_mul(10).ok_or(NotInt::TooLarge)?;
        }
        Ok(if self.negative { -v } else { v })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use DataType::*;

    fn ok(text: &str, dt: DataType) -> Scalar {
        Scalar::parse(text, dt).unwrap_or_else(|e| panic!("{text} as {dt}: {e}"))
    }
    fn err(text: &str, dt: DataType) -> String {
        match Scalar::parse(text, dt) {
            Ok(v) => panic!("{text} as {dt} accepted as {v:?}"),
            Err(e) => e,
        }
    }

    #[test]
    fn integers_are_exact_to_the_ends_of_their_range() {
        assert_eq!(
            ok("18446744073709551615", Uint64),
            Scalar::Int(u64::MAX as i128)
        );
        assert_eq!(
            ok("-9223372036854775808", Int64),
            Scalar::Int(i64::MIN as i128)
        );
        assert_eq!(ok("9007199254740993", Int64), Scalar::Int((1 << 53) + 1));
        assert_eq!(ok("1.0", Int32), Scalar::Int(1));
        assert_eq!(ok("12.5e1", Int32), Scalar::Int(125));
        assert_eq!(ok("1200e-2", Int8), Scalar::Int(12));
        assert_eq!(ok("-0", Uint8), Scalar::Int(0));
        assert_eq!(ok("0e999999999999999999999", Uint8), Scalar::Int(0));
        assert_eq!(ok("+7", Int8), Scalar::Int(7));
        assert_eq!(ok("000127", Int8), Scalar::Int(127));
    }

    #[test]
    fn integers_out_of_range_or_fractional_are_refused() {
        let e = err("18446744073709551616", Uint64);
        assert!(e.contains("18446744073709551616 is out of range"), "{e}");
        assert!(
            e.contains("uint64 holds only the integers 0..=18446744073709551615"),
            "{e}"
        );
        assert!(err("-1", Uint64).contains("-1 is out of range"));
        assert!(err("-9223372036854775809", Int64).contains("out of range"));
        assert!(err("128", Int8).contains("int8 holds only the integers -128..=127"));
        assert!(err("1.5", Int32).contains("1.5 is not an integer"));
        assert!(err("9007199254740993.5", Int64).contains("not an integer"));
        assert!(err("1e-1", Int32).contains("not an integer"));
        assert!(err("1e40", Int64).contains("out of range"));
        assert!(err("1e99999999999999", Int64).contains("out of range"));
        assert!(err(&"9".repeat(5000), Int64).contains("(5000 characters)"));
        assert!(err("inf", Int32).contains("not an integer"));
        assert!(err("abc", Int32).contains("abc is not a number"));
        for bad in ["", "-", ".", "1e", "1e+", "1.2.3", "0x10", "1_000", "١"] {
            assert!(err(bad, Int32).contains("is not a number"), "{bad:?}");
            assert!(err(bad, Float32).contains("is not a number"), "{bad:?}");
        }
    }

    #[test]
    fn floats_exact_in_their_type_are_accepted() {
        // each is the shortest decimal of the f64 that widens the type's value
        let f32_val: f32 = "0.0094708036".parse().unwrap();
        assert_eq!(
            ok("0.009470803663134575", Float32),
            Scalar::Float(f32_val as f64)
        );
        // one f64 ulp above it is not that float
        assert!(
            err("0.009470803663134577", Float32).contains("nearest float is 0.009470803663134575")
        );
        assert_eq!(
            ok("3.4028234663852886e38", Float32),
            Scalar::Float(f32::MAX as f64)
        );
        assert_eq!(
            ok("5.960464477539063e-08", Float16),
            Scalar::Float(2f64.powi(-24))
        );
        assert_eq!(ok("65504", Float16), Scalar::Float(65504.0));
        assert_eq!(ok("448", Float8e4m3), Scalar::Float(448.0));
        assert_eq!(ok("-0", Float64), Scalar::Float(-0.0));
        assert_eq!(ok("-inf", Float16), Scalar::Float(f64::NEG_INFINITY));
        assert_eq!(ok("+Infinity", Float8e5m2), Scalar::Float(f64::INFINITY));
        assert!(matches!(ok("nan", Bfloat16), Scalar::Float(x) if x.is_nan()));
        assert!(matches!(ok("NaN", Float8e4m3), Scalar::Float(x) if x.is_nan()));
        // double takes any decimal, rounded correctly
        assert_eq!(ok("0.1", Float64), Scalar::Float(0.1));
        assert_eq!(
            ok("12.500243810835503", Float64),
            Scalar::Float(12.500243810835503)
        );
    }

    #[test]
    fn floats_not_in_their_type_are_refused() {
        let e = err("0.1", Float32);
        assert!(
            e.contains("0.1 is not exactly representable as float (the nearest float is 0.10000000149011612)"),
            "{e}"
        );
        assert!(err("65520", Float16).contains("half holds magnitudes up to 65504"));
        assert!(err("1e309", Float64).contains("out of range"));
        assert!(err("inf", Float8e4m3).contains("f8e4m3 has no infinities"));
        assert!(err("449", Float8e4m3).contains("up to 448"));
        assert!(err("1.0625", Float8e4m3).contains("not exactly representable"));
    }

    #[test]
    fn display_reads_back_to_the_same_bits() {
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(11);
        for _ in 0..20_000 {
            let x = f64::from_bits(rng.random());
            if x.is_nan() {
                continue;
            }
            let s = Scalar::Float(x);
            assert_eq!(ok(&s.to_string(), Float64), s, "{x:e}");
            let y = f32::from_bits(rng.random()) as f64;
            if !y.is_nan() {
                let s = Scalar::Float(y);
                assert_eq!(ok(&s.to_string(), Float32), s, "{y:e}");
            }
            let i: i64 = rng.random();
            assert_eq!(
                ok(&Scalar::Int(i as i128).to_string(), Int64),
                Scalar::Int(i as i128)
            );
        }
        assert_eq!(Scalar::Float(f64::INFINITY).to_string(), "inf");
        assert_eq!(Scalar::Float(f64::NEG_INFINITY).to_string(), "-inf");
        assert_eq!(Scalar::Float(f64::NAN).to_string(), "nan");
        assert_eq!(Scalar::Float(-0.0).to_string(), "-0");
        assert_ne!(Scalar::Float(0.0), Scalar::Float(-0.0));
        assert_ne!(Scalar::Int(1), Scalar::Float(1.0));
    }

    #[test]
    fn to_type_wraps_integers_and_rounds_floats() {
        assert_eq!(Scalar::Int(200).to_type(Int8), Scalar::Int(-56));
        assert_eq!(Scalar::Int(256).to_type(Uint8), Scalar::Int(0));
        assert_eq!(
            Scalar::Int(-1).to_type(Uint64),
            Scalar::Int(u64::MAX as i128)
        );
        assert_eq!(Scalar::Int(1 << 64).to_type(Int64), Scalar::Int(0));
        assert_eq!(
            Scalar::Float(65504.0 * 2.0).to_type(Float16),
            Scalar::Float(f64::INFINITY)
        );
        assert_eq!(Scalar::Float(1e6).to_type(Float8e4m3), Scalar::Float(448.0));
        assert_eq!(
            Scalar::Float(1e6).to_type(Float8e5m2),
            Scalar::Float(57344.0)
        );
        let inf = Scalar::Float(f64::NEG_INFINITY);
        assert_eq!(inf.to_type(Float8e5m2), inf);
        assert_eq!(inf.to_type(Float8e4m3), Scalar::Float(-448.0));
        assert_eq!(
            Scalar::Float(0.1).to_type(Float32),
            Scalar::Float(0.1f32 as f64)
        );
    }
}
