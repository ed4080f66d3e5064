//! Watch mode on tracks made by hand: each bug class a program makes is
//! named (cause, ranks, launch, arguments) by the judge within a few
//! rounds, a correct program never is, and the rounds run over a real
//! store between threads. Expected words are written out here, not taken
//! from the code under test.

use super::*;
use crate::core::{DataType, Func, RedOp};
use crate::transport::store::Store;
use std::time::{Duration, Instant};

fn call(func: Func, count: usize, root: usize) -> Call {
    Call {
        func,
        sendbuff: 0x1000,
        recvbuff: 0x2000,
        count,
        datatype: DataType::Float32,
        op: RedOp::Sum,
        op_code: 0,
        root,
    }
}

fn coll(op_count: u64, func: Func, count: usize) -> Launch {
    Launch {
        op_count,
        colls: vec![call(func, count, 0)],
        p2p: Vec::new(),
    }
}

fn p2p(op_count: u64, calls: &[(Func, usize, usize)]) -> Launch {
    Launch {
        op_count,
        colls: Vec::new(),
        p2p: calls.iter().map(|&(f, peer, n)| call(f, n, peer)).collect(),
    }
}

/// Rounds of the judge over `tracks` until a failure or `rounds` pass:
/// the failure and the round it came in.
fn judged(tracks: &[Track], rounds: usize) -> Option<((String, String), usize)> {
    judged_closing(tracks, &[], rounds)
}

/// [`judged`], the ranks in `closing` having made their last calls.
fn judged_closing(
    tracks: &[Track],
    closing: &[usize],
    rounds: usize,
) -> Option<((String, String), usize)> {
    let mut judge = Judge::default();
    let mut ask = Ask::default();
    for round in 1..=rounds {
        let all: Vec<Summary> = tracks
            .iter()
            .enumerate()
            .map(|(r, t)| Summary {
                closing: closing.contains(&r),
                ..t.summary(&ask)
            })
            // through the bytes, as the store carries them
            .map(|s| Summary::decode(&s.encode()).unwrap())
            .collect();
        let v = judge.judge(&all);
        let v = Verdict::decode(&v.encode()).unwrap();
        if let Some(f) = v.failure {
            return Some((f, round));
        }
        ask = v.ask;
    }
    None
}

/// `n` ranks that each made `program(rank)`.
fn made(n: usize, program: impl Fn(usize) -> Vec<Launch>) -> Vec<Track> {
    (0..n)
        .map(|r| {
            let mut t = Track::new(r, n);
            for l in program(r) {
                t.fold(&l);
            }
            t
        })
        .collect()
}

/// A training step's calls on 4 ranks: collectives, a ring of Sends and
/// Recvs grouped, an AllToAll-like exchange, count-0 calls excluded.
fn step(r: usize, n: usize, base: u64) -> Vec<Launch> {
    vec![
        coll(base, Func::AllReduce, 1 << 20),
        p2p(
            base + 1,
            &[
                (Func::Send, (r + 1) % n, 64),
                (Func::Recv, (r + n - 1) % n, 64),
            ],
        ),
        coll(base + 2, Func::AllGather, 256),
        p2p(
            base + 3,
            &(0..n)
                .filter(|&p| p != r)
                .flat_map(|p| [(Func::Send, p, 8 * (r + 1)), (Func::Recv, p, 8 * (p + 1))])
                .collect::<Vec<_>>(),
        ),
        coll(base + 4, Func::ReduceScatter, 1024),
    ]
}

#[test]
fn a_correct_program_is_never_named() {
    let n = 4;
    let tracks = made(n, |r| (0..200).flat_map(|i| step(r, n, 5 * i)).collect());
    assert_eq!(judged(&tracks, 12), None);
    // the judge did compare: ranks agreed up to their last cut
    let mut judge = Judge::default();
    let mut ask = Ask::default();
    for _ in 0..3 {
        let all: Vec<Summary> = tracks.iter().map(|t| t.summary(&ask)).collect();
        ask = judge.judge(&all).ask;
    }
    assert_eq!(judge.agreed(), 600);
}

#[test]
fn a_count_mismatch_is_named_with_both_sides() {
    let tracks = made(4, |r| {
        let mut p: Vec<Launch> = (0..10).flat_map(|i| step(r, 4, 5 * i)).collect();
        p.push(coll(50, Func::AllReduce, if r == 2 { 1000 } else { 1024 }));
        p.push(coll(51, Func::Broadcast, 8));
        p
    });
    let ((what, sides), round) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "collective launch 31 on this communicator differs: AllReduce #50: count differs: ranks 0,1,3 pass 1024, rank 2 passes 1000"
    );
    assert_eq!(
        sides,
        "ranks 0,1,3: AllReduce count 1024 float sum; rank 2: AllReduce count 1000 float sum"
    );
    // digests, then signatures, then the launches: four rounds
    assert!(round <= 4, "round {round}");
}

#[test]
fn a_skipped_collective_is_named_by_the_next_one() {
    let tracks = made(4, |r| {
        let mut p = vec![coll(0, Func::AllReduce, 4)];
        if r != 3 {
            p.push(coll(1, Func::Broadcast, 16));
        }
        let k = p.len() as u64;
        p.push(coll(k, Func::AllGather, 32));
        p
    });
    let ((what, _), _) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "collective launch 2 on this communicator differs: rank 3 skipped Broadcast #1 (its next collective is AllGather #2, which the others make after it)"
    );
}

#[test]
fn an_extra_collective_is_named() {
    let tracks = made(4, |r| {
        let mut p = vec![coll(0, Func::AllReduce, 4)];
        if r == 1 {
            p.push(coll(1, Func::Reduce, 4));
        }
        let k = p.len() as u64;
        p.push(coll(k, Func::AllGather, 32));
        p.push(coll(k + 1, Func::AllReduce, 4));
        p
    });
    let ((what, _), _) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "collective launch 2 on this communicator differs: rank 1 made an extra Reduce #1 before AllGather #1"
    );
}

#[test]
fn two_collectives_in_another_order_are_named() {
    let tracks = made(4, |r| {
        let (a, b) = (coll(1, Func::AllReduce, 4), coll(2, Func::AllGather, 4));
        let mut p = vec![coll(0, Func::Broadcast, 4)];
        match r {
            0 => p.extend([coll(1, Func::AllGather, 4), coll(2, Func::AllReduce, 4)]),
            _ => p.extend([a, b]),
        }
        p
    });
    let ((what, _), _) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "collective launch 2 on this communicator differs: rank 0 made AllReduce #1 and AllGather #2 in the other order"
    );
}

#[test]
fn an_unmatched_send_is_named_once_every_rank_is_past_it() {
    let tracks = made(4, |r| {
        let mut p: Vec<Launch> = (0..3).flat_map(|i| step(r, 4, 5 * i)).collect();
        if r == 0 {
            p.push(p2p(15, &[(Func::Send, 2, 100)]));
        }
        p.push(coll(16, Func::AllReduce, 4));
        p
    });
    let ((what, sides), _) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "Send/Recv pairs do not match, so NCCL can never complete them in order: rank 0's Send #4 to rank 2 has no matching Recv: rank 2 made 3 Recvs from rank 0"
    );
    assert_eq!(
        sides,
        "rank 0: 4 Sends (the last: count 100 float) to rank 2; rank 2: 3 Recvs (the last: count 8 float) from rank 0"
    );
}

#[test]
fn a_send_and_recv_of_different_counts_are_named() {
    let tracks = made(2, |r| {
        let (f, n) = match r {
            0 => (Func::Send, 100),
            _ => (Func::Recv, 200),
        };
        vec![p2p(0, &[(f, 1 - r, n)]), coll(1, Func::AllReduce, 4)]
    });
    let ((what, sides), _) = judged(&tracks, 10).expect("named");
    assert_eq!(
        what,
        "Send/Recv pairs do not match, so NCCL can never complete them in order: the Sends of rank 0 to rank 1 and the Recvs of rank 1 from rank 0 differ in count or datatype"
    );
    assert_eq!(
        sides,
        "rank 0: 1 Send (the last: count 100 float) to rank 1; rank 1: 1 Recv (the last: count 200 float) from rank 0"
    );
}

#[test]
fn a_send_grouped_with_the_collective_on_one_side_only_is_no_alarm() {
    // rank 0: {AllReduce + Send} in one group; rank 1: Recv, then AllReduce
    let tracks = made(2, |r| match r {
        0 => vec![Launch {
            op_count: 0,
            colls: vec![call(Func::AllReduce, 4, 0)],
            p2p: vec![call(Func::Send, 8, 1)],
        }],
        _ => vec![p2p(0, &[(Func::Recv, 0, 8)]), coll(1, Func::AllReduce, 4)],
    });
    assert_eq!(judged(&tracks, 8), None);
}

#[test]
fn a_difference_older_than_the_ring_is_said_so() {
    let tracks = made(2, |r| {
        let mut p = vec![coll(0, Func::AllReduce, 4 + r)];
        p.extend((1..(RING as u64 + 10)).map(|i| coll(i, Func::AllReduce, 4)));
        p
    });
    let ((what, _), _) = judged(&tracks, 10).expect("named");
    assert!(
        what.starts_with("the ranks' collective launches differ between cut 1 and cut"),
        "{what}"
    );
}

#[test]
fn folding_keeps_the_ring_warm_without_growing() {
    let mut t = Track::new(0, 2);
    for i in 0..(3 * RING as u64) {
        t.fold(&coll(i, Func::AllReduce, 4));
    }
    assert_eq!(t.ring.len(), RING);
    assert_eq!(t.lo(), 2 * RING as u64 + 1);
    assert_eq!(t.posted(t.lo() - 1), None);
    assert_eq!(
        t.posted(3 * RING as u64).map(|p| p.op_count),
        Some(3 * RING as u64 - 1)
    );
}

#[test]
fn garbled_summaries_and_verdicts_are_refused() {
    let s = Summary {
        launches: 3,
        m: 2,
        high: 2,
        lo: 1,
        sigs: vec![1, 2],
        flight: flight::Flight::Out {
            mark: flight::Mark::after(2),
            started: true,
            ms: 1500,
        },
        now: Sums { sent: 7, recvd: 9 },
        closing: true,
        ..Summary::default()
    };
    let b = s.encode();
    assert_eq!(Summary::decode(&b).unwrap(), s);
    for cut in 0..b.len() {
        assert!(Summary::decode(&b[..cut]).is_err(), "cut at {cut}");
    }
    // a length far past the bytes is refused before anything is allocated
    // (the signatures' count: the 20th word)
    let mut huge = b.clone();
    huge[19 * 8..20 * 8].copy_from_slice(&u64::MAX.to_le_bytes());
    assert!(Summary::decode(&huge).is_err());
    let v = Verdict {
        round: 2,
        failure: Some(("x".into(), "y".into())),
        hang: true,
        ..Verdict::default()
    };
    assert_eq!(Verdict::decode(&v.encode()).unwrap(), v);
    assert!(Verdict::decode(&v.encode()[1..]).is_err());
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig { cases: 300, ..Default::default() })]

    /// Whatever bytes a peer sends, decoding answers without a panic.
    #[test]
    fn any_bytes_decode_or_are_refused(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..400)) {
        let _ = Summary::decode(&b);
        let _ = Verdict::decode(&b);
    }
}

/// Rank `r` of `n` makes 5 AllReduces of count 8 between rounds, except
/// that in round `bad.0` its call `bad.1` has count `bad.3` on rank
/// `bad.2`; rounds go on until the verdict names a failure: it, and the
/// round it came in.
fn until_named(
    w: &mut Watcher,
    r: usize,
    n: usize,
    bad: (u64, u64, usize, usize),
) -> ((String, String), u64) {
    let mut t = Track::new(r, n);
    let mut ask = Ask::default();
    for round in 0..40u64 {
        // the program goes on making calls between rounds
        for i in 0..5 {
            let count = if (round, i, r) == (bad.0, bad.1, bad.2) {
                bad.3
            } else {
                8
            };
            t.fold(&coll(round * 5 + i, Func::AllReduce, count));
        }
        let deadline = Instant::now() + Duration::from_secs(20);
        let v = w.round(&t.summary(&ask), deadline).unwrap();
        if let Some(f) = v.failure {
            return (f, round);
        }
        ask = v.ask;
    }
    panic!("rank {r} heard no failure");
}

/// The rounds over a real store, ranks as threads: a count mismatch made
/// mid-run is named on every rank.
#[test]
fn every_rank_hears_the_failure_through_the_store() {
    let n = 4;
    let store = Store::new();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let chan: std::sync::Arc<dyn crate::transport::store::SideChannel> = store.clone();
            std::thread::spawn(move || {
                let mut w = Watcher::new(chan, "cw".into(), (0..n).collect(), r);
                until_named(&mut w, r, n, (7, 3, 1, 9))
            })
        })
        .collect();
    for h in handles {
        let ((what, _), round) = h.join().unwrap();
        assert_eq!(
            what,
            "collective launch 39 on this communicator differs: AllReduce #38: count differs: ranks 0,2,3 pass 8, rank 1 passes 9"
        );
        assert!(round <= 14, "round {round}");
    }
}

#[test]
fn a_host_folds_only_what_the_judge_reads_whole() {
    let at = |digest, sent| {
        Some(At {
            m: 4,
            digest,
            before: Sums { sent, recvd: 1 },
            after: Sums { sent, recvd: 2 },
        })
    };
    let s = |m, at| Summary {
        launches: m + 1,
        m,
        high: m,
        lo: 1,
        at,
        ..Summary::default()
    };
    let folded = hosts::fold(&[s(5, at(9, 10)), s(4, at(9, 20))]).unwrap();
    assert_eq!((folded.m, folded.high, folded.launches), (4, 5, 11));
    assert_eq!(
        folded.at,
        Some(At {
            m: 4,
            digest: 9,
            before: Sums { sent: 30, recvd: 2 },
            after: Sums { sent: 30, recvd: 4 },
        })
    );
    // digests that differ, or answers from some only, do not fold
    assert_eq!(hosts::fold(&[s(5, at(9, 1)), s(5, at(8, 1))]), None);
    assert_eq!(hosts::fold(&[s(5, at(9, 1)), s(5, None)]), None);
    // the judge asking for something per rank: each rank's, as they are
    let parts = vec![(3, s(5, at(9, 1))), (6, s(5, at(9, 1)))];
    let ask = Ask {
        post: Some(2),
        ..Ask::default()
    };
    let post = hosts::HostPost::of(parts.clone(), &ask);
    assert_eq!(post, hosts::HostPost::Each(parts.clone()));
    assert_eq!(hosts::HostPost::decode(&post.encode(), 8).unwrap(), post);
    assert!(hosts::HostPost::decode(&post.encode(), 6).is_err());
    let post = hosts::HostPost::of(parts, &Ask::default());
    assert!(matches!(post, hosts::HostPost::Folded(_)));
    assert_eq!(hosts::HostPost::decode(&post.encode(), 8).unwrap(), post);
}

/// Eight ranks on three simulated hosts, with lanes (`lanes`) or through
/// the store: a count mismatch made mid-run is named on every rank, and a
/// correct run's rounds keep the judge reading one post per host.
fn hosts_hear(lanes: bool) {
    let n = 8;
    let ids = [1u64, 1, 1, 2, 2, 3, 3, 3];
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let handles: Vec<_> = (0..n)
        .map(|r| {
            let chan: std::sync::Arc<dyn crate::transport::store::SideChannel> = store.clone();
            let dir = dir.path().to_path_buf();
            std::thread::spawn(move || {
                let deadline = Instant::now() + Duration::from_secs(20);
                let shm = lanes.then_some(dir.as_path());
                let mut w = Watcher::with_hosts(
                    chan,
                    "ch".into(),
                    (0..n).collect(),
                    r,
                    ids[r],
                    shm,
                    deadline,
                )
                .unwrap();
                assert_eq!(w.hosts(), &[vec![0, 1, 2], vec![3, 4], vec![5, 6, 7]]);
                until_named(&mut w, r, n, (6, 2, 4, 3))
            })
        })
        .collect();
    for h in handles {
        let ((what, sides), round) = h.join().unwrap();
        assert_eq!(
            what,
            "collective launch 33 on this communicator differs: AllReduce #32: count differs: ranks 0,1,2,3,5,6,7 pass 8, rank 4 passes 3"
        );
        assert_eq!(
            sides,
            "ranks 0,1,2,3,5,6,7: AllReduce count 8 float sum; rank 4: AllReduce count 3 float sum"
        );
        assert!(round <= 12, "round {round}");
    }
}

#[test]
fn hosts_on_lanes_hear_the_failure() {
    hosts_hear(true);
}

#[test]
fn hosts_through_the_store_hear_the_failure() {
    hosts_hear(false);
}

#[test]
fn ranks_that_stop_making_collectives_are_named_after_the_stall() {
    let tracks = made(4, |r| {
        let k = if r == 3 { 4 } else { 6 };
        (0..k).map(|i| coll(i, Func::AllReduce, 8)).collect()
    });
    let mut judge = Judge::with_stall(Duration::from_millis(200));
    let mut ask = Ask::default();
    let t = Instant::now();
    let found = loop {
        let all: Vec<Summary> = tracks.iter().map(|t| t.summary(&ask)).collect();
        let v = judge.judge(&all);
        if let Some(f) = v.failure {
            break f;
        }
        assert!(t.elapsed() < Duration::from_secs(5), "never named");
        ask = v.ask;
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(t.elapsed() >= Duration::from_millis(200));
    assert_eq!(
        found.0,
        "rank 3 has made no collective launch past 4 for 0.2 s, while ranks 0,1,2 made launch 5 (AllReduce #4): NCCL waits for rank 3 there"
    );
    // a rank merely behind, that catches up within the stall, is not named
    assert_eq!(judged(&tracks, 12), None);
}

/// Rounds every 20 ms of a judge with threshold `stall` over `tracks`,
/// whose flights `flight(rank, ms since the start)` says, until a failure
/// (`each` runs on the tracks before every round): the failure, whether it
/// is a hang, and when it came.
fn judged_in_flight(
    tracks: &mut [Track],
    stall: Duration,
    mut each: impl FnMut(&mut [Track]),
    flight: impl Fn(usize, u64) -> flight::Flight,
) -> ((String, String), bool, Duration) {
    let mut judge = Judge::with_stall(stall);
    let mut ask = Ask::default();
    let t = Instant::now();
    loop {
        each(tracks);
        let ms = t.elapsed().as_millis() as u64;
        let all: Vec<Summary> = tracks
            .iter()
            .enumerate()
            .map(|(r, tr)| Summary {
                flight: flight(r, ms),
                ..tr.summary(&ask)
            })
            .map(|s| Summary::decode(&s.encode()).unwrap())
            .collect();
        let v = Verdict::decode(&judge.judge(&all).encode()).unwrap();
        if let Some(f) = v.failure {
            return (f, v.hang, t.elapsed());
        }
        assert!(t.elapsed() < Duration::from_secs(5), "never named");
        ask = v.ask;
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Out at `mark` for `ms`, started or not.
fn out(mark: flight::Mark, started: bool, ms: u64) -> flight::Flight {
    flight::Flight::Out { mark, started, ms }
}

#[test]
fn a_stream_held_before_a_launch_every_rank_made_is_named_within_the_threshold() {
    // every rank made the same 6 launches: digests and counts agree
    let mut tracks = made(4, |_| (0..6).map(|i| coll(i, Func::AllReduce, 8)).collect());
    let stall = Duration::from_millis(200);
    let mut next = 6;
    let (found, hang, after) = judged_in_flight(
        &mut tracks,
        stall,
        |tracks| {
            // the hosts go on making launches (a GPU's calls return at
            // once): the digests always have a new cut to compare
            for tr in tracks {
                tr.fold(&coll(next, Func::AllReduce, 8));
            }
            next += 1;
        },
        // rank 2's stream never reaches launch 6; the others are in it
        |r, ms| out(flight::Mark::cut(6), r != 2, ms),
    );
    assert!(hang);
    assert!(after >= stall && after < 2 * stall + Duration::from_millis(100));
    assert!(
        found.0.starts_with(
            "hang: the stream of rank 2 has not reached collective launch 6 (AllReduce #5) for 0."
        ),
        "{}",
        found.0
    );
    assert!(found.0.ends_with("ranks 0,1,3 wait inside it for rank 2"));
    // the same launches with no flight known: nothing is named
    assert_eq!(judged(&tracks, 12), None);
}

#[test]
fn a_rank_behind_while_the_others_hang_in_a_launch_is_named_for_the_stall() {
    // PyTorch's isend before an all_reduce where the Send returns (the
    // stand-in's): rank 0 makes no sixth collective, the others are
    // inside theirs
    let mut tracks = made(4, |r| {
        let k = if r == 0 { 5 } else { 6 };
        (0..k).map(|i| coll(i, Func::AllReduce, 8)).collect()
    });
    let (found, hang, _) = judged_in_flight(
        &mut tracks,
        Duration::from_millis(200),
        |_| {},
        |r, ms| match r {
            0 => flight::Flight::Clear,
            _ => out(flight::Mark::cut(6), true, ms),
        },
    );
    assert!(!hang);
    assert_eq!(
        found.0,
        "rank 0 has made no collective launch past 5 for 0.2 s, while ranks 1,2,3 made launch 6 (AllReduce #5): NCCL waits for rank 0 there"
    );
}

#[test]
fn a_send_that_never_finishes_while_its_peer_waits_in_a_collective_is_named_with_both() {
    // the same on NCCL, where rank 0's Send waits for its Recv: its
    // Send/Recv launch after cut 5 is out, the others are in launch 6
    let mut tracks = made(4, |r| {
        let mut l: Vec<Launch> = (0..5).map(|i| coll(i, Func::AllReduce, 8)).collect();
        l.push(match r {
            0 => p2p(5, &[(Func::Send, 1, 16)]),
            _ => coll(5, Func::AllReduce, 8),
        });
        l
    });
    let (found, hang, _) = judged_in_flight(
        &mut tracks,
        Duration::from_millis(200),
        |_| {},
        |r, ms| match r {
            0 => out(flight::Mark::after(5), true, ms),
            _ => out(flight::Mark::cut(6), true, ms),
        },
    );
    assert!(!hang, "a Send without its Recv is a misuse, not a hang");
    assert_eq!(
        found.0,
        "Send/Recv pairs do not match, so NCCL can never complete them in order: rank 0's Send #1 to rank 1 has no matching Recv: rank 1 made 0 Recvs from rank 0; ranks 1,2,3 have made collective launch 6 (AllReduce #5) since, which rank 0 has not"
    );
}

#[test]
fn alltoallv_splits_that_are_not_the_transpose_are_named_with_no_collective_after() {
    // 5 AllReduces, then an AlltoAllv as grouped Sends and Recvs, the
    // program's last launch: rank 2 expects 5 elements from rank 0, which
    // sends 3; rank 2's launch never finishes, nor does rank 0's
    let split = |src: usize, dst: usize| 2 * src + dst + 1;
    let mut tracks = made(4, |r| {
        let mut l: Vec<Launch> = (0..5).map(|i| coll(i, Func::AllReduce, 8)).collect();
        let mut calls = Vec::new();
        for peer in 0..4 {
            calls.push((Func::Send, peer, split(r, peer)));
            let want = if (r, peer) == (2, 0) {
                5
            } else {
                split(peer, r)
            };
            calls.push((Func::Recv, peer, want));
        }
        l.push(p2p(5, &calls));
        l
    });
    let stall = Duration::from_millis(200);
    let (found, hang, after) = judged_in_flight(
        &mut tracks,
        stall,
        |_| {},
        |r, ms| match r {
            0 | 2 => out(flight::Mark::after(5), true, ms),
            _ => flight::Flight::Clear,
        },
    );
    assert!(!hang);
    assert!(after < 2 * stall + Duration::from_millis(100));
    assert_eq!(
        found,
        (
            "Send/Recv pairs do not match, so NCCL can never complete them in order: the Sends of rank 0 to rank 2 and the Recvs of rank 2 from rank 0 differ in count or datatype".to_string(),
            "rank 0: 1 Send (the last: count 3 float) to rank 2; rank 2: 1 Recv (the last: count 5 float) from rank 0".to_string()
        )
    );
    // with no flight out, a launch with no collective after it is never
    // compared: what the completion check adds
    assert_eq!(judged(&tracks, 12), None);
}

#[test]
fn sends_and_recvs_left_unmatched_at_the_end_are_named_once_they_never_can_match() {
    // the last launches: rank 0 sends twice to rank 1, which receives once
    let tracks = made(2, |r| {
        let mut l = vec![coll(0, Func::AllReduce, 8)];
        l.push(match r {
            0 => p2p(1, &[(Func::Send, 1, 4), (Func::Send, 1, 4)]),
            _ => p2p(1, &[(Func::Recv, 0, 4)]),
        });
        l
    });
    // while rank 1 goes on, its second Recv may still come
    assert_eq!(judged_closing(&tracks, &[], 12), None);
    assert_eq!(judged_closing(&tracks, &[0], 12), None);
    // once it has made its last call, it never will
    let (found, round) = judged_closing(&tracks, &[1], 12).unwrap();
    assert_eq!(
        found.0,
        "Send/Recv pairs do not match, so NCCL can never complete them in order: rank 0's Send #2 to rank 1 has no matching Recv: rank 1 made 1 Recv from rank 0"
    );
    assert!(round <= 3, "named in round {round}");
}

/// The signature tells apart calls that differ in any field the ranks
/// must agree on (each field of the packed word, the count, the scalar),
/// and ignores what they need not agree on (buffers, a root where the
/// function has none).
#[test]
fn signatures_differ_in_every_agreed_field() {
    let base = call(Func::Reduce, 1024, 3);
    let sig = |c: Call| launch_sig(&[c]);
    let differing = [
        Call {
            func: Func::AllReduce,
            ..base
        },
        Call {
            datatype: DataType::Float16,
            ..base
        },
        Call {
            op: RedOp::Max,
            ..base
        },
        Call {
            op: RedOp::PreMulSum(0.5),
            ..base
        },
        Call { root: 4, ..base },
        Call {
            root: 3 + (1 << 20),
            ..base
        },
        Call {
            count: 1025,
            ..base
        },
    ];
    for c in differing {
        assert_ne!(sig(c), sig(base), "{c:?} against {base:?}");
    }
    assert_ne!(
        sig(Call {
            op: RedOp::PreMulSum(0.5),
            ..base
        }),
        sig(Call {
            op: RedOp::PreMulSum(0.25),
            ..base
        })
    );
    let same = Call {
        sendbuff: 0x9000,
        recvbuff: 0xa000,
        ..base
    };
    assert_eq!(sig(same), sig(base));
    let all_gather = call(Func::AllGather, 64, 0);
    assert_eq!(
        sig(Call {
            root: 5,
            ..all_gather
        }),
        sig(all_gather)
    );
    assert_ne!(launch_sig(&[base, base]), sig(base));
}
