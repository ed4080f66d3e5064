//! The agreement as its two users set it up, over both channels: the NCCL
//! engine (the communicator `c0`, owner ids = ranks) and the checker (a
//! commId's hex, owner ids of its own), each through the store alone and
//! with its collectives on the shared-memory lane. Ranks are threads here;
//! every rank's outcome is checked.

use super::stop::Stop;
use super::*;
use crate::core::{Call, DataType, ErrorKind, Func, RedOp, agree as compare, wire};
use crate::transport::store::Store;

#[derive(Debug, Clone, Copy, PartialEq)]
enum User {
    Engine,
    Checker,
}

#[derive(Debug, Clone, Copy, PartialEq)]
enum Via {
    Store,
    Lane,
    /// two simulated hosts (rank r on host 2r/n), each meeting on a lane
    /// of its own, their leaders in the store: strict mode across hosts
    Hosts,
}

const ALL: [(User, Via); 6] = [
    (User::Engine, Via::Store),
    (User::Engine, Via::Lane),
    (User::Checker, Via::Store),
    (User::Checker, Via::Lane),
    (User::Engine, Via::Hosts),
    (User::Checker, Via::Hosts),
];

/// Lanes of `n` ranks, every one mapping one segment made in `dir`.
fn lanes(dir: &std::path::Path, n: usize) -> Vec<Option<Lane>> {
    let (first, path) = Lane::create(dir, n).unwrap();
    let nonce = first.nonce();
    let mut all = vec![Some(first)];
    let name = path.file_name().unwrap().as_encoded_bytes();
    all.extend((1..n).map(|_| Some(Lane::open(dir, name, nonce, n).unwrap())));
    std::fs::remove_file(path).unwrap();
    all
}

fn call(func: Func, count: usize, root: usize) -> Call {
    Call {
        func,
        sendbuff: 0x1000,
        recvbuff: 0x2000,
        count,
        datatype: DataType::Int32,
        op: RedOp::Sum,
        op_code: 0,
        root,
    }
}

/// The `n` ranks of the communicator `name` as `user` makes them, on
/// `store`, with a lane (its segment in `dir`) when `via` says so.
fn ranks(
    store: &Arc<Store>,
    dir: &std::path::Path,
    (user, via): (User, Via),
    name: &str,
    n: usize,
) -> Vec<Peers> {
    let (key, owners): (String, Vec<usize>) = match user {
        User::Engine => (name.to_string(), (0..n).collect()),
        User::Checker => {
            let base = wire::fnv1a(name.as_bytes()) as u32;
            let key = format!("{:016x}", wire::fnv1a(name.as_bytes()));
            (
                key,
                (0..n)
                    .map(|r| base.wrapping_add(r as u32) as usize)
                    .collect(),
            )
        }
    };
    let mut one_lane: Vec<Option<Lane>> = match via {
        Via::Store | Via::Hosts => (0..n).map(|_| None).collect(),
        Via::Lane => lanes(dir, n),
    };
    let hosts: Vec<Vec<usize>> = (0..2)
        .map(|h| (0..n).filter(|r| r * 2 / n == h).collect::<Vec<_>>())
        .filter(|h| !h.is_empty())
        .collect();
    let mut host_lanes: Vec<Option<Lane>> = hosts
        .iter()
        .flat_map(|h| match h.len() {
            1 => vec![None],
            k => lanes(dir, k),
        })
        .collect();
    (0..n)
        .map(|r| {
            let chan = store.clone() as Arc<dyn SideChannel>;
            let mut link = Link::new(chan, key.clone(), owners.clone());
            link.lane = one_lane[r].take();
            if via == Via::Hosts {
                let ns = keys::tier(&key);
                link.tier = Some(Box::new(tier::Tier::new(
                    ns,
                    hosts.clone(),
                    r,
                    host_lanes[r].take(),
                )));
            }
            Peers::new(r, n, Some(link))
        })
        .collect()
}

/// Launch `op_count` of `colls` and `p2p`.
fn launch(op_count: u64, colls: Vec<Call>, p2p: Vec<Call>) -> Launch {
    Launch {
        op_count,
        colls,
        p2p,
    }
}

/// Runs `program` on every rank (threads) and returns each rank's result.
fn on_ranks<T: Send>(peers: Vec<Peers>, program: impl Fn(usize, &mut Peers) -> T + Sync) -> Vec<T> {
    std::thread::scope(|sc| {
        let hs: Vec<_> = peers
            .into_iter()
            .enumerate()
            .map(|(r, mut p)| {
                let program = &program;
                sc.spawn(move || program(r, &mut p))
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    })
}

fn agree_one(p: &mut Peers, l: &Launch, timeout: Duration) -> Result<(), Failure> {
    agree(&mut [(p, l)], timeout)
}

const LONG: Duration = Duration::from_secs(30);

/// A training loop: two AllReduces (of a growing count) for every
/// Send/Recv ring; every launch agrees on every rank, and the store is
/// left holding nothing.
#[test]
fn launches_agree_round_after_round_and_leave_the_store_empty() {
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let n = 3;
        let rounds = on_ranks(ranks(&store, dir.path(), setup, "c0", n), |r, p| {
            for i in 0..300u64 {
                let l = match i % 3 {
                    0 | 1 => launch(i, vec![call(Func::AllReduce, 2 + i as usize, 0)], vec![]),
                    _ => launch(
                        i,
                        vec![],
                        vec![
                            call(Func::Send, 3, (r + 1) % n),
                            call(Func::Recv, 3, (r + n - 1) % n),
                        ],
                    ),
                };
                if let Err(f) = agree_one(p, &l, LONG) {
                    panic!("{setup:?}: launch {i} on rank {r}: {:?}", f.error);
                }
            }
            p.rounds()
        });
        assert_eq!(
            rounds,
            vec![200; n],
            "{setup:?}: one round per collective launch"
        );
        assert_eq!(store.key_count(), 0, "{setup:?}: every exchange was spent");
    }
}

/// A count that differs on one rank is the same Mismatch on every rank,
/// with both sides in full for the checker's line.
#[test]
fn a_mismatch_fails_every_rank_alike() {
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", 4), |r, p| {
            let ok = launch(0, vec![call(Func::Broadcast, 8, 1)], vec![]);
            agree_one(p, &ok, LONG).unwrap();
            let count = if r == 2 { 5 } else { 4 };
            agree_one(
                p,
                &launch(1, vec![call(Func::AllReduce, count, 0)], vec![]),
                LONG,
            )
        });
        for (r, g) in got.iter().enumerate() {
            let f = g.as_ref().unwrap_err();
            assert_eq!(f.error.kind, ErrorKind::Mismatch, "{setup:?} rank {r}");
            assert_eq!(
                f.error.message, "AllReduce #1: count differs: ranks 0,1,3 pass 4, rank 2 passes 5",
                "{setup:?} rank {r}"
            );
            assert_eq!(
                f.detail.as_deref(),
                Some(
                    "ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum"
                ),
                "{setup:?} rank {r}"
            );
        }
    }
}

/// A Send/Recv pair that disagrees between ranks 1 and 2 of a group stops
/// rank 0, whose own pairs with both matched, with their finding: the
/// verdict round.
#[test]
fn a_pair_that_fails_between_two_peers_stops_the_third() {
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let n = 3;
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", n), |r, p| {
            // every rank sends 2 to each other and receives 2, except that
            // rank 2 expects 3 from rank 1; a collective rides along
            let mut p2p = Vec::new();
            for q in (0..n).filter(|q| *q != r) {
                p2p.push(call(Func::Send, 2, q));
                p2p.push(call(Func::Recv, if (r, q) == (2, 1) { 3 } else { 2 }, q));
            }
            agree_one(p, &launch(0, vec![call(Func::AllReduce, 1, 0)], p2p), LONG)
        });
        let pair = "Send/Recv mismatch: rank 1's Send #0 to rank 2 (count 2, int32, opCount 0) meets rank 2's Recv #0 from rank 1 (count 3, int32, opCount 0)";
        for (r, g) in got.iter().enumerate() {
            let e = &g.as_ref().unwrap_err().error;
            assert_eq!(e.kind, ErrorKind::Mismatch, "{setup:?} rank {r}: {e}");
            let heard = format!("rank 1, a peer of this group, found: {pair}");
            match r {
                0 => assert!(e.message.starts_with(&heard), "{setup:?} rank 0: {e}"),
                _ => assert!(e.message.starts_with(pair), "{setup:?} rank {r}: {e}"),
            }
        }
        assert_eq!(
            store.key_count(),
            0,
            "{setup:?}: failed pairs are spent too"
        );
    }
}

/// A rank that never comes to the second launch: the others time out
/// naming it and where it was last; a Send to it is unmatched.
#[test]
fn a_rank_that_never_comes_is_named_with_where_it_was_last() {
    let t = Duration::from_millis(300);
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", 3), |r, p| {
            agree_one(
                p,
                &launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]),
                LONG,
            )
            .unwrap();
            match r {
                2 => None,
                1 => Some(agree_one(
                    p,
                    &launch(1, vec![], vec![call(Func::Send, 4, 2)]),
                    t,
                )),
                _ => Some(agree_one(
                    p,
                    &launch(1, vec![call(Func::Gather, 4, 0)], vec![]),
                    t,
                )),
            }
        });
        let f = got[0].as_ref().unwrap().as_ref().unwrap_err();
        assert_eq!(f.error.kind, ErrorKind::Timeout, "{setup:?}: {:?}", f.error);
        assert_eq!(
            f.error.message, "ranks 1,2 did not enter Gather #1 within 300ms",
            "{setup:?}"
        );
        assert_eq!(
            f.detail.as_deref(),
            Some("rank 1 was last in Send (opCount 1); rank 2 was last in AllReduce (opCount 0)"),
            "{setup:?}"
        );
        let f = got[1].as_ref().unwrap().as_ref().unwrap_err();
        assert_eq!(
            f.error.kind,
            ErrorKind::Unmatched,
            "{setup:?}: {:?}",
            f.error
        );
        assert_eq!(
            f.error.message,
            "Send #0 to rank 2 (count 4, int32, opCount 1) has no matching Recv: rank 2 posted none within 300ms",
            "{setup:?}"
        );
    }
}

/// A rank that leaves (its program ended, or failed) ends the others'
/// wait at once, long before their deadline, saying how it left.
#[test]
fn a_rank_that_leaves_ends_the_wait_at_once() {
    for (setup, why) in
        ALL.into_iter()
            .zip([None, Some("it broke"), Some("x"), None, Some("gone"), None])
    {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", 3), |r, p| {
            agree_one(
                p,
                &launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]),
                LONG,
            )
            .unwrap();
            if r == 1 {
                // after the others posted: they wait for rank 1 alone
                std::thread::sleep(Duration::from_millis(200));
                p.leave(why).unwrap();
                return None;
            }
            Some(agree_one(
                p,
                &launch(1, vec![call(Func::AllReduce, 4, 0)], vec![]),
                LONG,
            ))
        });
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{setup:?}: {:?}",
            start.elapsed()
        );
        for r in [0, 2] {
            let e = &got[r].as_ref().unwrap().as_ref().unwrap_err().error;
            match why {
                None => {
                    assert_eq!(e.kind, ErrorKind::Deadlock, "{setup:?} rank {r}: {e}");
                    assert_eq!(
                        e.message,
                        "rank 1 finished its program without entering AllReduce #1"
                    );
                }
                Some(w) => {
                    assert_eq!(e.kind, ErrorKind::RemoteError, "{setup:?} rank {r}: {e}");
                    assert_eq!(e.message, format!("rank 1 failed: {w}"));
                }
            }
        }
    }
}

/// A group across two communicators, which rank 0 lists in one order and
/// rank 1 in the other: both agree, without waiting on each other.
#[test]
fn a_group_across_communicators_agrees_in_any_order() {
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let a = ranks(&store, dir.path(), setup, "a", 2);
        let b = ranks(&store, dir.path(), setup, "b", 2);
        let pairs: Vec<Peers> = a.into_iter().chain(b).collect();
        let mut by_rank: Vec<Vec<Peers>> = vec![Vec::new(), Vec::new()];
        for (i, p) in pairs.into_iter().enumerate() {
            by_rank[i % 2].push(p);
        }
        std::thread::scope(|sc| {
            for (r, mut mine) in by_rank.into_iter().enumerate() {
                sc.spawn(move || {
                    let la = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
                    let lb = launch(
                        0,
                        vec![],
                        vec![call(Func::Send, 5, 1 - r), call(Func::Recv, 5, 1 - r)],
                    );
                    let (pa, pb) = mine.split_at_mut(1);
                    let got = if r == 0 {
                        agree(&mut [(&mut pa[0], &la), (&mut pb[0], &lb)], LONG)
                    } else {
                        agree(&mut [(&mut pb[0], &lb), (&mut pa[0], &la)], LONG)
                    };
                    if let Err(f) = got {
                        panic!("{setup:?} rank {r}: {:?}", f.error);
                    }
                });
            }
        });
        assert_eq!(store.key_count(), 0, "{setup:?}");
    }
}

/// A group of more collectives than a lane slot holds: its post goes to
/// the store under a key of its own (one per rank and slot, so the store
/// keeps two per rank however many launches), and the ranks still compare
/// it whole.
#[test]
fn a_group_larger_than_a_lane_slot_agrees_through_the_store() {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let colls: Vec<Call> = (0..600).map(|i| call(Func::AllReduce, i, 0)).collect();
    assert!(wire::encode_calls(0, &colls).len() > crate::transport::lane::SLOT_BYTES);
    let got = on_ranks(
        ranks(&store, dir.path(), (User::Checker, Via::Lane), "c0", 3),
        |r, p| {
            let ok: Vec<_> = (0..10)
                .map(|i| agree_one(p, &launch(i, colls.clone(), vec![]), LONG))
                .collect();
            let mut last = colls.clone();
            last[599].count += usize::from(r == 2);
            (ok, agree_one(p, &launch(10, last, vec![]), LONG))
        },
    );
    assert!(store.key_count() <= 2 * 3, "{} keys", store.key_count());
    for (r, (ok, bad)) in got.iter().enumerate() {
        assert!(ok.iter().all(Result::is_ok), "rank {r}: {ok:?}");
        let e = &bad.as_ref().unwrap_err().error;
        assert!(
            e.message.contains("count differs (call 599 of the group)"),
            "rank {r}: {e}"
        );
    }
}

/// The engine's exchange: every rank's post in rank order, on either
/// channel; a rank alone has its own.
#[test]
fn an_exchange_returns_every_ranks_post() {
    for setup in [(User::Engine, Via::Store), (User::Engine, Via::Lane)] {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let post = |r: usize| Posted {
            op_count: 7,
            calls: vec![Call {
                sendbuff: 0,
                recvbuff: 0,
                ..call(Func::Reduce, 10 + r, 1)
            }],
        };
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", 3), |r, p| {
            p.exchange(&post(r), LONG).unwrap()
        });
        for all in got {
            assert_eq!(all, (0..3).map(post).collect::<Vec<_>>(), "{setup:?}");
            assert!(compare::collectives(&all).is_err());
        }
    }
    let mut alone = Peers::new(0, 1, None);
    let mine = Posted::default();
    assert_eq!(alone.exchange(&mine, LONG).unwrap(), vec![mine]);
}

/// Without a link a rank still pairs its Sends to itself with its Recvs
/// from itself.
#[test]
fn sends_to_self_are_paired_without_a_link() {
    let mut p = Peers::new(1, 2, None);
    let ok = launch(
        0,
        vec![call(Func::AllReduce, 1, 0)],
        vec![call(Func::Send, 3, 1), call(Func::Recv, 3, 1)],
    );
    assert!(agree_one(&mut p, &ok, LONG).is_ok());
    let bad = launch(
        1,
        vec![],
        vec![call(Func::Send, 3, 1), call(Func::Recv, 4, 1)],
    );
    let e = agree_one(&mut p, &bad, LONG).unwrap_err().error;
    assert_eq!(e.kind, ErrorKind::Mismatch);
    assert!(e.message.contains("rank 1's Send #1 to rank 1"), "{e}");
    assert_eq!(p.rounds(), 0, "nothing was exchanged");
}

/// A stop raised from another thread ends a wait for a rank that never
/// comes at once, on the store and on the lane, with the stop's reason;
/// the stopped rank's lane post is taken back, so the late rank fails too
/// instead of going on alone.
#[test]
fn a_stop_ends_a_wait_at_once_and_the_late_rank_does_not_go_on() {
    for setup in [(User::Checker, Via::Store), (User::Checker, Via::Lane)] {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let mut peers = ranks(&store, dir.path(), setup, "c0", 2);
        let stop = Stop::new();
        let link = peers[0].link.take().unwrap();
        peers[0].link = Some(link.with_stop(stop.clone()));
        let got = on_ranks(peers, |r, p| {
            let l = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
            if r == 1 {
                // rank 1 comes only after rank 0 was stopped and left
                std::thread::sleep(Duration::from_millis(600));
                return agree_one(p, &l, Duration::from_secs(2)).map(|()| Duration::ZERO);
            }
            let raiser = stop.clone();
            let t = std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(100));
                raiser.raise("rank 0 called ncclCommAbort");
            });
            let start = std::time::Instant::now();
            let r = agree_one(p, &l, LONG);
            let took = start.elapsed();
            t.join().unwrap();
            // as a leaving rank does: its posts in the store become notices
            let link = p.link.as_ref().unwrap();
            let why = "rank 0 called ncclCommAbort";
            give_notice(&*link.chan, &stop.waiting(), why).unwrap();
            link.chan.finish(link.owner(0), Some(why)).unwrap();
            r.map(|()| took)
        });
        let e = &got[0].as_ref().unwrap_err().error;
        assert_eq!(e.kind, ErrorKind::CommFailed, "{setup:?}: {e}");
        assert_eq!(
            e.message,
            "the wait for the other ranks ended: rank 0 called ncclCommAbort"
        );
        let e = &got[1].as_ref().unwrap_err().error;
        let want = match setup.1 {
            Via::Lane => "rank 0 failed: rank 0 called ncclCommAbort",
            Via::Store | Via::Hosts => {
                "rank 0 will not make AllReduce #0: rank 0 called ncclCommAbort"
            }
        };
        assert_eq!(e.message, want, "{setup:?}");
    }
}

/// A stopped wait returns within a few milliseconds of the stop.
#[test]
fn a_stopped_wait_returns_within_milliseconds() {
    for setup in [(User::Checker, Via::Store), (User::Checker, Via::Lane)] {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let mut peers = ranks(&store, dir.path(), setup, "c0", 2);
        let stop = Stop::new();
        let link = peers[0].link.take().unwrap();
        let mut p = Peers::new(0, 2, Some(link.with_stop(stop.clone())));
        let raiser = stop.clone();
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            let at = std::time::Instant::now();
            raiser.raise("stopped");
            at
        });
        let l = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
        assert!(agree_one(&mut p, &l, LONG).is_err());
        let ended = std::time::Instant::now();
        let raised = t.join().unwrap();
        let late = ended - raised;
        assert!(late < Duration::from_millis(50), "{setup:?}: {late:?}");
        drop(peers);
    }
}

/// A launch one rank refused: the ranks that made it fail at once naming
/// that rank and its reason, in a collective and in a Send/Recv pair; the
/// refusing rank learns that they made it; when every rank refused it,
/// nobody fails.
#[test]
fn a_refused_launch_fails_the_ranks_that_made_it_at_once() {
    for setup in ALL {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let start = std::time::Instant::now();
        let why = "its call was refused there (ncclInvalidArgument on rank 1: AllReduce: recvbuff is NULL)";
        let got = on_ranks(ranks(&store, dir.path(), setup, "c0", 3), |r, p| {
            let all_refuse = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
            refuse(&mut [(&mut *p, &all_refuse)], "x", LONG).expect("every rank refused");
            let coll = launch(1, vec![call(Func::AllReduce, 4, 0)], vec![]);
            let first = if r == 1 {
                refuse(&mut [(&mut *p, &coll)], why, LONG)
            } else {
                agree_one(p, &coll, LONG)
            };
            let pair = match r {
                0 => launch(2, vec![], vec![call(Func::Send, 4, 1)]),
                1 => launch(2, vec![], vec![call(Func::Recv, 4, 0)]),
                _ => return (first, None),
            };
            let second = if r == 1 {
                refuse(&mut [(&mut *p, &pair)], "its Recv was refused there", LONG)
            } else {
                agree_one(p, &pair, LONG)
            };
            (first, Some(second))
        });
        assert!(start.elapsed() < Duration::from_secs(5), "{setup:?}");
        for r in [0, 2] {
            let e = &got[r].0.as_ref().unwrap_err().error;
            assert_eq!(e.kind, ErrorKind::RemoteError, "{setup:?}: {e}");
            assert_eq!(
                e.message,
                format!("rank 1 will not make AllReduce #1: {why}")
            );
        }
        let e = &got[1].0.as_ref().unwrap_err().error;
        assert!(
            e.message.starts_with("ranks 0,2 made AllReduce #1"),
            "{setup:?}: {e}"
        );
        let e = &got[0].1.as_ref().unwrap().as_ref().unwrap_err().error;
        assert!(
            e.message
                .starts_with("rank 1 will not make Send #0 to rank 1")
                && e.message.ends_with("its Recv was refused there"),
            "{setup:?}: {e}"
        );
        let e = &got[1].1.as_ref().unwrap().as_ref().unwrap_err().error;
        assert!(
            e.message.starts_with("rank 0 made Recv #0 from rank 0"),
            "{setup:?}: {e}"
        );
    }
}

mod waits;
