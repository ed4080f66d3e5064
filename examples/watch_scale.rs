//! Watch mode at scale, on one machine: N ranks (threads) on H simulated
//! hosts (each host's ranks share a segment directory of their own, so
//! they meet on a lane of their own), every rank connected over TCP to one
//! store (`Hub`), as ranks on several hosts are. Each rank makes calls
//! (an AllReduce, a ring of Sends and Recvs, an AllGather per step, and
//! every tenth step an AlltoAllv: grouped Sends and Recvs to and from
//! every rank, the counts differing by pair) and
//! runs watch mode's rounds every 100 ms on its own thread; the harness
//! counts every request, and its bytes, that each rank's connection
//! carries, which together is what the store's process handles.
//!
//! ```text
//! cargo run --release --example watch_scale -- [--ranks 8,16,32,64,128,256] [--per-host 8] [--seconds 3] [--threshold 2] [--bug all|none|count|skip|extra|swap|unmatched|stuck|splits] [--flat]
//! ```
//!
//! Each rank's launches also go through watch mode's flights
//! (`agreement::watch::flight`) on a pretend stream that finishes every
//! launch at once; the `stuck` bug freezes the streams: one rank's before
//! its next launch, every other rank's inside it (the hang where every
//! rank's calls agree); the `splits` bug stops every rank inside an
//! exchange of Sends and Recvs whose counts differ on one pair, the
//! program's last launch. `--threshold` is `RANKWISE_TIMEOUT`: how long a
//! rank may make no collective, or a launch stay unfinished, before it is
//! named.
//!
//! Prints, per size: the store's messages and bytes per round (in and out)
//! and the judge's, and the set-up's once, for watch mode by hosts (and flat, every rank its own
//! host, with `--flat`); then, per bug class, the time from the call that
//! made it to the last rank hearing the failure, and the words; it exits
//! 1 when a bug is not named on every rank or a correct run is. The
//! machine's cores are shared by every rank: on 2 cores 256 ranks take
//! turns, and the times say so.

#[path = "support/scale.rs"]
mod scale;
use rankwise::agreement::watch::flight::{Events, Flights};
use rankwise::agreement::watch::{Ask, Summary, Track, Verdict, Watcher};
use rankwise::core::{Call, DataType, Func, Launch, RedOp};
use rankwise::transport::store::{Client, Hub, Key, SideChannel};
use scale::{Counted, arg, sizes};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier, Mutex};
use std::time::{Duration, Instant};

fn call(func: Func, count: usize, root: usize) -> Call {
    Call {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count,
        datatype: DataType::Float32,
        op: RedOp::Sum,
        op_code: 0,
        root,
    }
}

/// The rank that makes the bug.
fn culprit(n: usize) -> usize {
    (n / 2 + 1) % n
}

/// Step `i`'s launches on rank `r` of `n`, with the bug `bug` made by one
/// rank at step `at`.
fn step(r: usize, n: usize, i: u64, bug: &str, at: u64) -> Vec<Launch> {
    let l = |op: u64, colls: Vec<Call>, p2p: Vec<Call>| Launch {
        op_count: 4 * i + op,
        colls,
        p2p,
    };
    let ring = vec![
        call(Func::Send, 64, (r + 1) % n),
        call(Func::Recv, 64, (r + n - 1) % n),
    ];
    let mut out = vec![
        l(0, vec![call(Func::AllReduce, 1 << 20, 0)], vec![]),
        l(1, vec![], ring),
        l(2, vec![call(Func::AllGather, 256, 0)], vec![]),
    ];
    if i % 10 == 5 {
        // an AlltoAllv: rank s sends c(s, d) elements to d
        let c = |s: usize, d: usize| 1 + (7 * s + 3 * d + i as usize) % 5;
        let a2a = (0..n)
            .flat_map(|q| [call(Func::Send, c(r, q), q), call(Func::Recv, c(q, r), q)])
            .collect();
        out.push(l(3, vec![], a2a));
    }
    if i == at && bug == "splits" {
        // the program goes no further than this step's exchange, which
        // NCCL holds
        out.truncate(2);
    }
    if i == at && r == culprit(n) {
        match bug {
            "count" => out[0].colls[0].count += 1,
            "skip" => {
                out.remove(2);
            }
            "extra" => out.insert(2, l(2, vec![call(Func::Broadcast, 8, 0)], vec![])),
            "swap" => out.swap(0, 2),
            "unmatched" => out.insert(2, l(2, vec![], vec![call(Func::Send, 4, (r + 2) % n)])),
            // its Recv expects one more element than its peer sends
            "splits" => out[1].p2p[1].count += 1,
            _ => {}
        }
    }
    out
}

/// A rank's pretend stream: every mark is reached at once, up to `limit`
/// once the streams freeze.
#[derive(Default)]
struct Stream {
    issued: u64,
    limit: Option<u64>,
    /// per event, the position it was recorded at
    at: Vec<u64>,
}

impl Events for Stream {
    type Event = usize;
    fn create(&mut self) -> Option<usize> {
        self.at.push(0);
        Some(self.at.len() - 1)
    }
    fn record(&mut self, ev: usize, _stream: usize) -> bool {
        self.issued += 1;
        self.at[ev] = self.issued;
        true
    }
    fn reached(&mut self, ev: usize) -> Option<bool> {
        Some(self.limit.is_none_or(|l| self.at[ev] <= l))
    }
    fn destroy(&mut self, _ev: usize) {}
}

struct Outcome {
    /// per round, at the store: requests, bytes
    store: (f64, f64),
    /// the judge's requests and bytes per round
    judge: (f64, f64),
    rounds: u64,
    /// from the bug's call to the last rank hearing it, and the words
    heard: Option<(Duration, String)>,
    /// the set-up's requests and bytes at the store
    setup: (u64, u64),
    /// ranks that heard a failure (with no bug: false alarms)
    alarms: usize,
    hosts: usize,
    /// the fewest calls and launches a rank made
    made: (u64, u64),
}

fn run(
    n: usize,
    per_host: usize,
    seconds: f64,
    threshold: Duration,
    bug: &str,
    flat: bool,
) -> Outcome {
    let key = Key::random().unwrap();
    let hub = Hub::start(key.clone()).unwrap();
    let addr = hub.addr();
    let dirs: Vec<tempfile::TempDir> = (0..n.div_ceil(per_host))
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let dirs: Arc<Vec<std::path::PathBuf>> =
        Arc::new(dirs.iter().map(|d| d.path().to_path_buf()).collect());
    let requests: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let bytes: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let start = Arc::new(Barrier::new(n));
    let made = Arc::new(Mutex::new(None::<Instant>));
    let stop = Arc::new(AtomicBool::new(false));
    let setups = Arc::new(Mutex::new(Vec::<(u64, u64)>::new()));
    let calls: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let launches: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    // the bug is made 1 s into the run
    let at_step = 100;
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (key, dirs, start, made, stop) = (
                key.clone(),
                dirs.clone(),
                start.clone(),
                made.clone(),
                stop.clone(),
            );
            let (requests, bytes) = (requests[r].clone(), bytes[r].clone());
            let counted = (requests.clone(), bytes.clone());
            let setups = setups.clone();
            let (calls, launches) = (calls[r].clone(), launches[r].clone());
            let bug = bug.to_string();
            std::thread::spawn(move || -> (u64, Option<(Instant, String)>) {
                let deadline = Instant::now() + Duration::from_secs(120);
                let chan = Counted {
                    inner: Arc::new(Client::connect(addr, &key, r, deadline).unwrap()),
                    requests,
                    bytes,
                };
                let chan: Arc<dyn SideChannel> = Arc::new(chan);
                let owners: Vec<usize> = (0..n).collect();
                let dir = &dirs[r / per_host];
                let w = if flat {
                    Watcher::new(chan, "scale".into(), owners, r)
                } else {
                    let id = rankwise::agreement::tier::identity(dir);
                    Watcher::with_hosts(chan, "scale".into(), owners, r, id, Some(dir), deadline)
                        .unwrap()
                };
                let mut w = w.stall_after(threshold);
                let mut t = Track::new(r, n);
                let (mut stream, mut flights) = (Stream::default(), Flights::default());
                let mut ask = Ask::default();
                start.wait();
                // the rounds' traffic only: the set-up's is counted apart
                let setup = (
                    counted.0.swap(0, Ordering::Relaxed),
                    counted.1.swap(0, Ordering::Relaxed),
                );
                setups.lock().unwrap().push(setup);
                let t0 = Instant::now();
                let mut next_round = t0 + Duration::from_millis(100);
                let mut i = 0u64;
                let mut rounds = 0;
                loop {
                    // one step every 10 ms
                    while Instant::now() < next_round {
                        if Instant::now() >= t0 + Duration::from_millis(10 * i) {
                            if i == at_step {
                                made.lock().unwrap().get_or_insert_with(Instant::now);
                                if bug == "stuck" {
                                    // the culprit's stream stops before its
                                    // next launch, the others' inside it
                                    let inside = (r != culprit(n)) as u64;
                                    stream.limit = Some(stream.issued + inside);
                                }
                            }
                            // `splits`: nothing past the exchange that hangs
                            let made = match bug.as_str() {
                                "splits" if i > at_step => Vec::new(),
                                _ => step(r, n, i, &bug, at_step),
                            };
                            for l in made {
                                let k = (l.colls.len() + l.p2p.len()) as u64;
                                calls.fetch_add(k, Ordering::Relaxed);
                                launches.fetch_add(1, Ordering::Relaxed);
                                if let Some(m) = t.fold(&l) {
                                    flights.depart(&mut stream, m, 0);
                                    flights.land(&mut stream);
                                }
                                if bug == "splits" && i == at_step && l.colls.is_empty() {
                                    // every rank inside its exchange, none out
                                    stream.limit = Some(stream.issued - 1);
                                }
                            }
                            i += 1;
                        }
                        std::thread::sleep(Duration::from_millis(2));
                    }
                    next_round += Duration::from_millis(100);
                    let summary = Summary {
                        flight: flights.poll(&mut stream, Instant::now()),
                        ..t.summary(&ask)
                    };
                    let deadline = Instant::now() + Duration::from_secs(60);
                    let v: Verdict = w.round(&summary, deadline).unwrap();
                    rounds += 1;
                    if let Some((what, _)) = v.failure {
                        return (rounds, Some((Instant::now(), what)));
                    }
                    ask = v.ask;
                    if t0.elapsed().as_secs_f64() > seconds && !stop.load(Ordering::Relaxed) {
                        stop.store(true, Ordering::Relaxed);
                    }
                    if stop.load(Ordering::Relaxed) && bug == "none" {
                        return (rounds, None);
                    }
                    if t0.elapsed() > Duration::from_secs(30) {
                        return (rounds, None);
                    }
                }
            })
        })
        .collect();
    let results: Vec<(u64, Option<(Instant, String)>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let rounds = results.iter().map(|r| r.0).min().unwrap_or(1).max(1);
    let total_req: u64 = requests.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    let total_bytes: u64 = bytes.iter().map(|a| a.load(Ordering::Relaxed)).sum();
    let made = *made.lock().unwrap();
    let heard = match (made, results.iter().all(|r| r.1.is_some())) {
        (Some(m), true) => {
            let last = results
                .iter()
                .filter_map(|r| r.1.as_ref())
                .map(|h| h.0)
                .max()
                .unwrap();
            let words = results[0].1.as_ref().unwrap().1.clone();
            Some((last.saturating_duration_since(m), words))
        }
        _ => None,
    };
    let alarms = results.iter().filter(|r| r.1.is_some()).count();
    let setup = setups
        .lock()
        .unwrap()
        .iter()
        .fold((0, 0), |t, s| (t.0 + s.0, t.1 + s.1));
    let fewest = |v: &[Arc<AtomicU64>]| v.iter().map(|a| a.load(Ordering::Relaxed)).min();
    Outcome {
        made: (fewest(&calls).unwrap_or(0), fewest(&launches).unwrap_or(0)),
        setup,
        alarms,
        store: (
            total_req as f64 / rounds as f64,
            total_bytes as f64 / rounds as f64,
        ),
        judge: (
            requests[0].load(Ordering::Relaxed) as f64 / rounds as f64,
            bytes[0].load(Ordering::Relaxed) as f64 / rounds as f64,
        ),
        rounds,
        heard,
        hosts: if flat { n } else { n.div_ceil(per_host) },
    }
}

fn main() {
    let sizes = sizes("8,16,32,64,128,256");
    let per_host: usize = arg("--per-host").map_or(8, |s| s.parse().expect("--per-host"));
    let seconds: f64 = arg("--seconds").map_or(3.0, |s| s.parse().expect("--seconds"));
    let threshold = Duration::from_secs_f64(
        arg("--threshold").map_or(2.0, |s| s.parse().expect("--threshold")),
    );
    let bug = arg("--bug").unwrap_or_else(|| "all".into());
    let flat = std::env::args().any(|a| a == "--flat");
    // a bug not named, or a correct program named, fails the run
    let mut failed = false;
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "watch mode, ranks as threads on {cores} cores, {per_host} ranks per simulated host, rounds every 100 ms, threshold {} s; one store over TCP",
        threshold.as_secs_f64()
    );
    if bug == "none" || bug == "all" {
        println!();
        println!(
            "load per round, no bug ({seconds} s each; calls and launches: the fewest any rank made):"
        );
        println!(
            "{:>6} {:>6} {:>6} {:>8} {:>9} | {:>14} {:>14} | {:>14} {:>14} | {:>12} {:>12}",
            "ranks",
            "hosts",
            "rounds",
            "calls",
            "launches",
            "store req",
            "store bytes",
            "judge req",
            "judge bytes",
            "set-up req",
            "set-up bytes"
        );
        for &n in &sizes {
            for f in if flat { vec![false, true] } else { vec![false] } {
                let o = run(n, per_host, seconds, threshold, "none", f);
                if o.alarms > 0 {
                    println!(
                        "{n} ranks: a correct program was named on {} ranks",
                        o.alarms
                    );
                    failed = true;
                }
                println!(
                    "{:>6} {:>6} {:>6} {:>8} {:>9} | {:>14.1} {:>14.0} | {:>14.1} {:>14.0} | {:>12} {:>12}{}",
                    n,
                    o.hosts,
                    o.rounds,
                    o.made.0,
                    o.made.1,
                    o.store.0,
                    o.store.1,
                    o.judge.0,
                    o.judge.1,
                    o.setup.0,
                    o.setup.1,
                    if f { "  (flat)" } else { "" }
                );
            }
        }
    }
    let bugs: Vec<&str> = match bug.as_str() {
        "all" => vec![
            "count",
            "skip",
            "extra",
            "swap",
            "unmatched",
            "stuck",
            "splits",
        ],
        "none" => vec![],
        b => vec![b],
    };
    for &n in &sizes {
        if bugs.is_empty() {
            break;
        }
        println!();
        println!(
            "{n} ranks on {} hosts: from the bug's call to the last rank hearing it",
            n.div_ceil(per_host)
        );
        for b in &bugs {
            let o = run(n, per_host, seconds, threshold, b, flat);
            match o.heard {
                Some((d, what)) => println!("  {b:<10} {:>7.0} ms  {what}", d.as_secs_f64() * 1e3),
                None => {
                    println!("  {b:<10}  not named on every rank within 30 s");
                    failed = true;
                }
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
