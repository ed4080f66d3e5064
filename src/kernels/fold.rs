//! The folds: N inputs combined in rank order into one block, op by op.

use super::arith::{ADD, MAX, MIN, MUL};
use super::{Arith, Isa};
use crate::core::RedOp;

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
    // a few elements (a small call's, computed inline) are done before
    // the other instruction set's entry would pay for itself: the same
    // values either way
    let isa = if acc.len() < SMALL {
        Isa::Portable
    } else {
        Isa::detected()
    };
    reduce_blocks_on(isa, acc, 0..1, op, nranks, |s, _| input(s), |_, _| ());
}

/// Below this many elements [`reduce_into`] stays on the portable loops.
const SMALL: usize = 64;

/// [`reduce_into`] for many blocks of `block.len()` elements: for each `at`
/// of `starts`, `block = x_0[at..] ⊕ x_1[at..] ⊕ …` where `input(s, at)`
/// yields x_s from element `at`, then `emit(at, block)`.
///
/// Runs on the best instruction set this CPU has ([`Isa::detected`]);
/// every instruction set gives the same results.
#[inline]
pub fn reduce_blocks<'a, T: Arith>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    reduce_blocks_on(Isa::detected(), block, starts, op, nranks, input, emit)
}

/// [`reduce_blocks`] on a given instruction set, which the CPU must have
/// (panics otherwise): for tests and benchmarks that compare them.
#[inline]
pub fn reduce_blocks_on<'a, T: Arith>(
    isa: Isa,
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
) {
    match isa {
        Isa::Portable => fold_blocks::<T, false>(block, starts, op, nranks, input, emit),
        #[cfg(x86_simd)]
        Isa::X86V3 => super::isa::fold_blocks_x86_v3(block, starts, op, nranks, input, emit),
    }
}

/// [`reduce_into`] on a given instruction set (see [`reduce_blocks_on`]).
#[inline]
pub fn reduce_into_on<'a, T: Arith>(
    isa: Isa,
    acc: &mut [T],
    op: RedOp,
    nranks: usize,
    input: impl Fn(usize) -> &'a [T],
) {
    reduce_blocks_on(isa, acc, 0..1, op, nranks, |s, _| input(s), |_, _| ());
}

/// The loops of [`reduce_blocks`], inlined into each instruction set's
/// entry point. `V3`: the caller is compiled for x86-64-v3 (FMA, F16C).
///
/// Each op gets its own monomorphic loop over the blocks (the element
/// function is a generic parameter, not a function pointer, and the op is
/// matched once, not per block), so the compiler inlines and vectorises it;
/// a block of a few cache lines can stay in registers.
#[inline(always)]
pub(super) fn fold_blocks<'a, T: Arith, const V3: bool>(
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
        RedOp::Sum => blocks!(|acc, at| T::combine_all::<V3, ADD>(acc, n, |s| input(s, at))),
        RedOp::Prod => blocks!(|acc, at| T::combine_all::<V3, MUL>(acc, n, |s| input(s, at))),
        RedOp::Max => blocks!(|acc, at| T::combine_all::<V3, MAX>(acc, n, |s| input(s, at))),
        RedOp::Min => blocks!(|acc, at| T::combine_all::<V3, MIN>(acc, n, |s| input(s, at))),
        // floats: a pre-multiplied sum with 1/N rounded to the type
        RedOp::Avg if float => {
            let scalar = T::from_f64(1.0 / n as f64);
            T::premul_blocks::<V3>(block, starts, n, input, emit, scalar)
        }
        // integers: sum, then divide by N
        RedOp::Avg => blocks!(|acc, at| {
            T::combine_all::<V3, ADD>(acc, n, |s| input(s, at));
            for a in acc.iter_mut() {
                *a = T::div_n(*a, n);
            }
        }),
        RedOp::PreMulSum(s) => {
            T::premul_blocks::<V3>(block, starts, n, input, emit, T::from_f64(s))
        }
    }
}

/// `acc = f(…f(f(x_0, x_1), x_2)…)`: the first pass combines two inputs.
#[inline(always)]
pub(super) fn fold_all<'a, T: Copy + 'a, F: Fn(T, T) -> T + Copy>(
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

/// [`fold_all`] from block functions: `two` makes the first pair, `into`
/// folds in each next input (the vector loops' entry points).
#[cfg(x86_simd)]
#[inline(always)]
pub(super) fn fold_blocks_with<'a, T: Copy + 'a>(
    acc: &mut [T],
    n: usize,
    mut input: impl FnMut(usize) -> &'a [T],
    two: impl Fn(&mut [T], &[T], &[T]),
    into: impl Fn(&mut [T], &[T]),
) {
    let len = acc.len();
    if n == 1 {
        acc.copy_from_slice(&input(0)[..len]);
        return;
    }
    two(acc, &input(0)[..len], &input(1)[..len]);
    for s in 2..n {
        into(acc, &input(s)[..len]);
    }
}

/// A pre-multiplied sum's block functions, each carrying the scalar:
/// `scale` makes `rnd(x_0·s)` (N = 1), `two` the first pair
/// `rnd(rnd(x_0·s) + x_1·s)`, `add` folds in each next input.
pub(super) struct PremulSteps<S, P, A> {
    pub scale: S,
    pub two: P,
    pub add: A,
}

/// The blocks of a pre-multiplied sum (float Avg, PreMulSum): for each
/// `at` of `starts`, `block` from every input's elements from `at` by
/// `steps`, then `emit(at, block)`. A type may prepare its scalar once
/// for the whole call and pass steps that use it
/// ([`Arith::premul_blocks`]).
#[inline(always)]
pub(super) fn premul_fold<'a, T: Copy + 'a>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    mut emit: impl FnMut(usize, &[T]),
    steps: PremulSteps<
        impl Fn(&mut [T], &[T]),
        impl Fn(&mut [T], &[T], &[T]),
        impl Fn(&mut [T], &[T]),
    >,
) {
    let len = block.len();
    for at in starts {
        if n == 1 {
            (steps.scale)(block, &input(0, at)[..len]);
        } else {
            (steps.two)(block, &input(0, at)[..len], &input(1, at)[..len]);
            for s in 2..n {
                (steps.add)(block, &input(s, at)[..len]);
            }
        }
        emit(at, block);
    }
}

/// [`premul_fold`] with the type's block steps, the scalar passed to each
/// ([`Arith::premul_blocks`]' default).
#[inline(always)]
pub(super) fn premul_blocks_each<'a, T: Arith, const V3: bool>(
    block: &mut [T],
    starts: impl Iterator<Item = usize>,
    n: usize,
    input: impl Fn(usize, usize) -> &'a [T],
    emit: impl FnMut(usize, &[T]),
    s: T,
) {
    premul_fold(
        block,
        starts,
        n,
        input,
        emit,
        PremulSteps {
            scale: |a: &mut [T], x: &[T]| T::scale_all::<V3>(a, x, s),
            two: |a: &mut [T], x0: &[T], x1: &[T]| T::premul_two_all::<V3>(a, x0, x1, s),
            add: |a: &mut [T], x: &[T]| T::premul_add_all::<V3>(a, x, s),
        },
    )
}
