//! AlltoAll: block d of every source's input goes into block s of rank d's
//! output, pulled by rank d (or in parts, [`Part`], each a range of every
//! block). Parts write disjoint bytes, and AlltoAll has no
//! in-place form (the checks reject any overlap), so reads never race writes.
//! Every element is read once and written once, the least any AlltoAll can
//! move; pulling keeps each rank's writes in its own output.

use super::super::memory::Phase;
use super::Part;
use crate::core::Call;

pub fn all_to_all(p: &Phase, part: Part, calls: &[Call]) {
    let n = calls.len();
    let me = part.block(n);
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    let piece = part.of_block(n, bytes, 1);
    // start at the next rank so ranks read different sources at a time
    for k in 0..n {
        let s = (me + k) % n;
        super::copy(
            p,
            stream,
            calls[s].sendbuff + me * bytes + piece.start,
            c.recvbuff + s * bytes + piece.start,
            piece.len(),
        );
    }
}
