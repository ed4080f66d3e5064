//! Watch mode's hierarchy: what a host's leader (its lowest rank) sends on
//! for its ranks (which ranks share a host is `agreement::tier`'s). The ranks of a host post
//! their summaries on a shared-memory lane of their own; the leader folds
//! them into one ([`fold`]) when the judge asks only for what folds
//! (the latest cut, the digest and sums there), and sends each rank's
//! otherwise; the judge reads one post per host.

use super::Sums;
use super::wire::{Ask, At, Summary};
use crate::core::{Error, ErrorKind, Result};

/// Whether the judge's `ask` needs each rank's own summary.
pub fn each_needed(ask: &Ask) -> bool {
    ask.sigs.is_some() || ask.post.is_some() || ask.peers || ask.flights
}

/// The summaries of a host's ranks as one, when the judge reads nothing
/// per rank from them this round: the lowest cut, and the digest at the
/// asked cut with the sums added up. None when they do not fold (their
/// digests differ there, or only some answered): each is sent then.
pub fn fold(parts: &[Summary]) -> Option<Summary> {
    let first = parts.first()?;
    let at = match first.at {
        None => {
            if parts.iter().any(|s| s.at.is_some()) {
                return None;
            }
            None
        }
        Some(a) => {
            let mut total = At {
                before: Sums::default(),
                after: Sums::default(),
                ..a
            };
            for s in parts {
                let b = s.at.filter(|b| b.m == a.m && b.digest == a.digest)?;
                total.before = total.before + b.before;
                total.after = total.after + b.after;
            }
            Some(total)
        }
    };
    Some(Summary {
        launches: parts.iter().map(|s| s.launches).sum(),
        m: parts.iter().map(|s| s.m).min().unwrap_or(0),
        high: parts.iter().map(|s| s.high).max().unwrap_or(0),
        lo: parts.iter().map(|s| s.lo).max().unwrap_or(0),
        at,
        flight: super::flight::Flight::fold(parts.iter().map(|s| s.flight)),
        now: parts.iter().fold(Sums::default(), |t, s| t + s.now),
        closing: parts.iter().any(|s| s.closing),
        ..Summary::default()
    })
}

/// A host's post to the judge: one folded summary, or each rank's.
#[derive(Debug, Clone, PartialEq)]
pub enum HostPost {
    Folded(Summary),
    Each(Vec<(usize, Summary)>),
}

const FOLDED: u64 = u64::MAX;

fn garbled(why: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("a host leader's watch post is garbled: {why}"),
    )
}

impl HostPost {
    /// What a leader sends for its host's `parts` (rank, summary).
    pub fn of(parts: Vec<(usize, Summary)>, ask: &Ask) -> HostPost {
        if !each_needed(ask) {
            let summaries: Vec<Summary> = parts.iter().map(|(_, s)| s.clone()).collect();
            if let Some(f) = fold(&summaries) {
                return HostPost::Folded(f);
            }
        }
        HostPost::Each(parts)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        let mut part = |tag: u64, s: &Summary| {
            let b = s.encode();
            out.extend_from_slice(&tag.to_le_bytes());
            out.extend_from_slice(&(b.len() as u64).to_le_bytes());
            out.extend_from_slice(&b);
        };
        match self {
            HostPost::Folded(s) => part(FOLDED, s),
            HostPost::Each(parts) => parts.iter().for_each(|(r, s)| part(*r as u64, s)),
        }
        out
    }

    /// The post in `b`, its ranks below `nranks`.
    pub fn decode(mut b: &[u8], nranks: usize) -> Result<HostPost> {
        let word = |b: &mut &[u8]| -> Result<u64> {
            let (w, rest) = b
                .split_first_chunk::<8>()
                .ok_or_else(|| garbled("cut short"))?;
            *b = rest;
            Ok(u64::from_le_bytes(*w))
        };
        let mut each = Vec::new();
        while !b.is_empty() {
            let tag = word(&mut b)?;
            let len = usize::try_from(word(&mut b)?)
                .ok()
                .filter(|n| *n <= b.len())
                .ok_or_else(|| garbled("a length past its end"))?;
            let s = Summary::decode(&b[..len])?;
            b = &b[len..];
            if tag == FOLDED {
                return match (b.is_empty(), each.is_empty()) {
                    (true, true) => Ok(HostPost::Folded(s)),
                    _ => Err(garbled("a folded summary among others")),
                };
            }
            let r = usize::try_from(tag)
                .ok()
                .filter(|r| *r < nranks)
                .ok_or_else(|| garbled(&format!("rank {tag} of {nranks}")))?;
            each.push((r, s));
        }
        Ok(HostPost::Each(each))
    }
}
