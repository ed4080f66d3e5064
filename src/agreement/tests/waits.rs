//! Waits that end before their deadline because what they wait for can
//! be seen not to come, or to have come: a rank that posted and left while
//! it was asked about, and wait-for cycles of two ranks, on one lane and
//! by host; and posts between hosts, which must not end before their
//! readers' deadlines.

use super::*;

/// The store in front of the ranks: it runs `hook` (once) when a rank asks
/// whether another left (what that rank does while the question is on its
/// way), and keeps the deadline of each request that only posts (reads no
/// item).
struct Meanwhile {
    store: Arc<Store>,
    hook: std::sync::Mutex<Option<Box<dyn FnOnce() + Send>>>,
    posts: std::sync::Mutex<Vec<Instant>>,
}

impl Meanwhile {
    fn new(store: Arc<Store>, hook: Option<Box<dyn FnOnce() + Send>>) -> Meanwhile {
        Meanwhile {
            store,
            hook: std::sync::Mutex::new(hook),
            posts: std::sync::Mutex::new(Vec::new()),
        }
    }
}

impl SideChannel for Meanwhile {
    fn set(&self, key: &str, value: &[u8]) -> crate::core::Result<()> {
        self.store.set(key, value)
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> crate::core::Result<std::result::Result<Vec<u8>, crate::transport::store::Missing>> {
        if key.ends_with("/gone")
            && let Some(hook) = self.hook.lock().unwrap().take()
        {
            hook();
        }
        self.store.get(key, owner, deadline)
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> crate::core::Result<()> {
        self.store.finish(rank, error)
    }
    fn exchange(
        &self,
        items: &[crate::transport::store::Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> crate::core::Result<Vec<Vec<crate::transport::store::Share>>> {
        if items
            .iter()
            .all(|i| i.read == crate::transport::store::Read::Never)
        {
            self.posts.lock().unwrap().push(deadline);
        }
        self.store.exchange(items, note, deadline)
    }
    fn last_note(&self, owner: usize) -> crate::core::Result<Option<Vec<u8>>> {
        self.store.last_note(owner)
    }
}

/// A rank that posts, finishes the round and leaves between a waiting
/// rank's look at its slot and the store's answer to "did it leave?" came:
/// the waiting rank agrees, instead of naming it as gone without entering
/// (a false alarm seen at 64 ranks on one lane, at the last launch).
#[test]
fn a_rank_that_posts_and_leaves_while_asked_about_came() {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let mut peers = ranks(&store, dir.path(), (User::Engine, Via::Lane), "c0", 2);
    let mut one = peers.pop().unwrap();
    let mut zero = peers.pop().unwrap();
    let l = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
    let lane1 = one.link.as_mut().unwrap().lane.take().unwrap();
    let value = wire::encode_calls(l.op_count, &l.colls);
    let finisher = store.clone();
    let link = zero.link.take().unwrap();
    let mut link0 = Link::new(
        Arc::new(Meanwhile::new(
            store.clone(),
            Some(Box::new(move || {
                lane1.post(1, 0, &value);
                finisher.finish(1, None).unwrap();
            })),
        )),
        link.key.clone(),
        link.owners.clone(),
    );
    link0.lane = link.lane;
    let mut zero = Peers::new(0, 2, Some(link0));
    let got = agree_one(&mut zero, &l, Duration::from_secs(5));
    assert!(got.is_ok(), "{:?}", got.err().map(|f| f.error));
    drop(one);
}

/// Rank 0 waits in a collective for rank 1 while rank 1 waits in a Recv
/// from rank 0: a wait-for cycle, named by rank 0 at once from rank 1's
/// note on the lane (not at the deadline); rank 0 then leaves with it and
/// rank 1 hears why.
#[test]
fn a_wait_for_cycle_is_named_at_once_not_at_the_deadline() {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let long = Duration::from_secs(20);
    let got = on_ranks(
        ranks(&store, dir.path(), (User::Checker, Via::Lane), "c0", 2),
        |r, p| {
            let l = match r {
                0 => launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]),
                _ => launch(0, vec![], vec![call(Func::Recv, 4, 0)]),
            };
            let got = agree_one(p, &l, long);
            if let Err(f) = &got {
                p.leave(Some(&f.error.message)).unwrap();
            }
            got
        },
    );
    assert!(
        start.elapsed() < Duration::from_secs(3),
        "{:?}",
        start.elapsed()
    );
    let e = &got[0].as_ref().unwrap_err().error;
    assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
    let cycle = "deadlock: rank 0 waits in AllReduce (opCount 0) for rank 1, which waits in Recv (opCount 0) for rank 0's Send #0 to rank 1, which rank 0 has not made: neither can go on";
    assert_eq!(e.message, cycle);
    let e = &got[1].as_ref().unwrap_err().error;
    assert!(e.message.contains(cycle), "rank 1: {e}");
}

/// Ranks 0..4 on two simulated hosts (0 and 1 on one, 0 its leader and
/// the judge) making `program`'s launch, each leaving with its error: the
/// cycle `words` must end every rank's wait long before the 20 s deadline,
/// found by rank `finder` (a Deadlock there) and heard by every other.
fn cycle_by_host(program: impl Fn(usize) -> Launch + Sync, finder: usize, words: &str) {
    let store = Store::new();
    let dir = tempfile::tempdir().unwrap();
    let start = std::time::Instant::now();
    let got = on_ranks(
        ranks(&store, dir.path(), (User::Checker, Via::Hosts), "c0", 4),
        |r, p| {
            let got = agree_one(p, &program(r), Duration::from_secs(20));
            if let Err(f) = &got {
                p.leave(Some(&f.error.message)).unwrap();
            }
            got
        },
    );
    assert!(
        start.elapsed() < Duration::from_secs(5),
        "{:?}",
        start.elapsed()
    );
    let e = &got[finder].as_ref().unwrap_err().error;
    assert_eq!((e.kind, e.message.as_str()), (ErrorKind::Deadlock, words));
    for (r, g) in got.iter().enumerate() {
        let e = &g.as_ref().unwrap_err().error;
        assert!(e.message.contains(words), "rank {r}: {e}");
    }
}

/// The same cycle between a host's leader and a rank of its host: the
/// leader finds it while it gathers its host's posts.
#[test]
fn a_wait_for_cycle_within_a_host_is_named_by_its_leader() {
    cycle_by_host(
        |r| match r {
            1 => launch(0, vec![], vec![call(Func::Recv, 4, 0)]),
            _ => launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]),
        },
        0,
        "deadlock: rank 0 waits in AllReduce (opCount 0) for rank 1, which waits in Recv (opCount 0) for rank 0's Send #0 to rank 1, which rank 0 has not made: neither can go on",
    );
}

/// The other way round: the host's leader waits in a Send to a rank of
/// its host, which waits in an AllReduce for the leader's answer; that
/// rank reads the leader's note and names the cycle.
#[test]
fn a_wait_for_cycle_with_the_leader_is_named_by_its_rank() {
    cycle_by_host(
        |r| match r {
            0 => launch(0, vec![], vec![call(Func::Send, 4, 1)]),
            _ => launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]),
        },
        1,
        "deadlock: rank 1 waits in AllReduce (opCount 0) for rank 0, which waits in Send (opCount 0) for rank 1's Recv #0 from rank 0, which rank 1 has not made: neither can go on",
    );
}

/// Ranks on two hosts without lanes post through the store: their values
/// to their leader, the judge's table to the other leader, each leader's
/// table to its ranks. A post does not wait in the store, but its answer
/// may take as long as its reader waits: over TCP a post bounded by the
/// moment it was made would fail a call with time left at the first stall
/// of the network past 750 ms.
#[test]
fn posts_between_hosts_may_take_as_long_as_their_readers_wait() {
    let posts = Arc::new(Meanwhile::new(Store::new(), None));
    let n = 4;
    let hosts = vec![vec![0, 1], vec![2, 3]];
    let peers = (0..n)
        .map(|r| {
            let chan = posts.clone() as Arc<dyn SideChannel>;
            let mut link = Link::new(chan, "c0".to_string(), (0..n).collect());
            let t = tier::Tier::new(keys::tier("c0"), hosts.clone(), r, None);
            link.tier = Some(Box::new(t));
            Peers::new(r, n, Some(link))
        })
        .collect();
    let timeout = Duration::from_secs(10);
    let start = Instant::now();
    let l = launch(0, vec![call(Func::AllReduce, 4, 0)], vec![]);
    for (r, got) in on_ranks(peers, |_, p| agree_one(p, &l, timeout))
        .into_iter()
        .enumerate()
    {
        assert!(got.is_ok(), "rank {r}: {:?}", got.err().map(|f| f.error));
    }
    let deadlines = posts.posts.lock().unwrap();
    // ranks 1 and 3 to their leaders, the judge down, two leaders on
    assert!(deadlines.len() >= 4, "{} posts", deadlines.len());
    for d in deadlines.iter() {
        let ahead = d.saturating_duration_since(start);
        assert!(
            ahead >= timeout,
            "a post bounded {ahead:?} after the call began"
        );
    }
}
