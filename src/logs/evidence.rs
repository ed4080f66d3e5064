//! A hang is a claim that needs evidence. This module finds it — the
//! user's `--hung`, a PyTorch watchdog timeout or NCCL error, an NCCL
//! timeout WARN, a communicator aborted, Flight Recorder entries stuck in
//! `started` — and reads PyTorch's watchdog lines for what they say on
//! their own: which collective each rank was in when the watchdog fired,
//! and how far each rank got.

use super::findings::{Finding, FindingKind, fmt_ranks, loc_str, ranks_word};
use super::model::{Collected, TorchEventRec, TorchRec};
use super::parse::{InitPhase, WarnKind};
use std::collections::BTreeMap;

/// What says the job hung, in words, with where it was seen; `None` when
/// nothing does.
pub(crate) fn hang_evidence(c: &Collected, hung_flag: bool) -> Option<String> {
    if hung_flag {
        return Some("the job hung, as --hung says".to_string());
    }
    // an NCCL error PyTorch reports is a hang only if it says it timed out
    if let Some(t) = c.torch.iter().find(|t| match &t.event {
        TorchEventRec::Timeout { .. } => true,
        TorchEventRec::Error { text } => text.contains("timed out") || text.contains("imeout"),
        TorchEventRec::Progress { .. } => false,
    }) {
        let what = match t.event {
            TorchEventRec::Timeout { .. } => "PyTorch's watchdog timed out",
            _ => "PyTorch reported an NCCL timeout",
        };
        return Some(format!("{what} at {}", loc_str(c, t.loc)));
    }
    if let Some(w) = c.warnings.iter().find(|w| w.kind == WarnKind::Timeout) {
        return Some(format!("NCCL logged a timeout at {}", loc_str(c, w.loc)));
    }
    if let Some((_, at)) = c
        .streams
        .iter()
        .filter_map(|s| s.ended)
        .find(|(p, _)| *p == InitPhase::Abort)
    {
        return Some(format!("a communicator was aborted at {}", loc_str(c, at)));
    }
    None
}

/// Per process group (as the lines name it): each rank's last watchdog
/// timeout and progress line.
#[derive(Default)]
struct PgView<'a> {
    timeouts: BTreeMap<u32, &'a TorchRec>,
    progress: BTreeMap<u32, &'a TorchRec>,
}

/// Findings from PyTorch's watchdog lines alone.
pub(crate) fn watchdog_findings(c: &Collected) -> Vec<Finding> {
    let mut pgs: BTreeMap<String, PgView<'_>> = BTreeMap::new();
    let mut errors = 0usize;
    let mut out = Vec::new();
    for t in &c.torch {
        let pg = t.pg.clone().unwrap_or_else(|| "default".to_string());
        // an error is worth saying whether or not the line names its rank
        if let TorchEventRec::Error { ref text } = t.event {
            errors += 1;
            if errors <= 3 {
                let who = t.rank.map_or(String::new(), |r| format!("rank {r}: "));
                let mut f = Finding::new(FindingKind::TorchError, None, format!("{who}{text}"));
                f.ranks = t.rank.into_iter().collect();
                f.location = Some(loc_str(c, t.loc));
                out.push(f);
            }
            continue;
        }
        let Some(rank) = t.rank else { continue };
        let v = pgs.entry(pg).or_default();
        match t.event {
            TorchEventRec::Timeout { .. } => {
                v.timeouts.insert(rank, t);
            }
            TorchEventRec::Progress { .. } => {
                v.progress.insert(rank, t);
            }
            TorchEventRec::Error { .. } => {}
        }
    }
    for (pg, v) in &pgs {
        timeouts(c, pg, v, &mut out);
        progress(c, pg, v, &mut out);
    }
    out
}

/// `SeqNum → (op, numel in, numel out) → ranks`, from the timeout lines.
fn timeouts(c: &Collected, pg: &str, v: &PgView<'_>, out: &mut Vec<Finding>) {
    type Work = (String, Option<u64>, Option<u64>);
    let mut by_seq: BTreeMap<u64, BTreeMap<Work, Vec<u32>>> = BTreeMap::new();
    for (&rank, t) in &v.timeouts {
        if let TorchEventRec::Timeout {
            seq,
            ref op,
            numel_in,
            numel_out,
            ..
        } = t.event
        {
            by_seq
                .entry(seq)
                .or_default()
                .entry((op.clone(), numel_in, numel_out))
                .or_default()
                .push(rank);
        }
    }
    for (seq, works) in &by_seq {
        let first = v.timeouts.values().next().map(|t| loc_str(c, t.loc));
        let describe = |(op, i, o): &Work| {
            let mut d = op.clone();
            if let (Some(i), Some(o)) = (i, o) {
                d += &format!(" (numel {i} in, {o} out)");
            }
            d
        };
        if works.len() > 1 {
            // the largest group is the reference (ties: the first)
            let mut groups: Vec<(&Work, &Vec<u32>)> = works.iter().collect();
            groups.sort_by_key(|(_, r)| std::cmp::Reverse(r.len()));
            let parts: Vec<String> = groups
                .iter()
                .map(|(w, ranks)| format!("{} in {}", ranks_word(ranks), describe(w)))
                .collect();
            let mut f = Finding::new(
                FindingKind::WatchdogMismatch,
                Some(pg),
                format!(
                    "PyTorch's watchdog fired at work {seq} of process group {pg} with the ranks in different collectives: {}; the ranks called different collectives at the same point",
                    parts.join(", ")
                ),
            );
            f.brief = format!("contract mismatch: {}", f.message);
            f.position = Some(*seq);
            f.ranks = sorted(
                &groups[1..]
                    .iter()
                    .flat_map(|(_, r)| r.iter().copied())
                    .collect::<Vec<_>>(),
            );
            f.other_ranks = groups[0].1.clone();
            f.location = first;
            out.push(f);
        } else if let Some((w, ranks)) = works.iter().next() {
            let mut f = Finding::new(
                FindingKind::WatchdogTimeout,
                Some(pg),
                format!(
                    "PyTorch's watchdog timed out on {} in {} at work {seq} of process group {pg}",
                    ranks_word(ranks),
                    describe(w)
                ),
            );
            f.position = Some(*seq);
            f.ranks = ranks.clone();
            f.location = first;
            out.push(f);
        }
    }
}

/// Ranks whose last enqueued work differs: the ones behind never issued
/// the work the others wait in.
fn progress(c: &Collected, pg: &str, v: &PgView<'_>, out: &mut Vec<Finding>) {
    let mut by_enqueued: BTreeMap<u64, Vec<u32>> = BTreeMap::new();
    for (&rank, t) in &v.progress {
        if let TorchEventRec::Progress { enqueued, .. } = t.event {
            by_enqueued.entry(enqueued).or_default().push(rank);
        }
    }
    if by_enqueued.len() < 2 {
        return;
    }
    let (&most, ahead) = by_enqueued.iter().next_back().expect("two entries");
    let behind: Vec<(u64, &Vec<u32>)> = by_enqueued
        .iter()
        .filter(|(e, _)| **e < most)
        .map(|(e, r)| (*e, r))
        .collect();
    let parts: Vec<String> = behind
        .iter()
        .map(|(e, r)| format!("{} at work {e}", ranks_word(r)))
        .collect();
    let behind_ranks: Vec<u32> = behind.iter().flat_map(|(_, r)| r.iter().copied()).collect();
    let first_missing = behind.iter().map(|(e, _)| e + 1).min().unwrap_or(most);
    let op = v.timeouts.values().find_map(|t| match &t.event {
        TorchEventRec::Timeout { seq, op, .. } if *seq == first_missing => Some(op.clone()),
        _ => None,
    });
    let what = op.map_or(String::new(), |o| format!(" ({o})"));
    let mut f = Finding::new(
        FindingKind::Stopped,
        Some(pg),
        format!(
            "in process group {pg}, {} enqueued work up to {most} while {}: {} never issued work {first_missing}{what}, which {} wait in",
            ranks_word(ahead),
            parts.join(", "),
            if behind_ranks.len() == 1 {
                format!("rank {}", behind_ranks[0])
            } else {
                format!("ranks {}", fmt_ranks(&sorted(&behind_ranks)))
            },
            ranks_word(ahead)
        ),
    );
    f.brief = format!("hang: {}", f.message);
    f.position = Some(first_missing);
    f.ranks = sorted(&behind_ranks);
    f.other_ranks = ahead.clone();
    f.location = v.progress.values().next().map(|t| loc_str(c, t.loc));
    out.push(f);
}

fn sorted(v: &[u32]) -> Vec<u32> {
    let mut v = v.to_vec();
    v.sort_unstable();
    v
}
