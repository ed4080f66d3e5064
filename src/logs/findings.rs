//! What the analysis reports: findings (kind, severity, ranks, place), the
//! per-communicator and per-rank reports, the [`Analysis`] itself, and how
//! calls, ranks, datatypes, ops and log places are written in them.

use super::model::{Collected, Counts, FileInfo, Loc, Sig, Stream};
use super::resolve::IdentifiedBy;
use crate::core::{DataType, Func, RedOp, redop::NUM_BUILTIN_OPS};
use serde::Serialize;

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Severity {
    Error,
    Warning,
    Info,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum FindingKind {
    /// Ranks stopped: others issued collective #k, these never did.
    Stopped,
    /// Ranks left out calls the others made; their later calls line up.
    Skipped,
    /// Ranks made calls the others did not; their later calls line up.
    Extra,
    /// Ranks made the others' next calls in a different order.
    Reordered,
    OpMismatch,
    CountMismatch,
    DatatypeMismatch,
    RedopMismatch,
    RootMismatch,
    /// A Send with no matching Recv on its peer.
    UnmatchedSend,
    /// A Recv with no matching Send from its peer.
    UnmatchedRecv,
    /// A matched Send/Recv pair whose count or datatype differ.
    P2pMismatch,
    /// A Send/Recv naming a peer outside `0..nranks`.
    InvalidPeer,
    InvalidRoot,
    InvalidType,
    InvalidOp,
    /// Any other NCCL WARN line.
    NcclWarning,
    /// NCCL's network transport failed (WARN).
    NetworkError,
    /// NCCL saw two peers post different sizes for one transfer (WARN).
    PeerSizeMismatch,
    /// Two ranks of one communicator on one GPU (WARN).
    DuplicateGpu,
    /// A CUDA call failed inside NCCL (WARN).
    CudaError,
    /// An allocation failed inside NCCL (WARN).
    OutOfMemory,
    /// A rank could not connect to a peer or the bootstrap (WARN).
    ConnectionFailed,
    /// Ranks run different NCCL versions (WARN).
    VersionMismatch,
    /// NCCL gave up waiting, or aborted (WARN): evidence of a hang.
    NcclTimeout,
    /// rankwise's checker refused a call or failed a communicator (its
    /// WARN line in the journal): a contract violation or hang it proved.
    CheckerError,
    /// A PyTorch watchdog timed out on a collective.
    WatchdogTimeout,
    /// Ranks were at different collectives when PyTorch's watchdog fired.
    WatchdogMismatch,
    /// An NCCL error reported through PyTorch.
    TorchError,
    /// The logs start at different calls on different ranks.
    Truncated,
    /// The logs end with ranks at different calls, and nothing says the job hung.
    LogsEndApart,
    /// The ranks' logs could not be lined up (no opCount, no init lines).
    Unaligned,
    /// Flight Recorder dumps: a finding of their own.
    FlightRecorder,
    /// A file that could not be read, and why.
    Unreadable,
    MissingRanks,
    DuplicateRank,
    /// A file repeats calls another file already holds (skipped).
    RepeatedLog,
    /// The lines of a communicator state different nranks, or an impossible one.
    NranksConflict,
    /// An init line states a rank at or above the communicator's nranks.
    RankOutOfRange,
    /// COLL lines that could not be read: calls that are not checked.
    MalformedCalls,
    ZeroCount,
}

impl FindingKind {
    pub fn severity(self) -> Severity {
        use FindingKind::*;
        match self {
            Stopped | Skipped | Extra | Reordered | OpMismatch | CountMismatch
            | DatatypeMismatch | RedopMismatch | RootMismatch | UnmatchedSend | UnmatchedRecv
            | P2pMismatch | InvalidPeer | InvalidRoot | InvalidType | InvalidOp | NetworkError
            | PeerSizeMismatch | DuplicateGpu | CudaError | OutOfMemory | ConnectionFailed
            | VersionMismatch | WatchdogMismatch | CheckerError => Severity::Error,
            NcclWarning | MissingRanks | DuplicateRank | RepeatedLog | NranksConflict
            | RankOutOfRange | MalformedCalls | NcclTimeout | WatchdogTimeout | TorchError
            | Unaligned | FlightRecorder | Unreadable => Severity::Warning,
            ZeroCount | Truncated | LogsEndApart => Severity::Info,
        }
    }
}

/// One diagnosed fact.
#[derive(Clone, Debug, Serialize)]
pub struct Finding {
    pub severity: Severity,
    pub kind: FindingKind,
    /// The communicator's name (see [`CommReport::name`]).
    pub comm: Option<String>,
    /// Collective ordinal `#k` on the communicator; for Send/Recv, the
    /// ordinal of the call within its (sender → receiver) pair.
    pub position: Option<u64>,
    /// The ranks at fault (stopped, deviating, the side whose call is
    /// unmatched); for missing ranks, the first [`MISSING_LISTED`] of them.
    pub ranks: Vec<u32>,
    /// The other ranks involved (waiting, majority).
    pub other_ranks: Vec<u32>,
    /// For Send/Recv: the peer named by the call.
    pub peer: Option<u32>,
    pub op: Option<Func>,
    /// Index of the call in the first culprit rank's sequence (all its calls on the communicator).
    pub call_index: Option<u64>,
    pub location: Option<String>,
    pub message: String,
    /// The finding as a verdict line.
    #[serde(skip)]
    pub brief: String,
    /// For a finding made from a WARN line: that line's message.
    #[serde(skip)]
    pub warn_text: Option<String>,
}

impl Finding {
    pub(crate) fn new(kind: FindingKind, comm: Option<&str>, message: String) -> Self {
        Finding {
            severity: kind.severity(),
            kind,
            comm: comm.map(str::to_string),
            position: None,
            ranks: Vec::new(),
            other_ranks: Vec::new(),
            peer: None,
            op: None,
            call_index: None,
            location: None,
            brief: message.clone(),
            warn_text: None,
            message,
        }
    }
}

/// A call as shown in reports.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct CallView {
    /// Index among all this rank's calls on the communicator.
    pub index: u64,
    /// Collective ordinal `#k` (absent for Send/Recv).
    pub collective: Option<u64>,
    pub op: Func,
    pub count: u64,
    pub datatype: String,
    pub redop: Option<String>,
    pub root: Option<i32>,
    pub peer: Option<i32>,
    /// opCount as NCCL prints it (hex).
    pub op_count: Option<String>,
    pub location: String,
}

#[derive(Clone, Debug, Serialize)]
pub struct MemberReport {
    /// The rank; when `rank_known` is false, only a number in host order.
    pub rank: u32,
    pub rank_inferred: bool,
    pub rank_known: bool,
    /// The CUDA device (`[dev]` in NCCL's header), not a rank.
    pub dev: Option<u32>,
    pub host: String,
    pub pid: u32,
    pub comm: String,
    pub calls: u64,
    pub collectives: u64,
    pub p2p: u64,
    /// Launches: runs of calls sharing an opCount (fused groups count once).
    pub launches: u64,
    pub zero_count: u64,
    pub last_call: Option<CallView>,
    /// `destroyed` / `aborted` when the log shows the communicator's end.
    pub ended: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CallGroup {
    pub ranks: Vec<u32>,
    pub call: Option<CallView>,
}

/// The first place where the ranks' collective sequences part.
#[derive(Clone, Debug, Serialize)]
pub struct Divergence {
    pub position: u64,
    pub kind: FindingKind,
    pub stopped: Vec<u32>,
    pub issued: Vec<u32>,
    /// Ranks grouped by the call they issued at this position.
    pub groups: Vec<CallGroup>,
    /// How each rank that parts from the others departs, grouped.
    pub departures: Vec<DepartureReport>,
}

/// How some ranks' collectives part from the others' at the divergence.
#[derive(Clone, Debug, Serialize)]
pub struct DepartureReport {
    pub ranks: Vec<u32>,
    /// `stopped`, `skipped`, `extra`, `reordered`, or the field that differs.
    pub kind: FindingKind,
    /// Calls skipped, extra or reordered (1 for a mismatch, 0 when stopped).
    pub calls: u64,
    /// From these ordinals on (theirs, the others') the streams line up
    /// again; absent when nothing was seen to line up.
    pub realigned: Option<[u64; 2]>,
    /// Calls that line up from there (counted up to 256).
    pub lined_up: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct CommReport {
    pub name: String,
    pub comm_id: Option<String>,
    pub identified_by: IdentifiedBy,
    pub nranks: u32,
    pub ranks_seen: Vec<u32>,
    /// Ranks of `0..nranks` not seen, as inclusive `[first, last]` ranges.
    pub ranks_missing: Vec<[u32; 2]>,
    /// Collective positions on which every rank seen agrees.
    pub agreed_collectives: u64,
    pub divergence: Option<Divergence>,
    pub p2p_pairs: u64,
    pub p2p_matched: u64,
    pub zero_count_positions: u64,
    pub members: Vec<MemberReport>,
}

#[derive(Clone, Debug, Serialize)]
pub struct Analysis {
    pub verdict: String,
    /// What says the job hung, if anything did.
    pub hang_evidence: Option<String>,
    /// The Flight Recorder process groups compared.
    pub flight_groups: Vec<String>,
    pub problems: u64,
    pub counts: Counts,
    pub files: Vec<FileInfo>,
    pub communicators: Vec<CommReport>,
    pub findings: Vec<Finding>,
    /// Findings not listed (each kind is listed at most [`LIST_LIMIT`] times per communicator).
    pub findings_omitted: u64,
}

/// At most this many findings of one kind are listed per communicator.
pub const LIST_LIMIT: usize = 20;

/// A missing-ranks finding lists at most this many ranks in `ranks`; its
/// message gives them all, as ranges.
pub const MISSING_LISTED: usize = 1024;

pub fn hex(v: u64) -> String {
    format!("0x{v:x}")
}

/// `[0,1,2,5,7,8]` → `0-2,5,7-8`.
pub fn fmt_ranks(ranks: &[u32]) -> String {
    let mut out = String::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        if !out.is_empty() {
            out.push(',');
        }
        if j == i {
            out += &ranks[i].to_string();
        } else {
            out += &format!("{}-{}", ranks[i], ranks[j]);
        }
        i = j + 1;
    }
    out
}

/// `[[0, 2], [5, 5]]` → `0-2,5`.
pub fn fmt_ranges(ranges: &[[u32; 2]]) -> String {
    let parts: Vec<String> = ranges
        .iter()
        .map(|&[a, b]| {
            if a == b {
                a.to_string()
            } else {
                format!("{a}-{b}")
            }
        })
        .collect();
    parts.join(",")
}

/// The ranks of `0..nranks` not in `seen` (sorted, distinct), as inclusive
/// ranges: as many entries as there are gaps, whatever `nranks` says.
pub fn gaps(seen: &[u32], nranks: u32) -> Vec<[u32; 2]> {
    let mut out = Vec::new();
    let mut next = 0u32;
    for &r in seen.iter().filter(|&&r| r < nranks) {
        if r > next {
            out.push([next, r - 1]);
        }
        next = r + 1;
    }
    if next < nranks {
        out.push([next, nranks - 1]);
    }
    out
}

pub(crate) fn ranks_word(ranks: &[u32]) -> String {
    if ranks.len() == 1 {
        format!("rank {}", ranks[0])
    } else {
        format!("ranks {}", fmt_ranks(ranks))
    }
}

/// How the reports of one communicator name its members: by rank when the
/// ranks are known, else by process (`host:pid`, and the CUDA device).
#[derive(Clone, Debug, Default)]
pub(crate) struct Who {
    known: bool,
    labels: std::collections::HashMap<u32, String>,
}

impl Who {
    pub(crate) fn new(c: &Collected, members: &[(u32, usize, bool)], known: bool) -> Who {
        let labels = members
            .iter()
            .map(|&(r, si, _)| (r, process_label(c, &c.streams[si])))
            .collect();
        Who { known, labels }
    }

    pub(crate) fn known(&self) -> bool {
        self.known
    }

    /// `rank 3`, `ranks 0-2,5`; or `process node1:4242 (dev 0)`.
    pub(crate) fn word(&self, ranks: &[u32]) -> String {
        if self.known {
            return ranks_word(ranks);
        }
        let names: Vec<&str> = ranks
            .iter()
            .map(|r| self.labels.get(r).map_or("?", String::as_str))
            .collect();
        match names.len() {
            1 => format!("process {}", names[0]),
            _ => format!("processes {}", names.join(", ")),
        }
    }
}

/// `node1:4242 (dev 0)`, or the comm pointer for lines without a header.
pub(crate) fn process_label(c: &Collected, s: &Stream) -> String {
    let host = &c.hosts[s.host as usize];
    let mut l = if host.is_empty() {
        format!("comm {}", hex(s.comm))
    } else {
        format!("{host}:{}", s.pid)
    };
    if let Some(d) = s.dev {
        l += &format!(" (dev {d})");
    }
    l
}

pub(crate) fn plural_calls(n: usize) -> String {
    if n == 1 {
        "1 call".to_string()
    } else {
        format!("{n} calls")
    }
}

/// A datatype code as the reports name it: NCCL's enumerator without its
/// prefix (`float32`, `bfloat16`), or `datatype N` for a code NCCL does not define.
pub fn datatype_name(code: i32) -> String {
    match DataType::from_code(code) {
        Some(dt) => dt.nccl_name()["nccl".len()..].to_ascii_lowercase(),
        None => format!("datatype {code}"),
    }
}

/// Bytes per element of a datatype code (`None` for codes NCCL does not define).
pub fn datatype_size(code: i32) -> Option<u64> {
    DataType::from_code(code).map(|dt| dt.size() as u64)
}

/// A reduction op code as the reports name it: `sum` … `avg`, `premulsum N`
/// for an op created at run time, `op N` for a negative code.
pub fn redop_name(code: i32) -> String {
    match RedOp::from_builtin_code(code) {
        Some(op) => op.name().to_string(),
        None if code >= NUM_BUILTIN_OPS => format!("premulsum {code}"),
        None => format!("op {code}"),
    }
}

pub(crate) fn loc_str(c: &Collected, loc: Loc) -> String {
    let path = c
        .files
        .get(loc.file as usize)
        .map_or("?", |f| f.path.as_str());
    format!("{path}:{}", loc.line)
}

pub(crate) fn call_view(c: &Collected, s: &Stream, i: usize, collective: Option<u64>) -> CallView {
    let rec = s.calls[i];
    let sig = c.sigs[rec.sig as usize];
    CallView {
        index: i as u64,
        collective,
        op: sig.op,
        count: sig.count,
        datatype: datatype_name(sig.datatype),
        redop: sig.op.reduces().then(|| redop_name(sig.redop)),
        root: sig.op.is_rooted().then_some(sig.root),
        peer: sig.op.is_p2p().then_some(sig.root),
        op_count: (rec.op_count != u64::MAX).then(|| format!("{:x}", rec.op_count)),
        location: loc_str(c, s.loc(i)),
    }
}

pub(crate) fn describe(sig: &Sig) -> String {
    let mut d = format!("count {} {}", sig.count, datatype_name(sig.datatype));
    if sig.op.reduces() {
        d += &format!(" {}", redop_name(sig.redop));
    }
    if sig.op.is_rooted() {
        d += &format!(" root {}", sig.root);
    }
    d
}

/// COLL lines that could not be read: how many, what that means
/// (`consequence`, said of one call), and the first one.
pub(crate) fn malformed_calls_note(c: &Collected, consequence: &str) -> Option<Finding> {
    let bad = c.first_malformed_call.as_ref()?;
    let n = c.counts.malformed_calls;
    let mut f = Finding::new(
        FindingKind::MalformedCalls,
        None,
        format!(
            "{} could not be read: {consequence}; the first is {}, where {}: {}",
            if n == 1 {
                "1 COLL line".to_string()
            } else {
                format!("{n} COLL lines")
            },
            loc_str(c, bad.loc),
            bad.why,
            bad.text,
        ),
    );
    f.location = Some(loc_str(c, bad.loc));
    Some(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_ranges() {
        assert_eq!(fmt_ranks(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(fmt_ranks(&[3]), "3");
        assert_eq!(fmt_ranks(&[]), "");
    }

    #[test]
    fn gaps_are_the_unseen_ranks_as_ranges() {
        // every subset of 0..7 as `seen`, against 0..9 ranks
        for mask in 0u32..128 {
            let seen: Vec<u32> = (0..7).filter(|r| mask & (1 << r) != 0).collect();
            for nranks in 0..9u32 {
                let expected: Vec<u32> = (0..nranks).filter(|r| !seen.contains(r)).collect();
                let got: Vec<u32> = gaps(&seen, nranks)
                    .iter()
                    .flat_map(|&[a, b]| a..=b)
                    .collect();
                assert_eq!(got, expected, "seen {seen:?} nranks {nranks}");
                // ranges are maximal: no two touch
                for w in gaps(&seen, nranks).windows(2) {
                    assert!(w[0][1] + 1 < w[1][0], "{w:?}");
                }
            }
        }
        assert_eq!(gaps(&[0, 1], u32::MAX), [[2, u32::MAX - 1]]);
        assert_eq!(fmt_ranges(&[[0, 2], [5, 5], [7, 8]]), "0-2,5,7-8");
    }
}
