//! Wait-for cycles. Those the store finds among its exchanges, of any
//! length (a ring of Sends made outside a group: each rank's Send waits
//! for the next rank's Recv, which that rank makes only after its own
//! Send), come back as [`Missing::Cycle`] and are put in words here
//! ([`waits_in_cycle`]). Those it cannot see, a wait on the lane for a
//! rank that waits in a pair, are found from notes: a rank's note (where it is, kept on the lane for ranks that wait on it)
//! carries, after its words, the Send/Recv pairs its latest launch waits
//! in. A rank waiting for a peer whose note says the peer waits in a pair
//! for a side this rank has not made yet knows that neither can go on: the
//! peer cannot leave its launch without that side, and this rank makes it
//! only after the launch it waits in. The wait then ends at once, naming
//! the cycle, instead of at the deadline.

use super::keys::{Named, named};
use super::pairs::PairCounts;
use crate::core::{Error, ErrorKind};
use crate::transport::store::{Missing, Wait};

/// The most a note may hold (a lane keeps 256 bytes of it).
const NOTE_MAX: usize = 256;
/// The most of a note's words kept, leaving room for a few pairs.
const TEXT_MAX: usize = 160;
/// Bytes of one pair: source, destination (u32 each), number (u64).
const PAIR: usize = 16;

/// A note: `text` (where the rank is, for people), then the pairs its
/// launch waits in, `(src, dst, seq)` each, as many as fit.
pub fn note(text: &str, pairs: &[(usize, usize, u64)]) -> Vec<u8> {
    let mut cut = text.len().min(TEXT_MAX);
    while !text.is_char_boundary(cut) {
        cut -= 1;
    }
    let mut out = text.as_bytes()[..cut].to_vec();
    if pairs.is_empty() {
        return out;
    }
    let room = (NOTE_MAX - out.len() - 2) / PAIR;
    let pairs = &pairs[..pairs.len().min(room).min(u8::MAX as usize)];
    out.push(0);
    out.push(pairs.len() as u8);
    for (src, dst, seq) in pairs {
        out.extend_from_slice(&(*src as u32).to_le_bytes());
        out.extend_from_slice(&(*dst as u32).to_le_bytes());
        out.extend_from_slice(&seq.to_le_bytes());
    }
    out
}

/// A note's words: what comes before its pairs.
pub fn text(note: &[u8]) -> String {
    let end = note.iter().position(|b| *b == 0).unwrap_or(note.len());
    String::from_utf8_lossy(&note[..end]).into_owned()
}

/// The pairs a note says its rank waits in; none when it holds none, or
/// when what follows its words is not pairs.
pub fn pairs(note: &[u8]) -> Vec<(usize, usize, u64)> {
    let Some(end) = note.iter().position(|b| *b == 0) else {
        return Vec::new();
    };
    let rest = &note[end + 1..];
    let Some((&count, rest)) = rest.split_first() else {
        return Vec::new();
    };
    if rest.len() != count as usize * PAIR {
        return Vec::new();
    }
    rest.chunks_exact(PAIR)
        .map(|c| {
            let w = |a: usize, b: usize| c[a..b].iter().rev().fold(0u64, |v, x| v << 8 | *x as u64);
            (w(0, 4) as usize, w(4, 8) as usize, w(8, 16))
        })
        .collect()
}

/// The cycle, when rank `me` (in the launch `mine`, with `counts` of the
/// Sends and Recvs it has made) waits for rank `them`, whose note is
/// `theirs`, and `them` waits in a pair for a side of `me` not made yet.
pub fn cycle(
    me: usize,
    counts: &PairCounts,
    mine: &str,
    them: usize,
    theirs: &[u8],
) -> Option<Error> {
    let (side, seq) = pairs(theirs).into_iter().find_map(|(src, dst, seq)| {
        if (src, dst) == (me, them) && seq >= counts.sent(them) {
            Some((format!("Send #{seq} to rank {them}"), seq))
        } else if (src, dst) == (them, me) && seq >= counts.received(them) {
            Some((format!("Recv #{seq} from rank {them}"), seq))
        } else {
            None
        }
    })?;
    let _ = seq;
    Some(Error::new(
        ErrorKind::Deadlock,
        format!(
            "deadlock: rank {me} waits in {mine} for rank {them}, which waits in {} for rank {me}'s {side}, which rank {me} has not made: neither can go on",
            text(theirs)
        ),
    ))
}

/// The error of a wait-for cycle the store found, each step in words,
/// the waiting rank's first: `deadlock: rank 0 waits in Send (opCount 0)
/// for rank 1's Recv #0 from rank 0; rank 1 waits in …: each waits for
/// the next, so none of them can go on`.
pub fn waits_in_cycle(steps: &[Wait]) -> Error {
    let words: Vec<String> = steps.iter().map(step).collect();
    Error::new(
        ErrorKind::Deadlock,
        format!(
            "deadlock: {}: each waits for the next, so none of them can go on",
            words.join("; ")
        ),
    )
}

/// The cycle's error when `m` is one.
pub fn of_missing(m: &Missing) -> Option<Error> {
    match m {
        Missing::Cycle(steps) => Some(waits_in_cycle(steps)),
        _ => None,
    }
}

fn step(w: &Wait) -> String {
    let at = w
        .note
        .as_deref()
        .map(|n| format!(" in {}", text(n)))
        .unwrap_or_default();
    match named(&w.key) {
        Named::Pair(src, dst, seq) if w.party == 0 => {
            format!("rank {src} waits{at} for rank {dst}'s Recv #{seq} from rank {src}")
        }
        Named::Pair(src, dst, seq) => {
            format!("rank {dst} waits{at} for rank {src}'s Send #{seq} to rank {dst}")
        }
        Named::Collectives => format!("rank {} waits{at} for rank {}", w.party, w.awaits),
        Named::Verdict(lo, hi) => {
            let (me, them) = if w.party == 0 { (lo, hi) } else { (hi, lo) };
            format!("rank {me} waits{at} for rank {them}'s verdict on their Sends and Recvs")
        }
        Named::Other => format!(
            "party {} of {} waits{at} for party {}",
            w.party, w.key, w.awaits
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Call, DataType, Func, Launch, RedOp};

    fn p2p(calls: &[(Func, usize)]) -> Launch {
        Launch {
            op_count: 0,
            colls: vec![],
            p2p: calls
                .iter()
                .map(|(func, peer)| Call {
                    func: *func,
                    sendbuff: 0x10,
                    recvbuff: 0x20,
                    count: 4,
                    datatype: DataType::Int32,
                    op: RedOp::Sum,
                    op_code: 0,
                    root: *peer,
                })
                .collect(),
        }
    }

    #[test]
    fn a_cycle_the_store_found_is_put_in_words_step_by_step() {
        let w = |key: &str, party, awaits, words: Option<&str>| Wait {
            key: key.into(),
            party,
            awaits,
            note: words.map(|n| note(n, &[(0, 1, 0)])),
        };
        let e = waits_in_cycle(&[
            w("c9/p0>1/0", 0, 1, Some("Send (opCount 0)")),
            w("c9/p2>1/3", 1, 0, Some("Recv (opCount 4)")),
            w("c9/x7", 2, 0, None),
            w("c9/v0.1>2.a", 1, 0, Some("AllReduce (opCount 1)")),
            w("c9/other", 1, 0, None),
        ]);
        assert_eq!(e.kind, ErrorKind::Deadlock);
        assert_eq!(
            e.message,
            "deadlock: rank 0 waits in Send (opCount 0) for rank 1's Recv #0 from rank 0; \
             rank 1 waits in Recv (opCount 4) for rank 2's Send #3 to rank 1; \
             rank 2 waits for rank 0; \
             rank 2 waits in AllReduce (opCount 1) for rank 0's verdict on their Sends and Recvs; \
             party 1 of c9/other waits for party 0: each waits for the next, so none of them can go on"
        );
        assert!(of_missing(&Missing::Timeout).is_none());
    }

    #[test]
    fn notes_keep_their_words_and_pairs() {
        let n = note("Recv (opCount 2)", &[(0, 1, 3), (1, 2, 0)]);
        assert_eq!(text(&n), "Recv (opCount 2)");
        assert_eq!(pairs(&n), vec![(0, 1, 3), (1, 2, 0)]);
        assert_eq!(note("AllReduce (opCount 1)", &[]), b"AllReduce (opCount 1)");
        assert!(pairs(b"AllReduce (opCount 1)").is_empty());
        // many pairs: as many as fit, and the note stays within a lane's
        let many: Vec<_> = (0..100).map(|i| (0, 1, i)).collect();
        let n = note(&"x".repeat(300), &many);
        assert!(n.len() <= NOTE_MAX, "{}", n.len());
        assert_eq!(text(&n).len(), TEXT_MAX);
        assert_eq!(pairs(&n), many[..pairs(&n).len()].to_vec());
        assert!(!pairs(&n).is_empty());
        // garbled tails are no pairs
        assert!(pairs(b"a\0\x02\x01").is_empty());
    }

    #[test]
    fn a_peer_waiting_for_a_side_not_made_is_a_cycle_and_one_made_is_not() {
        let mut counts = PairCounts::new(3);
        // rank 0 has made one Send to rank 1 (#0), and no Recv from it
        counts.number(0, &p2p(&[(Func::Send, 1)])).unwrap();
        let waits = |pair| note("Recv (opCount 2)", &[pair]);
        // rank 1 waits for rank 0's Send #1: not made
        let e = cycle(0, &counts, "AllReduce (opCount 5)", 1, &waits((0, 1, 1))).unwrap();
        assert_eq!(e.kind, ErrorKind::Deadlock);
        assert_eq!(
            e.message,
            "deadlock: rank 0 waits in AllReduce (opCount 5) for rank 1, which waits in Recv (opCount 2) for rank 0's Send #1 to rank 1, which rank 0 has not made: neither can go on"
        );
        // Send #0 was made: rank 1 will get past it
        assert!(cycle(0, &counts, "x", 1, &waits((0, 1, 0))).is_none());
        // rank 1 sends to rank 0 (#0), which rank 0 has not received
        let e = cycle(0, &counts, "x", 1, &waits((1, 0, 0))).unwrap();
        assert!(e.message.contains("rank 0's Recv #0 from rank 1"), "{e}");
        // a pair of other ranks, or no pairs at all: no cycle through rank 0
        assert!(cycle(0, &counts, "x", 1, &waits((1, 2, 0))).is_none());
        assert!(cycle(0, &counts, "x", 1, b"AllGather (opCount 3)").is_none());
    }
}
