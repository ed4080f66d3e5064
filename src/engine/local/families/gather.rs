//! AllGather and Gather: pure copies into source-rank-major blocks.
//!
//! AllGather: rank r pushes its own input into block r of every rank's
//! output, piece by piece, so each input is read from memory once. Block r of
//! any output is written by rank r alone. In place, rank d's input is block d
//! of its own output: only rank d reads it, and the one writer of that block
//! is rank d itself, whose copy is skipped (same address). So no input is
//! written while it is read.
//! Gather: rank r pushes its input into block r of the root's output; blocks
//! are disjoint, and the root's in-place block is skipped.

use super::super::memory::Phase;
use super::COPY_CHUNK;
use crate::core::Call;

pub fn all_gather(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let n = calls.len();
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    let mut at = 0;
    while at < bytes {
        let len = COPY_CHUNK.min(bytes - at);
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

pub fn gather(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    super::copy(
        p,
        stream,
        c.sendbuff,
        calls[c.root].recvbuff + me * bytes,
        bytes,
    );
}
