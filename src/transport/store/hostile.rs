//! The store against peers that do not play by its rules, one test per
//! attack, each against a real [`Hub`] over TCP: the hub keeps serving,
//! the honest ranks get their answers, and nothing kept grows past its
//! bound. (A store that goes quiet, and ranks that vanish: `liveness`.)
//!
//! Every wait a test makes has a bound (a thread of its own, or a socket
//! timeout), so a store that hangs fails the test instead of hanging it.

use super::auth;
use super::codec::{EXCHANGE, FINISH, GET, LAST_NOTE, SET};
use super::state::{MAX_OWNER_BYTES, MAX_OWNER_KEYS};
use super::tests::{client, job_key, launches, within};
use super::*;
use std::io::{Read as _, Write as _};
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

fn put_str(b: &mut Vec<u8>, s: &[u8]) {
    b.extend_from_slice(&(s.len() as u32).to_le_bytes());
    b.extend_from_slice(s);
}

/// A GET request's body: key, owner, wait in ms.
fn get_body(key: &str, owner: u32, ms: u64) -> Vec<u8> {
    let mut b = vec![GET];
    put_str(&mut b, key.as_bytes());
    b.extend_from_slice(&owner.to_le_bytes());
    b.extend_from_slice(&ms.to_le_bytes());
    b
}

/// A connection to `hub` whose every read and write gives up after 10 s.
fn connect(hub: &Hub) -> TcpStream {
    let s = TcpStream::connect(hub.addr()).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    s.set_write_timeout(Some(Duration::from_secs(10))).unwrap();
    s
}

/// A connection that proved the job's key as `owner`, spoken to by hand.
fn authed(hub: &Hub, owner: u32) -> TcpStream {
    let mut s = connect(hub);
    let mut hello = [0u8; auth::HELLO_LEN];
    s.read_exact(&mut hello).unwrap();
    let sn = auth::read_hello(&hello).unwrap();
    let cn = [5u8; auth::NONCE];
    s.write_all(&auth::proof(&job_key(), &sn, &cn, owner))
        .unwrap();
    let mut accept = [0u8; auth::ACCEPT_LEN];
    s.read_exact(&mut accept).unwrap();
    assert!(auth::check_accept(&job_key(), &sn, &cn, owner, &accept));
    s
}

/// Writes one request frame.
fn send(s: &mut TcpStream, body: &[u8]) {
    s.write_all(&(body.len() as u32).to_le_bytes()).unwrap();
    s.write_all(body).unwrap();
}

/// The op byte of the answer that comes next on `s` (its frame's head
/// read and dropped).
fn answer_op(s: &mut TcpStream) -> u8 {
    let mut head = [0u8; 5];
    s.read_exact(&mut head).unwrap();
    head[4]
}

/// Whether the hub closed `s` (what it sent before closing is read and
/// dropped), within 10 s.
fn closed(s: &mut TcpStream) -> bool {
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut sink = [0u8; 4096];
    loop {
        match s.read(&mut sink) {
            Ok(0) => return true,
            Ok(_) => {}
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return true,
            Err(_) => return false,
        }
    }
}

/// Four honest ranks (owners 0..4) make `rounds` launches through `hub`
/// and get every value right, within `secs`.
fn honest_ranks_work(hub: &Hub, rounds: usize, secs: u64) {
    let chans: Vec<Arc<dyn SideChannel>> = (0..4).map(|r| Arc::new(client(hub, r)) as _).collect();
    within(secs, "the honest ranks' launches", move || {
        launches(&chans, rounds, |_| {})
    });
}

/// Threads of this process.
fn threads() -> usize {
    std::fs::read_dir("/proc/self/task").unwrap().count()
}

#[test]
fn a_connection_without_the_key_is_closed_and_nothing_is_kept() {
    let hub = Hub::start(job_key()).unwrap();
    // a rank with another job's key: refused at the handshake, saying why
    let wrong = Key::from_bytes([1; 32]);
    let e = Client::connect(hub.addr(), &wrong, 0, soon(5_000)).unwrap_err();
    assert!(e.message.contains("key is not the job's"), "{e}");
    assert!(e.message.contains(&hub.addr().to_string()), "{e}");
    // requests sent without any handshake: closed, not served
    let mut s = connect(&hub);
    let mut set = vec![SET];
    put_str(&mut set, b"result/0");
    put_str(&mut set, b"forged");
    s.write_all(&set).unwrap();
    s.write_all(&[0u8; auth::PROOF_LEN]).unwrap();
    assert!(closed(&mut s), "a connection that proves nothing is closed");
    // a proof for the right owner under another key
    let mut s = connect(&hub);
    let mut hello = [0u8; auth::HELLO_LEN];
    s.read_exact(&mut hello).unwrap();
    let sn = auth::read_hello(&hello).unwrap();
    s.write_all(&auth::proof(&wrong, &sn, &[2; auth::NONCE], 0))
        .unwrap();
    assert!(closed(&mut s));
    // nothing was kept for them, and the job's own ranks are served
    assert_eq!(hub.store().peek("result/0"), None);
    assert_eq!(hub.store().key_count(), 0);
    assert_eq!(hub.open_connections(), 0);
    assert!(
        hub.refused_connections() >= 3,
        "{}",
        hub.refused_connections()
    );
    let c = client(&hub, 0);
    c.set("result/0", b"mine").unwrap();
    assert_eq!(hub.store().peek("result/0"), Some(b"mine".to_vec()));
}

#[test]
fn a_client_that_never_reads_its_answers_holds_up_nobody() {
    let hub = Hub::start(job_key()).unwrap();
    // answers too big for the socket's buffers, asked for and never read:
    // a note first (the store once wrote it holding its lock), then a value
    let big = vec![7u8; 12 << 20];
    let setter = client(&hub, 9);
    setter.set("big", &big).unwrap();
    let it = Item {
        key: "noted",
        owners: &[9],
        me: 0,
        value: Some(b""),
        read: Read::Never,
    };
    let huge_note = setter.exchange(&[it], Some((9, &big[..8 << 20])), soon(5_000));
    if huge_note.is_err() {
        // the longest note the store keeps, then
        let note = vec![3u8; super::codec::MAX_NOTE];
        setter
            .exchange(&[it], Some((9, &note)), soon(5_000))
            .unwrap();
    }
    let mut greedy = authed(&hub, 7);
    for _ in 0..4 {
        let mut last = vec![LAST_NOTE];
        last.extend_from_slice(&9u32.to_le_bytes());
        send(&mut greedy, &last);
        send(&mut greedy, &get_body("big", 9, 0));
    }
    // the honest ranks go on, through the hub and in its process
    honest_ranks_work(&hub, 200, 60);
    let store: Arc<dyn SideChannel> = hub.store().clone();
    let value = within(20, "a read in the hub's process", move || {
        store.get("big", 9, soon(1_000)).unwrap().unwrap()
    });
    assert_eq!(value.len(), big.len());
    let other = client(&hub, 8);
    let got = within(20, "another client's read of the big value", move || {
        other.get("big", 9, soon(5_000)).unwrap().unwrap()
    });
    assert_eq!(got, big);
    drop(greedy);
    // and a note is bounded
    let e = huge_note.unwrap_err();
    assert!(e.message.contains("a note of 8388608 bytes"), "{e}");
}

#[test]
fn a_flood_of_keys_or_of_bytes_is_refused_and_what_is_kept_stays_bounded() {
    let hub = Hub::start(job_key()).unwrap();
    let c = client(&hub, 5);
    for i in 0..MAX_OWNER_KEYS {
        c.set(&format!("k{i}"), b"").unwrap();
    }
    let e = c.set("one too many", b"").unwrap_err();
    assert!(e.message.contains("keys per owner"), "{e}");
    // a key already held may be set again
    c.set("k0", b"again").unwrap();
    // values: 15 MiB each, up to the owner's bound
    let chunk = vec![1u8; 15 << 20];
    let mut kept = 0;
    for i in 0..8 {
        match c.set(&format!("k{i}"), &chunk) {
            Ok(()) => kept += 1,
            Err(e) => {
                assert!(
                    e.message.contains("bytes of keys and values per owner"),
                    "{e}"
                );
                break;
            }
        }
    }
    assert_eq!(kept, MAX_OWNER_BYTES / chunk.len());
    assert!(
        hub.store().held_bytes() <= MAX_OWNER_BYTES,
        "{}",
        hub.store().held_bytes()
    );
    // a key longer than the bound, refused with the reason
    let e = c.set(&"k".repeat(5000), b"").unwrap_err();
    assert!(e.message.contains("a key of 5000 bytes"), "{e}");
    // a frame longer than the bound: the client will not send it, and a
    // peer that announces one is closed before the hub reads it
    let e = c.set("huge", &vec![0u8; 17 << 20]).unwrap_err();
    assert!(
        e.message.contains("more than the side channel takes"),
        "{e}"
    );
    let mut s = authed(&hub, 6);
    s.write_all(&(1u32 << 31).to_le_bytes()).unwrap();
    assert!(closed(&mut s));
    // and its peers hear why it is gone
    let why = hub.store().finished(6).flatten().unwrap_or_default();
    assert!(
        why.contains("closed its connection before it finished: a frame of 2147483648 bytes"),
        "{why}"
    );
    // an exchange request of more items than the bound
    let mut ex = vec![EXCHANGE];
    ex.extend_from_slice(&0u64.to_le_bytes());
    ex.push(0);
    ex.extend_from_slice(&(u32::MAX).to_le_bytes());
    let mut s = authed(&hub, 6);
    send(&mut s, &ex);
    assert_eq!(answer_op(&mut s), super::codec::ERROR, "refused");
    // other owners are not held back by one owner's flood
    honest_ranks_work(&hub, 20, 30);
    assert!(hub.store().held_bytes() <= MAX_OWNER_BYTES + (1 << 20));
}

#[test]
fn thousands_of_connections_do_not_make_thousands_of_threads() {
    // each connection is two descriptors here (both ends in this process)
    let mut lim = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit with a valid rlimit.
    unsafe {
        libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim);
        lim.rlim_cur = lim.rlim_max;
        libc::setrlimit(libc::RLIMIT_NOFILE, &lim);
    }
    let n = 2_000.min((lim.rlim_cur as usize).saturating_sub(512) / 2);
    assert!(
        n >= 500,
        "too few descriptors for this test: {}",
        lim.rlim_cur
    );
    let hub = Hub::start(job_key()).unwrap();
    let before = threads();
    // strangers that connect and say nothing, and job ranks that prove
    // the key and stay
    let strangers: Vec<TcpStream> = (0..n)
        .map(|_| TcpStream::connect(hub.addr()).unwrap())
        .collect();
    let ranks: Vec<Client> = (0..200).map(|r| client(&hub, 100 + r)).collect();
    std::thread::sleep(Duration::from_millis(200));
    // (the other tests running beside this one start threads too)
    let during = threads();
    assert!(
        during <= before + 64,
        "{during} threads with {} connections open ({before} before)",
        n + ranks.len()
    );
    assert_eq!(hub.open_connections(), ranks.len());
    // the strangers' handshakes gave way; the job's ranks are served
    honest_ranks_work(&hub, 20, 30);
    assert!(hub.refused_connections() + super::server::MAX_HANDSHAKES >= n);
    drop(strangers);
    drop(ranks);
}

#[test]
fn a_finish_for_another_owner_is_refused() {
    let hub = Hub::start(job_key()).unwrap();
    let mallory = client(&hub, 2);
    let e = mallory
        .finish(1, Some("forged: rank 1 failed"))
        .unwrap_err();
    assert!(e.message.contains("FINISH for owner 1"), "{e}");
    assert_eq!(hub.store().finished(1), None);
    // owner 1's peers wait for its post, not for a forged end
    let one = client(&hub, 1);
    let it = |me: usize, v: &'static [u8]| Item {
        key: "pair",
        owners: &[0, 1],
        me,
        value: Some(v),
        read: Read::Now,
    };
    let zero = client(&hub, 0);
    let a = std::thread::spawn(move || zero.exchange(&[it(0, b"a")], None, soon(10_000)));
    let b = one.exchange(&[it(1, b"b")], None, soon(10_000)).unwrap();
    let want = vec![vec![Ok(b"a".to_vec()), Ok(b"b".to_vec())]];
    assert_eq!(b, want);
    assert_eq!(a.join().unwrap().unwrap(), want);
    // an owner may say it finished itself
    mallory.finish(2, None).unwrap();
    assert_eq!(hub.store().finished(2), Some(None));
}

#[test]
fn a_post_or_a_note_for_another_party_is_refused() {
    let hub = Hub::start(job_key()).unwrap();
    let mallory = client(&hub, 2);
    let forged = Item {
        key: "x",
        owners: &[0, 1],
        me: 0,
        value: Some(b"forged"),
        read: Read::Never,
    };
    let e = mallory.exchange(&[forged], None, soon(1_000)).unwrap_err();
    assert!(e.message.contains("not this connection's owner 2"), "{e}");
    let mine = Item {
        key: "own",
        owners: &[2],
        me: 0,
        value: Some(b""),
        read: Read::Never,
    };
    let e = mallory
        .exchange(
            &[mine],
            Some((1, b"rank 1 is at AllReduce (opCount 99)")),
            soon(1_000),
        )
        .unwrap_err();
    assert!(e.message.contains("a note for owner 1"), "{e}");
    assert_eq!(
        hub.store().key_count(),
        0,
        "nothing of either request was kept"
    );
    // (an onlooker of its own: owner 0's connection closing would mark it
    // gone)
    assert_eq!(client(&hub, 5).last_note(1).unwrap(), None);
    // the parties' own posts are what they read
    let (zero, one) = (client(&hub, 0), client(&hub, 1));
    let item = |me: usize, v: &'static [u8]| Item {
        key: "x",
        owners: &[0, 1],
        me,
        value: Some(v),
        read: Read::Now,
    };
    let a = std::thread::spawn(move || zero.exchange(&[item(0, b"zero")], None, soon(10_000)));
    let b = one
        .exchange(&[item(1, b"one")], None, soon(10_000))
        .unwrap();
    let want = vec![vec![Ok(b"zero".to_vec()), Ok(b"one".to_vec())]];
    assert_eq!(b, want);
    assert_eq!(a.join().unwrap().unwrap(), want);
}

#[test]
fn one_new_key_with_two_lists_of_parties_in_one_request_is_refused_not_a_panic() {
    static TWO: [usize; 2] = [0, 1];
    static THREE: [usize; 3] = [0, 1, 2];
    let (two, three) = (&TWO, &THREE);
    let items = |owners: [&'static [usize]; 2]| {
        owners.map(|o| Item {
            key: "dup",
            owners: o,
            me: 0,
            value: Some(b"v"),
            read: Read::Never,
        })
    };
    // in the hub's own process
    let store = Store::new();
    for order in [[&two[..], &three[..]], [&three[..], &two[..]]] {
        let e = store.exchange(&items(order), None, soon(100)).unwrap_err();
        assert!(e.message.contains("parties differ"), "{e}");
    }
    // over TCP: refused, and the connection, the hub and the honest ranks
    // go on
    let hub = Hub::start(job_key()).unwrap();
    let c = client(&hub, 0);
    for order in [[&two[..], &three[..]], [&three[..], &two[..]]] {
        let e = c.exchange(&items(order), None, soon(100)).unwrap_err();
        assert!(e.message.contains("parties differ"), "{e}");
    }
    assert_eq!(hub.store().key_count(), 0);
    let alone = Item {
        key: "alone",
        owners: &[0],
        me: 0,
        value: Some(b"fine"),
        read: Read::Now,
    };
    assert_eq!(
        c.exchange(&[alone], None, soon(1_000)).unwrap(),
        vec![vec![Ok(b"fine".to_vec())]]
    );
    honest_ranks_work(&hub, 20, 30);
    drop(c);
    let t = Instant::now();
    while hub.open_connections() > 0 {
        assert!(
            t.elapsed() < Duration::from_secs(5),
            "connections still counted open"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

#[test]
fn a_finish_sent_by_hand_for_another_owner_is_refused_too() {
    // the same as a forged FINISH from a Client, in raw bytes, so the
    // refusal is the hub's and not the client's
    let hub = Hub::start(job_key()).unwrap();
    let mut s = authed(&hub, 2);
    let mut b = vec![FINISH];
    b.extend_from_slice(&1u32.to_le_bytes());
    b.push(1);
    put_str(&mut b, b"forged");
    send(&mut s, &b);
    assert_eq!(answer_op(&mut s), super::codec::ERROR);
    assert_eq!(hub.store().finished(1), None);
}

/// Rank `me` of 2 sets up the shared-memory lane in `dir` through `ch`, its
/// allgathers being exchanges of the store under `key`'s rounds.
fn join_lane(
    ch: &dyn SideChannel,
    dir: &std::path::Path,
    key: &str,
    me: usize,
    value: Option<Vec<u8>>,
) -> (Option<crate::transport::lane::Lane>, Vec<Vec<u8>>) {
    let mut round = 0;
    let mut seen = Vec::new();
    let mut allgather = |mine: &[u8]| {
        round += 1;
        let k = format!("{key}/ring.{round}");
        let mine = match (&value, round) {
            (Some(v), 1) => v.as_slice(),
            _ => mine,
        };
        let it = Item {
            key: &k,
            owners: &[0, 1],
            me,
            value: Some(mine),
            read: Read::Now,
        };
        let a = ch.exchange(&[it], None, soon(10_000)).ok()?;
        let all: Vec<Vec<u8>> = a
            .into_iter()
            .next()?
            .into_iter()
            .collect::<Result<_, _>>()
            .ok()?;
        seen.push(all[1 - me].clone());
        Some(all)
    };
    let lane = crate::transport::lane::join_with(dir, me, 2, true, &mut allgather);
    (lane, seen)
}

#[test]
fn a_segment_path_posted_by_a_peer_is_never_opened() {
    // rank 0 (a process holding the id, or a forged post if one could be
    // made) names a real segment outside rank 1's directory, by an
    // absolute path, by `..`, and by a link under a segment's name
    let hub = Hub::start(job_key()).unwrap();
    let (dir, outside) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (seg, target) = crate::transport::lane::Lane::create(outside.path(), 2).unwrap();
    let file_name = target.file_name().unwrap().to_str().unwrap().to_string();
    let out_dir = outside.path().file_name().unwrap().to_str().unwrap();
    let link = "rankwise-1-00000000000000ab";
    std::os::unix::fs::symlink(&target, dir.path().join(link)).unwrap();
    let injected = [
        target.to_str().unwrap().to_string(),
        format!("../{out_dir}/{file_name}"),
        link.to_string(),
    ];
    let (zero, one) = (Arc::new(client(&hub, 0)), Arc::new(client(&hub, 1)));
    for (i, name) in injected.iter().enumerate() {
        let key = format!("c{i}");
        let post = [&[1u8][..], &seg.nonce().to_le_bytes(), name.as_bytes()].concat();
        let (z, k, d) = (zero.clone(), key.clone(), dir.path().to_path_buf());
        let rank0 = std::thread::spawn(move || join_lane(&*z, &d, &k, 0, Some(post)).1);
        let (o, k, d) = (one.clone(), key.clone(), dir.path().to_path_buf());
        let (lane, _) = within(20, "rank 1's lane set-up", move || {
            join_lane(&*o, &d, &k, 1, None)
        });
        let said = rank0.join().unwrap();
        assert!(lane.is_none(), "rank 1 mapped {name:?}");
        assert_eq!(
            said.get(1),
            Some(&vec![0u8]),
            "rank 1 says it mapped nothing for {name:?}"
        );
    }
    // the link is still a link, and the hub serves on
    assert!(
        std::fs::symlink_metadata(dir.path().join(link))
            .unwrap()
            .file_type()
            .is_symlink()
    );
    honest_ranks_work(&hub, 5, 30);
}
