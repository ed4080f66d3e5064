//! Runs the checks and assembles the [`Analysis`]: streams are resolved
//! into communicators; on each, the ranks seen against nranks, the
//! collective order ([`super::collectives`]), Send/Recv
//! ([`super::p2p`]) and a summary of every member; then the WARN lines
//! ([`super::warnings`]), the notes on the input, and the verdict
//! ([`super::verdict`]). Findings are listed errors first.
//!
//! Fused calls are grouped by opCount (a group's calls share one): each
//! rank's launches are counted that way, a zero-count collective excluded.

use super::collectives::{self, Scope, is_coll};
use super::evidence::{hang_evidence, watchdog_findings};
use super::findings::{
    Analysis, CommReport, Finding, FindingKind, MISSING_LISTED, MemberReport, Severity, Who,
    call_view, fmt_ranges, gaps, hex, malformed_calls_note,
};
use super::flight;
use super::model::{Collected, Stream};
use super::p2p;
use super::parse::InitPhase;
use super::resolve::{CommGroup, resolve};
use super::verdict::verdict;
use super::warnings;

struct CommAnalysis {
    report: CommReport,
    findings: Vec<Finding>,
    omitted: u64,
}

/// What the analysis is told beyond the logs.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The user says the job hung (`--hung`): logs that end with ranks at
    /// different calls are read as a hang.
    pub hung: bool,
}

fn analyze_comm(c: &Collected, g: &CommGroup, hung: Option<&str>) -> CommAnalysis {
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

    let who = Who::new(c, &g.members, g.ranks_known);
    let scope = Scope {
        name,
        ranks: &ranks,
        who: &who,
        hung,
    };
    let order = collectives::check(c, &scope, &streams);
    findings.extend(order.findings);
    omitted += order.omitted;
    let p2p = p2p::check(
        c,
        &scope,
        g.nranks,
        &streams,
        &order.from,
        order.divergence.as_ref(),
    );
    findings.extend(p2p.findings);
    omitted += p2p.omitted;

    // each member: its calls, launches and last call
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
                rank_known: g.ranks_known,
                dev: s.dev,
                host: c.hosts[s.host as usize].clone(),
                pid: s.pid,
                comm: hex(s.comm),
                calls: s.calls.len() as u64,
                collectives: coll_k,
                p2p: s.calls.len() as u64 - coll_k,
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
            agreed_collectives: order.agreed,
            divergence: order.divergence,
            p2p_pairs: p2p.pairs,
            p2p_matched: p2p.matched,
            zero_count_positions: order.zero_positions,
            members,
        },
        findings,
        omitted,
    }
}

pub fn analyze(c: &Collected) -> Analysis {
    analyze_with(c, &Settings::default())
}

/// [`analyze`], told whether the job hung and what other inputs found.
pub fn analyze_with(c: &Collected, settings: &Settings) -> Analysis {
    let groups = resolve(c);
    let log_hang = hang_evidence(c, settings.hung);
    let flight = flight::check(&c.flight, log_hang.as_deref());
    let hung = log_hang.or(flight.hang.clone());
    let mut per_comm: Vec<CommAnalysis> = groups
        .iter()
        .map(|g| analyze_comm(c, g, hung.as_deref()))
        .collect();

    let (warns, omitted_warn) = warnings::findings(c, &groups);
    let mut stray: Vec<Finding> = Vec::new();
    for (target, f) in warns {
        match target {
            Some(gi) => per_comm[gi].findings.push(f),
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
    findings.extend(watchdog_findings(c));
    findings.extend(flight.findings);
    for u in &c.unreadable {
        findings.push(Finding::new(FindingKind::Unreadable, None, u.clone()));
    }
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
        hang_evidence: hung,
        flight_groups: flight.groups,
        problems,
        counts: c.counts,
        files: c.files.clone(),
        communicators: comms,
        findings,
        findings_omitted: omitted,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::ingest::collect_bytes;
    use crate::logs::summarize;
    use crate::logs::testlog::{call, call_stating, findings_of, init, init_stating};

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
}
