//! Property tests: random communicator sizes, counts, datatypes, ops, roots
//! and pointer forms; every rank's output must equal a closed-form reference
//! element by element.
//!
//! Inputs encode where each element came from (docs/reference/contracts.md §7): its source
//! rank, its block (the destination block of a buffer of N blocks, else 0)
//! and its offset in the block. A data-moving op is checked bit for bit on
//! elements whose bits are that encoding, so a swapped block, a wrong source
//! or a shifted offset changes some element. A reduction's inputs are small
//! numbers built so that its result encodes (block, offset) while every
//! rank's contribution counts (see [`reduction_input`]); the reference folds
//! in rank order, rounding to the type at each step exactly as the contract
//! defines, so the comparison is exact even where a narrow type rounds.
//! [`a_swapped_block_is_always_caught`] proves the encoding catches every
//! block swap.

use proptest::prelude::*;
use rankwise::core::{DataType, Element, Func, RedOp};

use rankwise::core::bytes;
use rankwise::launch::EngineKind;
use rankwise::{NULL, with_element_type};
use rankwise_testkit::engines::{engines, launch};

#[derive(Debug, Clone, Copy)]
struct Case {
    func: Func,
    dt: DataType,
    op: RedOp,
    n: usize,
    count: usize,
    root: usize,
    in_place: bool,
    /// Inputs over the type's whole range, from this seed (8-bit types
    /// only), instead of the small exact numbers of [`input`].
    bytes: Option<u64>,
}

fn signed(dt: DataType) -> bool {
    !matches!(dt, DataType::Uint8 | DataType::Uint32 | DataType::Uint64)
}

/// Whether the op moves data without arithmetic (checked bit for bit).
fn moves(func: Func) -> bool {
    !func.reduces()
}

/// Where element `j` of a send buffer of `len` elements sits: (block,
/// offset). A buffer of N blocks of `count` (ReduceScatter's and AlltoAll's
/// input, the Scatter root's) is blocked by destination; any other buffer
/// is one block.
fn place(c: &Case, len: usize, j: usize) -> (usize, usize) {
    let q = c.count;
    if c.n > 1 && q > 0 && len == c.n * q {
        (j / q, j % q)
    } else {
        (0, j)
    }
}

/// The bits of rank `s`'s element at (`b`, `o`) for a data-moving op. An
/// element of 2 bytes or more holds the dense index `(s·N + b)·q + o`
/// (below 9·9·300 < 2^15), so source, block and offset are all recoverable
/// from it ([`describe_bits`]); every such bit pattern is a finite value of
/// every type. A byte holds `3(s·N + b) + o` mod 256: two (source, block)
/// pairs at one offset differ by a nonzero multiple of 3 below 3·81 < 256,
/// so any two blocks differ at every offset, and offsets within a block
/// differ unless 256 apart.
fn movement_bits(c: &Case, s: usize, b: usize, o: usize) -> u64 {
    let pair = (s * c.n + b) as u64;
    if c.dt.size() == 1 {
        (3 * pair + o as u64) % 256
    } else {
        pair * c.count as u64 + o as u64
    }
}

/// Where an element of a data-moving op came from, read off its bits.
fn describe_bits(c: &Case, bits: u64) -> String {
    if c.dt.size() == 1 || c.count == 0 {
        return format!("{bits:#04x}");
    }
    let (pair, o) = (bits / c.count as u64, bits % c.count as u64);
    let (s, b) = (pair / c.n as u64, pair % c.n as u64);
    format!("{bits:#x} (source {s}, block {b}, offset {o})")
}

/// A data-moving op's send buffer of `len` elements on rank `s`, as bytes.
fn movement_bytes(c: &Case, s: usize, len: usize) -> Vec<u8> {
    let size = c.dt.size();
    (0..len)
        .flat_map(|j| {
            let (b, o) = place(c, len, j);
            movement_bits(c, s, b, o)
                .to_le_bytes()
                .into_iter()
                .take(size)
        })
        .collect()
}

/// Code `(b + o) mod m` of a reduction element at (block, offset): two
/// blocks (`b < N <= m`) at the same offset always differ, and offsets in a
/// block differ unless `m` apart.
fn code(b: usize, o: usize, m: usize) -> i64 {
    ((b + o) % m) as i64
}

/// The largest power of two a Prod result may reach: as large as the type
/// holds exactly (int8 ±64, uint8 128, e4m3 256, e5m2 32768), and at most
/// N (one 2 per rank).
fn prod_kmax(dt: DataType, n: usize) -> usize {
    let cap = match dt {
        DataType::Int8 => 6,
        DataType::Uint8 => 7,
        DataType::Float8e4m3 => 8,
        DataType::Float8e5m2 => 15,
        _ => n,
    };
    n.min(cap)
}

/// How many distinct results the Prod encoding gives: `±2^k` for signed
/// types; `2^k` for unsigned ones, then `3·2^k` until there are N (uint8
/// holds only 8 powers of two, and 9 ranks have 9 blocks).
fn prod_codes(dt: DataType, n: usize) -> usize {
    let kmax = prod_kmax(dt, n);
    if signed(dt) {
        2 * (kmax + 1)
    } else {
        (kmax + 1).max(n)
    }
}

/// Rank `s`'s input at (block `b`, offset `o`) of a reduction, as an exact
/// small integer (or, for a case with a byte seed, any value of the 8-bit
/// type). With `m = max(N, 5)` codes and `p = (s + b + o) mod N` the rank's
/// rotated position, the result encodes `code(b, o)`:
/// - Sum, Avg, PreMulSum: `g + 2s - (N-1)`, `g` the code (shifted to be
///   centred on 0 for signed types, or to keep inputs >= 0 for unsigned
///   ones); the rank terms sum to 0, so the sum is `N·g` and Avg is `g`, and
///   every rank's term is distinct, so no rank can stand in for another.
///   fp8 holds too few integers for that (e5m2: 0..=8), so there the rank
///   at `p = 0` passes the code and the others +1, -1, +1, … in turn: every
///   partial sum stays within a few units of the code and exact.
/// - Prod: the code is a sign and a power `k`: the ranks at `p < k` pass 2,
///   the others 1, and the rank at `p = N-1` negates its value: `±2^k`
///   (unsigned types: `2^k`, or `3·2^k` where the rank at `p = N-1` passes
///   3, see [`prod_codes`]).
/// - Max (Min): the rank at `p = 0` passes `top` (`bottom`), the others up
///   to 2 below (above) it.
///
/// Magnitudes stay within what int8, bfloat16 and half hold exactly; fp8's
/// rounding is the reference's too.
fn reduction_input(c: &Case, s: usize, b: usize, o: usize) -> f64 {
    if let Some(seed) = c.bytes {
        let j = b * c.count + o;
        let byte = (mix(seed ^ mix(s as u64) ^ mix(j as u64).rotate_left(17)) >> 56) as u8;
        return if signed(c.dt) {
            f64::from(byte as i8)
        } else {
            f64::from(byte)
        };
    }
    let n = c.n as i64;
    let m = c.n.max(5);
    let p = ((s + b + o) % c.n) as i64;
    let sg = signed(c.dt);
    let v = match c.op {
        RedOp::Prod => {
            let kmax = prod_kmax(c.dt, c.n);
            let cd = code(b, o, prod_codes(c.dt, c.n)) as usize;
            // (twos, the last rank negates, the last rank passes 3)
            let (k, neg, three) = if sg {
                (cd / 2, cd % 2 == 1, false)
            } else if cd <= kmax {
                (cd, false, false)
            } else {
                (cd - kmax - 1, false, true)
            };
            let x = if (p as usize) < k { 2 } else { 1 };
            match (p == n - 1, neg, three) {
                (true, true, _) => -x,
                (true, _, true) => 3,
                _ => x,
            }
        }
        RedOp::Max | RedOp::Min => {
            let cd = code(b, o, m);
            let base = if sg { cd - m as i64 / 2 } else { cd };
            let d = p.min(2);
            if c.op == RedOp::Max {
                base + 2 - d
            } else {
                base + d
            }
        }
        _ if c.dt.size() == 1 && c.dt.is_float() => {
            // fp8: the rank at p = 0 passes the code, the others ±1 in turn
            let g = code(b, o, m) - m as i64 / 2;
            match p {
                0 => g,
                p if p % 2 == 1 => 1,
                _ => -1,
            }
        }
        _ => {
            let cd = code(b, o, m);
            let g = if sg { cd - m as i64 / 2 } else { cd + n - 1 };
            g + 2 * s as i64 - (n - 1)
        }
    };
    v as f64
}

/// splitmix64's finaliser: a well-spread word from any word.
fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// `x` reduced to the integer type's width, two's complement.
fn wrap(x: i128, dt: DataType) -> i128 {
    let bits = 8 * dt.size() as u32;
    let m = x.rem_euclid(1i128 << bits);
    if signed(dt) && m >= 1i128 << (bits - 1) {
        m - (1i128 << bits)
    } else {
        m
    }
}

/// The reduction over ranks of element values `v`, by the contract's definition.
/// Integers: Sum, Prod and PreMulSum wrap at the type's width; Avg is the
/// wrapped sum divided by N toward zero, N an ordinary integer.
fn reduce_ref<T: Element>(op: RedOp, v: &[f64]) -> T {
    let round = |x: f64| T::from_f64(x).to_f64();
    let n = v.len();
    if !T::DTYPE.is_float() {
        let dt = T::DTYPE;
        let xs: Vec<i128> = v.iter().map(|x| *x as i128).collect();
        let sum = xs.iter().fold(0, |a, x| wrap(a + x, dt));
        let y = match op {
            RedOp::Sum => sum,
            RedOp::Prod => xs.iter().fold(1i128, |a, x| wrap(a.wrapping_mul(*x), dt)),
            RedOp::Max => *xs.iter().max().unwrap(),
            RedOp::Min => *xs.iter().min().unwrap(),
            RedOp::Avg => sum / n as i128,
            RedOp::PreMulSum(s) => xs
                .iter()
                .fold(0, |a, x| wrap(a + wrap(x * s as i128, dt), dt)),
        };
        return T::from_f64(y as f64);
    }
    // NCCL 2.28's pre-multiplied sum: the first product rounded, then each
    // step acc + x·s rounded once (fused) for half, float, double and
    // bfloat16, the product rounded first for fp8. The inputs here are small
    // integers and the scalars have at most 24 bits, so for the narrower
    // types acc + x·s is exact in f64 and rounding it is the one rounding;
    // double takes f64's fused multiply-add.
    let fused = !matches!(T::DTYPE, DataType::Float8e4m3 | DataType::Float8e5m2);
    let premul = |s: f64| {
        let s = round(s);
        v.iter().skip(1).fold(round(v[0] * s), |acc, x| {
            if T::DTYPE == DataType::Float64 {
                x.mul_add(s, acc)
            } else if fused {
                round(acc + x * s)
            } else {
                round(acc + round(x * s))
            }
        })
    };
    let y = match op {
        RedOp::Sum => v.iter().skip(1).fold(v[0], |a, x| round(a + x)),
        RedOp::Prod => v.iter().skip(1).fold(v[0], |a, x| round(a * x)),
        RedOp::Max => v.iter().copied().fold(f64::MIN, f64::max),
        RedOp::Min => v.iter().copied().fold(f64::MAX, f64::min),
        RedOp::Avg => premul(1.0 / n as f64),
        RedOp::PreMulSum(s) => premul(s),
    };
    T::from_f64(y)
}

/// Rank `rank`'s output as read back: elements of a reduction, the bytes
/// of a data-moving op's, or nothing where the contract defines none.
#[derive(Debug, Clone, PartialEq)]
enum Out<T> {
    Values(Vec<T>),
    Bytes(Vec<u8>),
    Undefined,
}

/// The output the contract defines on `rank`, from the closed forms of
/// docs/reference/contracts.md §1 evaluated on the inputs above (never from the engine).
fn expected<T: Element>(c: &Case, rank: usize) -> Out<T> {
    let (n, q) = (c.n, c.count);
    let red = |b: usize, o: usize| {
        reduce_ref::<T>(
            c.op,
            &(0..n)
                .map(|s| T::from_f64(reduction_input(c, s, b, o)).to_f64())
                .collect::<Vec<_>>(),
        )
    };
    // a data-moving op's output: element i comes from (source, block, offset) = at(i)
    let bytes = |len: usize, at: &dyn Fn(usize) -> (usize, usize, usize)| {
        Out::Bytes(
            (0..len)
                .flat_map(|i| {
                    let (s, b, o) = at(i);
                    let bits = movement_bits(c, s, b, o).to_le_bytes();
                    bits.into_iter().take(c.dt.size())
                })
                .collect(),
        )
    };
    let qm = q.max(1);
    match c.func {
        Func::AllReduce => Out::Values((0..q).map(|j| red(0, j)).collect()),
        Func::Reduce if rank == c.root => Out::Values((0..q).map(|j| red(0, j)).collect()),
        Func::ReduceScatter => Out::Values((0..q).map(|o| red(rank, o)).collect()),
        Func::Broadcast => bytes(q, &|o| (c.root, 0, o)),
        Func::AllGather => bytes(n * q, &|i| (i / qm, 0, i % qm)),
        Func::AlltoAll => bytes(n * q, &|i| (i / qm, rank, i % qm)),
        Func::Gather if rank == c.root => bytes(n * q, &|i| (i / qm, 0, i % qm)),
        Func::Scatter => bytes(q, &|o| (c.root, rank, o)),
        _ => Out::Undefined,
    }
}

/// Whether `got` is rank `rank`'s output; if not, the first wrong element,
/// with where it came from for a data-moving op.
fn check<T: Element>(c: &Case, rank: usize, got: &Out<T>) -> Result<(), String> {
    let want = expected::<T>(c, rank);
    if *got == want {
        return Ok(());
    }
    let why = match (got, &want) {
        (Out::Bytes(g), Out::Bytes(w)) if g.len() == w.len() => {
            let size = c.dt.size();
            let bits = |v: &[u8], i: usize| {
                let mut word = [0u8; 8];
                word[..size].copy_from_slice(&v[i * size..(i + 1) * size]);
                u64::from_le_bytes(word)
            };
            let i = (0..g.len() / size)
                .find(|i| bits(g, *i) != bits(w, *i))
                .unwrap_or(0);
            format!(
                "element {i}: got {}, want {}",
                describe_bits(c, bits(g, i)),
                describe_bits(c, bits(w, i))
            )
        }
        (Out::Values(g), Out::Values(w)) if g.len() == w.len() => {
            let i = (0..g.len()).find(|i| g[*i] != w[*i]).unwrap_or(0);
            format!(
                "element {i}: got {:?}, want {:?}; all: got {g:?}, want {w:?}",
                g[i], w[i]
            )
        }
        _ => format!("got {got:?}, want {want:?}"),
    };
    Err(format!("{c:?} rank {rank}: {why}"))
}

fn run_case<T: Element>(c: Case) -> Result<(), String> {
    for engine in engines() {
        // each process of an MPI job draws its own cases unless the seed is
        // fixed, and processes making different launches cannot agree
        if engine.name() == "mpi" && std::env::var_os("PROPTEST_RNG_SEED").is_none() {
            return Err("on the mpi engine set PROPTEST_RNG_SEED (any number) so every process draws the same cases".into());
        }
        if rankwise_testkit::engines::fits(engine, c.n, "property cases") {
            run_case_on::<T>(engine, &c)?;
        }
    }
    Ok(())
}

fn run_case_on<T: Element>(engine: EngineKind, c: &Case) -> Result<(), String> {
    let c = *c;
    // each rank's defined output as bytes (None where the contract leaves
    // it undefined): bytes cross any engine's ranks, processes included
    let outs = launch(engine, c.n, |comm| {
        let me = comm.rank();
        let dt = T::DTYPE;
        let l = rankwise::core::layout(c.func, c.n, me, c.root, c.count);
        let ip = if c.in_place {
            rankwise::core::in_place(c.func, me, c.root, c.count)
        } else {
            None
        };
        let (send, recv) = match ip {
            Some(eq) => {
                // one allocation large enough for both, placed by the equation
                let big = l.send_elems.max(l.recv_elems).max(1);
                let base = comm.alloc_elems(big, dt)?;
                let off = eq.send_minus_recv * dt.size() as isize;
                if off >= 0 {
                    (base + off as usize, base)
                } else {
                    (base, base + (-off) as usize)
                }
            }
            None => {
                let s = if l.send_elems > 0 {
                    comm.alloc_elems(l.send_elems, dt)?
                } else {
                    NULL
                };
                let r = if l.recv_elems > 0 {
                    comm.alloc_elems(l.recv_elems, dt)?
                } else {
                    NULL
                };
                (s, r)
            }
        };
        if l.send_elems > 0 {
            if moves(c.func) {
                comm.write(send, &movement_bytes(&c, me, l.send_elems))?;
            } else {
                let data: Vec<T> = (0..l.send_elems)
                    .map(|j| {
                        let (b, o) = place(&c, l.send_elems, j);
                        T::from_f64(reduction_input(&c, me, b, o))
                    })
                    .collect();
                comm.write(send, &data)?;
            }
        }
        let (q, root) = (c.count, c.root as i32);
        match c.func {
            Func::AllReduce => comm.nccl_all_reduce(send, recv, q, dt, c.op)?,
            Func::Reduce => comm.nccl_reduce(send, recv, q, dt, c.op, root)?,
            Func::Broadcast => comm.nccl_broadcast(send, recv, q, dt, root)?,
            Func::AllGather => comm.nccl_all_gather(send, recv, q, dt)?,
            Func::ReduceScatter => comm.nccl_reduce_scatter(send, recv, q, dt, c.op)?,
            Func::AlltoAll => comm.nccl_all_to_all(send, recv, q, dt)?,
            Func::Gather => comm.nccl_gather(send, recv, q, dt, root)?,
            Func::Scatter => comm.nccl_scatter(send, recv, q, dt, root)?,
            _ => unreachable!(),
        }
        // only buffers the contract defines are read
        Ok(match expected::<T>(&c, me) {
            Out::Undefined => None,
            _ => Some(comm.read::<u8>(recv, l.recv_elems * dt.size())?),
        })
    })
    .map_err(|e| format!("{c:?} on {engine}: {e}"))?;
    for (r, got) in outs.into_iter().enumerate() {
        let got = match (expected::<T>(&c, r), got) {
            (Out::Undefined, _) | (_, None) => Out::Undefined,
            (Out::Bytes(_), Some(b)) => Out::Bytes(b),
            (Out::Values(_), Some(b)) => {
                let mut v = vec![T::default(); b.len() / T::DTYPE.size()];
                bytes::of_mut(&mut v).copy_from_slice(&b);
                Out::Values(v)
            }
        };
        check(&c, r, &got).map_err(|e| format!("on {engine}: {e}"))?;
    }
    Ok(())
}

fn case_strategy() -> impl Strategy<Value = Case> {
    let funcs = prop::sample::select(Func::COLLECTIVES.to_vec());
    let dts = prop::sample::select(DataType::ALL.to_vec());
    let ops = prop::sample::select(vec![
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::Avg,
        RedOp::PreMulSum(2.0),
        RedOp::PreMulSum(0.5),
    ]);
    (
        funcs,
        dts,
        ops,
        1usize..=9,
        0usize..=300,
        any::<bool>(),
        any::<prop::sample::Index>(),
    )
        .prop_map(|(func, dt, op, n, count, in_place, root)| {
            // PreMulSum 0.5 is exact only for floats; integers use 2
            let op = match op {
                RedOp::PreMulSum(_) if !dt.is_float() => RedOp::PreMulSum(2.0),
                o => o,
            };
            Case {
                func,
                dt,
                op,
                n,
                count,
                root: root.index(n),
                in_place: in_place && func != Func::AlltoAll,
                bytes: None,
            }
        })
}

/// Sum and Avg on 8-bit integers up to 300 ranks, inputs over the whole
/// byte range: sums wrap, and N passes the points (128, 256) where it no
/// longer fits the element type.
fn eight_bit_strategy() -> impl Strategy<Value = Case> {
    (
        prop::sample::select(vec![Func::AllReduce, Func::Reduce, Func::ReduceScatter]),
        prop::sample::select(vec![DataType::Int8, DataType::Uint8]),
        prop::sample::select(vec![RedOp::Sum, RedOp::Avg]),
        1usize..=300,
        0usize..=5,
        any::<bool>(),
        any::<prop::sample::Index>(),
        any::<u64>(),
    )
        .prop_map(|(func, dt, op, n, count, in_place, root, seed)| Case {
            func,
            dt,
            op,
            n,
            count,
            root: root.index(n),
            in_place,
            bytes: Some(seed),
        })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn every_op_matches_its_closed_form(c in case_strategy()) {
        let r = with_element_type!(c.dt, T => run_case::<T>(c));
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn eight_bit_sum_and_avg_match_their_closed_form_up_to_300_ranks(c in eight_bit_strategy()) {
        let r = with_element_type!(c.dt, T => run_case::<T>(c));
        prop_assert!(r.is_ok(), "{}", r.unwrap_err());
    }
}

/// The sizes where an 8-bit N stops fitting its type, every time.
#[test]
fn eight_bit_avg_at_the_sizes_that_overflow_the_type() {
    for n in [127, 128, 129, 200, 255, 256, 257, 300] {
        for dt in [DataType::Int8, DataType::Uint8] {
            for op in [RedOp::Avg, RedOp::Sum] {
                let c = Case {
                    func: Func::AllReduce,
                    dt,
                    op,
                    n,
                    count: 3,
                    root: 0,
                    in_place: false,
                    bytes: Some(n as u64),
                };
                with_element_type!(dt, T => run_case::<T>(c)).unwrap();
            }
        }
    }
}

#[test]
fn every_op_dtype_and_redop_once_at_n_5_count_7() {
    for func in Func::COLLECTIVES {
        for dt in DataType::ALL {
            for op in RedOp::BUILTIN {
                for in_place in [false, true] {
                    let c = Case {
                        func,
                        dt,
                        op,
                        n: 5,
                        count: 7,
                        root: 3,
                        in_place: in_place && func != Func::AlltoAll,
                        bytes: None,
                    };
                    with_element_type!(dt, T => run_case::<T>(c)).unwrap();
                }
            }
        }
    }
}

/// Rank `rank`'s correct output with blocks `b1` and `b2` exchanged: swapped
/// in place in an output of N blocks (AllGather, AlltoAll, the Gather
/// root's), or, for the one block a ReduceScatter or Scatter rank gets, rank
/// `b1` given rank `b2`'s block. None where `rank` has no such output.
fn with_blocks_swapped<T: Element>(c: &Case, rank: usize, b1: usize, b2: usize) -> Option<Out<T>> {
    match (c.func, expected::<T>(c, rank)) {
        (Func::ReduceScatter | Func::Scatter, _) => (rank == b1).then(|| expected::<T>(c, b2)),
        (_, Out::Bytes(mut w)) if w.len() == c.n * c.count * c.dt.size() => {
            let block = c.count * c.dt.size();
            let (lo, hi) = w.split_at_mut(b2 * block);
            lo[b1 * block..(b1 + 1) * block].swap_with_slice(&mut hi[..block]);
            Some(Out::Bytes(w))
        }
        _ => None,
    }
}

/// Every swap of two blocks in every rank's correct output of `c` is
/// rejected; returns how many swaps were tried.
fn every_swap_is_caught<T: Element>(c: &Case) -> usize {
    let mut tried = 0;
    for rank in 0..c.n {
        for b1 in 0..c.n {
            for b2 in b1 + 1..c.n {
                if let Some(bad) = with_blocks_swapped::<T>(c, rank, b1, b2) {
                    assert!(
                        check(c, rank, &bad).is_err(),
                        "{c:?}: rank {rank} with blocks {b1} and {b2} swapped passes"
                    );
                    tried += 1;
                }
            }
        }
    }
    tried
}

/// The encoded inputs catch a swapped block, at every size up to 9 ranks,
/// every datatype and reduction, and counts that are multiples of 4 (where
/// the earlier inputs, `(7r + 3j) mod 4`, made block b look like block b+4).
#[test]
fn a_swapped_block_is_always_caught() {
    let mut tried = 0;
    for func in [
        Func::AllGather,
        Func::AlltoAll,
        Func::Gather,
        Func::ReduceScatter,
        Func::Scatter,
    ] {
        for dt in DataType::ALL {
            let ops = if func.reduces() {
                let scalar = if dt.is_float() { 0.5 } else { 2.0 };
                [RedOp::BUILTIN.as_slice(), &[RedOp::PreMulSum(scalar)]].concat()
            } else {
                vec![RedOp::Sum]
            };
            for op in ops {
                for n in 2..=9 {
                    for count in [1, 2, 3, 4, 8, 12, 256] {
                        let c = Case {
                            func,
                            dt,
                            op,
                            n,
                            count,
                            root: n / 2,
                            in_place: false,
                            bytes: None,
                        };
                        tried += with_element_type!(dt, T => every_swap_is_caught::<T>(&c));
                    }
                }
            }
        }
    }
    assert!(tried > 100_000, "only {tried} swaps tried");
}
