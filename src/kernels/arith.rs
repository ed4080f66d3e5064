//! Element arithmetic with NCCL's semantics, one element at a time: the
//! operations every reduction kernel is built from.

use super::fused::{fused_bf16, fused_bf16_block, fused_f16, fused_f32, fused_f64};
use crate::core::datatype::{bf16_to_f32, f16_to_f32, f32_to_bf16, f32_to_f16};
use crate::core::{Element, F8E4M3, F8E5M2};
use half::{bf16, f16};

/// The element-wise ops without a scalar (Sum, Prod, Max, Min), as the
/// const parameter of the loops that run them: each op's loop is compiled
/// on its own, with the op's instruction in it.
pub type Combine = u8;
pub const ADD: Combine = 0;
pub const MUL: Combine = 1;
pub const MAX: Combine = 2;
pub const MIN: Combine = 3;

/// The element function of the op `OP`.
#[inline(always)]
pub fn combine<T: Arith, const OP: Combine>(a: T, b: T) -> T {
    match OP {
        ADD => T::add(a, b),
        MUL => T::mul(a, b),
        MAX => T::max(a, b),
        _ => T::min(a, b),
    }
}

/// `acc[i] = x[i]·s` element by element, as [`Arith::mul`]: the portable
/// form of [`Arith::scale_all`].
#[inline(always)]
fn scale_each<T: Arith>(acc: &mut [T], x: &[T], s: T) {
    for (a, x) in acc.iter_mut().zip(x) {
        *a = T::mul(*x, s);
    }
}

/// [`Arith::premul_blocks`] for a type whose x86-64-v3 code prepares its
/// scalar once per call (`$isa`, in `isa`), the default elsewhere.
macro_rules! premul_blocks_on_v3 {
    ($isa:ident) => {
        #[inline(always)]
        fn premul_blocks<'a, const V3: bool>(
            block: &mut [Self],
            starts: impl Iterator<Item = usize>,
            n: usize,
            input: impl Fn(usize, usize) -> &'a [Self],
            emit: impl FnMut(usize, &[Self]),
            s: Self,
        ) where
            Self: 'a,
        {
            #[cfg(x86_simd)]
            if V3 {
                return super::isa::$isa(block, starts, n, input, emit, s);
            }
            super::fold::premul_blocks_each::<Self, V3>(block, starts, n, input, emit, s)
        }
    };
}

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
    /// [`Arith::premul_add`] through fused multiply-add at the type's own
    /// width where it has one (float, double): the same value, one
    /// instruction where the code is compiled for a CPU with FMA, a libm
    /// call elsewhere (so only the kernels built for such CPUs call it).
    #[inline(always)]
    fn premul_add_fma(acc: Self, x: Self, s: Self) -> Self {
        Self::premul_add(acc, x, s)
    }
    /// `acc = x_0 ⊕ x_1 ⊕ …` over a block, in rank order, ⊕ the op `OP`'s
    /// element function ([`combine`]); `input(s)` yields x_s. `V3`: the
    /// caller is compiled for x86-64-v3 (so are the overrides that use its
    /// instructions).
    #[inline(always)]
    fn combine_all<'a, const V3: bool, const OP: Combine>(
        acc: &mut [Self],
        n: usize,
        input: impl FnMut(usize) -> &'a [Self],
    ) {
        super::fold::fold_all(acc, n, input, combine::<Self, OP>)
    }
    /// `acc[i] = x[i]·s` over a block, as [`Arith::mul`].
    #[inline(always)]
    fn scale_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        scale_each(acc, x, s)
    }
    /// `acc[i] = rnd(rnd(x0[i]·s) + x1[i]·s)` over a block, the sum rounded
    /// once: [`Arith::scale_all`] then [`Arith::premul_add_all`], which a
    /// type may do in one pass.
    #[inline(always)]
    fn premul_two_all<const V3: bool>(acc: &mut [Self], x0: &[Self], x1: &[Self], s: Self) {
        Self::scale_all::<V3>(acc, x0, s);
        Self::premul_add_all::<V3>(acc, x1, s);
    }
    /// A pre-multiplied sum (float Avg, PreMulSum) over many blocks, as
    /// [`super::fold::premul_fold`] with [`Arith::scale_all`],
    /// [`Arith::premul_two_all`] and [`Arith::premul_add_all`] as its
    /// block steps. A type whose steps start by preparing the scalar
    /// (converting it, choosing a step, loading tables) overrides it to
    /// prepare once per call instead of once per block: half, bfloat16 and
    /// fp8 on x86-64-v3, whose reductions then reach their vector steps
    /// only through here; their `*_all` entries with `V3` run the same
    /// step bodies one at a time, for the tests that hold each step to the
    /// element functions on every value.
    #[inline(always)]
    fn premul_blocks<'a, const V3: bool>(
        block: &mut [Self],
        starts: impl Iterator<Item = usize>,
        n: usize,
        input: impl Fn(usize, usize) -> &'a [Self],
        emit: impl FnMut(usize, &[Self]),
        s: Self,
    ) where
        Self: 'a,
    {
        super::fold::premul_blocks_each::<Self, V3>(block, starts, n, input, emit, s)
    }
    /// `acc[i] = acc[i] + x[i]·s` over a block, each step as
    /// [`Arith::premul_add`] (with `V3`, [`Arith::premul_add_fma`]).
    #[inline(always)]
    fn premul_add_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        for (a, x) in acc.iter_mut().zip(x) {
            *a = if V3 {
                Self::premul_add_fma(*a, *x, s)
            } else {
                Self::premul_add(*a, *x, s)
            };
        }
    }
}

// Integer Avg divides the wrapped sum by N as an ordinary integer, as
// NCCL's SumPostDiv does with its 31-bit divisor: N itself is never
// converted to the element type, where 200 would be -56 as int8 and 256
// would be 0 as uint8. The quotient is truncated toward zero, so its
// magnitude never exceeds the sum's and it fits the element type.
//
// 8- and 32-bit sums divide in floating point, which the compiler
// vectorises (there is no vector integer division): the sum `a` and N are
// exact there, and the rounded quotient truncates to the integer one. If
// a/N is an integer it is exact. If not, its distance to the next integer
// k away from zero is at least 1/N, while rounding moves it by at most
// half an ulp of k, k·2^-p (p = 24 in f32, 53 in f64): while |k|·N < 2^p
// the rounded quotient stays strictly between the integers around a/N.
// 32-bit sums take f64 (|k|·N ≤ |a| + N < 2^33); 8-bit ones f32 with N
// capped at 256, which changes no quotient (|a| ≤ 255 < N gives 0 either
// way) and keeps |k|·N ≤ 511 (a test checks every 8-bit sum with every
// N up to 300). The integer goes back through the bits of
// `q + 1.5·2^(p-1)`, whose low bits hold q in two's complement for
// |q| < 2^(p-2): a float-to-integer `as` saturates, and its checks keep
// the loop from vectorising. 64-bit sums divide as integers (they no
// longer fit f64's 53 bits).
macro_rules! arith_int {
    ($($t:ty => $div:ident),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a.wrapping_add(b) }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a.wrapping_mul(b) }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { Ord::max(a, b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { Ord::min(a, b) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { $div!(a, n, $t) }
        }
    )*};
}
macro_rules! div_in_f32 {
    ($a:expr, $n:expr, $t:ty) => {{
        let q = (f32::from($a) / $n.min(256) as f32).trunc();
        (q + 12_582_912.0).to_bits() as $t
    }};
}
macro_rules! div_in_f64 {
    ($a:expr, $n:expr, $t:ty) => {{
        let q = (f64::from($a) / $n as f64).trunc();
        (q + 6_755_399_441_055_744.0).to_bits() as $t
    }};
}
macro_rules! div_as_integer {
    // a communicator never has more ranks than the type holds
    ($a:expr, $n:expr, $t:ty) => {
        $a / <$t>::try_from($n).unwrap_or(<$t>::MAX)
    };
}
arith_int!(
    i8 => div_in_f32, u8 => div_in_f32, i32 => div_in_f64, u32 => div_in_f64,
    i64 => div_as_integer, u64 => div_as_integer
);

macro_rules! arith_float {
    ($($t:ty => $fused:path),*) => {$(
        impl Arith for $t {
            #[inline(always)] fn add(a: Self, b: Self) -> Self { a + b }
            #[inline(always)] fn mul(a: Self, b: Self) -> Self { a * b }
            #[inline(always)] fn max(a: Self, b: Self) -> Self { a.max(b) }
            #[inline(always)] fn min(a: Self, b: Self) -> Self { a.min(b) }
            #[inline(always)] fn div_n(a: Self, n: usize) -> Self { a / (n as $t) }
            #[inline(always)] fn premul_add(acc: Self, x: Self, s: Self) -> Self { $fused(acc, x, s) }
            #[inline(always)] fn premul_add_fma(acc: Self, x: Self, s: Self) -> Self { x.mul_add(s, acc) }
        }
    )*};
}
arith_float!(f32 => fused_f32, f64 => fused_f64);

// fp8 computes in f32 and rounds back after every step: f32 carries more
// than twice its precision, so this equals correctly rounded arithmetic in
// the type itself. On x86-64-v3 the blocks run 16 elements wide (`isa`).
macro_rules! arith_fp8 {
    ($($t:ty),*) => {$(
        impl Arith for $t {
            #[inline(always)]
            fn add(a: Self, b: Self) -> Self { Self::from_f32(a.to_f32() + b.to_f32()) }
            #[inline(always)]
            fn mul(a: Self, b: Self) -> Self { Self::from_f32(a.to_f32() * b.to_f32()) }
            #[inline(always)]
            fn max(a: Self, b: Self) -> Self { Self::from_f32(a.to_f32().max(b.to_f32())) }
            #[inline(always)]
            fn min(a: Self, b: Self) -> Self { Self::from_f32(a.to_f32().min(b.to_f32())) }
            #[inline(always)]
            fn div_n(a: Self, n: usize) -> Self { Self::from_f32(a.to_f32() / n as f32) }
            #[inline(always)]
            fn combine_all<'a, const V3: bool, const OP: Combine>(
                acc: &mut [Self],
                n: usize,
                input: impl FnMut(usize) -> &'a [Self],
            ) {
                #[cfg(x86_simd)]
                if V3 {
                    let two = super::isa::fp8_combine::<Self, OP>;
                    let into = super::isa::fp8_combine_into::<Self, OP>;
                    return super::fold::fold_blocks_with(acc, n, input, two, into);
                }
                super::fold::fold_all(acc, n, input, combine::<Self, OP>)
            }
            #[inline(always)]
            fn scale_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
                #[cfg(x86_simd)]
                if V3 {
                    return super::isa::fp8_scale(acc, x, s);
                }
                scale_each(acc, x, s)
            }
            #[inline(always)]
            fn premul_two_all<const V3: bool>(acc: &mut [Self], x0: &[Self], x1: &[Self], s: Self) {
                #[cfg(x86_simd)]
                if V3 {
                    return super::isa::fp8_premul_two(acc, x0, x1, s);
                }
                Self::scale_all::<V3>(acc, x0, s);
                Self::premul_add_all::<V3>(acc, x1, s);
            }
            premul_blocks_on_v3!(fp8_premul_blocks);
            #[inline(always)]
            fn premul_add_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
                #[cfg(x86_simd)]
                if V3 {
                    return super::isa::fp8_premul_add(acc, x, s);
                }
                for (a, x) in acc.iter_mut().zip(x) {
                    *a = Self::premul_add(*a, *x, s);
                }
            }
        }
    )*};
}
arith_fp8!(F8E4M3, F8E5M2);

// half's and bfloat16's Sum, Avg and PreMulSum on x86-64-v3 run 8 and 16
// elements at a time with explicit vector code (`isa`: F16C's conversions
// for half, shifts and masks for bfloat16), elsewhere through the core's
// bit-level conversions (the `half` crate checks for hardware support on
// every f16 call, and branches on NaN in its bf16 ones): the same values,
// both round to nearest even.
impl Arith for f16 {
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        f32_to_f16(f16_to_f32(a) + f16_to_f32(b))
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        f32_to_f16(f16_to_f32(a) * f16_to_f32(b))
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        f32_to_f16(f16_to_f32(a).max(f16_to_f32(b)))
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        f32_to_f16(f16_to_f32(a).min(f16_to_f32(b)))
    }
    #[inline(always)]
    fn div_n(a: Self, n: usize) -> Self {
        f32_to_f16(f16_to_f32(a) / n as f32)
    }
    #[inline(always)]
    fn premul_add(acc: Self, x: Self, s: Self) -> Self {
        fused_f16(acc, x, s)
    }
    #[inline(always)]
    fn combine_all<'a, const V3: bool, const OP: Combine>(
        acc: &mut [Self],
        n: usize,
        input: impl FnMut(usize) -> &'a [Self],
    ) {
        #[cfg(x86_simd)]
        if V3 {
            let (two, into) = (
                super::isa::half_combine::<OP>,
                super::isa::half_combine_into::<OP>,
            );
            return super::fold::fold_blocks_with(acc, n, input, two, into);
        }
        super::fold::fold_all(acc, n, input, combine::<Self, OP>)
    }
    #[inline(always)]
    fn scale_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::half_scale(acc, x, s);
        }
        scale_each(acc, x, s)
    }
    #[inline(always)]
    fn premul_two_all<const V3: bool>(acc: &mut [Self], x0: &[Self], x1: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::half_premul_two(acc, x0, x1, s);
        }
        Self::scale_all::<V3>(acc, x0, s);
        Self::premul_add_all::<V3>(acc, x1, s);
    }
    premul_blocks_on_v3!(half_premul_blocks);
    #[inline(always)]
    fn premul_add_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::half_premul_add(acc, x, s);
        }
        for (a, x) in acc.iter_mut().zip(x) {
            *a = fused_f16(*a, *x, s);
        }
    }
}

impl Arith for bf16 {
    #[inline(always)]
    fn add(a: Self, b: Self) -> Self {
        f32_to_bf16(bf16_to_f32(a) + bf16_to_f32(b))
    }
    #[inline(always)]
    fn mul(a: Self, b: Self) -> Self {
        f32_to_bf16(bf16_to_f32(a) * bf16_to_f32(b))
    }
    #[inline(always)]
    fn max(a: Self, b: Self) -> Self {
        f32_to_bf16(bf16_to_f32(a).max(bf16_to_f32(b)))
    }
    #[inline(always)]
    fn min(a: Self, b: Self) -> Self {
        f32_to_bf16(bf16_to_f32(a).min(bf16_to_f32(b)))
    }
    #[inline(always)]
    fn div_n(a: Self, n: usize) -> Self {
        f32_to_bf16(bf16_to_f32(a) / n as f32)
    }
    #[inline(always)]
    fn premul_add(acc: Self, x: Self, s: Self) -> Self {
        fused_bf16(acc, x, s)
    }
    #[inline(always)]
    fn combine_all<'a, const V3: bool, const OP: Combine>(
        acc: &mut [Self],
        n: usize,
        input: impl FnMut(usize) -> &'a [Self],
    ) {
        #[cfg(x86_simd)]
        if V3 {
            let (two, into) = (
                super::isa::bf16_combine::<OP>,
                super::isa::bf16_combine_into::<OP>,
            );
            return super::fold::fold_blocks_with(acc, n, input, two, into);
        }
        baseline_combine::<OP>(acc, n, input)
    }
    #[inline(always)]
    fn scale_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::bf16_scale(acc, x, s);
        }
        scale_each(acc, x, s)
    }
    #[inline(always)]
    fn premul_two_all<const V3: bool>(acc: &mut [Self], x0: &[Self], x1: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::bf16_premul_two(acc, x0, x1, s);
        }
        Self::scale_all::<V3>(acc, x0, s);
        Self::premul_add_all::<V3>(acc, x1, s);
    }
    premul_blocks_on_v3!(bf16_premul_blocks);
    #[inline(always)]
    fn premul_add_all<const V3: bool>(acc: &mut [Self], x: &[Self], s: Self) {
        #[cfg(x86_simd)]
        if V3 {
            return super::isa::bf16_premul_add(acc, x, s);
        }
        fused_bf16_block(acc, x, s)
    }
}

/// bfloat16's Sum, Prod, Max and Min compiled for the target's baseline
/// wherever they are called from (a function of its own is not compiled
/// with its caller's features).
#[inline(never)]
fn baseline_combine<'a, const OP: Combine>(
    acc: &mut [bf16],
    n: usize,
    input: impl FnMut(usize) -> &'a [bf16],
) {
    super::fold::fold_all(acc, n, input, combine::<bf16, OP>)
}
