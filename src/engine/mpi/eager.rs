//! Small collectives that travel inside the agreement message. Every
//! launch already sends each rank's post to every rank before its data
//! moves; when a single collective's whole input from every rank fits in a
//! few hundred bytes, that input rides along in the same message, and each
//! rank computes its output from the gathered inputs: one exchange instead
//! of two, which is most of the call's time at these sizes. Reductions
//! fold the inputs in rank order with the local engine's arithmetic, so
//! their results are bitwise those of the local engine.
//!
//! Over shared memory, a call whose input only its root sends (Broadcast,
//! Scatter) rides up to [`ROOT_BYTES`]: the root's post is that long,
//! the others' stay a head, and each rank then loads from the root's post
//! only what it receives.
//!
//! Whether a call goes this way depends only on what every rank has just
//! agreed on (the function, count, datatype and N) and on the lane, which
//! is the same on every rank, so either every rank finishes the call here
//! or every rank runs it through MPI.

use super::collectives::fold;
use super::ffi;
use crate::core::{Call, Func};

/// Input bytes a rank may carry in its agreement message.
pub const BYTES: usize = 256;
/// The same, in the exchange's 8-byte words.
pub const WORDS: usize = BYTES / 8;

/// Over shared memory, the input of a call that only its root sends
/// (Broadcast, Scatter) rides too up to this size: only the root's post
/// grows, and each rank loads of it only the bytes it receives, where
/// MPI's own call would first have to meet every rank again. Far below
/// the lane's slot (16 KiB), and where `MPI_Bcast` of one host's ranks
/// costs several microseconds.
pub const ROOT_BYTES: usize = 8 << 10;

/// The largest input of any rank to `c`, and this rank's, in bytes.
fn sizes(c: &Call, n: usize, me: usize) -> Option<(usize, usize)> {
    let qb = c.count.checked_mul(c.datatype.size())?;
    let all = qb.checked_mul(n)?;
    let at_root = me == c.root;
    Some(match c.func {
        Func::AllReduce | Func::Reduce | Func::AllGather | Func::Gather => (qb, qb),
        Func::Broadcast => (qb, if at_root { qb } else { 0 }),
        Func::ReduceScatter | Func::AlltoAll => (all, all),
        Func::Scatter => (all, if at_root { all } else { 0 }),
        Func::Send | Func::Recv => return None,
    })
}

/// This rank's input to `c` as (address, bytes), when it travels in the
/// agreement: every rank's fits in [`BYTES`], or, with `shared_memory`,
/// `c` is sent by its root alone and its input fits in [`ROOT_BYTES`].
/// None when the call goes through MPI.
pub fn payload(c: &Call, n: usize, me: usize, shared_memory: bool) -> Option<(usize, usize)> {
    let (largest, mine) = sizes(c, n, me)?;
    let limit = match c.func {
        Func::Broadcast | Func::Scatter if shared_memory => ROOT_BYTES,
        _ => BYTES,
    };
    (largest <= limit).then_some((if mine > 0 { c.sendbuff } else { 0 }, mine))
}

/// Whether a call that [`payload`] carries is read from its root's post on
/// the shared-memory lane, at [`received`], rather than from every rank's
/// slot of the exchange ([`finish`]): its input is longer than a slot
/// keeps.
pub fn from_root(c: &Call, n: usize) -> bool {
    sizes(c, n, c.root).is_some_and(|(largest, _)| largest > BYTES)
}

/// Where this rank's output of a root-sent call `c` lies in the root's
/// input: (offset, bytes). All of it for a Broadcast, this rank's block
/// for a Scatter.
pub fn received(c: &Call, me: usize) -> (usize, usize) {
    let qb = c.count * c.datatype.size();
    match c.func {
        Func::Scatter => (me * qb, qb),
        _ => (0, qb),
    }
}

/// Writes this rank's output of `c` from every rank's carried input: rank
/// r's at `inputs + r * stride`. A non-root Reduce's or Gather's recvbuff
/// is not touched.
///
/// # Safety
/// `c`'s receive buffer keeps the buffer rule of `ffi` (checked on this
/// rank, agreed by every rank); `inputs` holds `n` aligned inputs of `c`
/// (each the block of every rank a rank sends), `stride` bytes apart, that
/// nothing writes while this runs, outside the receive buffer.
pub unsafe fn finish(c: &Call, n: usize, me: usize, inputs: usize, stride: usize) {
    let qb = c.count * c.datatype.size();
    let of = |r: usize| inputs + r * stride;
    // SAFETY: the caller's contract: every source lies inside rank r's
    // carried input and every destination inside `c`'s receive buffer, at
    // the block the contract's layout gives it.
    unsafe {
        match c.func {
            Func::AllReduce => fold(c, n, inputs, stride, c.count, c.recvbuff),
            Func::Reduce if me == c.root => fold(c, n, inputs, stride, c.count, c.recvbuff),
            Func::ReduceScatter => fold(c, n, inputs + me * qb, stride, c.count, c.recvbuff),
            Func::Broadcast => ffi::copy(of(c.root), c.recvbuff, qb),
            Func::Scatter => ffi::copy(of(c.root) + me * qb, c.recvbuff, qb),
            Func::AllGather => (0..n).for_each(|r| ffi::copy(of(r), c.recvbuff + r * qb, qb)),
            Func::Gather if me == c.root => {
                (0..n).for_each(|r| ffi::copy(of(r), c.recvbuff + r * qb, qb))
            }
            Func::AlltoAll => {
                (0..n).for_each(|r| ffi::copy(of(r) + me * qb, c.recvbuff + r * qb, qb))
            }
            Func::Reduce | Func::Gather | Func::Send | Func::Recv => {}
        }
    }
}
