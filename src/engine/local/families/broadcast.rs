//! Broadcast and Scatter.
//!
//! Broadcast: the root's input is split into parts of whole cache lines (N,
//! or more, see [`Part`]); a part's mover copies it, piece by piece, into
//! every rank's output, so the input is read from memory once and the N
//! copies run on N ranks at once. Parts write disjoint bytes of the outputs and read only the root's
//! input, which nobody writes: in place on the root (recv == send) the copy
//! to the root is skipped (same address).
//!
//! Scatter: rank d's block of the root's input goes to rank d's output (a
//! part of it per [`Part`]); parts write disjoint bytes, and in place on the root the root's block is skipped.

use super::super::memory::Phase;
use super::{COPY_CHUNK, Part};
use crate::core::Call;

pub fn broadcast(p: &Phase, part: Part, calls: &[Call]) {
    let c = &calls[0];
    let n = calls.len();
    let bytes = c.count * c.datatype.size();
    let src = calls[c.root].sendbuff;
    let stream = super::streaming(calls);
    let me = part.block(n);
    let piece = part.of_all(bytes, 1);
    let mut at = piece.start;
    while at < piece.end {
        let len = COPY_CHUNK.min(piece.end - at);
        for k in 0..n {
            let d = (me + k) % n;
            super::copy(p, stream, src + at, calls[d].recvbuff + at, len);
        }
        at += len;
    }
}

pub fn scatter(p: &Phase, part: Part, calls: &[Call]) {
    let n = calls.len();
    let me = part.block(n);
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    let piece = part.of_block(n, bytes, 1);
    super::copy(
        p,
        stream,
        calls[c.root].sendbuff + me * bytes + piece.start,
        c.recvbuff + piece.start,
        piece.len(),
    );
}
