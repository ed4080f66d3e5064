//! AllReduce, Reduce, ReduceScatter.
//!
//! AllReduce and Reduce split the `count` elements into N contiguous shares
//! (whole cache lines); rank r reduces share r across all N inputs, chunk by
//! chunk into an L1-sized accumulator, and writes the result to every output
//! (AllReduce) or the root's (Reduce). Share r of every input and output is
//! touched by rank r alone, and within a chunk all reads precede all writes,
//! so in-place calls (send == recv) are safe. Each output element is computed
//! once and copied, so all ranks receive bitwise-identical results.
//!
//! ReduceScatter: rank r computes its own q outputs from block r of every
//! input. Other ranks read other blocks, so the in-place form (recv = block r
//! of r's own send) is safe for the same reason.

use super::super::memory::Phase;
use super::super::reduce::{Arith, reduce_into};
use crate::core::{Call, RedOp, share};
use crate::with_element_type;

/// Elements per accumulator chunk: 8 KiB stays in L1 with the inputs streaming.
const CHUNK_BYTES: usize = 8192;
/// Shares are whole cache lines so two ranks never write the same line.
const LINE: usize = 64;

/// Reduces elements `range` of inputs at `inputs[s]` into every address in `outputs`.
fn reduce_range<T: Arith + Default>(
    p: &Phase,
    op: RedOp,
    inputs: &[usize],
    outputs: &[usize],
    range: std::ops::Range<usize>,
) {
    let size = std::mem::size_of::<T>();
    let chunk = (CHUNK_BYTES / size).max(1);
    let mut acc = vec![T::default(); chunk.min(range.len())];
    let mut at = range.start;
    while at < range.end {
        let len = chunk.min(range.end - at);
        let acc = &mut acc[..len];
        reduce_into(acc, op, inputs.len(), |s| {
            p.view::<T>(inputs[s] + at * size, len)
        });
        for &out in outputs {
            p.write(out + at * size, acc);
        }
        at += len;
    }
}

/// Rank `me`'s share of `count` elements, in whole cache lines.
fn my_share(count: usize, size: usize, n: usize, me: usize) -> std::ops::Range<usize> {
    let per_line = (LINE / size).max(1);
    let lines = share(count.div_ceil(per_line), n, me);
    (lines.start * per_line).min(count)..(lines.end * per_line).min(count)
}

pub fn all_reduce(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let inputs: Vec<usize> = calls.iter().map(|c| c.sendbuff).collect();
    let outputs: Vec<usize> = calls.iter().map(|c| c.recvbuff).collect();
    let range = my_share(c.count, c.datatype.size(), calls.len(), me);
    with_element_type!(c.datatype, T => reduce_range::<T>(p, c.op, &inputs, &outputs, range));
}

pub fn reduce(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let inputs: Vec<usize> = calls.iter().map(|c| c.sendbuff).collect();
    let outputs = [calls[c.root].recvbuff];
    let range = my_share(c.count, c.datatype.size(), calls.len(), me);
    with_element_type!(c.datatype, T => reduce_range::<T>(p, c.op, &inputs, &outputs, range));
}

pub fn reduce_scatter(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let block = me * c.count * c.datatype.size();
    let inputs: Vec<usize> = calls.iter().map(|c| c.sendbuff + block).collect();
    // the output starts at element 0; inputs are offset to block `me`
    let outputs = [c.recvbuff];
    with_element_type!(c.datatype, T => {
        let size = std::mem::size_of::<T>();
        let chunk = (CHUNK_BYTES / size).max(1);
        let mut acc = vec![T::default(); chunk.min(c.count)];
        let mut at = 0;
        while at < c.count {
            let len = chunk.min(c.count - at);
            let acc = &mut acc[..len];
            reduce_into(acc, c.op, inputs.len(), |s| p.view::<T>(inputs[s] + at * size, len));
            p.write(outputs[0] + at * size, acc);
            at += len;
        }
    });
}
