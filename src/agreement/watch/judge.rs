//! The rank that compares every rank's summary each round, and what it
//! asks for next: the digests at the latest cut all ranks made, then (when
//! they differ) the signatures since the last cut they agreed on, then
//! the first launch that differs and the one after it, worded. Sends and
//! Recvs are compared by their sums at each agreed cut; when the sums
//! differ both before and after it, or a launch of Sends and Recvs alone
//! has been unfinished for the threshold, every rank's per-peer counts
//! name the pair.

use super::flight::Mark;
use super::wire::{Ask, PeerCount, Summary, Verdict};
use super::{Sums, launch_sig};
use crate::core::{DataType, Posted, agree};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// What the last round asked for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stage {
    Idle,
    Digest(u64),
    Sigs(u64, u64),
    Post(u64),
    /// every rank's per-peer counts; `closing`: some rank has made its
    /// last call, so only pairs that can never match are named
    Peers {
        closing: bool,
    },
    /// the ranks at this cut have made no collective since for too long
    Stall(u64),
    /// some rank's launch at this mark has been unfinished for too long
    Hang(Mark),
}

/// The judging rank's state across rounds.
#[derive(Debug)]
pub struct Judge {
    round: u64,
    /// the last cut whose digests every rank agreed on
    agreed: u64,
    stage: Stage,
    failure: Option<(String, String)>,
    /// the failure is a hang
    hang: bool,
    /// how long the lowest cut may stay put while other ranks are past it
    stall: Duration,
    /// the lowest cut, and since when it is the lowest
    low_since: Option<(u64, Instant)>,
    /// the launch the last look for a hang was at, and when
    hang_look: Option<(Mark, Instant)>,
    /// the per-peer counts were read once some rank was closing
    closing_look: bool,
}

impl Default for Judge {
    fn default() -> Self {
        Judge {
            round: 0,
            agreed: 0,
            stage: Stage::Idle,
            failure: None,
            hang: false,
            stall: Duration::from_secs(300),
            low_since: None,
            hang_look: None,
            closing_look: false,
        }
    }
}

impl Judge {
    /// A judge that names ranks which made no collective for `stall`
    /// while others are past them (what strict mode's timeout names), and
    /// launches unfinished for as long ([`super::flight`]).
    pub fn with_stall(stall: Duration) -> Judge {
        Judge {
            stall,
            ..Judge::default()
        }
    }

    /// The last cut every rank agreed on.
    pub fn agreed(&self) -> u64 {
        self.agreed
    }

    /// Reads one round's summaries (every rank's, in rank order) and says
    /// what to ask for next, or the failure found.
    pub fn judge(&mut self, all: &[Summary]) -> Verdict {
        self.round += 1;
        if self.failure.is_none() && !all.is_empty() {
            self.read(all);
        }
        let ask = match (&self.failure, self.stage) {
            (Some(_), _) => Ask::default(),
            (None, Stage::Idle) => {
                let low = all.iter().map(|s| s.m).min().unwrap_or(0);
                let high = all.iter().map(|s| s.high).max().unwrap_or(0);
                let since = match self.low_since {
                    Some((l, t)) if l == low && low < high => t,
                    _ => Instant::now(),
                };
                self.low_since = (low < high).then_some((low, since));
                // a launch out for the threshold comes first (the program
                // may go on making calls, so the digests are never done),
                // looked at once per threshold while it stays the same
                let hang = super::flight::overdue(all, self.stall).filter(|&out| {
                    self.hang_look
                        .is_none_or(|(at, t)| at != out || t.elapsed() >= self.stall)
                });
                if let Some(out) = hang {
                    self.hang_look = Some((out, Instant::now()));
                    self.stage = Stage::Hang(out);
                    hang_ask(out)
                } else if self.ending_unmatched(all) {
                    // Sends and Recvs that no later cut will ever compare
                    self.closing_look = true;
                    self.stage = Stage::Peers { closing: true };
                    Ask {
                        peers: true,
                        ..Ask::default()
                    }
                } else if low > self.agreed {
                    self.stage = Stage::Digest(low);
                    Ask {
                        digest_at: Some(low),
                        ..Ask::default()
                    }
                } else if low < high && since.elapsed() >= self.stall {
                    self.stage = Stage::Stall(low);
                    Ask {
                        post: Some(low + 1),
                        ..Ask::default()
                    }
                } else {
                    Ask::default()
                }
            }
            (None, Stage::Digest(m)) => Ask {
                digest_at: Some(m),
                ..Ask::default()
            },
            (None, Stage::Sigs(from, to)) => Ask {
                sigs: Some((from, to)),
                ..Ask::default()
            },
            (None, Stage::Post(m)) => Ask {
                post: Some(m),
                ..Ask::default()
            },
            (None, Stage::Stall(low)) => Ask {
                post: Some(low + 1),
                ..Ask::default()
            },
            (None, Stage::Hang(out)) => hang_ask(out),
            (None, Stage::Peers { .. }) => Ask {
                peers: true,
                ..Ask::default()
            },
        };
        Verdict {
            round: self.round,
            ask,
            failure: self.failure.clone(),
            hang: self.hang,
        }
    }

    /// Some rank has made its last call and the Send and Recv sums over
    /// every rank differ now: pairs left unmatched at the end, which no
    /// later cut will compare (looked at once).
    fn ending_unmatched(&self, all: &[Summary]) -> bool {
        if self.closing_look || !all.iter().any(|s| s.closing) {
            return false;
        }
        let now = all.iter().fold(Sums::default(), |t, s| t + s.now);
        now.sent != now.recvd
    }

    /// Reads the answers to what the last round asked.
    fn read(&mut self, all: &[Summary]) {
        match self.stage {
            Stage::Idle => {}
            Stage::Digest(m) => {
                self.stage = Stage::Idle;
                let Some(at) = all
                    .iter()
                    .map(|s| s.at.filter(|a| a.m == m))
                    .collect::<Option<Vec<_>>>()
                else {
                    // a rank's ring no longer holds it: ask again later
                    return;
                };
                if at.windows(2).any(|w| w[0].digest != w[1].digest) {
                    self.stage = Stage::Sigs(self.agreed + 1, m);
                    return;
                }
                self.agreed = m;
                let total = |f: fn(&super::wire::At) -> Sums| {
                    at.iter().fold(Sums::default(), |t, a| t + f(a))
                };
                let (before, after) = (total(|a| a.before), total(|a| a.after));
                if before.sent != before.recvd && after.sent != after.recvd {
                    self.stage = Stage::Peers { closing: false };
                }
            }
            Stage::Sigs(from, to) => {
                self.stage = Stage::Idle;
                if all.iter().any(|s| s.sigs.is_empty() || s.sigs_from != from) {
                    self.failure = Some((
                        format!(
                            "the ranks' collective launches differ between cut {from} and cut {to}, further back than the {} each rank keeps",
                            super::RING
                        ),
                        String::new(),
                    ));
                    return;
                }
                let len = all.iter().map(|s| s.sigs.len()).min().unwrap_or(0);
                if let Some(i) = (0..len).find(|&i| all.iter().any(|s| s.sigs[i] != all[0].sigs[i]))
                {
                    self.stage = Stage::Post(from + i as u64);
                }
            }
            Stage::Post(m) => {
                self.stage = Stage::Idle;
                if all.iter().any(|s| s.posts.is_empty()) {
                    return;
                }
                self.failure = Some(explain(m, all));
            }
            Stage::Stall(low) => {
                self.stage = Stage::Idle;
                self.failure = stalled(low, all, self.stall);
            }
            Stage::Hang(at) => {
                self.stage = Stage::Idle;
                if super::flight::overdue(all, self.stall) != Some(at) {
                    return;
                }
                // the collective launch there (or, after Sends and Recvs,
                // the next one) as the first rank that made it made it
                let post = all.iter().find_map(|s| s.posts.first());
                if at.p2p {
                    // a Send or Recv without its match is the cause
                    if let Some((what, sides)) = unmatched(all, false) {
                        self.failure = Some((what + &moved_on(at.m, all, post), sides));
                        return;
                    }
                } else if post.is_none() {
                    return;
                }
                if let Some(what) = super::flight::hang(all, at, self.stall, post) {
                    self.failure = Some((what, String::new()));
                    self.hang = true;
                }
            }
            Stage::Peers { closing } => {
                self.stage = Stage::Idle;
                if let Some(found) = unmatched(all, closing) {
                    self.failure = Some(found);
                }
            }
        }
    }
}

/// What the judge asks to name a hang at `at`: each rank's flight, and
/// the collective launch there; after Sends and Recvs, the next collective
/// launch and every rank's per-peer counts.
fn hang_ask(at: Mark) -> Ask {
    Ask {
        post: Some(at.m + at.p2p as u64),
        flights: true,
        peers: at.p2p,
        ..Ask::default()
    }
}

/// `; ranks 1,2,3 have made collective launch 6 (AllReduce #5) since,
/// which rank 0 has not`: the ranks past cut `m` while the others, whose
/// Sends and Recvs after it do not finish, are still there (`next`: that
/// launch as a rank past `m` made it). Empty when no rank is past it.
fn moved_on(m: u64, all: &[Summary], next: Option<&Posted>) -> String {
    let (on, at): (Vec<usize>, Vec<usize>) = (0..all.len()).partition(|&r| all[r].m > m);
    let Some(next) = next.filter(|_| !on.is_empty() && !at.is_empty()) else {
        return String::new();
    };
    format!(
        "; {} {} made collective launch {} ({}) since, which {} {} not",
        who(&on),
        if on.len() == 1 { "has" } else { "have" },
        m + 1,
        named(next),
        who(&at),
        if at.len() == 1 { "has" } else { "have" },
    )
}

/// Ranks still at cut `low` (none made a collective since) while others
/// made the next one: the ranks that never came, and where the others
/// wait. None when every rank has gone past it meanwhile.
fn stalled(low: u64, all: &[Summary], stall: Duration) -> Option<(String, String)> {
    let (late, on): (Vec<usize>, Vec<usize>) = (0..all.len()).partition(|&r| all[r].m <= low);
    let waiting = on.first().and_then(|&r| all[r].posts.first())?;
    if late.is_empty() {
        return None;
    }
    let verb = if late.len() == 1 { "has" } else { "have" };
    Some((
        format!(
            "{} {verb} made no collective launch past {low} for {} s, while {} made launch {} ({}): NCCL waits for {} there",
            who(&late),
            seconds(stall),
            who(&on),
            low + 1,
            named(waiting),
            who(&late)
        ),
        String::new(),
    ))
}

/// `0.2`, `12`: seconds as a person reads them.
pub(super) fn seconds(d: Duration) -> String {
    match d.as_secs_f64() {
        s if s < 10.0 => format!("{s:.1}"),
        s => format!("{s:.0}"),
    }
}

/// `AllReduce #12` as rank `r` numbered it.
pub(super) fn named(p: &Posted) -> String {
    let what = p.calls.first().map_or("group", |c| c.func.name());
    match p.calls.len() {
        1 => format!("{what} #{}", p.op_count),
        n => format!(
            "a group of {n} collectives starting with {what} #{}",
            p.op_count
        ),
    }
}

pub(super) fn who(ranks: &[usize]) -> String {
    let list: Vec<String> = ranks.iter().map(usize::to_string).collect();
    match ranks.len() {
        1 => format!("rank {}", list[0]),
        _ => format!("ranks {}", list.join(",")),
    }
}

/// The most common signature among `sigs` with its ranks, when more than
/// half the ranks share it.
fn majority(sigs: &[Option<u64>]) -> Option<(u64, Vec<usize>)> {
    let mut by: BTreeMap<u64, Vec<usize>> = BTreeMap::new();
    for (r, s) in sigs.iter().enumerate() {
        if let Some(s) = s {
            by.entry(*s).or_default().push(r);
        }
    }
    by.into_iter()
        .max_by_key(|(_, rs)| (rs.len(), std::cmp::Reverse(rs[0])))
        .filter(|(_, rs)| rs.len() * 2 > sigs.len())
}

/// The first cut `m` at which the launches differ, worded: a skip, an
/// extra launch or two launches in another order when the cuts after it
/// show exactly one of them, else the field that differs as the strict
/// mode says it.
fn explain(m: u64, all: &[Summary]) -> (String, String) {
    let here: Vec<Posted> = all.iter().map(|s| s.posts[0].clone()).collect();
    let sides = agree::sides(&here);
    let sig = |p: &Posted| launch_sig(&p.calls);
    let head = format!("collective launch {m} on this communicator differs");
    let plain = || match agree::collectives(&here) {
        Err(e) => format!("{head}: {}", e.message),
        Ok(()) => format!("{head}: the calls differ"),
    };
    let Some((a, usual)) = majority(&here.iter().map(|p| Some(sig(p))).collect::<Vec<_>>()) else {
        return (plain(), sides);
    };
    // the others' launches from this cut on, and their signatures
    let theirs = &all[usual[0]].posts;
    let t: Vec<u64> = theirs.iter().map(sig).collect();
    let mut said = Vec::new();
    for (r, s) in all.iter().enumerate() {
        if sig(&s.posts[0]) == a {
            continue;
        }
        let c: Vec<u64> = s.posts.iter().map(sig).collect();
        // c[k + dc] == t[k + dt] wherever both are known (at least once)
        let aligned = |dc: usize, dt: usize| {
            let n = c.len().saturating_sub(dc).min(t.len().saturating_sub(dt));
            n > 0 && (0..n).all(|k| c[k + dc] == t[k + dt])
        };
        let swapped = c.len() >= 2 && t.len() >= 2 && c[0] == t[1] && c[1] == t[0] && {
            let n = c.len().min(t.len());
            (2..n).all(|k| c[k] == t[k])
        };
        let skipped = aligned(0, 1);
        let extra = aligned(1, 0);
        // two swapped launches also look like a skip or an extra launch
        // when only two cuts are known: the swap, which needs both, wins
        // a launch of the same function is a field that differs, whatever
        // the cuts after it
        let func = |p: &Posted| p.calls.first().map(|c| c.func);
        let line = match (swapped, skipped, extra) {
            _ if func(&s.posts[0]) == func(&theirs[0]) => return (plain(), sides),
            (true, _, _) => format!(
                "{} made {} and {} in the other order",
                who(&[r]),
                named(&theirs[0]),
                named(&theirs[1])
            ),
            (false, true, false) => format!(
                "{} skipped {} (its next collective is {}, which the others make after it)",
                who(&[r]),
                named(&theirs[0]),
                named(&theirs[1])
            ),
            (false, false, true) => format!(
                "{} made an extra {} before {}",
                who(&[r]),
                named(&s.posts[0]),
                named(&theirs[0])
            ),
            _ => return (plain(), sides),
        };
        said.push(line);
    }
    (format!("{head}: {}", said.join("; ")), sides)
}

fn datatype(code: u64) -> String {
    i32::try_from(code)
        .ok()
        .and_then(DataType::from_code)
        .map_or_else(|| format!("datatype {code}"), |t| t.to_string())
}

fn plural(n: u64, what: &str) -> String {
    match n {
        1 => format!("1 {what}"),
        _ => format!("{n} {what}s"),
    }
}

/// Pairs whose Sends and Recvs do not match, from every rank's per-peer
/// counts: the first few worded, with both sides' last calls. With
/// `closing`, only pairs that can never match: the same number each way
/// with other counts or datatypes, or fewer on a side that has made its
/// last call.
fn unmatched(all: &[Summary], closing: bool) -> Option<(String, String)> {
    let tables: Vec<&[PeerCount]> = all.iter().map(|s| &s.peers[..]).collect();
    let find = |r: usize, peer: usize| -> PeerCount {
        tables
            .get(r)
            .and_then(|t| t.iter().find(|p| p.peer == peer))
            .copied()
            .unwrap_or(PeerCount {
                peer,
                ..PeerCount::default()
            })
    };
    let mut said = Vec::new();
    let mut sides = Vec::new();
    for (a, table) in tables.iter().enumerate() {
        let mut peers: Vec<usize> = table.iter().map(|p| p.peer).collect();
        // a pair whose sender never counted its receiver still shows at
        // the receiver
        peers.extend(
            tables
                .iter()
                .enumerate()
                .filter(|(_, t)| t.iter().any(|p| p.peer == a && p.recvd > 0))
                .map(|(b, _)| b),
        );
        peers.sort_unstable();
        peers.dedup();
        for b in peers {
            let (s, r) = (find(a, b), find(b, a));
            if s.sent == r.recvd && s.sent_digest == r.recvd_digest {
                continue;
            }
            let settled = |x: usize| !closing || all[x].closing;
            let never = match s.sent.cmp(&r.recvd) {
                std::cmp::Ordering::Equal => true,
                std::cmp::Ordering::Less => settled(a),
                std::cmp::Ordering::Greater => settled(b),
            };
            if !never {
                continue;
            }
            let last = |n: u64, (count, dt): (u64, u64)| match n {
                0 => String::new(),
                _ => format!(" (the last: count {count} {})", datatype(dt)),
            };
            sides.push(format!(
                "rank {a}: {}{} to rank {b}; rank {b}: {}{} from rank {a}",
                plural(s.sent, "Send"),
                last(s.sent, s.last_sent),
                plural(r.recvd, "Recv"),
                last(r.recvd, r.last_recvd)
            ));
            said.push(if s.sent > r.recvd {
                format!(
                    "rank {a}'s Send #{} to rank {b} has no matching Recv: rank {b} made {} from rank {a}",
                    r.recvd + 1,
                    plural(r.recvd, "Recv")
                )
            } else if s.sent < r.recvd {
                format!(
                    "rank {b}'s Recv #{} from rank {a} has no matching Send: rank {a} made {} to rank {b}",
                    s.sent + 1,
                    plural(s.sent, "Send")
                )
            } else {
                format!(
                    "the Sends of rank {a} to rank {b} and the Recvs of rank {b} from rank {a} differ in count or datatype"
                )
            });
        }
    }
    if said.is_empty() {
        return None;
    }
    let more = said.len().saturating_sub(8);
    said.truncate(8);
    sides.truncate(8);
    let mut what = format!(
        "Send/Recv pairs do not match, so NCCL can never complete them in order: {}",
        said.join("; ")
    );
    if more > 0 {
        what += &format!("; and {more} more pairs");
    }
    Some((what, sides.join("; ")))
}
