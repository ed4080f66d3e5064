//! Fused multiply-add, rounded once: the step of float Avg and PreMulSum.
//!
//! `rnd_T(acc + x·s)` with one rounding, for T = half, bfloat16, float, without
//! a hardware FMA at T's width (baseline x86-64 has none; a libm `fmaf` is a
//! call per element). Naively computing `x·s + acc` in a wider type and then
//! rounding to T rounds twice, and that is wrong whenever the first rounding
//! lands exactly on a midpoint between two values of T: for float, the exact
//! 1 + 2^-24 + 2^-70 rounds in f64 to 1 + 2^-24, the midpoint between 1 and
//! 1 + 2^-23, which then ties to even, to 1; rounded once it is 1 + 2^-23.
//! Instead, per type:
//!
//! 1. The product is exact in the wide type W: x and s have p significant
//!    bits (half 11, bfloat16 8, float 24), the product at most 2p, and W
//!    (f32 for half: 24 >= 22; f64 for bfloat16 and float: 53 >= 16, 48)
//!    holds it; the product's exponent stays in W's normal range (half's
//!    smallest subnormal is 2^-24, so products >= 2^-48 > 2^-126, largest
//!    < 2^32; bfloat16 and float reach 2^-133 and 2^-149, products >= 2^-298
//!    > 2^-1022 and < 2^256).
//! 2. The sum `acc + x·s` is computed in W with its exact error (Knuth's
//!    TwoSum: s + e == acc + x·s exactly, in any rounding position, as long
//!    as nothing overflows W, which these magnitudes cannot).
//! 3. The sum is rounded *to odd* at W's precision: when e != 0 and the
//!    round-to-nearest s has an even last bit, s steps one unit toward e, to
//!    the neighbour whose last bit is odd. Rounding an odd-rounded value of
//!    precision q to precision p <= q - 2 with round-to-nearest-even gives the
//!    same result as rounding the exact value once (Boldo and Melquiond,
//!    "Emulation of FMA and correctly rounded sums: proved algorithms using
//!    rounding to odd", IEEE Trans. Computers 57(4), 2008): the odd last bit
//!    stands for "something below was nonzero", so the value can never sit
//!    on a midpoint of the narrower type unless the exact value did. This
//!    holds in T's subnormal range too (T's spacing there is coarser still).
//! 4. bfloat16 goes f64 -> f32 -> bfloat16: the f64 -> f32 step also rounds
//!    to odd (round to nearest, then step toward the f64 value when inexact
//!    and even), and odd rounding composes (rounding to odd at 24 bits an
//!    odd-rounded 53-bit value equals rounding the exact value to odd at 24
//!    bits), so the last step, round to nearest at 8 bits, rounds once.
//!
//! 5. bfloat16 over a block: the product of two 8-bit significands has at
//!    most 16 bits, so it is already exact in f32 wherever f32 is normal
//!    and finite, and then steps 2 and 3 at f32's precision (24 >= 8 + 2)
//!    round once too, at twice the lanes and without the f64 detour. A
//!    block takes that path when every product of it is exact in f32 (a
//!    product of finite nonzero operands that falls below 2^-126 or past
//!    the largest float is not), else the f64 path above: both give the
//!    value rounded once, so which one ran never shows.
//!
//! float64 uses `f64::mul_add`, IEEE fusedMultiplyAdd (one rounding; on
//! targets without the instruction, libm's correctly rounded `fma`).
//! `tests::fused_steps_round_once` checks every type against exact rational
//! arithmetic on cases where the two-rounding answer differs.

use half::{bf16, f16};

macro_rules! add_round_to_odd {
    ($name:ident, $f:ty) => {
        /// `a + b` rounded to odd at the precision of the type: exact sums
        /// stay, inexact ones take the neighbour with an odd last bit.
        #[inline(always)]
        fn $name(a: $f, b: $f) -> $f {
            let s = a + b;
            // TwoSum: s + e == a + b exactly
            let bb = s - a;
            let e = (a - (s - bb)) + (b - bb);
            let bits = s.to_bits();
            // inexact with an even last bit: one step to the odd neighbour,
            // which lies away from zero when e has s's sign (s is never 0
            // when e is not: a sum that rounds to 0 is exact), written as
            // masks and an integer add rather than branches.
            let step = if (e > 0.0) == (s > 0.0) { 1 } else { !0 };
            let even = (bits & 1).wrapping_sub(1);
            let delta = if (e != 0.0) & s.is_finite() {
                step & even
            } else {
                0
            };
            <$f>::from_bits(bits.wrapping_add(delta))
        }
    };
}
add_round_to_odd!(add_odd_f64, f64);
add_round_to_odd!(add_odd_f32, f32);

/// `x` rounded to odd at f32's precision.
#[inline(always)]
fn f64_to_f32_odd(x: f64) -> f32 {
    let y = x as f32;
    let bits = y.to_bits();
    let back = y as f64;
    // as in `add_round_to_odd`: inexact and even steps toward x
    let step = if x.abs() > back.abs() { 1 } else { !0 };
    let even = (bits & 1).wrapping_sub(1);
    let delta = if (back != x) & x.is_finite() {
        step & even
    } else {
        0
    };
    f32::from_bits(bits.wrapping_add(delta))
}

#[inline(always)]
pub(super) fn fused_f64(acc: f64, x: f64, s: f64) -> f64 {
    x.mul_add(s, acc)
}

#[inline(always)]
pub(super) fn fused_f32(acc: f32, x: f32, s: f32) -> f32 {
    add_odd_f64(acc as f64, x as f64 * s as f64) as f32
}

#[inline(always)]
pub(super) fn fused_f16(acc: f16, x: f16, s: f16) -> f16 {
    use crate::core::datatype::{f16_to_f32, f32_to_f16};
    f32_to_f16(add_odd_f32(f16_to_f32(acc), f16_to_f32(x) * f16_to_f32(s)))
}

#[inline(always)]
pub(super) fn fused_bf16(acc: bf16, x: bf16, s: bf16) -> bf16 {
    use crate::core::datatype::{bf16_to_f32, f32_to_bf16};
    // widening through f32 is exact and branch-free (`half`'s `to_f64`
    // branches on zeros, subnormals and NaN, which keeps the loop scalar)
    let wide = |v: bf16| f64::from(bf16_to_f32(v));
    let (a, x, s) = (wide(acc), wide(x), wide(s));
    f32_to_bf16(f64_to_f32_odd(add_odd_f64(a, x * s)))
}

/// Whether `x·s` (bfloat16 values, widened) is exact in f32: normal and
/// finite, or a zero, infinity or NaN that the operands make exactly so.
#[inline(always)]
fn bf16_product_exact(x: f32, s: f32) -> bool {
    let p = (x * s).abs();
    let in_range = (f32::MIN_POSITIVE..f32::INFINITY).contains(&p);
    in_range | (x == 0.0) | (s == 0.0) | !x.is_finite() | !s.is_finite()
}

/// [`fused_bf16`] over a block: `acc[i] = rnd(acc[i] + x[i]·s)`, through
/// f32 when every product is exact there (item 5 of the module doc).
#[inline(always)]
pub(super) fn fused_bf16_block(acc: &mut [bf16], x: &[bf16], s: bf16) {
    use crate::core::datatype::{bf16_to_f32, f32_to_bf16};
    let sw = bf16_to_f32(s);
    // a fold without early exit, so it vectorises
    let exact = x
        .iter()
        .fold(true, |ok, x| ok & bf16_product_exact(bf16_to_f32(*x), sw));
    if exact {
        for (a, x) in acc.iter_mut().zip(x) {
            *a = f32_to_bf16(add_odd_f32(bf16_to_f32(*a), bf16_to_f32(*x) * sw));
        }
    } else {
        for (a, x) in acc.iter_mut().zip(x) {
            *a = fused_bf16(*a, *x, s);
        }
    }
}
