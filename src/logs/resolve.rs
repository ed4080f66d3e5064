//! Streams → communicators: which streams (one process's view of one comm
//! pointer) belong together, and each one's rank.
//!
//! Streams are grouped by `commId` from the init lines; for an
//! `ncclCommSplit` child that prints no commId (NCCL 2.28), by its parent's
//! communicator, split count and color; with no init lines at all, by the
//! order in which each process (and device) first used a communicator of
//! that size. A stream's rank comes from its init line; failing that from a
//! launcher prefix (marked inferred). Without either the ranks are unknown:
//! members are numbered in host order and reports name them by process.
//! The `[dev]` number is the CUDA device, never a rank. The nranks used is the
//! one most streams state; disagreements, duplicate ranks and ranks out of
//! range are notes on the communicator.

use super::findings::{Finding, FindingKind, LIST_LIMIT, hex, loc_str, plural_calls};
use super::model::{Collected, Loc, Stream};
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// How a communicator's members were found to belong together.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum IdentifiedBy {
    CommId,
    Split,
    Order,
}

/// One communicator and the streams (ranks) in it.
#[derive(Clone, Debug)]
pub struct CommGroup {
    pub name: String,
    pub comm_id: Option<u64>,
    pub identified_by: IdentifiedBy,
    pub nranks: u32,
    /// `(rank, stream index, rank inferred)`, sorted by rank, one per rank.
    pub members: Vec<(u32, usize, bool)>,
    /// Whether the ranks are known (from init lines or a launcher's prefix);
    /// otherwise members are numbered in host order and named by process.
    pub ranks_known: bool,
    pub notes: Vec<Finding>,
    /// `(file, host, pid)` of streams left out because they repeat a member
    /// (the same run logged twice): that file's WARN lines of that process
    /// are repeats too.
    pub repeated: Vec<(u32, u32, u32)>,
}

/// The largest nranks accepted from a log line, and so the largest rank
/// index + 1: a statement above it is reported as implausible and not used.
/// 2^24 is over a hundred times the largest jobs run so far; it keeps a
/// 100-byte line from claiming four billion ranks.
pub const MAX_NRANKS: u32 = 1 << 24;

/// Why a stream is not a member of its communicator.
#[derive(Clone, Copy, Debug)]
enum LeftOut {
    /// Its init line states a rank another stream (this index) holds.
    RankHeldBy(usize),
    /// Its init line states a rank at or above the communicator's nranks.
    OutOfRange,
    /// It states no rank and no rank was left to give it.
    NoRankFree,
}

/// "comm 0x… on host:pid".
fn stream_name(c: &Collected, s: &Stream) -> String {
    format!(
        "comm {} on {}:{}",
        hex(s.comm),
        c.hosts[s.host as usize],
        s.pid
    )
}

/// Every nranks a group's streams state: `(value, stream, where, by an init line)`.
fn nranks_claims(c: &Collected, streams: &[usize]) -> Vec<(u32, usize, Loc, bool)> {
    let mut out = Vec::new();
    for &i in streams {
        let s = &c.streams[i];
        if let Some(n) = s.nranks_init {
            out.push((n, i, s.nranks_init_at, true));
        }
        if let Some(n) = s.nranks_coll {
            out.push((n, i, s.nranks_coll_at, false));
        }
        if let Some((n, at, init)) = s.nranks_other {
            out.push((n, i, at, init));
        }
    }
    out
}

fn plausible_nranks(n: u32) -> bool {
    (1..=MAX_NRANKS).contains(&n)
}

/// The lowest nranks that holds every rank the streams' init lines state
/// (ranks beyond [`MAX_NRANKS`] do not count).
fn ranks_needed(c: &Collected, streams: &[usize]) -> u32 {
    streams
        .iter()
        .filter_map(|&i| c.streams[i].rank)
        .filter(|&r| r < MAX_NRANKS)
        .map(|r| r + 1)
        .max()
        .unwrap_or(0)
}

/// A communicator's nranks: of the plausible values its lines state, the
/// one most streams state, preferring values that hold every stated rank
/// (ties: the smaller); with none, the number of streams. Never more than
/// [`MAX_NRANKS`] or the streams found, whichever is larger.
fn choose_nranks(c: &Collected, streams: &[usize]) -> u32 {
    // value → (streams stating it, the last of them); a stream's claims
    // come together, so it is counted once per value
    let mut votes: BTreeMap<u32, (usize, usize)> = BTreeMap::new();
    for (n, i, _, _) in nranks_claims(c, streams) {
        if plausible_nranks(n) {
            let v = votes.entry(n).or_insert((0, usize::MAX));
            if v.1 != i {
                *v = (v.0 + 1, i);
            }
        }
    }
    let needed = ranks_needed(c, streams);
    let best = |min: u32| {
        votes
            .iter()
            .filter(|(n, _)| **n >= min)
            .max_by_key(|(n, v)| (v.0, std::cmp::Reverse(**n)))
            .map(|(n, _)| *n)
    };
    best(needed)
        .or_else(|| best(0))
        .unwrap_or_else(|| u32::try_from(streams.len()).unwrap_or(u32::MAX))
}

/// A warning when a group's lines state different nranks, or an impossible
/// one: which line states what, and the value used.
fn nranks_note(c: &Collected, streams: &[usize], nranks: u32, name: &str) -> Option<Finding> {
    let claims = nranks_claims(c, streams);
    let mut by_value: BTreeMap<u32, Vec<(usize, Loc, bool)>> = BTreeMap::new();
    for (n, i, at, init) in claims {
        by_value.entry(n).or_default().push((i, at, init));
    }
    let all_plausible = by_value.keys().all(|&n| plausible_nranks(n));
    if by_value.len() <= 1 && all_plausible {
        return None;
    }
    const SHOWN: usize = 3;
    let describe = |(n, v): (&u32, &Vec<(usize, Loc, bool)>)| {
        let flag = match *n {
            0 => " (no communicator has 0 ranks)".to_string(),
            n if n > MAX_NRANKS => format!(" (more than the {MAX_NRANKS} accepted)"),
            _ => String::new(),
        };
        let mut who: Vec<String> = v
            .iter()
            .take(SHOWN)
            .map(|&(i, at, init)| {
                let s = &c.streams[i];
                let whose = match s.rank {
                    Some(r) if r < MAX_NRANKS => format!("rank {r}"),
                    _ => stream_name(c, s),
                };
                let line = if init { "init line" } else { "COLL lines" };
                format!("{whose}'s {line} ({})", loc_str(c, at))
            })
            .collect();
        if v.len() > SHOWN {
            who.push(format!("{} more", v.len() - SHOWN));
        }
        format!("nranks {n}{flag} in {}", who.join(", "))
    };
    let mut stated: Vec<String> = by_value.iter().take(LIST_LIMIT).map(describe).collect();
    if by_value.len() > LIST_LIMIT {
        stated.push(format!("{} more values", by_value.len() - LIST_LIMIT));
    }
    let why = if by_value.contains_key(&nranks) {
        let needed = ranks_needed(c, streams);
        if by_value.len() > 1 && needed > 1 && nranks >= needed {
            format!(
                ", stated most often among the values that hold ranks 0..={}",
                needed - 1
            )
        } else {
            String::new()
        }
    } else {
        ", the number of streams found".to_string()
    };
    let head = if by_value.len() > 1 {
        format!("the lines of {name} disagree on nranks")
    } else {
        format!("the nranks of {name} is implausible")
    };
    Some(Finding::new(
        FindingKind::NranksConflict,
        Some(name),
        format!("{head}: {}; using {nranks}{why}", stated.join("; ")),
    ))
}

/// How streams are told apart before they are grouped.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    Id(u64),
    Split(Box<Key>, u32, i64),
    Order(u32, u32, u32, u32, u32),
}

/// `(host, pid, comm)` → the streams (epochs) of that pointer.
type ByPtr = HashMap<(u32, u32, u64), Vec<usize>>;

/// Group streams into communicators and give each stream its rank.
pub fn resolve(c: &Collected) -> Vec<CommGroup> {
    let mut out: Vec<(Loc, CommGroup)> = split_lookalikes(c, group_streams(c))
        .into_iter()
        .map(|(key, streams)| (first_seen(c, &streams), build_group(c, &key, &streams)))
        .collect();
    out.sort_by_key(|(l, _)| *l);
    let mut groups: Vec<CommGroup> = out.into_iter().map(|(_, g)| g).collect();
    unique_names(&mut groups);
    groups
}

fn first_seen(c: &Collected, streams: &[usize]) -> Loc {
    streams
        .iter()
        .map(|&i| c.streams[i].first)
        .min()
        .unwrap_or_default()
}

/// Step 1: streams keyed by what ties them together (commId, split parent
/// and color, or the order of first use), in order of first appearance.
fn group_streams(c: &Collected) -> BTreeMap<Key, Vec<usize>> {
    let mut by_ptr: ByPtr = HashMap::new();
    for (i, s) in c.streams.iter().enumerate() {
        by_ptr.entry((s.host, s.pid, s.comm)).or_default().push(i);
    }
    let mut order: Vec<usize> = (0..c.streams.len()).collect();
    order.sort_by_key(|&i| c.streams[i].first);
    // Ordinal of each id-less, parent-less stream among its process's
    // streams of the same device and size.
    let mut ordinals: HashMap<usize, u32> = HashMap::new();
    let mut next_ord: HashMap<(u32, u32, Option<u32>, Option<u32>), u32> = HashMap::new();
    for &i in &order {
        let s = &c.streams[i];
        if s.comm_id.is_none() && s.parent.is_none() {
            // lines without NCCL's header name no process: each comm
            // pointer stands for one
            let process = match c.hosts[s.host as usize].is_empty() {
                true => (s.comm ^ (s.comm >> 32)) as u32,
                false => s.pid,
            };
            let n = next_ord
                .entry((s.host, process, s.dev, s.nranks()))
                .or_insert(0);
            ordinals.insert(i, *n);
            *n += 1;
        }
    }
    let mut groups: BTreeMap<Key, Vec<usize>> = BTreeMap::new();
    for &i in &order {
        let k = key_of(c, i, &by_ptr, &ordinals, 0);
        groups.entry(k).or_default().push(i);
    }
    groups
}

fn key_of(
    c: &Collected,
    i: usize,
    by_ptr: &ByPtr,
    ordinals: &HashMap<usize, u32>,
    depth: u32,
) -> Key {
    let s = &c.streams[i];
    if let Some(id) = s.comm_id {
        return Key::Id(id);
    }
    if let (Some(parent), true) = (s.parent, depth < 16) {
        // The parent epoch alive when the child appeared.
        let cands = by_ptr.get(&(s.host, s.pid, parent));
        let p = cands.and_then(|v| {
            v.iter()
                .copied()
                .filter(|&p| c.streams[p].first <= s.first)
                .max_by_key(|&p| c.streams[p].first)
                .or_else(|| v.first().copied())
        });
        if let Some(p) = p {
            return Key::Split(
                Box::new(key_of(c, p, by_ptr, ordinals, depth + 1)),
                s.split_count.unwrap_or(0),
                s.color.unwrap_or(0),
            );
        }
    }
    let ord = ordinals.get(&i).copied().unwrap_or(0);
    let n = s.nranks().unwrap_or(0);
    if s.comm_id.is_none() && s.parent.is_some() {
        // A split child whose parent never appeared: on its own.
        return Key::Order(n, u32::MAX, s.host, s.pid, s.comm as u32);
    }
    Key::Order(n, ord, 0, 0, 0)
}

/// Step 2: without init lines, several communicators of one size used
/// first at the same point (pairs, say) look alike: more streams than
/// ranks. Cut them into communicators of nranks streams, in host order.
fn split_lookalikes(c: &Collected, groups: BTreeMap<Key, Vec<usize>>) -> Vec<(Key, Vec<usize>)> {
    let mut pending = Vec::new();
    for (key, streams) in groups {
        let nranks = choose_nranks(c, &streams);
        if matches!(key, Key::Order(..)) && nranks > 0 && streams.len() > nranks as usize {
            let mut sorted = streams;
            // one device index per communicator is the common layout (a
            // process driving several GPUs, one communicator per device)
            sorted.sort_by_key(|&i| {
                let s = &c.streams[i];
                (s.host, s.prefix_rank, s.dev, s.pid, s.comm)
            });
            for chunk in sorted.chunks(nranks as usize) {
                let mut chunk = chunk.to_vec();
                chunk.sort_by_key(|&i| c.streams[i].first);
                pending.push((key.clone(), chunk));
            }
        } else {
            pending.push((key, streams));
        }
    }
    pending
}

/// Ranks held so far: rank → (stream, rank inferred).
type Taken = BTreeMap<u32, (usize, bool)>;

/// Step 3: each stream's rank. Init lines first; then a launcher's prefix
/// if it gives every unplaced stream a free, distinct rank; then order,
/// and the ranks are then unknown. The `[dev]` number is the CUDA device,
/// never taken for a rank.
fn assign_ranks(
    c: &Collected,
    streams: &[usize],
    nranks: u32,
) -> (Taken, Vec<(usize, LeftOut)>, bool) {
    let mut taken: Taken = BTreeMap::new();
    let mut unknown = Vec::new();
    let mut left_out: Vec<(usize, LeftOut)> = Vec::new();
    for &i in streams {
        match c.streams[i].rank {
            Some(r) if r < nranks => match taken.get(&r) {
                None => {
                    taken.insert(r, (i, false));
                }
                // Keep the stream with more calls (the first, if equal).
                Some(&(j, _)) if c.streams[i].calls.len() > c.streams[j].calls.len() => {
                    taken.insert(r, (i, false));
                    left_out.push((j, LeftOut::RankHeldBy(i)));
                }
                Some(&(j, _)) => left_out.push((i, LeftOut::RankHeldBy(j))),
            },
            Some(_) => left_out.push((i, LeftOut::OutOfRange)),
            None => unknown.push(i),
        }
    }
    if unknown.is_empty() {
        return (taken, left_out, true);
    }
    let mut seen = std::collections::HashSet::new();
    let by_prefix: Vec<_> = unknown.iter().map(|&i| c.streams[i].prefix_rank).collect();
    let prefix_ok = by_prefix
        .iter()
        .all(|r| matches!(r, Some(r) if *r < nranks && !taken.contains_key(r) && seen.insert(*r)));
    if prefix_ok {
        for (&i, r) in unknown.iter().zip(by_prefix) {
            taken.insert(r.unwrap_or(0), (i, true));
        }
        return (taken, left_out, true);
    }
    let mut rest = unknown;
    rest.sort_by_key(|&i| {
        let s = &c.streams[i];
        (s.host, s.prefix_rank, s.pid, s.dev, s.comm)
    });
    let mut r = 0;
    for i in rest {
        while taken.contains_key(&r) {
            r += 1;
        }
        if r >= nranks {
            left_out.push((i, LeftOut::NoRankFree));
        } else {
            taken.insert(r, (i, true));
        }
    }
    (taken, left_out, false)
}

/// Step 4: the communicator's name and how it was identified.
fn group_name(key: &Key, lead: &Stream) -> (String, Option<u64>, IdentifiedBy) {
    match key {
        Key::Id(id) => (
            format!("commId {}", hex(*id)),
            Some(*id),
            IdentifiedBy::CommId,
        ),
        Key::Split(..) => {
            let mut k = key;
            while let Key::Split(p, ..) = k {
                k = p;
            }
            let parent_id = match k {
                Key::Id(id) => format!(", split from commId {}", hex(*id)),
                _ => String::new(),
            };
            (
                format!(
                    "comm {} (color {}{parent_id})",
                    hex(lead.comm),
                    lead.color.unwrap_or(0)
                ),
                None,
                IdentifiedBy::Split,
            )
        }
        Key::Order(..) => (
            format!("comm {}", hex(lead.comm)),
            None,
            IdentifiedBy::Order,
        ),
    }
}

fn build_group(c: &Collected, key: &Key, streams: &[usize]) -> CommGroup {
    let nranks = choose_nranks(c, streams);
    let (taken, left_out, ranks_known) = assign_ranks(c, streams, nranks);
    let members: Vec<(u32, usize, bool)> =
        taken.into_iter().map(|(r, (i, inf))| (r, i, inf)).collect();
    let lead = &c.streams[members.first().map_or(streams[0], |m| m.1)];
    let (name, comm_id, identified_by) = group_name(key, lead);
    let mut notes = Vec::new();
    if let Some(f) = nranks_note(c, streams, nranks, &name) {
        notes.push(f);
    }
    let repeated = left_out_notes(c, &left_out, nranks, &name, &mut notes);
    CommGroup {
        name,
        comm_id,
        identified_by,
        nranks,
        members,
        ranks_known,
        notes,
        repeated,
    }
}

/// Step 5: a note for each stream left out; returns the `(file, host,
/// pid)` of those left out because they repeat a member.
fn left_out_notes(
    c: &Collected,
    left_out: &[(usize, LeftOut)],
    nranks: u32,
    name: &str,
    notes: &mut Vec<Finding>,
) -> Vec<(u32, u32, u32)> {
    let mut repeated = Vec::new();
    let mut listed = 0usize;
    for &(i, why) in left_out {
        let s = &c.streams[i];
        if let LeftOut::RankHeldBy(j) = why {
            let k = &c.streams[j];
            if (k.host, k.pid, k.comm) == (s.host, s.pid, s.comm) {
                // The same process and pointer twice: one run logged in two files.
                for &(file, _) in &s.file_runs {
                    repeated.push((file, s.host, s.pid));
                }
                let file = |x: &Stream| {
                    c.files
                        .get(x.first.file as usize)
                        .map_or("?", |f| f.path.as_str())
                };
                notes.push(Finding::new(
                    FindingKind::RepeatedLog,
                    Some(name),
                    format!(
                        "{} repeats the {} calls of {}:{} comm {} already read from {}; skipped, with that process's WARN lines there",
                        file(s),
                        s.calls.len(),
                        c.hosts[s.host as usize],
                        s.pid,
                        hex(s.comm),
                        file(k)
                    ),
                ));
                continue;
            }
        }
        listed += 1;
        if listed > LIST_LIMIT {
            continue;
        }
        let this = stream_name(c, s);
        let (kind, message) = match why {
            LeftOut::RankHeldBy(j) => {
                let k = &c.streams[j];
                (
                    FindingKind::DuplicateRank,
                    format!(
                        "{this} states rank {} of {name} ({}), and so does {} ({}); {this} has {} and is left out",
                        s.rank.unwrap_or_default(),
                        loc_str(c, s.rank_at),
                        stream_name(c, k),
                        loc_str(c, k.rank_at),
                        plural_calls(s.calls.len()),
                    ),
                )
            }
            LeftOut::OutOfRange => (
                FindingKind::RankOutOfRange,
                format!(
                    "{this} states rank {} ({}), outside 0..={} of {name} (nranks {nranks}); it is left out",
                    s.rank.unwrap_or_default(),
                    loc_str(c, s.rank_at),
                    nranks.saturating_sub(1),
                ),
            ),
            LeftOut::NoRankFree => (
                FindingKind::DuplicateRank,
                format!(
                    "{this} states no rank, and all {nranks} ranks of {name} are already held; it is left out"
                ),
            ),
        };
        let mut f = Finding::new(kind, Some(name), message);
        f.ranks = s.rank.into_iter().collect();
        f.location = Some(loc_str(c, s.first));
        notes.push(f);
    }
    if listed > LIST_LIMIT {
        notes.push(Finding::new(
            FindingKind::DuplicateRank,
            Some(name),
            format!(
                "{} more streams of {name} have no rank of their own there; they are left out",
                listed - LIST_LIMIT
            ),
        ));
    }
    repeated
}

/// Step 6: names must be unique (two pointer-named communicators may share
/// a pointer value).
fn unique_names(groups: &mut [CommGroup]) {
    let mut seen: HashMap<String, u32> = HashMap::new();
    for g in groups {
        let n = seen.entry(g.name.clone()).or_insert(0);
        *n += 1;
        if *n > 1 {
            let new = format!("{} #{}", g.name, n);
            for f in &mut g.notes {
                f.comm = Some(new.clone());
            }
            g.name = new;
        }
    }
}

#[cfg(test)]
mod tests {
    use crate::logs::analyze;
    use crate::logs::findings::FindingKind;
    use crate::logs::ingest::collect_bytes;
    use crate::logs::testlog::{call_stating, findings_of, init_stating};
    use std::fmt::Write;

    #[test]
    fn without_init_lines_or_prefixes_ranks_are_unknown() {
        // rankwise-style trace: one process, the rank in [..], no init
        // lines; the number in [..] is a device for NCCL, never a rank
        let mut t = String::new();
        for k in 0..3u64 {
            for r in 0..3u32 {
                if r == 2 && k == 2 {
                    continue;
                }
                writeln!(t, "host:77:{} [{r}] NCCL INFO AllReduce: opCount {k:x} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x{:x} [nranks=3] stream (nil)", 80 + r, 0x900 + 16 * r).unwrap();
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.communicators.len(), 1, "{:#?}", a.communicators);
        let f = &a.findings[0];
        assert_eq!(
            (f.kind, f.position, f.ranks.clone()),
            (FindingKind::LogsEndApart, Some(2), vec![2])
        );
        let members = &a.communicators[0].members;
        assert!(members.iter().all(|m| m.rank_inferred && !m.rank_known));
        assert_eq!(
            members.iter().map(|m| m.dev).collect::<Vec<_>>(),
            [Some(0), Some(1), Some(2)]
        );
        assert!(
            f.message
                .starts_with("the logs end with process host:77 (dev 2) one call behind processes host:77 (dev 0), host:77 (dev 1)"),
            "{}",
            f.message
        );
    }

    #[test]
    fn a_huge_nranks_claim_is_named_and_sizes_nothing() {
        // Both ranks' init lines and rank 0's COLL lines say 4294967295,
        // only rank 1's COLL lines say 2: the one plausible value wins.
        let mut t = String::new();
        init_stating(&mut t, 0, 0, u64::from(u32::MAX), 0xabc);
        init_stating(&mut t, 1, 1, u64::from(u32::MAX), 0xabc);
        for k in 0..3 {
            call_stating(&mut t, 0, u64::from(u32::MAX), k);
            call_stating(&mut t, 1, 2, k);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!((cm.nranks, cm.ranks_seen.clone()), (2, vec![0, 1]));
        assert!(cm.ranks_missing.is_empty());
        let notes = findings_of(&a, FindingKind::NranksConflict);
        assert_eq!(notes.len(), 1, "{:#?}", a.findings);
        for part in [
            "nranks 2 in rank 1's COLL lines (x:4); ",
            "nranks 4294967295 (more than the 16777216 accepted) in rank 0's init line (x:1), rank 0's COLL lines (x:3), rank 1's init line (x:2); ",
            "using 2",
        ] {
            assert!(notes[0].message.contains(part), "{}", notes[0].message);
        }
        assert_eq!(a.problems, 0);
    }

    #[test]
    fn init_lines_stating_nranks_0_and_1_for_4_ranks_are_named() {
        let mut t = String::new();
        for (r, n) in [(0u32, 4u64), (1, 0), (2, 1), (3, 4)] {
            init_stating(&mut t, r, u64::from(r), n, 0xabc);
        }
        for k in 0..3 {
            for r in 0..4 {
                call_stating(&mut t, r, 4, k);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!((cm.nranks, cm.ranks_seen.clone()), (4, vec![0, 1, 2, 3]));
        assert!(
            findings_of(&a, FindingKind::DuplicateRank).is_empty(),
            "{:#?}",
            a.findings
        );
        let notes = findings_of(&a, FindingKind::NranksConflict);
        assert_eq!(notes.len(), 1, "{:#?}", a.findings);
        let m = &notes[0].message;
        for part in [
            "the lines of commId 0xabc disagree on nranks: ",
            "nranks 0 (no communicator has 0 ranks) in rank 1's init line (x:2); ",
            "nranks 1 in rank 2's init line (x:3); ",
            "nranks 4 in rank 0's init line (x:1), rank 0's COLL lines (x:5), rank 1's COLL lines (x:6), 3 more; ",
            "using 4",
        ] {
            assert!(m.contains(part), "{part:?} not in {m}");
        }

        // every init line says 1, every COLL line says 4: 4 holds ranks 0-3
        let mut t = String::new();
        for r in 0..4 {
            init_stating(&mut t, r, u64::from(r), 1, 0xabc);
        }
        for r in 0..4 {
            call_stating(&mut t, r, 4, 0);
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        assert_eq!(a.communicators[0].ranks_seen, [0, 1, 2, 3]);
        let m = &findings_of(&a, FindingKind::NranksConflict)[0].message;
        assert!(
            m.contains("nranks 1 in rank 0's init line (x:1), rank 1's init line (x:2), rank 2's init line (x:3), 1 more; nranks 4 in "),
            "{m}"
        );
        assert!(
            m.ends_with("using 4, stated most often among the values that hold ranks 0..=3"),
            "{m}"
        );
    }

    #[test]
    fn a_rank_outside_nranks_and_a_rank_stated_twice_are_named() {
        let mut t = String::new();
        // ranks 0, 1, 7 of 4, and 1 again (with fewer calls)
        for (r, rank) in [(0u32, 0u64), (1, 1), (2, 7), (3, 1)] {
            init_stating(&mut t, r, rank, 4, 0xabc);
        }
        for k in 0..2 {
            for r in 0..4 {
                if r == 3 && k == 1 {
                    continue;
                }
                call_stating(&mut t, r, 4, k);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let cm = &a.communicators[0];
        assert_eq!(cm.ranks_seen, [0, 1]);
        assert_eq!(cm.ranks_missing, [[2, 3]]);
        let out = findings_of(&a, FindingKind::RankOutOfRange);
        assert_eq!(out.len(), 1, "{:#?}", a.findings);
        assert_eq!(
            out[0].message,
            "comm 0x102 on h:12 states rank 7 (x:3), outside 0..=3 of commId 0xabc (nranks 4); it is left out"
        );
        let dup = findings_of(&a, FindingKind::DuplicateRank);
        assert_eq!(dup.len(), 1, "{:#?}", a.findings);
        assert_eq!(
            dup[0].message,
            "comm 0x103 on h:13 states rank 1 of commId 0xabc (x:4), and so does comm 0x101 on h:11 (x:2); comm 0x103 on h:13 has 1 call and is left out"
        );
    }
}
