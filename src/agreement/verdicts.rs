//! The second round, for launches with Sends or Recvs: each rank tells
//! every peer it heard from what it found (nothing when its pairs
//! matched), and a rank whose own pairs matched reads its peers' findings.
//! So when two other ranks of an AlltoAllv disagree, this rank fails too
//! (`rank 2, a peer of this group, found: …`) instead of entering NCCL and
//! hanging there.

use super::launch::Pairing;
use super::missing::missing_error;
use super::round::{self, Parties, Posting, Round};
use super::{Failure, Link, Peers, keys};
use crate::core::{Error, ErrorKind, Launch};
use crate::transport::store::{Missing, Share};
use std::time::{Duration, Instant};

/// One communicator's verdicts to swap: its link, this rank, what it found
/// and the postings to its peers.
struct Swap<'a> {
    link: &'a Link,
    me: usize,
    pairing: &'a Pairing,
    postings: Vec<Posting>,
}

/// The postings of rank `me`'s verdict on launch `op_count` to each peer
/// it paired with.
fn postings(link: &Link, me: usize, op_count: u64, p: &Pairing) -> Vec<Posting> {
    let mine = match &p.verdict {
        Ok(()) => Vec::new(),
        Err(f) => f.error.message.clone().into_bytes(),
    };
    p.peers
        .iter()
        .map(|&(peer, their_op)| {
            let (lo, hi) = ((me, op_count), (peer, their_op));
            let (lo, hi) = if lo.0 < hi.0 { (lo, hi) } else { (hi, lo) };
            Posting {
                key: keys::verdict(&link.key, lo, hi),
                parties: Parties::Two([link.owner(lo.0), link.owner(hi.0)]),
                party: usize::from(me == hi.0),
                value: mine.clone(),
                lane_round: None,
                tier_round: None,
            }
        })
        .collect()
}

/// What a peer's verdict means here: Ok when it found nothing.
fn heard(peer: usize, their_op: u64, theirs: Share, timeout: Duration) -> Result<(), Failure> {
    match theirs {
        Ok(b) if b.is_empty() => Ok(()),
        Ok(b) => Err(Error::new(
            ErrorKind::Mismatch,
            format!(
                "rank {peer}, a peer of this group, found: {}",
                String::from_utf8_lossy(&b)
            ),
        )
        .into()),
        Err(m) => Err(missing_error(
            &[(peer, m)],
            &format!("the Send/Recv launch (opCount {their_op:x}) it pairs with"),
            timeout,
        )
        .into()),
    }
}

/// The verdict round on every communicator of a launch that paired Sends
/// and Recvs: this rank's own failure first, then what its peers found.
pub fn second_round(
    launches: &[(&mut Peers, &Launch)],
    pairings: &[Option<Pairing>],
    deadline: Instant,
    timeout: Duration,
) -> Result<(), Failure> {
    let mut swaps = Vec::new();
    for ((p, l), pairing) in launches.iter().zip(pairings) {
        let (Some(link), Some(pairing)) = (&p.link, pairing) else {
            continue;
        };
        if pairing.peers.is_empty() {
            continue;
        }
        swaps.push(Swap {
            link,
            me: p.me,
            pairing,
            postings: postings(link, p.me, l.op_count, pairing),
        });
    }
    let rounds: Vec<Round<'_>> = swaps
        .iter()
        .map(|s| Round {
            link: s.link,
            me: s.me,
            postings: &s.postings,
            reads: s.pairing.verdict.is_ok(),
            note: None,
            pairs: None,
        })
        .collect();
    let answers = round::exchange(&rounds, deadline)?;
    // this rank's own findings first (a rank that failed alone, without a
    // peer to tell, has no swap: its pairing says so)
    if let Some(p) = pairings.iter().flatten().find(|p| p.verdict.is_err()) {
        return p.verdict.clone();
    }
    for (s, shares) in swaps.iter().zip(answers) {
        for ((&(peer, their_op), posting), sh) in
            s.pairing.peers.iter().zip(&s.postings).zip(shares)
        {
            let theirs = sh
                .into_iter()
                .nth(1 - posting.party)
                .unwrap_or(Err(Missing::Timeout));
            heard(peer, their_op, theirs, timeout)?;
        }
    }
    Ok(())
}
