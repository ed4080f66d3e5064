//! PyTorch's Flight Recorder: the per-rank ring buffer of collectives
//! PyTorch dumps on a timeout, read ([`read`]) and checked across ranks.
//!
//! Per process group, each rank's collectives are lined up by
//! `collective_seq_id` from the first id every dump still holds (older
//! records fall off a buffer that wrapped, and that is said), and the
//! sequences are compared with [`align`](super::align): a rank that
//! skipped a call, made an extra one, made calls in another order, or
//! called with other sizes or dtypes is named with the entries that show
//! it. Ranks whose dump is missing are named and left out. Where the
//! sequences end apart, the ranks behind never called what the others are
//! in — a hang if an entry is stuck in `started` or the logs say the job
//! hung, else ordinary skew. Send/Recv are paired per (src → dst) in
//! `p2p_seq_id` order and their sizes compared. Flight Recorder carries no
//! reduction op and no root, so neither is checked.

mod pickle;
pub mod read;

use super::align::{self, Departure};
use super::findings::{Finding, FindingKind, fmt_ranks, ranks_word};
pub use read::{Dump, DumpFormat, Entry};
use std::collections::{BTreeMap, BTreeSet};

/// What the dumps say.
#[derive(Clone, Debug, Default)]
pub struct FlightReport {
    pub findings: Vec<Finding>,
    /// Entries stuck in `started`: evidence of a hang, in words.
    pub hang: Option<String>,
    /// Process groups compared, and the ranks that dumped.
    pub groups: Vec<String>,
}

/// What must agree across ranks for one collective.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Key {
    op: String,
    input_sizes: Vec<Vec<i64>>,
    output_sizes: Vec<Vec<i64>>,
    dtypes: (Vec<String>, Vec<String>),
}

fn key(e: &Entry) -> Key {
    Key {
        op: e.op().to_string(),
        input_sizes: e.input_sizes.clone(),
        output_sizes: e.output_sizes.clone(),
        dtypes: (e.input_dtypes.clone(), e.output_dtypes.clone()),
    }
}

fn describe(e: &Entry) -> String {
    format!(
        "{} (seq {}, in {:?}, out {:?}, {})",
        e.op(),
        e.collective_seq_id,
        e.input_sizes,
        e.output_sizes,
        e.input_dtypes.first().map_or("?", String::as_str)
    )
}

/// Check the dumps of one job; `hung`: evidence of a hang from elsewhere.
pub fn check(all: &[Dump], hung: Option<&str>) -> FlightReport {
    let mut report = FlightReport::default();
    // one dump per rank: the same rank dumped twice (pickle and JSON) is read once
    let mut seen = BTreeSet::new();
    let dumps: Vec<Dump> = all
        .iter()
        .filter(|d| d.rank.is_none_or(|r| seen.insert(r)))
        .cloned()
        .collect();
    let dumps = dumps.as_slice();
    let stuck: Vec<(u32, &Entry)> = dumps
        .iter()
        .filter_map(|d| Some((d.rank?, d)))
        .flat_map(|(r, d)| {
            d.entries
                .iter()
                .filter(|e| e.state == "started")
                .map(move |e| (r, e))
        })
        .collect();
    if let Some((r, e)) = stuck.first() {
        report.hang = Some(format!(
            "rank {r}'s Flight Recorder holds {} still started, not completed",
            describe(e)
        ));
    }
    let hung = hung.map(str::to_string).or(report.hang.clone());
    let mut pgs: BTreeMap<String, (String, BTreeSet<u32>)> = BTreeMap::new();
    for d in dumps {
        for g in &d.groups {
            let e = pgs.entry(g.name.clone()).or_default();
            e.0 = g.desc.clone();
            e.1.extend(g.ranks.iter().copied());
        }
        for e in &d.entries {
            pgs.entry(e.pg_name.clone()).or_default().0 = e.pg_desc.clone();
        }
    }
    // PyTorch 2.11's Gloo dumps name the default group "" in pg_config and
    // "0" in the entries: a configured group no entry names lends its ranks
    // to the one named group that has no configuration.
    let used: BTreeSet<&str> = dumps
        .iter()
        .flat_map(|d| d.entries.iter().map(|e| e.pg_name.as_str()))
        .collect();
    let unused: Vec<String> = pgs
        .keys()
        .filter(|k| !used.contains(k.as_str()))
        .cloned()
        .collect();
    let bare: Vec<String> = pgs
        .iter()
        .filter(|(k, v)| used.contains(k.as_str()) && v.1.is_empty())
        .map(|(k, _)| k.clone())
        .collect();
    if let ([from], [to]) = (unused.as_slice(), bare.as_slice()) {
        let ranks = pgs[from].1.clone();
        pgs.entry(to.clone()).or_default().1 = ranks;
    }
    for k in &unused {
        pgs.remove(k);
    }
    for d in dumps.iter().filter(|d| d.rank.is_none()) {
        report.findings.push(Finding::new(
            FindingKind::FlightRecorder,
            None,
            format!(
                "{}: no rank in the file's name (PyTorch names dumps <prefix><rank>); the dump is not compared",
                d.path
            ),
        ));
    }
    for (pg, (desc, expected)) in &pgs {
        let name = if desc.is_empty() || desc == "undefined" || desc == pg {
            format!("process group {pg:?}")
        } else {
            format!("process group {pg:?} ({desc})")
        };
        check_group(
            dumps,
            pg,
            &name,
            expected,
            &stuck,
            hung.as_deref(),
            &mut report,
        );
    }
    report
}

/// Each dumped rank's entries of process group `pg`, by global rank.
fn per_rank<'a>(dumps: &'a [Dump], pg: &str, p2p: bool) -> BTreeMap<u32, Vec<&'a Entry>> {
    let mut out: BTreeMap<u32, Vec<&Entry>> = BTreeMap::new();
    for d in dumps {
        let Some(r) = d.rank else { continue };
        let v = out.entry(r).or_default();
        v.extend(
            d.entries
                .iter()
                .filter(|e| e.pg_name == pg && e.is_p2p == p2p),
        );
        if p2p {
            v.sort_by_key(|e| (e.p2p_seq_id, e.record_id));
        } else {
            v.sort_by_key(|e| (e.collective_seq_id, e.record_id));
        }
    }
    out
}

fn check_group(
    dumps: &[Dump],
    pg: &str,
    name: &str,
    expected: &BTreeSet<u32>,
    stuck: &[(u32, &Entry)],
    hung: Option<&str>,
    report: &mut FlightReport,
) {
    let colls = per_rank(dumps, pg, false);
    let dumped: Vec<u32> = colls.keys().copied().collect();
    report
        .groups
        .push(format!("{name}: ranks {} dumped", fmt_ranks(&dumped)));
    let missing: Vec<u32> = expected
        .iter()
        .filter(|r| !colls.contains_key(r))
        .copied()
        .collect();
    if !missing.is_empty() {
        let mut f = Finding::new(
            FindingKind::MissingRanks,
            Some(name),
            format!(
                "{} of {name} left no Flight Recorder dump: compared without {}",
                ranks_word(&missing),
                if missing.len() == 1 { "it" } else { "them" }
            ),
        );
        f.ranks = missing;
        report.findings.push(f);
    }
    let with: Vec<(u32, &Vec<&Entry>)> = colls
        .iter()
        .filter(|(_, v)| !v.is_empty())
        .map(|(r, v)| (*r, v))
        .collect();
    if with.len() >= 2 {
        compare(name, &with, stuck, hung, report);
    }
    p2p(dumps, pg, name, hung, report);
}

/// Line the ranks' collectives up by sequence id and tell where they part.
fn compare(
    name: &str,
    with: &[(u32, &Vec<&Entry>)],
    stuck: &[(u32, &Entry)],
    hung: Option<&str>,
    report: &mut FlightReport,
) {
    let lo = with
        .iter()
        .map(|(_, v)| v[0].collective_seq_id)
        .max()
        .unwrap_or(0);
    let wrapped: Vec<u32> = with
        .iter()
        .filter(|(_, v)| v[0].collective_seq_id > 1)
        .map(|(r, _)| *r)
        .collect();
    if !wrapped.is_empty() {
        let mut f = Finding::new(
            FindingKind::Truncated,
            Some(name),
            format!(
                "the Flight Recorder buffers of {} on {name} no longer hold their first records (the buffer wrapped or was reset): compared from sequence id {lo} on",
                ranks_word(&wrapped)
            ),
        );
        f.ranks = wrapped;
        report.findings.push(f);
    }
    let ranks: Vec<u32> = with.iter().map(|(r, _)| *r).collect();
    let tails: Vec<Vec<&Entry>> = with
        .iter()
        .map(|(_, v)| {
            v.iter()
                .copied()
                .filter(|e| e.collective_seq_id >= lo)
                .collect()
        })
        .collect();
    let keys: Vec<Vec<Key>> = tails
        .iter()
        .map(|v| v.iter().map(|e| key(e)).collect())
        .collect();
    let slices: Vec<&[Key]> = keys.iter().map(Vec::as_slice).collect();
    let Some(fd) = align::first_divergence(&slices) else {
        return;
    };
    let p = fd.position;
    let reference = fd.compared_with;
    let ref_ranks: Vec<u32> = fd.reference.iter().map(|&m| ranks[m]).collect();
    let at_ref = tails[reference].get(p).copied();
    for d in &fd.departing {
        let m = d.stream;
        let r = ranks[m];
        let mine = tails[m].get(p).copied();
        let (kind, text) = match (d.departure, mine, at_ref) {
            (Departure::Stopped, _, Some(e)) => {
                let inside: Vec<u32> = stuck
                    .iter()
                    .filter(|(sr, se)| {
                        ref_ranks.contains(sr) && se.collective_seq_id == e.collective_seq_id
                    })
                    .map(|(sr, _)| *sr)
                    .collect();
                let inside = if inside.is_empty() {
                    String::new()
                } else {
                    format!(
                        "; {} inside it (started, not completed)",
                        ranks_word(&inside)
                    )
                };
                match hung {
                    Some(ev) => (
                        FindingKind::Stopped,
                        format!(
                            "rank {r} never called {} on {name}, which {} called{inside} ({ev})",
                            describe(e),
                            ranks_word(&ref_ranks)
                        ),
                    ),
                    None => (
                        FindingKind::LogsEndApart,
                        format!(
                            "the dumps end with rank {r} behind {} on {name} (if the job hung, rank {r} never called {})",
                            ranks_word(&ref_ranks),
                            describe(e)
                        ),
                    ),
                }
            }
            (Departure::Skipped { calls }, _, Some(e)) => (
                FindingKind::Skipped,
                format!(
                    "rank {r} skipped {} on {name}: {} called it, and rank {r}'s calls after it match theirs ({} lined up)",
                    plural(calls, "call", describe(e)),
                    ranks_word(&ref_ranks),
                    d.agree_after
                ),
            ),
            (Departure::Extra { calls }, Some(e), _) => (
                FindingKind::Extra,
                format!(
                    "rank {r} made {} that {} did not on {name}; its calls after match theirs ({} lined up)",
                    plural(calls, "extra call", describe(e)),
                    ranks_word(&ref_ranks),
                    d.agree_after
                ),
            ),
            (Departure::Reordered { calls }, Some(e), Some(o)) => (
                FindingKind::Reordered,
                format!(
                    "rank {r} made {calls} calls in a different order on {name}: its {} where {} have {}",
                    describe(e),
                    ranks_word(&ref_ranks),
                    describe(o)
                ),
            ),
            (_, Some(e), Some(o)) => {
                let (ke, ko) = (key(e), key(o));
                let kind = if ke.op != ko.op {
                    FindingKind::OpMismatch
                } else if ke.dtypes != ko.dtypes {
                    FindingKind::DatatypeMismatch
                } else {
                    FindingKind::CountMismatch
                };
                (
                    kind,
                    format!(
                        "at sequence id {} of {name}, rank {r} called {} where {} called {}",
                        o.collective_seq_id,
                        describe(e),
                        ranks_word(&ref_ranks),
                        describe(o)
                    ),
                )
            }
            _ => continue,
        };
        let mut f = Finding::new(kind, Some(name), text);
        f.brief = match kind {
            FindingKind::LogsEndApart => f.message.clone(),
            FindingKind::Stopped => format!("hang (Flight Recorder): {}", f.message),
            _ => format!("Flight Recorder: {}", f.message),
        };
        f.ranks = vec![r];
        f.other_ranks = ref_ranks.clone();
        f.position = at_ref.map(|e| e.collective_seq_id);
        report.findings.push(f);
    }
}

fn plural(n: usize, word: &str, first: String) -> String {
    if n == 1 {
        first
    } else {
        format!("{n} {word}s from {first} on")
    }
}

/// Send/Recv per (src → dst), in `p2p_seq_id` order: the n-th send with
/// the n-th receive, sizes compared.
fn p2p(dumps: &[Dump], pg: &str, name: &str, hung: Option<&str>, report: &mut FlightReport) {
    type Pair = (u32, u32);
    let mut sends: BTreeMap<Pair, Vec<&Entry>> = BTreeMap::new();
    let mut recvs: BTreeMap<Pair, Vec<&Entry>> = BTreeMap::new();
    for (_, v) in per_rank(dumps, pg, true) {
        for e in v {
            let Some(pair) = e.peers() else { continue };
            match e.op() {
                "send" => sends.entry(pair).or_default().push(e),
                "recv" => recvs.entry(pair).or_default().push(e),
                _ => {}
            }
        }
    }
    let pairs: BTreeSet<Pair> = sends.keys().chain(recvs.keys()).copied().collect();
    let empty = Vec::new();
    for (src, dst) in pairs {
        let s = sends.get(&(src, dst)).unwrap_or(&empty);
        let r = recvs.get(&(src, dst)).unwrap_or(&empty);
        if let Some(n) = (0..s.len().min(r.len())).find(|&n| s[n].input_sizes != r[n].output_sizes)
        {
            let mut f = Finding::new(
                FindingKind::P2pMismatch,
                Some(name),
                format!(
                    "on {name}, group rank {src}'s send #{n} to {dst} has sizes {:?} where group rank {dst}'s receive #{n} has {:?}",
                    s[n].input_sizes, r[n].output_sizes
                ),
            );
            f.brief = format!("Flight Recorder: {}", f.message);
            report.findings.push(f);
        } else if s.len() != r.len() && hung.is_some() {
            let (kind, who, n) = if s.len() > r.len() {
                (
                    FindingKind::UnmatchedSend,
                    format!("group rank {src}'s send #{} to {dst}", r.len()),
                    s.len(),
                )
            } else {
                (
                    FindingKind::UnmatchedRecv,
                    format!("group rank {dst}'s receive #{} from {src}", s.len()),
                    r.len(),
                )
            };
            let mut f = Finding::new(
                kind,
                Some(name),
                format!(
                    "on {name}, {who} has no match in the other side's dump ({n} on one side, {} on the other)",
                    s.len().min(r.len())
                ),
            );
            f.brief = format!("Flight Recorder: {}", f.message);
            report.findings.push(f);
        }
    }
}
