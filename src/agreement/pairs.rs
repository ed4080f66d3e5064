//! Send/Recv pairing, as NCCL pairs them: the k-th Send from s to d meets
//! the k-th Recv on d from s. Each rank numbers its sides per peer and
//! direction ([`PairCounts`]); the two ends of a pair swap their [`Side`]
//! (the call and its launch's opCount) and [`meet`] compares count and
//! datatype. A pair whose sides disagree, or whose other side never comes,
//! is an error on both ranks instead of an NCCL hang or a truncated
//! message. In the store each pair is one exchange between its sender
//! (party 0) and receiver (party 1), under [`super::keys::pair`].

use crate::core::{Call, Error, ErrorKind, Func, Launch, wire};
use crate::transport::store::{Missing, Share};
use std::time::Duration;

/// One side of a Send/Recv pair: the call and the launch it is in.
#[derive(Debug, Clone, PartialEq)]
pub struct Side {
    pub call: Call,
    pub op_count: u64,
}

/// A side as bytes: a post of its one call.
pub fn encode_side(s: &Side) -> Vec<u8> {
    wire::encode_call(s.op_count, &s.call)
}

pub fn decode_side(b: &[u8]) -> Result<Side, Error> {
    let (op_count, call) = wire::decode_call(b)?;
    Ok(Side { call, op_count })
}

/// How many Sends a rank has made to each peer and Recvs from each: the
/// pair number of the next one, as NCCL matches them (in order, per
/// sender and receiver).
#[derive(Debug, Clone)]
pub struct PairCounts {
    sent: Vec<u64>,
    received: Vec<u64>,
}

impl PairCounts {
    pub fn new(nranks: usize) -> PairCounts {
        PairCounts {
            sent: vec![0; nranks],
            received: vec![0; nranks],
        }
    }

    /// How many Sends to `peer` this rank has made (posted) so far.
    pub fn sent(&self, peer: usize) -> u64 {
        self.sent[peer]
    }

    /// How many Recvs from `peer` this rank has made (posted) so far.
    pub fn received(&self, peer: usize) -> u64 {
        self.received[peer]
    }

    /// Numbers `launch`'s Sends and Recvs on rank `me`. Its Sends to itself
    /// pair with its own Recvs from itself here (the group end already
    /// refused unequal numbers of each); the sides to other ranks come back
    /// with their pair numbers, in call order.
    pub fn number(&mut self, me: usize, launch: &Launch) -> Result<Vec<(Side, u64)>, Error> {
        let side = |c: &Call| Side {
            call: *c,
            op_count: launch.op_count,
        };
        let to_self = |f: Func| {
            launch
                .p2p
                .iter()
                .filter(move |c| c.func == f && c.root == me)
        };
        let first_to_self = self.sent[me];
        let sides = self.count(me, launch);
        for (k, (s, r)) in to_self(Func::Send).zip(to_self(Func::Recv)).enumerate() {
            pair(me, me, first_to_self + k as u64, &side(s), &side(r))?;
        }
        Ok(sides)
    }

    /// Numbers `launch`'s Sends and Recvs on rank `me` without pairing its
    /// sends to itself: the sides to other ranks with their pair numbers,
    /// in call order. A launch whose calls were refused is numbered so too,
    /// so this rank's later pairs keep their peers' numbers.
    pub fn count(&mut self, me: usize, launch: &Launch) -> Vec<(Side, u64)> {
        let selves = launch
            .p2p
            .iter()
            .filter(|c| c.func == Func::Send && c.root == me)
            .count() as u64;
        self.sent[me] += selves;
        self.received[me] += selves;
        let mut sides = Vec::with_capacity(launch.p2p.len());
        for c in launch.p2p.iter().filter(|c| c.root != me) {
            let count = if c.func == Func::Send {
                &mut self.sent[c.root]
            } else {
                &mut self.received[c.root]
            };
            sides.push((
                Side {
                    call: *c,
                    op_count: launch.op_count,
                },
                *count,
            ));
            *count += 1;
        }
        sides
    }
}

/// Where rank `me`'s side sits in its pair: the sender, the receiver, and
/// this rank's party in their exchange (0 sends, 1 receives).
pub fn ends(me: usize, side: &Side) -> (usize, usize, usize) {
    if side.call.func == Func::Send {
        (me, side.call.root, 0)
    } else {
        (side.call.root, me, 1)
    }
}

/// Rank `me`'s side against what its peer posted for the same pair: the
/// peer's opCount when they agree; otherwise the error both ranks return
/// (a mismatch, or the peer never posting).
pub fn meet(
    me: usize,
    mine: &Side,
    seq: u64,
    theirs: Share,
    timeout: Duration,
) -> Result<u64, Error> {
    let theirs = match theirs {
        Ok(b) => decode_side(&b)?,
        Err(m) => return Err(unmatched(mine, seq, m, timeout)),
    };
    let peer = mine.call.root;
    if mine.call.func == Func::Send {
        pair(me, peer, seq, mine, &theirs)?;
    } else {
        pair(peer, me, seq, &theirs, mine)?;
    }
    Ok(theirs.op_count)
}

/// `Send #3 to rank 1 (count 4, int32, opCount 5)`, as the local engine words it.
pub fn describe(s: &Side, seq: u64) -> String {
    let c = &s.call;
    let dir = if c.func == Func::Send { "to" } else { "from" };
    format!(
        "{} #{seq} {dir} rank {} (count {}, {}, opCount {:x})",
        c.func, c.root, c.count, c.datatype, s.op_count
    )
}

/// The k-th Send from `src` to `dst` against the k-th Recv at `dst` from
/// `src`: Ok when count and datatype agree; otherwise the Mismatch both
/// ranks return, in the local engine's words.
pub fn pair(src: usize, dst: usize, seq: u64, send: &Side, recv: &Side) -> Result<(), Error> {
    if send.call.count == recv.call.count && send.call.datatype == recv.call.datatype {
        return Ok(());
    }
    Err(Error::new(
        ErrorKind::Mismatch,
        format!(
            "Send/Recv mismatch: rank {src}'s {} meets rank {dst}'s {}: both sides must pass the same count and datatype",
            describe(send, seq),
            describe(recv, seq)
        ),
    ))
}

/// The error of a Send or Recv whose other side never came: `Send #0 to
/// rank 1 (count 16, int32, opCount 0) has no matching Recv: rank 1 posted
/// none within 5s`.
pub fn unmatched(side: &Side, seq: u64, m: Missing, timeout: Duration) -> Error {
    let peer = side.call.root;
    let other = if side.call.func == Func::Send {
        "Recv"
    } else {
        "Send"
    };
    let why = match m {
        Missing::Cycle(steps) => return super::cycle::waits_in_cycle(&steps),
        Missing::Timeout => format!("rank {peer} posted none within {timeout:?}"),
        Missing::Finished { reason: None } => {
            format!("rank {peer} finished its program without posting one")
        }
        Missing::Finished { reason: Some(r) } => {
            format!("rank {peer} failed without posting one ({r})")
        }
    };
    Error::new(
        ErrorKind::Unmatched,
        format!("{} has no matching {other}: {why}", describe(side, seq)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DataType, RedOp};

    fn call(func: Func, count: usize, dt: DataType, op: RedOp, root: usize) -> Call {
        Call {
            func,
            // buffer addresses are never compared, so they do not travel
            sendbuff: 0,
            recvbuff: 0,
            count,
            datatype: dt,
            op,
            op_code: if matches!(op, RedOp::PreMulSum(_)) {
                7
            } else {
                0
            },
            root,
        }
    }

    #[test]
    fn pairs_compare_count_and_datatype_and_name_both_sides() {
        let send = Side {
            call: call(Func::Send, 4, DataType::Int32, RedOp::Sum, 1),
            op_count: 5,
        };
        assert_eq!(decode_side(&encode_side(&send)).unwrap(), send);
        let recv = Side {
            call: call(Func::Recv, 4, DataType::Int32, RedOp::Sum, 0),
            op_count: 2,
        };
        assert!(
            pair(0, 1, 3, &send, &recv).is_ok(),
            "opCounts need not agree"
        );
        let short = Side {
            call: call(Func::Recv, 3, DataType::Int32, RedOp::Sum, 0),
            op_count: 2,
        };
        let e = pair(0, 1, 3, &send, &short).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        assert_eq!(
            e.message,
            "Send/Recv mismatch: rank 0's Send #3 to rank 1 (count 4, int32, opCount 5) meets rank 1's Recv #3 from rank 0 (count 3, int32, opCount 2): both sides must pass the same count and datatype"
        );
        let other_type = Side {
            call: call(Func::Recv, 4, DataType::Float32, RedOp::Sum, 0),
            op_count: 2,
        };
        assert!(pair(0, 1, 0, &send, &other_type).is_err());
    }

    #[test]
    fn pairs_are_numbered_per_peer_and_direction_across_launches() {
        let mut counts = PairCounts::new(3);
        let p2p = |calls: &[(Func, usize, usize)]| Launch {
            op_count: 7,
            colls: Vec::new(),
            p2p: calls
                .iter()
                .map(|&(f, count, peer)| call(f, count, DataType::Int32, RedOp::Sum, peer))
                .collect(),
        };
        let l = p2p(&[
            (Func::Send, 4, 1),
            (Func::Recv, 4, 1),
            (Func::Send, 2, 0),
            (Func::Send, 4, 1),
            (Func::Recv, 2, 0),
            (Func::Recv, 4, 2),
        ]);
        let numbered: Vec<(Func, usize, u64, u64)> = counts
            .number(0, &l)
            .unwrap()
            .iter()
            .map(|(s, seq)| (s.call.func, s.call.root, *seq, s.op_count))
            .collect();
        assert_eq!(
            numbered,
            vec![
                (Func::Send, 1, 0, 7),
                (Func::Recv, 1, 0, 7),
                (Func::Send, 1, 1, 7),
                (Func::Recv, 2, 0, 7),
            ],
            "the send to self paired here, the rest in call order"
        );
        let next = counts.number(0, &p2p(&[(Func::Send, 1, 1)])).unwrap();
        assert_eq!(next[0].1, 2, "numbers continue across launches");
        let e = counts
            .number(0, &p2p(&[(Func::Send, 3, 0), (Func::Recv, 4, 0)]))
            .unwrap_err();
        assert!(e.message.contains("rank 0's Send #1 to rank 0"), "{e}");
        let send = &counts.number(0, &p2p(&[(Func::Send, 5, 2)])).unwrap()[0];
        assert_eq!(ends(0, &send.0), (0, 2, 0));
        assert_eq!(super::super::keys::pair("c", 0, 2, send.1), "c/p0>2/0");
    }

    #[test]
    fn a_side_meets_its_peers_post_or_says_why_not() {
        let send = Side {
            call: call(Func::Send, 4, DataType::Int32, RedOp::Sum, 1),
            op_count: 5,
        };
        let recv = Side {
            call: call(Func::Recv, 4, DataType::Int32, RedOp::Sum, 0),
            op_count: 9,
        };
        let t = Duration::from_secs(2);
        assert_eq!(meet(0, &send, 0, Ok(encode_side(&recv)), t).unwrap(), 9);
        assert_eq!(meet(1, &recv, 0, Ok(encode_side(&send)), t).unwrap(), 5);
        assert_eq!(ends(1, &recv), (0, 1, 1));
        let e = meet(0, &send, 3, Err(Missing::Timeout), t).unwrap_err();
        assert_eq!(
            e.message,
            "Send #3 to rank 1 (count 4, int32, opCount 5) has no matching Recv: rank 1 posted none within 2s"
        );
        let short = Side {
            call: call(Func::Send, 3, DataType::Int32, RedOp::Sum, 1),
            ..recv.clone()
        };
        let e = meet(1, &recv, 0, Ok(encode_side(&short)), t).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        assert!(
            e.message
                .starts_with("Send/Recv mismatch: rank 0's Send #0"),
            "{e}"
        );
    }
}
