//! The kernels against their definitions: integer semantics written out,
//! and every float step and whole reduction against [`super::exact`], an
//! exact reference that shares no code with the kernels, over the whole
//! range of each type (NaN, infinities, zeros, subnormals) and on values
//! built to land on and next to rounding ties.

use super::exact::{self, Format};
use super::*;
use crate::core::Element;
use crate::core::{F8E4M3, F8E5M2, RedOp};
use half::{bf16, f16};
use proptest::prelude::*;

/// The reduction of `inputs` (rank s's at `inputs[s]`) on every instruction
/// set this CPU has, which must agree element for element (a NaN's payload
/// aside); the detected one's result.
fn run<T: Arith>(op: RedOp, inputs: &[Vec<T>]) -> Vec<T> {
    let on = |isa: Isa| {
        let mut acc = inputs[0].clone();
        reduce_into_on(isa, &mut acc, op, inputs.len(), |s| &inputs[s]);
        acc
    };
    let best = on(Isa::detected());
    for isa in Isa::all_available() {
        let other = on(isa);
        for (i, (a, b)) in best.iter().zip(&other).enumerate() {
            let bits = |v: &T| crate::core::bytes::of(std::slice::from_ref(v)).to_vec();
            let nan = T::DTYPE.is_float() && a.to_f64().is_nan() && b.to_f64().is_nan();
            assert!(
                bits(a) == bits(b) || nan,
                "{} {op}: element {i} is {a:?} on {:?} but {b:?} on {isa:?}",
                T::DTYPE,
                Isa::detected()
            );
        }
    }
    best
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

/// 8-bit Avg against integer division for every wrapped sum and every N
/// up to 300 (past the 256 at which the kernel caps N): one vector per N
/// whose elements are every value of the type, rank 0 holding them and
/// the other ranks zero.
#[test]
fn integer_avg_of_8_bit_sums_is_exact_for_every_sum_and_n() {
    for n in 1..=300usize {
        let mut i: Vec<Vec<i8>> = vec![vec![0; 256]; n];
        let mut u: Vec<Vec<u8>> = vec![vec![0; 256]; n];
        for v in 0..256 {
            i[0][v] = v as u8 as i8;
            u[0][v] = v as u8;
        }
        let (got_i, got_u) = (run(RedOp::Avg, &i), run(RedOp::Avg, &u));
        for v in 0..256 {
            let (a, b) = (v as u8 as i8, v as u8);
            assert_eq!(got_i[v] as i32, a as i32 / n as i32, "int8 {a} / {n}");
            assert_eq!(got_u[v] as u32, b as u32 / n as u32, "uint8 {b} / {n}");
        }
    }
}

/// 32-bit Avg against integer division, on vectors long enough for the
/// vector loop: sums at and near the type's ends, quotients just below
/// and on an integer, and communicator sizes up to 1000.
#[test]
fn integer_avg_of_32_bit_sums_truncates_like_integer_division() {
    let specials_i = [i32::MIN, i32::MIN + 1, -1, 0, 1, i32::MAX - 1, i32::MAX];
    let specials_u = [0u32, 1, 2, u32::MAX / 2, u32::MAX - 1, u32::MAX];
    for n in [2usize, 3, 7, 13, 64, 1000] {
        let len = 70;
        // rank 0 holds the values of interest, the others small ones whose
        // sum the element's index and N pick: sums land on multiples of N
        // and one off them
        let i: Vec<Vec<i32>> = (0..n)
            .map(|s| {
                (0..len)
                    .map(|e| match s {
                        0 => specials_i[e % specials_i.len()].wrapping_sub((e / 7) as i32),
                        _ => (e as i32 % 5) - 2,
                    })
                    .collect()
            })
            .collect();
        let u: Vec<Vec<u32>> = (0..n)
            .map(|s| {
                (0..len)
                    .map(|e| match s {
                        0 => specials_u[e % specials_u.len()].wrapping_sub((e / 6) as u32),
                        _ => e as u32 % 3,
                    })
                    .collect()
            })
            .collect();
        let got_i = run(RedOp::Avg, &i);
        let got_u = run(RedOp::Avg, &u);
        for e in 0..len {
            let sum_i = (0..n).fold(0i32, |a, s| a.wrapping_add(i[s][e]));
            let sum_u = (0..n).fold(0u32, |a, s| a.wrapping_add(u[s][e]));
            assert_eq!(
                got_i[e],
                sum_i / n as i32,
                "int32, N = {n}, element {e}, sum {sum_i}"
            );
            assert_eq!(
                got_u[e],
                sum_u / n as u32,
                "uint32, N = {n}, element {e}, sum {sum_u}"
            );
        }
    }
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
    // half of the accumulators of moderate size, where every product of
    // the construction stays in range
    let a = if bits >> 63 == 0 {
        T::from_bits64(bits)
    } else {
        let m = 1.0 + (bits & 0xFFFF_FFFF) as f64 / 2f64.powi(32);
        let e = ((bits >> 32) % 41) as i32 - 20;
        T::from_f64(if bits & 1 << 40 == 0 { m } else { -m } * 2f64.powi(e))
    };
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

/// Two-rank PreMulSum on every instruction set, blocks long enough for
/// every vector width: `rnd(x0·s)`, then the fused step with `x1`, lane by
/// lane against the reference.
fn check_folds<T: Exact>(x0: &[T], x1: &[T], s: f64) -> Result<(), TestCaseError> {
    let f = T::FORMAT;
    let op = RedOp::PreMulSum(s);
    let s = T::from_f64(s).to_f64();
    for isa in Isa::all_available() {
        let mut acc = x0.to_vec();
        reduce_into_on(isa, &mut acc, op, 2, |r| if r == 0 { x0 } else { x1 });
        for (i, y) in acc.iter().enumerate() {
            let (a, x) = (x0[i].to_f64(), x1[i].to_f64());
            let want = exact::fma(f, exact::mul(f, a, s), x, s);
            let y = y.to_f64();
            prop_assert!(
                same(y, want),
                "{} on {isa:?}, lane {i}: {a:e}·{s:e} then + {x:e}·{s:e}: {y:e}, want {want:e}",
                T::DTYPE
            );
        }
    }
    Ok(())
}

/// [`check_folds`] on lanes whose second step lands on or beside a tie
/// ([`near_tie`], the first input `a / s`); lanes the construction cannot
/// build keep raw bits.
fn check_tie_folds<T: Exact>(lanes: &[(u64, u64, i64)], j: i32) -> Result<(), TestCaseError> {
    let s = if j == 0 { 3.0 } else { 2f64.powi(j) };
    let (x0, x1): (Vec<T>, Vec<T>) = lanes
        .iter()
        .map(|&(bits, k, nudge)| match near_tie::<T>(bits, k, j, nudge) {
            Some((a, x, _)) => (T::from_f64(a.to_f64() / s), x),
            None => (T::from_bits64(bits), T::from_bits64(k)),
        })
        .unzip();
    check_folds(&x0, &x1, s)
}

/// Operands whose product lies a hair below half the spacing of the
/// accumulator's values: `x·s = 2^e·(1 − k²·2^-2(p−1))` with
/// `x = ±(1 + k·2^-(p−1))·2^ex`, `s = (1 − k·2^-(p−1))·2^es`, and the
/// accumulator in the binade where its spacing is `2^(e+1)`, so
/// `a + x·s` sits just beside a midpoint, closer than a wider type's
/// precision can tell: rounding it there first, then to T, rounds twice.
fn product_near_half_spacing<T: Exact>(bits: u64, es: i32) -> (T, T, T) {
    let f = T::FORMAT;
    let p = f.precision as i32;
    let eps = 2f64.powi(-(p - 1));
    let k = (bits % 5 + 1) as f64;
    let ex = (bits >> 3) as i32 % 9 - 4;
    let x = (1.0 + k * eps) * 2f64.powi(ex);
    let s = (1.0 - k * eps) * 2f64.powi(es);
    // a in [2^(e+p), 2^(e+p+1)), e = ex + es: its spacing is 2^(e+1)
    let top = ex + es + p;
    let frac = ((bits >> 8) % (1 << (p - 1).min(40))) as f64 / 2f64.powi((p - 1).min(40));
    let a = (1.0 + frac) * 2f64.powi(top);
    let sign = |bit: u64| if bits >> bit & 1 == 0 { 1.0 } else { -1.0 };
    (
        T::from_f64(sign(60) * a),
        T::from_f64(sign(61) * x),
        T::from_f64(s),
    )
}

/// [`check_folds`] on lanes of [`product_near_half_spacing`], one scalar
/// for all: the first input `a / s`, rounded, keeps the accumulator in the
/// binade the construction needs (or close, which is still a valid case).
fn check_half_spacing_folds<T: Exact>(lanes: &[u64], es: i32) -> Result<(), TestCaseError> {
    let (_, _, s) = product_near_half_spacing::<T>(0, es);
    let s = s.to_f64();
    let (x0, x1): (Vec<T>, Vec<T>) = lanes
        .iter()
        .map(|&bits| {
            let (a, x, _) = product_near_half_spacing::<T>(bits, es);
            (T::from_f64(a.to_f64() / s), x)
        })
        .unzip();
    check_folds(&x0, &x1, s)
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

    /// Sums just beside a tie, closer than the wider type's precision.
    #[test]
    fn steps_round_once_beside_ties(bits: u64, es in -6i32..-1) {
        let (a, x, s) = product_near_half_spacing::<f16>(bits, es);
        check_steps(a, x, s)?;
        let (a, x, s) = product_near_half_spacing::<bf16>(bits, es);
        check_steps(a, x, s)?;
        let (a, x, s) = product_near_half_spacing::<f32>(bits, es);
        check_steps(a, x, s)?;
        let (a, x, s) = product_near_half_spacing::<f64>(bits, es);
        check_steps(a, x, s)?;
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

proptest! {
    #![proptest_config(ProptestConfig { cases: 1000, ..ProptestConfig::default() })]

    /// The fast paths against the reference on any bit patterns, and on
    /// moderate values whose every product is exact in f32 (bfloat16's
    /// fast block path takes only those).
    #[test]
    fn fused_folds_round_once_on_every_instruction_set(
        x0 in prop::collection::vec(any::<u64>(), 67),
        x1 in prop::collection::vec(any::<u64>(), 67),
        s: u64,
        moderate: bool,
    ) {
        fn lanes<T: Exact>(bits: &[u64], moderate: bool) -> Vec<T> {
            bits.iter().map(|&b| if moderate { input(b | 1) } else { T::from_bits64(b) }).collect()
        }
        let scalar = |bits: u64, f: fn(u64) -> f64| if moderate { 0.3 + (bits % 1000) as f64 / 300.0 } else { f(bits) };
        check_folds::<f16>(&lanes(&x0, moderate), &lanes(&x1, moderate), scalar(s, |b| f16::from_bits64(b).to_f64()))?;
        check_folds::<bf16>(&lanes(&x0, moderate), &lanes(&x1, moderate), scalar(s, |b| bf16::from_bits64(b).to_f64()))?;
        check_folds::<f32>(&lanes(&x0, moderate), &lanes(&x1, moderate), scalar(s, |b| f32::from_bits64(b).to_f64()))?;
        check_folds::<f64>(&lanes(&x0, moderate), &lanes(&x1, moderate), scalar(s, |b| f64::from_bits64(b).to_f64()))?;
    }

    /// The fast paths on blocks of lanes just beside ties.
    #[test]
    fn fused_folds_round_once_beside_ties_on_every_instruction_set(
        lanes in prop::collection::vec(any::<u64>(), 67),
        es in -6i32..-1,
    ) {
        check_half_spacing_folds::<f16>(&lanes, es)?;
        check_half_spacing_folds::<bf16>(&lanes, es)?;
        check_half_spacing_folds::<f32>(&lanes, es)?;
        check_half_spacing_folds::<f64>(&lanes, es)?;
    }

    /// The fast paths on blocks of lanes that land on or beside ties.
    #[test]
    fn fused_folds_round_ties_to_even_on_every_instruction_set(
        lanes in prop::collection::vec((any::<u64>(), any::<u64>(), -1i64..=1), 67),
        j in -3i32..4,
    ) {
        check_tie_folds::<f16>(&lanes, j)?;
        check_tie_folds::<bf16>(&lanes, j)?;
        check_tie_folds::<f32>(&lanes, j)?;
        check_tie_folds::<f64>(&lanes, j)?;
    }
}

/// Inputs for whole reductions: any bit pattern one time in four, else
/// `±m·2^e` with e in -6..6, whose sums carry and cancel.
fn input<T: Exact>(bits: u64) -> T {
    if bits.is_multiple_of(4) {
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

/// The first element where the kernels' `op` over `inputs` (one vector
/// per rank) is not [`reference`]'s, worded; None when all are. Max and
/// Min may give either zero for a zero.
fn first_wrong<T: Exact>(op: RedOp, inputs: &[Vec<T>]) -> Option<String> {
    let got = run(op, inputs);
    got.iter().enumerate().find_map(|(i, y)| {
        let xs: Vec<T> = inputs.iter().map(|x| x[i]).collect();
        let want = reference(op, &xs);
        let v = y.to_f64();
        let ok = match op {
            RedOp::Max | RedOp::Min => v == want || (v.is_nan() && want.is_nan()),
            _ => same(v, want),
        };
        (!ok).then(|| {
            format!(
                "{} {op} N={} element {i}: inputs {xs:?}: {y:?}, want {want:e}",
                T::DTYPE,
                inputs.len()
            )
        })
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
            if let Some(wrong) = first_wrong(op, &inputs) {
                panic!("{wrong}");
            }
        }
    }
}

/// The first pair of Avg and PreMulSum with a power-of-two scalar, whose
/// 16-bit blocks skip rounding `x0·s` where the product is already a value
/// of the type: chunks of 16 all of ordinary values, chunks where one lane's
/// product falls below the normals (`tiny`, the type's least subnormal,
/// times odd numbers) and has to round, and zeros, infinities and NaN.
fn first_pair_rounds_only_where_needed<T: Exact>(tiny: f64) {
    let mut next = splitmix(29);
    let odd = [3.0, 5.0, -7.0, 1.0, -9.0, 1023.0];
    let specials = [0.0, -0.0, f64::INFINITY, f64::NEG_INFINITY, f64::NAN];
    let x0: Vec<T> = (0..16 * 8)
        .map(|i| {
            let (chunk, lane) = (i / 16, i % 16);
            match chunk {
                1 | 3 if lane == chunk * 2 => T::from_f64(odd[chunk % 6] * tiny),
                5 => T::from_f64(odd[lane % 6] * tiny * if lane < 8 { 1.0 } else { 64.0 }),
                6 => T::from_f64(specials[lane % 5]),
                _ => input(next() | 1),
            }
        })
        .collect();
    for n in [2, 3, 4] {
        let mut inputs = vec![x0.clone()];
        inputs.extend((1..n).map(|_| (0..x0.len()).map(|_| input(next() | 1)).collect()));
        let ops = [0.5, -0.25, 1.0, 4.0, 0.0].map(RedOp::PreMulSum);
        for op in std::iter::once(RedOp::Avg).chain(ops) {
            if let Some(wrong) = first_wrong(op, &inputs) {
                panic!("{wrong}");
            }
        }
    }
}

#[test]
fn sixteen_bit_first_pairs_round_only_where_needed() {
    first_pair_rounds_only_where_needed::<f16>(2f64.powi(-24));
    first_pair_rounds_only_where_needed::<bf16>(2f64.powi(-133));
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

/// Avg and PreMulSum through many blocks, as the local engine reduces a
/// large call (the scalar prepared once for all of them, each block
/// reduced from its own elements of every input and emitted where it
/// starts, in any order), give what one pass over the whole vectors gives,
/// which the tests above hold to the reference: on every instruction set,
/// N = 1 to 5, blocks that are and are not whole vectors of the kernels,
/// values with zeros, infinities, NaN and tiny ones among them.
#[test]
fn premultiplied_sums_through_blocks_match_one_pass() {
    fn check<T: Arith>(next: &mut dyn FnMut() -> u64) {
        let value = |bits: u64| match bits % 16 {
            0 => f64::NAN,
            1 => f64::INFINITY,
            2 => -0.0,
            3 => ((bits >> 8) % 7) as f64 * 2f64.powi(-20),
            _ => {
                let sign = if bits & 16 != 0 { -1.0 } else { 1.0 };
                sign * (1.0 + ((bits >> 8) % 64) as f64 / 64.0)
                    * 2f64.powi((bits >> 20) as i32 % 17 - 8)
            }
        };
        for per_block in [48, 256] {
            let order = [3, 0, 6, 1, 5, 2, 4];
            let len = per_block * order.len();
            for n in 1..=5 {
                let inputs: Vec<Vec<T>> = (0..n)
                    .map(|_| (0..len).map(|_| T::from_f64(value(next()))).collect())
                    .collect();
                let ops = [-1.7, 0.3, 0.5].map(RedOp::PreMulSum);
                for op in std::iter::once(RedOp::Avg).chain(ops) {
                    for isa in Isa::all_available() {
                        let mut whole = vec![T::default(); len];
                        reduce_into_on(isa, &mut whole, op, n, |s| &inputs[s]);
                        let mut out = vec![T::default(); len];
                        let mut block = vec![T::default(); per_block];
                        reduce_blocks_on(
                            isa,
                            &mut block,
                            order.iter().map(|b| b * per_block),
                            op,
                            n,
                            |s, at| &inputs[s][at..at + per_block],
                            |at, b| out[at..at + per_block].copy_from_slice(b),
                        );
                        for (i, (b, w)) in out.iter().zip(&whole).enumerate() {
                            let (b, w) = (b.to_f64(), w.to_f64());
                            assert!(
                                same(b, w),
                                "{} {op} N={n} {isa:?} blocks of {per_block}, element {i}: {b:e}, \
                                 one pass {w:e}",
                                T::DTYPE
                            );
                        }
                    }
                }
            }
        }
    }
    let mut next = splitmix(41);
    check::<f16>(&mut next);
    check::<bf16>(&mut next);
    check::<f32>(&mut next);
    check::<f64>(&mut next);
    check::<F8E4M3>(&mut next);
    check::<F8E5M2>(&mut next);
}

mod sixteen;
// the vector code's own tests
#[cfg(x86_simd)]
mod blocks16;
#[cfg(x86_simd)]
mod eight;
