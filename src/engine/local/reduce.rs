//! Reduction kernels: plain loops over typed slices that the compiler
//! vectorises. Inputs are folded in rank order (`x_0 ⊕ x_1 ⊕ …`), each
//! intermediate rounded to the element type, so a result is a function of the
//! inputs alone and identical on every rank that receives it.
//!
//! Float Avg and PreMulSum follow NCCL 2.28's lowering (measured on an H200,
//! docs/findings/real-nccl.md "Reduction rules"): `acc = rnd(x_0·s)`, then
//! for each next input `acc = rnd(acc + x·s)`. For half, float, double and
//! bfloat16 that step is fused, one rounding of the exact `acc + x·s`
//! (NCCL's kernels compile the multiply and the add into an FMA); for fp8 it
//! is not (`x·s` rounded to the type, then the sum rounded).

use crate::core::{Element, F8E4M3, F8E5M2, RedOp};
use half::{bf16, f16};

/// Element arithmetic with NCCL's semantics: integers wrap on Sum/Prod and
/// divide toward zero for Avg; floats round to the type after every step.
pub trait Arith: Element {
    fn add(a: Self, b: Self) -> Self;
    fn mul(a: Self, b: Self) -> Self;
    fn max(a: Self, b: Self) -> Self;
    fn min(a: Self, b: Self) -> Self;
    /// Avg on integers: the sum divided by N.
    fn div_n(a: Self, n: usize) -> Self;
    /// One step of a pre-multiplied sum (float Avg, PreMulSum): `acc + x·s`.
    /// By default the product is rounded to the type, then the sum: NCCL's
    /// rule for fp8 (and for integers, where both wrap). The 16-, 32- and
    /// 64-bit floats override it with one rounding of the exact value.
    #[inline(always)]
    fn premul_add(acc: Self, x: Self, s: Self) -> Self {
        Self::add(acc, Self::mul(x, s))
    }
}

// Integer Avg divides the wrapped sum by N in a type that holds N (`$wide`),
// as NCCL's SumPostDiv does with its 31-bit divisor: N itself is never
// converted to the element type, where 200 would be -56 as int8 and 256
// would be 0 as uint8. The quotient is truncated toward zero, so its
// magnitude never exceeds the sum's and it fits the element type.
macro_rules! arith_int {
    ($($t:ty => $wide:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self {
                // a communicator never has more ranks than `$wide` holds
                let n = <$wide>::try_from(n).unwrap_or(<$wide>::MAX);
                (<$wide>::from(a) / n) as $t
            }
        }
    )*};
}
arith_int!(i8 => i32, u8 => u32, i32 => i64, u32 => u64, i64 => i64, u64 => u64);

macro_rules! arith_float {
    ($($t:ty => $fused:path),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { a.max(b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { a.min(b) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { a / (n as $t) }
            #[inline(always)] fn premul_add(acc: Self, x: Self, s: Self) -> Self { $fused(acc, x, s) }
        }
    )*};
}
arith_float!(f32 => fused_f32, f64 => fused_f64);

// 16- and 8-bit floats compute in f32 and round back after every step: f32
// carries more than twice their precision, so this equals correctly rounded
// arithmetic in the type itself.
macro_rules! arith_via_f32 {
    ($($t:ty => $to:path, $from:path $(, fused $fused:path)?);*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { $from($to(a) + $to(b)) }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { $from($to(a) * $to(b)) }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { $from($to(a).max($to(b))) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { $from($to(a).min($to(b))) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { $from($to(a) / n as f32) }
            $(#[inline(always)] fn premul_add(acc: Self, x: Self, s: Self) -> Self { $fused(acc, x, s) })?
        }
    )*};
}
// f16 and bf16 through the core's bit-level conversions, which vectorise
// (the `half` crate checks for hardware support on every f16 call, and
// branches on NaN in its bf16 ones)
arith_via_f32!(
    f16 => crate::core::datatype::f16_to_f32, crate::core::datatype::f32_to_f16, fused fused_f16;
    bf16 => crate::core::datatype::bf16_to_f32, crate::core::datatype::f32_to_bf16, fused fused_bf16;
    F8E4M3 => F8E4M3::to_f32, F8E4M3::from_f32;
    F8E5M2 => F8E5M2::to_f32, F8E5M2::from_f32
);

// ------------------------------------------------ fused multiply-add, rounded once
//
// `rnd_T(acc + x·s)` with one rounding, for T = half, bfloat16, float, without
// a hardware FMA at T's width (baseline x86-64 has none; a libm `fmaf` is a
// call per element). Naively computing `x·s + acc` in a wider type and then
// rounding to T rounds twice, and that is wrong whenever the first rounding
// lands exactly on a midpoint between two values of T: for float, the exact
// 1 + 2^-24 + 2^-70 rounds in f64 to 1 + 2^-24, the midpoint between 1 and
// 1 + 2^-23, which then ties to even, to 1; rounded once it is 1 + 2^-23.
// Instead, per type:
//
// 1. The product is exact in the wide type W: x and s have p significant
//    bits (half 11, bfloat16 8, float 24), the product at most 2p, and W
//    (f32 for half: 24 >= 22; f64 for bfloat16 and float: 53 >= 16, 48)
//    holds it; the product's exponent stays in W's normal range (half's
//    smallest subnormal is 2^-24, so products >= 2^-48 > 2^-126, largest
//    < 2^32; bfloat16 and float reach 2^-133 and 2^-149, products >= 2^-298
//    > 2^-1022 and < 2^256).
// 2. The sum `acc + x·s` is computed in W with its exact error (Knuth's
//    TwoSum: s + e == acc + x·s exactly, in any rounding position, as long
//    as nothing overflows W, which these magnitudes cannot).
// 3. The sum is rounded *to odd* at W's precision: when e != 0 and the
//    round-to-nearest s has an even last bit, s steps one unit toward e, to
//    the neighbour whose last bit is odd. Rounding an odd-rounded value of
//    precision q to precision p <= q - 2 with round-to-nearest-even gives the
//    same result as rounding the exact value once (Boldo and Melquiond,
//    "Emulation of FMA and correctly rounded sums: proved algorithms using
//    rounding to odd", IEEE Trans. Computers 57(4), 2008): the odd last bit
//    stands for "something below was nonzero", so the value can never sit
//    on a midpoint of the narrower type unless the exact value did. This
//    holds in T's subnormal range too (T's spacing there is coarser still).
// 4. bfloat16 goes f64 -> f32 -> bfloat16: the f64 -> f32 step also rounds
//    to odd (round to nearest, then step toward the f64 value when inexact
//    and even), and odd rounding composes (rounding to odd at 24 bits an
//    odd-rounded 53-bit value equals rounding the exact value to odd at 24
//    bits), so the last step, round to nearest at 8 bits, rounds once.
//
// float64 uses `f64::mul_add`, IEEE fusedMultiplyAdd (one rounding; on
// targets without the instruction, libm's correctly rounded `fma`).
// `tests::fused_steps_round_once` checks every type against exact rational
// arithmetic on cases where the two-rounding answer differs.

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
fn fused_f64(acc: f64, x: f64, s: f64) -> f64 {
    x.mul_add(s, acc)
}

#[inline(always)]
fn fused_f32(acc: f32, x: f32, s: f32) -> f32 {
    add_odd_f64(acc as f64, x as f64 * s as f64) as f32
}

#[inline(always)]
fn fused_f16(acc: f16, x: f16, s: f16) -> f16 {
    use crate::core::datatype::{f16_to_f32, f32_to_f16};
    f32_to_f16(add_odd_f32(f16_to_f32(acc), f16_to_f32(x) * f16_to_f32(s)))
}

#[inline(always)]
fn fused_bf16(acc: bf16, x: bf16, s: bf16) -> bf16 {
    use crate::core::datatype::{bf16_to_f32, f32_to_bf16};
    // widening through f32 is exact and branch-free (`half`'s `to_f64`
    // branches on zeros, subnormals and NaN, which keeps the loop scalar)
    let wide = |v: bf16| f64::from(bf16_to_f32(v));
    let (a, x, s) = (wide(acc), wide(x), wide(s));
    f32_to_bf16(f64_to_f32_odd(add_odd_f64(a, x * s)))
}

/// `acc[i] = x_0[i] ⊕ x_1[i] ⊕ … ⊕ x_{k-1}[i]` where `input(s)` yields x_s.
/// `acc` must have the inputs' length. `nranks` is the communicator size
/// (Avg divides by it).
#[inline]
pub fn reduce_into<'a, T: Arith>(
    acc: &mut [T],
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize) -> &'a [T],
) {
    reduce_blocks(acc, 0..1, op, nranks, |s, _| input(s), |_, _| ());
}

/// [`reduce_into`] for many blocks of `block.len()` elements: for each `at`
/// of `starts`, `block = x_0[at..] ⊕ x_1[at..] ⊕ …` where `input(s, at)`
/// yields x_s from element `at`, then `emit(at, block)`.
///
/// Each op gets its own monomorphic loop over the blocks (the element
/// function is a generic parameter, not a function pointer, and the op is
/// matched once, not per block), so the compiler inlines and vectorises it;
/// a block of a few cache lines can stay in registers.
#[inline]
pub fn reduce_blocks<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    mut emit: impl FnMut(usize, &[T]),
) {
    let n = nranks;
    let float = T::DTYPE.is_float();
    // one loop over the blocks per arm below
    macro_rules! blocks {
        (|$acc:ident, $at:ident| $fold:expr) => {
            for $at in starts {
                let $acc = &mut *block;
                $fold;
                emit($at, block);
            }
        };
    }
    match op {
        RedOp::Sum => blocks!(|acc, at| fold_all(acc, n, |s| input(s, at), T::add)),
        RedOp::Prod => blocks!(|acc, at| fold_all(acc, n, |s| input(s, at), T::mul)),
        RedOp::Max => blocks!(|acc, at| fold_all(acc, n, |s| input(s, at), T::max)),
        RedOp::Min => blocks!(|acc, at| fold_all(acc, n, |s| input(s, at), T::min)),
        // floats: a pre-multiplied sum with 1/N rounded to the type
        RedOp::Avg if float => {
            let scalar = T::from_f64(1.0 / n as f64);
            blocks!(|acc, at| pre_mul_sum(acc, n, |s| input(s, at), scalar))
        }
        // integers: sum, then divide by N
        RedOp::Avg => blocks!(|acc, at| {
            fold_all(acc, n, |s| input(s, at), T::add);
            for a in acc.iter_mut() {
                *a = T::div_n(*a, n);
            }
        }),
        RedOp::PreMulSum(s) => {
            let scalar = T::from_f64(s);
            blocks!(|acc, at| pre_mul_sum(acc, n, |s| input(s, at), scalar))
        }
    }
}

/// `acc = f(…f(f(x_0, x_1), x_2)…)`: the first pass combines two inputs.
#[inline(always)]
fn fold_all<'a, T: Copy + 'a, F: Fn(T, T) -> T + Copy>(
    acc: &mut [T],
    n: usize,
    mut input: impl FnMut(usize) -> &'a [T],
    f: F,
) {
    let len = acc.len();
    let x0 = &input(0)[..len];
    if n == 1 {
        acc.copy_from_slice(x0);
        return;
    }
    let x1 = &input(1)[..len];
    for ((a, x), y) in acc.iter_mut().zip(x0).zip(x1) {
        *a = f(*x, *y);
    }
    for s in 2..n {
        let x = &input(s)[..len];
        for (a, b) in acc.iter_mut().zip(x) {
            *a = f(*a, *b);
        }
    }
}

#[inline(always)]
fn pre_mul_sum<'a, T: Arith>(
    acc: &mut [T],
    n: usize,
    mut input: impl FnMut(usize) -> &'a [T],
    scalar: T,
) {
    let len = acc.len();
    for (a, x) in acc.iter_mut().zip(&input(0)[..len]) {
        *a = T::mul(*x, scalar);
    }
    for s in 1..n {
        for (a, x) in acc.iter_mut().zip(&input(s)[..len]) {
            *a = T::premul_add(*a, *x, scalar);
        }
    }
}

/// Runs `$body` with `$T` bound to the Rust type of `$dt`.
#[macro_export]
#[doc(hidden)]
macro_rules! with_element_type {
    ($dt:expr, $T:ident => $body:expr) => {{
        use $crate::core::DataType as __D;
        match $dt {
            __D::Int8 => {
                type $T = i8;
                $body
            }
            __D::Uint8 => {
                type $T = u8;
                $body
            }
            __D::Int32 => {
                type $T = i32;
                $body
            }
            __D::Uint32 => {
                type $T = u32;
                $body
            }
            __D::Int64 => {
                type $T = i64;
                $body
            }
            __D::Uint64 => {
                type $T = u64;
                $body
            }
            __D::Float16 => {
                type $T = half::f16;
                $body
            }
            __D::Float32 => {
                type $T = f32;
                $body
            }
            __D::Float64 => {
                type $T = f64;
                $body
            }
            __D::Bfloat16 => {
                type $T = half::bf16;
                $body
            }
            __D::Float8e4m3 => {
                type $T = $crate::core::F8E4M3;
                $body
            }
            __D::Float8e5m2 => {
                type $T = $crate::core::F8E5M2;
                $body
            }
        }
    }};
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run<T: Arith>(op: RedOp, inputs: &[Vec<T>]) -> Vec<T> {
        let mut acc = inputs[0].clone();
        reduce_into(&mut acc, op, inputs.len(), |s| &inputs[s]);
        acc
    }

    #[test]
    fn integer_semantics() {
        let x = vec![vec![7i32, -7, i32::MAX], vec![2, 2, 1]];
        assert_eq!(run(RedOp::Sum, &x), vec![9, -5, i32::MIN], "sum wraps");
        assert_eq!(
            run(RedOp::Avg, &x),
            vec![4, -2, i32::MIN / 2],
            "avg = sum / N toward zero"
        );
        assert_eq!(run(RedOp::Prod, &x), vec![14, -14, i32::MAX]);
        assert_eq!(run(RedOp::Max, &x), vec![7, 2, i32::MAX]);
        assert_eq!(run(RedOp::Min, &x), vec![2, -7, 1]);
        assert_eq!(run(RedOp::PreMulSum(3.0), &x)[..2], [27, -15]);
        assert_eq!(
            run(RedOp::Avg, &[vec![255u8], vec![255u8]]),
            vec![127],
            "u8 sum wraps before dividing"
        );
    }

    /// Integer Avg against its definition, written out: the sum wrapped to
    /// the type's width (two's complement), then divided by N toward zero
    /// with N an ordinary integer. The communicator sizes cross every point
    /// where N itself stops fitting the element type.
    #[test]
    fn integer_avg_divides_the_wrapped_sum_by_n_as_an_integer() {
        fn wrapped(sum: i128, bits: u32, signed: bool) -> i128 {
            let m = sum.rem_euclid(1 << bits);
            if signed && m >= 1 << (bits - 1) {
                m - (1 << bits)
            } else {
                m
            }
        }
        let want =
            |xs: &[i128], bits, signed| wrapped(xs.iter().sum(), bits, signed) / xs.len() as i128;
        for n in [1usize, 2, 3, 127, 128, 129, 200, 255, 256, 257, 300] {
            for k in 0..6i128 {
                // a spread of values, extremes included
                let x = |s: usize| (s as i128 * 37 + k * 91) % 256;
                let u: Vec<u8> = (0..n).map(|s| x(s) as u8).collect();
                let i: Vec<i8> = (0..n).map(|s| (x(s) - 128) as i8).collect();
                let u_in: Vec<i128> = u.iter().map(|v| *v as i128).collect();
                let i_in: Vec<i128> = i.iter().map(|v| *v as i128).collect();
                let uv: Vec<Vec<u8>> = u.iter().map(|v| vec![*v]).collect();
                let iv: Vec<Vec<i8>> = i.iter().map(|v| vec![*v]).collect();
                assert_eq!(
                    run(RedOp::Avg, &uv)[0] as i128,
                    want(&u_in, 8, false),
                    "uint8, N = {n}, inputs {u:?}"
                );
                assert_eq!(
                    run(RedOp::Avg, &iv)[0] as i128,
                    want(&i_in, 8, true),
                    "int8, N = {n}, inputs {i:?}"
                );
            }
        }
        // every input -128 at N = 1 and 2: the sum -128 (or its wrap, 0)
        assert_eq!(run(RedOp::Avg, &[vec![i8::MIN]]), vec![i8::MIN]);
        assert_eq!(run(RedOp::Avg, &[vec![i8::MIN], vec![0]]), vec![-64]);
        // 64-bit types divide at full width
        assert_eq!(
            run(RedOp::Avg, &[vec![i64::MIN], vec![0], vec![0]]),
            vec![i64::MIN / 3]
        );
        assert_eq!(
            run(RedOp::Avg, &[vec![u64::MAX], vec![0]]),
            vec![u64::MAX / 2]
        );
    }

    #[test]
    fn float_avg_premultiplies() {
        let x = vec![vec![1.1f32], vec![2.3], vec![4.7]];
        let third = (1.0f64 / 3.0) as f32;
        // rnd(x_0·s), then fused steps in rank order
        let want = 4.7f32.mul_add(third, 2.3f32.mul_add(third, 1.1 * third));
        assert_eq!(run(RedOp::Avg, &x), vec![want]);
        let h = vec![vec![f16::from_f32(1.5)], vec![f16::from_f32(2.0)]];
        assert_eq!(run(RedOp::Sum, &h), vec![f16::from_f32(3.5)]);
        let e = vec![vec![F8E4M3::from_f32(448.0)], vec![F8E4M3::from_f32(448.0)]];
        assert_eq!(run(RedOp::Sum, &e)[0].to_f32(), 448.0, "fp8 saturates");
    }

    /// The fused step of each type on cases where rounding twice (through a
    /// wider type) gives another answer than rounding once; expected values
    /// from the arithmetic, as in `verify::reference`'s test of the same
    /// cases: (acc, x, s, rounded once).
    #[test]
    fn fused_steps_round_once() {
        let p = |e: i32| 2f64.powi(e);
        // float: exactly 1 + 3·2^-24 - 2^-70, just below a midpoint
        let (a, x, s) = (1.0 + p(-23), 1.0 + p(-23), p(-24) * (1.0 - p(-23)));
        let got = f32::premul_add(a as f32, x as f32, s as f32);
        assert_eq!(got as f64, 1.0 + p(-23));
        assert_ne!(
            (a + x * s) as f32 as f64,
            1.0 + p(-23),
            "f64 then f32 rounds twice"
        );
        // half: exactly 2 + 2^-10 + 2^-24, just above a midpoint
        let h = |v: f64| f16::from_f64(v);
        let got = f16::premul_add(h(p(-24)), h(3.0), h(683.0 * p(-10)));
        assert_eq!(got.to_f64(), 2.0 + p(-9));
        // bfloat16: exactly 259·2^-8 - 2^-30, just below a midpoint
        let b = |v: f64| bf16::from_f64(v);
        let got = bf16::premul_add(b(-p(-30)), b(7.0), b(37.0 * p(-8)));
        assert_eq!(got.to_f64(), 129.0 * p(-7));
        // double: IEEE fusedMultiplyAdd
        let (a, x, s) = (-1.0, 1.0 + p(-52), 1.0 - p(-52));
        assert_eq!(f64::premul_add(a, x, s), -p(-104));
        // fp8: the product rounded first. e4m3: 1.375·0.3125 = 0.4296875
        // rounds to 0.4375, and 1 + 0.4375 = 1.4375 ties to 1.5; fused,
        // 1.4296875 would round to 1.375
        let e = F8E4M3::from_f32;
        let got = F8E4M3::premul_add(e(1.0), e(1.375), e(0.3125));
        assert_eq!(got.to_f32(), 1.5);
    }

    /// Every fused step against `verify::reference::fused_step` (exact
    /// integer arithmetic rounded once), on random values of each type over
    /// its whole range; and whole Avg and PreMulSum reductions on 2 to 6
    /// ranks against `verify::reference::reduce`, element by element.
    #[test]
    fn premul_sums_match_the_reference() {
        use crate::core::{DataType, Scalar};
        use crate::verify::reference;
        let mut seed = 3u64;
        let mut next = move || {
            seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
            let mut z = seed;
            z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
            z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
            z ^ (z >> 31)
        };
        fn steps<T: Arith>(bits: &mut dyn FnMut() -> T, dt: DataType) {
            let mut n = 0;
            while n < 100_000 {
                let (a, x, s) = (bits(), bits(), bits());
                if [a, x, s].iter().any(|v| !v.to_f64().is_finite()) {
                    continue;
                }
                let want = reference::fused_step(dt, a.to_f64(), x.to_f64(), s.to_f64());
                let got = T::premul_add(a, x, s).to_f64();
                assert!(
                    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                    "{dt}: {:e} + {:e}·{:e}: {got:e}, want {want:e}",
                    a.to_f64(),
                    x.to_f64(),
                    s.to_f64()
                );
                n += 1;
            }
        }
        steps(&mut || f16::from_bits(next() as u16), DataType::Float16);
        steps(&mut || bf16::from_bits(next() as u16), DataType::Bfloat16);
        steps(&mut || f32::from_bits(next() as u32), DataType::Float32);
        steps(&mut || f64::from_bits(next()), DataType::Float64);

        fn whole<T: Arith>(next: &mut dyn FnMut() -> u64) {
            let dt = T::DTYPE;
            for n in 2..=6 {
                // ±m·2^e, e in -6..6: sums with carries and cancellation
                let inputs: Vec<Vec<T>> = (0..n)
                    .map(|_| {
                        (0..512)
                            .map(|_| {
                                let b = next();
                                let m = 1.0 + (b >> 12) as f64 / 2f64.powi(52);
                                let e = (b % 13) as i32 - 6;
                                let sign = if b & 64 != 0 { -1.0 } else { 1.0 };
                                T::from_f64(sign * m * 2f64.powi(e))
                            })
                            .collect()
                    })
                    .collect();
                for op in [RedOp::Avg, RedOp::PreMulSum(0.3), RedOp::PreMulSum(-1.7)] {
                    let got = run(op, &inputs);
                    for (i, y) in got.iter().enumerate() {
                        let xs: Vec<Scalar> = inputs.iter().map(|x| x[i].to_scalar()).collect();
                        assert_eq!(
                            y.to_scalar(),
                            reference::reduce(op, dt, &xs),
                            "{dt} {op} N={n} element {i}"
                        );
                    }
                }
            }
        }
        whole::<f16>(&mut next);
        whole::<bf16>(&mut next);
        whole::<f32>(&mut next);
        whole::<f64>(&mut next);
        whole::<F8E4M3>(&mut next);
        whole::<F8E5M2>(&mut next);
    }

    #[test]
    fn dispatch_macro_binds_the_type() {
        for dt in crate::core::DataType::ALL {
            let size = with_element_type!(dt, T => std::mem::size_of::<T>());
            assert_eq!(size, dt.size());
        }
    }
}
