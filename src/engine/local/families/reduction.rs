//! AllReduce, Reduce, ReduceScatter.
//!
//! AllReduce and Reduce split the `count` elements into N contiguous shares
//! (whole cache lines); rank r reduces share r across all N inputs, chunk by
//! chunk into an L1-sized accumulator on its stack, and writes the result to
//! every output (AllReduce) or the root's (Reduce). Share r of every input
//! and output is touched by rank r alone, and within a chunk all reads
//! precede all writes, so in-place calls (send == recv) are safe. Each output
//! element is computed once and copied, so all ranks receive
//! bitwise-identical results. Every input byte is read once and every output
//! byte written once: the least traffic an AllReduce can have.
//!
//! ReduceScatter: rank r computes its own q outputs from block r of every
//! input. Other ranks read other blocks, so the in-place form (recv = block r
//! of r's own send) is safe for the same reason.

use super::super::memory::Phase;
use super::super::reduce::{Arith, reduce_into};
use crate::core::{Call, RedOp, share};
use crate::with_element_type;

/// Accumulator elements: 16 KiB of f64, 8 KiB of f32; L1 holds it while the
/// inputs stream through.
const ACC: usize = 2048;
/// Calls this small use a small accumulator (cheaper to set up).
const SMALL: usize = 64;
/// Shares are whole cache lines so two ranks never write the same line.
const LINE: usize = 64;

/// Runs `f` with a stack accumulator of at least `len.min(ACC)` elements.
#[inline(always)]
fn with_acc<T: Arith, R>(len: usize, f: impl FnOnce(&mut [T]) -> R) -> R {
    if len <= SMALL {
        let mut acc = [T::default(); SMALL];
        f(&mut acc)
    } else {
        let mut acc = [T::default(); ACC];
        f(&mut acc)
    }
}

/// Reduces elements `range` of every rank's input (at `input(s)`, element 0)
/// and writes each chunk to every address `outputs` yields.
#[inline(always)]
fn reduce_range<T: Arith>(
    p: &Phase,
    op: RedOp,
    n: usize,
    input: impl Fn(usize) -> usize,
    outputs: impl Iterator<Item = Out> + Clone,
    range: std::ops::Range<usize>,
) {
    let size = std::mem::size_of::<T>();
    with_acc::<T, ()>(range.len(), |buf| {
        let chunk = buf.len();
        let mut at = range.start;
        while at < range.end {
            let len = chunk.min(range.end - at);
            let acc = &mut buf[..len];
            reduce_into(acc, op, n, |s| p.view::<T>(input(s) + at * size, len));
            for Out { addr, stream } in outputs.clone() {
                if stream {
                    p.copy_stream(acc.as_ptr() as usize, addr + at * size, len * size);
                } else {
                    p.write(addr + at * size, acc);
                }
            }
            at += len;
        }
    });
}

/// Where a result goes, and whether with streaming stores: only when the
/// call is large and the output is not an input of the same elements (in
/// place, the lines were just read and sit in cache: a plain store needs no
/// extra read, and a streaming one would have to evict them first).
#[derive(Clone, Copy)]
struct Out {
    addr: usize,
    stream: bool,
}

/// Rank `me`'s share of `count` elements, in whole cache lines.
fn my_share(count: usize, size: usize, n: usize, me: usize) -> std::ops::Range<usize> {
    let per_line = (LINE / size).max(1);
    let lines = share(count.div_ceil(per_line), n, me);
    (lines.start * per_line).min(count)..(lines.end * per_line).min(count)
}

pub fn all_reduce(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let n = calls.len();
    let range = my_share(c.count, c.datatype.size(), n, me);
    if range.is_empty() {
        return;
    }
    let stream = super::streaming(n * c.count * c.datatype.size());
    let input = |s: usize| calls[s].sendbuff;
    // write this rank's own output last: the others' lines are colder
    let outputs = (0..n).map(|k| {
        let d = &calls[(me + 1 + k) % n];
        Out {
            addr: d.recvbuff,
            stream: stream && d.recvbuff != d.sendbuff,
        }
    });
    with_element_type!(c.datatype, T => reduce_range::<T>(p, c.op, n, input, outputs, range));
}

pub fn reduce(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let n = calls.len();
    let root = &calls[c.root];
    let stream = super::streaming(c.count * c.datatype.size()) && root.recvbuff != root.sendbuff;
    let outputs = std::iter::once(Out {
        addr: root.recvbuff,
        stream,
    });
    let range = my_share(c.count, c.datatype.size(), n, me);
    with_element_type!(c.datatype, T => reduce_range::<T>(p, c.op, n, |s| calls[s].sendbuff, outputs, range));
}

pub fn reduce_scatter(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let n = calls.len();
    let block = me * c.count * c.datatype.size();
    // the output starts at element 0; inputs are offset to block `me`
    let stream =
        super::streaming(n * c.count * c.datatype.size()) && c.recvbuff != c.sendbuff + block;
    let outputs = std::iter::once(Out {
        addr: c.recvbuff,
        stream,
    });
    with_element_type!(c.datatype, T => reduce_range::<T>(p, c.op, n, |s| calls[s].sendbuff + block, outputs, 0..c.count));
}
