//! Where ranks' call streams part, and how: the first divergence of
//! several per-rank streams, classified as a call **skipped**, an **extra**
//! call, calls made in a **different order**, an argument **mismatch**, or
//! a rank that **stopped**.
//!
//! Pure: streams of comparable units in (any `T: PartialEq`, one stream per
//! rank, in call order), a classification out. It knows nothing of log
//! lines, so the same story can be told wherever per-rank call streams are
//! at hand (the analyzer's collectives here; a live agreement check could
//! pass its ranks' signatures).
//!
//! The streams agree up to `position`. There the ranks are grouped by the
//! unit they have next; the largest group is the reference (on a tie, each
//! tied group is tried and the one that explains the others best is kept,
//! and the result says it was a tie: with two ranks, "rank 1 skipped a call"
//! and "rank 0 made an extra call" are the same story). Each other rank is
//! compared with the reference's stream from `position` on:
//!
//! - its stream ends there: **stopped** (a prefix of the reference);
//! - its stream equals the reference's with the next `d` calls removed:
//!   **skipped** `d` calls;
//! - the reference's equals its stream with its next `d` calls removed:
//!   `d` **extra** calls;
//! - its next `k` calls are the reference's next `k` in another order:
//!   **reordered**;
//! - otherwise: a **mismatch** (a different call in the same place).
//!
//! Each explanation is judged by how many calls it lines up, counted up to
//! [`WINDOW`] calls past the edit and stopping at the next disagreement;
//! the explanation lining up the most wins, ties going to the smaller edit
//! and then to the order above (mismatch first). An explanation other than
//! a mismatch must line up at least one call. The cost is bounded: at most
//! [`LOOKAHEAD`] units past the divergence are looked at per stream, so a
//! caller holding long streams needs only pass that much of each.

use serde::Serialize;

/// Longest run of skipped or extra calls recognised.
pub const MAX_SHIFT: usize = 32;
/// Longest run of calls recognised as made in a different order.
pub const MAX_BLOCK: usize = 8;
/// Calls compared past an edit to judge it.
pub const WINDOW: usize = 256;
/// Units past the divergence that the classification may look at.
pub const LOOKAHEAD: usize = MAX_SHIFT + WINDOW;

/// How one rank's stream departs from the reference at the divergence.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Departure {
    /// Its stream ends where the reference's goes on.
    Stopped,
    /// It left out the reference's next `calls` calls; after them the
    /// streams line up again.
    Skipped { calls: usize },
    /// It made `calls` calls the reference does not have; after them the
    /// streams line up again.
    Extra { calls: usize },
    /// It made the reference's next `calls` calls in another order.
    Reordered { calls: usize },
    /// It made a different call in the reference's call's place.
    Mismatch,
}

impl Departure {
    /// The calls the explanation edits (skipped, extra or reordered).
    pub fn calls(self) -> usize {
        match self {
            Departure::Stopped => 0,
            Departure::Mismatch => 1,
            Departure::Skipped { calls }
            | Departure::Extra { calls }
            | Departure::Reordered { calls } => calls,
        }
    }

    /// Where, past the divergence, this stream and the reference line up
    /// again: `(this stream's offset, the reference's offset)`.
    pub fn resumes(self) -> (usize, usize) {
        match self {
            Departure::Stopped => (0, 0),
            Departure::Mismatch => (1, 1),
            Departure::Skipped { calls } => (0, calls),
            Departure::Extra { calls } => (calls, 0),
            Departure::Reordered { calls } => (calls, calls),
        }
    }
}

/// One departing stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub struct Departing {
    /// Index of the stream.
    pub stream: usize,
    pub departure: Departure,
    /// Calls that line up after the edit (at most [`WINDOW`]).
    pub agree_after: usize,
}

/// The first divergence of several streams.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct FirstDivergence {
    /// Every stream agrees on the calls before this index.
    pub position: usize,
    /// The streams whose next call is the reference call, ascending.
    pub reference: Vec<usize>,
    /// The reference stream compared with (of `reference`, the one that
    /// goes on longest).
    pub compared_with: usize,
    /// Every other stream, ascending, and how it departs.
    pub departing: Vec<Departing>,
    /// No group of ranks outnumbers the others at the divergence: the
    /// reference is a choice (with two ranks, a skipped call on one is an
    /// extra call on the other).
    pub tied: bool,
}

/// The first divergence of `streams`, classified; `None` when they agree
/// call for call (same calls, same length) or there are fewer than two.
pub fn first_divergence<T: PartialEq>(streams: &[&[T]]) -> Option<FirstDivergence> {
    if streams.len() < 2 {
        return None;
    }
    let min_len = streams.iter().map(|s| s.len()).min().unwrap_or(0);
    let max_len = streams.iter().map(|s| s.len()).max().unwrap_or(0);
    let first = streams[0];
    let mut p = 0;
    while p < min_len && streams.iter().all(|s| s[p] == first[p]) {
        p += 1;
    }
    if p == max_len {
        return None;
    }
    let rests: Vec<&[T]> = streams.iter().map(|s| &s[p.min(s.len())..]).collect();
    // groups of streams by their next unit (ended streams are in none)
    let mut groups: Vec<Vec<usize>> = Vec::new();
    for (i, r) in rests.iter().enumerate() {
        let Some(u) = r.first() else { continue };
        match groups.iter_mut().find(|g| rests[g[0]][0] == *u) {
            Some(g) => g.push(i),
            None => groups.push(vec![i]),
        }
    }
    let largest = groups.iter().map(Vec::len).max().unwrap_or(0);
    let tied_groups: Vec<&Vec<usize>> = groups.iter().filter(|g| g.len() == largest).collect();
    let tied = tied_groups.len() > 1;
    // Each tied group as the reference (two at most: beyond that the
    // first two, by lowest rank, are as good a guess as any).
    // (calls lined up, skips, lowest rank first) → the divergence told so
    type Rank = (usize, usize, std::cmp::Reverse<usize>);
    let mut best: Option<(Rank, FirstDivergence)> = None;
    for reference in tied_groups.into_iter().take(2) {
        let compared_with = *reference
            .iter()
            .max_by_key(|&&i| (rests[i].len(), std::cmp::Reverse(i)))
            .unwrap_or(&reference[0]);
        let departing: Vec<Departing> = (0..streams.len())
            .filter(|i| !reference.contains(i))
            .map(|i| {
                let (departure, agree_after) = classify(rests[i], rests[compared_with]);
                Departing {
                    stream: i,
                    departure,
                    agree_after,
                }
            })
            .collect();
        // the reference that lines up the most; then the one under which
        // the others skipped (the commoner fault); then the lowest rank
        let lined_up: usize = departing.iter().map(|d| d.agree_after).sum();
        let skips = departing
            .iter()
            .filter(|d| matches!(d.departure, Departure::Skipped { .. }))
            .count();
        let key = (lined_up, skips, std::cmp::Reverse(reference[0]));
        if best.as_ref().is_none_or(|(k, _)| key > *k) {
            best = Some((
                key,
                FirstDivergence {
                    position: p,
                    reference: reference.clone(),
                    compared_with,
                    departing,
                    tied,
                },
            ));
        }
    }
    best.map(|(_, d)| d)
}

/// How many units of `a` and `b` agree from the start, up to [`WINDOW`].
fn agree<T: PartialEq>(a: &[T], b: &[T]) -> usize {
    a.iter()
        .zip(b)
        .take(WINDOW)
        .take_while(|(x, y)| x == y)
        .count()
}

/// `a` and `b` hold the same units, counted with multiplicity.
fn same_multiset<T: PartialEq>(a: &[T], b: &[T]) -> bool {
    let mut used = [false; MAX_BLOCK];
    a.len() == b.len()
        && a.len() <= MAX_BLOCK
        && a.iter()
            .all(|x| match (0..b.len()).find(|&j| !used[j] && b[j] == *x) {
                Some(j) => {
                    used[j] = true;
                    true
                }
                None => false,
            })
}

/// How `rest` departs from `reference` (both from the divergence on, their
/// first units differing or `rest` empty), and how many calls line up after.
fn classify<T: PartialEq>(rest: &[T], reference: &[T]) -> (Departure, usize) {
    if rest.is_empty() {
        return (Departure::Stopped, 0);
    }
    let tail = |s: &[T], from: usize| -> usize { s.len().min(from) };
    // (calls lined up, edit size, order of preference) → departure, agree_after
    let mismatch = agree(&rest[1..], &reference[tail(reference, 1)..]);
    let mut best = (
        (mismatch, std::cmp::Reverse(1), std::cmp::Reverse(0)),
        (Departure::Mismatch, mismatch),
    );
    let mut consider = |lined: usize, edit: usize, order: usize, d: Departure, after: usize| {
        let key = (lined, std::cmp::Reverse(edit), std::cmp::Reverse(order));
        if lined > 0 && key > best.0 {
            best = (key, (d, after));
        }
    };
    for d in 1..=MAX_SHIFT.min(reference.len().saturating_sub(1)) {
        let a = agree(rest, &reference[d..]);
        consider(a, d, 1, Departure::Skipped { calls: d }, a);
    }
    for d in 1..=MAX_SHIFT.min(rest.len().saturating_sub(1)) {
        let a = agree(&rest[d..], reference);
        consider(a, d, 2, Departure::Extra { calls: d }, a);
    }
    for k in 2..=MAX_BLOCK.min(rest.len()).min(reference.len()) {
        if same_multiset(&rest[..k], &reference[..k]) {
            let a = agree(&rest[k..], &reference[k..]);
            consider(k + a, k, 3, Departure::Reordered { calls: k }, a);
        }
    }
    best.1
}

#[cfg(test)]
mod tests {
    use super::*;

    fn div(streams: &[&str]) -> Option<FirstDivergence> {
        let v: Vec<Vec<char>> = streams.iter().map(|s| s.chars().collect()).collect();
        let s: Vec<&[char]> = v.iter().map(Vec::as_slice).collect();
        first_divergence(&s)
    }

    /// (position, reference, [(stream, departure)], tied)
    fn summary(d: &FirstDivergence) -> (usize, Vec<usize>, Vec<(usize, Departure)>, bool) {
        (
            d.position,
            d.reference.clone(),
            d.departing
                .iter()
                .map(|x| (x.stream, x.departure))
                .collect(),
            d.tied,
        )
    }

    #[test]
    fn agreeing_streams_have_no_divergence() {
        assert_eq!(div(&["abc", "abc", "abc"]), None);
        assert_eq!(div(&["abc"]), None);
        assert_eq!(div(&["", ""]), None);
    }

    #[test]
    fn each_class_on_four_ranks() {
        use Departure::*;
        let cases: [(&[&str; 4], usize, Departure); 6] = [
            // rank 2 skips c and goes on
            (
                &["abcdefg", "abcdefg", "abdefg", "abcdefg"],
                2,
                Skipped { calls: 1 },
            ),
            // rank 2 skips c, d, e
            (
                &["abcdefgh", "abcdefgh", "abfgh", "abcdefgh"],
                2,
                Skipped { calls: 3 },
            ),
            // rank 1 makes an extra x
            (
                &["abcdef", "abxcdef", "abcdef", "abcdef"],
                1,
                Extra { calls: 1 },
            ),
            // rank 3 makes d before c
            (
                &["abcdefg", "abcdefg", "abcdefg", "abdcefg"],
                3,
                Reordered { calls: 2 },
            ),
            // rank 0 makes x in c's place
            (&["abxdefg", "abcdefg", "abcdefg", "abcdefg"], 0, Mismatch),
            // rank 2 stops after b
            (&["abcdefg", "abcdefg", "ab", "abcdefg"], 2, Stopped),
        ];
        for (streams, culprit, class) in cases {
            let d = div(streams).unwrap();
            let others: Vec<usize> = (0..4).filter(|&r| r != culprit).collect();
            assert_eq!(
                summary(&d),
                (2, others, vec![(culprit, class)], false),
                "{streams:?}"
            );
        }
    }

    #[test]
    fn a_moved_call_is_a_different_order() {
        // rank 1 makes c after e: c, d, e reordered
        let d = div(&["abcdefgh", "abdecfgh", "abcdefgh"]).unwrap();
        assert_eq!(
            summary(&d),
            (
                2,
                vec![0, 2],
                vec![(1, Departure::Reordered { calls: 3 })],
                false
            )
        );
        assert_eq!(d.departing[0].agree_after, 3);
    }

    #[test]
    fn two_ranks_are_a_tie_told_as_a_skip() {
        // rank 1 lacks c: skipped on 1, or extra on 0; the skip is told
        let d = div(&["abcdef", "abdef"]).unwrap();
        assert_eq!(
            summary(&d),
            (2, vec![0], vec![(1, Departure::Skipped { calls: 1 })], true)
        );
        // the same with the ranks swapped
        let d = div(&["abdef", "abcdef"]).unwrap();
        assert_eq!(
            summary(&d),
            (2, vec![1], vec![(0, Departure::Skipped { calls: 1 })], true)
        );
    }

    #[test]
    fn the_reference_is_the_majority_even_when_it_has_the_extra_call() {
        // ranks 0-2 have x that rank 3 lacks: rank 3 skipped it
        let d = div(&["abxcd", "abxcd", "abxcd", "abcd"]).unwrap();
        assert_eq!(
            summary(&d),
            (
                2,
                vec![0, 1, 2],
                vec![(3, Departure::Skipped { calls: 1 })],
                false
            )
        );
        // ranks 0-2 lack x that rank 3 has: rank 3 made an extra call
        let d = div(&["abcd", "abcd", "abcd", "abxcd"]).unwrap();
        assert_eq!(summary(&d).2, vec![(3, Departure::Extra { calls: 1 })]);
    }

    #[test]
    fn without_evidence_after_the_divergence_it_is_a_mismatch() {
        // nothing follows on the reference: no skip can be shown
        let d = div(&["abc", "abx", "abc"]).unwrap();
        assert_eq!(summary(&d).2, vec![(1, Departure::Mismatch)]);
        // a skip needs the next calls to line up
        let d = div(&["abcdef", "abxyz", "abcdef"]).unwrap();
        assert_eq!(summary(&d).2, vec![(1, Departure::Mismatch)]);
    }

    #[test]
    fn a_skipping_rank_cut_short_is_still_a_skip() {
        // rank 1 skipped c and logged one more call
        let d = div(&["abcdefg", "abd", "abcdefg"]).unwrap();
        assert_eq!(
            (d.departing[0].departure, d.departing[0].agree_after),
            (Departure::Skipped { calls: 1 }, 1)
        );
    }

    #[test]
    fn a_skip_longer_than_the_bound_is_not_recognised() {
        let long: String = (0..MAX_SHIFT as u32 + 5)
            .map(|i| char::from_u32(0x100 + i).unwrap())
            .collect();
        let full = format!("ab{long}yz");
        let skipped = "abyz".to_string();
        let d = div(&[&full, &full, &skipped]).unwrap();
        assert_eq!(summary(&d).2, vec![(2, Departure::Mismatch)]);
        // within the bound it is
        let short: String = long.chars().take(MAX_SHIFT).collect();
        let full = format!("ab{short}yz");
        let d = div(&[&full, &full, &skipped]).unwrap();
        assert_eq!(
            summary(&d).2,
            vec![(2, Departure::Skipped { calls: MAX_SHIFT })]
        );
    }

    #[test]
    fn several_departing_ranks_each_get_their_class() {
        let d = div(&["abcdef", "abcdef", "abdef", "ab", "abxcdef"]).unwrap();
        assert_eq!(
            summary(&d),
            (
                2,
                vec![0, 1],
                vec![
                    (2, Departure::Skipped { calls: 1 }),
                    (3, Departure::Stopped),
                    (4, Departure::Extra { calls: 1 })
                ],
                false
            )
        );
    }

    #[test]
    fn resumes_says_where_the_streams_line_up_again() {
        assert_eq!(Departure::Skipped { calls: 3 }.resumes(), (0, 3));
        assert_eq!(Departure::Extra { calls: 2 }.resumes(), (2, 0));
        assert_eq!(Departure::Reordered { calls: 2 }.resumes(), (2, 2));
        assert_eq!(Departure::Mismatch.resumes(), (1, 1));
    }
}
