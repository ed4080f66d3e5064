//! The reduction kernels every engine computes with, held to the suites'
//! independent reference (`verify::reference`: exact arithmetic rounded
//! once): every fused multiply-add step of Avg and PreMulSum, and whole
//! reductions over 2 to 6 ranks, element by element.

use half::{bf16, f16};
use rankwise::core::{DataType, F8E4M3, F8E5M2, RedOp, Scalar};
use rankwise::kernels::{Arith, reduce_into};
use rankwise_cli::verify::reference;

fn run<T: Arith>(op: RedOp, inputs: &[Vec<T>]) -> Vec<T> {
    let mut acc = inputs[0].clone();
    reduce_into(&mut acc, op, inputs.len(), |s| &inputs[s]);
    acc
}

/// Every fused step against `verify::reference::fused_step` (exact
/// integer arithmetic rounded once), on random values of each type over
/// its whole range; and whole Avg and PreMulSum reductions on 2 to 6
/// ranks against `verify::reference::reduce`, element by element.
#[test]
fn premul_sums_match_the_reference() {
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
