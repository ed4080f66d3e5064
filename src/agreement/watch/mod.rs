//! Watch mode (`RANKWISE_CHECK=watch`): every call goes to NCCL at once,
//! and the ranks compare what they called in the background.
//!
//! Each rank keeps a [`Track`] per communicator. Folding a launch into it
//! (the hot path) allocates nothing once its ring is warm, makes no
//! syscall and takes no lock of its own:
//!
//! - a launch with collectives is the communicator's next **cut** `m`; its
//!   signature (every call's function, count, datatype, reduction op and
//!   scalar, root — never buffers or op-count) folds into a rolling digest,
//!   and the launch is kept in a ring of the last [`RING`] cuts;
//! - each Send and Recv adds a hash of (sender, receiver, its number on
//!   that pair, count, datatype) to this rank's sum of sends or of
//!   receives. Over all ranks, the two sums are equal exactly when every
//!   Send has its Recv; each cut keeps both sums as they were before its
//!   launch and after it.
//!
//! In the background ([`round`]), at an interval, every rank posts a small
//! summary and one rank ([`judge`]) compares them: the digests at the
//! latest cut every rank has reached, and there the Send and Recv sums
//! over all ranks. Digests that differ are narrowed down (the ring's
//! per-cut signatures, then the launches themselves) to the first launch
//! that differs, worded as the strict mode words a mismatch, or as a skip,
//! an extra call or two calls in another order when the next launch shows
//! it. Sums that differ both before and after a cut every rank has made
//! mean a Send or Recv that can never be matched in order: the per-peer
//! counts name the pair. Each round costs the judging rank one value per
//! rank and every other rank one value: bytes and messages grow with the
//! ranks, never with their square.

pub mod flight;
pub mod hosts;
mod judge;
mod round;
mod wire;

#[cfg(test)]
mod tests;

pub use judge::Judge;
pub use round::Watcher;
pub use wire::{Ask, At, PeerCount, Summary, Verdict};

use crate::core::{Call, Launch, Posted};
use flight::Mark;

/// Cuts a rank keeps: the first launch that differs can be named while
/// no rank is more than this many collective launches past the last cut
/// the ranks agreed on.
pub const RING: usize = 1024;

/// Cuts a rank sends from the first that differs on: enough to tell a
/// skip, an extra launch and two swapped ones apart when the program's
/// launches alternate.
pub const WINDOW: u64 = 4;

/// A 64-bit mix (splitmix64's finaliser): one word into a running hash.
fn mix(h: u64, w: u64) -> u64 {
    let mut x = h ^ w.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// What of a call the ranks must agree on, as words: what
/// [`Call::signature`] holds. The small fields share one word (function
/// index, datatype code and op kind take a byte each, the root the bits
/// above), so a call is three mixes on the hot path, not six.
fn call_sig(h: u64, c: &Call) -> u64 {
    let (kind, scalar) = match c.func.reduces() {
        true => crate::core::wire::op_parts(c.op),
        false => (0, 0),
    };
    let root = if c.func.is_rooted() { c.root as u64 } else { 0 };
    let head = c.func.index() as u64
        | (c.datatype.code() as u64 & 0xff) << 8
        | (kind & 0xff) << 16
        | root << 24;
    mix(mix(mix(h, head), c.count as u64), scalar)
}

/// The signature of a launch's collectives.
pub fn launch_sig(calls: &[Call]) -> u64 {
    calls.iter().fold(mix(0, calls.len() as u64), call_sig)
}

/// One Send or Recv as the sums count it.
fn pair_hash(src: usize, dst: usize, k: u64, c: &Call) -> u64 {
    let h = mix(mix(mix(0x5057, src as u64), dst as u64), k);
    mix(mix(h, c.count as u64), c.datatype.code() as u64)
}

/// The Send and Recv sums at a moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Sums {
    pub sent: u64,
    pub recvd: u64,
}

/// Both sums of several ranks together (wrapping: they are hashes).
impl std::ops::Add for Sums {
    type Output = Sums;
    fn add(self, other: Sums) -> Sums {
        Sums {
            sent: self.sent.wrapping_add(other.sent),
            recvd: self.recvd.wrapping_add(other.recvd),
        }
    }
}

/// One cut in the ring.
#[derive(Debug, Default, Clone)]
struct Slot {
    m: u64,
    /// the digest after this cut
    digest: u64,
    sig: u64,
    op_count: u64,
    calls: Vec<Call>,
    before: Sums,
    after: Sums,
}

/// What one rank made on one communicator, as watch mode compares it.
#[derive(Debug)]
pub struct Track {
    me: usize,
    /// launches folded (with collectives or not)
    launches: u64,
    /// cuts: launches with collectives
    m: u64,
    digest: u64,
    ring: Vec<Slot>,
    sums: Sums,
    peers: Vec<PeerCount>,
}

impl Track {
    /// The track of rank `me` of `nranks`.
    pub fn new(me: usize, nranks: usize) -> Track {
        Track {
            me,
            launches: 0,
            m: 0,
            digest: 0,
            ring: vec![Slot::default(); RING],
            sums: Sums::default(),
            peers: (0..nranks)
                .map(|peer| PeerCount {
                    peer,
                    ..PeerCount::default()
                })
                .collect(),
        }
    }

    /// Folds launch `l` in (numbered as the trace numbers it): its mark
    /// (its cut when it has collectives, else the cut its Sends and Recvs
    /// follow; None when it has neither).
    pub fn fold(&mut self, l: &Launch) -> Option<Mark> {
        self.launches += 1;
        let before = self.sums;
        for c in &l.p2p {
            let Some(p) = self.peers.get_mut(c.root) else {
                continue;
            };
            let last = (c.count as u64, c.datatype.code() as u64);
            if c.func == crate::core::Func::Send {
                self.sums.sent = self
                    .sums
                    .sent
                    .wrapping_add(pair_hash(self.me, c.root, p.sent, c));
                p.sent += 1;
                p.sent_digest = mix(mix(p.sent_digest, last.0), last.1);
                p.last_sent = last;
            } else {
                self.sums.recvd = self
                    .sums
                    .recvd
                    .wrapping_add(pair_hash(c.root, self.me, p.recvd, c));
                p.recvd += 1;
                p.recvd_digest = mix(mix(p.recvd_digest, last.0), last.1);
                p.last_recvd = last;
            }
        }
        if l.colls.is_empty() {
            return (!l.p2p.is_empty()).then_some(Mark::after(self.m));
        }
        self.m += 1;
        let sig = launch_sig(&l.colls);
        self.digest = mix(self.digest, sig);
        let slot = &mut self.ring[(self.m % RING as u64) as usize];
        slot.m = self.m;
        slot.digest = self.digest;
        slot.sig = sig;
        slot.op_count = l.op_count;
        slot.calls.clear();
        slot.calls.extend_from_slice(&l.colls);
        slot.before = before;
        slot.after = self.sums;
        Some(Mark::cut(self.m))
    }

    /// The oldest cut the ring still holds (1 once there is one).
    fn lo(&self) -> u64 {
        self.m.saturating_sub(RING as u64 - 1).max(1)
    }

    fn slot(&self, m: u64) -> Option<&Slot> {
        (m >= self.lo() && m <= self.m).then(|| &self.ring[(m % RING as u64) as usize])
    }

    /// The launch at cut `m`, if the ring holds it.
    pub fn posted(&self, m: u64) -> Option<Posted> {
        self.slot(m).map(|s| Posted {
            op_count: s.op_count,
            calls: s.calls.clone(),
        })
    }

    /// This rank's summary, answering `ask`.
    pub fn summary(&self, ask: &Ask) -> Summary {
        let mut s = Summary {
            launches: self.launches,
            m: self.m,
            high: self.m,
            lo: self.lo(),
            now: self.sums,
            ..Summary::default()
        };
        if let Some(at) = ask.digest_at {
            s.at = match at {
                0 => Some(wire::At {
                    m: 0,
                    ..wire::At::default()
                }),
                _ => self.slot(at).map(|x| wire::At {
                    m: at,
                    digest: x.digest,
                    before: x.before,
                    after: x.after,
                }),
            };
        }
        if let Some((from, to)) = ask.sigs {
            let to = to.min(self.m).min(from.saturating_add(RING as u64));
            if from >= self.lo() && from <= to {
                s.sigs_from = from;
                s.sigs = (from..=to)
                    .filter_map(|m| self.slot(m))
                    .map(|x| x.sig)
                    .collect();
            }
        }
        if let Some(m) = ask.post {
            s.posts = (m..m + WINDOW).map_while(|m| self.posted(m)).collect();
        }
        if ask.peers {
            s.peers = self
                .peers
                .iter()
                .filter(|p| p.sent + p.recvd > 0)
                .copied()
                .collect();
        }
        s
    }
}
