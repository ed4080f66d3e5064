//! PyTorch's ProcessGroupNCCL watchdog lines, what almost everyone has
//! after a hang (PyTorch 2.0 to 2.11 wordings):
//!
//! - `[rank7]:[E816 …] [Rank 7] Watchdog caught collective operation timeout:
//!   WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056,
//!   Timeout(ms)=600000) ran for 600026 milliseconds before timing out.`
//!   (newer versions say `[PG ID 0 PG GUID 0(default_pg) Rank 7]`);
//! - `… last enqueued NCCL work: 80078, last completed NCCL work: 80077.`
//!   and the newer `… PG status: last enqueued work: 2, last completed work: 1`;
//! - an NCCL error reported through PyTorch (`NCCL error in: …`,
//!   `DistBackendError`, `Some NCCL operations have failed or timed out`).
//!
//! The rank is the one PyTorch names (`[Rank N]`, `… Rank N]`), else the
//! launcher's prefix (`[rankN]:`).

use super::fields::{parse_u32, parse_u64};
use memchr::memmem;

/// One watchdog or ProcessGroupNCCL line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Torch<'a> {
    pub rank: Option<u32>,
    /// The process group: `PG ID N`, or the name in `PG GUID x(name)`.
    pub pg: Option<&'a [u8]>,
    pub event: TorchEvent<'a>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TorchEvent<'a> {
    /// The watchdog timed out on a work item.
    Timeout {
        seq: u64,
        op: &'a [u8],
        numel_in: Option<u64>,
        numel_out: Option<u64>,
        timeout_ms: Option<u64>,
        ran_ms: Option<u64>,
    },
    /// How far a rank's process group got: the last work enqueued and the
    /// last completed (and the work the watchdog stopped at, if named).
    Progress {
        at: Option<u64>,
        enqueued: u64,
        completed: Option<u64>,
    },
    /// An NCCL error or abort reported through PyTorch.
    Error,
}

/// The unsigned integer right after `needle`, if `needle` is there.
fn number_after(line: &[u8], needle: &[u8]) -> Option<u64> {
    let p = memmem::find(line, needle)? + needle.len();
    let digits = line[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    parse_u64(&line[p..p + digits])
}

/// The text after `needle` up to the first byte in `stop`.
fn word_after<'a>(line: &'a [u8], needle: &[u8], stop: &[u8]) -> Option<&'a [u8]> {
    let p = memmem::find(line, needle)? + needle.len();
    let len = line[p..].iter().take_while(|b| !stop.contains(b)).count();
    (len > 0).then(|| &line[p..p + len])
}

/// `[Rank 7]`, `… Rank 7]`, or the launcher's `[rank7]:`.
fn rank_of(line: &[u8]) -> Option<u32> {
    let mut from = 0;
    while let Some(p) = memmem::find(&line[from..], b"Rank ") {
        let start = from + p + 5;
        let digits = line[start..]
            .iter()
            .take_while(|b| b.is_ascii_digit())
            .count();
        if digits > 0 && line.get(start + digits) == Some(&b']') {
            return parse_u32(&line[start..start + digits]);
        }
        from = start;
    }
    let p = memmem::find(line, b"[rank")? + 5;
    let digits = line[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    (line.get(p + digits) == Some(&b']'))
        .then(|| parse_u32(&line[p..p + digits]))
        .flatten()
}

fn pg_of(line: &[u8]) -> Option<&[u8]> {
    word_after(line, b"PG GUID ", b" ]")
        .and_then(|g| {
            // `0(default_pg)`: the name in brackets is what people know it by
            let open = memchr::memchr(b'(', g)?;
            g[open + 1..].strip_suffix(b")").filter(|n| !n.is_empty())
        })
        .or_else(|| word_after(line, b"PG ID ", b" ]"))
}

/// Parse a line that may be PyTorch's (no NCCL header).
pub(super) fn parse_torch(line: &[u8]) -> Option<Torch<'_>> {
    let event = if let Some(w) = memmem::find(line, b"WorkNCCL(") {
        let work = &line[w..];
        let seq = number_after(work, b"SeqNum=")?;
        // a work item printed in any other message is not a timeout
        memmem::find(line, b"timeout").or_else(|| memmem::find(line, b"timed out"))?;
        TorchEvent::Timeout {
            seq,
            op: word_after(work, b"OpType=", b", )").unwrap_or(b"UNKNOWN"),
            numel_in: number_after(work, b"NumelIn="),
            numel_out: number_after(work, b"NumelOut="),
            timeout_ms: number_after(work, b"Timeout(ms)="),
            ran_ms: number_after(line, b"ran for "),
        }
    } else if let Some(enqueued) = number_after(line, b"last enqueued NCCL work: ")
        .or_else(|| number_after(line, b"last enqueued work: "))
    {
        TorchEvent::Progress {
            at: number_after(line, b"at work: ")
                .or_else(|| number_after(line, b"Timeout at NCCL work: "))
                .or_else(|| number_after(line, b"work sequence id: ")),
            enqueued,
            completed: number_after(line, b"last completed NCCL work: ")
                .or_else(|| number_after(line, b"last completed work: ")),
        }
    } else if memmem::find(line, b"NCCL error").is_some()
        || memmem::find(line, b"DistBackendError").is_some()
        || memmem::find(line, b"Some NCCL operations have failed or timed out").is_some()
    {
        TorchEvent::Error
    } else {
        return None;
    };
    Some(Torch {
        rank: rank_of(line),
        pg: pg_of(line),
        event,
    })
}
