//! The one wire format of the agreement: how a rank's calls look to the
//! other ranks, whatever carries them (the local engine's mailbox, the
//! shared-memory lane, MPI messages, the store).
//!
//! - A reduction op is a kind and a scalar: kinds 0–4 are the built-in ops
//!   in `ncclRedOp_t` order, kind 5 is PreMulSum, whose scalar travels as
//!   the bits of an `f64` (0 for the others).
//! - A call is [`CALL_WORDS`] words: `function index | datatype code << 8 |
//!   op kind << 16` (bits 32–63 are left to the container: a head keeps its
//!   call count there); the count; `root | op code << 32`; the scalar. The
//!   root (a rank, checked before any call is posted) and the op code (an
//!   `i32`) each fit 32 bits, so a checked call loses nothing but its buffer
//!   addresses, which are never compared.
//! - A post (a launch's collectives) is a head of [`HEAD_WORDS`] (the launch
//!   number, then the first call with the call count beside its kinds) and
//!   the other calls after it, four words each. As bytes it is those words
//!   little-endian, nothing else.
//!
//! Decoding refuses any code this build does not write and any length that
//! is not a whole post, with an error that says what came: a process that
//! writes garbage causes an error, never a wrong comparison, a panic or an
//! allocation larger than what it sent.

use super::{Call, DataType, Error, ErrorKind, Func, Posted, RedOp, Result};
use std::hash::Hasher;

/// Words of one call.
pub const CALL_WORDS: usize = 4;
/// Words of a post's head: the launch number, then the first call.
pub const HEAD_WORDS: usize = 1 + CALL_WORDS;
/// The op kind of PreMulSum, whose scalar compares as a float.
pub const PREMUL: u64 = 5;

const LOW: u64 = 0xffff_ffff;

/// A reduction op as its kind and its scalar's bits.
pub fn op_parts(op: RedOp) -> (u64, u64) {
    match op {
        RedOp::PreMulSum(s) => (PREMUL, s.to_bits()),
        // the built-in ops are kinds 0..5, in `ncclRedOp_t` order
        o => (o.builtin_code().unwrap_or(0) as u64, 0),
    }
}

/// The op of a kind and scalar bits; an unknown kind is refused.
pub fn op_of(kind: u64, scalar: u64) -> Result<RedOp> {
    if kind == PREMUL {
        return Ok(RedOp::PreMulSum(f64::from_bits(scalar)));
    }
    i32::try_from(kind)
        .ok()
        .and_then(RedOp::from_builtin_code)
        .ok_or_else(|| unknown("op kind", kind))
}

fn unknown(what: &str, v: u64) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!(
            "a peer's post is garbled: {what} {v} is no code this build writes (are all ranks the same rankwise?)"
        ),
    )
}

fn garbled(why: String) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("a peer's post is garbled: {why}"),
    )
}

/// A call as words (see the module doc).
pub fn call_words(c: &Call) -> [u64; CALL_WORDS] {
    let (kind, scalar) = op_parts(c.op);
    [
        c.func.index() as u64 | (c.datatype.code() as u64 & 0xff) << 8 | kind << 16,
        c.count as u64,
        c.root as u64 & LOW | (c.op_code as u32 as u64) << 32,
        scalar,
    ]
}

/// The call in `w` (its first [`CALL_WORDS`]), buffer addresses 0.
pub fn read_call(w: &[u64]) -> Result<Call> {
    let [kinds, count, root, scalar] = w[..] else {
        return Err(garbled(format!(
            "a call of {} words, not {CALL_WORDS}",
            w.len()
        )));
    };
    let (f, dt, kind) = (kinds & 0xff, (kinds >> 8) & 0xff, (kinds >> 16) & 0xff);
    let func = *Func::ALL
        .get(f as usize)
        .ok_or_else(|| unknown("function index", f))?;
    let datatype = DataType::from_code(dt as i32).ok_or_else(|| unknown("datatype code", dt))?;
    Ok(Call {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: usize::try_from(count).map_err(|_| unknown("count", count))?,
        datatype,
        op: op_of(kind, scalar)?,
        op_code: (root >> 32) as u32 as i32,
        root: (root & LOW) as usize,
    })
}

/// The head of a launch numbered `op_count` of `calls`.
pub fn head(op_count: u64, calls: &[Call]) -> [u64; HEAD_WORDS] {
    let mut h = [0u64; HEAD_WORDS];
    h[0] = op_count;
    if let Some(c) = calls.first() {
        h[1..].copy_from_slice(&call_words(c));
    }
    h[1] |= (calls.len() as u64) << 32;
    h
}

/// A post with the call its head holds, and how many calls the whole post
/// has ([`rest_calls`] of them follow the head).
pub fn read_head(h: &[u64]) -> Result<(Posted, usize)> {
    let Some(h) = h.get(..HEAD_WORDS) else {
        return Err(garbled(format!(
            "a head of {} words, not {HEAD_WORDS}",
            h.len()
        )));
    };
    let mut p = Posted {
        op_count: h[0],
        calls: Vec::new(),
    };
    let n = h[1] >> 32;
    if n > 0 {
        p.calls.push(read_call(&[h[1] & LOW, h[2], h[3], h[4]])?);
    }
    Ok((p, n as usize))
}

/// Calls of a post beyond its head's.
pub fn rest_calls(total: usize) -> usize {
    total.saturating_sub(1)
}

/// The calls beyond the head's, as words.
pub fn rest(calls: &[Call]) -> Vec<u64> {
    calls.iter().skip(1).flat_map(call_words).collect()
}

/// Appends the calls in `words` (whole calls only) to `p`.
pub fn read_rest(p: &mut Posted, words: &[u64]) -> Result<()> {
    if !words.len().is_multiple_of(CALL_WORDS) {
        return Err(garbled(format!(
            "{} words of calls, not a multiple of {CALL_WORDS}",
            words.len()
        )));
    }
    for w in words.chunks_exact(CALL_WORDS) {
        p.calls.push(read_call(w)?);
    }
    Ok(())
}

/// A post as bytes: its head and the rest of its calls, little-endian.
pub fn encode(p: &Posted) -> Vec<u8> {
    encode_calls(p.op_count, &p.calls)
}

/// [`encode`] of launch `op_count` of `calls`.
pub fn encode_calls(op_count: u64, calls: &[Call]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 * (HEAD_WORDS + rest_calls(calls.len()) * CALL_WORDS));
    for w in head(op_count, calls) {
        out.extend_from_slice(&w.to_le_bytes());
    }
    for c in calls.iter().skip(1) {
        for w in call_words(c) {
            out.extend_from_slice(&w.to_le_bytes());
        }
    }
    out
}

/// The post in `b`, which must be exactly one whole post.
pub fn decode(b: &[u8]) -> Result<Posted> {
    let word = |i: usize| {
        let at = 8 * i;
        u64::from_le_bytes(b[at..at + 8].try_into().unwrap_or([0; 8]))
    };
    if b.len() < 8 * HEAD_WORDS || !b.len().is_multiple_of(8) {
        return Err(garbled(format!("{} bytes are no whole post", b.len())));
    }
    let mut head = [0u64; HEAD_WORDS];
    for (i, h) in head.iter_mut().enumerate() {
        *h = word(i);
    }
    let (mut p, total) = read_head(&head)?;
    // the length says how many calls there are room for: a count larger
    // than that is refused before anything is allocated for it
    let words = b.len() / 8 - HEAD_WORDS;
    if words != rest_calls(total).saturating_mul(CALL_WORDS) {
        return Err(garbled(format!(
            "its head counts {total} calls, its {} bytes hold {}",
            b.len(),
            1 + words / CALL_WORDS
        )));
    }
    let rest: Vec<u64> = (HEAD_WORDS..HEAD_WORDS + words).map(word).collect();
    p.calls.reserve_exact(rest.len() / CALL_WORDS);
    read_rest(&mut p, &rest)?;
    Ok(p)
}

/// One call of launch `op_count` as bytes: a post of that call alone.
pub fn encode_call(op_count: u64, c: &Call) -> Vec<u8> {
    encode_calls(op_count, std::slice::from_ref(c))
}

/// The launch number and the call of a post of exactly one call.
pub fn decode_call(b: &[u8]) -> Result<(u64, Call)> {
    let mut p = decode(b)?;
    match p.calls.len() {
        1 => Ok((p.op_count, p.calls.remove(0))),
        n => Err(garbled(format!("{n} calls where one was expected"))),
    }
}

/// The first word of a notice: a post that says why its rank does not make
/// the launch (its call was refused there, or it gave up on the launch),
/// in its calls' place. As a launch number it would be beyond any count.
const NOTICE: u64 = u64::from_le_bytes(*b"rkwnote!");
/// The longest reason a notice carries, in bytes.
pub const NOTICE_BYTES: usize = 1024;

/// A notice giving `why` (cut to [`NOTICE_BYTES`] on a character boundary).
pub fn encode_notice(why: &str) -> Vec<u8> {
    let mut end = why.len().min(NOTICE_BYTES);
    while !why.is_char_boundary(end) {
        end -= 1;
    }
    let mut out = NOTICE.to_le_bytes().to_vec();
    out.extend_from_slice(&why.as_bytes()[..end]);
    out
}

/// The reason a notice gives, when `b` is one (a longer one is cut).
pub fn notice(b: &[u8]) -> Option<String> {
    let (head, why) = b.split_at_checked(8)?;
    (head == NOTICE.to_le_bytes())
        .then(|| String::from_utf8_lossy(&why[..why.len().min(NOTICE_BYTES)]).into_owned())
}

/// Whether the heads in `slots` (one per rank, `stride` words apart) all
/// post one and the same collective, as [`crate::core::agree`] sees it:
/// equal function, datatype and count, and equal op (when it reduces) and
/// root (when it is rooted). True only when the agreement would find no
/// mismatch, so the posts need not be decoded; false says nothing more.
pub fn one_same_call(slots: &[u64], stride: usize) -> bool {
    // head words: 1 call count and kinds, 2 count, 3 root and op code, 4
    // op scalar
    let Some(h0) = slots.get(..HEAD_WORDS) else {
        return false;
    };
    let Some(func) = Func::ALL.get((h0[1] & 0xff) as usize) else {
        return false;
    };
    let kind = (h0[1] >> 16) & 0xff;
    // one call, and a PreMulSum scalar compares as a float: NaN equals nothing
    if h0[1] >> 32 != 1 || (kind == PREMUL && f64::from_bits(h0[4]).is_nan()) {
        return false;
    }
    // the op kind counts only when the call reduces, the root only when rooted
    let kinds: u64 = if func.reduces() { !0 } else { !(0xff << 16) };
    let (scalar, root): (u64, u64) = (
        if func.reduces() { !0 } else { 0 },
        if func.is_rooted() { LOW } else { 0 },
    );
    stride >= HEAD_WORDS
        && slots.chunks(stride).all(|h| {
            h.len() >= HEAD_WORDS
                && (h[1] ^ h0[1]) & kinds == 0
                && h[2] == h0[2]
                && (h[3] ^ h0[3]) & root == 0
                && (h[4] ^ h0[4]) & scalar == 0
        })
}

/// FNV-1a, 64 bits: communicator ids as the trace prints them
/// (`commId`), made from an `ncclUniqueId` or a communicator's name.
pub fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(bytes);
    h.finish()
}

#[cfg(test)]
mod tests;
