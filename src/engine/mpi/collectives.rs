//! One collective on the mpi engine: the MPI collective that computes it,
//! with NCCL's semantics kept where MPI's differ.
//!
//! It runs only after the launch's agreement has shown that every rank of
//! the communicator posted this same call (same op, count, datatype,
//! reduction, root, position), so every rank is on its way into the same
//! MPI collective with matching arguments: the data moves through MPI's
//! blocking call, the one MPI tunes its algorithms for, with no deadline
//! of its own. Nothing of the program runs between the agreement and this
//! call; a rank can still miss it only by dying there, and mpirun then
//! ends the whole job.
//!
//! - Reductions use the user-defined ops of `ops` (NCCL's element
//!   arithmetic for every datatype). Avg on floats and PreMulSum multiply
//!   each rank's input by the scalar first (1/N rounded to the type, for
//!   Avg) and sum; Avg on integers sums and then divides by N toward zero.
//! - In-place forms (NCCL's pointer equations) run through a scratch copy,
//!   since MPI forbids aliased send and receive buffers and its rsmpi
//!   bindings do not expose MPI_IN_PLACE.
//! - Broadcast is out of place as in NCCL: the root copies sendbuff to its
//!   recvbuff, then MPI broadcasts recvbuff.
//! - A non-root Reduce's or Gather's recvbuff is never written.
//! - Float reductions whose inputs are scaled (Avg, PreMulSum) are not
//!   left to MPI's reduction order: the scaled inputs are inexact, so the
//!   order of the additions shows in the last bits. Their inputs are
//!   gathered (Allgather, Gather to the root, Alltoall for ReduceScatter)
//!   and folded in rank order, as the local engine folds them, so the
//!   results are bitwise identical on every engine.

use super::{MpiEngine, ffi, ops};
use crate::core::{Call, Element, Func, RedOp, Result};
use crate::kernels::Arith;

/// Bytes with 16-byte alignment, for copies of inputs and outputs.
struct Scratch(Vec<u128>);

impl Scratch {
    fn copy_of(addr: usize, bytes: usize) -> Scratch {
        let s = Scratch(vec![0; bytes.div_ceil(16)]);
        ffi::copy(addr, s.addr(), bytes);
        s
    }
    fn zeroed(bytes: usize) -> Scratch {
        Scratch(vec![0; bytes.div_ceil(16)])
    }
    fn addr(&self) -> usize {
        self.0.as_ptr() as usize
    }
}

fn overlaps(a: usize, a_len: usize, b: usize, b_len: usize) -> bool {
    a != 0 && b != 0 && a_len > 0 && b_len > 0 && a < b + b_len && b < a + a_len
}

/// The input MPI reduces: `send` itself, or a scaled or unaliased copy.
fn reduce_input(
    c: &Call,
    n: usize,
    send: usize,
    elems: usize,
    aliased: bool,
) -> (Option<Scratch>, usize) {
    let bytes = elems * c.datatype.size();
    let scale = match c.op {
        RedOp::PreMulSum(s) => Some(s),
        RedOp::Avg if c.datatype.is_float() => Some(1.0 / n as f64),
        _ => None,
    };
    if scale.is_none() && !aliased {
        return (None, send);
    }
    let s = Scratch::copy_of(send, bytes);
    if let Some(scalar) = scale {
        crate::with_element_type!(c.datatype, T => {
            let k = T::from_f64(scalar);
            ffi::map_elems::<T>(s.addr(), elems, |x| T::mul(x, k));
        });
    }
    let at = s.addr();
    (Some(s), at)
}

/// Integer Avg: the sums at `addr` divided by N toward zero.
fn finish_avg(c: &Call, n: usize, addr: usize, elems: usize) {
    if c.op == RedOp::Avg && !c.datatype.is_float() && addr != 0 {
        crate::with_element_type!(c.datatype, T => ffi::map_elems::<T>(addr, elems, |x| T::div_n(x, n)));
    }
}

/// Whether the reduction's result depends on the order of its steps in a
/// way the suite sees: float inputs scaled before the sum.
fn ordered(c: &Call) -> bool {
    c.datatype.is_float() && matches!(c.op, RedOp::Avg | RedOp::PreMulSum(_))
}

/// Folds the `n` gathered blocks of `q` elements at `from` (`stride` bytes
/// apart) into `to`.
pub fn fold(c: &Call, n: usize, from: usize, stride: usize, q: usize, to: usize) {
    crate::with_element_type!(c.datatype, T => ffi::fold_ranks::<T>(c.op, n, from, stride, q, to));
}

pub fn run(e: &MpiEngine, c: &Call) -> Result<()> {
    let (n, me) = (e.size, e.rank);
    let size = c.datatype.size();
    let q = c.count;
    let qb = q * size;
    let cnt = ffi::int(q, c.func.name())?;
    let qbytes = ffi::int(qb, c.func.name())?;
    let root = ffi::int(c.root, c.func.name())?;
    let comm = e.comm;
    match c.func {
        Func::AllReduce if ordered(c) => {
            let all = Scratch::zeroed(n * qb);
            ffi::allgather(comm, c.sendbuff, all.addr(), qbytes)?;
            fold(c, n, all.addr(), qb, q, c.recvbuff);
        }
        Func::Reduce if ordered(c) => {
            let at_root = me == c.root;
            let all = at_root.then(|| Scratch::zeroed(n * qb));
            let recv = all.as_ref().map_or(0, |s| s.addr());
            ffi::gather(comm, c.sendbuff, recv, qbytes, root)?;
            if let Some(all) = all {
                fold(c, n, all.addr(), qb, q, c.recvbuff);
            }
        }
        Func::ReduceScatter if ordered(c) => {
            let mine = Scratch::zeroed(n * qb);
            ffi::alltoall(comm, c.sendbuff, mine.addr(), qbytes)?;
            fold(c, n, mine.addr(), qb, q, c.recvbuff);
        }
        Func::AllReduce => {
            let (_keep, input) = reduce_input(c, n, c.sendbuff, q, c.sendbuff == c.recvbuff);
            let (dt, op) = ops::get(c.datatype, c.op)?;
            ffi::allreduce(comm, input, c.recvbuff, cnt, dt, op)?;
            finish_avg(c, n, c.recvbuff, q);
        }
        Func::Reduce => {
            let aliased = me == c.root && overlaps(c.sendbuff, qb, c.recvbuff, qb);
            let (_keep, input) = reduce_input(c, n, c.sendbuff, q, aliased);
            let recv = if me == c.root { c.recvbuff } else { 0 };
            let (dt, op) = ops::get(c.datatype, c.op)?;
            ffi::reduce(comm, input, recv, cnt, dt, op, root)?;
            finish_avg(c, n, recv, q);
        }
        Func::ReduceScatter => {
            let aliased = overlaps(c.sendbuff, n * qb, c.recvbuff, qb);
            let (_keep, input) = reduce_input(c, n, c.sendbuff, n * q, false);
            let out = aliased.then(|| Scratch::zeroed(qb));
            let recv = out.as_ref().map_or(c.recvbuff, |s| s.addr());
            let (dt, op) = ops::get(c.datatype, c.op)?;
            ffi::reduce_scatter_block(comm, input, recv, cnt, dt, op)?;
            finish_avg(c, n, recv, q);
            if let Some(s) = out {
                ffi::copy(s.addr(), c.recvbuff, qb);
            }
        }
        Func::Broadcast => {
            if me == c.root {
                ffi::copy(c.sendbuff, c.recvbuff, qb);
            }
            ffi::bcast(comm, c.recvbuff, qbytes, root)?;
        }
        Func::AllGather => {
            let copy = overlaps(c.sendbuff, qb, c.recvbuff, n * qb)
                .then(|| Scratch::copy_of(c.sendbuff, qb));
            let send = copy.as_ref().map_or(c.sendbuff, |s| s.addr());
            ffi::allgather(comm, send, c.recvbuff, qbytes)?;
        }
        Func::AlltoAll => {
            ffi::alltoall(comm, c.sendbuff, c.recvbuff, qbytes)?;
        }
        Func::Gather => {
            let at_root = me == c.root;
            let copy = (at_root && overlaps(c.sendbuff, qb, c.recvbuff, n * qb))
                .then(|| Scratch::copy_of(c.sendbuff, qb));
            let send = copy.as_ref().map_or(c.sendbuff, |s| s.addr());
            let recv = if at_root { c.recvbuff } else { 0 };
            ffi::gather(comm, send, recv, qbytes, root)?;
        }
        Func::Scatter => {
            let at_root = me == c.root;
            let out = (at_root && overlaps(c.sendbuff, n * qb, c.recvbuff, qb))
                .then(|| Scratch::zeroed(qb));
            let recv = out.as_ref().map_or(c.recvbuff, |s| s.addr());
            let send = if at_root { c.sendbuff } else { 0 };
            ffi::scatter(comm, send, recv, qbytes, root)?;
            if let Some(s) = out {
                ffi::copy(s.addr(), c.recvbuff, qb);
            }
        }
        Func::Send | Func::Recv => unreachable!("point-to-point calls run in p2p"),
    }
    Ok(())
}
