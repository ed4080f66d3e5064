//! Where the ranks' logs begin to be compared: a log that starts later on
//! one rank than on another is a fragment, not a skip.
//!
//! A stream whose init line precedes its first call starts at the
//! communicator's first call. When some stream does not (a paste, a log
//! rotated or cut), the starts are lined up by evidence:
//!
//! - where every collective carries an opCount and they advance, the
//!   opCounts decide: NCCL counts launches, so a rank whose first logged
//!   call has a higher opCount than another's did not skip the calls in
//!   between; its log begins later. Comparison starts at the highest first
//!   opCount, provided the calls agree there (Send/Recv launches count too,
//!   and ranks that made different numbers of them number the same
//!   collective differently: then the calls decide, as below);
//! - without them (NCCL 2.27+ logs `opCount 0` on one node), the calls
//!   themselves: each stream is shifted against the longest by up to
//!   [`MAX_SHIFT`] calls, and the shift that lines up the most calls wins.
//!   Where no shift lines up enough calls, the order is not compared, and
//!   that is said.

use super::collectives::is_coll;
use super::findings::{Finding, FindingKind, Who};
use super::model::{Collected, Stream};

/// Largest start offset looked for without opCounts.
pub const MAX_SHIFT: usize = 64;
/// Calls that must line up to accept a shift found by content.
const MIN_RUN: usize = 4;
/// Calls compared to judge a shift.
const RUN: usize = 64;

/// Where each member's collectives begin to be compared.
pub(crate) struct Starts {
    /// Per member: how many of its first collectives are left out.
    pub skip: Vec<usize>,
    /// The ordinal, in the longest log's numbering, of the first collective
    /// compared (`#k` counts from the earliest call any log holds).
    pub base: u64,
    /// What was done, when the logs start apart.
    pub note: Option<Finding>,
    /// The starts could not be lined up: the order is not compared.
    pub unaligned: bool,
}

/// A stream's log holds the communicator from its first call: its init
/// line comes before its first call, or its first call has opCount 0 and
/// later ones advance (NCCL counts launches from 0).
pub(crate) fn starts_complete(s: &Stream) -> bool {
    let init_first = s.init_complete
        && s.calls
            .first()
            .is_none_or(|c0| s.rank_at.line <= u64::from(c0.line) || s.rank.is_none());
    let counted_from_zero = s.calls.first().is_some_and(|c0| c0.op_count == 0)
        && s.calls
            .iter()
            .any(|c| c.op_count != 0 && c.op_count != u64::MAX);
    init_first || counted_from_zero
}

/// [`starts_complete`], and without an init line the first call must be a
/// collective: a Send/Recv group shares one opCount, so a log cut inside
/// launch 0 would still begin at 0.
pub(crate) fn starts_complete_in(c: &Collected, s: &Stream) -> bool {
    starts_complete(s)
        && (s.init_complete
            || s.calls
                .first()
                .is_some_and(|r| is_coll(&c.sigs[r.sig as usize])))
}

fn op_counts(c: &Collected, s: &Stream) -> Vec<u64> {
    s.calls
        .iter()
        .filter(|r| is_coll(&c.sigs[r.sig as usize]))
        .map(|r| r.op_count)
        .collect()
}

/// Where the comparison of `streams` starts.
pub(crate) fn starts(
    c: &Collected,
    name: &str,
    streams: &[&Stream],
    ranks: &[u32],
    who: &Who,
) -> Starts {
    let n = streams.len();
    let none = Starts {
        skip: vec![0; n],
        base: 0,
        note: None,
        unaligned: false,
    };
    if n < 2 || streams.iter().all(|s| starts_complete_in(c, s)) {
        return none;
    }
    // a log without a collective has nothing to line up (its end is told
    // as such); the others are lined up among themselves
    let all: Vec<Vec<u64>> = streams.iter().map(|s| op_counts(c, s)).collect();
    let with: Vec<usize> = (0..n).filter(|&m| !all[m].is_empty()).collect();
    if with.len() < 2 {
        return none;
    }
    let counts: Vec<Vec<u64>> = with.iter().map(|&m| all[m].clone()).collect();
    let streams_w: Vec<&Stream> = with.iter().map(|&m| streams[m]).collect();
    let ranks_w: Vec<u32> = with.iter().map(|&m| ranks[m]).collect();
    let evidence = counts
        .iter()
        .all(|v| v.iter().all(|&o| o != u64::MAX) && v.windows(2).all(|w| w[0] <= w[1]))
        && counts.iter().any(|v| v.first() != v.last());
    // opCounts count every launch, Send/Recv ones too: ranks that launched
    // different numbers of them number the same collective differently. The
    // calls must agree where the opCounts line them up.
    let by_count = evidence
        .then(|| by_op_count(name, &ranks_w, who, &counts))
        .filter(|s| s.skip.iter().all(|&k| k == 0) || lines_up(c, &streams_w, &s.skip));
    let mut s = by_count.unwrap_or_else(|| by_content(c, name, &streams_w, &ranks_w, who));
    let mut skip = vec![0; n];
    for (i, &m) in with.iter().enumerate() {
        skip[m] = s.skip[i];
    }
    s.skip = skip;
    s
}

/// Whether the streams' collectives agree for [`MIN_RUN`] calls (or as far
/// as the shortest goes) from the given starts.
fn lines_up(c: &Collected, streams: &[&Stream], skip: &[usize]) -> bool {
    let sigs: Vec<Vec<u32>> = streams
        .iter()
        .zip(skip)
        .map(|(s, &k)| {
            s.calls
                .iter()
                .filter(|r| is_coll(&c.sigs[r.sig as usize]))
                .skip(k)
                .take(MIN_RUN)
                .map(|r| r.sig)
                .collect()
        })
        .collect();
    // every log must hold calls there, as many as can be asked of the
    // shortest, and they must agree
    let n = sigs.iter().map(Vec::len).min().unwrap_or(0);
    n > 0 && (0..n).all(|i| sigs.iter().all(|v| v[i] == sigs[0][i]))
}

fn by_op_count(name: &str, ranks: &[u32], who: &Who, counts: &[Vec<u64>]) -> Starts {
    let lo = counts.iter().map(|v| v[0]).max().unwrap_or(0);
    let skip: Vec<usize> = counts
        .iter()
        .map(|v| v.partition_point(|&o| o < lo))
        .collect();
    let base = skip.iter().copied().max().unwrap_or(0) as u64;
    let note = skip.iter().any(|&s| s > 0).then(|| {
        let later: Vec<u32> = (0..ranks.len())
            .filter(|&m| counts[m][0] == lo)
            .map(|m| ranks[m])
            .collect();
        let earliest = counts.iter().map(|v| v[0]).min().unwrap_or(0);
        let mut f = Finding::new(
            FindingKind::Truncated,
            Some(name),
            format!(
                "the logs of {name} start at different calls: {}'s first call has opCount {lo:x}, the earliest log's {earliest:x}; NCCL counts launches, so the calls before are missing from those logs, not skipped; compared from opCount {lo:x} on",
                who.word(&later)
            ),
        );
        f.ranks = later;
        f
    });
    Starts {
        skip,
        base,
        note,
        unaligned: false,
    }
}

fn by_content(c: &Collected, name: &str, streams: &[&Stream], ranks: &[u32], who: &Who) -> Starts {
    let keys: Vec<Vec<u32>> = streams
        .iter()
        .map(|s| {
            s.calls
                .iter()
                .filter(|r| is_coll(&c.sigs[r.sig as usize]))
                .map(|r| r.sig)
                .collect()
        })
        .collect();
    let reference = (0..keys.len()).max_by_key(|&m| keys[m].len()).unwrap_or(0);
    let run = |a: &[u32], b: &[u32]| {
        a.iter()
            .zip(b)
            .take(RUN)
            .take_while(|(x, y)| x == y)
            .count()
    };
    // offset of each stream against the reference: its call 0 is the
    // reference's call `off` (negative: the reference starts later)
    let mut offs = vec![0i64; keys.len()];
    let mut lost = Vec::new();
    for m in 0..keys.len() {
        if m == reference {
            continue;
        }
        let (r, s) = (&keys[reference], &keys[m]);
        // the longest run wins; on a tie, the smaller shift
        let at_zero = run(r, s);
        let mut best = (at_zero, 0i64);
        for d in 1..=MAX_SHIFT.min(r.len().max(s.len())) {
            for (got, off) in [
                (if d < r.len() { run(&r[d..], s) } else { 0 }, d as i64),
                (if d < s.len() { run(r, &s[d..]) } else { 0 }, -(d as i64)),
            ] {
                if got > best.0 {
                    best = (got, off);
                }
            }
        }
        // a shift must line up enough calls to count as evidence; else the
        // file's order stands, and with nothing lining up at all the
        // stream cannot be placed
        let needed = MIN_RUN.min(r.len()).min(s.len()).max(1);
        if best.1 != 0 && best.0 < needed {
            best = (at_zero, 0);
        }
        if best.0 == 0 {
            lost.push(ranks[m]);
        }
        offs[m] = best.1;
    }
    if !lost.is_empty() {
        let mut f = Finding::new(
            FindingKind::Unaligned,
            Some(name),
            format!(
                "the logs of {name} start at different points and carry no advancing opCount, and {}'s calls do not line up with the others' within {MAX_SHIFT} calls: the collective order is not compared",
                who.word(&lost)
            ),
        );
        f.ranks = lost;
        return Starts {
            skip: vec![0; keys.len()],
            base: 0,
            note: Some(f),
            unaligned: true,
        };
    }
    let p0 = offs.iter().copied().max().unwrap_or(0).max(0);
    let skip: Vec<usize> = offs.iter().map(|&o| (p0 - o) as usize).collect();
    let base = skip.iter().copied().max().unwrap_or(0) as u64;
    let note = skip.iter().any(|&s| s > 0).then(|| {
        Finding::new(
            FindingKind::Truncated,
            Some(name),
            format!(
                "the logs of {name} start at different calls (their opCounts do not advance, so the calls themselves were lined up): compared from the first call every log holds"
            ),
        )
    });
    Starts {
        skip,
        base,
        note,
        unaligned: false,
    }
}
