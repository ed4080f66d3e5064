//! AllGather and Gather: pure copies into source-rank-major blocks.
//!
//! Parts ([`Part`]) are rank blocks, or pieces of them: block r's parts
//! move rank r's input, each a disjoint range of it.
//!
//! AllGather: rank r's input is pushed into block r of every rank's
//! output, piece by piece, so each input is read from memory once. Block r of
//! any output is written only by the parts of block r. In place, rank d's
//! input is block d of its own output: only block d's parts read it, and
//! they are its only writers too, whose copy onto it is skipped (same
//! address). So no input is written while it is read.
//! Gather: rank r's input goes into block r of the root's output; blocks
//! are disjoint, and the root's in-place block is skipped.

use super::super::memory::Phase;
use super::{COPY_CHUNK, Part};
use crate::core::Call;

pub fn all_gather(p: &Phase, part: Part, calls: &[Call]) {
    let n = calls.len();
    let me = part.block(n);
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    let piece = part.of_block(n, bytes, 1);
    let mut at = piece.start;
    while at < piece.end {
        let len = COPY_CHUNK.min(piece.end - at);
        for k in 0..n {
            let d = (me + k) % n;
            super::copy(
                p,
                stream,
                c.sendbuff + at,
                calls[d].recvbuff + me * bytes + at,
                len,
            );
        }
        at += len;
    }
}

pub fn gather(p: &Phase, part: Part, calls: &[Call]) {
    let n = calls.len();
    let me = part.block(n);
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    let piece = part.of_block(n, bytes, 1);
    super::copy(
        p,
        stream,
        c.sendbuff + piece.start,
        calls[c.root].recvbuff + me * bytes + piece.start,
        piece.len(),
    );
}
