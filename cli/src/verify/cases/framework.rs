//! Framework cases: the typed face, called the way a torch.distributed user
//! calls it (in-place `all_reduce`, `broadcast` and `reduce`; lists and flat
//! tensors for AllGather; `all_to_all_single` with and without split sizes;
//! `batch_isend_irecv`). The seed's 14 variants, plus the typed forms of the
//! other entry points for the full suite.

use super::{Actual, Expect, Outcome};
use crate::verify::reference::{self, encode, exact, uneven_split};
use rankwise::api::{Comm, P2POp};
use rankwise::core::trace::fmt_ptr;
use rankwise::core::{DataType, Element, ErrorKind, Func, RedOp, Scalar, in_place};

/// One typed-face case.
#[derive(Debug, Clone, PartialEq)]
pub enum Kind {
    /// `all_reduce` SUM of int64 `[r+1, r+10, 2r]`
    AllReduceSum,
    /// `all_reduce` MAX of float32 `[r, -r, r/2 + 1/4]`
    AllReduceMax,
    /// `all_reduce` of an empty float32 tensor
    AllReduceZero,
    /// `broadcast` of int64 `r*1000 + j`, 4 elements
    Broadcast { root: usize },
    /// `reduce` (in place, as torch's) SUM of int64 `[r+1, (r+1)*10]`
    Reduce { root: usize },
    /// `all_gather` to a list, int32 `[r, r+10, r+100]`
    AllGatherList,
    /// `all_gather_into_tensor`, same inputs
    AllGatherFlat,
    /// `reduce_scatter_tensor`, int64 `r*100 + i` over 3N elements, 3 out per rank
    ReduceScatter,
    /// `all_to_all_single` with equal split sizes given: N Send/Recv pairs
    AlltoAllEqualSplits,
    /// `all_to_all_single` with splits `s + d + 1`
    AlltoAllUneven,
    /// `batch_isend_irecv` ring: send `[r, r+100]` to r+1, receive from r-1
    Ring,
    /// `broadcast` with root N: rejected on every rank
    InvalidRoot,
    /// `gather` (or `gather_in_place`) of q encoded elements
    Gather {
        root: usize,
        in_place: bool,
        q: usize,
    },
    /// `scatter` (or `scatter_in_place`) of N·q encoded elements
    Scatter {
        root: usize,
        in_place: bool,
        q: usize,
    },
    /// `all_to_all_single` without split sizes: one ncclAlltoAll
    AlltoAllSingle { q: usize },
    /// out-of-place `reduce`: the root gets `Some`, others `None`
    ReduceTo { root: usize, q: usize },
    /// `all_reduce_into`
    AllReduceInto { op: RedOp, q: usize },
    /// `all_gather_in_place`
    AllGatherInPlace { q: usize },
    /// `reduce_scatter_in_place`
    ReduceScatterInPlace { op: RedOp, q: usize },
}

fn vals<T: Element>(v: &[T]) -> Vec<Scalar> {
    v.iter().map(|x| x.to_scalar()).collect()
}

fn typed<T: Element>(v: &[Scalar]) -> Vec<T> {
    v.iter().map(|x| T::from_scalar(*x)).collect()
}

fn ptr<T>(s: &[T]) -> String {
    fmt_ptr(s.as_ptr() as usize)
}

impl Kind {
    pub fn count(&self, n: usize, rank: usize) -> usize {
        use Kind::*;
        match self {
            AllReduceSum | AllReduceMax | AllGatherList | AllGatherFlat | ReduceScatter => 3,
            AllReduceZero => 0,
            Broadcast { .. } | InvalidRoot => 4,
            Reduce { .. } | AlltoAllEqualSplits | Ring => 2,
            AlltoAllUneven => (0..n).map(|d| uneven_split(rank, d)).sum(),
            Gather { q, .. }
            | Scatter { q, .. }
            | AlltoAllSingle { q }
            | ReduceTo { q, .. }
            | AllReduceInto { q, .. }
            | AllGatherInPlace { q }
            | ReduceScatterInPlace { q, .. } => *q,
        }
    }

    /// Rank s's input for the generic (full-suite) kinds, as the call's send
    /// buffer: q elements, or N·q in blocks by destination.
    fn generic_input(&self, dt: DataType, n: usize, s: usize) -> Vec<Scalar> {
        use Kind::*;
        let formula = match self {
            Gather { q, .. } | AllGatherInPlace { q } => (0..*q)
                .map(|o| reference::movement_value(dt, n, *q, s, 0, o))
                .collect(),
            Scatter { q, .. } | AlltoAllSingle { q } => (0..n * q)
                .map(|j| reference::movement_value(dt, n, *q, s, j / q, j % q))
                .collect(),
            ReduceTo { q, .. } => {
                reference::matrix_input(Func::Reduce, RedOp::Sum, dt, n, s, *q, *q)
            }
            AllReduceInto { op, q } => {
                reference::matrix_input(Func::AllReduce, *op, dt, n, s, *q, *q)
            }
            ReduceScatterInPlace { op, q } => {
                reference::matrix_input(Func::ReduceScatter, *op, dt, n, s, *q, n * q)
            }
            _ => Vec::new(),
        };
        exact(dt, &formula)
    }

    pub fn expect(&self, dt: DataType, n: usize, rank: usize) -> Expect {
        use Kind::*;
        let seed = |v: Vec<f64>| exact(dt, &v);
        let v = match self {
            AllReduceSum => seed(reference::seed_all_reduce_sum(n)),
            AllReduceMax => seed(reference::seed_all_reduce_max(n)),
            AllReduceZero => Vec::new(),
            Broadcast { root } => seed(reference::seed_broadcast(*root, 1000, 4)),
            Reduce { root } | ReduceTo { root, .. } | Gather { root, .. } if rank != *root => {
                return Expect::NoOutput(if matches!(self, Gather { .. }) {
                    "no output on this rank: gather sends only"
                } else {
                    "no output contract"
                });
            }
            Reduce { .. } => seed(reference::seed_reduce(n)),
            AllGatherList | AllGatherFlat => seed(reference::seed_all_gather(n)),
            ReduceScatter => seed(reference::seed_reduce_scatter(n, rank)),
            AlltoAllEqualSplits => seed(reference::all_to_all_equal(n, 2, rank)),
            AlltoAllUneven => seed(reference::all_to_all_uneven(n, rank)),
            Ring => seed(reference::ring(n, rank)),
            InvalidRoot => return Expect::Reject(ErrorKind::InvalidRoot),
            _ => {
                let inputs: Vec<Vec<Scalar>> =
                    (0..n).map(|s| self.generic_input(dt, n, s)).collect();
                let (func, op, root, q) = match self {
                    Gather { root, q, .. } => (Func::Gather, RedOp::Sum, *root, *q),
                    Scatter { root, q, .. } => (Func::Scatter, RedOp::Sum, *root, *q),
                    AlltoAllSingle { q } => (Func::AlltoAll, RedOp::Sum, 0, *q),
                    ReduceTo { root, q } => (Func::Reduce, RedOp::Sum, *root, *q),
                    AllReduceInto { op, q } => (Func::AllReduce, *op, 0, *q),
                    AllGatherInPlace { q } => (Func::AllGather, RedOp::Sum, 0, *q),
                    ReduceScatterInPlace { op, q } => (Func::ReduceScatter, *op, 0, *q),
                    _ => unreachable!("seed kinds are handled above"),
                };
                reference::contract_output(func, op, dt, rank, root, q, &inputs).unwrap_or_default()
            }
        };
        Expect::Values(v)
    }

    pub fn relation(&self, _n: usize, rank: usize) -> String {
        use Kind::*;
        let eq = |f: Func, root: usize| {
            in_place(f, rank, root, 1)
                .map(|ip| ip.equation.to_string())
                .unwrap_or_default()
        };
        match self {
            AllReduceSum | AllReduceMax | AllReduceZero | Broadcast { .. } | Reduce { .. } => {
                "sendbuff == recvbuff".into()
            }
            AllGatherList | AllGatherFlat => "separate q input and N*q output".into(),
            ReduceScatter => "separate N*q input and q output".into(),
            AlltoAllEqualSplits | AlltoAllSingle { .. } => {
                "separate N*q input and N*q output".into()
            }
            AlltoAllUneven => "separate input and output, sized by the split lists".into(),
            Ring => "separate send and recv buffers".into(),
            InvalidRoot => "rejected before any buffer is used".into(),
            Gather { root, in_place, .. } => match (rank == *root, in_place) {
                (true, true) => eq(Func::Gather, *root),
                (true, false) => "separate q input and N*q output on the root".into(),
                (false, true) => "no in-place form off the root: recvbuff == NULL".into(),
                (false, false) => "recvbuff == NULL (non-root)".into(),
            },
            Scatter { root, in_place, .. } => match (rank == *root, in_place) {
                (true, true) => eq(Func::Scatter, *root),
                (true, false) => "separate N*q input on the root and q output".into(),
                (false, true) => "no in-place form off the root: sendbuff == NULL".into(),
                (false, false) => "sendbuff == NULL (non-root)".into(),
            },
            ReduceTo { root, .. } if rank != *root => "recvbuff == NULL (non-root)".into(),
            ReduceTo { .. } | AllReduceInto { .. } => "sendbuff != recvbuff".into(),
            AllGatherInPlace { .. } => eq(Func::AllGather, 0),
            ReduceScatterInPlace { .. } => eq(Func::ReduceScatter, 0),
        }
    }

    pub fn run(&self, dt: DataType, comm: &mut Comm) -> Outcome {
        match self {
            Kind::Gather { .. }
            | Kind::Scatter { .. }
            | Kind::AlltoAllSingle { .. }
            | Kind::ReduceTo { .. }
            | Kind::AllReduceInto { .. }
            | Kind::AllGatherInPlace { .. }
            | Kind::ReduceScatterInPlace { .. } => {
                rankwise::with_element_type!(dt, T => self.run_generic::<T>(dt, comm))
            }
            _ => self.run_seed(comm),
        }
    }

    fn run_seed(&self, c: &mut Comm) -> Outcome {
        use Kind::*;
        let (n, me) = (c.size(), c.rank());
        let r = me as i64;
        let values = |res: rankwise::Result<Vec<Scalar>>, addr: String| match res {
            Ok(v) => Outcome {
                actual: Actual::Values(v),
                addresses: addr,
                problems: Vec::new(),
            },
            Err(e) => Outcome::error(e, addr),
        };
        match self {
            AllReduceSum => {
                let mut x = vec![r + 1, r + 10, r * 2];
                let addr = format!("tensor {}", ptr(&x));
                values(c.all_reduce(&mut x, RedOp::Sum).map(|()| vals(&x)), addr)
            }
            AllReduceMax => {
                let rf = me as f32;
                // `0.0 - r`, not `-r`: rank 0 contributes +0, so the maximum is +0 exactly
                let mut x = vec![rf, 0.0 - rf, rf * 0.5 + 0.25];
                let addr = format!("tensor {}", ptr(&x));
                values(c.all_reduce(&mut x, RedOp::Max).map(|()| vals(&x)), addr)
            }
            AllReduceZero => {
                let mut x: Vec<f32> = Vec::new();
                let addr = format!("tensor {}", ptr(&x));
                values(c.all_reduce(&mut x, RedOp::Sum).map(|()| vals(&x)), addr)
            }
            Broadcast { root } => {
                let mut x: Vec<i64> = (0..4).map(|j| r * 1000 + j).collect();
                let addr = format!("tensor {}", ptr(&x));
                values(c.broadcast(&mut x, *root).map(|()| vals(&x)), addr)
            }
            Reduce { root } => {
                let x = vec![r + 1, (r + 1) * 10];
                let addr = format!("tensor {}", ptr(&x));
                match c.reduce_in_place(x, *root, RedOp::Sum) {
                    Ok(Some(v)) => values(Ok(vals(&v)), addr),
                    // a non-root gets nothing back: its buffer is never read
                    Ok(None) => Outcome {
                        actual: Actual::Nothing,
                        addresses: addr,
                        problems: Vec::new(),
                    },
                    Err(e) => Outcome::error(e, addr),
                }
            }
            AllGatherList => {
                let x = [me as i32, me as i32 + 10, me as i32 + 100];
                let addr = format!("input {}", ptr(&x));
                let res = c.all_gather(&x).and_then(|list| {
                    if list.len() != n || list.iter().any(|b| b.len() != 3) {
                        return Err(rankwise::Error::new(
                            ErrorKind::BadLength,
                            format!(
                                "all_gather returned {} blocks, expected {n} of 3",
                                list.len()
                            ),
                        ));
                    }
                    Ok(list.iter().flat_map(|b| vals(b)).collect())
                });
                values(res, addr)
            }
            AllGatherFlat => {
                let x = [me as i32, me as i32 + 10, me as i32 + 100];
                let mut out = vec![0i32; 3 * n];
                let addr = format!("input {} output {}", ptr(&x), ptr(&out));
                values(
                    c.all_gather_into_tensor(&mut out, &x).map(|()| vals(&out)),
                    addr,
                )
            }
            ReduceScatter => {
                let input: Vec<i64> = (0..3 * n as i64).map(|i| i + r * 100).collect();
                let mut out = vec![0i64; 3];
                let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                values(
                    c.reduce_scatter_tensor(&mut out, &input, RedOp::Sum)
                        .map(|()| vals(&out)),
                    addr,
                )
            }
            AlltoAllEqualSplits => {
                let input: Vec<i64> = (0..n)
                    .flat_map(|d| (0..2).map(move |o| encode(me, d, o) as i64))
                    .collect();
                let mut out = vec![0i64; 2 * n];
                let splits = vec![2; n];
                let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                values(
                    c.all_to_all_single(&mut out, &input, Some(&splits), Some(&splits))
                        .map(|()| vals(&out)),
                    addr,
                )
            }
            AlltoAllUneven => {
                let in_splits: Vec<usize> = (0..n).map(|d| uneven_split(me, d)).collect();
                let out_splits: Vec<usize> = (0..n).map(|s| uneven_split(s, me)).collect();
                let input: Vec<i64> = (0..n)
                    .flat_map(|d| (0..uneven_split(me, d)).map(move |o| encode(me, d, o) as i64))
                    .collect();
                let mut out = vec![0i64; out_splits.iter().sum()];
                let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                values(
                    c.all_to_all_single(&mut out, &input, Some(&out_splits), Some(&in_splits))
                        .map(|()| vals(&out)),
                    addr,
                )
            }
            Ring => {
                let (next, prev) = ((me + 1) % n, (me + n - 1) % n);
                let send = [r, r + 100];
                let mut recv = [0i64; 2];
                let addr = format!("send {} recv {}", ptr(&send), ptr(&recv));
                values(
                    c.batch_isend_irecv(&mut [
                        P2POp::Isend(&send, next),
                        P2POp::Irecv(&mut recv, prev),
                    ])
                    .map(|()| vals(&recv)),
                    addr,
                )
            }
            InvalidRoot => {
                let mut x = vec![1i64; 4];
                let addr = format!("tensor {}", ptr(&x));
                values(c.broadcast(&mut x, n).map(|()| vals(&x)), addr)
            }
            _ => unreachable!("generic kinds run in run_generic"),
        }
    }

    fn run_generic<T: Element>(&self, dt: DataType, c: &mut Comm) -> Outcome {
        use Kind::*;
        let (n, me) = (c.size(), c.rank());
        let input: Vec<T> = typed(&self.generic_input(dt, n, me));
        let ok = |v: Vec<Scalar>, addr: String| Outcome {
            actual: Actual::Values(v),
            addresses: addr,
            problems: Vec::new(),
        };
        let nothing = |addr: String| Outcome {
            actual: Actual::Nothing,
            addresses: addr,
            problems: Vec::new(),
        };
        let done = |res: rankwise::Result<Outcome>, addr: &str| {
            res.unwrap_or_else(|e| Outcome::error(e, addr.to_string()))
        };
        match self {
            Gather {
                root,
                in_place: false,
                q,
            } => {
                if me == *root {
                    let mut out = vec![T::default(); n * q];
                    let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                    let res = c
                        .gather(&input, Some(&mut out), *root)
                        .map(|()| ok(vals(&out), addr.clone()));
                    done(res, &addr)
                } else {
                    let addr = format!("input {} output (nil)", ptr(&input));
                    done(
                        c.gather(&input, None, *root)
                            .map(|()| nothing(addr.clone())),
                        &addr,
                    )
                }
            }
            Gather {
                root,
                in_place: true,
                q,
            } => {
                if me == *root {
                    let mut buf = vec![T::default(); n * q];
                    buf[root * q..(root + 1) * q].copy_from_slice(&input);
                    let addr =
                        format!("buffer {} (own block at +{} elements)", ptr(&buf), root * q);
                    done(
                        c.gather_in_place(&mut buf, *root)
                            .map(|()| ok(vals(&buf), addr.clone())),
                        &addr,
                    )
                } else {
                    let mut buf = input.clone();
                    let addr = format!("buffer {}", ptr(&buf));
                    done(
                        c.gather_in_place(&mut buf, *root)
                            .map(|()| nothing(addr.clone())),
                        &addr,
                    )
                }
            }
            Scatter {
                root,
                in_place: false,
                q,
            } => {
                let mut out = vec![T::default(); *q];
                if me == *root {
                    let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                    done(
                        c.scatter(Some(&input), &mut out, *root)
                            .map(|()| ok(vals(&out), addr.clone())),
                        &addr,
                    )
                } else {
                    let addr = format!("input (nil) output {}", ptr(&out));
                    done(
                        c.scatter(None, &mut out, *root)
                            .map(|()| ok(vals(&out), addr.clone())),
                        &addr,
                    )
                }
            }
            Scatter {
                root,
                in_place: true,
                q,
            } => {
                if me == *root {
                    let mut buf = input.clone();
                    let addr =
                        format!("buffer {} (own block at +{} elements)", ptr(&buf), root * q);
                    let res = c
                        .scatter_in_place(&mut buf, *root)
                        .map(|()| ok(vals(&buf[root * q..(root + 1) * q]), addr.clone()));
                    done(res, &addr)
                } else {
                    let mut buf = vec![T::default(); *q];
                    let addr = format!("buffer {}", ptr(&buf));
                    done(
                        c.scatter_in_place(&mut buf, *root)
                            .map(|()| ok(vals(&buf), addr.clone())),
                        &addr,
                    )
                }
            }
            AlltoAllSingle { q } => {
                let mut out = vec![T::default(); n * q];
                let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                done(
                    c.all_to_all_single(&mut out, &input, None, None)
                        .map(|()| ok(vals(&out), addr.clone())),
                    &addr,
                )
            }
            ReduceTo { root, .. } => {
                let addr = format!("input {}", ptr(&input));
                let res = c.reduce(&input, *root, RedOp::Sum).map(|o| match o {
                    Some(v) => ok(vals(&v), addr.clone()),
                    None => nothing(addr.clone()),
                });
                done(res, &addr)
            }
            AllReduceInto { op, q } => {
                let mut out = vec![T::default(); *q];
                let addr = format!("input {} output {}", ptr(&input), ptr(&out));
                done(
                    c.all_reduce_into(&input, &mut out, *op)
                        .map(|()| ok(vals(&out), addr.clone())),
                    &addr,
                )
            }
            AllGatherInPlace { q } => {
                let mut buf = vec![T::default(); n * q];
                buf[me * q..(me + 1) * q].copy_from_slice(&input);
                let addr = format!("buffer {} (own block at +{} elements)", ptr(&buf), me * q);
                done(
                    c.all_gather_in_place(&mut buf)
                        .map(|()| ok(vals(&buf), addr.clone())),
                    &addr,
                )
            }
            ReduceScatterInPlace { op, .. } => {
                let mut buf = input.clone();
                let addr = format!("buffer {}", ptr(&buf));
                done(
                    c.reduce_scatter_in_place(&mut buf, *op)
                        .map(|s| ok(vals(s), addr.clone())),
                    &addr,
                )
            }
            _ => unreachable!("seed kinds run in run_seed"),
        }
    }
}
