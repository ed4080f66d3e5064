//! AlltoAll: rank d pulls block d of every source's input into block s of
//! its own output. Each rank writes only its own output, and AlltoAll has no
//! in-place form (the checks reject any overlap), so reads never race writes.
//! Every element is read once and written once, the least any AlltoAll can
//! move; pulling keeps each rank's writes in its own output.

use super::super::memory::Phase;
use crate::core::Call;

pub fn all_to_all(p: &Phase, me: usize, calls: &[Call]) {
    let c = &calls[me];
    let bytes = c.count * c.datatype.size();
    let stream = super::streaming(calls);
    // start at the next rank so ranks read different sources at a time
    let n = calls.len();
    for k in 0..n {
        let s = (me + k) % n;
        super::copy(
            p,
            stream,
            calls[s].sendbuff + me * bytes,
            c.recvbuff + s * bytes,
            bytes,
        );
    }
}
