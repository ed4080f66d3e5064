//! Every name the agreement gives a value in the store, in one place: what
//! a communicator's ranks post and read there is found only through these.
//!
//! A communicator has a name of its own in the store (`comm`): the NCCL
//! engine's `c0` (and `c0.1`, … for its duplicates), the checker's hex of
//! its commId (`…​.s1c0` for a split's child). Under it:

/// The ncclUniqueId rank 0 hands the others (the NCCL engine).
pub fn unique_id(comm: &str) -> String {
    format!("{comm}/id")
}

/// A rank's failure, which ranks waiting on NCCL for this communicator
/// look for (the NCCL engine).
pub fn failed(comm: &str) -> String {
    format!("{comm}/failed")
}

/// The exchange of the communicator's `seq`-th collective round.
pub fn collectives(comm: &str, seq: u64) -> String {
    format!("{comm}/x{seq}")
}

/// `rank`'s post of lane round `seq` when it is too large for a slot:
/// one key per rank and slot (`seq % 2`), written over as the lane's slot
/// is, so the store keeps two per rank however many launches. That is
/// safe for the reason the slot is: a rank posts round `seq + 2` only
/// after every rank posted `seq + 1`, which each did after reading `seq`.
pub fn overflow(comm: &str, seq: u64, rank: usize) -> String {
    format!("{comm}/overflow{}.r{rank}", seq % 2)
}

/// The exchange of the `seq`-th Send from `src` to `dst` with the `seq`-th
/// Recv at `dst` from `src`.
pub fn pair(comm: &str, src: usize, dst: usize, seq: u64) -> String {
    format!("{comm}/p{src}>{dst}/{seq}")
}

/// What a name under a communicator's says of an exchange the store
/// found in a wait-for cycle: a pair's `(src, dst, seq)`, or whether it
/// is a collectives round (whose parties are the communicator's ranks)
/// or a verdict (its parties the lower rank, then the higher).
pub enum Named {
    Pair(usize, usize, u64),
    Collectives,
    Verdict(usize, usize),
    Other,
}

/// Reads back a name [`pair`], [`collectives`] or [`verdict`] gave.
pub fn named(key: &str) -> Named {
    let name = key.split_once('/').map_or(key, |(_, n)| n);
    let pair = || {
        let (ends, seq) = name.strip_prefix('p')?.split_once('/')?;
        let (src, dst) = ends.split_once('>')?;
        Some(Named::Pair(
            src.parse().ok()?,
            dst.parse().ok()?,
            seq.parse().ok()?,
        ))
    };
    let verdict = || {
        let (lo, hi) = name.strip_prefix('v')?.split_once('>')?;
        let rank = |s: &str| s.split('.').next()?.parse().ok();
        Some(Named::Verdict(rank(lo)?, rank(hi)?))
    };
    let collectives = || {
        let seq = name.strip_prefix('x')?;
        seq.parse::<u64>().ok().map(|_| Named::Collectives)
    };
    pair()
        .or_else(verdict)
        .or_else(collectives)
        .unwrap_or(Named::Other)
}

/// The verdicts two ranks swap on the launches (`lo` with opCount
/// `lo_op`, `hi` with `hi_op`; `lo` < `hi`) that paired their Sends and
/// Recvs.
pub fn verdict(comm: &str, (lo, lo_op): (usize, u64), (hi, hi_op): (usize, u64)) -> String {
    format!("{comm}/v{lo}.{lo_op:x}>{hi}.{hi_op:x}")
}

/// A key nobody sets: a read of it with an immediate deadline says whether
/// its owner has left.
pub fn gone(comm: &str) -> String {
    format!("{comm}/gone")
}

/// Round `round` of setting up the shared-memory lane.
pub fn lane_setup(comm: &str, round: u32) -> String {
    format!("{comm}/ring.{round}")
}

/// Watch mode's names go under `{comm}.w`, not the communicator's own:
/// its rounds run on a thread of their own, and the store's search for
/// wait-for cycles joins only the waits of one name (a rank waiting in a
/// launch does not hold its watch thread up, nor the other way round).
///
/// Watch mode's round `round`: the host leaders' summaries.
pub fn watch_round(comm: &str, round: u64) -> String {
    format!("{comm}.w/w{round}")
}

/// Watch mode's verdict of round `round` for `party` (a host's index
/// among the leaders, or `m` and a rank for a host's member).
pub fn watch_verdict(comm: &str, round: u64, party: &str) -> String {
    format!("{comm}.w/w{round}.{party}")
}

/// Watch mode's summaries of round `round` among the ranks of the host
/// led by `leader`, when they have no lane.
pub fn watch_host(comm: &str, leader: usize, round: u64) -> String {
    format!("{comm}.w/wh{leader}.{round}")
}

/// Watch mode's set-up: every rank's host identity; and the name under
/// which the ranks of the host led by `leader` set up their lane.
pub fn watch_hosts(comm: &str) -> String {
    format!("{comm}.w/whosts")
}

pub fn watch_lane(comm: &str, leader: usize) -> String {
    format!("{comm}.w/wlane{leader}")
}

/// `rank`'s watch post of lane round `seq` too large for a slot (two per
/// rank, written over as the lane's slots are).
pub fn watch_overflow(comm: &str, rank: usize, seq: u64) -> String {
    format!("{comm}.w/wover{}.r{rank}", seq % 2)
}

/// The tier of strict mode across hosts (`super::tier`): its name under
/// the communicator's, under which the names below go.
pub fn tier(comm: &str) -> String {
    format!("{comm}/t")
}

/// The tier's set-up: every rank's host identity.
pub fn tier_hosts(tier: &str) -> String {
    format!("{tier}/hosts")
}

/// The name under which the ranks of the host led by `leader` set up
/// their lane.
pub fn tier_lane(tier: &str, leader: usize) -> String {
    format!("{tier}/lane{leader}")
}

/// Round `round` among the ranks of the host led by `leader`, when they
/// have no lane.
pub fn tier_host(tier: &str, leader: usize, round: u64) -> String {
    format!("{tier}/h{leader}.{round}")
}

/// Round `round` among the host leaders: each one's table for the judge.
pub fn tier_up(tier: &str, round: u64) -> String {
    format!("{tier}/u{round}")
}

/// Round `round`'s answer for `party` (a host's index among the leaders,
/// or `m` and a rank for a host's rank without a lane).
pub fn tier_down(tier: &str, round: u64, party: &str) -> String {
    format!("{tier}/d{round}.{party}")
}

/// `rank`'s post of lane round `seq` too large for a slot (two per rank,
/// written over as the lane's slots are).
pub fn tier_overflow(tier: &str, rank: usize, seq: u64) -> String {
    format!("{tier}/over{}.r{rank}", seq % 2)
}
