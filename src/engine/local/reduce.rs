//! Reduction kernels: plain loops over typed slices that the compiler
//! vectorises. Inputs are folded in rank order (`x_0 ⊕ x_1 ⊕ …`), each
//! intermediate rounded to the element type, so a result is a function of the
//! inputs alone and identical on every rank that receives it.

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
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { a.max(b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { a.min(b) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { a / (n as $t) }
        }
    )*};
}
arith_float!(f32, f64);

// 16- and 8-bit floats compute in f32 and round back after every step: f32
// carries more than twice their precision, so this equals correctly rounded
// arithmetic in the type itself.
macro_rules! arith_via_f32 {
    ($($t:ty => $to:path, $from:path);*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { $from($to(a) + $to(b)) }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { $from($to(a) * $to(b)) }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { $from($to(a).max($to(b))) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { $from($to(a).min($to(b))) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { $from($to(a) / n as f32) }
        }
    )*};
}
// f16 through the core's bit-level conversions, which vectorise (the `half`
// crate checks for hardware support on every call)
arith_via_f32!(
    f16 => crate::core::datatype::f16_to_f32, crate::core::datatype::f32_to_f16;
    bf16 => bf16::to_f32, bf16::from_f32;
    F8E4M3 => F8E4M3::to_f32, F8E4M3::from_f32;
    F8E5M2 => F8E5M2::to_f32, F8E5M2::from_f32
);

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
        // floats: multiply every input by 1/N rounded to the type, then sum
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
            *a = T::add(*a, T::mul(*x, scalar));
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
        let x = vec![vec![1.0f32], vec![2.0], vec![4.0]];
        let third = (1.0f64 / 3.0) as f32;
        assert_eq!(
            run(RedOp::Avg, &x),
            vec![1.0 * third + 2.0 * third + 4.0 * third]
        );
        let h = vec![vec![f16::from_f32(1.5)], vec![f16::from_f32(2.0)]];
        assert_eq!(run(RedOp::Sum, &h), vec![f16::from_f32(3.5)]);
        let e = vec![vec![F8E4M3::from_f32(448.0)], vec![F8E4M3::from_f32(448.0)]];
        assert_eq!(run(RedOp::Sum, &e)[0].to_f32(), 448.0, "fp8 saturates");
    }

    #[test]
    fn dispatch_macro_binds_the_type() {
        for dt in crate::core::DataType::ALL {
            let size = with_element_type!(dt, T => std::mem::size_of::<T>());
            assert_eq!(size, dt.size());
        }
    }
}
