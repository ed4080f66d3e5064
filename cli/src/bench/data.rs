//! Verifiable data: deterministic per-rank inputs whose results are exact in
//! every datatype, the closed-form expected output of every rank, and the
//! element-wise checker behind `#wrong`.
//!
//! Every value a rank sends is a small non-negative integer ("code") chosen so
//! that every partial result of the reduction stays exactly representable in
//! the datatype (fp8 e5m2 holds the integers up to 8 exactly, e4m3 up to 16,
//! bf16 up to 256, f16 up to 2048). Then the result does not depend on the
//! order or grouping of the reduction, the expected value is computed here in
//! integer arithmetic without calling the engine, and floats compare
//! bit-exactly:
//!
//! - Sum, Max, Min and integer Avg: codes in `0..=K` with `N·K` at most the
//!   type's exact range; when `N` exceeds that range, one rank per element
//!   holds a non-zero code (one-hot).
//! - Prod: factors 1 or 2, at most as many 2s per element as the type's
//!   largest power of two allows.
//! - Float Avg (multiply by `1/N` rounded to the type, then sum): one-hot, so
//!   the result is one correctly rounded product `v · round(1/N)`.
//! - Copies (Broadcast, AllGather, AlltoAll, Gather, Scatter): codes in
//!   `0..=200` that depend on the rank and the element index, so a swapped
//!   block or a shifted offset shows up.
//!
//! `0xFF` bytes (`-1`, the maximum unsigned value, or NaN) are never an
//! expected value: outputs are poisoned with them before each checked call,
//! so a call that writes nothing is counted wrong too.
//!
//! `--fill random` times the calls on [`random_value`]s instead, which no
//! closed form checks; the checked calls still run on the pattern.

use rankwise::core::{DataType, Element, Func, RedOp};

/// The byte outputs and guard zones are poisoned with.
pub const POISON: u8 = 0xFF;

/// `--fill random`'s element `i` of rank `rank`: ±m·2^e, m with 11
/// significant bits and e in −4…5, the sign and both drawn from a hash of
/// the two, so every significand bit of the 16-bit types is used, as in
/// gradients (the pattern's small integers, and its one rank per element
/// for float Avg and PreMulSum, are easier on some kernels). Integer types
/// take the value truncated.
pub fn random_value(rank: usize, i: usize) -> f64 {
    let mut h = ((i as u64) << 16 | rank as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    h = (h ^ (h >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    h = (h ^ (h >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    h ^= h >> 31;
    let m = 1.0 + (h & 0x3FF) as f64 / 1024.0;
    let e = ((h >> 16) % 10) as i32 - 4;
    if h & 0x8000 == 0 {
        m * 2f64.powi(e)
    } else {
        -m * 2f64.powi(e)
    }
}

/// Largest `M` such that every integer in `0..=M` is exact in `dt` and no
/// value in it is the poison pattern.
pub fn exact_max(dt: DataType) -> u64 {
    use DataType::*;
    match dt {
        Int8 => 127,
        Uint8 => 254,
        Float8e5m2 => 8,
        Float8e4m3 => 16,
        Bfloat16 => 256,
        Float16 => 2048,
        Int32 | Uint32 | Float32 => 1 << 24,
        Int64 | Uint64 | Float64 => 1 << 53,
    }
}

/// Most factors of 2 a product may hold exactly in `dt`.
fn max_twos(dt: DataType) -> u32 {
    use DataType::*;
    match dt {
        Int8 => 6,
        Uint8 => 7,
        Float8e4m3 => 8,
        Float8e5m2 | Float16 => 15,
        Int32 => 30,
        Uint32 => 31,
        Int64 => 62,
        Uint64 => 63,
        // the expected product is a u64
        Bfloat16 | Float32 | Float64 => 62,
    }
}

/// A 64-bit mix of (rank, index, seed): cheap, deterministic, well spread.
#[inline]
fn mix(rank: usize, i: usize, seed: u64) -> u64 {
    let mut z = (i as u64) ^ ((rank as u64) << 40) ^ seed.wrapping_mul(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// How the codes of one run are drawn.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Scheme {
    /// code in `0..=k`
    Range(u64),
    /// only rank `(i + seed) % N` holds a non-zero code, in `1..=k`
    OneHot(u64),
    /// factor 2 on ranks below `twos` when a bit says so, else 1
    Powers(u32),
}

/// One expected value: an exact integer, or `round(v · round(1/N))` (float Avg).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Expect {
    Int(u64),
    Scaled(u64),
}

/// The inputs and expected outputs of one (op, datatype, redop, N, root, seed).
#[derive(Clone, Debug)]
pub struct Pattern {
    pub func: Func,
    pub dtype: DataType,
    pub op: RedOp,
    pub nranks: usize,
    pub root: usize,
    pub seed: u64,
    scheme: Scheme,
}

impl Pattern {
    pub fn new(
        func: Func,
        dtype: DataType,
        op: RedOp,
        nranks: usize,
        root: usize,
        seed: u64,
    ) -> Pattern {
        let m = exact_max(dtype);
        let n = nranks as u64;
        let scheme = if !func.reduces() {
            Scheme::Range(m.min(200))
        } else {
            match op {
                RedOp::Prod => Scheme::Powers(max_twos(dtype).min(nranks as u32)),
                // one nonzero input per element: the result is that input
                // times the scalar, rounded once
                RedOp::Avg | RedOp::PreMulSum(_) if dtype.is_float() => Scheme::OneHot(m.min(200)),
                RedOp::Max | RedOp::Min => Scheme::Range(m.min(200)),
                _ => {
                    let k = (m / n).min(200);
                    if k >= 1 {
                        Scheme::Range(k)
                    } else {
                        Scheme::OneHot(m.min(200))
                    }
                }
            }
        };
        Pattern {
            func,
            dtype,
            op,
            nranks,
            root,
            seed,
            scheme,
        }
    }

    /// The code rank `rank` holds at element `i` of its send buffer.
    #[inline]
    pub fn input(&self, rank: usize, i: usize) -> u64 {
        let h = mix(rank, i, self.seed);
        match self.scheme {
            Scheme::Range(k) => h % (k + 1),
            Scheme::OneHot(k) => {
                if (i + self.seed as usize) % self.nranks == rank {
                    1 + h % k
                } else {
                    0
                }
            }
            Scheme::Powers(twos) => {
                if (rank as u32) < twos && h & 1 == 1 {
                    2
                } else {
                    1
                }
            }
        }
    }

    /// The reduction over ranks of element `i` of every send buffer.
    fn reduced(&self, i: usize) -> Expect {
        let codes = (0..self.nranks).map(|s| self.input(s, i));
        match self.op {
            RedOp::Max => Expect::Int(codes.max().unwrap_or(0)),
            RedOp::Min => Expect::Int(codes.min().unwrap_or(0)),
            RedOp::Prod => Expect::Int(codes.product()),
            RedOp::Avg | RedOp::PreMulSum(_) if self.dtype.is_float() => {
                Expect::Scaled(codes.sum())
            }
            RedOp::Avg => Expect::Int(codes.sum::<u64>() / self.nranks as u64),
            RedOp::Sum => Expect::Int(codes.sum()),
            RedOp::PreMulSum(_) => unreachable!("the options refuse premulsum on integer types"),
        }
    }

    /// Elements in rank `rank`'s send buffer for per-rank count `q`.
    pub fn send_len(&self, q: usize) -> usize {
        match self.func {
            Func::ReduceScatter | Func::AlltoAll => self.nranks * q,
            Func::Scatter => self.nranks * q,
            _ => q,
        }
    }

    /// Elements in rank `rank`'s output for per-rank count `q`.
    pub fn recv_len(&self, q: usize) -> usize {
        match self.func {
            Func::AllGather | Func::AlltoAll | Func::Gather => self.nranks * q,
            _ => q,
        }
    }

    /// Whether the contract defines rank `rank`'s output (Reduce and Gather:
    /// the root only).
    pub fn has_output(&self, rank: usize) -> bool {
        !matches!(self.func, Func::Reduce | Func::Gather) || rank == self.root
    }

    /// Expected value of element `j` of rank `rank`'s output (per-rank count
    /// `q`), from docs/reference/contracts.md §1's formulas.
    pub fn expected(&self, rank: usize, q: usize, j: usize) -> Expect {
        let n = self.nranks;
        match self.func {
            Func::AllReduce | Func::Reduce => self.reduced(j),
            Func::ReduceScatter => self.reduced(rank * q + j),
            Func::Broadcast => Expect::Int(self.input(self.root, j)),
            Func::AllGather | Func::Gather => Expect::Int(self.input(j / q, j % q)),
            Func::AlltoAll => Expect::Int(self.input(j / q, rank * q + j % q)),
            Func::Scatter => Expect::Int(self.input(self.root, rank * q + j)),
            Func::Send | Func::Recv => {
                let _ = n;
                unreachable!("the benchmark runs collectives only")
            }
        }
    }

    /// Rank `rank`'s send buffer as elements of `T`.
    pub fn inputs<T: Element>(&self, conv: &mut Converter<T>, rank: usize, q: usize) -> Vec<T> {
        self.inputs_in(conv, rank, 0..self.send_len(q))
    }

    /// Elements `range` of rank `rank`'s send buffer.
    pub fn inputs_in<T: Element>(
        &self,
        conv: &mut Converter<T>,
        rank: usize,
        range: std::ops::Range<usize>,
    ) -> Vec<T> {
        range.map(|i| conv.int(self.input(rank, i))).collect()
    }
}

/// Turns codes into elements of `T`, with a table for the small values that
/// make up nearly all data (the fp8 encoders are slow).
pub struct Converter<T> {
    ints: Vec<T>,
    scaled: Vec<Option<T>>,
    scale: f64,
}

const TABLE: usize = 4096;

impl<T: Element> Converter<T> {
    pub fn new(nranks: usize, op: RedOp) -> Converter<T> {
        let ints = (0..TABLE).map(|v| T::from_f64(v as f64)).collect();
        // float Avg multiplies by 1/N rounded to the type, PreMulSum by its
        // scalar rounded to the type (docs/reference/contracts.md §3)
        let scale = match op {
            RedOp::PreMulSum(k) => T::from_f64(k).to_f64(),
            _ => T::from_f64(1.0 / nranks as f64).to_f64(),
        };
        Converter {
            ints,
            scaled: vec![None; 256],
            scale,
        }
    }
    #[inline]
    pub fn int(&mut self, v: u64) -> T {
        match self.ints.get(v as usize) {
            Some(t) => *t,
            None => T::from_f64(v as f64),
        }
    }
    #[inline]
    pub fn expect(&mut self, e: Expect) -> T {
        match e {
            Expect::Int(v) => self.int(v),
            Expect::Scaled(v) => {
                let scale = self.scale;
                // v and scale each fit in 53 bits of mantissa together: the
                // f64 product is exact, so from_f64 rounds once, as the type does
                let make = || T::from_f64(v as f64 * scale);
                match self.scaled.get_mut(v as usize) {
                    Some(slot) => *slot.get_or_insert_with(make),
                    None => make(),
                }
            }
        }
    }
}

/// Whether two elements have the same bits. `to_f64` is exact and
/// injective on every non-NaN value of every datatype (and the expected
/// values here are small integers), so this is a bitwise comparison: `-0.0`
/// differs from `0.0` and a NaN never matches.
#[inline]
pub fn same_bits<T: Element>(a: T, b: T) -> bool {
    a.to_f64().to_bits() == b.to_f64().to_bits()
}

/// Number of positions where `got` and `expected` differ bit-wise, plus the
/// length difference if they differ in length.
pub fn count_wrong<T: Element>(got: &[T], expected: &[T]) -> u64 {
    let diff = got
        .iter()
        .zip(expected)
        .filter(|(a, b)| !same_bits(**a, **b))
        .count();
    (diff + got.len().abs_diff(expected.len())) as u64
}

/// Number of bytes that are not `POISON` (a write past an output's end).
pub fn count_clobbered(bytes: &[u8]) -> u64 {
    bytes.iter().filter(|b| **b != POISON).count() as u64
}

#[cfg(test)]
mod tests {
    use super::*;
    use half::{bf16, f16};
    use rankwise::core::{F8E4M3, F8E5M2};

    #[test]
    fn random_values_are_signed_eleven_bit_significands_over_ten_binades() {
        let mut seen_e = [false; 10];
        let (mut neg, mut distinct) = (0, std::collections::BTreeSet::new());
        for r in 0..4 {
            for i in 0..5000 {
                let v = random_value(r, i);
                let (a, e) = (v.abs(), v.abs().log2().floor() as i32);
                assert!((-4..=5).contains(&e), "{v}: exponent {e}");
                let m = a / 2f64.powi(e);
                // m·1024 an integer in 1024..2048: 11 significant bits
                assert_eq!((m * 1024.0).fract(), 0.0, "{v}");
                assert_eq!(f16::from_f64(v).to_f64(), v, "{v} is a half value");
                seen_e[(e + 4) as usize] = true;
                neg += usize::from(v < 0.0);
                distinct.insert(v.to_bits());
            }
        }
        assert!(seen_e.iter().all(|&s| s), "every binade");
        assert!((8000..12000).contains(&neg), "{neg} negative of 20000");
        assert!(distinct.len() > 10000, "{} distinct", distinct.len());
        // ranks differ at the same element
        assert!((0..100).any(|i| random_value(0, i) != random_value(1, i)));
    }

    #[test]
    fn checker_counts_each_wrong_element() {
        let expected = vec![1.0f32, 2.0, 3.0, 4.0];
        assert_eq!(count_wrong(&expected, &expected), 0);
        let mut got = expected.clone();
        got[1] = 2.5;
        got[3] = f32::NAN;
        assert_eq!(count_wrong(&got, &expected), 2);
        assert_eq!(
            count_wrong(&[0.0f32], &[-0.0f32]),
            1,
            "bitwise: -0 is not +0"
        );
        assert_eq!(
            count_wrong(&got[..2], &expected),
            3,
            "missing elements count"
        );
        assert_eq!(count_clobbered(&[POISON, 0, POISON, 7]), 2);
    }

    #[test]
    fn a_deliberately_wrong_expectation_is_counted() {
        // expected values from the pattern, but for the wrong rank
        let p = Pattern::new(Func::AllGather, DataType::Int32, RedOp::Sum, 4, 0, 1);
        let mut conv = Converter::<i32>::new(4, RedOp::Sum);
        let q = 64;
        let right: Vec<i32> = (0..4 * q)
            .map(|j| conv.expect(p.expected(0, q, j)))
            .collect();
        // an AllGather that swapped blocks 0 and 1
        let mut wrong = right.clone();
        let (a, b) = wrong.split_at_mut(q);
        a.swap_with_slice(&mut b[..q]);
        let swapped = (0..q).filter(|&j| right[j] != right[q + j]).count() as u64;
        assert_eq!(count_wrong(&wrong, &right), 2 * swapped);
        assert!(swapped > q as u64 / 2);
    }

    /// Folds the inputs in rank order in the type itself, the way any engine
    /// might, and checks the closed form agrees bit for bit.
    fn exact_in<T: Element + rankwise::kernels::Arith>(func: Func, op: RedOp, n: usize) {
        let p = Pattern::new(func, T::DTYPE, op, n, 0, 7);
        let mut conv = Converter::<T>::new(n, op);
        let q = 300;
        let inputs: Vec<Vec<T>> = (0..n).map(|r| p.inputs(&mut conv, r, q)).collect();
        for rank in 0..n {
            let base = if func == Func::ReduceScatter {
                rank * q
            } else {
                0
            };
            let mut acc: Vec<T> = inputs[0][base..base + q].to_vec();
            rankwise::kernels::reduce_into(&mut acc, op, n, |s| &inputs[s][base..base + q]);
            let expected: Vec<T> = (0..q)
                .map(|j| conv.expect(p.expected(rank, q, j)))
                .collect();
            assert_eq!(
                count_wrong(&acc, &expected),
                0,
                "{func} {op} {} n={n}",
                T::DTYPE
            );
            // and the data is not trivial
            assert!(expected.iter().any(|v| v.to_f64() != 0.0));
        }
    }

    #[test]
    fn reductions_are_exact_in_every_datatype() {
        // PreMulSum with scalars of significand bits, below one and
        // negative: each input times the scalar, rounded once (float
        // types; the benchmark refuses it on integers)
        let premul = [0.3, -2.5, 1e-3].map(RedOp::PreMulSum);
        for n in [1, 2, 3, 4, 8, 17] {
            for op in RedOp::BUILTIN.into_iter().chain(premul) {
                for func in [Func::AllReduce, Func::ReduceScatter] {
                    if !matches!(op, RedOp::PreMulSum(_)) {
                        exact_in::<i8>(func, op, n);
                        exact_in::<u8>(func, op, n);
                        exact_in::<i32>(func, op, n);
                        exact_in::<u64>(func, op, n);
                    }
                    exact_in::<f16>(func, op, n);
                    exact_in::<bf16>(func, op, n);
                    exact_in::<f32>(func, op, n);
                    exact_in::<f64>(func, op, n);
                    exact_in::<F8E4M3>(func, op, n);
                    exact_in::<F8E5M2>(func, op, n);
                }
            }
        }
    }

    /// NCCL's integer Avg: the sum wrapped to the element type, divided by
    /// N toward zero, N held in a wide integer (never in the element type).
    fn nccl_int_avg(codes: &[u64], bits: u32, signed: bool, n: i128) -> i128 {
        let sum: i128 = codes.iter().map(|&c| c as i128).sum();
        let m = sum.rem_euclid(1 << bits);
        let wrapped = if signed && m >= 1 << (bits - 1) {
            m - (1 << bits)
        } else {
            m
        };
        wrapped / n
    }

    #[test]
    fn integer_avg_is_nccls_at_any_rank_count() {
        // int8 at 200 ranks and uint8 at 256: N does not fit the element type
        for (dt, bits, signed) in [
            (DataType::Int8, 8, true),
            (DataType::Uint8, 8, false),
            (DataType::Int32, 32, true),
        ] {
            for n in [2, 3, 17, 127, 128, 200, 255, 256] {
                let p = Pattern::new(Func::AllReduce, dt, RedOp::Avg, n, 0, 5);
                for j in 0..600 {
                    let codes: Vec<u64> = (0..n).map(|r| p.input(r, j)).collect();
                    let want = nccl_int_avg(&codes, bits, signed, n as i128);
                    assert_eq!(
                        p.expected(0, 600, j),
                        Expect::Int(want as u64),
                        "{dt} N={n} element {j}: inputs {codes:?}"
                    );
                }
            }
        }
    }

    #[test]
    fn copies_tell_blocks_apart() {
        let p = Pattern::new(Func::AlltoAll, DataType::Float8e5m2, RedOp::Sum, 4, 0, 3);
        let q = 32;
        let block = |r: usize, b: usize| {
            (0..q)
                .map(|j| p.expected(r, q, b * q + j))
                .collect::<Vec<_>>()
        };
        assert_ne!(block(0, 1), block(0, 2));
        assert_ne!(block(0, 1), block(1, 1));
    }

    #[test]
    fn poison_is_never_expected() {
        let mut mem = rankwise::engine::host_memory::Registry::default();
        for dt in DataType::ALL {
            let at = mem.alloc(dt.size());
            rankwise::engine::Memory::fill(&mut mem, at, dt.size(), POISON).unwrap();
            let collides = rankwise::with_element_type!(dt, T => {
                let mut poison = [T::default()];
                rankwise::engine::Memory::read(&mem, at, rankwise::core::bytes::of_mut(&mut poison)).unwrap();
                let poison = poison[0];
                let top = exact_max(dt).min(TABLE as u64 - 1);
                (0..=top).any(|v| same_bits(T::from_f64(v as f64), poison))
            });
            assert!(
                !collides,
                "{dt}: the poison pattern is a value the data can hold"
            );
        }
    }
}
