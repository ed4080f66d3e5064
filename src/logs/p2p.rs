//! Send/Recv of one communicator: matched per ordered pair (s → d) in
//! order, the n-th Send from s to d with the n-th Recv on d from s; both
//! must name the same count and datatype, and leftovers are unmatched. A
//! skipped call shifts the rest of its pair by one: it is named as the
//! unmatched call, not as the mismatches after it. Peers outside
//! `0..nranks` are named on their own.
//!
//! Logs are fragments as often as not: calls before the first call every
//! log holds are left out, a pair whose first calls do not meet where a
//! log starts late is a truncation, and calls left over where one side's
//! log ends first are skew unless something says the job hung. Without
//! known ranks there is no telling which process a peer number names, and
//! nothing is matched.

use super::collectives::Scope;
use super::findings::{Divergence, Finding, FindingKind, LIST_LIMIT, describe, loc_str};
use super::model::{Collected, Sig, Stream};
use super::window::starts_complete_in;
use crate::core::Func;
use std::collections::{BTreeMap, HashMap};

/// What the Send/Recv check found on one communicator.
pub(crate) struct Checked {
    /// Pairs (s → d) whose both sides are in the logs.
    pub pairs: u64,
    /// Calls matched.
    pub matched: u64,
    pub findings: Vec<Finding>,
    /// Findings not listed ([`LIST_LIMIT`]).
    pub omitted: u64,
}

/// Check the Send/Recv of `streams` (the members of communicator `name`
/// of `nranks` ranks, holding `ranks`). `divergence`, the collective
/// one, tells which unmatched calls a stopped rank explains.
pub(crate) fn check(
    c: &Collected,
    scope: &Scope<'_>,
    nranks: u32,
    streams: &[&Stream],
    from: &[usize],
    divergence: Option<&Divergence>,
) -> Checked {
    let (name, ranks) = (scope.name, scope.ranks);
    let mut findings = Vec::new();
    let mut omitted = 0u64;
    if !scope.who.known() {
        let p2p = streams
            .iter()
            .flat_map(|s| &s.calls)
            .filter(|r| c.sigs[r.sig as usize].op.is_p2p())
            .count();
        if p2p > 0 {
            findings.push(Finding::new(
                FindingKind::Unaligned,
                Some(name),
                format!(
                    "{p2p} Send/Recv calls on {name} are not matched: the logs do not say which process holds which rank (no init lines or launcher prefixes), so a peer number names no one"
                ),
            ));
        }
        return Checked {
            pairs: 0,
            matched: 0,
            findings,
            omitted: 0,
        };
    }
    let mut edges = Edges::default();
    let rank_slot: HashMap<u32, usize> = ranks.iter().enumerate().map(|(m, r)| (*r, m)).collect();
    // (src, dst) → call indices: sends on src, recvs on dst
    let mut sends: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut recvs: BTreeMap<(u32, u32), Vec<u32>> = BTreeMap::new();
    let mut bad_peer = 0usize;
    for (m, s) in streams.iter().enumerate() {
        for (i, rec) in s.calls.iter().enumerate().skip(from[m]) {
            let sig = &c.sigs[rec.sig as usize];
            if !sig.op.is_p2p() {
                continue;
            }
            let me = ranks[m];
            if sig.root < 0 || sig.root as u32 >= nranks {
                if bad_peer < LIST_LIMIT {
                    let mut f = Finding::new(
                        FindingKind::InvalidPeer,
                        Some(name),
                        format!(
                            "rank {me}'s {} names peer {} outside 0..={} on {name}",
                            sig.op.name(),
                            sig.root,
                            nranks.saturating_sub(1)
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
        // where a log starts late or ends first, a leftover is no fault
        if let Some((_, nth)) = first {
            // a log that starts late: cut by the collective alignment, or
            // starting with Send/Recv and no init line before them
            let late = |m: usize| {
                let s = streams[m];
                from[m] > 0
                    || (!starts_complete_in(c, s)
                        && s.calls
                            .first()
                            .is_some_and(|r| c.sigs[r.sig as usize].op.is_p2p()))
            };
            let late = late(ms) || late(md);
            // or a log that may start late: the pair's first calls cannot
            // be told from calls before the log began
            let unsure = !starts_complete_in(c, streams[ms]) || !starts_complete_in(c, streams[md]);
            let at_end = nth == common && sv.len() != rv.len();
            if nth == 0 && (late || unsure) {
                edges.truncated += 1;
                continue;
            }
            // a leftover is past the end of the other side's log when that
            // log holds no collective after the ones before the leftover
            let (short, long, left) = if sv.len() < rv.len() {
                (ms, md, rv.get(common))
            } else {
                (md, ms, sv.get(common))
            };
            let before = left.map_or(0, |&i| {
                colls_after(c, streams[long], from[long])
                    - colls_after(c, streams[long], (i as usize).max(from[long]))
            });
            // or, by opCount, when its last launch is not past the leftover's
            let op_count = |m: usize, i: usize| {
                Some(streams[m].calls.get(i)?.op_count).filter(|&o| o != u64::MAX)
            };
            let last = streams[short].calls.len().checked_sub(1);
            let by_count = match (left, last) {
                (Some(&i), Some(l)) => op_count(short, l)
                    .zip(op_count(long, i as usize))
                    .is_some_and(|(a, b)| a <= b),
                _ => false,
            };
            // (with a log that may start late, the pairing itself may be
            // off: a leftover there is no evidence either)
            // (a log that shows its communicator destroyed is complete)
            let ends_first = streams[short].ended.is_none()
                && (by_count || unsure || colls_after(c, streams[short], from[short]) <= before);
            if at_end && ends_first && scope.hung.is_none() {
                edges.at_end += 1;
                continue;
            }
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
            if let (Some(d), Some(peer)) = (divergence, f.peer)
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

    edges.notes(name, &mut findings);
    Checked {
        pairs: p2p_pairs,
        matched: p2p_matched,
        findings,
        omitted,
    }
}

/// Collectives of `s` from call `from` on.
fn colls_after(c: &Collected, s: &Stream, from: usize) -> usize {
    s.calls
        .iter()
        .skip(from)
        .filter(|r| !c.sigs[r.sig as usize].op.is_p2p())
        .count()
}

/// Pairs whose leftovers sit where a log starts late or ends first.
#[derive(Default)]
struct Edges {
    truncated: usize,
    at_end: usize,
}

impl Edges {
    fn notes(&self, name: &str, findings: &mut Vec<Finding>) {
        if self.truncated > 0 {
            findings.push(Finding::new(
                FindingKind::Truncated,
                Some(name),
                format!(
                    "{} Send/Recv pair{} of {name} begin unmatched where a log starts after the communicator's first calls: the logs are fragments there",
                    self.truncated,
                    if self.truncated == 1 { "" } else { "s" }
                ),
            ));
        }
        if self.at_end > 0 {
            findings.push(Finding::new(
                FindingKind::LogsEndApart,
                Some(name),
                format!(
                    "{} Send/Recv pair{} of {name} end with calls one side's log does not reach (ordinary skew if the job was running; nothing says it hung)",
                    self.at_end,
                    if self.at_end == 1 { "" } else { "s" }
                ),
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::logs::analyze;
    use crate::logs::findings::FindingKind;
    use crate::logs::ingest::collect_bytes;
    use crate::logs::testlog::{call, init};

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
        let c = collect_bytes("x", t.as_bytes());
        let kinds = |a: &crate::logs::Analysis| -> Vec<_> {
            a.findings
                .iter()
                .map(|f| (f.kind, f.ranks.clone(), f.peer, f.position))
                .collect()
        };
        // rank 0's second Send is past the end of rank 1's log: skew,
        // unless the job hung
        let a = analyze(&c);
        let kinds_ = kinds(&a);
        assert!(
            !kinds_.iter().any(|k| k.0 == FindingKind::UnmatchedSend),
            "{kinds_:?}"
        );
        assert!(kinds_.iter().any(|k| k.0 == FindingKind::LogsEndApart));
        let hung = crate::logs::analyze_with(&c, &crate::logs::Settings { hung: true });
        assert!(
            kinds(&hung).contains(&(FindingKind::UnmatchedSend, vec![0], Some(1), Some(1))),
            "{:?}",
            kinds(&hung)
        );
        let kinds = kinds_;
        assert!(
            kinds.contains(&(FindingKind::P2pMismatch, vec![1], Some(0), Some(0))),
            "{kinds:?}"
        );
    }
}
