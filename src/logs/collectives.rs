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

use super::align::{self, Departure};
use super::findings::{
    CallGroup, DepartureReport, Divergence, Finding, FindingKind, LIST_LIMIT, call_view,
    datatype_name, describe, loc_str, ranks_word, redop_name,
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
        let told = Told::new(c, name, streams, ranks, k, &at, &before);
        if let Some(d) = told.tell(&mut findings) {
            div_report = Some(d);
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

/// A collective call's contract (the part every rank must agree on).
type Key = (Func, u64, i32, i32, i32);

/// The divergence at collective `#k` of one communicator, told: the
/// ranks' collectives from `#k` on, how [`align`] classifies each rank's
/// departure, and the findings that say so.
struct Told<'a> {
    c: &'a Collected,
    name: &'a str,
    streams: &'a [&'a Stream],
    ranks: &'a [u32],
    k: u64,
    /// Each rank's collectives from `#k` on (call indices), at most
    /// [`align::LOOKAHEAD`] + 1 of them.
    window: Vec<Vec<usize>>,
    /// Each rank's collective `#k-1`, if it has one.
    before: &'a [Option<usize>],
}

impl<'a> Told<'a> {
    fn new(
        c: &'a Collected,
        name: &'a str,
        streams: &'a [&'a Stream],
        ranks: &'a [u32],
        k: u64,
        at: &[Option<usize>],
        before: &'a [Option<usize>],
    ) -> Self {
        let window = streams
            .iter()
            .zip(at)
            .map(|(s, a)| match a {
                None => Vec::new(),
                Some(i) => (*i..s.calls.len())
                    .filter(|&j| is_coll(&c.sigs[s.calls[j].sig as usize]))
                    .take(align::LOOKAHEAD + 1)
                    .collect(),
            })
            .collect();
        Told {
            c,
            name,
            streams,
            ranks,
            k,
            window,
            before,
        }
    }

    /// Rank slot `m`'s collective `#k + j`: its signature.
    fn sig(&self, m: usize, j: usize) -> Sig {
        self.c.sigs[self.streams[m].calls[self.window[m][j]].sig as usize]
    }

    /// Its opCount, when the line had one.
    fn op_count(&self, m: usize, j: usize) -> Option<u64> {
        let v = self.streams[m].calls[self.window[m][j]].op_count;
        (v != u64::MAX).then_some(v)
    }

    /// Where it was logged.
    fn loc(&self, m: usize, j: usize) -> String {
        loc_str(self.c, self.streams[m].loc(self.window[m][j]))
    }

    /// `Broadcast #3 (count 4 float32 root 0)`.
    fn named(&self, m: usize, j: usize) -> String {
        let sig = self.sig(m, j);
        format!(
            "{} #{} ({})",
            sig.op.name(),
            self.k + j as u64,
            describe(&sig)
        )
    }

    /// `AllReduce #4`, `Broadcast #3 and AllReduce #4`, `A #3, B #4 and C #5`.
    fn names(&self, m: usize, js: std::ops::Range<usize>) -> String {
        let v: Vec<String> = js
            .map(|j| format!("{} #{}", self.sig(m, j).op.name(), self.k + j as u64))
            .collect();
        join_and(&v)
    }

    /// How far rank slot `f`'s opCount moved against the reference's
    /// (slot `r`) across the divergence: at the call where they line up
    /// again (offsets `resume`) minus at the last call they agreed on.
    fn op_count_shift(&self, f: usize, r: usize, resume: (usize, usize)) -> Option<i128> {
        let after =
            i128::from(self.op_count(f, resume.0)?) - i128::from(self.op_count(r, resume.1)?);
        let opc = |m: usize, i: usize| {
            let v = self.streams[m].calls[i].op_count;
            (v != u64::MAX).then_some(i128::from(v))
        };
        let before = match (self.before[f], self.before[r]) {
            (Some(a), Some(b)) => opc(f, a)? - opc(r, b)?,
            (None, None) => 0,
            _ => return None,
        };
        Some(after - before)
    }

    /// Classify, push the findings (the headline first), and return the report.
    fn tell(&self, findings: &mut Vec<Finding>) -> Option<Divergence> {
        let keys: Vec<Vec<Key>> = (0..self.window.len())
            .map(|m| {
                (0..self.window[m].len())
                    .map(|j| contract_key(&self.sig(m, j)))
                    .collect()
            })
            .collect();
        let slices: Vec<&[Key]> = keys.iter().map(Vec::as_slice).collect();
        let fd = align::first_divergence(&slices)?;
        debug_assert_eq!(fd.position, 0);
        let (k, ranks) = (self.k, self.ranks);
        let n = self.window.len();
        let stopped_m: Vec<usize> = (0..n).filter(|&m| self.window[m].is_empty()).collect();
        let stopped: Vec<u32> = stopped_m.iter().map(|&m| ranks[m]).collect();
        let issued_m: Vec<usize> = (0..n).filter(|&m| !self.window[m].is_empty()).collect();
        let issued: Vec<u32> = issued_m.iter().map(|&m| ranks[m]).collect();
        // issuing ranks grouped by the call they made at #k: the
        // reference's first, then the largest (ties: the lowest rank)
        let mut groups: Vec<(Sig, Vec<usize>)> = Vec::new();
        for &m in &issued_m {
            let sig = self.sig(m, 0);
            match groups.iter_mut().find(|(_, v)| keys[v[0]][0] == keys[m][0]) {
                Some((_, v)) => v.push(m),
                None => groups.push((sig, vec![m])),
            }
        }
        let r = fd.compared_with;
        groups.sort_by_key(|(_, v)| (!v.contains(&r), std::cmp::Reverse(v.len()), v[0]));
        let call_groups: Vec<CallGroup> = groups
            .iter()
            .map(|(_, v)| CallGroup {
                ranks: v.iter().map(|&m| ranks[m]).collect(),
                call: Some(call_view(
                    self.c,
                    self.streams[v[0]],
                    self.window[v[0]][0],
                    Some(k),
                )),
            })
            .chain((!stopped.is_empty()).then(|| CallGroup {
                ranks: stopped.clone(),
                call: None,
            }))
            .collect();
        let departure_of = |m: usize| fd.departing.iter().find(|d| d.stream == m);
        // departing ranks grouped by (departure, call at #k)
        let mut departs: Vec<(Departure, usize, Vec<usize>)> = Vec::new();
        for d in &fd.departing {
            let m = d.stream;
            if d.departure == Departure::Stopped {
                continue;
            }
            match departs
                .iter_mut()
                .find(|(dep, m0, _)| *dep == d.departure && keys[*m0][0] == keys[m][0])
            {
                Some((_, _, v)) => v.push(m),
                None => departs.push((d.departure, m, vec![m])),
            }
        }
        departs.sort_by_key(|(_, _, v)| (std::cmp::Reverse(v.len()), v[0]));
        let stopped_tail = if stopped.is_empty() {
            String::new()
        } else {
            format!("; {} never issued it", ranks_word(&stopped))
        };
        let first_new = findings.len();
        let mut departures = Vec::new();
        // skipped, extra and reordered calls: one finding per group
        for (dep, _, ms) in departs.iter().filter(|(d, _, _)| *d != Departure::Mismatch) {
            let f = self.told_departure(*dep, ms, &fd.reference, r, fd.tied);
            departures.push(self.departure_report(f.kind, *dep, ms, &fd));
            findings.push(f);
        }
        // mismatches: one finding for them all, naming the first field
        // that differs; the ranks grouped by the call they made instead
        let odd_groups: Vec<(Sig, Vec<usize>)> = groups
            .iter()
            .map(|(sig, v)| {
                let odd = v
                    .iter()
                    .copied()
                    .filter(|&m| {
                        departure_of(m).is_some_and(|d| d.departure == Departure::Mismatch)
                    })
                    .collect();
                (*sig, odd)
            })
            .filter(|(_, v): &(Sig, Vec<usize>)| !v.is_empty())
            .collect();
        if !odd_groups.is_empty() {
            let (ref_sig, _) = &groups[0];
            let f = self.told_mismatch(ref_sig, &fd.reference, &odd_groups);
            for (_, v) in &odd_groups {
                departures.push(self.departure_report(f.kind, Departure::Mismatch, v, &fd));
            }
            findings.push(f);
        }
        if findings.len() > first_new {
            let f = &mut findings[first_new];
            f.message += &stopped_tail;
            f.brief += &stopped_tail;
        } else {
            // every rank that issued #k agrees: the others stopped
            findings.push(self.told_stopped(&stopped, &issued, &groups[0]));
        }
        if !stopped.is_empty() {
            departures.push(DepartureReport {
                ranks: stopped.clone(),
                kind: FindingKind::Stopped,
                calls: 0,
                realigned: None,
                lined_up: 0,
            });
        }
        Some(Divergence {
            position: k,
            kind: findings[first_new].kind,
            stopped,
            issued,
            groups: call_groups,
            departures,
        })
    }

    fn departure_report(
        &self,
        kind: FindingKind,
        dep: Departure,
        ms: &[usize],
        fd: &align::FirstDivergence,
    ) -> DepartureReport {
        let lined_up = fd
            .departing
            .iter()
            .find(|d| d.stream == ms[0])
            .map_or(0, |d| d.agree_after) as u64;
        let (a, b) = dep.resumes();
        DepartureReport {
            ranks: ms.iter().map(|&m| self.ranks[m]).collect(),
            kind,
            calls: dep.calls() as u64,
            realigned: (lined_up > 0).then(|| [self.k + a as u64, self.k + b as u64]),
            lined_up,
        }
    }

    /// `opCount 2, r0.log:17`, or only the place when the line had no opCount.
    fn at_text(&self, m: usize, j: usize) -> String {
        match self.op_count(m, j) {
            Some(v) => format!("opCount {v:x}, {}", self.loc(m, j)),
            None => self.loc(m, j),
        }
    }

    /// Slot `m`'s first `count` calls from `#k`, for a list: `3 calls
    /// (A #3 (…), B #4 (…) and C #5 (…))`, the first three named.
    fn calls_text(&self, m: usize, count: usize) -> String {
        let listed: Vec<String> = (0..count.min(3)).map(|j| self.named(m, j)).collect();
        let list = if count > 3 {
            format!("{} and {} more", listed.join(", "), count - 3)
        } else {
            join_and(&listed)
        };
        format!("{count} calls ({list})")
    }

    /// A skipped, extra or reordered run of calls on the ranks `ms`, told
    /// against the reference ranks `refs` (compared with slot `r`).
    fn told_departure(
        &self,
        dep: Departure,
        ms: &[usize],
        refs: &[usize],
        r: usize,
        tied: bool,
    ) -> Finding {
        let (k, name) = (self.k, self.name);
        let f0 = ms[0];
        let rs: Vec<u32> = ms.iter().map(|&m| self.ranks[m]).collect();
        let refr: Vec<u32> = refs.iter().map(|&m| self.ranks[m]).collect();
        let who = ranks_word(&rs);
        let them = ranks_word(&refr);
        // "its calls … match the others' …"; with a tie, by name
        let (its, others, theirs) = if tied {
            (format!("{who}'s"), format!("{them}'s"), format!("{them}'s"))
        } else if ms.len() == 1 {
            ("its".into(), "the others'".into(), "theirs".into())
        } else {
            ("their".into(), "the others'".into(), "the others'".into())
        };
        let (a, b) = dep.resumes();
        let lines_up = self.window[f0].len() > a && self.window[r].len() > b;
        let matches = if lines_up && a == b {
            format!("from #{} on {its} calls match {others} again", k + a as u64)
        } else if lines_up {
            format!(
                "{its} calls from #{} on match {others} from #{} on",
                k + a as u64,
                k + b as u64
            )
        } else if self.window[f0].len() <= a && self.window[r].len() <= b {
            // nothing follows to compare: say so rather than claim a match
            "no collective follows them on any of these ranks".to_string()
        } else {
            format!("{its} calls after them match {others}")
        };
        let shift = if lines_up {
            self.op_count_shift(f0, r, (a, b))
        } else {
            None
        };
        let (kind, text, op, location) = match dep {
            Departure::Skipped { calls } => {
                let what = if calls == 1 {
                    let sig = self.sig(r, 0);
                    format!(
                        "{} #{k} ({}, called by {them} at {})",
                        sig.op.name(),
                        describe(&sig),
                        self.at_text(r, 0)
                    )
                } else {
                    format!(
                        "{}, called by {them} at {},",
                        self.calls_text(r, calls),
                        self.at_text(r, 0)
                    )
                };
                let tie = if !tied {
                    String::new()
                } else if calls == 1 {
                    format!(", or {them} made an extra call")
                } else {
                    format!(", or {them} made {calls} extra calls")
                };
                let evidence = match shift {
                    Some(s) if s < 0 => {
                        format!("; from there {its} opCount runs {} behind {theirs}", -s)
                    }
                    _ => String::new(),
                };
                (
                    FindingKind::Skipped,
                    format!("{who} skipped {what} on {name}{tie}: {matches}{evidence}"),
                    self.sig(r, 0).op,
                    self.loc(r, 0),
                )
            }
            Departure::Extra { calls } => {
                let what = if calls == 1 {
                    let sig = self.sig(f0, 0);
                    format!(
                        "an extra call {} #{k} ({}, at {})",
                        sig.op.name(),
                        describe(&sig),
                        self.at_text(f0, 0)
                    )
                } else {
                    format!(
                        "{} extra, at {},",
                        self.calls_text(f0, calls),
                        self.at_text(f0, 0)
                    )
                };
                let tie = match (tied, calls) {
                    (false, _) => format!(" that {them} did not make,"),
                    (true, 1) => format!(", or {them} skipped it"),
                    (true, _) => format!(", or {them} skipped them"),
                };
                let evidence = match shift {
                    Some(s) if s > 0 => {
                        format!("; from there {its} opCount runs {s} ahead of {theirs}")
                    }
                    _ => String::new(),
                };
                (
                    FindingKind::Extra,
                    format!("{who} made {what}{tie} on {name}: {matches}{evidence}"),
                    self.sig(f0, 0).op,
                    self.loc(f0, 0),
                )
            }
            Departure::Reordered { calls } => {
                let block = self.names(r, 0..calls);
                let head = if tied {
                    format!("{who} and {them} made {block} in different orders")
                } else {
                    format!("{who} made {block} in a different order")
                };
                let whose = if tied || ms.len() > 1 {
                    format!("{who}'s")
                } else {
                    "its".into()
                };
                let (mine, other) = (self.sig(f0, 0), self.sig(r, 0));
                (
                    FindingKind::Reordered,
                    format!(
                        "{head}: {whose} #{k} is {} ({}, at {}) where {others} #{k} is {} ({}, at {}), on {name}; {matches}",
                        mine.op.name(),
                        describe(&mine),
                        self.at_text(f0, 0),
                        other.op.name(),
                        describe(&other),
                        self.at_text(r, 0),
                    ),
                    other.op,
                    self.loc(f0, 0),
                )
            }
            Departure::Stopped | Departure::Mismatch => unreachable!("told elsewhere"),
        };
        let mut f = Finding::new(kind, Some(name), text.clone());
        f.brief = format!("likely hang: {text}");
        f.position = Some(k);
        f.ranks = rs;
        f.other_ranks = refr;
        f.op = Some(op);
        f.call_index = self.window[f0].first().map(|&i| i as u64);
        f.location = Some(location);
        f
    }

    /// Different calls in the reference's place (`odd`: the groups of
    /// ranks that made each), told as the field that differs.
    fn told_mismatch(&self, ref_sig: &Sig, refs: &[usize], odd: &[(Sig, Vec<usize>)]) -> Finding {
        let (k, ranks, name) = (self.k, self.ranks, self.name);
        let kind = odd
            .iter()
            .filter_map(|(s, _)| differing_field(ref_sig, s))
            .min()
            .unwrap_or(FindingKind::CountMismatch);
        let odd_ms: Vec<usize> = odd.iter().flat_map(|(_, v)| v.iter().copied()).collect();
        let mut odd_ranks: Vec<u32> = odd_ms.iter().map(|&m| ranks[m]).collect();
        odd_ranks.sort_unstable();
        let ref_ranks: Vec<u32> = refs.iter().map(|&m| ranks[m]).collect();
        let odd_desc = odd
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
        let ref_verb = if refs.len() == 1 { "has" } else { "have" };
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
        let opc_note = match self.op_count(refs[0], 0) {
            None => String::new(),
            Some(v) => format!(" (opCount {v:x})"),
        };
        let at_what = format!("{what} on {name}{opc_note}");
        let msg = format!(
            "{} at {at_what}: {odd_desc} where {} {ref_what}",
            kind_label(kind),
            ranks_word(&ref_ranks),
        );
        let mut f = Finding::new(kind, Some(name), msg);
        f.brief = format!(
            "contract mismatch: {odd_desc} where {} {ref_what} at {at_what}",
            ranks_word(&ref_ranks)
        );
        f.position = Some(k);
        f.ranks = odd_ranks;
        f.other_ranks = ref_ranks;
        f.op = Some(ref_sig.op);
        f.call_index = Some(self.window[odd_ms[0]][0] as u64);
        f.location = Some(self.loc(odd_ms[0], 0));
        f
    }

    /// Every rank that issued `#k` agrees (`group`); `stopped` never did.
    fn told_stopped(&self, stopped: &[u32], issued: &[u32], group: &(Sig, Vec<usize>)) -> Finding {
        let (k, name, c) = (self.k, self.name, self.c);
        let (sig, ms) = group;
        let opc = match self.op_count(ms[0], 0) {
            Some(v) => format!(", opCount {v:x}"),
            None => String::new(),
        };
        let mut msg = format!(
            "{} never issued {} #{k} ({}{opc}) on {name} where {} wait",
            ranks_word(stopped),
            sig.op.name(),
            describe(sig),
            ranks_word(issued)
        );
        let brief = format!("likely hang: {msg}");
        let lasts: Vec<String> = stopped
            .iter()
            .map(|r| {
                let m = self.ranks.iter().position(|x| x == r).unwrap_or(0);
                let s = self.streams[m];
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
        f.ranks = stopped.to_vec();
        f.other_ranks = issued.to_vec();
        f.op = Some(sig.op);
        let m0 = self
            .ranks
            .iter()
            .position(|x| *x == stopped[0])
            .unwrap_or(0);
        f.call_index = Some(self.streams[m0].calls.len() as u64);
        f.location = Some(self.loc(ms[0], 0));
        f
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
    fn a_swap_of_the_last_two_calls_claims_no_match_after_them() {
        let mut t = String::new();
        for r in 0..3 {
            init(&mut t, r, 3, 0x7);
        }
        for k in 0..6u64 {
            for r in 0..3 {
                // rank 1 makes the last two calls in the other order
                let swapped = r == 1 && k >= 4;
                let op = if (k == 5) != swapped {
                    "Broadcast"
                } else {
                    "AllReduce"
                };
                call(&mut t, r, 3, op, k, 64, 7, 0, 0);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(
            a.findings[0].kind,
            FindingKind::Reordered,
            "{:#?}",
            a.findings
        );
        assert!(
            a.verdict
                .contains("no collective follows them on any of these ranks"),
            "{}",
            a.verdict
        );
        assert!(!a.verdict.contains(" match "), "{}", a.verdict);
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

    /// A program of six collectives (NCCL names, count, datatype, root),
    /// with the opCount NCCL prints for each: the zero-count #1 does not
    /// advance it. Ranks in `skipping` leave out `#3`.
    fn program(nranks: u32, skipping: &[u32]) -> String {
        let calls: [(&str, u64, i32, i32, u64); 6] = [
            ("AllReduce", 8, 7, 0, 0),
            ("AllReduce", 0, 7, 0, 1),
            ("AllGather", 8, 7, 0, 1),
            ("Broadcast", 4, 7, 0, 2),
            ("Broadcast", 4, 7, 2, 3),
            ("AllReduce", 1, 7, 0, 4),
        ];
        let mut t = String::new();
        for r in 0..nranks {
            init(&mut t, r, nranks, 0xabc);
        }
        for (k, (op, count, dt, root, _)) in calls.iter().enumerate() {
            for r in 0..nranks {
                if k == 3 && skipping.contains(&r) {
                    continue;
                }
                // a rank that skipped #3 launched one call fewer
                let behind = u64::from(k > 3 && skipping.contains(&r));
                call(
                    &mut t,
                    r,
                    nranks,
                    op,
                    calls[k].4 - behind,
                    *count,
                    *dt,
                    0,
                    *root,
                );
            }
        }
        t
    }

    /// The 1-based line of the first line holding `needle`.
    fn line_of(t: &str, needle: &str) -> usize {
        t.lines().position(|l| l.contains(needle)).unwrap() + 1
    }

    #[test]
    fn a_rank_that_skips_a_call_and_goes_on_is_said_to_have_skipped_it() {
        let t = program(4, &[2]);
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let line = line_of(&t, "[0] NCCL INFO Broadcast: opCount 2 ");
        assert_eq!(
            a.verdict,
            format!(
                "likely hang: rank 2 skipped Broadcast #3 (count 4 float32 root 0, called by ranks 0-1,3 at opCount 2, x:{line}) on commId 0xabc: its calls from #3 on match the others' from #4 on; from there its opCount runs 1 behind theirs"
            )
        );
        let f = &a.findings[0];
        assert_eq!(
            (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
            (FindingKind::Skipped, Some(3), vec![2], vec![0, 1, 3])
        );
        let d = a.communicators[0].divergence.as_ref().unwrap();
        assert_eq!((d.position, d.kind), (3, FindingKind::Skipped));
        assert_eq!(d.departures.len(), 1);
        let dep = &d.departures[0];
        assert_eq!(
            (
                dep.ranks.clone(),
                dep.kind,
                dep.calls,
                dep.realigned,
                dep.lined_up
            ),
            (vec![2], FindingKind::Skipped, 1, Some([3, 4]), 2)
        );
        // three positions agree: #0-#2
        assert_eq!(a.communicators[0].agreed_collectives, 3);
    }

    #[test]
    fn with_two_ranks_a_skip_is_also_an_extra_call_on_the_other() {
        let t = program(2, &[1]);
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let line = line_of(&t, "[0] NCCL INFO Broadcast: opCount 2 ");
        assert_eq!(
            a.verdict,
            format!(
                "likely hang: rank 1 skipped Broadcast #3 (count 4 float32 root 0, called by rank 0 at opCount 2, x:{line}) on commId 0xabc, or rank 0 made an extra call: rank 1's calls from #3 on match rank 0's from #4 on; from there rank 1's opCount runs 1 behind rank 0's"
            )
        );
    }

    #[test]
    fn several_ranks_skipping_the_same_call_are_named_together() {
        let t = program(8, &[1, 5, 6]);
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert!(
            a.verdict.starts_with(
                "likely hang: ranks 1,5-6 skipped Broadcast #3 (count 4 float32 root 0, called by ranks 0,2-4,7 at opCount 2, "
            ),
            "{}",
            a.verdict
        );
        assert!(
            a.verdict
                .ends_with(": their calls from #3 on match the others' from #4 on; from there their opCount runs 1 behind the others'"),
            "{}",
            a.verdict
        );
    }
}
