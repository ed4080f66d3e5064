//! AllReduce, Reduce, ReduceScatter.
//!
//! AllReduce and Reduce split the `count` elements into contiguous parts
//! (whole cache lines, one per rank or several, see [`Part`]); the mover of
//! a part reduces it across all N inputs and writes the result to every
//! output (AllReduce) or the root's (Reduce). Large parts are reduced a
//! block of a few cache lines at a time in registers and stored straight to
//! the outputs; small ones (and the partial lines at a part's ends) chunk by
//! chunk into an L1-sized accumulator on the stack, then copied out. A part
//! of every input and output is touched by its mover alone, and within a
//! block or chunk all reads precede all writes, so in-place calls (send ==
//! recv) are safe. Each
//! output element is computed once and copied, so all ranks receive
//! bitwise-identical results. Every input byte is read once and every output
//! byte written once: the least traffic an AllReduce can have.
//!
//! ReduceScatter: rank r's q outputs are computed from block r of every
//! input (by rank r, or in parts by whoever claims them). Other parts read
//! other elements, so the in-place form (recv = block r of r's own send) is
//! safe for the same reason.

use super::super::memory::{LINE, Phase};
use super::Part;
use crate::core::{Call, RedOp};
use crate::kernels::{Arith, reduce_blocks, reduce_into};
use crate::with_element_type;
use std::ops::Range;

/// Accumulator elements for the chunked path: 16 KiB of f64, 8 KiB of f32;
/// L1 holds it while the inputs stream through.
const ACC: usize = 2048;
/// Calls this small use a small accumulator (cheaper to set up).
const SMALL: usize = 64;

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

/// Parts at least this large (beyond a core's L2), and every part of a call
/// whose buffers outgrow the last-level cache, are reduced in blocks of
/// lines even when no output streams (in place): from memory, blocks keep
/// reads and writes in flight together (64 MiB in-place ReduceScatter, N=2:
/// 96–109% of the copy bound instead of 67–73%); in cache, the chunked
/// path's wide copies are faster (1 MiB AllReduce: about 3x).
const LINED_BYTES: usize = 2 << 20;

/// One rank's reduction: element 0 of rank s's input is at `input(s)`; the
/// N inputs are folded with `op` and the result written to every output.
struct Job<'a, I> {
    p: &'a Phase,
    op: RedOp,
    n: usize,
    input: I,
    outputs: &'a [Out],
    /// the call's buffers outgrow the last-level cache ([`super::streaming`])
    from_memory: bool,
}

/// How far ahead of a block its inputs are prefetched, in bytes: 8
/// blocks of four lines, 4 of eight. The hardware prefetchers follow a
/// few streams; a reduction reads N at once, and with them ahead of the
/// loads 64 MiB Reduce, ReduceScatter and AllReduce at N = 2 went from
/// 72–85% to 89–98% of the traffic bound. 1, 4 and 8 KiB were slower
/// (BENCHMARKS.md, "Tried and not kept").
const PREFETCH_AHEAD: usize = 2048;

/// Lines per block for the 8- and 16-bit types, and for the wider ones
/// ([`reduction_block_bytes`]).
const NARROW_BLOCK_LINES: usize = 8;
const WIDE_BLOCK_LINES: usize = 4;
/// The most lines a block holds, which the block buffer is sized for.
const MOST_BLOCK_LINES: usize = if NARROW_BLOCK_LINES > WIDE_BLOCK_LINES {
    NARROW_BLOCK_LINES
} else {
    WIDE_BLOCK_LINES
};

/// The bytes of one block a large reduction of elements of `size` bytes
/// is computed in before it is stored to the outputs: a few lines, so the
/// work each block costs whatever its size (the inputs' slices, the
/// kernel's call and set-up) is spread over more elements, while the block
/// stays in registers. Eight lines for the 8- and 16-bit types, whose
/// kernels take many instructions per element (64 MiB AllReduce at N = 2
/// and 4, calls of both sizes alternated in one process: 3–15% faster
/// than four); four for the wider ones, which eight lines left level or
/// slower (`examples/kernel_data` times the kernels both through blocks
/// of this size and over whole buffers).
pub const fn reduction_block_bytes(size: usize) -> usize {
    let lines = if size <= 2 {
        NARROW_BLOCK_LINES
    } else {
        WIDE_BLOCK_LINES
    };
    lines * LINE
}

impl<I: Fn(usize) -> usize> Job<'_, I> {
    /// Reduces elements `range` of every input and writes them to every
    /// output.
    ///
    /// Large ranges go a block of lines of the outputs at a time
    /// ([`Job::lines`]): reduced in registers and stored straight to every
    /// output, so memory reads and writes stay in flight together, as in a
    /// plain copy (an accumulator in L1 split each chunk into a read phase
    /// and a write phase: 64 MiB out-of-place AllReduce, interleaved runs,
    /// median 84% of the copy bound instead of 73% at N=2, 90% instead of
    /// 50% at N=4). A streamed line must be a whole line of its output, so
    /// every streamed output must sit at the same offset within a line; the
    /// partial lines at the ends, ranges whose streamed outputs do not line
    /// up, and small ranges go through an accumulator ([`Job::chunks`]).
    #[inline(always)]
    fn range<T: Arith>(&self, range: Range<usize>) {
        let size = std::mem::size_of::<T>();
        let per_block = reduction_block_bytes(size) / size;
        // the line grid: that of the streamed outputs, which must share it
        let lead = match self.outputs.iter().find(|o| o.stream) {
            Some(o) => o.addr,
            None if self.from_memory || range.len() * size >= LINED_BYTES => self.outputs[0].addr,
            None => return self.chunks::<T>(range),
        };
        let start = lead + range.start * size;
        let skip = (LINE - start % LINE) % LINE;
        let lined = skip.is_multiple_of(size)
            && self
                .outputs
                .iter()
                .all(|o| !o.stream || o.addr % LINE == lead % LINE);
        if !lined || range.len() < skip / size + per_block {
            return self.chunks::<T>(range);
        }
        let body = range.start + skip / size;
        let tail = body + (range.end - body) / per_block * per_block;
        self.chunks::<T>(range.start..body);
        self.lines::<T>(body..tail);
        self.chunks::<T>(tail..range.end);
    }

    /// [`Job::range`] for whole blocks of lines of the outputs.
    #[inline(always)]
    fn lines<T: Arith>(&self, range: Range<usize>) {
        let p = self.p;
        let size = std::mem::size_of::<T>();
        let per_line = LINE / size;
        // room for the largest block of one-byte elements; other types use
        // the front
        let mut buf = [T::default(); MOST_BLOCK_LINES * LINE];
        let lines = reduction_block_bytes(size) / LINE;
        let per_block = lines * per_line;
        let block = &mut buf[..per_block];
        let input = |s: usize, at: usize| {
            let from = (self.input)(s) + at * size;
            // the lines this input needs a few blocks from now: with many
            // instructions per line (half, bfloat16, Avg) the loads of the
            // next blocks then overlap this block's arithmetic
            for k in 0..lines {
                p.prefetch(from + PREFETCH_AHEAD + k * LINE);
            }
            p.view::<T>(from, per_block)
        };
        let starts = range.step_by(per_block);
        reduce_blocks(block, starts, self.op, self.n, input, |at, block| {
            for &Out { addr, stream } in self.outputs {
                for (k, line) in block.chunks_exact(per_line).enumerate() {
                    p.write_line(addr + (at + k * per_line) * size, line, stream);
                }
            }
        });
    }

    /// [`Job::range`] through an accumulator, chunk by chunk.
    #[inline(always)]
    fn chunks<T: Arith>(&self, range: Range<usize>) {
        if range.is_empty() {
            return;
        }
        let p = self.p;
        let size = std::mem::size_of::<T>();
        with_acc::<T, ()>(range.len(), |buf| {
            let chunk = buf.len();
            let mut at = range.start;
            while at < range.end {
                let len = chunk.min(range.end - at);
                let acc = &mut buf[..len];
                reduce_into(acc, self.op, self.n, |s| {
                    p.view::<T>((self.input)(s) + at * size, len)
                });
                for &Out { addr, stream } in self.outputs {
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
}

/// Where a result goes, and whether with streaming stores: only when the
/// call is large and the output is not an input of the same elements (in
/// place, the lines were just read and sit in cache: a plain store needs no
/// extra read, and a streaming one would have to evict them first).
#[derive(Clone, Copy, Default)]
struct Out {
    addr: usize,
    stream: bool,
}

/// Output addresses without allocating: N is at most this for the stack
/// list (small, since every call initialises the whole list).
const MAX_STACK_OUTPUTS: usize = 16;

pub fn all_reduce(p: &Phase, part: Part, calls: &[Call]) {
    let c = &calls[0];
    let n = calls.len();
    let range = part.of_all(c.count, c.datatype.size());
    if range.is_empty() {
        return;
    }
    let stream = super::streaming(calls);
    let input = |s: usize| calls[s].sendbuff;
    // write the output of the rank whose share this is last (with one part
    // per rank, the mover's own: the others' lines are colder)
    let me = part.block(n);
    let order = |k: usize| {
        let d = &calls[(me + 1 + k) % n];
        Out {
            addr: d.recvbuff,
            stream: stream && d.recvbuff != d.sendbuff,
        }
    };
    if n <= MAX_STACK_OUTPUTS {
        let mut outs = [Out::default(); MAX_STACK_OUTPUTS];
        for (k, o) in outs.iter_mut().take(n).enumerate() {
            *o = order(k);
        }
        let job = Job {
            p,
            op: c.op,
            n,
            input,
            outputs: &outs[..n],
            from_memory: stream,
        };
        with_element_type!(c.datatype, T => job.range::<T>(range));
    } else {
        let outs: Vec<Out> = (0..n).map(order).collect();
        let job = Job {
            p,
            op: c.op,
            n,
            input,
            outputs: &outs,
            from_memory: stream,
        };
        with_element_type!(c.datatype, T => job.range::<T>(range));
    }
}

pub fn reduce(p: &Phase, part: Part, calls: &[Call]) {
    let c = &calls[0];
    let n = calls.len();
    let root = &calls[c.root];
    let from_memory = super::streaming(calls);
    let stream = from_memory && root.recvbuff != root.sendbuff;
    let outputs = [Out {
        addr: root.recvbuff,
        stream,
    }];
    let range = part.of_all(c.count, c.datatype.size());
    let input = |s: usize| calls[s].sendbuff;
    let job = Job {
        p,
        op: c.op,
        n,
        input,
        outputs: &outputs,
        from_memory,
    };
    with_element_type!(c.datatype, T => job.range::<T>(range));
}

pub fn reduce_scatter(p: &Phase, part: Part, calls: &[Call]) {
    let n = calls.len();
    let me = part.block(n);
    let c = &calls[me];
    let block = me * c.count * c.datatype.size();
    // the output starts at element 0; inputs are offset to block `me`
    let from_memory = super::streaming(calls);
    let stream = from_memory && c.recvbuff != c.sendbuff + block;
    let outputs = [Out {
        addr: c.recvbuff,
        stream,
    }];
    let input = |s: usize| calls[s].sendbuff + block;
    let job = Job {
        p,
        op: c.op,
        n,
        input,
        outputs: &outputs,
        from_memory,
    };
    let range = part.of_block(n, c.count, c.datatype.size());
    with_element_type!(c.datatype, T => job.range::<T>(range));
}
