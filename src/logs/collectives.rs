//! The collective order of one communicator (CONTRACTS.md §4): every rank
//! must issue the same collectives in the same order with the same op,
//! count, datatype, reduction op and root.
//!
//! Collectives are aligned by their ordinal `#k` on the communicator
//! (Send/Recv do not count); the first `k` where a rank has no call while
//! others do ("stopped") or where the calls differ (op kind, count,
//! datatype, op, root — reported in that order) is the divergence. A
//! zero-count collective is logged but discarded by NCCL (it does not
//! advance opCount); it still takes its place in the order.

use super::findings::{
    CallGroup, Divergence, Finding, FindingKind, LIST_LIMIT, call_view, datatype_name, describe,
    loc_str, ranks_word, redop_name,
};
use super::model::{Collected, Sig, Stream};
use crate::core::Func;

/// A collective (Send and Recv are matched per pair, not in this order).
pub(crate) fn is_coll(sig: &Sig) -> bool {
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

/// What the collective check found on one communicator.
pub(crate) struct Checked {
    /// Positions on which every rank agrees.
    pub agreed: u64,
    pub divergence: Option<Divergence>,
    pub zero_positions: u64,
    pub findings: Vec<Finding>,
    /// Findings not listed ([`LIST_LIMIT`]).
    pub omitted: u64,
}

/// Check the collective order of `streams` (the members of communicator
/// `name`, holding `ranks`).
pub(crate) fn check(c: &Collected, name: &str, streams: &[&Stream], ranks: &[u32]) -> Checked {
    let mut findings = Vec::new();
    let mut omitted = 0u64;
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

    Checked {
        agreed,
        divergence: div_report,
        zero_positions,
        findings,
        omitted,
    }
}

#[cfg(test)]
mod tests {
    use crate::logs::analyze;
    use crate::logs::findings::FindingKind;
    use crate::logs::ingest::collect_bytes;
    use crate::logs::testlog::{call, init};

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
}
