//! One log line → one typed record.
//!
//! The parser works on raw bytes and borrows from the line: no allocation, no
//! regular expression, no UTF-8 validation. It finds NCCL's level marker
//! (` NCCL INFO `, ` NCCL WARN `, ` NCCL TRACE `) anywhere in the line, so any
//! prefix in front of NCCL's own `host:pid:tid [dev]` header is tolerated:
//! timestamps (`[2026-12-02 16:09:41] `), torchrun's `[rank0]:` and
//! `[default0]:`, mpirun's `[1,0]<stdout>:`. Rank hints found in those
//! prefixes are returned; they are only used when a log has no init lines.
//!
//! Recognised messages (NCCL 2.10 to 2.30 and rankwise's own trace):
//! - the COLL line of every call:
//!   `AllReduce: opCount 1f sendbuff 0x… recvbuff 0x… count 8 datatype 7 op 0 root 0 comm 0x… [nranks=4] stream 0x…`
//!   (fields are read as `key value` pairs, so an added or missing optional
//!   field does not break the line; `count`, `datatype` and `comm` are required);
//! - init lines that tie a comm pointer to a rank: `ncclCommInitRank comm …
//!   rank … nranks … commId 0x… - Init COMPLETE` (also `ncclCommInitRankConfig`,
//!   `ncclCommSplit … parent 0x… splitCount … color …`, the pre-2.19 form that
//!   starts with `comm`, and the topology form `comm 0x… rank 0 nRanks 4 nNodes …`),
//!   and the `- Destroy COMPLETE` / `- Abort COMPLETE` lines;
//! - WARN lines, sorted by cause ([`warn`]): argument checks
//!   (`Broadcast : invalid root 4 (…)`, `AllReduce : invalid type 42`, …),
//!   network transport errors, sizes two peers disagree on, duplicate GPUs,
//!   CUDA errors and out-of-memory, connection failures, version mismatches;
//! - COLL lines without NCCL's header (`AllReduce: opCount 0 sendbuff …`,
//!   as people trim them when they paste), read as one anonymous process;
//! - PyTorch's watchdog and ProcessGroupNCCL lines ([`torch`]).
//!
//! A COLL line that lacks its last field (`stream`) may have been wrapped
//! or cut by another process's line: [`Coll::complete`] says so, and a COLL
//! line with a second NCCL header inside it comes back as
//! [`Line::Interleaved`], for the reader to put the pieces together.

mod fields;
mod head;
mod nccl;
#[cfg(test)]
mod tests;
mod torch;
mod warn;

pub use torch::{Torch, TorchEvent};
pub use warn::{ib_status, ib_status_name};

use crate::core::Func;
use head::{parse_head, trim_end};
use memchr::memmem;
use nccl::parse_info;
use serde::Serialize;
use warn::parse_warn;

/// NCCL's own line header, and what the prefixes in front of it say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<'a> {
    pub host: &'a [u8],
    pub pid: u32,
    pub tid: u32,
    /// The number in `[..]`: the CUDA device for NCCL, the rank for rankwise.
    pub dev: Option<u32>,
    /// A global rank from a launcher prefix: torchrun `[rank3]:`, mpirun `[1,3]<stdout>:`.
    pub prefix_rank: Option<u32>,
    /// A local rank from torchrun's role prefix `[default3]:`.
    pub prefix_local: Option<u32>,
}

/// The COLL line of one call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Coll {
    pub op: Func,
    pub op_count: Option<u64>,
    pub sendbuff: u64,
    pub recvbuff: u64,
    pub count: u64,
    pub datatype: i32,
    pub redop: i32,
    /// The root; for Send and Recv, the peer.
    pub root: i32,
    pub comm: u64,
    pub nranks: Option<u32>,
    /// The line ran to its last field (`stream`): not cut short.
    pub complete: bool,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InitPhase {
    Start,
    Complete,
    /// `comm 0x… rank 0 nRanks 4 nNodes …`, printed during init.
    Topology,
    Destroy,
    Abort,
}

/// An init (or teardown) line that ties a comm pointer to its rank.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Init {
    pub comm: u64,
    pub rank: Option<u32>,
    pub nranks: Option<u32>,
    pub comm_id: Option<u64>,
    pub parent: Option<u64>,
    pub color: Option<i64>,
    pub split_count: Option<u32>,
    pub phase: InitPhase,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case", tag = "kind", content = "value")]
pub enum WarnKind {
    InvalidRoot(i64),
    InvalidType(i64),
    InvalidOp(i64),
    /// The network transport failed (an IB/RoCE completion error, a port
    /// event, a socket error while moving data).
    Network,
    /// NCCL saw two peers post different sizes for one transfer.
    PeerSizeMismatch,
    /// Two ranks of one communicator on the same GPU.
    DuplicateGpu,
    OutOfMemory,
    /// Another CUDA call failed inside NCCL.
    Cuda,
    /// Connecting to a peer or to the bootstrap failed.
    Connection,
    /// Ranks run different NCCL versions.
    VersionMismatch,
    /// NCCL gave up waiting, or a communicator was aborted.
    Timeout,
    /// rankwise's checker (`librankwise_nccl.so`) refused a call or failed
    /// a communicator: `ncclInvalidUsage on rank 1: deadlock: …`.
    Checker,
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Warn<'a> {
    pub op: Option<Func>,
    pub kind: WarnKind,
    /// The message after `NCCL WARN `.
    pub text: &'a [u8],
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Body<'a> {
    Coll(Coll),
    Init(Init),
    Warn(Warn<'a>),
    /// An NCCL INFO/TRACE line that carries nothing the analyzer uses.
    Other,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Line<'a> {
    Nccl(Head<'a>, Body<'a>),
    /// A PyTorch watchdog or ProcessGroupNCCL line.
    Torch(Torch<'a>),
    /// Two processes' lines in one: the first one's start, cut short (its
    /// rest usually follows on a later line), then a whole line from
    /// `split` on. Where the second line's host name is glued to the first
    /// line's text, `split` is a guess the reader may move.
    Interleaved {
        line: &'a [u8],
        split: usize,
    },
    /// Not an NCCL line (application output, blank line, binary noise).
    NotNccl,
    /// Looks like an NCCL COLL or init line but a required field is missing or unreadable.
    Malformed(Broken<'a>),
}

/// What a malformed line looked like.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Broken<'a> {
    /// A COLL line (`Op: opCount …`), a call that cannot be checked, and
    /// its first field that could not be read.
    Call(BadField<'a>),
    /// An init line.
    Init,
}

/// A field of a COLL line that could not be read: its name and what it
/// held (`None`: no value, or no such field while it is required).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BadField<'a> {
    pub field: &'static str,
    pub value: Option<&'a [u8]>,
}

impl BadField<'_> {
    /// "count is 'x3', expected an unsigned 64-bit integer", "comm is missing".
    pub fn describe(&self) -> String {
        let expected = match self.field {
            "opCount" => "a hex number",
            "sendbuff" | "recvbuff" | "comm" => "a pointer (0x… or (nil))",
            "count" => "an unsigned 64-bit integer",
            "[nranks=]" => "an unsigned 32-bit integer",
            _ => "a 32-bit integer",
        };
        match self.value {
            Some(v) => format!(
                "{} is '{}', expected {expected}",
                self.field,
                String::from_utf8_lossy(&v[..v.len().min(40)])
            ),
            None => format!("{} is missing, expected {expected}", self.field),
        }
    }
}

/// A reusable line parser (holds the searchers).
pub struct Parser {
    marker: memmem::Finder<'static>,
    op_count: memmem::Finder<'static>,
    torch: memmem::Finder<'static>,
}

impl Default for Parser {
    fn default() -> Self {
        Self::new()
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Level {
    Info,
    Warn,
    Trace,
}

impl Parser {
    pub fn new() -> Self {
        Parser {
            marker: memmem::Finder::new(b" NCCL "),
            op_count: memmem::Finder::new(b": opCount "),
            torch: memmem::Finder::new(b"NCCL"),
        }
    }

    /// Parse one line (with or without its line terminator).
    pub fn parse<'a>(&self, line: &'a [u8]) -> Line<'a> {
        let line = trim_end(line);
        let mut from = 0;
        // The first " NCCL " followed by a level is the marker; earlier
        // occurrences may sit in a prefix.
        let (pos, level, msg_start) = loop {
            let Some(p) = self.marker.find(&line[from..]).map(|p| p + from) else {
                return self.headless(line);
            };
            let after = &line[p + 6..];
            if after.starts_with(b"INFO ") {
                break (p, Level::Info, p + 11);
            } else if after.starts_with(b"WARN ") {
                break (p, Level::Warn, p + 11);
            } else if after.starts_with(b"TRACE ") {
                break (p, Level::Trace, p + 12);
            }
            from = p + 1;
        };
        let Some(head) = parse_head(&line[..pos]) else {
            return self.headless(line);
        };
        let msg = &line[msg_start..];
        let body = match level {
            Level::Info => match parse_info(msg) {
                Ok(b) => b,
                // another process's line inside this one: a field that
                // cannot be read, or NCCL's marker among the fields
                Err(Broken::Call(_)) if memmem::find(msg, b" NCCL ").is_some() => {
                    return interleaved(line, msg_start);
                }
                Err(broken) => return Line::Malformed(broken),
            },
            Level::Warn => Body::Warn(parse_warn(msg)),
            Level::Trace => Body::Other,
        };
        Line::Nccl(head, body)
    }
}

impl Parser {
    /// A line without NCCL's header: a COLL line as people trim it when
    /// they paste, a PyTorch watchdog line, or not NCCL's at all.
    fn headless<'a>(&self, line: &'a [u8]) -> Line<'a> {
        if let Some(p) = self.op_count.find(line) {
            // the op's name is the token before ": opCount"
            let start = line[..p]
                .iter()
                .rposition(|b| *b == b' ' || *b == b']' || *b == b':')
                .map_or(0, |q| q + 1);
            if let Some(op) = Func::from_log_name(&line[start..p]) {
                let head = Head {
                    host: b"",
                    pid: 0,
                    tid: 0,
                    dev: None,
                    prefix_rank: None,
                    prefix_local: None,
                };
                let mut h = head;
                if start > 0 {
                    head::rank_hints(&line[..start], &mut h);
                }
                return match nccl::parse_coll(op, &line[p + 2..]) {
                    Ok(c) => Line::Nccl(h, Body::Coll(c)),
                    Err(bad) => Line::Malformed(Broken::Call(bad)),
                };
            }
        }
        if (self.torch.find(line).is_some() || memmem::find(line, b"atchdog").is_some())
            && let Some(t) = torch::parse_torch(line)
        {
            return Line::Torch(t);
        }
        Line::NotNccl
    }
}

/// A COLL line with another process's header inside it: split where that
/// header's `host:pid:tid` begins. The host is glued to the cut text
/// before it, so where it begins is a guess: the shortest name that starts
/// with a letter (the reader, which knows the hosts seen so far, may move
/// the split to a known one; see [`Line::Interleaved`]).
fn interleaved(line: &[u8], msg_start: usize) -> Line<'_> {
    let Some(p) = memmem::find(&line[msg_start..], b" NCCL ").map(|p| p + msg_start) else {
        return Line::NotNccl;
    };
    // back over `[dev]` to the glued `…host:pid:tid` token
    let mut cut = p;
    for _ in 0..2 {
        while cut > msg_start && line[cut - 1] == b' ' {
            cut -= 1;
        }
        while cut > msg_start && line[cut - 1] != b' ' {
            cut -= 1;
        }
    }
    let tok = &line[cut..p];
    let hpt = &tok[..memchr::memchr(b' ', tok).unwrap_or(tok.len())];
    let split = match memchr::memrchr(b':', hpt).and_then(|c2| memchr::memrchr(b':', &hpt[..c2])) {
        Some(c1) => {
            let host = &hpt[..c1];
            let start = (0..host.len())
                .rev()
                .find(|&i| host[i].is_ascii_alphabetic())
                .unwrap_or(0);
            cut + start
        }
        None => cut,
    };
    Line::Interleaved { line, split }
}
