//! The 16-bit fused steps on every instruction set, against the exact
//! reference, on the lanes their fast paths must not get wrong: the f32
//! sum landing on a 16-bit midpoint without being exact, at the edges of
//! the ranges.

use super::*;

/// bfloat16's block path at the edges of f32's range: blocks whose every
/// product is exact in f32, down to 2^-126 and up to the largest float
/// (the f32 path), and the same blocks with one product below or above
/// (the f64 path), all against the reference.
#[test]
fn bfloat16_blocks_at_the_edges_of_f32s_range() {
    let mut next = splitmix(11);
    for edge in [-126i32, 127] {
        for outlier in [None, Some(-140), Some(-127), Some(128), Some(200)] {
            let mut x0 = Vec::new();
            let mut x1 = Vec::new();
            let s = 2f64.powi(if edge < 0 { -70 } else { 70 });
            for lane in 0..67 {
                let b = next();
                let m = 1.0 + (b % 128) as f64 / 128.0;
                // products m·2^e with e from the edge inwards
                let e = if edge < 0 {
                    edge + (b >> 8) as i32 % 4
                } else {
                    edge - (b >> 8) as i32 % 4
                };
                let e = match outlier {
                    Some(o) if lane == 31 => o,
                    _ => e,
                };
                let sign = if b & 1 << 20 == 0 { 1.0 } else { -1.0 };
                x1.push(bf16::from_f64(sign * m * 2f64.powi(e) / s));
                x0.push(bf16::from_f64(input::<f64>(next()) * 2f64.powi(e) / s));
            }
            check_folds(&x0, &x1, s).unwrap();
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// Avg and PreMulSum with a power-of-two scalar (the FMA path of half
    /// and bfloat16, no error term) on 2 and 3 ranks, any bit patterns,
    /// lane by lane against the exact reference.
    #[test]
    fn short_scalar_folds_round_once_on_every_instruction_set(
        x in prop::collection::vec(any::<u64>(), 3 * 67),
        j in -140i32..130,
        negative: bool,
    ) {
        fn check<T: Exact>(x: &[u64], s: f64) -> Result<(), TestCaseError> {
            let op = RedOp::PreMulSum(s);
            let lanes: Vec<T> = x.iter().map(|&b| T::from_bits64(b)).collect();
            for n in [2, 3] {
                let inputs: Vec<Vec<T>> = lanes.chunks(67).take(n).map(|c| c.to_vec()).collect();
                if let Some(wrong) = first_wrong(op, &inputs) {
                    return Err(TestCaseError::fail(wrong));
                }
            }
            Ok(())
        }
        let s = if negative { -1.0 } else { 1.0 } * 2f64.powi(j);
        check::<f16>(&x, s)?;
        check::<bf16>(&x, s)?;
    }
}

/// How many lanes of `check_folds`'s pair a plain f32 sum rounded to the
/// type gets wrong: the lanes that exercise a fast path's midpoint check.
fn plain_f32_misses<T: Exact>(x0: &[T], x1: &[T], s: f64) -> usize {
    let f = T::FORMAT;
    let s = T::from_f64(s).to_f64();
    let rnd = |v: f32| T::from_f64(f64::from(v)).to_f64();
    x0.iter()
        .zip(x1)
        .filter(|(a, x)| {
            let (a, x) = (a.to_f64(), x.to_f64());
            // both products are exact in f32 here; the sum is rounded twice
            let first = rnd((a * s) as f32);
            let plain = rnd(first as f32 + (x * s) as f32);
            !same(plain, exact::fma(f, exact::mul(f, a, s), x, s))
        })
        .count()
}

/// Half with a scalar below 2^-4: `acc + x·s` below half's normals, on a
/// subnormal midpoint in f32 without being exact. `x·s` is
/// 1141·1838 = 2^21 + 6 units: 2^-25 + 3·2^-44, and each `acc` (`x0·s`
/// rounded) lies in [2^-17, 2^-15), where f32's unit is 2^-40 or more, so
/// the f32 sum is `acc + 2^-25`, a midpoint, while the exact sum is above
/// it; on half the lanes ties to even would round down.
#[test]
fn half_sums_below_the_normals_round_once_with_small_scalars() {
    let s = 1838.0 / 1024.0 * 2f64.powi(-12);
    let x1 = f16::from_f64(1141.0 / 1024.0 * 2f64.powi(-14));
    let start = f16::from_f64(2f64.powi(-16) / s).to_bits();
    let x0: Vec<f16> = (start - 40..start + 40).map(f16::from_bits).collect();
    let x1 = vec![x1; x0.len()];
    assert!(
        plain_f32_misses(&x0, &x1, s) >= 20,
        "the lanes lost their ties"
    );
    check_folds(&x0, &x1, s).unwrap();
}

/// bfloat16 with a scalar of significand bits, on products that are
/// themselves midpoints (3·m of 9 significant bits, m odd) and `acc`s of
/// either sign from 12 to 40 binades below them: from 24 binades down the
/// f32 sum is the product alone, a midpoint, while the exact sum is not.
/// The same pairs with the terms swapped (`acc` the larger term) never
/// land on a midpoint inexactly, which the kernel relies on.
#[test]
fn bfloat16_sums_far_from_a_midpoint_product_round_once() {
    let s = 0.75;
    let mut next = splitmix(23);
    let (mut x0, mut x1) = (Vec::new(), Vec::new());
    for m in (129..171).step_by(2) {
        for gap in 12..41 {
            let b = next();
            let sign = if b & 1 == 0 { 1.0 } else { -1.0 };
            let tiny = sign * (1.0 + (b >> 8) as f64 % 128.0 / 128.0) * 2f64.powi(-gap);
            x0.push(bf16::from_f64(tiny));
            x1.push(bf16::from_f64(m as f64 / 128.0));
        }
    }
    assert!(
        plain_f32_misses(&x0, &x1, s) >= 100,
        "the lanes lost their ties"
    );
    check_folds(&x0, &x1, s).unwrap();
    // acc = rnd(x1·s) the larger term, x0·s the smaller
    assert_eq!(plain_f32_misses(&x1, &x0, s), 0);
    check_folds(&x1, &x0, s).unwrap();
}

/// bfloat16 products past f32's range whose sum with `acc` is back in it:
/// `x1·s` rounds to infinity in f32 while the fused step's exact value is
/// finite: such lanes are never inexact on a midpoint and must be left as
/// the FMA rounded them, though many of them land on a midpoint in f32
/// (only scalars above 1 reach past f32's range; `isa/bf16_v3.rs` gives
/// them the step that sets those lanes aside).
#[test]
fn bfloat16_products_past_f32s_range_with_a_finite_sum_round_once() {
    let s = 1.5;
    let (mut x0, mut x1) = (Vec::new(), Vec::new());
    for big in (0x7F34..0x7F7F_u16).step_by(5) {
        let x = bf16::from_bits(big);
        for small in 0x7E80..0x7F80_u16 {
            let a = -bf16::from_bits(small).to_f64();
            let acc = bf16::from_f64(a * s).to_f64();
            let exact = acc + x.to_f64() * s;
            if exact.abs() < f64::from(f32::MAX) && acc.is_finite() {
                x0.push(bf16::from_f64(a));
                x1.push(x);
            }
        }
    }
    let on_midpoint = x0
        .iter()
        .zip(&x1)
        .filter(|(a, x)| {
            let acc = bf16::from_f64(a.to_f64() * s).to_f64() as f32;
            assert!(x.to_f32() * s as f32 == f32::INFINITY);
            x.to_f32().mul_add(s as f32, acc).to_bits() & 0xFFFF == 0x8000
        })
        .count();
    assert!(on_midpoint >= 50, "{on_midpoint} lanes on a midpoint");
    check_folds(&x0, &x1, s).unwrap();
}
