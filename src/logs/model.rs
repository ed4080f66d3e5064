//! What was read, as the analysis sees it: per-process call streams.
//!
//! A [`Stream`] is one process's view of one communicator: its calls in
//! order, compactly (an interned call signature, the opCount, the line),
//! plus what its init lines said. [`Collected`] holds every stream with the
//! signatures they share, the WARN lines, the files and the line counts.
//! Ingest builds it; resolution, the checks and the summary read it.

use super::parse::{InitPhase, WarnKind};
use crate::core::Func;

/// What a call's COLL line says, minus pointers and opCount: the part every
/// rank must agree on (and, for Send/Recv, the peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sig {
    pub op: Func,
    pub count: u64,
    pub datatype: i32,
    pub redop: i32,
    pub root: i32,
}

/// One call as kept in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallRec {
    /// Index into [`Collected::sigs`].
    pub sig: u32,
    /// 1-based line in its file (saturates at `u32::MAX`).
    pub line: u32,
    /// The opCount NCCL printed, or `u64::MAX` when the line had none.
    pub op_count: u64,
}

/// A place in the input: file index into [`Collected::files`] and 1-based line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Loc {
    pub file: u32,
    pub line: u64,
}

impl Loc {
    /// Line `line` of a segment, before the merge gives it its file and offset.
    pub(crate) fn at(line: u32) -> Loc {
        Loc {
            file: 0,
            line: u64::from(line),
        }
    }
}

/// What a process said about one comm pointer (one epoch of it: a pointer
/// reused after `Destroy COMPLETE` starts a new stream).
#[derive(Clone, Debug, Default)]
pub struct Stream {
    pub host: u32,
    pub pid: u32,
    pub comm: u64,
    pub epoch: u32,
    pub calls: Vec<CallRec>,
    /// `(file, first call index)` runs: which file each call came from.
    pub file_runs: Vec<(u32, u32)>,
    /// The rank its init lines state (the first one stated), and where.
    pub rank: Option<u32>,
    pub rank_at: Loc,
    /// nranks as its init lines state it (the first one stated), and where.
    pub nranks_init: Option<u32>,
    pub nranks_init_at: Loc,
    /// nranks as its COLL lines state it (`[nranks=N]`, the first one), and where.
    pub nranks_coll: Option<u32>,
    pub nranks_coll_at: Loc,
    /// A later line of the stream that states a different nranks than the
    /// first line of its kind: (value, where, stated by an init line).
    pub nranks_other: Option<(u32, Loc, bool)>,
    pub comm_id: Option<u64>,
    pub parent: Option<u64>,
    pub color: Option<i64>,
    pub split_count: Option<u32>,
    pub init_complete: bool,
    pub dev: Option<u32>,
    pub prefix_rank: Option<u32>,
    pub prefix_local: Option<u32>,
    pub first: Loc,
    pub last: Loc,
    /// Where `Destroy COMPLETE` / `Abort COMPLETE` was logged.
    pub ended: Option<(InitPhase, Loc)>,
}

impl Stream {
    /// The file and line of call `i`.
    pub fn loc(&self, i: usize) -> Loc {
        let run = self
            .file_runs
            .partition_point(|&(_, start)| start as usize <= i);
        let file = self.file_runs[run.saturating_sub(1)].0;
        Loc {
            file,
            line: u64::from(self.calls[i].line),
        }
    }

    pub fn nranks(&self) -> Option<u32> {
        self.nranks_init.or(self.nranks_coll)
    }
}

/// An NCCL WARN line.
#[derive(Clone, Debug)]
pub struct WarnRec {
    pub host: u32,
    pub pid: u32,
    pub dev: Option<u32>,
    pub loc: Loc,
    pub op: Option<Func>,
    pub kind: WarnKind,
    pub text: String,
}

/// A PyTorch watchdog or ProcessGroupNCCL line.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorchRec {
    pub loc: Loc,
    /// The rank PyTorch (or the launcher's prefix) names.
    pub rank: Option<u32>,
    /// The process group, as the line names it.
    pub pg: Option<String>,
    pub event: TorchEventRec,
}

/// What a PyTorch line says (see [`super::parse::TorchEvent`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TorchEventRec {
    Timeout {
        seq: u64,
        op: String,
        numel_in: Option<u64>,
        numel_out: Option<u64>,
        timeout_ms: Option<u64>,
        ran_ms: Option<u64>,
    },
    Progress {
        at: Option<u64>,
        enqueued: u64,
        completed: Option<u64>,
    },
    Error {
        text: String,
    },
}

/// Line counts, by what the parser made of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub lines: u64,
    pub nccl_lines: u64,
    pub calls: u64,
    pub init_lines: u64,
    pub warn_lines: u64,
    /// NCCL lines that carry nothing the analyzer uses (topology, channels, …).
    pub other_nccl_lines: u64,
    /// Lines that are not NCCL's (application output, blank lines).
    pub not_nccl_lines: u64,
    /// NCCL COLL/init lines with a required field missing or unreadable.
    pub malformed_lines: u64,
    /// Of those, COLL lines: calls that could not be read.
    pub malformed_calls: u64,
    /// Lines over [`LineSplitter::MAX_LINE`](super::ingest::LineSplitter::MAX_LINE) bytes: skipped, not read.
    pub long_lines: u64,
    /// Calls skipped because another file had already logged them.
    pub repeated_calls: u64,
    /// PyTorch watchdog / ProcessGroupNCCL lines.
    pub torch_lines: u64,
    /// Lines that were the rest of a COLL line cut short (wrapped, or cut
    /// by another process's line) and were joined back to it.
    pub rejoined_lines: u64,
}

impl Counts {
    pub(crate) fn add(&mut self, o: &Counts) {
        self.lines += o.lines;
        self.nccl_lines += o.nccl_lines;
        self.calls += o.calls;
        self.init_lines += o.init_lines;
        self.warn_lines += o.warn_lines;
        self.other_nccl_lines += o.other_nccl_lines;
        self.not_nccl_lines += o.not_nccl_lines;
        self.malformed_lines += o.malformed_lines;
        self.malformed_calls += o.malformed_calls;
        self.long_lines += o.long_lines;
        self.repeated_calls += o.repeated_calls;
        self.torch_lines += o.torch_lines;
        self.rejoined_lines += o.rejoined_lines;
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct FileInfo {
    pub path: String,
    pub bytes: u64,
    pub gzip: bool,
    pub lines: u64,
    /// A problem met while reading (a truncated gzip stream, an I/O error);
    /// the lines before it were used.
    pub note: Option<String>,
    /// Other paths given for this same file (the same path twice, a link
    /// to it, a directory holding it): the file is read once.
    pub also_given_as: Vec<String>,
    /// Lines over [`LineSplitter::MAX_LINE`](super::ingest::LineSplitter::MAX_LINE) bytes, skipped.
    pub long_lines: u64,
    /// The first of them: `(line, length in bytes)`.
    pub first_long_line: Option<(u64, u64)>,
}

/// Everything read from the input.
#[derive(Debug, Default)]
pub struct Collected {
    pub files: Vec<FileInfo>,
    pub hosts: Vec<String>,
    pub sigs: Vec<Sig>,
    pub streams: Vec<Stream>,
    pub warnings: Vec<WarnRec>,
    /// PyTorch's watchdog lines.
    pub torch: Vec<TorchRec>,
    /// Flight Recorder dumps.
    pub flight: Vec<super::flight::Dump>,
    /// Files that could not be read: the path and why.
    pub unreadable: Vec<String>,
    pub counts: Counts,
    /// Calls of a process that a later file repeats (the same run logged
    /// twice, e.g. a per-rank file and a console copy): the repeat is skipped.
    pub repeats: Vec<String>,
    /// `(file, host, pid)`: a process whose calls in that file repeat what
    /// an earlier file holds; its WARN lines there are repeats too.
    pub repeated_procs: Vec<(u32, u32, u32)>,
    /// The first COLL line that could not be read.
    pub first_malformed_call: Option<BadLine>,
}

/// A line that could not be read, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub loc: Loc,
    /// Which field was wrong, with what, and what was expected.
    pub why: String,
    /// The line, cut to [`SHOWN_TEXT`] bytes.
    pub text: String,
}

/// The most bytes of a line quoted in a report.
pub const SHOWN_TEXT: usize = 200;
