//! The 16-bit block kernels of x86-64-v3 (half with F16C, bfloat16 with
//! AVX2 and FMA) against the portable element steps, on every value of
//! the type.

use super::*;
use crate::kernels::arith::{ADD, Combine, MAX, MIN, MUL, combine};

/// Scalars for the 16-bit block tests: powers of two across the range
/// (every Avg at a power-of-two N, and PreMulSum's short scalars), zero,
/// infinity, NaN, and scalars with significand bits (rounded to the type).
fn scalars16() -> Vec<f64> {
    let mut s: Vec<f64> = [-24, -14, -8, -2, -1, 0, 1, 3, 9, 15, 40, 120, -126, -133]
        .into_iter()
        .map(|e| 2f64.powi(e))
        .collect();
    s.extend([-0.5, 0.0, -0.0, f64::INFINITY, f64::NAN]);
    s.extend([0.3, 1.0 / 3.0, 0.75, -1.7, 1.5, 1e-3, 3e4, 7e-40]);
    s
}

/// Accumulators for the 16-bit block tests: every class of value (zeros,
/// subnormals, the extremes, infinities, NaN) and a spread of bit patterns.
fn accumulators16() -> Vec<u16> {
    let mut a = vec![
        0x0000, 0x8000, 0x0001, 0x8001, 0x03FF, 0x0400, 0x007F, 0x0080, 0x7BFF, 0xFBFF, 0x7C00,
        0xFC00, 0x7F7F, 0xFF7F, 0x7F80, 0xFF80, 0x7E00, 0x7FC0, 0x3C00, 0xBC00, 0x3F80, 0xBF80,
    ];
    let mut next = splitmix(17);
    a.extend((0..26).map(|_| next() as u16));
    a
}

/// Every 16-bit pattern, in an order that depends on `k` (so two inputs
/// pair each value with many others across calls).
fn every16(k: u64) -> impl Iterator<Item = u16> {
    // an odd multiplier permutes the 2^16 patterns
    let m = (2 * (k.wrapping_mul(0x9E37_79B9) % 30_000) + 1) as u32;
    (0..1u32 << 16).map(move |i| (i.wrapping_mul(m).wrapping_add(k as u32 * 7919)) as u16)
}

/// The vector loops of the op `OP` against its element function: `a ⊕ x`
/// and `x ⊕ y` for every x of `all`, y of `other`.
fn combine_all_match<T: Exact, const OP: Combine>(
    acc: &[T],
    all: &[T],
    other: &[T],
    out: &mut [T],
) {
    let eq = |got: T, want: T| same(got.to_f64(), want.to_f64());
    for (first, second) in [(acc, all), (all, other)] {
        T::combine_all::<true, OP>(out, 2, |s| if s == 0 { first } else { second });
        for (i, y) in out.iter().enumerate() {
            let want = combine::<T, OP>(first[i], second[i]);
            assert!(
                eq(*y, want),
                "{} {}: {:?} ⊕ {:?} gives {y:?}, want {want:?}",
                T::DTYPE,
                ["Sum", "Prod", "Max", "Min"][OP as usize],
                first[i],
                second[i]
            );
        }
    }
}

/// The 16-bit block kernels of x86-64-v3 (Sum, the first fused pair, the
/// fused step) against the portable element functions (held to the exact
/// reference by the tests above), on every value of the type as `x` and
/// a spread of accumulators and scalars: bit for bit, NaN aside.
fn blocks16_match_the_element_steps<T: Exact>() {
    if !Isa::X86V3.available() {
        eprintln!(
            "SKIPPED: {} blocks: this CPU lacks AVX2, FMA or F16C",
            T::DTYPE
        );
        return;
    }
    let eq = |got: T, want: T| same(got.to_f64(), want.to_f64());
    let all: Vec<T> = every16(0).map(|b| T::from_bits64(b.into())).collect();
    let mut out = vec![T::default(); all.len()];
    for (k, &a) in accumulators16().iter().enumerate() {
        let a = T::from_bits64(a.into());
        let acc: Vec<T> = vec![a; all.len()];
        let other: Vec<T> = every16(k as u64 + 1)
            .map(|b| T::from_bits64(b.into()))
            .collect();
        // Sum, Prod, Max, Min: acc ⊕ x, and x ⊕ a permutation of x
        combine_all_match::<T, ADD>(&acc, &all, &other, &mut out);
        combine_all_match::<T, MUL>(&acc, &all, &other, &mut out);
        combine_all_match::<T, MAX>(&acc, &all, &other, &mut out);
        combine_all_match::<T, MIN>(&acc, &all, &other, &mut out);
        for s in scalars16() {
            let s = T::from_f64(s);
            out.copy_from_slice(&acc);
            T::premul_add_all::<true>(&mut out, &all, s);
            for (i, y) in out.iter().enumerate() {
                let want = T::premul_add(a, all[i], s);
                assert!(
                    eq(*y, want),
                    "{} {a:?} + {:?}·{s:?}: {y:?}, want {want:?}",
                    T::DTYPE,
                    all[i]
                );
            }
            T::premul_two_all::<true>(&mut out, &other, &all, s);
            for (i, y) in out.iter().enumerate() {
                let want = T::premul_add(T::mul(other[i], s), all[i], s);
                assert!(
                    eq(*y, want),
                    "{} {:?}·{s:?} + {:?}·{s:?}: {y:?}, want {want:?}",
                    T::DTYPE,
                    other[i],
                    all[i]
                );
            }
        }
    }
}

#[test]
fn half_blocks_match_the_element_steps_on_every_value() {
    blocks16_match_the_element_steps::<f16>();
}

#[test]
fn bfloat16_blocks_match_the_element_steps_on_every_value() {
    blocks16_match_the_element_steps::<bf16>();
}
