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
}

fn signed(dt: DataType) -> bool {
    !matches!(dt, DataType::Uint8 | DataType::Uint32 | DataType::Uint64)
}

/// Rank r's input element j, as an exact small number.
fn input(c: &Case, r: usize, j: usize) -> f64 {
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

/// The reduction over ranks of element values `v`, by the contract's definition.
fn reduce_ref<T: Element>(op: RedOp, v: &[f64]) -> T {
    let round = |x: f64| T::from_f64(x).to_f64();
    let n = v.len();
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
        RedOp::Avg if T::DTYPE.is_float() => premul(1.0 / n as f64),
        RedOp::Avg => (v.iter().sum::<f64>() / n as f64).trunc(),
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
                let base = comm.alloc_elems(big, dt);
                let off = eq.send_minus_recv * dt.size() as isize;
                if off >= 0 {
                    (base + off as usize, base)
                } else {
                    (base, base + (-off) as usize)
                }
            }
            None => {
                let s = if l.send_elems > 0 {
                    comm.alloc_elems(l.send_elems, dt)
                } else {
                    NULL
                };
                let r = if l.recv_elems > 0 {
                    comm.alloc_elems(l.recv_elems, dt)
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
            }
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
                    };
                    with_element_type!(dt, T => run_case::<T>(c)).unwrap();
                }
            }
        }
    }
}
