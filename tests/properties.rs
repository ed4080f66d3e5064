//! Property tests: random communicator sizes, counts, datatypes, ops, roots
//! and pointer forms; every rank's output must equal a closed-form reference
//! element by element. Inputs are small integers so that every reduction is
//! exact or, where a type rounds, the reference rounds at each step exactly
//! as the contract defines (fold in rank order, result rounded to the type).

use proptest::prelude::*;
use rankwise::core::{DataType, Element, Func, RedOp};
use rankwise::{NULL, local, with_element_type};

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

/// Rank r's input element j, as an exact small number (or, for a case with
/// a byte seed, any value of the 8-bit type).
fn input(c: &Case, r: usize, j: usize) -> f64 {
    if let Some(seed) = c.bytes {
        let byte = (mix(seed ^ mix(r as u64) ^ mix(j as u64).rotate_left(17)) >> 56) as u8;
        return if signed(c.dt) {
            f64::from(byte as i8)
        } else {
            f64::from(byte)
        };
    }
    if c.op == RedOp::Prod {
        return if r == 0 && j.is_multiple_of(3) {
            2.0
        } else if signed(c.dt) && (r + j) % 2 == 1 {
            -1.0
        } else {
            1.0
        };
    }
    let v = ((r * 7 + j * 3) % 4) as f64;
    if signed(c.dt) && (r + j).is_multiple_of(3) {
        -v
    } else {
        v
    }
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
    let premul = |s: f64| {
        let s = round(s);
        v.iter()
            .skip(1)
            .fold(round(v[0] * s), |acc, x| round(acc + round(x * s)))
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

/// Expected output of `rank`, or None where the contract defines none.
fn expected<T: Element>(c: &Case, rank: usize) -> Option<Vec<T>> {
    let (n, q) = (c.n, c.count);
    let x = |s: usize, j: usize| T::from_f64(input(c, s, j));
    let red = |j: usize| {
        reduce_ref::<T>(
            c.op,
            &(0..n)
                .map(|s| T::from_f64(input(c, s, j)).to_f64())
                .collect::<Vec<_>>(),
        )
    };
    Some(match c.func {
        Func::AllReduce => (0..q).map(red).collect(),
        Func::Reduce if rank == c.root => (0..q).map(red).collect(),
        Func::Broadcast => (0..q).map(|j| x(c.root, j)).collect(),
        Func::AllGather => (0..n * q).map(|i| x(i / q.max(1), i % q.max(1))).collect(),
        Func::ReduceScatter => (0..q).map(|j| red(rank * q + j)).collect(),
        Func::AlltoAll => (0..n * q)
            .map(|i| x(i / q.max(1), rank * q + i % q.max(1)))
            .collect(),
        Func::Gather if rank == c.root => {
            (0..n * q).map(|i| x(i / q.max(1), i % q.max(1))).collect()
        }
        Func::Scatter => (0..q).map(|j| x(c.root, rank * q + j)).collect(),
        _ => return None,
    })
}

/// Rank `rank`'s send buffer contents (elements, before any in-place placement).
fn send_data<T: Element>(c: &Case, rank: usize) -> Vec<T> {
    let l = rankwise::core::layout(c.func, c.n, rank, c.root, c.count);
    (0..l.send_elems)
        .map(|j| T::from_f64(input(c, rank, j)))
        .collect()
}

fn run_case<T: Element>(c: Case) -> Result<(), String> {
    let outs = local::launch(c.n, |comm| {
        let me = comm.rank();
        let dt = T::DTYPE;
        let l = rankwise::core::layout(c.func, c.n, me, c.root, c.count);
        let data: Vec<T> = send_data(&c, me);
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
        if !data.is_empty() {
            comm.write(send, &data)?;
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
        match expected::<T>(&c, me) {
            Some(_) => Ok(Some(comm.read::<T>(recv, l.recv_elems)?)),
            None => Ok(None),
        }
    })
    .map_err(|e| format!("{c:?}: {e}"))?;
    for (r, got) in outs.into_iter().enumerate() {
        let want = expected::<T>(&c, r);
        if got != want {
            return Err(format!("{c:?} rank {r}: got {got:?}, want {want:?}"));
        }
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
