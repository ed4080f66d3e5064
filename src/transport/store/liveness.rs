//! The store when a peer or the store's own host stops: a rank killed
//! mid-job is marked gone by the hub the moment its connection closes, so
//! its peers stop waiting for it at once and hear why; a store that stops
//! answering (a listener that never reads, a hub whose process is frozen)
//! fails a rank's request within the request's deadline + 1 s; a look
//! at the store that a stall delays fails alone.
//!
//! Ranks and hubs that must be other processes are this test binary run
//! again for one test, with [`ROLE`] saying what to play; a child ends
//! itself after a minute, so none outlives its test. Every wait of a test
//! has a bound.

use super::auth;
use super::server::LOST;
use super::tests::{client, job_key, within};
use super::*;
use crate::core::ErrorKind;
use std::io::{BufRead, BufReader, Read as _, Write as _};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// What a child process of a test plays: `rank ADDR` (owner 1 of the hub
/// at ADDR, posting and then waiting to be killed) or `hub` (a hub that
/// prints its address and then waits to be frozen).
const ROLE: &str = "RANKWISE_STORE_TEST_ROLE";
/// The longest a child lives.
const CHILD_LIFE: Duration = Duration::from_secs(60);

fn soon(ms: u64) -> Instant {
    Instant::now() + Duration::from_millis(ms)
}

/// The test's name as the test harness knows it.
fn test_name(f: &str) -> String {
    let module = module_path!()
        .split_once("::")
        .map_or(module_path!(), |(_, m)| m);
    format!("{module}::{f}")
}

/// A child process, killed (SIGKILL ends a stopped one too) and waited
/// for when the test ends, passed or failed.
struct Kid(Child);

impl Drop for Kid {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// This test binary again, running test `f` only, playing `role`; its
/// lines on stdout come through the receiver.
fn spawn_child(f: &str, role: &str) -> (Kid, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args(["--exact", &test_name(f), "--nocapture", "--test-threads=1"])
        .env(ROLE, role)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let out = child.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (Kid(child), rx)
}

/// Whether process `pid` is stopped, as /proc says.
fn stopped(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .ok()
        .and_then(|s| Some(s.rsplit_once(") ")?.1.starts_with('T')))
        .unwrap_or(false)
}

/// What follows `prefix` on the first line from the child that holds it,
/// within 20 s.
fn line_from(rx: &std::sync::mpsc::Receiver<String>, prefix: &str) -> String {
    let until = soon(20_000);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let line = rx
            .recv_timeout(left)
            .unwrap_or_else(|_| panic!("the child said no {prefix:?} line within 20 s"));
        // (the harness's own words may come first on the line)
        if let Some((_, rest)) = line.split_once(prefix) {
            return rest.to_string();
        }
    }
}

/// A child's end: it waits to be killed, and goes by itself after
/// [`CHILD_LIFE`] if nobody does.
fn child_waits() -> ! {
    std::io::stdout().flush().unwrap();
    std::thread::sleep(CHILD_LIFE);
    std::process::exit(0)
}

fn pair(me: usize, value: &[u8]) -> Item<'_> {
    Item {
        key: "pair",
        owners: &[0, 1],
        me,
        value: Some(value),
        read: Read::Now,
    }
}

#[test]
fn a_rank_killed_mid_job_is_marked_gone_and_its_peers_stop_waiting_at_once() {
    const ME: &str = "a_rank_killed_mid_job_is_marked_gone_and_its_peers_stop_waiting_at_once";
    if let Ok(role) = std::env::var(ROLE) {
        // rank 1: in the job, then killed before it posts
        let addr: SocketAddr = role.strip_prefix("rank ").unwrap().parse().unwrap();
        let c = Client::connect(addr, &job_key(), 1, soon(10_000)).unwrap();
        c.set("rank 1 is here", b"").unwrap();
        println!("[ready]");
        child_waits();
    }
    let hub = Hub::start(job_key()).unwrap();
    let (mut child, lines) = spawn_child(ME, &format!("rank {}", hub.addr()));
    line_from(&lines, "[ready]");
    // rank 0 waits for rank 1's post, with a deadline far off
    let zero = client(&hub, 0);
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let answer = zero.exchange(&[pair(0, b"zero")], None, soon(30_000));
        let _ = tx.send((answer, Instant::now()));
    });
    std::thread::sleep(Duration::from_millis(300));
    let killed = Instant::now();
    child.0.kill().unwrap(); // SIGKILL: no FINISH, no word at all
    child.0.wait().unwrap();
    let (answer, at) = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("rank 0's wait did not end within 10 s of rank 1's death");
    let took = at - killed;
    assert!(took < Duration::from_secs(2), "{took:?}");
    let lost = Missing::Finished {
        reason: Some(LOST.to_string()),
    };
    assert_eq!(
        answer.unwrap(),
        vec![vec![Ok(b"zero".to_vec()), Err(lost.clone())]]
    );
    assert!(LOST.contains("closed without finishing"), "{LOST}");
    // ranks in the hub's process hear it too
    let store: Arc<dyn SideChannel> = hub.store().clone();
    assert_eq!(store.get("never", 1, soon(10_000)).unwrap(), Err(lost));
    // the launcher, which saw the process end, says it better
    hub.store()
        .mark_finished(1, Some("rank 1's process was killed by signal 9"));
    assert_eq!(
        hub.store().finished(1),
        Some(Some("rank 1's process was killed by signal 9".into()))
    );
}

#[test]
fn a_rank_that_said_it_finished_keeps_its_word_when_its_connection_closes() {
    let hub = Hub::start(job_key()).unwrap();
    let c = client(&hub, 2);
    c.finish(2, Some("rank 2 failed: its own reason")).unwrap();
    drop(c);
    // an owner with two connections is there while one stays open
    let (a, b) = (client(&hub, 3), client(&hub, 3));
    drop(a);
    let t = Instant::now();
    while hub.open_connections() > 1 {
        assert!(t.elapsed() < Duration::from_secs(5), "still open");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(
        hub.store().finished(2),
        Some(Some("rank 2 failed: its own reason".into()))
    );
    assert_eq!(hub.store().finished(3), None);
    drop(b);
    let t = Instant::now();
    while hub.store().finished(3).is_none() {
        assert!(t.elapsed() < Duration::from_secs(5), "owner 3 not marked");
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(hub.store().finished(3), Some(Some(LOST.into())));
}

#[test]
fn a_hub_whose_process_is_frozen_fails_requests_within_their_deadline_and_a_second() {
    const ME: &str =
        "a_hub_whose_process_is_frozen_fails_requests_within_their_deadline_and_a_second";
    if std::env::var(ROLE).is_ok() {
        let hub = Hub::start(job_key()).unwrap();
        println!("addr={}", hub.addr());
        child_waits();
    }
    let (child, lines) = spawn_child(ME, "hub");
    let addr: SocketAddr = line_from(&lines, "addr=").parse().unwrap();
    let c = Client::connect(addr, &job_key(), 0, soon(10_000)).unwrap();
    c.set("k", b"v").unwrap();
    let pid = child.0.id();
    // SAFETY: kill takes a pid and a signal number; the pid is our child's,
    // not yet waited for, so it names that process.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGSTOP) }, 0);
    let t = Instant::now();
    while !stopped(pid) {
        assert!(t.elapsed() < Duration::from_secs(5), "the hub did not stop");
        std::thread::sleep(Duration::from_millis(2));
    }
    // a key that is there: only a frozen hub does not answer at once
    let (got, took) = within(10, "a GET from a frozen hub", move || {
        let t = Instant::now();
        let got = c.get("k", 0, soon(500));
        (got, t.elapsed())
    });
    let e = got.unwrap_err();
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(e.message.contains(&addr.to_string()), "{e}");
    assert!(took < Duration::from_millis(1_500), "{took:?}");
    // a rank that connects now: the kernel takes the connection, the
    // frozen hub never says hello
    let (e, took) = within(10, "a connection to a frozen hub", move || {
        let t = Instant::now();
        let e = Client::connect(addr, &job_key(), 1, soon(300)).unwrap_err();
        (e, t.elapsed())
    });
    assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
    assert!(took < Duration::from_millis(1_300), "{took:?}");
    drop(child);
}

/// A store that takes connections and then goes quiet: after the
/// handshake when `greet`, never reading or answering again.
fn quiet_store(greet: bool) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        if greet {
            let sn = [4u8; auth::NONCE];
            s.write_all(&auth::hello(&sn)).unwrap();
            let mut p = [0u8; auth::PROOF_LEN];
            s.read_exact(&mut p).unwrap();
            let (owner, cn) = auth::check_proof(&job_key(), &sn, &p).unwrap();
            s.write_all(&auth::accept(&job_key(), &sn, &cn, owner))
                .unwrap();
        }
        // hold the connection open, reading nothing, answering nothing
        std::thread::sleep(Duration::from_secs(30));
        drop(s);
    });
    addr
}

#[test]
fn a_store_that_goes_quiet_fails_requests_within_their_deadline_and_a_second() {
    let slack = Duration::from_secs(1);
    // it never answers
    let addr = quiet_store(true);
    let c = Client::connect(addr, &job_key(), 0, soon(5_000)).unwrap();
    let (e, took) = within(10, "a GET from a quiet store", move || {
        let t = Instant::now();
        (c.get("k", 1, soon(500)).unwrap_err(), t.elapsed())
    });
    assert!(took < Duration::from_millis(500) + slack, "{took:?}");
    assert!(e.message.contains(&addr.to_string()), "{e}");
    assert_eq!(e.kind, crate::core::ErrorKind::Timeout);
    // it stops reading: a request too big for the socket's buffers
    let addr = quiet_store(true);
    let c = Client::connect(addr, &job_key(), 0, soon(5_000)).unwrap();
    let (first, took, again, took_again) =
        within(10, "an exchange to a store that stops reading", move || {
            let big = vec![0u8; 15 << 20];
            let it = Item {
                key: "x",
                owners: &[0, 1],
                me: 0,
                value: Some(&big),
                read: Read::Now,
            };
            let t = Instant::now();
            let first = c.exchange(&[it], None, soon(300)).unwrap_err();
            let took = t.elapsed();
            let t = Instant::now();
            let again = c.get("k", 1, soon(60_000)).unwrap_err();
            (first, took, again, t.elapsed())
        });
    assert!(took < Duration::from_millis(300) + slack, "{took:?}");
    assert!(first.message.contains(&addr.to_string()), "{first}");
    // its bytes are out of step now: later requests fail at once
    assert!(took_again < Duration::from_millis(100), "{took_again:?}");
    assert_eq!(again, first);
    // it never even says hello
    let addr = quiet_store(false);
    let (e, took) = within(10, "a connection to a silent listener", move || {
        let t = Instant::now();
        (
            Client::connect(addr, &job_key(), 0, soon(300)).unwrap_err(),
            t.elapsed(),
        )
    });
    assert!(took < Duration::from_millis(300) + slack, "{took:?}");
    assert!(e.message.contains(&addr.to_string()), "{e}");
}

/// A TCP relay in front of the hub at `hub` for one connection: what the
/// hub sends waits until the instant in the returned cell before it goes
/// on (a stalled network, one way).
fn stalling_relay(hub: SocketAddr) -> (SocketAddr, Arc<Mutex<Instant>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let hold = Arc::new(Mutex::new(Instant::now()));
    let held = hold.clone();
    std::thread::spawn(move || {
        let (rank, _) = l.accept().unwrap();
        let to_hub = TcpStream::connect(hub).unwrap();
        let (mut up_in, mut up_out) = (rank.try_clone().unwrap(), to_hub.try_clone().unwrap());
        std::thread::spawn(move || {
            let _ = std::io::copy(&mut up_in, &mut up_out);
            let _ = up_out.shutdown(Shutdown::Both);
        });
        let (mut down_in, mut down_out) = (to_hub, rank);
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = down_in.read(&mut buf) {
            let until = *held.lock().unwrap();
            std::thread::sleep(until.saturating_duration_since(Instant::now()));
            if down_out.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    (addr, hold)
}

/// A hub, the relay in front of it, and a client of owner 0 through it.
fn behind_a_relay() -> (Hub, SocketAddr, Arc<Mutex<Instant>>, Client) {
    let hub = Hub::start(job_key()).unwrap();
    let (addr, hold) = stalling_relay(hub.addr());
    let c = Client::connect(addr, &job_key(), 0, soon(5_000)).unwrap();
    (hub, addr, hold, c)
}

#[test]
fn a_look_answered_late_fails_alone_and_the_connection_stays_in_step() {
    let (_hub, addr, hold, c) = behind_a_relay();
    c.set("k", b"kept").unwrap();
    c.set("j", b"joined").unwrap();
    let stall = move |ms| *hold.lock().unwrap() = soon(ms);
    let (look, again, next, late, after) = within(20, "requests through a stall", move || {
        // a look (a GET whose deadline has passed) in a stall of 1.3 s
        // fails after its 750 ms; a second look, its answer still owed,
        // fails at once instead of stalling its caller again
        stall(1_300);
        let t = Instant::now();
        let look = (c.get("k", 0, Instant::now()), t.elapsed());
        let t = Instant::now();
        let again = (c.get("j", 0, Instant::now()), t.elapsed());
        // a request with a deadline ahead reads the late answer and then
        // its own, the one it asked for
        let t = Instant::now();
        let next = (c.get("j", 0, soon(3_000)), t.elapsed());
        // a look whose predecessor's answer has come by the time it asks
        // reads it, and then its own
        stall(1_000);
        let late = c.get("k", 0, Instant::now());
        std::thread::sleep(Duration::from_millis(800));
        let after = c.get("k", 0, Instant::now());
        (look, again, next, late, after)
    });
    for (what, (got, took), ms) in [("first", &look, 700..1_100), ("second", &again, 0..100)] {
        let e = got.as_ref().unwrap_err();
        assert_eq!(e.kind, ErrorKind::Timeout, "{what} look: {e}");
        assert!(e.message.contains(&addr.to_string()), "{e}");
        let took = took.as_millis();
        assert!(ms.contains(&took), "{what} look after {took} ms");
    }
    let (got, took) = next;
    assert_eq!(got.unwrap(), Ok(b"joined".to_vec()));
    assert!(took < Duration::from_millis(1_000), "{took:?}");
    assert_eq!(late.unwrap_err().kind, ErrorKind::Timeout);
    assert_eq!(after.unwrap(), Ok(b"kept".to_vec()));
}

#[test]
fn a_request_that_waits_and_is_answered_late_still_ends_the_connection() {
    let (_hub, _, hold, c) = behind_a_relay();
    c.set("k", b"kept").unwrap();
    *hold.lock().unwrap() = soon(1_500);
    let (first, then) = within(20, "requests through a stall", move || {
        let first = c.get("k", 0, soon(100));
        let t = Instant::now();
        (first, (c.get("k", 0, soon(3_000)), t.elapsed()))
    });
    // not a look: its answer was due, so the stall ends the connection
    let first = first.unwrap_err();
    assert_eq!(first.kind, ErrorKind::Timeout, "{first}");
    let (then, took) = then;
    assert_eq!(then.unwrap_err(), first);
    assert!(took < Duration::from_millis(100), "{took:?}");
}

#[test]
fn a_finish_while_a_look_is_unanswered_fails_at_once() {
    let (_hub, _, hold, c) = behind_a_relay();
    *hold.lock().unwrap() = soon(30_000);
    let (look, finish, took) = within(20, "a finish through a stall", move || {
        let look = c.get("k", 0, Instant::now());
        let t = Instant::now();
        let finish = c.finish(0, Some("rank 0 failed"));
        (look, finish, t.elapsed())
    });
    assert_eq!(look.unwrap_err().kind, ErrorKind::Timeout);
    // a failing rank tells the store it leaves, then returns its error:
    // with the store silent at its last look, at once, not 10 s later
    assert_eq!(finish.unwrap_err().kind, ErrorKind::Timeout);
    assert!(
        took < Duration::from_millis(100),
        "the finish failed after {took:?}"
    );
}

#[test]
fn a_set_after_a_look_went_unanswered_waits_for_the_late_answer() {
    let (_hub, _, hold, c) = behind_a_relay();
    *hold.lock().unwrap() = soon(1_300);
    let (look, set, took, got) = within(20, "a set through a stall", move || {
        let look = c.get("k", 0, Instant::now());
        // a post a call waits on: it reads the late answer, then its own
        let t = Instant::now();
        let set = c.set("k", b"kept");
        let took = t.elapsed();
        (look, set, took, c.get("k", 0, Instant::now()))
    });
    assert_eq!(look.unwrap_err().kind, ErrorKind::Timeout);
    set.unwrap();
    // it waited for the late answer, then got its own: well before the
    // 10 s a SET may take
    assert!(took < Duration::from_millis(1_000), "the set took {took:?}");
    assert_eq!(got.unwrap(), Ok(b"kept".to_vec()));
}
