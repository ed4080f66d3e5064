//! The store's behaviour, the same through a [`Store`] in this process and
//! through a [`Hub`] over TCP.

use super::*;
use crate::core::ErrorKind;
use std::net::TcpListener;
use std::sync::Arc;
use std::time::Duration;

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// A job's key, the same in every test (each hub is its own job).
pub(super) fn job_key() -> Key {
    Key::from_bytes(*b"a key for the side channel tests")
}

/// Runs `f` on a thread and gives it `secs` to finish: its result, or a
/// failed test naming `what`.
pub(super) fn within<T: Send + 'static>(
    secs: u64,
    what: &str,
    f: impl FnOnce() -> T + Send + 'static,
) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(Duration::from_secs(secs))
        .unwrap_or_else(|_| panic!("{what} did not finish within {secs} s"))
}

/// A connection to `hub` as `owner`.
pub(super) fn client(hub: &Hub, owner: usize) -> Client {
    Client::connect(hub.addr(), &job_key(), owner, soon(5_000)).unwrap()
}

/// Four ranks' connections to `hub`, owners 0 to 3.
fn clients(hub: &Hub) -> Vec<Arc<dyn SideChannel>> {
    (0..4).map(|r| Arc::new(client(hub, r)) as _).collect()
}

const ALL: [usize; 4] = [0, 1, 2, 3];

/// Rank `me` of 4 posts `value` under `key` and reads everyone's.
fn all4(ch: &dyn SideChannel, key: &str, me: usize, value: &[u8], ms: u64) -> Vec<Share> {
    let it = Item {
        key,
        owners: &ALL,
        me,
        value: Some(value),
        read: Read::Now,
    };
    ch.exchange(&[it], None, soon(ms)).unwrap().remove(0)
}

fn exercise(chans: Vec<Arc<dyn SideChannel>>) {
    assert_eq!(chans.len(), 4);
    // an allgather: every rank posts its value and reads everyone's, in
    // one request, leaving a note of where it is
    let got: Vec<Vec<Share>> = std::thread::scope(|s| {
        let hs: Vec<_> = chans
            .iter()
            .enumerate()
            .map(|(r, ch)| {
                s.spawn(move || {
                    let value = [r as u8; 3];
                    let it = Item {
                        key: "x",
                        owners: &ALL,
                        me: r,
                        value: Some(&value),
                        read: Read::Now,
                    };
                    let note = format!("AllReduce (opCount {r})");
                    let mut a = ch
                        .exchange(&[it], Some((r, note.as_bytes())), soon(5_000))
                        .unwrap();
                    assert_eq!(a.len(), 1);
                    a.remove(0)
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    for g in got {
        assert_eq!(gathered(g), Ok((0..4).map(|r| vec![r as u8; 3]).collect()));
    }
    // a key nobody sets times out; one whose owner finished says so
    let t = Instant::now();
    assert_eq!(
        chans[0].get("never", 1, soon(150)).unwrap(),
        Err(Missing::Timeout)
    );
    assert!(t.elapsed() >= Duration::from_millis(140));
    // a party that never posts: the wait runs out its deadline and names
    // it, and its note says where it was last
    let t = Instant::now();
    let it = Item {
        key: "late",
        owners: &[0, 3],
        me: 0,
        value: Some(b"zero"),
        read: Read::Now,
    };
    let a = chans[0].exchange(&[it], None, soon(150)).unwrap();
    assert!(t.elapsed() >= Duration::from_millis(140));
    assert_eq!(a, vec![vec![Ok(b"zero".to_vec()), Err(Missing::Timeout)]]);
    assert_eq!(
        chans[0].last_note(3).unwrap(),
        Some(b"AllReduce (opCount 3)".to_vec())
    );
    assert_eq!(chans[0].last_note(7).unwrap(), None);
    chans[1].finish(1, Some("rank 1 failed: boom")).unwrap();
    let t = Instant::now();
    assert_eq!(
        chans[0].get("never", 1, soon(10_000)).unwrap(),
        Err(Missing::Finished {
            reason: Some("rank 1 failed: boom".into())
        })
    );
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "no waiting on a finished owner"
    );
    // a party that finished without posting ends the exchange at once:
    // it can never complete; the others not there yet are named too
    chans[2].finish(2, None).unwrap();
    let t = Instant::now();
    let a = all4(&*chans[0], "y", 0, b"y0", 10_000);
    assert!(t.elapsed() < Duration::from_secs(5), "{:?}", t.elapsed());
    assert_eq!(
        gathered(a),
        Err(vec![
            (
                1,
                Missing::Finished {
                    reason: Some("rank 1 failed: boom".into())
                }
            ),
            (2, Missing::Finished { reason: None }),
            (3, Missing::Timeout),
        ])
    );
    // a misused item is refused, not served
    let bad = Item {
        key: "bad",
        owners: &[0, 1],
        me: 2,
        value: Some(b""),
        read: Read::Now,
    };
    let e = chans[0].exchange(&[bad], None, soon(100)).unwrap_err();
    assert!(e.message.contains("party 2 of 2"), "{e}");
}

/// The reads of [`Read`]: posting now and reading later (ranks of a
/// group spanning stores), and posting only (a rank that failed).
fn reads(chans: &[Arc<dyn SideChannel>]) {
    let pair = [0usize, 1];
    let post = |me: usize, read| Item {
        key: "v",
        owners: &pair,
        me,
        value: Some(if me == 0 { b"a" } else { b"b" }),
        read,
    };
    let a = chans[0]
        .exchange(&[post(0, Read::Later)], None, soon(5_000))
        .unwrap();
    assert_eq!(a, vec![Vec::<Share>::new()], "nothing read yet");
    let b = chans[1]
        .exchange(&[post(1, Read::Never)], None, soon(5_000))
        .unwrap();
    assert_eq!(b, vec![Vec::<Share>::new()]);
    let read = Item {
        value: None,
        read: Read::Now,
        ..post(0, Read::Now)
    };
    let a = chans[0].exchange(&[read], None, soon(5_000)).unwrap();
    assert_eq!(a, vec![vec![Ok(b"a".to_vec()), Ok(b"b".to_vec())]]);
}

#[test]
fn threads_share_one_store() {
    let s = Store::new();
    let chans: Vec<Arc<dyn SideChannel>> = (0..4).map(|_| s.clone() as _).collect();
    reads(&chans);
    assert_eq!(s.key_count(), 0, "both parties read or will not");
    exercise(chans);
}

#[test]
fn processes_reach_the_hub_over_tcp() {
    let hub = Hub::start(job_key()).unwrap();
    let chans = clients(&hub);
    reads(&chans);
    assert_eq!(hub.store().key_count(), 0);
    exercise(chans);
    assert_eq!(
        hub.store().finished(1),
        Some(Some("rank 1 failed: boom".into()))
    );
    // what clients set, the parent reads directly; large values cross intact
    let c = client(&hub, 9);
    c.set("counted", b"").unwrap();
    assert_eq!(hub.store().peek("counted"), Some(vec![]));
    assert!(hub.open_connections() >= 1);
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i * 7) as u8).collect();
    c.set("big", &big).unwrap();
    assert_eq!(c.get("big", 0, soon(1_000)).unwrap(), Ok(big.clone()));
    let it = Item {
        key: "alone",
        owners: &[9],
        me: 0,
        value: Some(&big),
        read: Read::Now,
    };
    assert_eq!(
        c.exchange(&[it], None, soon(1_000)).unwrap(),
        vec![vec![Ok(big)]]
    );
}

/// `rounds` launches on 4 ranks, as the interposer makes them: an
/// AllReduce's exchange, a ring of Send/Recv pairs in the same request,
/// then the pairs' verdicts, every 7th with rank 0 posting its verdict
/// only (as a rank that failed does).
pub(super) fn launches(
    chans: &[Arc<dyn SideChannel>],
    rounds: usize,
    watch: impl Fn(usize) + Sync,
) {
    std::thread::scope(|s| {
        for (me, ch) in chans.iter().enumerate() {
            let watch = &watch;
            s.spawn(move || {
                let (next, prev) = ((me + 1) % 4, (me + 3) % 4);
                for i in 0..rounds {
                    let x = format!("x{i}");
                    let (sk, rk) = (format!("p{me}>{next}/{i}"), format!("p{prev}>{me}/{i}"));
                    let post = [me as u8; 80];
                    let items = [
                        Item {
                            key: &x,
                            owners: &ALL,
                            me,
                            value: Some(&post),
                            read: Read::Now,
                        },
                        Item {
                            key: &sk,
                            owners: &[me, next],
                            me: 0,
                            value: Some(&post),
                            read: Read::Now,
                        },
                        Item {
                            key: &rk,
                            owners: &[prev, me],
                            me: 1,
                            value: Some(&post),
                            read: Read::Now,
                        },
                    ];
                    let a = ch.exchange(&items, None, soon(20_000)).unwrap();
                    assert!(a.iter().flatten().all(Result::is_ok), "{a:?}");
                    let only_post = me == 0 && i % 7 == 0;
                    let verdicts: Vec<(String, [usize; 2], usize)> = [next, prev]
                        .iter()
                        .map(|&p| {
                            let (lo, hi) = (me.min(p), me.max(p));
                            (format!("v{lo}.{hi}/{i}"), [lo, hi], usize::from(me == hi))
                        })
                        .collect();
                    let items: Vec<Item<'_>> = verdicts
                        .iter()
                        .map(|(k, owners, party)| Item {
                            key: k,
                            owners,
                            me: *party,
                            value: Some(b""),
                            read: if only_post { Read::Never } else { Read::Now },
                        })
                        .collect();
                    ch.exchange(&items, None, soon(20_000)).unwrap();
                    watch(i);
                }
            });
        }
    });
}

#[test]
fn spent_exchanges_are_dropped_so_memory_follows_the_calls_in_flight() {
    let s = Store::new();
    let chans: Vec<Arc<dyn SideChannel>> = (0..4).map(|_| s.clone() as _).collect();
    let most = std::sync::atomic::AtomicUsize::new(0);
    launches(&chans, 10_000, |_| {
        most.fetch_max(s.key_count(), std::sync::atomic::Ordering::Relaxed);
    });
    assert_eq!(s.key_count(), 0, "every exchange was spent");
    // ranks are at most a launch apart: two launches' keys (an AllReduce,
    // 4 pairs and 4 verdicts each) at most
    let most = most.into_inner();
    assert!(most <= 18, "{most} keys held at once");
    // the same over TCP
    let hub = Hub::start(job_key()).unwrap();
    let chans = clients(&hub);
    launches(&chans, 1_000, |_| {});
    assert_eq!(hub.store().key_count(), 0);
}

#[test]
fn a_closed_hub_is_an_error_not_a_hang() {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        // accept one connection and drop it at once
        let _ = listener.accept();
    });
    let e = Client::connect(addr, &job_key(), 0, soon(5_000)).unwrap_err();
    t.join().unwrap();
    assert_eq!(e.kind, ErrorKind::RemoteError);
    assert!(
        e.message.contains(&format!("side channel at {addr}")),
        "{e}"
    );
    // nobody listens there any more: refused, on a loopback address that
    // ranks on another host could never have reached
    let e = Client::connect(addr, &job_key(), 0, soon(5_000)).unwrap_err();
    assert!(e.message.contains("the address is loopback"), "{e}");
}

/// Rank `me` posts its side of `key` (parties `owners`, `me` one of
/// them) and reads the other's, within `ms`: the other's share and how
/// long the wait took.
fn side(
    ch: &dyn SideChannel,
    key: &str,
    owners: [usize; 2],
    me: usize,
    ms: u64,
) -> (Share, Duration) {
    let party = usize::from(owners[1] == me);
    let it = Item {
        key,
        owners: &owners,
        me: party,
        value: Some(b"side"),
        read: Read::Now,
    };
    let note = format!("rank {me}'s launch");
    let t = Instant::now();
    let mut got = ch
        .exchange(&[it], Some((me, note.as_bytes())), soon(ms))
        .unwrap();
    (got.remove(0).remove(1 - party), t.elapsed())
}

/// Three ranks each wait for the next in a ring of pairs (a Send made
/// before its Recv, outside a group): each hears the cycle at once, its
/// own step first; a chain that ends in a rank that waits for nobody, and
/// waits on two communicators, are no cycle and wait out their deadline.
fn cycles(chans: &[Arc<dyn SideChannel>]) {
    let ring: Vec<_> = (0..3)
        .map(|r| {
            let ch = chans[r].clone();
            std::thread::spawn(move || {
                side(
                    &*ch,
                    &format!("c/p{r}>{}/0", (r + 1) % 3),
                    [r, (r + 1) % 3],
                    r,
                    10_000,
                )
            })
        })
        .collect();
    for (r, h) in ring.into_iter().enumerate() {
        let (share, took) = h.join().unwrap();
        let Err(Missing::Cycle(steps)) = share else {
            panic!("rank {r}: {share:?}");
        };
        assert!(took < Duration::from_secs(2), "rank {r} waited {took:?}");
        let keys: Vec<&str> = steps.iter().map(|w| w.key.as_str()).collect();
        let order: Vec<usize> = (0..3).map(|k| (r + k) % 3).collect();
        let want: Vec<String> = order
            .iter()
            .map(|q| format!("c/p{q}>{}/0", (q + 1) % 3))
            .collect();
        assert_eq!(keys, want, "rank {r}");
        for (w, q) in steps.iter().zip(&order) {
            assert_eq!((w.party, w.awaits), (0, 1), "rank {r}");
            assert_eq!(
                w.note.as_deref(),
                Some(format!("rank {q}'s launch").as_bytes())
            );
        }
    }
    let wait = |r: usize, key: &'static str, owners: [usize; 2]| {
        let ch = chans[r].clone();
        std::thread::spawn(move || side(&*ch, key, owners, r, 400))
    };
    let chain = [
        wait(0, "c/p0>1/1", [0, 1]),
        wait(1, "c/p1>2/1", [1, 2]),
        wait(1, "d/p1>0/0", [1, 0]),
        wait(0, "e/p0>1/0", [0, 1]),
    ];
    for h in chain {
        let (share, took) = h.join().unwrap();
        assert_eq!(share, Err(Missing::Timeout));
        assert!(took >= Duration::from_millis(390), "{took:?}");
    }
}

#[test]
fn waits_in_a_cycle_end_at_once_with_the_cycle() {
    let s = Store::new();
    let chans: Vec<Arc<dyn SideChannel>> = (0..3).map(|_| s.clone() as _).collect();
    cycles(&chans);
    let hub = Hub::start(job_key()).unwrap();
    cycles(&clients(&hub));
}

/// A rank in the hub's process waits on its store directly for a key a
/// rank over TCP sets, round after round, the set landing before, during
/// and after the wait's spin on the store's change counter: every wait
/// sees it. A change the wait missed would hold it to its 10 s deadline.
#[test]
fn a_rank_in_the_hubs_process_misses_no_change_round_after_round() {
    let hub = Hub::start(job_key()).unwrap();
    let here: Arc<dyn SideChannel> = hub.store().clone();
    let there = client(&hub, 1);
    const ROUNDS: usize = 60;
    let setter = std::thread::spawn(move || {
        for round in 0..ROUNDS {
            // 0, 40 or 80 µs after the reader started: inside the 20 µs
            // spin or past it, into the sleep
            std::thread::sleep(Duration::from_micros(40 * (round % 3) as u64));
            there.set(&format!("k/{round}"), &[round as u8]).unwrap();
        }
    });
    let t = Instant::now();
    for round in 0..ROUNDS {
        let got = here.get(&format!("k/{round}"), 1, soon(10_000)).unwrap();
        assert_eq!(got, Ok(vec![round as u8]), "round {round}");
    }
    setter.join().unwrap();
    assert!(
        t.elapsed() < Duration::from_secs(5),
        "{ROUNDS} rounds took {:?}",
        t.elapsed()
    );
}

/// Two ranks each wait in a Send for the other's Recv; the store finds
/// the cycle. Rank 0's watch-mode thread then posts on its own scope
/// (`c.w`) under rank 0's owner, which neither ends the cycle nor hears
/// of it; and rank 1, told of the cycle, fails: rank 0 still hears the
/// cycle, not rank 1's failure. A post of rank 0
/// on the cycle's own communicator means it left the wait: it then hears
/// that rank 1 failed.
#[test]
fn a_post_on_another_scope_keeps_a_rank_on_its_cycle() {
    use super::state::State;
    let item = |key, owners, me, value, read| Item {
        key,
        owners,
        me,
        value,
        read,
    };
    let mine = item("c/p0>1/0", &[0, 1], 0, None, Read::Now);
    let answer_of_rank_0 = |s: &mut State| {
        let mut shares = s.answers(&[mine]).remove(0);
        shares.remove(1)
    };
    let mut s = State::default();
    let sends = [
        item("c/p0>1/0", &[0, 1], 0, Some(b"send"), Read::Now),
        item("c/p1>0/0", &[1, 0], 0, Some(b"send"), Read::Now),
    ];
    for (o, send) in sends.iter().enumerate() {
        s.post(&[*send], None, Some(o)).unwrap();
    }
    s.look_for_cycles(Instant::now());
    assert!(s.settled(&mine));
    let watch = item("c.w/w3", &[0, 1], 0, Some(b"watch"), Read::Now);
    s.post(&[watch], None, Some(0)).unwrap();
    // the watch round waits for rank 1's post, cycle or not
    assert!(!s.settled(&watch));
    s.finish(1, Some("deadlock: rank 1 waits in Send"));
    let Err(Missing::Cycle(steps)) = answer_of_rank_0(&mut s) else {
        panic!("rank 0 lost its cycle to a post of another scope");
    };
    let keys: Vec<&str> = steps.iter().map(|w| w.key.as_str()).collect();
    assert_eq!(keys, ["c/p0>1/0", "c/p1>0/0"]);
    let next = item("c/x1", &[0, 1], 0, Some(b"calls"), Read::Now);
    s.post(&[next], None, Some(0)).unwrap();
    assert_eq!(
        answer_of_rank_0(&mut s),
        Err(Missing::Finished {
            reason: Some("deadlock: rank 1 waits in Send".into())
        })
    );
}
