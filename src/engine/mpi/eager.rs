//! Small collectives that travel inside the agreement message. Every
//! launch already sends each rank's post to every rank before its data
//! moves; when a single collective's whole input from every rank fits in a
//! few hundred bytes, that input rides along in the same message, and each
//! rank computes its output from the gathered inputs: one exchange instead
//! of two, which is most of the call's time at these sizes. Reductions
//! fold the inputs in rank order with the local engine's arithmetic, so
//! their results are bitwise those of the local engine.
//!
//! Whether a call goes this way depends only on what every rank has just
//! agreed on (the function, count, datatype and N), so either every rank
//! finishes the call here or every rank runs it through MPI.

use super::collectives::fold;
use super::ffi;
use crate::core::{Call, Func};

/// Input bytes a rank may carry in its agreement message.
pub const BYTES: usize = 256;
/// The same, in the exchange's 8-byte words.
pub const WORDS: usize = BYTES / 8;

/// This rank's input to `c` as (address, bytes), when every rank's input
/// fits in [`BYTES`]; None when the call is too large to carry.
pub fn payload(c: &Call, n: usize, me: usize) -> Option<(usize, usize)> {
    let qb = c.count.checked_mul(c.datatype.size())?;
    let all = qb.checked_mul(n)?;
    let at_root = me == c.root;
    let (largest, mine) = match c.func {
        Func::AllReduce | Func::Reduce | Func::AllGather | Func::Gather => (qb, qb),
        Func::Broadcast => (qb, if at_root { qb } else { 0 }),
        Func::ReduceScatter | Func::AlltoAll => (all, all),
        Func::Scatter => (all, if at_root { all } else { 0 }),
        Func::Send | Func::Recv => return None,
    };
    (largest <= BYTES).then_some((if mine > 0 { c.sendbuff } else { 0 }, mine))
}

/// Writes this rank's output of `c` from every rank's carried input: rank
/// r's at `inputs + r * stride`. A non-root Reduce's or Gather's recvbuff
/// is not touched.
pub fn finish(c: &Call, n: usize, me: usize, inputs: usize, stride: usize) {
    let qb = c.count * c.datatype.size();
    let of = |r: usize| inputs + r * stride;
    match c.func {
        Func::AllReduce => fold(c, n, inputs, stride, c.count, c.recvbuff),
        Func::Reduce if me == c.root => fold(c, n, inputs, stride, c.count, c.recvbuff),
        Func::ReduceScatter => fold(c, n, inputs + me * qb, stride, c.count, c.recvbuff),
        Func::Broadcast => ffi::copy(of(c.root), c.recvbuff, qb),
        Func::Scatter => ffi::copy(of(c.root) + me * qb, c.recvbuff, qb),
        Func::AllGather => (0..n).for_each(|r| ffi::copy(of(r), c.recvbuff + r * qb, qb)),
        Func::Gather if me == c.root => {
            (0..n).for_each(|r| ffi::copy(of(r), c.recvbuff + r * qb, qb))
        }
        Func::AlltoAll => (0..n).for_each(|r| ffi::copy(of(r) + me * qb, c.recvbuff + r * qb, qb)),
        Func::Reduce | Func::Gather | Func::Send | Func::Recv => {}
    }
}
