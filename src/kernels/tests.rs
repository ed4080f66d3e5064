//! The kernels against their definitions: integer semantics written out,
//! and every float step and whole reduction against [`super::exact`], an
//! exact reference that shares no code with the kernels, over the whole
//! range of each type (NaN, infinities, zeros, subnormals) and on values
//! built to land on and next to rounding ties.

use super::exact::{self, Format};
use super::*;
use crate::core::{F8E4M3, F8E5M2, RedOp};
use half::{bf16, f16};
use proptest::prelude::*;

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
/// from the arithmetic: (acc, x, s, rounded once).
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

#[test]
fn dispatch_macro_binds_the_type() {
    for dt in crate::core::DataType::ALL {
        let size = with_element_type!(dt, T => std::mem::size_of::<T>());
        assert_eq!(size, dt.size());
    }
}

/// The float types the exact reference covers, by format and bits.
trait Exact: Arith {
    const FORMAT: Format;
    fn from_bits64(bits: u64) -> Self;
    fn to_bits64(self) -> u64;
}
impl Exact for f16 {
    const FORMAT: Format = exact::HALF;
    fn from_bits64(bits: u64) -> Self {
        f16::from_bits(bits as u16)
    }
    fn to_bits64(self) -> u64 {
        self.to_bits().into()
    }
}
impl Exact for bf16 {
    const FORMAT: Format = exact::BFLOAT16;
    fn from_bits64(bits: u64) -> Self {
        bf16::from_bits(bits as u16)
    }
    fn to_bits64(self) -> u64 {
        self.to_bits().into()
    }
}
impl Exact for f32 {
    const FORMAT: Format = exact::FLOAT;
    fn from_bits64(bits: u64) -> Self {
        f32::from_bits(bits as u32)
    }
    fn to_bits64(self) -> u64 {
        self.to_bits().into()
    }
}
impl Exact for f64 {
    const FORMAT: Format = exact::DOUBLE;
    fn from_bits64(bits: u64) -> Self {
        f64::from_bits(bits)
    }
    fn to_bits64(self) -> u64 {
        self.to_bits()
    }
}

/// Equal bits, or both NaN (a NaN's payload is not part of the contract).
fn same(got: f64, want: f64) -> bool {
    got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan())
}

/// `v` as a value of T when it is one exactly.
fn exactly<T: Exact>(v: f64) -> Option<T> {
    let t = T::from_f64(v);
    (v.is_finite() && t.to_f64() == v).then_some(t)
}

/// Operands `(a, x, s)` such that `a + x·s` lies on a midpoint between two
/// neighbours of T (`nudge` 0), or one unit of x's last place beside it:
/// `a` from `bits`, the offset an odd multiple of half of a's spacing, `s`
/// a power of two or 3. `None` where the construction leaves T's range.
fn near_tie<T: Exact>(bits: u64, k: u64, j: i32, nudge: i64) -> Option<(T, T, T)> {
    let a = T::from_bits64(bits);
    let av = a.to_f64();
    if !av.is_finite() || av == 0.0 {
        return None;
    }
    let f = T::FORMAT;
    let p = f.precision as i32;
    let top = av.abs().log2().floor() as i32;
    let spacing = (top - (p - 1)).max(f.min_exp - (p - 1));
    let sign = if k & 1 == 0 { 1.0 } else { -1.0 };
    let offset = sign * (2 * (k % 7) + 1) as f64 * 2f64.powi(spacing - 1);
    let s = if j == 0 { 3.0 } else { 2f64.powi(j) };
    let x: T = exactly(offset / s).or_else(|| (j == 0).then(|| T::from_f64(offset / s)))?;
    // one unit of x's last place up or down: its bits' neighbour
    let x = T::from_bits64(x.to_bits64().wrapping_add_signed(nudge));
    Some((a, x, exactly(s)?))
}

/// One step of each kind on T against the exact reference.
fn check_steps<T: Exact>(a: T, x: T, s: T) -> Result<(), TestCaseError> {
    let f = T::FORMAT;
    let (av, xv, sv) = (a.to_f64(), x.to_f64(), s.to_f64());
    let fused = T::premul_add(a, x, s).to_f64();
    let want = exact::fma(f, av, xv, sv);
    prop_assert!(
        same(fused, want),
        "{}: {av:e} + {xv:e}·{sv:e}: {fused:e}, want {want:e}",
        T::DTYPE
    );
    let sum = T::add(a, x).to_f64();
    let want = exact::add(f, av, xv);
    prop_assert!(
        same(sum, want),
        "{}: {av:e} + {xv:e}: {sum:e}, want {want:e}",
        T::DTYPE
    );
    let prod = T::mul(x, s).to_f64();
    let want = exact::mul(f, xv, sv);
    prop_assert!(
        same(prod, want),
        "{}: {xv:e}·{sv:e}: {prod:e}, want {want:e}",
        T::DTYPE
    );
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, ..ProptestConfig::default() })]

    /// Any bit patterns: NaN, infinities, zeros and subnormals come up.
    #[test]
    fn steps_round_once_over_the_whole_range(a: u64, x: u64, s: u64) {
        check_steps(f16::from_bits64(a), f16::from_bits64(x), f16::from_bits64(s))?;
        check_steps(bf16::from_bits64(a), bf16::from_bits64(x), bf16::from_bits64(s))?;
        check_steps(f32::from_bits64(a), f32::from_bits64(x), f32::from_bits64(s))?;
        check_steps(f64::from_bits64(a), f64::from_bits64(x), f64::from_bits64(s))?;
    }

    /// Sums that land on a tie, and one unit beside it.
    #[test]
    fn steps_round_ties_to_even(a: u64, k: u64, j in -3i32..4, nudge in -1i64..=1) {
        if let Some((a, x, s)) = near_tie::<f16>(a, k, j, nudge) { check_steps(a, x, s)?; }
        if let Some((a, x, s)) = near_tie::<bf16>(a, k, j, nudge) { check_steps(a, x, s)?; }
        if let Some((a, x, s)) = near_tie::<f32>(a, k, j, nudge) { check_steps(a, x, s)?; }
        if let Some((a, x, s)) = near_tie::<f64>(a, k, j, nudge) { check_steps(a, x, s)?; }
    }
}

/// Inputs for whole reductions: any bit pattern one time in four, else
/// `±m·2^e` with e in -6..6, whose sums carry and cancel.
fn input<T: Exact>(bits: u64) -> T {
    if bits % 4 == 0 {
        return T::from_bits64(bits >> 2);
    }
    let m = 1.0 + (bits >> 12) as f64 / 2f64.powi(52);
    let e = (bits >> 3) as i32 % 13 - 6;
    let sign = if bits & 4 != 0 { -1.0 } else { 1.0 };
    T::from_f64(sign * m * 2f64.powi(e))
}

/// The reduction of `xs` (one element per rank) with `op` on T, step by
/// step as NCCL lowers it, each step rounded once by the reference.
fn reference<T: Exact>(op: RedOp, xs: &[T]) -> f64 {
    let f = T::FORMAT;
    let v: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
    let scalar = match op {
        RedOp::Avg => Some(T::from_f64(1.0 / xs.len() as f64).to_f64()),
        RedOp::PreMulSum(s) => Some(T::from_f64(s).to_f64()),
        _ => None,
    };
    if let Some(s) = scalar {
        let first = exact::mul(f, v[0], s);
        return v[1..]
            .iter()
            .fold(first, |acc, x| exact::fma(f, acc, *x, s));
    }
    v[1..].iter().fold(v[0], |acc, &x| match op {
        RedOp::Sum => exact::add(f, acc, x),
        RedOp::Prod => exact::mul(f, acc, x),
        RedOp::Max => acc.max(x),
        RedOp::Min => acc.min(x),
        _ => unreachable!("pre-multiplied ops return above"),
    })
}

/// Every float op on 1 to 6 ranks, element by element against the
/// reference (Max and Min: equal values, either zero for a zero).
fn whole<T: Exact>(next: &mut dyn FnMut() -> u64) {
    for n in 1..=6 {
        let inputs: Vec<Vec<T>> = (0..n)
            .map(|_| (0..300).map(|_| input(next())).collect())
            .collect();
        for op in [
            RedOp::Sum,
            RedOp::Prod,
            RedOp::Max,
            RedOp::Min,
            RedOp::Avg,
            RedOp::PreMulSum(0.3),
            RedOp::PreMulSum(-1.7),
        ] {
            let got = run(op, &inputs);
            for (i, y) in got.iter().enumerate() {
                let xs: Vec<T> = inputs.iter().map(|x| x[i]).collect();
                let want = reference(op, &xs);
                let y = y.to_f64();
                let ok = match op {
                    RedOp::Max | RedOp::Min => y == want || (y.is_nan() && want.is_nan()),
                    _ => same(y, want),
                };
                assert!(
                    ok,
                    "{} {op} N={n} element {i}: {y:e}, want {want:e}",
                    T::DTYPE
                );
            }
        }
    }
}

fn splitmix(mut seed: u64) -> impl FnMut() -> u64 {
    move || {
        seed = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = seed;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

#[test]
fn whole_float_reductions_match_the_exact_reference() {
    let mut next = splitmix(3);
    whole::<f16>(&mut next);
    whole::<bf16>(&mut next);
    whole::<f32>(&mut next);
    whole::<f64>(&mut next);
}

/// fp8 products and sums are exact in f64, so the reference rounds those
/// with the type's own conversion, step by step: the product first, then
/// the sum, for Avg and PreMulSum.
#[test]
fn whole_fp8_reductions_round_every_step() {
    fn fp8<T: Arith>(next: &mut dyn FnMut() -> u64, from_bits: fn(u8) -> T) {
        let rnd = |v: f64| T::from_f64(v).to_f64();
        for n in 1..=5 {
            let inputs: Vec<Vec<T>> = (0..n)
                .map(|_| (0..256).map(|_| from_bits(next() as u8)).collect())
                .collect();
            for op in [RedOp::Sum, RedOp::Prod, RedOp::Avg, RedOp::PreMulSum(0.3)] {
                let got = run(op, &inputs);
                let s = match op {
                    RedOp::Avg => rnd(1.0 / n as f64),
                    RedOp::PreMulSum(s) => rnd(s),
                    _ => 1.0,
                };
                for (i, y) in got.iter().enumerate() {
                    let v: Vec<f64> = inputs.iter().map(|x| x[i].to_f64()).collect();
                    let want = match op {
                        RedOp::Sum => v[1..].iter().fold(v[0], |a, x| rnd(a + x)),
                        RedOp::Prod => v[1..].iter().fold(v[0], |a, x| rnd(a * x)),
                        _ => v[1..]
                            .iter()
                            .fold(rnd(v[0] * s), |a, x| rnd(a + rnd(x * s))),
                    };
                    let y = y.to_f64();
                    assert!(
                        same(y, want),
                        "{} {op} N={n} element {i}: {y:e}, want {want:e}",
                        T::DTYPE
                    );
                }
            }
        }
    }
    let mut next = splitmix(5);
    fp8::<F8E4M3>(&mut next, F8E4M3);
    fp8::<F8E5M2>(&mut next, F8E5M2);
}
