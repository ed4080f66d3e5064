//! Which instructions the kernels run with, chosen once per process from
//! what the CPU reports, and the entry points compiled for each. All of
//! the kernels' `unsafe` is here and in the three submodules of explicit
//! vector code, `half_v3`, `bf16_v3` and `fp8_v3`.
//!
//! The loops are the portable ones of `fold`, inlined into a function
//! compiled with more instructions enabled: on x86-64 with AVX2, FMA and
//! F16C (the x86-64-v3 level) the compiler vectorises them 8 floats wide
//! and the float and double Avg/PreMulSum step becomes one fused
//! multiply-add instruction instead of a libm call or an exact emulation.
//! Half's, bfloat16's and the fp8 types' ops take explicit vector code
//! here instead (the compiler cannot turn the portable bit-level half
//! conversions into F16C's, its bfloat16 loops ran at a fifth of float's
//! speed per byte, and fp8 went through a table and scalar integer code
//! for every element, benches/kernels.rs). The 16-bit types' fused step
//! is the f32 FMA alone where the scalar has no significand bits (a power
//! of two: every Avg with N a power of two), where rounding that to 16 bits
//! rounds the exact value once (the sections below say why); otherwise
//! the f32 sum, unless a lane lands exactly on a 16-bit midpoint without
//! being exact, which bfloat16 settles with an error term and half by
//! rounding the sum to odd.
//! Every path computes the same values (the step is rounded once on all
//! of them; `tests` hold each path to an exact reference and to each
//! other, the 16-bit blocks on every value of the type), so which one
//! runs never shows.

#[cfg(x86_simd)]
use {super::Arith, super::arith::Combine, crate::core::RedOp};

/// An instruction set the kernels are compiled for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Isa {
    /// The target's baseline (SSE2 on x86-64); runs everywhere.
    Portable,
    /// AVX2, FMA and F16C.
    #[cfg(x86_simd)]
    X86V3,
}

impl Isa {
    /// The best instruction set this CPU has.
    #[inline]
    pub fn detected() -> Isa {
        #[cfg(x86_simd)]
        if Isa::X86V3.available() {
            return Isa::X86V3;
        }
        Isa::Portable
    }

    /// Every instruction set this CPU has, the portable one first.
    pub fn all_available() -> Vec<Isa> {
        let all = [
            Isa::Portable,
            #[cfg(x86_simd)]
            Isa::X86V3,
        ];
        all.into_iter().filter(|i| i.available()).collect()
    }

    /// Whether this CPU has the instruction set (the standard library
    /// caches what the CPU reports, so this is a load and a test).
    #[inline]
    pub fn available(self) -> bool {
        match self {
            Isa::Portable => true,
            #[cfg(x86_simd)]
            Isa::X86V3 => {
                std::arch::is_x86_feature_detected!("avx2")
                    && std::arch::is_x86_feature_detected!("fma")
                    && std::arch::is_x86_feature_detected!("f16c")
            }
        }
    }
}

/// `fold::fold_blocks` compiled for x86-64-v3, after checking the CPU.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fold_blocks_x86_v3<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    assert!(
        Isa::X86V3.available(),
        "the x86-64-v3 kernels need AVX2, FMA and F16C, which this CPU lacks"
    );
    // SAFETY: the CPU has every feature the function is compiled with
    // (checked just above); it is otherwise an ordinary safe function.
    unsafe { fold_blocks_v3(block, starts, op, nranks, input, emit) }
}

#[cfg(x86_simd)]
#[target_feature(enable = "avx2,fma,f16c")]
fn fold_blocks_v3<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    super::fold::fold_blocks::<T, true>(block, starts, op, nranks, input, emit)
}

/// How the 16-bit types' fused step `rnd(acc + x·s)` is computed for a
/// given scalar (each type's `step_for` says which scalars take which).
#[cfg(x86_simd)]
type Step = u8;
/// The f32 FMA alone: rounding it to 16 bits rounds the exact value once.
#[cfg(x86_simd)]
const FMA: Step = 0;
/// The f32 sum, and a correction for the lanes that may land on a 16-bit
/// midpoint without being exact; every product `x·s` is exact in f32.
#[cfg(x86_simd)]
const SUM: Step = 1;
/// As [`SUM`], for scalars small enough that products may fall below the
/// 16-bit type's normals (half) or be inexact in f32 (bfloat16).
#[cfg(x86_simd)]
const SUM_TINY: Step = 2;

/// `$f::<STEP>(args…)` for the [`Step`] value `$step`: each step is a
/// const parameter, so its loop is compiled without the others' checks.
#[cfg(x86_simd)]
macro_rules! by_step {
    ($step:expr, $f:ident($($arg:expr),*)) => {
        match $step {
            FMA => $f::<FMA>($($arg),*),
            SUM => $f::<SUM>($($arg),*),
            _ => $f::<SUM_TINY>($($arg),*),
        }
    };
}

/// A 16-bit type's `premul_blocks` (Avg's and PreMulSum's blocks, as
/// `fold::premul_fold` with the module's steps, the scalar prepared and
/// its [`Step`] chosen once per call), written once for `half_v3` and
/// `bf16_v3`: each has a `Scalar` (`new`, field `s`), `step_for`,
/// `scale`, `premul_two_with` and `premul_add_with`.
#[cfg(x86_simd)]
macro_rules! premul_blocks_by_step {
    ($T:ty) => {
        /// Avg's and PreMulSum's blocks, the scalar prepared and its step
        /// chosen once for all of them.
        #[target_feature(enable = "avx2,fma,f16c")]
        pub fn premul_blocks<'a>(
            block: &mut [$T],
            starts: impl Iterator<Item = usize>,
            n: usize,
            input: impl Fn(usize, usize) -> &'a [$T],
            emit: impl FnMut(usize, &[$T]),
            s: $T,
        ) {
            let p = Scalar::new(s);
            by_step!(
                step_for(s),
                premul_blocks_with(block, starts, n, input, emit, &p)
            )
        }

        #[target_feature(enable = "avx2,fma,f16c")]
        fn premul_blocks_with<'a, const STEP: Step>(
            block: &mut [$T],
            starts: impl Iterator<Item = usize>,
            n: usize,
            input: impl Fn(usize, usize) -> &'a [$T],
            emit: impl FnMut(usize, &[$T]),
            p: &Scalar,
        ) {
            let steps = PremulSteps {
                scale: |a: &mut [$T], x: &[$T]| scale(a, x, p.s),
                two: |a: &mut [$T], x0: &[$T], x1: &[$T]| premul_two_with::<STEP>(a, x0, x1, p),
                add: |a: &mut [$T], x: &[$T]| premul_add_with::<STEP>(a, x, p),
            };
            premul_fold(block, starts, n, input, emit, steps)
        }
    };
}

/// The op `OP` on 8 f32 lanes, as [`super::arith::combine`] computes it
/// on one: Max and Min as `f32::max` and `f32::min` compile, a NaN
/// operand giving the other and equal operands (±0 included) the first.
#[cfg(x86_simd)]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn apply<const OP: Combine>(
    a: std::arch::x86_64::__m256,
    b: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use super::arith::{ADD, MAX, MUL};
    use std::arch::x86_64::*;
    // `maxps b, a` is b where b > a and a otherwise (a NaN in either
    // lane included); a NaN `a` then takes b
    match OP {
        ADD => _mm256_add_ps(a, b),
        MUL => _mm256_mul_ps(a, b),
        MAX => _mm256_blendv_ps(_mm256_max_ps(b, a), b, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)),
        _ => _mm256_blendv_ps(_mm256_min_ps(b, a), b, _mm256_cmp_ps::<_CMP_UNORD_Q>(a, a)),
    }
}

/// TwoSum, 8 lanes: `a + b − s` exactly, for `s` the f32 sum rounded to
/// nearest (both 16-bit types' fused steps take their error term here).
#[cfg(x86_simd)]
#[target_feature(enable = "avx2,fma,f16c")]
#[inline]
fn two_sum_error(
    a: std::arch::x86_64::__m256,
    b: std::arch::x86_64::__m256,
    s: std::arch::x86_64::__m256,
) -> std::arch::x86_64::__m256 {
    use std::arch::x86_64::*;
    let bb = _mm256_sub_ps(s, a);
    _mm256_add_ps(_mm256_sub_ps(a, _mm256_sub_ps(s, bb)), _mm256_sub_ps(b, bb))
}

// ------------------------------------------------------------ half with F16C
//
// Half's steps widen to f32 (exact), compute there, and round back to
// half: the bit-level conversions of `arith` and F16C's `vcvtph2ps` /
// `vcvtps2ph` (immediate 0: to nearest, ties to even, whatever MXCSR says)
// give the same bits for every value, NaN aside, whose payload is not part
// of the contract (both set the quiet bit and keep the top bits). The sum
// and the fused step are the portable ones written 8 lanes wide, so the
// values are the same; the lanes past the last multiple of 8 take the
// portable element functions.

/// `acc[i] = x0[i] ⊕ x1[i]`, ⊕ the op `OP`; the slices are at least
/// `acc`'s length.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_combine<const OP: Combine>(
    acc: &mut [half::f16],
    x0: &[half::f16],
    x1: &[half::f16],
) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: the CPU has every feature the function is compiled with.
    unsafe { half_v3::combine::<OP>(acc, x0, x1) }
}

/// `acc[i] = acc[i] ⊕ x[i]`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_combine_into<const OP: Combine>(acc: &mut [half::f16], x: &[half::f16]) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_combine`.
    unsafe { half_v3::combine_into::<OP>(acc, x) }
}

/// `acc[i] = rnd(x[i]·s)`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_scale(acc: &mut [half::f16], x: &[half::f16], s: half::f16) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_combine`.
    unsafe { half_v3::scale(acc, x, s) }
}

/// `acc[i] = rnd(acc[i] + x[i]·s)`, rounded once.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_premul_add(acc: &mut [half::f16], x: &[half::f16], s: half::f16) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_combine`.
    unsafe { half_v3::premul_add(acc, x, s) }
}

/// `acc[i] = rnd(rnd(x0[i]·s) + x1[i]·s)`, the sum rounded once.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_premul_two(
    acc: &mut [half::f16],
    x0: &[half::f16],
    x1: &[half::f16],
    s: half::f16,
) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_combine`.
    unsafe { half_v3::premul_two(acc, x0, x1, s) }
}

/// Avg's and PreMulSum's blocks (`Arith::premul_blocks`), the scalar
/// prepared once.
#[cfg(x86_simd)]
#[inline]
pub(super) fn half_premul_blocks<'a>(
    block: &mut [half::f16],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [half::f16],
    emit: impl FnMut(usize, &[half::f16]),
    s: half::f16,
) {
    assert!(Isa::X86V3.available(), "F16C needed");
    // SAFETY: as in `half_combine`.
    unsafe { half_v3::premul_blocks(block, starts, n, input, emit, s) }
}

#[cfg(x86_simd)]
mod half_v3;

// -------------------------------------------------------- bfloat16 with AVX2
//
// bfloat16 is the top half of a float: 16 elements load as one 256-bit
// register whose 32-bit lanes hold two elements each, the odd-indexed one
// already in the top half (masking off the low half gives it as a float)
// and the even-indexed one in the low half (a shift up gives it). Each
// half is computed 8 lanes wide as floats, and the results go back into
// one register by a shift and a 16-bit blend, all within the 128-bit
// halves of the register (Zen 1 executes 256-bit operations as two
// 128-bit ones; an operation across the halves costs more).
//
// Rounding back is the integer rounding of `core::datatype::f32_to_bf16`
// (add 0x7FFF plus the kept part's last bit, keep the top half), done on
// 16 lanes at once: the top halves of both registers side by side (the
// shift and blend that store them) and the low halves side by side (the
// same for the other halves, which the fused step's midpoint check also
// takes), and the kept parts one more where the low half is past the
// midpoint or on it with the kept part odd. That function also passes a
// NaN's top bits through rather than rounding them; here no NaN has a
// nonzero low half (every NaN is a widened input, which the float
// operations return quiet with its bits, or the default NaN), so rounding
// leaves its kept part as it is: the same quiet NaN.
//
// The fused step `rnd(acc + x·s)`, acc a bfloat16 value: `fma(x, s, acc)`
// in f32 is the exact value rounded once at 24 bits, and rounding that to
// bfloat16 rounds the exact value once unless it landed exactly on a
// midpoint between two bfloat16 values without being exact (double
// rounding: the ulps of f32 and bfloat16 differ by 2^16 in every binade,
// subnormals included, so a value that is not on a midpoint is on the
// same side of every midpoint as the exact value). Two cases:
//
// - `s` a power of two (every Avg with N a power of two), zero, infinite
//   or NaN: never. `x·s` then has at most 8 significant bits, like `acc`.
//   An inexact f32 sum needs the two terms 16 binades apart, and then the
//   larger one decides: if it is `acc`, a bfloat16 value, the sum lies
//   within a 2^-16 fraction of it, nowhere near a midpoint; if it is `x·s`,
//   the sum's bits below the larger term's 8 are either nonzero (not a
//   midpoint) or it equals `x·s` exactly, which is only a midpoint when
//   `x·s` is in bfloat16's subnormal range, where every nonzero `acc`
//   (at least 2^-133) is within 24 bits of it and the sum is exact.
// - any other `s`: a lane of the f32 result that is a midpoint takes the
//   direction of the exact value from TwoSum's error term (exact when
//   `x·s` is exact in f32, i.e. not below 2^-134 nor past the largest
//   float; lanes where that fails go through the portable element step).
//   With `s` between 2^-9 and 1 in magnitude every product is exact and
//   no larger than `x`, and a lane on a midpoint is inexact exactly when
//   `s − x·s`, computed in f32, is not `acc` (`inexact` in `bf16_v3`, with
//   the argument), which also gives the error term in one subtraction;
//   every vector is tested so, as random data puts a lane on a midpoint
//   in about half of them.

#[cfg(x86_simd)]
macro_rules! bf16_entry {
    ($($(#[$doc:meta])* $name:ident => $inner:ident($($arg:ident: $t:ty),*);)*) => {$(
        $(#[$doc])*
        #[cfg(x86_simd)]
        #[inline]
        pub(super) fn $name($($arg: $t),*) {
            assert!(Isa::X86V3.available(), "AVX2 and FMA needed");
            // SAFETY: the CPU has every feature the function is compiled
            // with (checked just above); it is otherwise an ordinary safe
            // function.
            unsafe { bf16_v3::$inner($($arg),*) }
        }
    )*};
}

#[cfg(x86_simd)]
use half::bf16;

/// `acc[i] = x0[i] ⊕ x1[i]`, ⊕ the op `OP`; the slices are at least
/// `acc`'s length.
#[cfg(x86_simd)]
#[inline]
pub(super) fn bf16_combine<const OP: Combine>(acc: &mut [bf16], x0: &[bf16], x1: &[bf16]) {
    assert!(Isa::X86V3.available(), "AVX2 and FMA needed");
    // SAFETY: the CPU has every feature the function is compiled with.
    unsafe { bf16_v3::combine::<OP>(acc, x0, x1) }
}

/// `acc[i] = acc[i] ⊕ x[i]`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn bf16_combine_into<const OP: Combine>(acc: &mut [bf16], x: &[bf16]) {
    assert!(Isa::X86V3.available(), "AVX2 and FMA needed");
    // SAFETY: as in `bf16_combine`.
    unsafe { bf16_v3::combine_into::<OP>(acc, x) }
}

#[cfg(x86_simd)]
bf16_entry! {
    /// `acc[i] = rnd(x[i]·s)`.
    bf16_scale => scale(acc: &mut [bf16], x: &[bf16], s: bf16);
    /// `acc[i] = rnd(rnd(x0[i]·s) + x1[i]·s)`, the sum rounded once.
    bf16_premul_two => premul_two(acc: &mut [bf16], x0: &[bf16], x1: &[bf16], s: bf16);
    /// `acc[i] = rnd(acc[i] + x[i]·s)`, rounded once.
    bf16_premul_add => premul_add(acc: &mut [bf16], x: &[bf16], s: bf16);
}

/// Avg's and PreMulSum's blocks (`Arith::premul_blocks`), the scalar
/// prepared once.
#[cfg(x86_simd)]
#[inline]
pub(super) fn bf16_premul_blocks<'a>(
    block: &mut [bf16],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [bf16],
    emit: impl FnMut(usize, &[bf16]),
    s: bf16,
) {
    assert!(Isa::X86V3.available(), "AVX2 and FMA needed");
    // SAFETY: as in `bf16_combine`.
    unsafe { bf16_v3::premul_blocks(block, starts, n, input, emit, s) }
}

#[cfg(x86_simd)]
mod bf16_v3;

// ------------------------------------------------------ fp8 with AVX2 and F16C
//
// The fp8 types decode through half and encode through it (F16C), 16
// elements at a time (`fp8_v3`); every step computes in f32 what the
// element functions compute, and the encoding gives their bits (checked on
// every pair of values), so the values are theirs. Avg's and PreMulSum's
// products `rnd(x·s)` are looked up on the codes instead, in tables built
// from the element product (`fp8_products`).

#[cfg(x86_simd)]
use crate::core::fp8::Fp8;

/// `acc[i] = x0[i] ⊕ x1[i]`, ⊕ the op `OP`; the slices are at least
/// `acc`'s length.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_combine<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x0: &[T], x1: &[T]) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: the CPU has every feature the function is compiled with.
    unsafe { fp8_v3::combine::<T, OP>(acc, x0, x1) }
}

/// `acc[i] = acc[i] ⊕ x[i]`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_combine_into<T: Fp8 + Arith, const OP: Combine>(acc: &mut [T], x: &[T]) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: as in `fp8_combine`.
    unsafe { fp8_v3::combine_into::<T, OP>(acc, x) }
}

/// `acc[i] = rnd(x[i]·s)`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_scale<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: as in `fp8_combine`.
    unsafe { fp8_v3::scale(acc, x, s) }
}

/// `acc[i] = rnd(acc[i] + rnd(x[i]·s))`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_premul_add<T: Fp8 + Arith>(acc: &mut [T], x: &[T], s: T) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: as in `fp8_combine`.
    unsafe { fp8_v3::premul_add(acc, x, s) }
}

/// `acc[i] = rnd(rnd(x0[i]·s) + rnd(x1[i]·s))`.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_premul_two<T: Fp8 + Arith>(acc: &mut [T], x0: &[T], x1: &[T], s: T) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: as in `fp8_combine`.
    unsafe { fp8_v3::premul_two(acc, x0, x1, s) }
}

/// Avg's and PreMulSum's blocks (`Arith::premul_blocks`), the scalar
/// prepared (tables included) once.
#[cfg(x86_simd)]
#[inline]
pub(super) fn fp8_premul_blocks<'a, T: Fp8 + Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
    s: T,
) {
    assert!(Isa::X86V3.available(), "AVX2 and F16C needed");
    // SAFETY: as in `fp8_combine`.
    unsafe { fp8_v3::premul_blocks(block, starts, n, input, emit, s) }
}

#[cfg(x86_simd)]
mod fp8_products;
#[cfg(x86_simd)]
mod fp8_v3;
