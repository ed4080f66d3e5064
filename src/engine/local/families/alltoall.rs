//! AlltoAll: rank d pulls block d of every source's input into block s of
//! its own output. Each rank writes only its own output, and AlltoAll has no
//! in-place form (the checks reject any overlap), so reads never race writes.

use super::super::memory::Phase;
use crate::core::Call;

pub fn all_to_all(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let bytes = c.count * c.datatype.size();
    for (s, src) in calls.iter().enumerate() {
        p.copy(src.sendbuff + me * bytes, c.recvbuff + s * bytes, bytes);
    }
}
