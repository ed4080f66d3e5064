//! The fp8 block kernels (16 and 32 lanes with AVX2 and F16C) against
//! the element functions on every pair of values of each format, the
//! scaled steps with scalars that round and that do not, and the first
//! pair of a scaled sum with every scalar.

use super::*;
use crate::kernels::arith::{ADD, Combine, MAX, MIN, MUL, combine};

/// Every pair (a, b) of codes, `a` running over `xs` and `b` over `ys`,
/// both 65,536 long (so the vector loops run, with no lanes left over).
fn pairs<T: Arith>(from_bits: fn(u8) -> T) -> (Vec<T>, Vec<T>) {
    (0..=u16::MAX)
        .map(|i| (from_bits((i >> 8) as u8), from_bits(i as u8)))
        .unzip()
}

/// Chains of 2 to 9 inputs, each step rounded: the first two inputs
/// every pair of codes, the others codes that run through every value in
/// other orders; against the element steps.
fn chains_match<T: Arith, const OP: Combine>(xs: &[T], ys: &[T], from_bits: fn(u8) -> T) {
    let more: Vec<Vec<T>> = (0..7u32)
        .map(|k| {
            (0..xs.len())
                .map(|i| from_bits((i as u32).wrapping_mul(2 * k + 3).rotate_right(k + 1) as u8))
                .collect()
        })
        .collect();
    for n in [2, 3, 4, 5, 8, 9] {
        let inputs: Vec<&[T]> = [xs, ys]
            .into_iter()
            .chain(more.iter().map(Vec::as_slice))
            .take(n)
            .collect();
        let mut out = vec![T::default(); xs.len()];
        T::combine_all::<true, OP>(&mut out, n, |s| inputs[s]);
        for (i, y) in out.iter().enumerate() {
            let want = inputs[1..]
                .iter()
                .fold(inputs[0][i], |a, x| combine::<T, OP>(a, x[i]));
            assert!(
                same(y.to_f64(), want.to_f64()),
                "{} {} of {n} at {i}: {:?} gives {y:?}, want {want:?}",
                T::DTYPE,
                ["Sum", "Prod", "Max", "Min"][OP as usize],
                inputs.iter().map(|x| x[i]).collect::<Vec<_>>()
            );
        }
    }
}

fn blocks8_match_the_element_steps<T: Arith>(from_bits: fn(u8) -> T) {
    if !Isa::X86V3.available() {
        eprintln!(
            "SKIPPED: {} blocks: this CPU lacks AVX2, FMA or F16C",
            T::DTYPE
        );
        return;
    }
    let (xs, ys) = pairs(from_bits);
    chains_match::<T, ADD>(&xs, &ys, from_bits);
    chains_match::<T, MUL>(&xs, &ys, from_bits);
    chains_match::<T, MAX>(&xs, &ys, from_bits);
    chains_match::<T, MIN>(&xs, &ys, from_bits);
    // Avg's scalars at N = 2, 3, 4, 5, 8 (1/3 and 1/5 round; the powers of
    // two skip the product's rounding where it is exact), other powers of
    // two, scalars past the largest value and below the smallest, and NaN
    for s in [
        0.5,
        1.0 / 3.0,
        0.25,
        0.2,
        0.125,
        1.0,
        -0.5,
        2.0,
        2f64.powi(-7),
        3.0,
        1e-3,
        1e4,
        -0.75,
        f64::NAN,
    ] {
        let s = T::from_f64(s);
        // both ways round: 16 lanes of 16 x codes in turn, then of one x
        // code (an infinity with no NaN beside it)
        for (accs, xs) in [(&xs, &ys), (&ys, &xs)] {
            let mut out = accs.clone();
            T::premul_add_all::<true>(&mut out, xs, s);
            T::scale_all::<true>(&mut out[..256], &xs[..256], s);
            for (i, y) in out.iter().enumerate() {
                let want = if i < 256 {
                    T::mul(xs[i], s)
                } else {
                    T::premul_add(accs[i], xs[i], s)
                };
                assert!(
                    same(y.to_f64(), want.to_f64()),
                    "{} step with scalar {s:?} at {i}: {:?}, {:?} gives {y:?}, want {want:?}",
                    T::DTYPE,
                    accs[i],
                    xs[i]
                );
            }
        }
    }
}

/// Every scalar code: the first input scaled (`rnd(x·s)`) and the first
/// pair (`rnd(rnd(x0·s) + rnd(x1·s))`) over every pair of codes, which
/// the product tables take where the scalar has them and the widening
/// path elsewhere and in vectors with a NaN or infinite code.
fn first_pairs_match_for_every_scalar<T: Arith>(from_bits: fn(u8) -> T) {
    if !Isa::X86V3.available() {
        eprintln!(
            "SKIPPED: {} first pairs: this CPU lacks AVX2, FMA or F16C",
            T::DTYPE
        );
        return;
    }
    let (xs, ys) = pairs(from_bits);
    let mut out = vec![T::default(); xs.len()];
    for code in 0..=255u8 {
        let s = from_bits(code);
        T::scale_all::<true>(&mut out, &ys, s);
        for (i, y) in out.iter().enumerate().take(256) {
            let want = T::mul(ys[i], s);
            assert!(
                same(y.to_f64(), want.to_f64()),
                "{} {:?} scaled by {s:?} gives {y:?}, want {want:?}",
                T::DTYPE,
                ys[i]
            );
        }
        for (x0, x1) in [(&xs, &ys), (&ys, &xs)] {
            T::premul_two_all::<true>(&mut out, x0, x1, s);
            for (i, y) in out.iter().enumerate() {
                let want = T::premul_add(T::mul(x0[i], s), x1[i], s);
                assert!(
                    same(y.to_f64(), want.to_f64()),
                    "{} first pair {:?}, {:?} with scalar {s:?} gives {y:?}, want {want:?}",
                    T::DTYPE,
                    x0[i],
                    x1[i]
                );
            }
        }
    }
}

#[test]
fn e4m3_first_pairs_match_the_element_steps_for_every_scalar() {
    first_pairs_match_for_every_scalar(F8E4M3);
}

#[test]
fn e5m2_first_pairs_match_the_element_steps_for_every_scalar() {
    first_pairs_match_for_every_scalar(F8E5M2);
}

#[test]
fn e4m3_blocks_match_the_element_steps_on_every_pair() {
    blocks8_match_the_element_steps(F8E4M3);
}

#[test]
fn e5m2_blocks_match_the_element_steps_on_every_pair() {
    blocks8_match_the_element_steps(F8E5M2);
}
