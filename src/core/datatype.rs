//! The 12 NCCL datatypes, their codes and sizes, the Rust element types that
//! carry them, and the 16-bit float conversions the kernels use (the fp8
//! types and their conversions are in `fp8`).

use super::Scalar;
pub use super::fp8::{F8E4M3, F8E5M2};
use half::{bf16, f16};
use std::fmt;

/// `ncclDataType_t`, with NCCL's codes.
#[derive(
    Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
pub enum DataType {
    Int8 = 0,
    Uint8 = 1,
    Int32 = 2,
    Uint32 = 3,
    Int64 = 4,
    Uint64 = 5,
    Float16 = 6,
    Float32 = 7,
    Float64 = 8,
    Bfloat16 = 9,
    Float8e4m3 = 10,
    Float8e5m2 = 11,
}

impl DataType {
    pub const ALL: [DataType; 12] = [
        DataType::Int8,
        DataType::Uint8,
        DataType::Int32,
        DataType::Uint32,
        DataType::Int64,
        DataType::Uint64,
        DataType::Float16,
        DataType::Float32,
        DataType::Float64,
        DataType::Bfloat16,
        DataType::Float8e4m3,
        DataType::Float8e5m2,
    ];

    pub fn from_code(code: i32) -> Option<DataType> {
        usize::try_from(code)
            .ok()
            .and_then(|i| Self::ALL.get(i).copied())
    }
    pub fn code(self) -> i32 {
        self as i32
    }
    /// Bytes per element.
    pub fn size(self) -> usize {
        use DataType::*;
        match self {
            Int8 | Uint8 | Float8e4m3 | Float8e5m2 => 1,
            Float16 | Bfloat16 => 2,
            Int32 | Uint32 | Float32 => 4,
            Int64 | Uint64 | Float64 => 8,
        }
    }
    pub fn is_float(self) -> bool {
        use DataType::*;
        matches!(
            self,
            Float16 | Float32 | Float64 | Bfloat16 | Float8e4m3 | Float8e5m2
        )
    }
    /// The smallest and largest value of an integer type; None for floats.
    pub fn int_range(self) -> Option<(i128, i128)> {
        use DataType::*;
        Some(match self {
            Int8 => (i8::MIN.into(), i8::MAX.into()),
            Uint8 => (0, u8::MAX.into()),
            Int32 => (i32::MIN.into(), i32::MAX.into()),
            Uint32 => (0, u32::MAX.into()),
            Int64 => (i64::MIN.into(), i64::MAX.into()),
            Uint64 => (0, u64::MAX.into()),
            _ => return None,
        })
    }
    /// Short lowercase name, as nccl-tests prints it and the CLI accepts it.
    pub fn name(self) -> &'static str {
        use DataType::*;
        match self {
            Int8 => "int8",
            Uint8 => "uint8",
            Int32 => "int32",
            Uint32 => "uint32",
            Int64 => "int64",
            Uint64 => "uint64",
            Float16 => "half",
            Float32 => "float",
            Float64 => "double",
            Bfloat16 => "bfloat16",
            Float8e4m3 => "f8e4m3",
            Float8e5m2 => "f8e5m2",
        }
    }
    /// The C enumerator, e.g. `ncclFloat32`.
    pub fn nccl_name(self) -> &'static str {
        use DataType::*;
        match self {
            Int8 => "ncclInt8",
            Uint8 => "ncclUint8",
            Int32 => "ncclInt32",
            Uint32 => "ncclUint32",
            Int64 => "ncclInt64",
            Uint64 => "ncclUint64",
            Float16 => "ncclFloat16",
            Float32 => "ncclFloat32",
            Float64 => "ncclFloat64",
            Bfloat16 => "ncclBfloat16",
            Float8e4m3 => "ncclFloat8e4m3",
            Float8e5m2 => "ncclFloat8e5m2",
        }
    }
    /// Parses the names users type: nccl-tests' (`float`, `half`), torch's
    /// (`float32`, `f16`, `bf16`) and NCCL's (`ncclFloat32`).
    pub fn parse(s: &str) -> Option<DataType> {
        use DataType::*;
        let lower = s.to_ascii_lowercase();
        let t = lower.strip_prefix("nccl").unwrap_or(&lower);
        Some(match t {
            "int8" | "i8" | "char" => Int8,
            "uint8" | "u8" => Uint8,
            "int32" | "i32" | "int" => Int32,
            "uint32" | "u32" => Uint32,
            "int64" | "i64" => Int64,
            "uint64" | "u64" => Uint64,
            "float16" | "f16" | "half" | "fp16" => Float16,
            "float32" | "f32" | "float" | "fp32" => Float32,
            "float64" | "f64" | "double" | "fp64" => Float64,
            "bfloat16" | "bf16" => Bfloat16,
            "float8e4m3" | "f8e4m3" | "fp8e4m3" | "e4m3" => Float8e4m3,
            "float8e5m2" | "f8e5m2" | "fp8e5m2" | "e5m2" => Float8e5m2,
            _ => return None,
        })
    }
}

impl fmt::Display for DataType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

mod sealed {
    /// Only the twelve element types of this module implement it, so only
    /// they implement [`super::Element`].
    pub trait Sealed {}
    impl Sealed for i8 {}
    impl Sealed for u8 {}
    impl Sealed for i32 {}
    impl Sealed for u32 {}
    impl Sealed for i64 {}
    impl Sealed for u64 {}
    impl Sealed for super::f16 {}
    impl Sealed for super::bf16 {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
    impl Sealed for super::F8E4M3 {}
    impl Sealed for super::F8E5M2 {}
}

/// A Rust type that carries one NCCL datatype. The engine moves bytes; this
/// trait gives the typed face its datatype and the reduction kernels their
/// arithmetic (in `kernels`).
///
/// The trait is sealed: the engine copies bytes of registered memory into
/// values of `T` (`Comm::read`) and forms `&[T]` over them, which is sound
/// only because every bit pattern of `size_of::<T>()` bytes is a valid `T`
/// and `T` has the size and alignment of its datatype. The twelve types here
/// are exactly those; a type outside this crate cannot implement it:
///
/// ```compile_fail,E0277
/// use rankwise::{DataType, Element, core::Scalar};
/// #[derive(Clone, Copy, Default, PartialEq, Debug)]
/// struct Flag(bool);
/// impl Element for Flag {
///     const DTYPE: DataType = DataType::Uint8;
///     fn to_f64(self) -> f64 { 0.0 }
///     fn from_f64(_: f64) -> Self { Flag(false) }
///     fn to_scalar(self) -> Scalar { Scalar::Int(0) }
///     fn from_scalar(_: Scalar) -> Self { Flag(false) }
/// }
/// ```
pub trait Element:
    sealed::Sealed + Copy + Default + Send + Sync + PartialEq + fmt::Debug + 'static
{
    const DTYPE: DataType;
    /// Exact for every value of the type that an f64 holds (all but the
    /// largest 64-bit integers); used for reduction scalars. Values that
    /// travel to and from users go through [`Element::to_scalar`], exact for all.
    fn to_f64(self) -> f64;
    /// Converts with the type's own rounding (integers: truncation toward zero, saturating).
    fn from_f64(v: f64) -> Self;
    /// The element, exactly.
    fn to_scalar(self) -> Scalar;
    /// The element a scalar becomes: an integer type keeps an integer's low
    /// bits (two's complement wrap) and truncates a float toward zero,
    /// saturating; a float type rounds with [`Element::from_f64`].
    fn from_scalar(s: Scalar) -> Self;
}

macro_rules! element_int {
    ($t:ty, $dt:ident) => {
        impl Element for $t {
            const DTYPE: DataType = DataType::$dt;
            fn to_f64(self) -> f64 {
                self as f64
            }
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            fn to_scalar(self) -> Scalar {
                Scalar::Int(self.into())
            }
            fn from_scalar(s: Scalar) -> Self {
                match s {
                    // `as` from a wider integer keeps the low bits
                    Scalar::Int(i) => i as $t,
                    Scalar::Float(x) => x as $t,
                }
            }
        }
    };
}
element_int!(i8, Int8);
element_int!(u8, Uint8);
element_int!(i32, Int32);
element_int!(u32, Uint32);
element_int!(i64, Int64);
element_int!(u64, Uint64);

/// Float types: the scalar is the value widened to f64 (exact for each).
macro_rules! element_float_scalar {
    () => {
        fn to_scalar(self) -> Scalar {
            Scalar::Float(Element::to_f64(self))
        }
        fn from_scalar(s: Scalar) -> Self {
            <Self as Element>::from_f64(s.to_f64())
        }
    };
}

impl Element for f32 {
    const DTYPE: DataType = DataType::Float32;
    fn to_f64(self) -> f64 {
        self as f64
    }
    fn from_f64(v: f64) -> Self {
        v as f32
    }
    element_float_scalar!();
}
impl Element for f64 {
    const DTYPE: DataType = DataType::Float64;
    fn to_f64(self) -> f64 {
        self
    }
    fn from_f64(v: f64) -> Self {
        v
    }
    element_float_scalar!();
}

/// `y` (in `0..2^23`) rounded to an integer, ties to even: adding 2^23
/// leaves no fraction bits, so the addition itself rounds, in the default
/// rounding mode, and the integer is what lands in the significand. (A
/// library round call is a function call per element on baseline x86-64.)
#[inline(always)]
pub(super) fn round_small(y: f32) -> u32 {
    const TWO_23: f32 = 8_388_608.0;
    (y + TWO_23).to_bits() - TWO_23.to_bits()
}

/// `f16` to `f32`, exactly, from the bit fields (the `half` crate's result,
/// without its per-call check for hardware conversion, so loops over
/// elements vectorise). NaNs keep their payload and come out quiet.
#[inline]
pub fn f16_to_f32(h: f16) -> f32 {
    let h = h.to_bits() as u32;
    let sign = (h & 0x8000) << 16;
    let exp = (h >> 10) & 0x1F;
    let man = h & 0x3FF;
    // all three cases computed, one selected: no branches, so it vectorises
    let special = 0x7F80_0000 | if man == 0 { 0 } else { 0x0040_0000 } | (man << 13);
    // man × 2^-24, exact in f32
    let subnormal = (man as f32 * f32::from_bits(103 << 23)).to_bits();
    let normal = ((exp + 112) << 23) | (man << 13);
    let bits = if exp == 0x1F {
        special
    } else if exp == 0 {
        subnormal
    } else {
        normal
    };
    f32::from_bits(sign | bits)
}

/// `f32` to `f16`, rounding to nearest with ties to even and overflowing to
/// infinity, as `half::f16::from_f32` does, with integer arithmetic on the
/// bits (see [`f16_to_f32`] for why).
#[inline]
pub fn f32_to_f16(x: f32) -> f16 {
    let bits = x.to_bits();
    let sign = (bits >> 16) & 0x8000;
    let abs = bits & 0x7FFF_FFFF;
    // all three cases computed, one selected (see `f16_to_f32`)
    let nan = 0x7E00 | ((abs & 0x007F_FFFF) >> 13);
    // below the smallest normal (2^-14): a multiple of 2^-24
    let subnormal = round_small(f32::from_bits(abs) * f32::from_bits(151 << 23));
    let rounded = abs + 0xFFF + ((abs >> 13) & 1);
    let normal = ((rounded >> 13).wrapping_sub(112 << 10)).min(0x7C00);
    let code = if abs > 0x7F80_0000 {
        nan
    } else if abs < (113 << 23) {
        subnormal
    } else {
        normal
    };
    f16::from_bits((sign | code) as u16)
}

/// `bf16` to `f32`: a bfloat16 is the top half of a float, so this is a
/// shift, exact, without `half`'s branch for NaN (a NaN stays a NaN).
#[inline]
pub fn bf16_to_f32(b: bf16) -> f32 {
    f32::from_bits(u32::from(b.to_bits()) << 16)
}

/// `f32` to `bf16`, rounding to nearest with ties to even, as
/// `half::bf16::from_f32` does (a NaN comes out quiet with its payload's
/// top bits), computed for every input and selected, so loops vectorise.
#[inline]
pub fn f32_to_bf16(x: f32) -> bf16 {
    let bits = x.to_bits();
    let nan = (bits >> 16) | 0x0040;
    let rounded = bits.wrapping_add(0x7FFF + ((bits >> 16) & 1)) >> 16;
    let code = if bits & 0x7FFF_FFFF > 0x7F80_0000 {
        nan
    } else {
        rounded
    };
    bf16::from_bits(code as u16)
}

impl Element for f16 {
    const DTYPE: DataType = DataType::Float16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        f16::from_f64(v)
    }
    element_float_scalar!();
}
impl Element for bf16 {
    const DTYPE: DataType = DataType::Bfloat16;
    fn to_f64(self) -> f64 {
        self.to_f64()
    }
    fn from_f64(v: f64) -> Self {
        bf16::from_f64(v)
    }
    element_float_scalar!();
}
impl Element for F8E4M3 {
    const DTYPE: DataType = DataType::Float8e4m3;
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        // f64 -> f32 first rounds once more; every fp8 value and every
        // midpoint between two is exact in f32, so the result is unchanged
        F8E4M3::from_f32(v as f32)
    }
    element_float_scalar!();
}
impl Element for F8E5M2 {
    const DTYPE: DataType = DataType::Float8e5m2;
    fn to_f64(self) -> f64 {
        self.to_f32() as f64
    }
    fn from_f64(v: f64) -> Self {
        F8E5M2::from_f32(v as f32)
    }
    fn to_scalar(self) -> Scalar {
        Scalar::Float(Element::to_f64(self))
    }
    /// As [`Element::from_f64`], except that an infinity is e5m2's own
    /// (0x7C, 0xFC): the conversion saturates, but an infinity written into
    /// a buffer is an element of the type.
    fn from_scalar(s: Scalar) -> Self {
        match s.to_f64() {
            x if x == f64::INFINITY => F8E5M2(0x7C),
            x if x == f64::NEG_INFINITY => F8E5M2(0xFC),
            x => <Self as Element>::from_f64(x),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_sizes_follow_nccl_h() {
        let sizes = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for (code, dt) in DataType::ALL.iter().enumerate() {
            assert_eq!(dt.code(), code as i32);
            assert_eq!(DataType::from_code(code as i32), Some(*dt));
            assert_eq!(dt.size(), sizes[code]);
            assert_eq!(DataType::parse(dt.name()), Some(*dt));
            assert_eq!(DataType::parse(dt.nccl_name()), Some(*dt));
        }
        assert_eq!(DataType::from_code(12), None);
        assert_eq!(DataType::from_code(-1), None);
        assert_eq!(DataType::parse("float32"), Some(DataType::Float32));
        assert_eq!(DataType::parse("complex64"), None);
    }

    #[test]
    fn f16_conversions_match_the_half_crate() {
        for h in 0..=u16::MAX {
            let h = f16::from_bits(h);
            let (got, want) = (f16_to_f32(h), h.to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{:#06x}: {got} != {want}",
                h.to_bits()
            );
        }
        let mut xs: Vec<f32> = (0..=u16::MAX)
            .map(|h| f16::from_bits(h).to_f32())
            .filter(|x| x.is_finite())
            .flat_map(|x| {
                (-3i32..=3).map(move |d| f32::from_bits(x.to_bits().wrapping_add_signed(d)))
            })
            .collect();
        // midpoints between neighbours, where ties decide
        xs.extend((0..0x7BFFu16).map(|h| {
            let (a, b) = (f16::from_bits(h).to_f32(), f16::from_bits(h + 1).to_f32());
            (a as f64 + (b as f64 - a as f64) / 2.0) as f32
        }));
        xs.extend((0..u32::MAX / 65_521).map(|k| f32::from_bits(k * 65_521)));
        xs.extend([
            f32::INFINITY,
            f32::NEG_INFINITY,
            f32::MAX,
            65_520.0,
            65_519.0,
        ]);
        for x in xs {
            let (got, want) = (f32_to_f16(x), f16::from_f32(x));
            if x.is_nan() {
                assert!(got.is_nan(), "{x:e} ({:#010x})", x.to_bits());
            } else {
                assert_eq!(
                    got.to_bits(),
                    want.to_bits(),
                    "{x:e} ({:#010x})",
                    x.to_bits()
                );
            }
        }
    }

    #[test]
    fn bf16_conversions_match_the_half_crate() {
        for b in 0..=u16::MAX {
            let b = bf16::from_bits(b);
            let (got, want) = (bf16_to_f32(b), b.to_f32());
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "{:#06x}: {got} != {want}",
                b.to_bits()
            );
        }
        // every bfloat16 with the 16 bits below it at the values where
        // rounding decides (0, just below, at and above the midpoint, the
        // top), and a stride through all floats
        let mut xs: Vec<u32> = (0..=u16::MAX as u32)
            .flat_map(|hi| [0u32, 1, 0x7FFF, 0x8000, 0x8001, 0xFFFF].map(move |lo| (hi << 16) | lo))
            .collect();
        xs.extend((0..u32::MAX / 65_521).map(|k| k * 65_521));
        for bits in xs {
            let x = f32::from_bits(bits);
            let (got, want) = (f32_to_bf16(x), bf16::from_f32(x));
            assert_eq!(got.to_bits(), want.to_bits(), "{x:e} ({bits:#010x})");
        }
    }
}
