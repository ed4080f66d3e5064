//! Streams → communicators → findings.
//!
//! 1. **Resolve.** Streams (one process's view of one comm pointer) are
//!    grouped into communicators: by `commId` from the init lines; for an
//!    `ncclCommSplit` child that prints no commId (NCCL 2.28), by its
//!    parent's communicator, split count and color; with no init lines at
//!    all, by the order in which each process (and device) first used a
//!    communicator of that size. A stream's rank comes from its init line;
//!    failing that from a launcher prefix, the `[dev]` number (rankwise's
//!    trace prints the rank there), or order, and is then marked inferred.
//! 2. **Collectives.** Every rank must issue the same collectives in the same
//!    order with the same op, count, datatype, reduction op and root
//!    (CONTRACTS.md §4). Collectives are aligned by their ordinal `#k` on the
//!    communicator (Send/Recv do not count); the first `k` where a rank has no
//!    call while others do ("stopped") or where the calls differ (op kind,
//!    count, datatype, op, root — reported in that order) is the divergence.
//!    A zero-count collective is logged but discarded by NCCL (it does not
//!    advance opCount); it still takes its place in the order.
//! 3. **Send/Recv.** Matched per ordered pair (s → d) in order: the n-th Send
//!    from s to d pairs with the n-th Recv on d from s, and both must name the
//!    same count and datatype; leftovers are unmatched.
//! 4. **Warnings.** argcheck WARN lines carry no comm pointer; each is
//!    attributed to the communicator its process used last before it.
//!
//! Fused calls are grouped by opCount (a group's calls share one): each
//! rank's launches are counted that way, a zero-count collective excluded.

use super::model::{Collected, Loc, Sig, Stream, WarnRec};
use super::parse::{InitPhase, WarnKind};
use crate::core::{DataType, Func, RedOp, redop::NUM_BUILTIN_OPS};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// How a communicator's members were found to belong together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifiedBy {
    CommId,
    Split,
    Order,
}

/// One communicator and the streams (ranks) in it.
#[derive(Clone, Debug)]
pub struct CommGroup {
    pub name: String,
    pub comm_id: Option<u64>,
    pub identified_by: IdentifiedBy,
    pub nranks: u32,
    /// `(rank, stream index, rank inferred)`, sorted by rank, one per rank.
    pub members: Vec<(u32, usize, bool)>,
    pub notes: Vec<Finding>,
    /// `(file, host, pid)` of streams left out because they repeat a member
    /// (the same run logged twice): that file's WARN lines of that process
    /// are repeats too.
    pub repeated: Vec<(u32, u32, u32)>,
}

/// The largest nranks accepted from a log line, and so the largest rank
/// index + 1: a statement above it is reported as implausible and not used.
/// 2^24 is over a hundred times the largest jobs run so far; it keeps a
/// 100-byte line from claiming four billion ranks.
pub const MAX_NRANKS: u32 = 1 << 24;

/// Why a stream is not a member of its communicator.
#[derive(Clone, Copy, Debug)]
enum LeftOut {
    /// Its init line states a rank another stream (this index) holds.
    RankHeldBy(usize),
    /// Its init line states a rank at or above the communicator's nranks.
    OutOfRange,
    /// It states no rank and no rank was left to give it.
    NoRankFree,
}

/// "comm 0x… on host:pid".
fn stream_name(c: &Collected, s: &Stream) -> String {
    format!(
        "comm {} on {}:{}",
        hex(s.comm),
        c.hosts[s.host as usize],
        s.pid
    )
}

fn plural_calls(n: usize) -> String {
    if n == 1 {
        "1 call".to_string()
    } else {
        format!("{n} calls")
    }
}

/// Every nranks a group's streams state: `(value, stream, where, by an init line)`.
fn nranks_claims(c: &Collected, streams: &[usize]) -> Vec<(u32, usize, Loc, bool)> {
    let mut out = Vec::new();
    for &i in streams {
        let s = &c.streams[i];
        if let Some(n) = s.nranks_init {
            out.push((n, i, s.nranks_init_at, true));
        }
        if let Some(n) = s.nranks_coll {
            out.push((n, i, s.nranks_coll_at, false));
        }
        if let Some((n, at, init)) = s.nranks_other {
            out.push((n, i, at, init));
        }
    }
    out
}

fn plausible_nranks(n: u32) -> bool {
    (1..=MAX_NRANKS).contains(&n)
}

/// The lowest nranks that holds every rank the streams' init lines state
/// (ranks beyond [`MAX_NRANKS`] do not count).
fn ranks_needed(c: &Collected, streams: &[usize]) -> u32 {
    streams
        .iter()
        .filter_map(|&i| c.streams[i].rank)
        .filter(|&r| r < MAX_NRANKS)
        .map(|r| r + 1)
        .max()
        .unwrap_or(0)
}

/// A communicator's nranks: of the plausible values its lines state, the
/// one most streams state, preferring values that hold every stated rank
/// (ties: the smaller); with none, the number of streams. Never more than
/// [`MAX_NRANKS`] or the streams found, whichever is larger.
fn choose_nranks(c: &Collected, streams: &[usize]) -> u32 {
    // value → (streams stating it, the last of them); a stream's claims
    // come together, so it is counted once per value
    let mut votes: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for (n, i, _, _) in nranks_claims(c, streams) {
        if plausible_nranks(n) {
            let v = votes.entry(n).or_insert((0, usize::MAX));
            if v.1 != i {
                *v = (v.0 + 1, i);
            }
        }
    }
    let needed = ranks_needed(c, streams);
    let best = |min: u32| {
        votes
            .iter()
            .filter(|(n, _)| **n >= min)
            .max_by_key(|(n, v)| (v.0, std::cmp::Reverse(**n)))
            .map(|(n, _)| *n)
    };
    best(needed)
        .or_else(|| best(0))
        .unwrap_or_else(|| u32::try_from(streams.len()).unwrap_or(u32::MAX))
}

/// A warning when a group's lines state different nranks, or an impossible
/// one: which line states what, and the value used.
fn nranks_note(c: &Collected, streams: &[usize], nranks: u32, name: &str) -> Option<Finding> {
    let claims = nranks_claims(c, streams);
    let mut by_value: BTreeMap<u32, Vec<(usize, Loc, bool)>> = BTreeMap::new();
    for (n, i, at, init) in claims {
        by_value.entry(n).or_default().push((i, at, init));
    }
    let all_plausible = by_value.keys().all(|&n| plausible_nranks(n));
    if by_value.len() <= 1 && all_plausible {
        return None;
    }
    const SHOWN: usize = 3;
    let describe = |(n, v): (&u32, &Vec<(usize, Loc, bool)>)| {
        let flag = match *n {
            0 => " (no communicator has 0 ranks)".to_string(),
            n if n > MAX_NRANKS => format!(" (more than the {MAX_NRANKS} accepted)"),
            _ => String::new(),
        };
        let mut who: Vec<String> = v
            .iter()
            .take(SHOWN)
            .map(|&(i, at, init)| {
                let s = &c.streams[i];
                let whose = match s.rank {
                    Some(r) if r < MAX_NRANKS => format!("rank {r}"),
                    _ => stream_name(c, s),
                };
                let line = if init { "init line" } else { "COLL lines" };
                format!("{whose}'s {line} ({})", loc_str(c, at))
            })
            .collect();
        if v.len() > SHOWN {
            who.push(format!("{} more", v.len() - SHOWN));
        }
        format!("nranks {n}{flag} in {}", who.join(", "))
    };
    let mut stated: Vec<String> = by_value.iter().take(LIST_LIMIT).map(describe).collect();
    if by_value.len() > LIST_LIMIT {
        stated.push(format!("{} more values", by_value.len() - LIST_LIMIT));
    }
    let why = if by_value.contains_key(&nranks) {
        let needed = ranks_needed(c, streams);
        if by_value.len() > 1 && needed > 1 && nranks >= needed {
            format!(
                ", stated most often among the values that hold ranks 0..={}",
                needed - 1
            )
        } else {
            String::new()
        }
    } else {
        ", the number of streams found".to_string()
    };
    let head = if by_value.len() > 1 {
        format!("the lines of {name} disagree on nranks")
    } else {
        format!("the nranks of {name} is implausible")
    };
    Some(Finding::new(
        FindingKind::NranksConflict,
        Some(name),
        format!("{head}: {}; using {nranks}{why}", stated.join("; ")),
    ))
}

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
            Stopped | OpMismatch | CountMismatch | DatatypeMismatch | RedopMismatch
            | RootMismatch | UnmatchedSend | UnmatchedRecv | P2pMismatch | InvalidPeer
            | InvalidRoot | InvalidType | InvalidOp => Severity::Error,
            NcclWarning | MissingRanks | DuplicateRank | RepeatedLog | NranksConflict
            | RankOutOfRange | MalformedCalls => Severity::Warning,
            ZeroCount => Severity::Info,
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
    fn new(kind: FindingKind, comm: Option<&str>, message: String) -> Self {
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
    pub rank: u32,
    pub rank_inferred: bool,
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
    pub problems: u64,
    pub counts: super::model::Counts,
    pub files: Vec<super::model::FileInfo>,
    pub communicators: Vec<CommReport>,
    pub findings: Vec<Finding>,
    /// Findings not listed (each kind is listed at most [`LIST_LIMIT`] times per communicator).
    pub findings_omitted: u64,
}

/// At most this many findings of one kind are listed per communicator.
pub const LIST_LIMIT: usize = 20;

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

/// A missing-ranks finding lists at most this many ranks in `ranks`; its
/// message gives them all, as ranges.
pub const MISSING_LISTED: usize = 1024;

fn ranks_word(ranks: &[u32]) -> String {
    if ranks.len() == 1 {
        format!("rank {}", ranks[0])
    } else {
        format!("ranks {}", fmt_ranks(ranks))
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

fn loc_str(c: &Collected, loc: Loc) -> String {
    let path = c
        .files
        .get(loc.file as usize)
        .map_or("?", |f| f.path.as_str());
    format!("{path}:{}", loc.line)
}

fn call_view(c: &Collected, s: &Stream, i: usize, collective: Option<u64>) -> CallView {
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

/// Group streams into communicators and give each stream its rank.
pub fn resolve(c: &Collected) -> Vec<CommGroup> {
    #[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
    enum Key {
        Id(u64),
        Split(Box<Key>, u32, i64),
        Order(u32, u32, u32, u32, u32),
    }
    // (host, pid, comm) → streams (epochs), for parent look-ups.
    let mut by_ptr: HashMap<(u32, u32, u64), Vec<usize>> = HashMap::new();
    for (i, s) in c.streams.iter().enumerate() {
        by_ptr.entry((s.host, s.pid, s.comm)).or_default().push(i);
    }
    let mut order: Vec<usize> = (0..c.streams.len()).collect();
    order.sort_by_key(|&i| c.streams[i].first);
    // Ordinal of each id-less, parent-less stream among its process's
    // streams of the same device and size.
    let mut ordinals: HashMap<usize, u32> = HashMap::new();
    let mut next_ord: HashMap<(u32, u32, Option<u32>, Option<u32>), u32> = HashMap::new();
    for &i in &order {
        let s = &c.streams[i];
        if s.comm_id.is_none() && s.parent.is_none() {
            let n = next_ord
                .entry((s.host, s.pid, s.dev, s.nranks()))
                .or_insert(0);
            ordinals.insert(i, *n);
            *n += 1;
        }
    }
    fn key_of(
        c: &Collected,
        i: usize,
        by_ptr: &HashMap<(u32, u32, u64), Vec<usize>>,
        ordinals: &HashMap<usize, u32>,
        depth: u32,
    ) -> Key {
        let s = &c.streams[i];
        if let Some(id) = s.comm_id {
            return Key::Id(id);
        }
        if let (Some(parent), true) = (s.parent, depth < 16) {
            // The parent epoch alive when the child appeared.
            let cands = by_ptr.get(&(s.host, s.pid, parent));
            let p = cands.and_then(|v| {
                v.iter()
                    .copied()
                    .filter(|&p| c.streams[p].first <= s.first)
                    .max_by_key(|&p| c.streams[p].first)
                    .or_else(|| v.first().copied())
            });
            if let Some(p) = p {
                return Key::Split(
                    Box::new(key_of(c, p, by_ptr, ordinals, depth + 1)),
                    s.split_count.unwrap_or(0),
                    s.color.unwrap_or(0),
                );
            }
        }
        let ord = ordinals.get(&i).copied().unwrap_or(0);
        let n = s.nranks().unwrap_or(0);
        if s.comm_id.is_none() && s.parent.is_some() {
            // A split child whose parent never appeared: on its own.
            return Key::Order(n, u32::MAX, s.host, s.pid, s.comm as u32);
        }
        Key::Order(n, ord, 0, 0, 0)
    }

    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for &i in &order {
        let k = key_of(c, i, &by_ptr, &ordinals, 0);
        groups.entry(k).or_default().push(i);
    }
    // Without init lines, several communicators of one size used first at
    // the same point (pairs, say) look alike: more streams than ranks. Cut
    // them into communicators of nranks streams, in host/rank order.
    let mut pending: Vec<(Key, Vec<usize>)> = Vec::new();
    for (key, streams) in groups {
        let nranks = choose_nranks(c, &streams);
        if matches!(key, Key::Order(..)) && nranks > 0 && streams.len() > nranks as usize {
            let mut sorted = streams;
            sorted.sort_by_key(|&i| {
                let s = &c.streams[i];
                (s.host, s.prefix_rank, s.dev, s.pid, s.comm)
            });
            for chunk in sorted.chunks(nranks as usize) {
                let mut chunk = chunk.to_vec();
                chunk.sort_by_key(|&i| c.streams[i].first);
                pending.push((key.clone(), chunk));
            }
        } else {
            pending.push((key, streams));
        }
    }
    let mut out: Vec<(Loc, CommGroup)> = Vec::new();
    for (key, streams) in pending {
        let mut notes = Vec::new();
        let nranks = choose_nranks(c, &streams);
        // Ranks: init lines first, then hints, then order.
        let mut taken: BTreeMap<u32, (usize, bool)> = BTreeMap::new();
        let mut unknown = Vec::new();
        let mut left_out: Vec<(usize, LeftOut)> = Vec::new();
        for &i in &streams {
            match c.streams[i].rank {
                Some(r) if r < nranks => match taken.get(&r) {
                    None => {
                        taken.insert(r, (i, false));
                    }
                    // Keep the stream with more calls (the first, if equal).
                    Some(&(j, _)) if c.streams[i].calls.len() > c.streams[j].calls.len() => {
                        taken.insert(r, (i, false));
                        left_out.push((j, LeftOut::RankHeldBy(i)));
                    }
                    Some(&(j, _)) => left_out.push((i, LeftOut::RankHeldBy(j))),
                },
                Some(_) => left_out.push((i, LeftOut::OutOfRange)),
                None => unknown.push(i),
            }
        }
        if !unknown.is_empty() {
            // A hint is used only if it gives every unplaced stream a free,
            // distinct rank; so no placement below can collide.
            let free_ok = |v: &[Option<u32>], taken: &BTreeMap<u32, (usize, bool)>| {
                let mut seen = std::collections::HashSet::new();
                v.iter().all(|r| {
                    matches!(r, Some(r) if *r < nranks && !taken.contains_key(r) && seen.insert(*r))
                })
            };
            let by_prefix: Vec<_> = unknown.iter().map(|&i| c.streams[i].prefix_rank).collect();
            let by_dev: Vec<_> = unknown.iter().map(|&i| c.streams[i].dev).collect();
            if free_ok(&by_prefix, &taken) {
                for (&i, r) in unknown.iter().zip(by_prefix) {
                    taken.insert(r.unwrap_or(0), (i, true));
                }
            } else if free_ok(&by_dev, &taken) {
                for (&i, r) in unknown.iter().zip(by_dev) {
                    taken.insert(r.unwrap_or(0), (i, true));
                }
            } else {
                let mut rest = unknown.clone();
                rest.sort_by_key(|&i| {
                    let s = &c.streams[i];
                    (s.host, s.prefix_rank, s.dev, s.pid, s.comm)
                });
                let mut r = 0;
                for i in rest {
                    while taken.contains_key(&r) {
                        r += 1;
                    }
                    if r >= nranks {
                        left_out.push((i, LeftOut::NoRankFree));
                    } else {
                        taken.insert(r, (i, true));
                    }
                }
            }
        }
        let members: Vec<(u32, usize, bool)> =
            taken.into_iter().map(|(r, (i, inf))| (r, i, inf)).collect();
        let lead = &c.streams[members.first().map_or(streams[0], |m| m.1)];
        let (name, comm_id, by) = match &key {
            Key::Id(id) => (
                format!("commId {}", hex(*id)),
                Some(*id),
                IdentifiedBy::CommId,
            ),
            Key::Split(..) => {
                let parent_id = {
                    let mut k = &key;
                    while let Key::Split(p, ..) = k {
                        k = p;
                    }
                    match k {
                        Key::Id(id) => format!(", split from commId {}", hex(*id)),
                        _ => String::new(),
                    }
                };
                (
                    format!(
                        "comm {} (color {}{parent_id})",
                        hex(lead.comm),
                        lead.color.unwrap_or(0)
                    ),
                    None,
                    IdentifiedBy::Split,
                )
            }
            Key::Order(..) => (
                format!("comm {}", hex(lead.comm)),
                None,
                IdentifiedBy::Order,
            ),
        };
        if let Some(f) = nranks_note(c, &streams, nranks, &name) {
            notes.push(f);
        }
        let mut repeated = Vec::new();
        let mut listed = 0usize;
        for &(i, why) in &left_out {
            let s = &c.streams[i];
            if let LeftOut::RankHeldBy(j) = why {
                let k = &c.streams[j];
                if (k.host, k.pid, k.comm) == (s.host, s.pid, s.comm) {
                    // The same process and pointer twice: one run logged in two files.
                    for &(file, _) in &s.file_runs {
                        repeated.push((file, s.host, s.pid));
                    }
                    let file = |x: &Stream| {
                        c.files
                            .get(x.first.file as usize)
                            .map_or("?", |f| f.path.as_str())
                    };
                    notes.push(Finding::new(
                        FindingKind::RepeatedLog,
                        Some(&name),
                        format!(
                            "{} repeats the {} calls of {}:{} comm {} already read from {}; skipped, with that process's WARN lines there",
                            file(s),
                            s.calls.len(),
                            c.hosts[s.host as usize],
                            s.pid,
                            hex(s.comm),
                            file(k)
                        ),
                    ));
                    continue;
                }
            }
            listed += 1;
            if listed > LIST_LIMIT {
                continue;
            }
            let this = stream_name(c, s);
            let (kind, message) = match why {
                LeftOut::RankHeldBy(j) => {
                    let k = &c.streams[j];
                    (
                        FindingKind::DuplicateRank,
                        format!(
                            "{this} states rank {} of {name} ({}), and so does {} ({}); {this} has {} and is left out",
                            s.rank.unwrap_or_default(),
                            loc_str(c, s.rank_at),
                            stream_name(c, k),
                            loc_str(c, k.rank_at),
                            plural_calls(s.calls.len()),
                        ),
                    )
                }
                LeftOut::OutOfRange => (
                    FindingKind::RankOutOfRange,
                    format!(
                        "{this} states rank {} ({}), outside 0..={} of {name} (nranks {nranks}); it is left out",
                        s.rank.unwrap_or_default(),
                        loc_str(c, s.rank_at),
                        nranks.saturating_sub(1),
                    ),
                ),
                LeftOut::NoRankFree => (
                    FindingKind::DuplicateRank,
                    format!(
                        "{this} states no rank, and all {nranks} ranks of {name} are already held; it is left out"
                    ),
                ),
            };
            let mut f = Finding::new(kind, Some(&name), message);
            f.ranks = s.rank.into_iter().collect();
            f.location = Some(loc_str(c, s.first));
            notes.push(f);
        }
        if listed > LIST_LIMIT {
            notes.push(Finding::new(
                FindingKind::DuplicateRank,
                Some(&name),
                format!(
                    "{} more streams of {name} have no rank of their own there; they are left out",
                    listed - LIST_LIMIT
                ),
            ));
        }
        out.push((
            streams
                .iter()
                .map(|&i| c.streams[i].first)
                .min()
                .unwrap_or_default(),
            CommGroup {
                name,
                comm_id,
                identified_by: by,
                nranks,
                members,
                notes,
                repeated,
            },
        ));
    }
    out.sort_by_key(|(l, _)| *l);
    // Names must be unique (two pointer-named communicators may share a pointer value).
    let mut seen: HashMap<String, u32> = HashMap::new();
    let mut groups: Vec<CommGroup> = out.into_iter().map(|(_, g)| g).collect();
    for g in &mut groups {
        let n = seen.entry(g.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            let new = format!("{} #{}", g.name, n);
            for f in &mut g.notes {
                f.comm = Some(new.clone());
            }
            g.name = new;
        }
    }
    groups
}

fn is_coll(sig: &Sig) -> bool {
    !sig.op.is_p2p()
}

/// The fields in which two collective calls differ, in report order.
fn differing_field(a: &Sig, b: &Sig) -> Option<FindingKind> {
    if a.op != b.op {
        Some(FindingKind::OpMismatch)
    } else if a.count != b.count {
        Some(FindingKind::CountMismatch)
    } else if a.datatype != b.datatype {
        Some(FindingKind::DatatypeMismatch)
    } else if a.op.reduces() && a.redop != b.redop {
        Some(FindingKind::RedopMismatch)
    } else if a.op.is_rooted() && a.root != b.root {
        Some(FindingKind::RootMismatch)
    } else {
        None
    }
}

/// The contract-relevant projection of a collective call (ranks that agree on it issued the same call).
fn contract_key(s: &Sig) -> (Func, u64, i32, i32, i32) {
    (
        s.op,
        s.count,
        s.datatype,
        if s.op.reduces() { s.redop } else { 0 },
        if s.op.is_rooted() { s.root } else { 0 },
    )
}

fn describe(sig: &Sig) -> String {
    let mut d = format!("count {} {}", sig.count, datatype_name(sig.datatype));
    if sig.op.reduces() {
        d += &format!(" {}", redop_name(sig.redop));
    }
    if sig.op.is_rooted() {
        d += &format!(" root {}", sig.root);
    }
    d
}

fn field_value(kind: FindingKind, sig: &Sig) -> String {
    match kind {
        FindingKind::OpMismatch => sig.op.name().to_string(),
        FindingKind::CountMismatch => format!("count {}", sig.count),
        FindingKind::DatatypeMismatch => datatype_name(sig.datatype),
        FindingKind::RedopMismatch => format!("op {}", redop_name(sig.redop)),
        FindingKind::RootMismatch => format!("root {}", sig.root),
        _ => describe(sig),
    }
}

fn kind_label(kind: FindingKind) -> &'static str {
    match kind {
        FindingKind::OpMismatch => "op kind mismatch",
        FindingKind::CountMismatch => "count mismatch",
        FindingKind::DatatypeMismatch => "datatype mismatch",
        FindingKind::RedopMismatch => "reduction op mismatch",
        FindingKind::RootMismatch => "root mismatch",
        _ => "mismatch",
    }
}

struct CommAnalysis {
    report: CommReport,
    findings: Vec<Finding>,
    omitted: u64,
}

fn analyze_comm(c: &Collected, g: &CommGroup) -> CommAnalysis {
    let name = g.name.as_str();
    let mut findings: Vec<Finding> = g.notes.clone();
    let mut omitted = 0u64;
    let streams: Vec<&Stream> = g.members.iter().map(|m| &c.streams[m.1]).collect();
    let ranks: Vec<u32> = g.members.iter().map(|m| m.0).collect();
    let missing = gaps(&ranks, g.nranks);
    if !missing.is_empty() {
        let count: u64 = missing
            .iter()
            .map(|[a, b]| u64::from(*b) - u64::from(*a) + 1)
            .sum();
        let mut f = Finding::new(
            FindingKind::MissingRanks,
            Some(name),
            format!(
                "{} {} of {name} (nranks {}) not in the logs",
                if count == 1 { "rank" } else { "ranks" },
                fmt_ranges(&missing),
                g.nranks
            ),
        );
        f.ranks = missing
            .iter()
            .flat_map(|&[a, b]| a..=b)
            .take(MISSING_LISTED)
            .collect();
        f.other_ranks = ranks.clone();
        findings.push(f);
    }

    // ---- collectives, aligned by ordinal ----
    let n = streams.len();
    let mut cursor = vec![0usize; n];
    let mut coll_total = vec![0u64; n];
    for (m, s) in streams.iter().enumerate() {
        coll_total[m] = s
            .calls
            .iter()
            .filter(|r| is_coll(&c.sigs[r.sig as usize]))
            .count() as u64;
    }
    let max_len = coll_total.iter().copied().max().unwrap_or(0);
    let min_len = coll_total.iter().copied().min().unwrap_or(0);
    let mut divergence = None;
    let mut zero_positions = 0u64;
    let mut zero_listed = 0usize;
    let mut k = 0u64;
    let mut at: Vec<Option<usize>> = vec![None; n];
    while k < max_len {
        for m in 0..n {
            at[m] = None;
            let s = streams[m];
            while cursor[m] < s.calls.len() && !is_coll(&c.sigs[s.calls[cursor[m]].sig as usize]) {
                cursor[m] += 1;
            }
            if cursor[m] < s.calls.len() {
                at[m] = Some(cursor[m]);
                cursor[m] += 1;
            }
        }
        // Fast path: all present, one signature.
        let first_sig = at[0].map(|i| streams[0].calls[i].sig);
        let same = at
            .iter()
            .enumerate()
            .all(|(m, a)| a.map(|i| streams[m].calls[i].sig) == first_sig && first_sig.is_some());
        let agree = same || {
            at.iter().all(Option::is_some) && {
                let keys: Vec<_> = at
                    .iter()
                    .enumerate()
                    .map(|(m, a)| contract_key(&c.sigs[streams[m].calls[a.unwrap()].sig as usize]))
                    .collect();
                keys.windows(2).all(|w| w[0] == w[1])
            }
        };
        // zero-count collectives
        let zero_ranks: Vec<u32> = at
            .iter()
            .enumerate()
            .filter(|(m, a)| {
                a.is_some_and(|i| c.sigs[streams[*m].calls[i].sig as usize].count == 0)
            })
            .map(|(m, _)| ranks[m])
            .collect();
        if !zero_ranks.is_empty() && agree {
            zero_positions += 1;
            if zero_listed < LIST_LIMIT {
                zero_listed += 1;
                let m = at.iter().position(Option::is_some).unwrap_or(0);
                let i = at[m].unwrap_or(0);
                let sig = c.sigs[streams[m].calls[i].sig as usize];
                let mut f = Finding::new(
                    FindingKind::ZeroCount,
                    Some(name),
                    format!(
                        "{} #{k} has count 0 on {}: logged, then discarded by NCCL (opCount does not advance)",
                        sig.op.name(),
                        ranks_word(&zero_ranks)
                    ),
                );
                f.position = Some(k);
                f.ranks = zero_ranks;
                f.op = Some(sig.op);
                f.call_index = Some(i as u64);
                f.location = Some(loc_str(c, streams[m].loc(i)));
                findings.push(f);
            } else {
                omitted += 1;
            }
        }
        if !agree {
            divergence = Some(k);
            break;
        }
        k += 1;
    }
    let agreed = divergence.unwrap_or(min_len.min(max_len));
    let mut div_report = None;
    if let Some(k) = divergence {
        let stopped: Vec<u32> = (0..n)
            .filter(|&m| at[m].is_none())
            .map(|m| ranks[m])
            .collect();
        let issued_m: Vec<usize> = (0..n).filter(|&m| at[m].is_some()).collect();
        let issued: Vec<u32> = issued_m.iter().map(|&m| ranks[m]).collect();
        // group issuing ranks by the call they made
        let mut groups: Vec<(Sig, Vec<usize>)> = Vec::new();
        for &m in &issued_m {
            let sig = c.sigs[streams[m].calls[at[m].unwrap()].sig as usize];
            match groups
                .iter_mut()
                .find(|(s, _)| contract_key(s) == contract_key(&sig))
            {
                Some((_, v)) => v.push(m),
                None => groups.push((sig, vec![m])),
            }
        }
        // majority first (ties: the group holding the lowest rank)
        groups.sort_by_key(|(_, v)| (std::cmp::Reverse(v.len()), v[0]));
        let view = |m: usize| call_view(c, streams[m], at[m].unwrap(), Some(k));
        let call_groups: Vec<CallGroup> = groups
            .iter()
            .map(|(_, v)| CallGroup {
                ranks: v.iter().map(|&m| ranks[m]).collect(),
                call: Some(view(v[0])),
            })
            .chain((!stopped.is_empty()).then(|| CallGroup {
                ranks: stopped.clone(),
                call: None,
            }))
            .collect();
        let opc = |m: usize| {
            let rec = streams[m].calls[at[m].unwrap()];
            if rec.op_count == u64::MAX {
                String::new()
            } else {
                format!(", opCount {:x}", rec.op_count)
            }
        };
        if groups.len() > 1 {
            let (ref_sig, ref_ms) = &groups[0];
            let kind = groups[1..]
                .iter()
                .filter_map(|(s, _)| differing_field(ref_sig, s))
                .min()
                .unwrap_or(FindingKind::CountMismatch);
            let odd: Vec<usize> = groups[1..]
                .iter()
                .flat_map(|(_, v)| v.iter().copied())
                .collect();
            let mut odd_ranks: Vec<u32> = odd.iter().map(|&m| ranks[m]).collect();
            odd_ranks.sort_unstable();
            let ref_ranks: Vec<u32> = ref_ms.iter().map(|&m| ranks[m]).collect();
            let odd_desc = groups[1..]
                .iter()
                .map(|(s, v)| {
                    let rs: Vec<u32> = v.iter().map(|&m| ranks[m]).collect();
                    let verb = if rs.len() == 1 { "has" } else { "have" };
                    let what = if kind == FindingKind::OpMismatch {
                        format!("issued {} ({})", s.op.name(), describe(s))
                    } else {
                        format!("{verb} {}", field_value(kind, s))
                    };
                    format!("{} {what}", ranks_word(&rs))
                })
                .collect::<Vec<_>>()
                .join(" and ");
            let ref_verb = if ref_ms.len() == 1 { "has" } else { "have" };
            let (what, ref_what) = if kind == FindingKind::OpMismatch {
                (
                    format!("collective #{k}"),
                    format!("issued {} ({})", ref_sig.op.name(), describe(ref_sig)),
                )
            } else {
                (
                    format!("{} #{k}", ref_sig.op.name()),
                    format!("{ref_verb} {}", field_value(kind, ref_sig)),
                )
            };
            let mut tail = String::new();
            if !stopped.is_empty() {
                tail += &format!("; {} never issued it", ranks_word(&stopped));
            }
            let opc_note = match streams[ref_ms[0]].calls[at[ref_ms[0]].unwrap()].op_count {
                u64::MAX => String::new(),
                v => format!(" (opCount {v:x})"),
            };
            let at_what = format!("{what} on {name}{opc_note}");
            let msg = format!(
                "{} at {at_what}: {odd_desc} where {} {ref_what}{tail}",
                kind_label(kind),
                ranks_word(&ref_ranks),
            );
            let mut f = Finding::new(kind, Some(name), msg);
            f.brief = format!(
                "contract mismatch: {odd_desc} where {} {ref_what} at {at_what}{tail}",
                ranks_word(&ref_ranks)
            );
            f.position = Some(k);
            f.ranks = odd_ranks;
            f.other_ranks = ref_ranks;
            f.op = Some(ref_sig.op);
            f.call_index = Some(at[odd[0]].unwrap() as u64);
            f.location = Some(loc_str(c, streams[odd[0]].loc(at[odd[0]].unwrap())));
            findings.push(f);
            div_report = Some(Divergence {
                position: k,
                kind,
                stopped,
                issued,
                groups: call_groups,
            });
        } else {
            let (sig, ms) = &groups[0];
            let mut msg = format!(
                "{} never issued {} #{k} ({}{}) on {name} where {} wait",
                ranks_word(&stopped),
                sig.op.name(),
                describe(sig),
                opc(ms[0]),
                ranks_word(&issued)
            );
            let brief = format!("likely hang: {msg}");
            let lasts: Vec<String> = stopped
                .iter()
                .map(|r| {
                    let m = ranks.iter().position(|x| x == r).unwrap();
                    let s = streams[m];
                    match s.calls.len() {
                        0 => format!("rank {r} logged no call"),
                        l => format!(
                            "rank {r}'s last call: {} {} at {}",
                            c.sigs[s.calls[l - 1].sig as usize].op.name(),
                            describe(&c.sigs[s.calls[l - 1].sig as usize]),
                            loc_str(c, s.loc(l - 1))
                        ),
                    }
                })
                .collect();
            msg += &format!(" ({})", lasts.join("; "));
            let mut f = Finding::new(FindingKind::Stopped, Some(name), msg);
            f.brief = brief;
            f.position = Some(k);
            f.ranks = stopped.clone();
            f.other_ranks = issued.clone();
            f.op = Some(sig.op);
            let m0 = ranks.iter().position(|x| *x == stopped[0]).unwrap();
            f.call_index = Some(streams[m0].calls.len() as u64);
            f.location = Some(loc_str(c, streams[ms[0]].loc(at[ms[0]].unwrap())));
            findings.push(f);
            div_report = Some(Divergence {
                position: k,
                kind: FindingKind::Stopped,
                stopped,
                issued,
                groups: call_groups,
            });
        }
    }

    // ---- Send/Recv, matched per ordered pair ----
    let rank_slot: HashMap<u32, usize> = ranks.iter().enumerate().map(|(m, r)| (*r, m)).collect();
    // (src, dst) → call indices: sends on src, recvs on dst
    let mut sends: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut bad_peer = 0usize;
    for (m, s) in streams.iter().enumerate() {
        for (i, rec) in s.calls.iter().enumerate() {
            let sig = &c.sigs[rec.sig as usize];
            if !sig.op.is_p2p() {
                continue;
            }
            let me = ranks[m];
            if sig.root < 0 || sig.root as u32 >= g.nranks {
                if bad_peer < LIST_LIMIT {
                    let mut f = Finding::new(
                        FindingKind::InvalidPeer,
                        Some(name),
                        format!(
                            "rank {me}'s {} names peer {} outside 0..={} on {name}",
                            sig.op.name(),
                            sig.root,
                            g.nranks.saturating_sub(1)
                        ),
                    );
                    f.ranks = vec![me];
                    f.op = Some(sig.op);
                    f.call_index = Some(i as u64);
                    f.location = Some(loc_str(c, s.loc(i)));
                    findings.push(f);
                } else {
                    omitted += 1;
                }
                bad_peer += 1;
                continue;
            }
            let peer = sig.root as u32;
            match sig.op {
                Func::Send => sends.entry((me, peer)).or_default().push(i as u32),
                _ => recvs.entry((peer, me)).or_default().push(i as u32),
            }
        }
    }
    let mut pairs: Vec<(u32, u32)> = sends.keys().chain(recvs.keys()).copied().collect();
    pairs.sort_unstable();
    pairs.dedup();
    let (mut p2p_matched, mut p2p_listed) = (0u64, 0usize);
    let empty = Vec::new();
    let mut p2p_pairs = 0u64;
    for (src, dst) in pairs {
        let (Some(&ms), Some(&md)) = (rank_slot.get(&src), rank_slot.get(&dst)) else {
            continue; // the peer's log is missing: nothing to check against
        };
        p2p_pairs += 1;
        let sv = sends.get(&(src, dst)).unwrap_or(&empty);
        let rv = recvs.get(&(src, dst)).unwrap_or(&empty);
        let common = sv.len().min(rv.len());
        let sig_s = |j: usize| c.sigs[streams[ms].calls[sv[j] as usize].sig as usize];
        let sig_r = |j: usize| c.sigs[streams[md].calls[rv[j] as usize].sig as usize];
        let same = |a: Sig, b: Sig| a.count == b.count && a.datatype == b.datatype;
        // Do sends from `i` and recvs from `j` on pair up (a few calls on)?
        let aligned = |i: usize, j: usize| {
            let m = (sv.len().saturating_sub(i))
                .min(rv.len().saturating_sub(j))
                .min(8);
            m > 0 && (0..m).all(|x| same(sig_s(i + x), sig_r(j + x)))
        };
        let mut problem: Option<Finding> = None;
        // (kind, ordinal) of the first problem in this pair
        let mut first: Option<(FindingKind, usize)> = None;
        for nth in 0..common {
            if !same(sig_s(nth), sig_r(nth)) {
                // A skipped call shifts the rest by one: name the skip, not the shift.
                first = Some(if aligned(nth + 1, nth) {
                    (FindingKind::UnmatchedSend, nth)
                } else if aligned(nth, nth + 1) {
                    (FindingKind::UnmatchedRecv, nth)
                } else {
                    (FindingKind::P2pMismatch, nth)
                });
                break;
            }
            p2p_matched += 1;
        }
        if first.is_none() && sv.len() != rv.len() {
            first = Some(if sv.len() > rv.len() {
                (FindingKind::UnmatchedSend, common)
            } else {
                (FindingKind::UnmatchedRecv, common)
            });
        }
        if let Some((kind, nth)) = first {
            let (me, peer, m, idx) = match kind {
                FindingKind::UnmatchedRecv => (dst, src, md, rv[nth]),
                _ => (src, dst, ms, sv[nth]),
            };
            let sig = c.sigs[streams[m].calls[idx as usize].sig as usize];
            let msg = match kind {
                FindingKind::UnmatchedSend => format!(
                    "rank {src}'s Send #{nth} to rank {dst} ({}) has no matching Recv on rank {dst} on {name} ({} Sends, {} Recvs in this pair)",
                    describe(&sig),
                    sv.len(),
                    rv.len()
                ),
                FindingKind::UnmatchedRecv => format!(
                    "rank {dst}'s Recv #{nth} from rank {src} ({}) has no matching Send on rank {src} on {name} ({} Sends, {} Recvs in this pair)",
                    describe(&sig),
                    sv.len(),
                    rv.len()
                ),
                _ => format!(
                    "rank {src}'s Send #{nth} to rank {dst} ({}) meets rank {dst}'s Recv #{nth} from rank {src} ({}) on {name}",
                    describe(&sig_s(nth)),
                    describe(&sig_r(nth))
                ),
            };
            let mut f = Finding::new(kind, Some(name), msg);
            f.brief = match kind {
                FindingKind::P2pMismatch => format!("contract mismatch: {}", f.message),
                _ => format!("likely hang: {}", f.message),
            };
            f.position = Some(nth as u64);
            f.ranks = vec![me];
            f.other_ranks = vec![peer];
            f.peer = Some(peer);
            f.op = Some(sig.op);
            f.call_index = Some(u64::from(idx));
            f.location = Some(loc_str(c, streams[m].loc(idx as usize)));
            problem = Some(f);
        }
        if let Some(mut f) = problem {
            // The missing side belongs to a rank that stopped: a consequence.
            if let (Some(d), Some(peer)) = (&div_report, f.peer)
                && d.kind == FindingKind::Stopped
                && d.stopped.contains(&peer)
                && matches!(
                    f.kind,
                    FindingKind::UnmatchedSend | FindingKind::UnmatchedRecv
                )
            {
                let note = format!("; rank {peer} stopped before collective #{}", d.position);
                f.message += &note;
                f.brief += &note;
            }
            if p2p_listed < LIST_LIMIT {
                findings.push(f);
            } else {
                omitted += 1;
            }
            p2p_listed += 1;
        }
    }

    // ---- per-rank summaries ----
    let members = g
        .members
        .iter()
        .enumerate()
        .map(|(m, &(rank, _, inferred))| {
            let s = streams[m];
            let mut launches = 0u64;
            let mut zero = 0u64;
            let mut prev: Option<u64> = None;
            let mut coll_k = 0u64;
            let mut last_coll = None;
            for rec in &s.calls {
                let sig = &c.sigs[rec.sig as usize];
                if is_coll(sig) {
                    last_coll = Some(coll_k);
                    coll_k += 1;
                    if sig.count == 0 {
                        zero += 1;
                        continue;
                    }
                }
                if rec.op_count == u64::MAX || prev != Some(rec.op_count) {
                    launches += 1;
                }
                prev = Some(rec.op_count);
            }
            let last_call = s.calls.len().checked_sub(1).map(|i| {
                let coll = is_coll(&c.sigs[s.calls[i].sig as usize]);
                call_view(c, s, i, if coll { last_coll } else { None })
            });
            MemberReport {
                rank,
                rank_inferred: inferred,
                host: c.hosts[s.host as usize].clone(),
                pid: s.pid,
                comm: hex(s.comm),
                calls: s.calls.len() as u64,
                collectives: coll_total[m],
                p2p: s.calls.len() as u64 - coll_total[m],
                launches,
                zero_count: zero,
                last_call,
                ended: s.ended.map(|(p, _)| match p {
                    InitPhase::Abort => "aborted".to_string(),
                    _ => "destroyed".to_string(),
                }),
            }
        })
        .collect();

    CommAnalysis {
        report: CommReport {
            name: g.name.clone(),
            comm_id: g.comm_id.map(hex),
            identified_by: g.identified_by,
            nranks: g.nranks,
            ranks_seen: ranks,
            ranks_missing: missing,
            agreed_collectives: agreed,
            divergence: div_report,
            p2p_pairs,
            p2p_matched,
            zero_count_positions: zero_positions,
            members,
        },
        findings,
        omitted,
    }
}

/// How many of the stream's calls were logged before `loc`.
fn calls_before(s: &Stream, loc: Loc) -> usize {
    let (mut lo, mut hi) = (0, s.calls.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if s.loc(mid) <= loc {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// Which communicator and rank a WARN line belongs to: the communicator its
/// process used last before the line (not one already destroyed).
/// `(host, pid)` → the `(group, rank, stream)` of every member stream in that process.
type ByProcess = HashMap<(u32, u32), Vec<(usize, u32, usize)>>;

fn by_process(c: &Collected, groups: &[CommGroup]) -> ByProcess {
    let mut m: ByProcess = HashMap::new();
    for (gi, g) in groups.iter().enumerate() {
        for &(rank, si, _) in &g.members {
            let s = &c.streams[si];
            m.entry((s.host, s.pid)).or_default().push((gi, rank, si));
        }
    }
    m
}

fn attribute(c: &Collected, procs: &ByProcess, w: &WarnRec) -> Option<(usize, u32)> {
    let members = procs.get(&(w.host, w.pid))?;
    // Several ranks in one process (one thread per GPU, or rankwise's trace):
    // the `[dev]` number tells them apart.
    let same_dev = w.dev.is_some() && members.iter().any(|&(_, _, si)| c.streams[si].dev == w.dev);
    let candidates = members
        .iter()
        .filter(|&&(_, _, si)| !same_dev || c.streams[si].dev == w.dev);
    let mut best: Option<(Loc, usize, u32)> = None;
    for &(gi, rank, si) in candidates.clone() {
        let s = &c.streams[si];
        if s.first > w.loc || s.ended.is_some_and(|(_, l)| l < w.loc) {
            continue;
        }
        let before = calls_before(s, w.loc);
        let last = if before > 0 {
            s.loc(before - 1)
        } else {
            s.first
        };
        if best.is_none_or(|(l, _, _)| last > l) {
            best = Some((last, gi, rank));
        }
    }
    match best {
        Some((_, gi, rank)) => Some((gi, rank)),
        // A WARN before the process's first logged call: the communicator it used next.
        None => candidates
            .min_by_key(|&&(_, _, si)| c.streams[si].first)
            .map(|&(gi, rank, _)| (gi, rank)),
    }
}

/// Run every check on what was read.
pub fn analyze(c: &Collected) -> Analysis {
    let groups = resolve(c);
    let mut per_comm: Vec<CommAnalysis> = groups.iter().map(|g| analyze_comm(c, g)).collect();

    // warnings
    let mut stray: Vec<Finding> = Vec::new();
    let mut omitted_warn = 0u64;
    let procs = by_process(c, &groups);
    let mut listed: HashMap<FindingKind, usize> = HashMap::new();
    // A file that repeats a process's calls repeats its WARN lines too.
    let repeated: std::collections::HashSet<(u32, u32, u32)> = c
        .repeated_procs
        .iter()
        .chain(groups.iter().flat_map(|g| &g.repeated))
        .copied()
        .collect();
    for w in &c.warnings {
        if repeated.contains(&(w.loc.file, w.host, w.pid)) {
            continue;
        }
        let (kind, what) = match w.kind {
            WarnKind::InvalidRoot(_) => (FindingKind::InvalidRoot, "invalid root"),
            WarnKind::InvalidType(_) => (FindingKind::InvalidType, "invalid datatype"),
            WarnKind::InvalidOp(_) => (FindingKind::InvalidOp, "invalid reduction op"),
            WarnKind::Other => (FindingKind::NcclWarning, "warning"),
        };
        let n = listed.entry(kind).or_default();
        if *n >= LIST_LIMIT {
            omitted_warn += 1;
            continue;
        }
        *n += 1;
        let host = &c.hosts[w.host as usize];
        let target = attribute(c, &procs, w);
        let comm = target.map(|(gi, _)| groups[gi].name.as_str());
        let rank = target.map(|t| t.1);
        let who = match rank {
            Some(r) => format!("rank {r} ({host}:{})", w.pid),
            None => format!("{host}:{}", w.pid),
        };
        // The WARN line names no communicator: say whose it is taken to be.
        let on = comm.map_or(String::new(), |n| format!(" on {n}"));
        let guess = if comm.is_some() {
            " (the communicator this process used last)"
        } else {
            ""
        };
        // NCCL's "root should be in the 0..N range" reads as if N were legal.
        let what = match (w.kind, target) {
            (WarnKind::InvalidRoot(v), Some((gi, _))) => format!(
                "root {v} is out of range: valid roots are 0..={}",
                groups[gi].nranks.saturating_sub(1)
            ),
            _ => what.to_string(),
        };
        let op = w.op.map_or("call", Func::name);
        let msg = if kind == FindingKind::NcclWarning {
            format!("{who} logged NCCL WARN {}{on}", w.text)
        } else {
            format!(
                "{who}: {op} rejected by NCCL ({what}){on}{guess}; this call was never issued; WARN {}",
                w.text
            )
        };
        let mut f = Finding::new(kind, comm, msg);
        f.brief = if kind == FindingKind::NcclWarning {
            format!("WARN {}", w.text)
        } else {
            format!(
                "invalid argument: {who}: {op} rejected by NCCL ({what}){on}; WARN {}",
                w.text
            )
        };
        f.warn_text = Some(w.text.clone());
        f.ranks = rank.into_iter().collect();
        f.op = w.op;
        f.location = Some(loc_str(c, w.loc));
        match target {
            Some((gi, _)) => per_comm[gi].findings.push(f),
            None => stray.push(f),
        }
    }

    let mut findings: Vec<Finding> = Vec::new();
    let mut omitted = omitted_warn;
    let mut comms = Vec::new();
    for ca in per_comm {
        findings.extend(ca.findings);
        omitted += ca.omitted;
        comms.push(ca.report);
    }
    findings.extend(stray);
    for r in &c.repeats {
        findings.push(Finding::new(FindingKind::RepeatedLog, None, r.clone()));
    }
    if let Some(f) = malformed_calls_note(
        c,
        "such a call is not checked, and the rank that logged it may look as if it skipped a call",
    ) {
        findings.push(f);
    }
    // errors first, then warnings, then info; stable within a severity
    findings.sort_by_key(|f| f.severity);
    let problems = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .count() as u64;
    let verdict = verdict(c, &comms, &findings);
    Analysis {
        verdict,
        problems,
        counts: c.counts,
        files: c.files.clone(),
        communicators: comms,
        findings,
        findings_omitted: omitted,
    }
}

/// COLL lines that could not be read: how many, what that means
/// (`consequence`, said of one call), and the first one.
fn malformed_calls_note(c: &Collected, consequence: &str) -> Option<Finding> {
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

fn verdict(c: &Collected, comms: &[CommReport], findings: &[Finding]) -> String {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    if let Some(first) = pick_headline(&errors) {
        let more = if errors.len() > 1 {
            format!(
                " ({} more problem{} below)",
                errors.len() - 1,
                if errors.len() == 2 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        let mut text = first.brief.clone();
        // A stopped rank that logged an argcheck WARN: say why it stopped.
        if first.kind == FindingKind::Stopped
            && let Some(w) = findings.iter().find(|w| {
                matches!(
                    w.kind,
                    FindingKind::InvalidRoot | FindingKind::InvalidType | FindingKind::InvalidOp
                ) && w.comm == first.comm
                    && w.ranks.iter().any(|r| first.ranks.contains(r))
            })
        {
            text += &format!(
                "; rank {} logged WARN {}",
                w.ranks[0],
                w.warn_text.as_deref().unwrap_or_default()
            );
        }
        return format!("{text}{more}");
    }
    let ranks: usize = comms.iter().map(|cm| cm.ranks_seen.len()).sum();
    if comms.is_empty() {
        return format!(
            "no NCCL calls found in {} lines{}",
            c.counts.lines,
            if c.counts.nccl_lines == 0 {
                " (was NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including COLL set?)"
            } else {
                ""
            }
        );
    }
    let mut v = format!(
        "no divergence: {} communicator{}, {} rank stream{}, {} calls agree",
        comms.len(),
        if comms.len() == 1 { "" } else { "s" },
        ranks,
        if ranks == 1 { "" } else { "s" },
        c.counts.calls
    );
    if let Some(w) = findings.iter().find(|f| f.severity == Severity::Warning) {
        let n = findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count();
        v += &format!(
            "; {n} warning{}, first: {}",
            if n == 1 { "" } else { "s" },
            w.message
        );
    }
    v
}

/// The error that best explains the rest: a collective divergence, unless
/// the stopped rank's own last call is an unmatched Recv/Send (then the
/// point-to-point finding is the cause).
fn pick_headline<'a>(errors: &[&'a Finding]) -> Option<&'a Finding> {
    let first = *errors.first()?;
    let div = errors.iter().find(|f| {
        !matches!(
            f.kind,
            FindingKind::UnmatchedSend
                | FindingKind::UnmatchedRecv
                | FindingKind::P2pMismatch
                | FindingKind::InvalidPeer
                | FindingKind::InvalidRoot
                | FindingKind::InvalidType
                | FindingKind::InvalidOp
        )
    });
    if let Some(d) = div {
        if d.kind == FindingKind::Stopped
            && let Some(p) = errors.iter().find(|p| {
                matches!(
                    p.kind,
                    FindingKind::UnmatchedRecv | FindingKind::UnmatchedSend
                ) && p.comm == d.comm
                    && p.ranks.iter().any(|r| d.ranks.contains(r))
                    && p.call_index.is_some()
                    && d.call_index
                        .is_some_and(|len| p.call_index == Some(len.saturating_sub(1)))
            })
        {
            return Some(p);
        }
        return Some(d);
    }
    Some(
        errors
            .iter()
            .find(|f| {
                matches!(
                    f.kind,
                    FindingKind::UnmatchedSend
                        | FindingKind::UnmatchedRecv
                        | FindingKind::P2pMismatch
                )
            })
            .copied()
            .unwrap_or(first),
    )
}

/// Calls and bytes per communicator, rank and op.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub counts: super::model::Counts,
    pub files: Vec<super::model::FileInfo>,
    pub communicators: Vec<CommSummary>,
    /// COLL lines that could not be read (and so are not counted): how
    /// many, and the first one.
    pub malformed_calls: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CommSummary {
    pub name: String,
    pub nranks: u32,
    pub ranks: Vec<RankSummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RankSummary {
    pub rank: u32,
    pub rank_inferred: bool,
    pub host: String,
    pub pid: u32,
    pub calls: u64,
    /// The sum over `ops`: exact (each call counted is under
    /// [`MAX_CALL_BYTES`], so no sum of them overflows 128 bits).
    pub bytes: u128,
    pub ops: Vec<OpSummary>,
    /// Calls whose datatype code has no known size (their bytes are not counted).
    pub unknown_datatype_calls: u64,
    /// Calls whose count makes them move more than [`MAX_CALL_BYTES`] (or
    /// more than 64 bits count): not real calls, and not in the bytes.
    pub implausible_count_calls: u64,
    /// The first of them.
    pub first_implausible: Option<ImplausibleCall>,
}

/// A call whose count is implausible, as the summary names it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ImplausibleCall {
    pub op: Func,
    pub count: u64,
    pub datatype: String,
    pub location: String,
    /// Its bytes by the convention; `None` past 64 bits.
    pub bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpSummary {
    pub op: Func,
    pub calls: u64,
    /// Bytes by the nccl-tests convention (CONTRACTS.md §6).
    pub bytes: u128,
}

/// The most bytes one call can move by the nccl-tests convention, which is
/// also the size of its largest buffer on one rank: 256 TiB, more memory
/// than any one machine holds. A larger count is a corrupted line.
pub const MAX_CALL_BYTES: u64 = 1 << 48;

/// What one call counts for in the summary.
enum CallBytes {
    Known(u64),
    UnknownDatatype,
    /// Over [`MAX_CALL_BYTES`]: the size, or `None` beyond 64 bits.
    Implausible(Option<u64>),
}

fn call_bytes(sig: &Sig, nranks: u32) -> CallBytes {
    let Some(size) = datatype_size(sig.datatype) else {
        return CallBytes::UnknownDatatype;
    };
    match sig.op.alg_bytes_checked(u64::from(nranks), sig.count, size) {
        Some(b) if b <= MAX_CALL_BYTES => CallBytes::Known(b),
        b => CallBytes::Implausible(b),
    }
}

pub fn summarize(c: &Collected) -> Summary {
    let groups = resolve(c);
    let communicators = groups
        .iter()
        .map(|g| CommSummary {
            name: g.name.clone(),
            nranks: g.nranks,
            ranks: g
                .members
                .iter()
                .map(|&(rank, si, inferred)| {
                    let s = &c.streams[si];
                    // count per signature first: far fewer than calls
                    let mut per_sig: HashMap<u32, u64> = HashMap::new();
                    for rec in &s.calls {
                        *per_sig.entry(rec.sig).or_default() += 1;
                    }
                    // ops in the order of `Func::ALL` (AllReduce first)
                    let mut ops: BTreeMap<usize, (u64, u128)> = BTreeMap::new();
                    let (mut unknown, mut implausible) = (0, 0);
                    for (sig, n) in per_sig {
                        let sig = c.sigs[sig as usize];
                        let e = ops.entry(sig.op.index()).or_default();
                        e.0 += n;
                        match call_bytes(&sig, g.nranks) {
                            // ≤ 2^48 · 2^64: exact in 128 bits
                            CallBytes::Known(b) => e.1 += u128::from(b) * u128::from(n),
                            CallBytes::UnknownDatatype => unknown += n,
                            CallBytes::Implausible(_) => implausible += n,
                        }
                    }
                    // The first implausible call, looked for only when there is one.
                    let first_implausible = (implausible > 0)
                        .then(|| {
                            s.calls.iter().enumerate().find_map(|(i, rec)| {
                                let sig = c.sigs[rec.sig as usize];
                                match call_bytes(&sig, g.nranks) {
                                    CallBytes::Implausible(bytes) => Some(ImplausibleCall {
                                        op: sig.op,
                                        count: sig.count,
                                        datatype: datatype_name(sig.datatype),
                                        location: loc_str(c, s.loc(i)),
                                        bytes,
                                    }),
                                    _ => None,
                                }
                            })
                        })
                        .flatten();
                    let ops: Vec<OpSummary> = ops
                        .into_iter()
                        .map(|(op, (calls, bytes))| OpSummary {
                            op: Func::ALL[op],
                            calls,
                            bytes,
                        })
                        .collect();
                    RankSummary {
                        rank,
                        rank_inferred: inferred,
                        host: c.hosts[s.host as usize].clone(),
                        pid: s.pid,
                        calls: s.calls.len() as u64,
                        bytes: ops.iter().map(|o| o.bytes).sum(),
                        ops,
                        unknown_datatype_calls: unknown,
                        implausible_count_calls: implausible,
                        first_implausible,
                    }
                })
                .collect(),
        })
        .collect();
    Summary {
        counts: c.counts,
        files: c.files.clone(),
        communicators,
        malformed_calls: malformed_calls_note(c, "such a call is not counted").map(|f| f.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::ingest::collect_bytes;
    use std::fmt::Write;

    fn init(t: &mut String, r: u32, n: u32, id: u64) {
        writeln!(t, "h:{}:{} [{r}] NCCL INFO ncclCommInitRank comm 0x{:x} rank {r} nranks {n} cudaDev {r} nvmlDev {r} busId 0 commId 0x{id:x} - Init COMPLETE", 10 + r, 10 + r, 0x100 + r).unwrap();
    }

    #[allow(clippy::too_many_arguments)]
    fn call(
        t: &mut String,
        r: u32,
        n: u32,
        op: &str,
        opc: u64,
        count: u64,
        dt: i32,
        redop: i32,
        root: i32,
    ) {
        writeln!(t, "h:{}:{} [{r}] NCCL INFO {op}: opCount {opc:x} sendbuff 0x1 recvbuff 0x1 count {count} datatype {dt} op {redop} root {root} comm 0x{:x} [nranks={n}] stream (nil)", 10 + r, 10 + r, 0x100 + r).unwrap();
    }

    #[test]
    fn rank_ranges() {
        assert_eq!(fmt_ranks(&[0, 1, 2, 5, 7, 8]), "0-2,5,7-8");
        assert_eq!(fmt_ranks(&[3]), "3");
        assert_eq!(fmt_ranks(&[]), "");
    }

    #[test]
    fn agreeing_ranks_have_no_divergence() {
        let mut t = String::new();
        for r in 0..4 {
            init(&mut t, r, 4, 0xabc);
        }
        for k in 0..10 {
            for r in 0..4 {
                call(&mut t, r, 4, "AllReduce", k, 100 + k, 7, 0, 0);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.problems, 0, "{:#?}", a.findings);
        assert!(a.verdict.starts_with("no divergence"), "{}", a.verdict);
        assert_eq!(a.communicators.len(), 1);
        assert_eq!(a.communicators[0].ranks_seen, [0, 1, 2, 3]);
        assert_eq!(a.communicators[0].agreed_collectives, 10);
        assert_eq!(a.communicators[0].members[2].launches, 10);
    }

    #[test]
    fn a_stopped_rank_is_named_with_its_position() {
        let mut t = String::new();
        for r in 0..4 {
            init(&mut t, r, 4, 0xabc);
        }
        for k in 0..10 {
            for r in 0..4 {
                if r == 3 && k >= 7 {
                    continue;
                }
                call(&mut t, r, 4, "AllReduce", k, 1 << 20, 7, 0, 0);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let f = &a.findings[0];
        assert_eq!(
            (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
            (FindingKind::Stopped, Some(7), vec![3], vec![0, 1, 2])
        );
        assert_eq!(
            a.verdict,
            "likely hang: rank 3 never issued AllReduce #7 (count 1048576 float32 sum, opCount 7) on commId 0xabc where ranks 0-2 wait"
        );
    }

    #[test]
    fn mismatches_name_the_minority() {
        for (field, kind) in [
            ("count", FindingKind::CountMismatch),
            ("dt", FindingKind::DatatypeMismatch),
            ("op", FindingKind::RedopMismatch),
            ("root", FindingKind::RootMismatch),
            ("kind", FindingKind::OpMismatch),
        ] {
            let mut t = String::new();
            for r in 0..3 {
                init(&mut t, r, 3, 0x5);
            }
            for k in 0..6u64 {
                for r in 0..3 {
                    let odd = r == 1 && k == 4;
                    let op = if field == "kind" && odd {
                        "Broadcast"
                    } else {
                        "Reduce"
                    };
                    let count = if field == "count" && odd { 9 } else { 8 };
                    let dt = if field == "dt" && odd { 9 } else { 7 };
                    let redop = if field == "op" && odd { 2 } else { 0 };
                    let root = if field == "root" && odd { 2 } else { 0 };
                    call(&mut t, r, 3, op, k, count, dt, redop, root);
                }
            }
            let a = analyze(&collect_bytes("x", t.as_bytes()));
            let f = &a.findings[0];
            assert_eq!(
                (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
                (kind, Some(4), vec![1], vec![0, 2]),
                "{field}: {}",
                a.verdict
            );
            assert!(
                a.verdict.starts_with("contract mismatch: "),
                "{}",
                a.verdict
            );
        }
    }

    #[test]
    fn send_recv_pairs() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x7);
        }
        // 0 → 1 twice, 1 → 0 once; rank 1 receives only one of rank 0's sends.
        call(&mut t, 0, 2, "Send", 0, 16, 7, 0, 1);
        call(&mut t, 1, 2, "Recv", 0, 16, 7, 0, 0);
        call(&mut t, 0, 2, "Send", 1, 16, 7, 0, 1);
        call(&mut t, 1, 2, "Send", 1, 4, 7, 0, 0);
        call(&mut t, 0, 2, "Recv", 2, 4, 2, 0, 1);
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let kinds: Vec<_> = a
            .findings
            .iter()
            .map(|f| (f.kind, f.ranks.clone(), f.peer, f.position))
            .collect();
        assert!(
            kinds.contains(&(FindingKind::UnmatchedSend, vec![0], Some(1), Some(1))),
            "{kinds:?}"
        );
        assert!(
            kinds.contains(&(FindingKind::P2pMismatch, vec![1], Some(0), Some(0))),
            "{kinds:?}"
        );
    }

    #[test]
    fn zero_count_collectives_are_listed_not_errors() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x9);
        }
        for r in 0..2 {
            call(&mut t, r, 2, "AllReduce", 0, 4, 7, 0, 0);
            call(&mut t, r, 2, "AllReduce", 1, 0, 7, 0, 0);
            call(&mut t, r, 2, "AllReduce", 1, 4, 7, 0, 0);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.problems, 0);
        let z: Vec<_> = a
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::ZeroCount)
            .collect();
        assert_eq!(z.len(), 1);
        assert_eq!(z[0].position, Some(1));
        // the zero-count call is not a launch
        assert_eq!(a.communicators[0].members[0].launches, 2);
        assert_eq!(a.communicators[0].members[0].zero_count, 1);
    }

    #[test]
    fn without_init_lines_ranks_come_from_hints() {
        // rankwise-style trace: one process, the rank in [..], no init lines
        let mut t = String::new();
        for k in 0..3u64 {
            for r in 0..3u32 {
                if r == 2 && k == 2 {
                    continue;
                }
                writeln!(t, "host:77:{} [{r}] NCCL INFO AllReduce: opCount {k:x} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x{:x} [nranks=3] stream (nil)", 80 + r, 0x900 + 16 * r).unwrap();
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.communicators.len(), 1, "{:#?}", a.communicators);
        let f = &a.findings[0];
        assert_eq!(
            (f.kind, f.position, f.ranks.clone()),
            (FindingKind::Stopped, Some(2), vec![2])
        );
        assert!(a.communicators[0].members.iter().all(|m| m.rank_inferred));
    }

    #[test]
    fn summary_counts_bytes_by_convention() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x11);
            call(&mut t, r, 2, "AllReduce", 0, 10, 7, 0, 0); // 40 B
            call(&mut t, r, 2, "AllGather", 1, 10, 9, 0, 0); // 2·10·2 = 40 B
            call(&mut t, r, 2, "AllGather", 2, 1, 99, 0, 0); // unknown datatype
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.calls, 3);
        assert_eq!(r0.bytes, 80);
        assert_eq!(r0.unknown_datatype_calls, 1);
        let ag = r0.ops.iter().find(|o| o.op == Func::AllGather).unwrap();
        assert_eq!((ag.calls, ag.bytes), (2, 40));
    }

    /// An init line of rank `r` (process 10 + r, comm 0x100 + r) stating `rank` and `nranks`.
    fn init_stating(t: &mut String, r: u32, rank: u64, nranks: u64, id: u64) {
        writeln!(t, "h:{}:{} [{r}] NCCL INFO ncclCommInitRank comm 0x{:x} rank {rank} nranks {nranks} cudaDev {r} nvmlDev {r} busId 0 commId 0x{id:x} - Init COMPLETE", 10 + r, 10 + r, 0x100 + r).unwrap();
    }

    /// One AllReduce of rank `r` whose COLL line states `[nranks=n]`.
    fn call_stating(t: &mut String, r: u32, n: u64, k: u64) {
        writeln!(t, "h:{}:{} [{r}] NCCL INFO AllReduce: opCount {k:x} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x{:x} [nranks={n}] stream (nil)", 10 + r, 10 + r, 0x100 + r).unwrap();
    }

    fn findings_of(a: &Analysis, kind: FindingKind) -> Vec<&Finding> {
        a.findings.iter().filter(|f| f.kind == kind).collect()
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

    #[test]
    fn a_huge_nranks_claim_is_named_and_sizes_nothing() {
        // Both ranks' init lines and rank 0's COLL lines say 4294967295,
        // only rank 1's COLL lines say 2: the one plausible value wins.
        let mut t = String::new();
        init_stating(&mut t, 0, 0, u64::from(u32::MAX), 0xabc);
        init_stating(&mut t, 1, 1, u64::from(u32::MAX), 0xabc);
        for k in 0..3 {
            call_stating(&mut t, 0, u64::from(u32::MAX), k);
            call_stating(&mut t, 1, 2, k);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!((cm.nranks, cm.ranks_seen.clone()), (2, vec![0, 1]));
        assert!(cm.ranks_missing.is_empty());
        let notes = findings_of(&a, FindingKind::NranksConflict);
        assert_eq!(notes.len(), 1, "{:#?}", a.findings);
        for part in [
            "nranks 2 in rank 1's COLL lines (x:4); ",
            "nranks 4294967295 (more than the 16777216 accepted) in rank 0's init line (x:1), rank 0's COLL lines (x:3), rank 1's init line (x:2); ",
            "using 2",
        ] {
            assert!(notes[0].message.contains(part), "{}", notes[0].message);
        }
        assert_eq!(a.problems, 0);
    }

    #[test]
    fn missing_ranks_of_a_large_communicator_are_one_range() {
        let n = 16_000_000u64;
        let mut t = String::new();
        for r in 0..2 {
            init_stating(&mut t, r, u64::from(r), n, 0xabc);
            call_stating(&mut t, r, n, 0);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!(cm.nranks, 16_000_000);
        assert_eq!(cm.ranks_missing, [[2, 15_999_999]]);
        let f = findings_of(&a, FindingKind::MissingRanks);
        assert!(
            f[0].message
                .starts_with("ranks 2-15999999 of commId 0xabc (nranks 16000000) not in the logs"),
            "{}",
            f[0].message
        );
        let listed: Vec<u32> = (2..2 + MISSING_LISTED as u32).collect();
        assert_eq!(f[0].ranks, listed);
        // what is reported stays the size of what was read
        assert!(serde_json::to_string(&a).unwrap().len() < 64 << 10);
    }

    #[test]
    fn init_lines_stating_nranks_0_and_1_for_4_ranks_are_named() {
        let mut t = String::new();
        for (r, n) in [(0u32, 4u64), (1, 0), (2, 1), (3, 4)] {
            init_stating(&mut t, r, u64::from(r), n, 0xabc);
        }
        for k in 0..3 {
            for r in 0..4 {
                call_stating(&mut t, r, 4, k);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!((cm.nranks, cm.ranks_seen.clone()), (4, vec![0, 1, 2, 3]));
        assert!(
            findings_of(&a, FindingKind::DuplicateRank).is_empty(),
            "{:#?}",
            a.findings
        );
        let notes = findings_of(&a, FindingKind::NranksConflict);
        assert_eq!(notes.len(), 1, "{:#?}", a.findings);
        let m = &notes[0].message;
        for part in [
            "the lines of commId 0xabc disagree on nranks: ",
            "nranks 0 (no communicator has 0 ranks) in rank 1's init line (x:2); ",
            "nranks 1 in rank 2's init line (x:3); ",
            "nranks 4 in rank 0's init line (x:1), rank 0's COLL lines (x:5), rank 1's COLL lines (x:6), 3 more; ",
            "using 4",
        ] {
            assert!(m.contains(part), "{part:?} not in {m}");
        }

        // every init line says 1, every COLL line says 4: 4 holds ranks 0-3
        let mut t = String::new();
        for r in 0..4 {
            init_stating(&mut t, r, u64::from(r), 1, 0xabc);
        }
        for r in 0..4 {
            call_stating(&mut t, r, 4, 0);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.communicators[0].ranks_seen, [0, 1, 2, 3]);
        let m = &findings_of(&a, FindingKind::NranksConflict)[0].message;
        assert!(
            m.contains("nranks 1 in rank 0's init line (x:1), rank 1's init line (x:2), rank 2's init line (x:3), 1 more; nranks 4 in "),
            "{m}"
        );
        assert!(
            m.ends_with("using 4, stated most often among the values that hold ranks 0..=3"),
            "{m}"
        );
    }

    #[test]
    fn a_rank_outside_nranks_and_a_rank_stated_twice_are_named() {
        let mut t = String::new();
        // ranks 0, 1, 7 of 4, and 1 again (with fewer calls)
        for (r, rank) in [(0u32, 0u64), (1, 1), (2, 7), (3, 1)] {
            init_stating(&mut t, r, rank, 4, 0xabc);
        }
        for k in 0..2 {
            for r in 0..4 {
                if r == 3 && k == 1 {
                    continue;
                }
                call_stating(&mut t, r, 4, k);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!(cm.ranks_seen, [0, 1]);
        assert_eq!(cm.ranks_missing, [[2, 3]]);
        let out = findings_of(&a, FindingKind::RankOutOfRange);
        assert_eq!(out.len(), 1, "{:#?}", a.findings);
        assert_eq!(
            out[0].message,
            "comm 0x102 on h:12 states rank 7 (x:3), outside 0..=3 of commId 0xabc (nranks 4); it is left out"
        );
        let dup = findings_of(&a, FindingKind::DuplicateRank);
        assert_eq!(dup.len(), 1, "{:#?}", a.findings);
        assert_eq!(
            dup[0].message,
            "comm 0x103 on h:13 states rank 1 of commId 0xabc (x:4), and so does comm 0x101 on h:11 (x:2); comm 0x103 on h:13 has 1 call and is left out"
        );
    }

    #[test]
    fn malformed_coll_lines_are_a_warning_with_the_first_line() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x5);
        }
        for k in 0..3 {
            for r in 0..2 {
                call(&mut t, r, 2, "AllReduce", k, 8, 7, 0, 0);
            }
        }
        // rank 1's call #1 (line 6) loses its datatype
        let t: String = t
            .lines()
            .enumerate()
            .map(|(i, l)| {
                if i == 5 {
                    l.replace("datatype 7", "datatype")
                } else {
                    l.to_string()
                }
            })
            .collect::<Vec<_>>()
            .join("\n");
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let f = findings_of(&a, FindingKind::MalformedCalls);
        assert_eq!(f.len(), 1, "{:#?}", a.findings);
        assert_eq!(f[0].location.as_deref(), Some("x:6"));
        let line6 = t.lines().nth(5).unwrap();
        assert!(
            f[0].message
                .starts_with("1 COLL line could not be read: such a call is not checked")
                && f[0].message.ends_with(&format!(
                    "; the first is x:6, where datatype is 'op', expected a 32-bit integer: {line6}"
                )),
            "{}",
            f[0].message
        );
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        assert!(
            s.malformed_calls.as_deref().is_some_and(|m| m.contains(
                "such a call is not counted; the first is x:6, where datatype is 'op', "
            )),
            "{:?}",
            s.malformed_calls
        );
    }

    #[test]
    fn summary_leaves_implausible_counts_out_of_the_bytes_and_names_them() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x11); // lines 1, 2
        }
        for r in 0..2 {
            call(&mut t, r, 2, "AllReduce", 0, 10, 7, 0, 0); // 40 B
            call(&mut t, r, 2, "AllReduce", 1, u64::MAX, 7, 0, 0); // over 2^64 B
            call(&mut t, r, 2, "AllGather", 2, 1 << 46, 0, 0, 0); // 2·2^46 B = 2^47 B
            call(&mut t, r, 2, "AllGather", 3, 1 << 48, 0, 0, 0); // 2^49 B
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.calls, 4);
        assert_eq!(r0.implausible_count_calls, 2);
        assert_eq!(r0.bytes, 40 + (1u128 << 47));
        let per_op: Vec<(Func, u64, u128)> =
            r0.ops.iter().map(|o| (o.op, o.calls, o.bytes)).collect();
        assert_eq!(
            per_op,
            [(Func::AllReduce, 2, 40), (Func::AllGather, 2, 1 << 47)]
        );
        assert_eq!(
            r0.first_implausible,
            Some(ImplausibleCall {
                op: Func::AllReduce,
                count: u64::MAX,
                datatype: "float32".into(),
                location: "x:4".into(),
                bytes: None
            })
        );
        let r1 = &s.communicators[0].ranks[1];
        assert_eq!(r1.implausible_count_calls, 2);
        let text = crate::logs::report::summary_text(&s);
        assert!(
            text.contains("         (2 calls with an implausible count not in the bytes: no machine holds a buffer over 256.0 TiB; the first: AllReduce count 18446744073709551615 float32 at x:4 (over 2^64 bytes))"),
            "{text}"
        );
        assert!(!text.contains("PiB") && !text.contains("EiB"), "{text}");

        // count 2^48 int8 on an AllReduce is 256 TiB: still counted
        let mut t = String::new();
        init(&mut t, 0, 1, 0x12);
        call(&mut t, 0, 1, "AllReduce", 0, 1 << 48, 0, 0, 0);
        call(&mut t, 0, 1, "AllReduce", 1, (1 << 48) + 1, 0, 0, 0);
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!((r0.bytes, r0.implausible_count_calls), (1 << 48, 1));
        assert_eq!(
            r0.first_implausible
                .as_ref()
                .map(|f| (&*f.location, f.bytes)),
            Some(("x:3", Some((1 << 48) + 1)))
        );
        let text = crate::logs::report::summary_text(&s);
        assert!(
            text.contains("the first: AllReduce count 281474976710657 int8 at x:3 (256.0 TiB))"),
            "{text}"
        );
    }

    #[test]
    fn summary_bytes_past_64_bits_are_exact() {
        // 70000 AllReduce calls of 2^46 float32 (2^48 B each): 70000·2^48 B > 2^64
        let mut t = String::new();
        init(&mut t, 0, 1, 0x13);
        for k in 0..70_000 {
            call(&mut t, 0, 1, "AllReduce", k, 1 << 46, 7, 0, 0);
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.ops[0].bytes, 70_000u128 << 48);
        assert_eq!(r0.bytes, 70_000u128 << 48);
        assert_eq!(r0.implausible_count_calls, 0);
        // JSON carries the exact integer (`logs summary --json` writes text)
        let j = serde_json::to_string(&s).unwrap();
        assert!(
            j.contains(&format!("\"bytes\":{}", 70_000u128 << 48)),
            "{j}"
        );
        let text = crate::logs::report::summary_text(&s);
        assert!(text.contains("17.1 EiB (19703248369745920000)"), "{text}"); // 70000/4 PiB
    }
}
