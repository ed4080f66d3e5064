//! The contract's element arithmetic, exact: values rounded to a type,
//! reductions that wrap integers at their width and round floats after
//! every step, and the fused multiply-add step of Avg and PreMulSum,
//! computed in exact integers and rounded once.

use rankwise::core::{DataType, Element, RedOp, Scalar};

/// The largest integer magnitude the type holds exactly, with every smaller
/// integer too (for 64-bit integers, capped at f64's 2^53).
pub fn exact_limit(dt: DataType) -> u64 {
    use DataType::*;
    match dt {
        Int8 => 127,
        Uint8 => 255,
        Int32 => i32::MAX as u64,
        Uint32 => u32::MAX as u64,
        Int64 | Uint64 | Float64 => 1 << 53,
        Float16 => 2048,
        Float32 => 1 << 24,
        Bfloat16 => 256,
        Float8e4m3 => 16,
        Float8e5m2 => 8,
    }
}

pub(super) fn signed(dt: DataType) -> bool {
    !matches!(dt, DataType::Uint8 | DataType::Uint32 | DataType::Uint64)
}

/// Closed-form values (exact in f64 and in `dt`) as elements of `dt`.
pub fn exact(dt: DataType, v: &[f64]) -> Vec<Scalar> {
    v.iter().map(|x| Scalar::from_f64(dt, *x)).collect()
}

/// `v` rounded to `dt` with the type's own conversion (`Element::from_f64`),
/// as an arithmetic result is: fp8 saturates to its largest finite value,
/// infinities included (NCCL converts with `__NV_SATFINITE`).
pub fn round_to(dt: DataType, v: f64) -> f64 {
    rankwise::with_element_type!(dt, T => <T as Element>::from_f64(v).to_f64())
}

/// One output element of a reduction: `xs[s]` is rank s's input element,
/// an element of `dt` (docs/reference/contracts.md §3).
///
/// Integers compute as two's complement at the type's width: Sum, Prod and
/// PreMulSum wrap (the scalar converted to the type first); Avg is the
/// wrapped sum divided by N toward zero, N held as a wide integer, never
/// converted to the type. Floats reduce in rank order, every step rounded
/// to the type. (Each f64 step is exact or rounds once, and f64 carries
/// more than twice the precision of every narrower type, so rounding its
/// result to the type is the type's own correctly rounded arithmetic.)
///
/// Float Avg and PreMulSum are NCCL 2.28's pre-multiplied sum, with the
/// scalar s (1/N for Avg) rounded to the type: `acc = rnd(x_0·s)`, then
/// `acc = rnd(acc + x_s·s)` per rank. For half, float, double and bfloat16
/// that step rounds once, the product unrounded (a fused multiply-add:
/// computed exactly here by [`fused_step`]); for fp8 the product is rounded
/// first, then the sum.
pub fn reduce(op: RedOp, dt: DataType, xs: &[Scalar]) -> Scalar {
    let n = xs.len();
    if !dt.is_float() {
        let wrap = |v: i128| Scalar::Int(v).to_type(dt).to_i128();
        let v: Vec<i128> = xs.iter().map(|x| x.to_i128()).collect();
        // every width divides 128, so wrapping in i128 then to the width is
        // the same as wrapping at the width after every step
        let sum = |v: &[i128]| wrap(v.iter().fold(0i128, |a, x| a.wrapping_add(*x)));
        let r = match op {
            RedOp::Sum => sum(&v),
            RedOp::Prod => wrap(v.iter().fold(1i128, |a, x| a.wrapping_mul(*x))),
            RedOp::Max => v.iter().copied().max().unwrap_or(0),
            RedOp::Min => v.iter().copied().min().unwrap_or(0),
            RedOp::Avg => sum(&v) / (n.max(1) as i128),
            RedOp::PreMulSum(s) => {
                let k = Scalar::Float(s).to_type(dt).to_i128();
                let products: Vec<i128> = v.iter().map(|x| x.wrapping_mul(k)).collect();
                sum(&products)
            }
        };
        return Scalar::Int(r);
    }
    let round = |v: f64| round_to(dt, v);
    let v: Vec<f64> = xs.iter().map(|x| x.to_f64()).collect();
    let Some((&first, rest)) = v.split_first() else {
        // no ranks, no inputs: every caller has at least one rank
        return Scalar::Float(0.0);
    };
    let fold = |f: fn(f64, f64) -> f64| rest.iter().fold(first, |a, x| round(f(a, *x)));
    let fused = fused_format(dt).is_some();
    let scaled = |scalar: f64| {
        let r = round(scalar);
        rest.iter().fold(round(first * r), |acc, x| {
            if fused {
                fused_step(dt, acc, *x, r)
            } else {
                round(acc + round(x * r))
            }
        })
    };
    Scalar::Float(match op {
        RedOp::Sum => fold(|a, b| a + b),
        RedOp::Prod => fold(|a, b| a * b),
        RedOp::Max => fold(f64::max),
        RedOp::Min => fold(f64::min),
        RedOp::Avg => scaled(1.0 / n as f64),
        RedOp::PreMulSum(s) => scaled(s),
    })
}

/// A binary float format: `p` significant bits, smallest quantum 2^qmin
/// (the spacing of its subnormals).
#[derive(Debug, Clone, Copy)]
pub struct Format {
    pub p: u32,
    pub qmin: i32,
}

/// The float types whose pre-multiplied sum NCCL 2.28 fuses, as formats.
pub fn fused_format(dt: DataType) -> Option<Format> {
    match dt {
        DataType::Float16 => Some(Format { p: 11, qmin: -24 }),
        DataType::Bfloat16 => Some(Format { p: 8, qmin: -133 }),
        DataType::Float32 => Some(Format { p: 24, qmin: -149 }),
        DataType::Float64 => Some(Format { p: 53, qmin: -1074 }),
        _ => None,
    }
}

/// A finite f64 as `(negative, m, e)` with value `±m·2^e`, m < 2^53.
fn split_f64(x: f64) -> (bool, u128, i32) {
    let bits = x.to_bits();
    let neg = bits >> 63 == 1;
    let exp = ((bits >> 52) & 0x7FF) as i32;
    let frac = (bits & ((1 << 52) - 1)) as u128;
    if exp == 0 {
        (neg, frac, -1074)
    } else {
        (neg, frac | (1 << 52), exp - 1075)
    }
}

/// `x·2^e` for an x and result that are exact in f64 (two steps, so no
/// power of two on the way under- or overflows).
fn ldexp(x: f64, e: i32) -> f64 {
    let half = e / 2;
    x * 2f64.powi(half) * 2f64.powi(e - half)
}

/// `rnd(acc + x·s)` rounded once to format `f`, from exact integer
/// arithmetic: the product is an exact 106-bit integer times a power of two;
/// the larger of the two terms is placed at the top of a 128-bit window and
/// the other shifted to it, bits shifted out of the window kept as a sticky
/// flag (they are all far below the rounding position); then one rounding
/// to nearest, ties to even, at the format's precision or its subnormal
/// quantum. `acc`, `x`, `s` are values of `dt`, one of the
/// [`fused_format`] types (as f64). Non-finite operands take f64's
/// arithmetic (infinities and NaNs propagate the same).
pub fn fused_step(dt: DataType, acc: f64, x: f64, s: f64) -> f64 {
    let Some(f) = fused_format(dt) else {
        return round_to(dt, acc + round_to(dt, x * s));
    };
    // past the largest finite value: the type's own overflow (the value
    // given is already rounded to the type's precision)
    let dt_round = |v: f64| round_to(dt, v);
    if !(acc.is_finite() && x.is_finite() && s.is_finite()) {
        return dt_round(acc + x * s);
    }
    let (na, ma, ea) = split_f64(acc);
    let (nx, mx, ex) = split_f64(x);
    let (ns, ms, es) = split_f64(s);
    // terms (negative, mantissa, exponent)
    let prod = (nx != ns, mx * ms, ex + es);
    let add = (na, ma, ea);
    let top = |m: u128, e: i32| {
        if m == 0 {
            i32::MIN
        } else {
            e + 127 - m.leading_zeros() as i32
        }
    };
    if prod.1 == 0 && add.1 == 0 {
        // zeros: -0 only when both are -0 (IEEE's sum of zeros)
        return if prod.0 && add.0 { -0.0 } else { 0.0 };
    }
    let (big, small) = if top(prod.1, prod.2) >= top(add.1, add.2) {
        (prod, add)
    } else {
        (add, prod)
    };
    // the big term's leading bit at bit 125: room for a carry
    let lz = big.1.leading_zeros() as i32;
    let up = lz - 2;
    let bm = if up >= 0 { big.1 << up } else { big.1 >> -up };
    let e = big.2 - up;
    // the small term at exponent e: shifted right by d (or left, if its
    // lowest bit is above e, which cannot push it past the big term's top)
    let d = e - small.2;
    let (sm, lost) = if small.1 == 0 {
        (0, false)
    } else if d <= 0 {
        (small.1 << -d, false)
    } else if d >= 128 {
        (0, true)
    } else {
        (small.1 >> d, small.1 & ((1u128 << d) - 1) != 0)
    };
    // (bits are lost only from a term far below the other, so with equal
    // leading positions both are exact and the larger one is found here)
    let (m, sticky, neg) = if big.0 == small.0 {
        (bm + sm, lost, big.0)
    } else if lost {
        // big - (sm + frac), 0 < frac < 1: (big - sm - 1) + (1 - frac)
        (bm - sm - 1, true, big.0)
    } else if sm > bm {
        (sm - bm, false, small.0)
    } else {
        (bm - sm, false, big.0)
    };
    if m == 0 && !sticky {
        // exact cancellation: +0 under round to nearest
        return 0.0;
    }
    let t = 127 - m.leading_zeros() as i32;
    let q = (e + t - (f.p as i32 - 1)).max(f.qmin);
    let shift = q - e;
    let mag = if shift <= 0 {
        // exact at the format's precision (no sticky bits at this height)
        ldexp(m as f64, e)
    } else {
        let (keep, rem) = if shift >= 128 {
            (0u128, m)
        } else {
            (m >> shift, m & ((1u128 << shift) - 1))
        };
        let half = if shift > 128 {
            u128::MAX
        } else {
            1u128 << (shift - 1)
        };
        let above = rem > half || (rem == half && sticky);
        let tie = rem == half && !sticky;
        let keep = if above || (tie && keep & 1 == 1) {
            keep + 1
        } else {
            keep
        };
        ldexp(keep as f64, q)
    };
    dt_round(if neg { -mag } else { mag })
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use rankwise::core::{DataType, RedOp, Scalar};

    #[test]
    fn float_avg_rounds_like_the_type() {
        // N=3: 1/3 rounds; three ones average to 1 only approximately
        let f32_ = DataType::Float32;
        let f = reduce(RedOp::Avg, f32_, &sc(f32_, &[1.0, 1.0, 1.0]));
        let third = (1.0f64 / 3.0) as f32;
        assert_eq!(f, Scalar::Float(f64::from(third + third + third)));
        // N=4: exact
        let f16_ = DataType::Float16;
        assert_eq!(
            reduce(RedOp::Avg, f16_, &sc(f16_, &[1.0, 2.0, 3.0, 6.0])),
            Scalar::Float(3.0)
        );
        // integers: toward zero
        let i32_ = DataType::Int32;
        assert_eq!(
            reduce(RedOp::Avg, i32_, &sc(i32_, &[-3.0, 0.0])),
            Scalar::Int(-1)
        );
    }

    #[test]
    fn integer_reductions_wrap_at_the_type_width() {
        use DataType::*;
        let ints = |v: &[i128]| -> Vec<Scalar> { v.iter().map(|x| Scalar::Int(*x)).collect() };
        // Avg: the sum wrapped to the type, then divided by N toward zero
        assert_eq!(reduce(RedOp::Avg, Int8, &ints(&[1; 200])), Scalar::Int(0));
        assert_eq!(reduce(RedOp::Avg, Uint8, &ints(&[1; 256])), Scalar::Int(0));
        assert_eq!(
            reduce(RedOp::Avg, Int8, &ints(&[-128, 0])),
            Scalar::Int(-64)
        );
        assert_eq!(
            reduce(RedOp::Avg, Int8, &ints(&[100, 100, 0])),
            Scalar::Int(-18)
        );
        // Sum, Prod, PreMulSum wrap
        assert_eq!(
            reduce(RedOp::Sum, Uint64, &ints(&[u64::MAX.into(), 1])),
            Scalar::Int(0)
        );
        assert_eq!(
            reduce(RedOp::Sum, Int8, &ints(&[127, 1])),
            Scalar::Int(-128)
        );
        assert_eq!(
            reduce(RedOp::Prod, Uint8, &ints(&[16, 16, 3])),
            Scalar::Int(0)
        );
        assert_eq!(
            reduce(RedOp::PreMulSum(3.0), Int8, &ints(&[100, 0])),
            Scalar::Int(44)
        );
        // and over random 64-bit inputs, against wrapping arithmetic in the type itself
        use rand::{RngExt, SeedableRng};
        let mut rng = rand::rngs::StdRng::seed_from_u64(5);
        for _ in 0..2_000 {
            let n = rng.random_range(1..9usize);
            let xs: Vec<i64> = (0..n).map(|_| rng.random()).collect();
            let us: Vec<u64> = xs.iter().map(|x| *x as u64).collect();
            let (si, su) = (
                ints(&xs.iter().map(|x| i128::from(*x)).collect::<Vec<_>>()),
                ints(&us.iter().map(|x| i128::from(*x)).collect::<Vec<_>>()),
            );
            let i = |v: i64| Scalar::Int(v.into());
            let u = |v: u64| Scalar::Int(v.into());
            let isum = xs.iter().fold(0i64, |a, x| a.wrapping_add(*x));
            let usum = us.iter().fold(0u64, |a, x| a.wrapping_add(*x));
            assert_eq!(reduce(RedOp::Sum, Int64, &si), i(isum));
            assert_eq!(reduce(RedOp::Sum, Uint64, &su), u(usum));
            let iprod = xs.iter().fold(1i64, |a, x| a.wrapping_mul(*x));
            let uprod = us.iter().fold(1u64, |a, x| a.wrapping_mul(*x));
            assert_eq!(reduce(RedOp::Prod, Int64, &si), i(iprod));
            assert_eq!(reduce(RedOp::Prod, Uint64, &su), u(uprod));
            assert_eq!(reduce(RedOp::Max, Int64, &si), i(*xs.iter().max().unwrap()));
            assert_eq!(
                reduce(RedOp::Min, Uint64, &su),
                u(*us.iter().min().unwrap())
            );
            assert_eq!(reduce(RedOp::Avg, Int64, &si), i(isum / n as i64));
            assert_eq!(reduce(RedOp::Avg, Uint64, &su), u(usum / n as u64));
        }
    }

    #[test]
    fn float_reductions_round_to_the_type_after_every_step() {
        use DataType::*;
        let fl = |v: &[f64]| -> Vec<Scalar> { v.iter().map(|x| Scalar::Float(*x)).collect() };
        let inf = Scalar::Float(f64::INFINITY);
        assert_eq!(reduce(RedOp::Sum, Float16, &fl(&[65504.0, 65504.0])), inf);
        // 1 + 2^-24 is a tie in float and rounds to 1, twice; exactly it is 1 + 2^-23
        let tiny = 2f64.powi(-24);
        assert_eq!(
            reduce(RedOp::Sum, Float32, &fl(&[1.0, tiny, tiny])),
            Scalar::Float(1.0)
        );
        assert_eq!(
            reduce(RedOp::Sum, Float64, &fl(&[1.0, tiny, tiny])),
            Scalar::Float(1.0 + 2.0 * tiny)
        );
        // 2^-9 · 2^-9 underflows e4m3's smallest subnormal (2^-9) to 0
        let e = 2f64.powi(-9);
        assert_eq!(
            reduce(RedOp::Prod, Float8e4m3, &fl(&[e, e])),
            Scalar::Float(0.0)
        );
        assert_eq!(
            reduce(RedOp::Sum, Float8e4m3, &fl(&[448.0, 448.0])),
            Scalar::Float(448.0)
        );
    }

    /// `n·2^-k` rounded once to a format of `p` bits and smallest quantum
    /// 2^qmin, ties to even, by dropping bits one at a time: written apart
    /// from [`fused_step`]'s window arithmetic, to check it.
    fn round_exact(n: i128, k: i32, p: u32, qmin: i32) -> f64 {
        if n == 0 {
            return 0.0;
        }
        let (mut m, mut e) = (n.unsigned_abs(), -k);
        let (mut round, mut sticky) = (false, false);
        while 128 - m.leading_zeros() > p || e < qmin {
            sticky |= round;
            round = m & 1 == 1;
            m >>= 1;
            e += 1;
        }
        if round && (sticky || m & 1 == 1) {
            m += 1;
        }
        let v = m as f64 * 2f64.powi(e);
        if n < 0 { -v } else { v }
    }

    /// Cases where rounding `acc + x·s` first to a wider type and then to
    /// the type gives another answer than rounding once: the exact value
    /// lies a hair off a midpoint of the type, and the first rounding lands
    /// on the midpoint. Expected values written from the arithmetic.
    #[test]
    fn fused_step_rounds_once_where_two_roundings_differ() {
        let p = |e: i32| 2f64.powi(e);
        // (type, acc, x, s, rounded once, rounded via the wider type)
        let cases = [
            // float: 1+2^-23 + (1+2^-23)·2^-24(1-2^-23) = 1 + 3·2^-24 - 2^-70,
            // in f64 the midpoint 1 + 3·2^-24, which ties to 1 + 2^-22
            (
                DataType::Float32,
                1.0 + p(-23),
                1.0 + p(-23),
                p(-24) * (1.0 - p(-23)),
                1.0 + p(-23),
                1.0 + p(-22),
            ),
            // half: 3 · 683·2^-10 = 2 + 2^-10, the midpoint of 2 and 2 + 2^-9;
            // + 2^-24 is above it, but in f32 it vanishes and 2 + 2^-10 ties to 2
            (
                DataType::Float16,
                p(-24),
                3.0,
                683.0 * p(-10),
                2.0 + p(-9),
                2.0,
            ),
            // bfloat16: 7 · 37·2^-8 = 259·2^-8, the midpoint of 129·2^-7 and
            // 130·2^-7; - 2^-30 is below it, but in f32 it ties up to 130·2^-7
            (
                DataType::Bfloat16,
                -p(-30),
                7.0,
                37.0 * p(-8),
                129.0 * p(-7),
                130.0 * p(-7),
            ),
        ];
        for (dt, acc, x, s, once, twice) in cases {
            for v in [acc, x, s] {
                assert_eq!(round_to(dt, v), v, "{dt}: {v} is a value of the type");
            }
            let wide = if dt == DataType::Float32 {
                acc + x * s
            } else {
                ((acc as f32) + (x as f32) * (s as f32)) as f64
            };
            assert_eq!(round_to(dt, wide), twice, "{dt}: two roundings");
            assert_ne!(once, twice);
            assert_eq!(fused_step(dt, acc, x, s), once, "{dt}: one rounding");
            assert_eq!(fused_step(dt, -acc, -x, s), -once, "{dt}: mirrored");
        }
    }

    /// A splitmix step: reproducible pseudo-random bits.
    fn mix(x: &mut u64) -> u64 {
        *x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = *x;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Random finite values of the type, over its whole range (every bit
    /// pattern is drawn; NaNs and infinities are skipped).
    #[test]
    fn fused_step_equals_exact_arithmetic_rounded_once() {
        let mut seed = 7u64;
        // half: every value is a multiple of 2^-24 below 2^16, so 2^48·(acc + x·s)
        // is an integer below 2^81: exact in i128
        let mut checked = 0;
        while checked < 200_000 {
            let v: Vec<f64> = (0..3)
                .map(|_| half::f16::from_bits(mix(&mut seed) as u16).to_f64())
                .collect();
            if v.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let n = |x: f64| (x * 2f64.powi(24)) as i128;
            let exact = n(v[0]) * (1 << 24) + n(v[1]) * n(v[2]);
            let want = round_to(DataType::Float16, round_exact(exact, 48, 11, -24));
            let got = fused_step(DataType::Float16, v[0], v[1], v[2]);
            assert_eq!(got.to_bits(), want.to_bits(), "half {v:?}");
            checked += 1;
        }
        // bfloat16 and float, normal and subnormal results: each operand a
        // random value with its exponent in a range, so that 2^(2k)·(acc + x·s)
        // is an integer that fits i128 (x and s multiples of 2^-k)
        type Case = (DataType, u32, i32, (i32, i32), (i32, i32), i32);
        let ranges: [Case; 4] = [
            (DataType::Bfloat16, 8, -133, (-10, 10), (-10, 10), 19),
            (DataType::Bfloat16, 8, -133, (-140, -120), (-75, -60), 82),
            (DataType::Float32, 24, -149, (-20, 10), (-20, 10), 43),
            (DataType::Float32, 24, -149, (-150, -126), (-90, -65), 113),
        ];
        for (dt, p, qmin, acc_e, xs_e, k) in ranges {
            let draw = |seed: &mut u64, (lo, hi): (i32, i32)| {
                let b = mix(seed);
                let m = 1.0 + (b >> 11) as f64 / 2f64.powi(53);
                let e = lo + (b % (hi - lo) as u64) as i32;
                let sign = if b & (1 << 10) != 0 { -1.0 } else { 1.0 };
                round_to(dt, sign * m * 2f64.powi(e))
            };
            for _ in 0..100_000 {
                let acc = draw(&mut seed, acc_e);
                let (x, s) = (draw(&mut seed, xs_e), draw(&mut seed, xs_e));
                let n = |v: f64, k: i32| {
                    let w = v * 2f64.powi(k);
                    assert_eq!(w.fract(), 0.0, "{v:e} is a multiple of 2^-{k}");
                    w as i128
                };
                let exact = n(acc, 2 * k) + n(x, k) * n(s, k);
                let want = round_to(dt, round_exact(exact, 2 * k, p, qmin));
                let got = fused_step(dt, acc, x, s);
                assert_eq!(got.to_bits(), want.to_bits(), "{dt} {acc:e} + {x:e}·{s:e}");
            }
        }
        // float and double against the platform's fused multiply-add
        // (IEEE fusedMultiplyAdd, correctly rounded), every bit pattern
        for _ in 0..200_000 {
            let v: Vec<f32> = (0..3)
                .map(|_| f32::from_bits(mix(&mut seed) as u32))
                .collect();
            if v.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let want = v[1].mul_add(v[2], v[0]);
            let got = fused_step(DataType::Float32, v[0] as f64, v[1] as f64, v[2] as f64);
            assert_eq!(got.to_bits(), (want as f64).to_bits(), "float {v:?}");
            let w: Vec<f64> = (0..3).map(|_| f64::from_bits(mix(&mut seed))).collect();
            if w.iter().any(|x| !x.is_finite()) {
                continue;
            }
            let want = w[1].mul_add(w[2], w[0]);
            let got = fused_step(DataType::Float64, w[0], w[1], w[2]);
            assert!(
                got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
                "double {w:?}: {got:e} != {want:e}"
            );
        }
    }

    /// Avg and PreMulSum on the fused types chain the fused step in rank
    /// order after a rounded first product; fp8 rounds the product first.
    #[test]
    fn float_premul_sum_is_fused_except_for_fp8() {
        use DataType::*;
        let third = round_to(Float32, 1.0 / 3.0);
        let xs = [1.0 + 2f64.powi(-20), 3.0, -5.5];
        let mut acc = round_to(Float32, xs[0] * third);
        for x in &xs[1..] {
            acc = (*x as f32).mul_add(third as f32, acc as f32) as f64;
        }
        assert_eq!(
            reduce(RedOp::Avg, Float32, &sc(Float32, &xs)),
            Scalar::Float(acc)
        );
        // fp8: x·s rounded to the type, then the sum rounded. Over small
        // inputs, the unfused chain written out, and at least one element
        // where the fused step would have given another value.
        for dt in [Float8e4m3, Float8e5m2] {
            let s = round_to(dt, 0.3);
            let mut differs = 0;
            for k in 1..40 {
                let x: Vec<f64> = [k, k + 1, 2 * k]
                    .iter()
                    .map(|v| round_to(dt, *v as f64 * 0.25))
                    .collect();
                let p: Vec<f64> = x.iter().map(|v| round_to(dt, v * s)).collect();
                let want = round_to(dt, round_to(dt, p[0] + p[1]) + p[2]);
                // fused, for contrast: every sum here is exact in f64
                let f = round_to(dt, round_to(dt, p[0] + x[1] * s) + x[2] * s);
                differs += usize::from(f != want);
                assert_eq!(
                    reduce(RedOp::PreMulSum(0.3), dt, &sc(dt, &x)),
                    Scalar::Float(want),
                    "{dt} inputs {x:?}"
                );
            }
            assert!(differs > 0, "{dt}: some case tells the two rules apart");
        }
    }
}
