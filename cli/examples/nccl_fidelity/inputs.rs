//! Inputs every harness shares: reproducible per-rank values of any datatype, and their bytes as hex for the job arguments.

use super::*;

pub(crate) fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// Input element i of rank r for case k: random bits for integers; for
/// floats ±m·2^e with m in [1, 2) and e in -3..=3, rounded to the type.
pub(crate) fn input_value(dt: DataType, k: usize, rank: usize, i: usize) -> Scalar {
    let h = splitmix(((k as u64) << 40) ^ ((rank as u64) << 24) ^ i as u64);
    if !dt.is_float() {
        return Scalar::Int(h as i64 as i128).to_type(dt);
    }
    let m = 1.0 + (h & 0xFFFF_FFFF) as f64 / 4_294_967_296.0;
    let e = ((h >> 32) % 7) as i32 - 3;
    let s = if (h >> 40) & 1 == 1 { -1.0 } else { 1.0 };
    Scalar::Float(s * m * 2f64.powi(e)).to_type(dt)
}

pub(crate) fn encode<T: Element>(vals: &[Scalar]) -> Vec<u8> {
    let v: Vec<T> = vals.iter().map(|s| T::from_scalar(*s)).collect();
    rankwise::core::bytes::of(&v).to_vec()
}

pub(crate) fn decode<T: Element>(bytes: &[u8]) -> Vec<Scalar> {
    let mut v = vec![T::default(); bytes.len() / std::mem::size_of::<T>()];
    let used = std::mem::size_of_val(&v[..]);
    rankwise::core::bytes::of_mut(&mut v).copy_from_slice(&bytes[..used]);
    v.iter().map(|x| x.to_scalar()).collect()
}

macro_rules! by_type {
    ($dt:expr, $f:ident, $arg:expr) => {
        match $dt {
            DataType::Int8 => $f::<i8>($arg),
            DataType::Uint8 => $f::<u8>($arg),
            DataType::Int32 => $f::<i32>($arg),
            DataType::Uint32 => $f::<u32>($arg),
            DataType::Int64 => $f::<i64>($arg),
            DataType::Uint64 => $f::<u64>($arg),
            DataType::Float16 => $f::<half::f16>($arg),
            DataType::Float32 => $f::<f32>($arg),
            DataType::Float64 => $f::<f64>($arg),
            DataType::Bfloat16 => $f::<half::bf16>($arg),
            DataType::Float8e4m3 => $f::<F8E4M3>($arg),
            DataType::Float8e5m2 => $f::<F8E5M2>($arg),
        }
    };
}

pub(crate) fn to_bytes(dt: DataType, vals: &[Scalar]) -> Vec<u8> {
    by_type!(dt, encode, vals)
}
pub(crate) fn to_scalars(dt: DataType, bytes: &[u8]) -> Vec<Scalar> {
    by_type!(dt, decode, bytes)
}

pub(crate) fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}
pub(crate) fn unhex(s: &str) -> Vec<u8> {
    (0..s.len() / 2)
        .map(|i| u8::from_str_radix(&s[2 * i..2 * i + 2], 16).unwrap_or(0))
        .collect()
}
