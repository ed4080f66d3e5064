//! NCCL WARN messages, sorted into causes a person can act on.
//!
//! Argument checks name the call and the bad value (`Broadcast : invalid
//! root 4`). The rest is sorted by what NCCL's own messages say, most
//! specific first, so that a size disagreement NCCL detected between two
//! peers over the network is never taken for a network failure, and a
//! network failure never for an application mismatch.

use super::fields::{Tokens, parse_i64, parse_i64_prefix};
use super::{Warn, WarnKind};
use crate::core::Func;
use memchr::memmem;

pub(super) fn parse_warn(msg: &[u8]) -> Warn<'_> {
    let mut toks = Tokens::new(msg);
    let op = toks.next().and_then(|t| {
        let name = t.strip_suffix(b":").unwrap_or(t);
        Func::from_log_name(name)
    });
    let kind = match from_checker(msg) {
        true => WarnKind::Checker,
        false => argcheck(msg).unwrap_or_else(|| classify(msg)),
    };
    Warn {
        op,
        kind,
        text: msg,
    }
}

/// A line of rankwise's checker: `nccl<Code> on rank <r>: …` (how it
/// reports every error; NCCL's own WARN text never starts so).
fn from_checker(msg: &[u8]) -> bool {
    let Some(rest) = msg.strip_prefix(b"nccl") else {
        return false;
    };
    let code = rest.iter().take_while(|b| b.is_ascii_alphabetic()).count();
    let Some(rest) = rest[code..].strip_prefix(b" on rank ") else {
        return false;
    };
    let digits = rest.iter().take_while(|b| b.is_ascii_digit()).count();
    code > 0 && digits > 0 && rest[digits..].starts_with(b": ")
}

/// The integer after the first `needle` in `msg`.
fn number_after(msg: &[u8], needle: &[u8]) -> Option<i64> {
    let p = memmem::find(msg, needle)?;
    let mut t = Tokens::new(&msg[p + needle.len()..]);
    parse_i64_prefix(t.next()?)
}

/// An argument check's rejection: invalid root, datatype or reduction op.
fn argcheck(msg: &[u8]) -> Option<WarnKind> {
    let n = |needle: &[u8]| number_after(msg, needle);
    if let Some(r) = n(b"invalid root ").or_else(|| n(b"invalid peer ")) {
        return Some(WarnKind::InvalidRoot(r));
    }
    if let Some(r) = memmem::find(msg, b" is out of range").and_then(|end| {
        let p = memmem::rfind(&msg[..end], b"root ")?;
        parse_i64(&msg[p + 5..end])
    }) {
        return Some(WarnKind::InvalidRoot(r));
    }
    if let Some(t) = n(b"invalid type ").or_else(|| n(b"invalid datatype ")) {
        return Some(WarnKind::InvalidType(t));
    }
    n(b"invalid reduction operation ")
        .or_else(|| n(b"invalid op "))
        .or_else(|| {
            // 2.28: "reduction operation 42 unknown to this communicator"
            memmem::find(msg, b" unknown to this communicator")?;
            n(b"reduction operation ")
        })
        .map(WarnKind::InvalidOp)
}

/// Any of `needles` in `msg`, ASCII case ignored.
fn has_any(msg: &[u8], needles: &[&str]) -> bool {
    needles.iter().any(|n| {
        let n = n.as_bytes();
        msg.windows(n.len()).any(|w| w.eq_ignore_ascii_case(n))
    })
}

/// The cause a WARN line names, by the words NCCL uses for it.
pub(super) fn classify(msg: &[u8]) -> WarnKind {
    // Bounded: WARN text is quoted at most this long anyway.
    let msg = &msg[..msg.len().min(1024)];
    if has_any(
        msg,
        &[
            "collective mismatch",
            "message truncated",
            "truncated : received",
            "bytes instead of",
        ],
    ) {
        WarnKind::PeerSizeMismatch
    } else if has_any(msg, &["duplicate gpu"]) {
        WarnKind::DuplicateGpu
    } else if has_any(
        msg,
        &[
            "version mismatch",
            "mismatched nccl version",
            "mismatch nccl version",
            "different nccl version",
        ],
    ) {
        WarnKind::VersionMismatch
    } else if has_any(
        msg,
        &[
            "out of memory",
            "failed to cuda calloc",
            "failed to cuda malloc",
            "cudamalloc failed",
            "cumemcreate failed",
        ],
    ) {
        WarnKind::OutOfMemory
    } else if has_any(
        msg,
        &["cuda failure", "cuda error", "cudaerror", "cu failure"],
    ) {
        WarnKind::Cuda
    } else if has_any(
        msg,
        &[
            "got completion from peer",
            "vendor err",
            "got async event",
            "ibv_poll_cq",
            "ibv_post",
            "socket progress",
            "port error",
        ],
    ) || (has_any(msg, &["net/", "ibv_", "rdma"]) && has_any(msg, &["error", "fail"]))
    {
        WarnKind::Network
    } else if has_any(
        msg,
        &[
            "connect to",
            "connection refused",
            "connection timed out",
            "connection reset",
            "connection closed",
            "bootstrap",
            "socketstartconnect",
            "socketpollconnect",
            "no socket interface",
            "proxy service",
            "could not connect",
        ],
    ) {
        WarnKind::Connection
    } else if has_any(msg, &["timeout", "timed out", "abort"]) {
        WarnKind::Timeout
    } else {
        WarnKind::Other
    }
}

/// What a network completion status (`status=N` in NCCL's IB messages, the
/// verbs `ibv_wc_status` code) means.
pub fn ib_status_name(status: i64) -> Option<&'static str> {
    Some(match status {
        1 => "local length error",
        2 => "local queue-pair operation error",
        4 => "local protection error (a memory registration problem)",
        5 => "work request flushed (a consequence of an earlier error on the same connection)",
        8 => "local access error",
        9 => "remote invalid request",
        10 => "remote access error (the peer's memory registration)",
        11 => "remote operation error",
        12 => {
            "transport retry counter exceeded (the peer stopped answering: a link down, a switch or NIC problem, or the peer gone)"
        }
        13 => "receiver-not-ready retry counter exceeded",
        16 => "remote aborted",
        19 => "fatal error",
        20 => "response timeout",
        21 => "general error",
        _ => return None,
    })
}

/// `status=N` in a WARN message.
pub fn ib_status(msg: &[u8]) -> Option<i64> {
    let p = memmem::find(msg, b"status=")?;
    let digits = msg[p + 7..]
        .iter()
        .take_while(|b| b.is_ascii_digit())
        .count();
    parse_i64(&msg[p + 7..p + 7 + digits])
}
