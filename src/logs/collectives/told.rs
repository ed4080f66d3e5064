//! The divergence at one position, told: how each rank's collectives part
//! from the others' ([`align`]), and the findings that say so.

use super::{Scope, contract_key, differing_field, field_value, is_coll, join_and, kind_label};
use crate::core::Func;
use crate::logs::align::{self, Departure};
use crate::logs::findings::{
    CallGroup, DepartureReport, Divergence, Finding, FindingKind, Who, call_view, describe, loc_str,
};
use crate::logs::model::{Collected, Sig, Stream};

/// A collective call's contract (the part every rank must agree on).
type Key = (Func, u64, i32, i32, i32);

/// The divergence at collective `#k` of one communicator, told: the
/// ranks' collectives from `#k` on, how [`align`] classifies each rank's
/// departure, and the findings that say so.
pub(super) struct Told<'a> {
    c: &'a Collected,
    name: &'a str,
    streams: &'a [&'a Stream],
    ranks: &'a [u32],
    who: &'a Who,
    hung: Option<&'a str>,
    k: u64,
    /// Each rank's collectives from `#k` on (call indices), at most
    /// [`align::LOOKAHEAD`] + 1 of them.
    window: Vec<Vec<usize>>,
    /// Each rank's collective `#k-1`, if it has one.
    before: &'a [Option<usize>],
}

impl<'a> Told<'a> {
    pub(super) fn new(
        c: &'a Collected,
        scope: &'a Scope<'a>,
        streams: &'a [&'a Stream],
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
            name: scope.name,
            streams,
            ranks: scope.ranks,
            who: scope.who,
            hung: scope.hung,
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
    pub(super) fn tell(&self, findings: &mut Vec<Finding>) -> Option<Divergence> {
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
            match self.hung {
                Some(_) => format!("; {} never issued it", self.who.word(&stopped)),
                None => format!("; {}'s log ends before it", self.who.word(&stopped)),
            }
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
        let who = self.who.word(&rs);
        let them = self.who.word(&refr);
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
                format!("{} {what}", self.who.word(&rs))
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
            self.who.word(&ref_ranks),
        );
        let mut f = Finding::new(kind, Some(name), msg);
        f.brief = format!(
            "contract mismatch: {odd_desc} where {} {ref_what} at {at_what}",
            self.who.word(&ref_ranks)
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
    /// With evidence of a hang, the stopped ranks are where it hung; without
    /// it, the logs simply end with them behind (ordinary skew).
    fn told_stopped(&self, stopped: &[u32], issued: &[u32], group: &(Sig, Vec<usize>)) -> Finding {
        let (k, name, c) = (self.k, self.name, self.c);
        let (sig, ms) = group;
        let opc = match self.op_count(ms[0], 0) {
            Some(v) => format!(", opCount {v:x}"),
            None => String::new(),
        };
        let call = format!("{} #{k} ({}{opc})", sig.op.name(), describe(sig));
        let (kind, mut msg, brief) = match self.hung {
            Some(evidence) => {
                let msg = format!(
                    "{} never issued {call} on {name} where {} wait ({evidence})",
                    self.who.word(stopped),
                    self.who.word(issued)
                );
                (FindingKind::Stopped, msg.clone(), format!("hang: {msg}"))
            }
            None => {
                let ahead = self.window[ms[0]].len();
                let calls = if ahead > align::LOOKAHEAD {
                    format!("{}+ calls", align::LOOKAHEAD)
                } else if ahead == 1 {
                    "one call".to_string()
                } else {
                    format!("{ahead} calls")
                };
                let msg = format!(
                    "the logs end with {} {calls} behind {} on {name} (ordinary skew if the job was running; if it hung here, {} never issued {call})",
                    self.who.word(stopped),
                    self.who.word(issued),
                    self.who.word(stopped),
                );
                (FindingKind::LogsEndApart, msg.clone(), msg)
            }
        };
        let lasts: Vec<String> = stopped
            .iter()
            .map(|r| {
                let m = self.ranks.iter().position(|x| x == r).unwrap_or(0);
                let s = self.streams[m];
                let one = self.who.word(&[*r]);
                match s.calls.len() {
                    0 => format!("{one} logged no call"),
                    l => format!(
                        "{one}'s last call: {} {} at {}",
                        c.sigs[s.calls[l - 1].sig as usize].op.name(),
                        describe(&c.sigs[s.calls[l - 1].sig as usize]),
                        loc_str(c, s.loc(l - 1))
                    ),
                }
            })
            .collect();
        msg += &format!(" ({})", lasts.join("; "));
        let mut f = Finding::new(kind, Some(name), msg);
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
