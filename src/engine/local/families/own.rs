//! Small calls computed by each rank on its own (the inline path,
//! `exec.rs`): every rank's send buffer has been copied into this rank's
//! memory (`input(r)` is the address of rank r's copy), and rank `me`
//! computes its own results into its own recvbuff. It reads only the
//! copies and writes only its own output, so nothing here races with
//! another rank, in-place forms included (the copies were taken before).
//! Results equal the shared path's bit for bit: both fold reductions as
//! `x_0 ⊕ x_1 ⊕ …` in rank order.

use super::super::memory::Phase;
use crate::core::{Call, Func};
use crate::kernels::reduce_into;
use crate::with_element_type;

/// Rank `me`'s results of `c` on `n` ranks.
pub fn own(p: &Phase, me: usize, n: usize, c: &Call, input: impl Fn(usize) -> usize) {
    let bytes = c.count * c.datatype.size();
    let gather = || {
        for s in 0..n {
            p.copy(input(s), c.recvbuff + s * bytes, bytes);
        }
    };
    match c.func {
        Func::AllReduce => reduce_to(p, c, n, &input, 0),
        Func::Reduce if me == c.root => reduce_to(p, c, n, &input, 0),
        Func::ReduceScatter => reduce_to(p, c, n, &input, me * bytes),
        Func::Broadcast => p.copy(input(c.root), c.recvbuff, bytes),
        Func::Scatter => p.copy(input(c.root) + me * bytes, c.recvbuff, bytes),
        Func::AllGather => gather(),
        Func::Gather if me == c.root => gather(),
        Func::Reduce | Func::Gather => {}
        Func::AlltoAll => {
            for s in 0..n {
                p.copy(input(s) + me * bytes, c.recvbuff + s * bytes, bytes);
            }
        }
        Func::Send | Func::Recv => unreachable!("point-to-point calls do not run as collectives"),
    }
}

/// `recvbuff = x_0 ⊕ … ⊕ x_{n-1}`, each `x_s` the `count` elements at
/// `input(s) + offset`.
fn reduce_to(p: &Phase, c: &Call, n: usize, input: &impl Fn(usize) -> usize, offset: usize) {
    with_element_type!(c.datatype, T => {
        let out = p.view_mut::<T>(c.recvbuff, c.count);
        reduce_into(out, c.op, n, |s| p.view::<T>(input(s) + offset, c.count));
    })
}
