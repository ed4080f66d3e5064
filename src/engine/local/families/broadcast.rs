//! Broadcast and Scatter: every rank pulls from the root.
//!
//! Each rank writes only its own output and reads only the root's input.
//! In place on the root the copy is skipped (same address), so the root's
//! input is never written while others read it.

use super::super::memory::Phase;
use crate::core::Call;

pub fn broadcast(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    p.copy(
        calls[c.root].sendbuff,
        c.recvbuff,
        c.count * c.datatype.size(),
    );
}

pub fn scatter(p: &Phase, me: usize, calls: &[&Call]) {
    let c = calls[me];
    let bytes = c.count * c.datatype.size();
    p.copy(calls[c.root].sendbuff + me * bytes, c.recvbuff, bytes);
}
