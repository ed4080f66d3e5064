//! The collective order of one communicator (docs/reference/contracts.md §4): every rank
//! must issue the same collectives in the same order with the same op,
//! count, datatype, reduction op and root.
//!
//! Collectives are aligned by their ordinal `#k` on the communicator
//! (Send/Recv do not count); the first `k` where a rank has no call while
//! others do ("stopped") or where the calls differ (op kind, count,
//! datatype, op, root — reported in that order) is the divergence. A
//! zero-count collective is logged but discarded by NCCL (it does not
//! advance opCount); it still takes its place in the order.

#[cfg(test)]
mod tests;
mod told;

use super::findings::{
    Divergence, Finding, FindingKind, LIST_LIMIT, Who, datatype_name, describe, loc_str, redop_name,
};
use super::model::{Collected, Sig, Stream};
use super::window;
use crate::core::Func;
use told::Told;

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
    /// Per member: the index of its first call compared (calls before it
    /// precede what every log holds).
    pub from: Vec<usize>,
}

/// Who and what the collective check is about.
pub(crate) struct Scope<'a> {
    /// The communicator's name.
    pub name: &'a str,
    /// The members' ranks, one per stream.
    pub ranks: &'a [u32],
    pub who: &'a Who,
    /// What says the job hung, if anything: without it, logs that end
    /// with ranks at different calls are told as skew, not as a hang.
    pub hung: Option<&'a str>,
}

/// Check the collective order of `streams` (the members of communicator
/// `scope.name`, holding `scope.ranks`).
pub(crate) fn check(c: &Collected, scope: &Scope<'_>, streams: &[&Stream]) -> Checked {
    let (name, ranks) = (scope.name, scope.ranks);
    let start = window::starts(c, name, streams, ranks, scope.who);
    let mut findings: Vec<Finding> = start.note.clone().into_iter().collect();
    let n = streams.len();
    if start.unaligned {
        return Checked {
            agreed: 0,
            divergence: None,
            zero_positions: 0,
            findings,
            omitted: 0,
            from: vec![0; n],
        };
    }
    let mut omitted = 0u64;
    let mut cursor = vec![0usize; n];
    let mut coll_total = vec![0u64; n];
    for (m, s) in streams.iter().enumerate() {
        let mut left_out = start.skip[m];
        for (i, r) in s.calls.iter().enumerate() {
            if is_coll(&c.sigs[r.sig as usize]) {
                if left_out > 0 {
                    left_out -= 1;
                    cursor[m] = i + 1;
                } else {
                    coll_total[m] += 1;
                }
            }
        }
    }
    let from = cursor.clone();
    let max_len = coll_total.iter().copied().max().unwrap_or(0);
    let min_len = coll_total.iter().copied().min().unwrap_or(0);
    let mut divergence = None;
    let mut zero = ZeroCounts::default();
    let mut k = 0u64;
    let mut at: Vec<Option<usize>> = vec![None; n];
    // each rank's collective before `at` (the last agreed one)
    let mut before: Vec<Option<usize>> = vec![None; n];
    while k < max_len {
        for m in 0..n {
            before[m] = at[m];
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
        let agree = agree_at(c, streams, &at);
        if agree {
            zero.note(
                c,
                scope,
                streams,
                &at,
                k + start.base,
                &mut findings,
                &mut omitted,
            );
        }
        if !agree {
            divergence = Some(k);
            break;
        }
        k += 1;
    }
    let agreed = divergence.unwrap_or(min_len.min(max_len));
    let mut div_report = None;
    // At the first call compared, a log that may start late cannot be told
    // from a skip: that is a fragment, said as such, not a fault.
    let fragment = divergence == Some(0)
        && start.base == 0
        && !streams.iter().all(|s| window::starts_complete_in(c, s))
        && at.iter().filter(|a| a.is_some()).count() > 1;
    if fragment {
        findings.push(Finding::new(
            FindingKind::Unaligned,
            Some(name),
            format!(
                "the logs of {name} differ from their first call on, and some start without their init line: a log that starts late cannot be told from a skipped call there, so the collective order is not compared"
            ),
        ));
        return Checked {
            agreed: 0,
            divergence: None,
            zero_positions: zero.positions,
            findings,
            omitted,
            from,
        };
    }
    if let Some(k) = divergence {
        let told = Told::new(c, scope, streams, k + start.base, &at, &before);
        if let Some(d) = told.tell(&mut findings) {
            div_report = Some(d);
        }
    }
    Checked {
        agreed,
        divergence: div_report,
        zero_positions: zero.positions,
        findings,
        omitted,
        from,
    }
}

/// Whether every member has a call at this position and they agree.
fn agree_at(c: &Collected, streams: &[&Stream], at: &[Option<usize>]) -> bool {
    // Fast path: all present, one signature.
    let first_sig = at[0].map(|i| streams[0].calls[i].sig);
    let same = at
        .iter()
        .enumerate()
        .all(|(m, a)| a.map(|i| streams[m].calls[i].sig) == first_sig && first_sig.is_some());
    same || {
        at.iter().all(Option::is_some) && {
            let keys: Vec<_> = at
                .iter()
                .enumerate()
                .map(|(m, a)| contract_key(&c.sigs[streams[m].calls[a.unwrap_or(0)].sig as usize]))
                .collect();
            keys.windows(2).all(|w| w[0] == w[1])
        }
    }
}

/// Zero-count collectives: counted, and the first [`LIST_LIMIT`] listed.
#[derive(Default)]
struct ZeroCounts {
    positions: u64,
    listed: usize,
}

impl ZeroCounts {
    #[allow(clippy::too_many_arguments)]
    fn note(
        &mut self,
        c: &Collected,
        scope: &Scope<'_>,
        streams: &[&Stream],
        at: &[Option<usize>],
        k: u64,
        findings: &mut Vec<Finding>,
        omitted: &mut u64,
    ) {
        let zero_ranks: Vec<u32> = at
            .iter()
            .enumerate()
            .filter(|(m, a)| {
                a.is_some_and(|i| c.sigs[streams[*m].calls[i].sig as usize].count == 0)
            })
            .map(|(m, _)| scope.ranks[m])
            .collect();
        if zero_ranks.is_empty() {
            return;
        }
        self.positions += 1;
        if self.listed >= LIST_LIMIT {
            *omitted += 1;
            return;
        }
        self.listed += 1;
        let m = at.iter().position(Option::is_some).unwrap_or(0);
        let i = at[m].unwrap_or(0);
        let sig = c.sigs[streams[m].calls[i].sig as usize];
        let mut f = Finding::new(
            FindingKind::ZeroCount,
            Some(scope.name),
            format!(
                "{} #{k} has count 0 on {}: logged, then discarded by NCCL (opCount does not advance)",
                sig.op.name(),
                scope.who.word(&zero_ranks)
            ),
        );
        f.position = Some(k);
        f.ranks = zero_ranks;
        f.op = Some(sig.op);
        f.call_index = Some(i as u64);
        f.location = Some(loc_str(c, streams[m].loc(i)));
        findings.push(f);
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}
