//! AllGather and Gather: pure copies into source-rank-major blocks.
//!
//! AllGather: rank r pulls every rank's input into its own output; it alone
//! writes its output. In place, r's input is block r of its own output: the
//! copy is skipped (same address) and no rank writes block r of another
//! rank's output, so the inputs others read stay intact.
//! Gather: rank r pushes its input into block r of the root's output; blocks
//! are disjoint, and the root's in-place block is skipped.

use super::super::memory::Phase;
use crate::core::Call;

pub fn all_gather(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let bytes = c.count * c.datatype.size();
    for (s, src) in calls.iter().enumerate() {
        p.copy(src.sendbuff, c.recvbuff + s * bytes, bytes);
    }
}

pub fn gather(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let bytes = c.count * c.datatype.size();
    p.copy(c.sendbuff, calls[c.root].recvbuff + me * bytes, bytes);
}
