//! Broadcast and Scatter.
//!
//! Broadcast: the root's input is split into N shares of whole cache lines;
//! rank r copies share r, piece by piece, into every rank's output, so the
//! input is read from memory once and the N copies run on N ranks at once.
//! Ranks write disjoint shares of the outputs and read only the root's
//! input, which nobody writes: in place on the root (recv == send) the copy
//! to the root is skipped (same address).
//!
//! Scatter: every rank pulls its block from the root; each rank writes only
//! its own output, and in place on the root the root's block is skipped.

use super::super::memory::Phase;
use super::COPY_CHUNK;
use crate::core::{Call, share};

pub fn broadcast(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let n = calls.len();
    let bytes = c.count * c.datatype.size();
    let src = calls[c.root].sendbuff;
    let stream = super::streaming(calls);
    let lines = share(bytes.div_ceil(64), n, me);
    let (start, end) = ((lines.start * 64).min(bytes), (lines.end * 64).min(bytes));
    let mut at = start;
    while at < end {
        let len = COPY_CHUNK.min(end - at);
        for k in 0..n {
            let d = (me + k) % n;
            super::copy(p, stream, src + at, calls[d].recvbuff + at, len);
        }
        at += len;
    }
}

pub fn scatter(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    super::copy(
        p,
        stream,
        calls[c.root].sendbuff + me * bytes,
        c.recvbuff,
        bytes,
    );
}
