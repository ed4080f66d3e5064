//! Strict mode at scale, on one machine: N ranks (threads) on H simulated
//! hosts (each host's ranks share a segment directory of their own), every
//! rank but rank 0 connected over TCP to one store (`Hub`), as ranks on
//! several hosts are; rank 0, in the store's process, asks it directly.
//! Every launch is agreed before it would go to NCCL: an AllReduce, a ring
//! of Sends and Recvs, an AllGather, over and over.
//!
//! ```text
//! cargo run --release --example strict_scale -- [--ranks 8,16,32,64] [--per-host 8] [--launches 300] [--mix all|colls|p2p]
//! ```
//!
//! `--cores-per-host K` pins each simulated host's ranks to K cores of
//! their own (host h to cores hK … hK+K-1, wrapping), so that hosts do not
//! take turns on one another's cores: with as many ranks per host as
//! cores, nothing is oversubscribed but the store's thread.
//!
//! `--mix colls` makes every launch a collective (AllReduce and AllGather
//! in turn), `--mix p2p` every launch the ring of Sends and Recvs: what
//! each kind of launch costs alone.
//!
//! For each size it runs the ranks three ways, one after the other: on
//! one host (every rank on one lane: the one-host figure), flat (every
//! rank in the store, as ranks on different hosts agreed before the tier),
//! and by hosts (the tier: each host's ranks on a lane of their own, one
//! leader per host in the store). Prints, per way, the time per launch
//! (the slowest rank's mean), and the store's requests and bytes per
//! launch, in all and at the judge (rank 0). Then a count that differs on
//! one rank: every rank must name it alike, or the run exits 1. The
//! machine's cores are shared by every rank: on 2 cores 64 ranks take
//! turns, and the times say so.

#[path = "support/scale.rs"]
mod scale;
use rankwise::agreement::{Link, Peers, agree, lane, tier};
use rankwise::core::{Call, DataType, ErrorKind, Func, Launch, RedOp};
use rankwise::transport::store::{Client, Hub, Key, SideChannel};
use scale::{Counted, arg, sizes};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

#[derive(Clone, Copy, PartialEq, Debug)]
enum Way {
    OneHost,
    Flat,
    Hosts,
}

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

/// Which launches a run makes.
#[derive(Clone, Copy, PartialEq, Debug)]
enum Mix {
    /// AllReduce, the ring of Sends and Recvs, AllGather, in turn
    All,
    /// AllReduce and AllGather in turn
    Colls,
    /// the ring alone
    P2p,
}

/// Launch `i` on rank `r` of `n`; rank n/2+1 passes a count one larger in
/// launch `bad` (None: no bug).
fn launch(r: usize, n: usize, i: u64, bad: Option<u64>, mix: Mix) -> Launch {
    let kind = match mix {
        Mix::All => i % 3,
        Mix::Colls => 2 * (i % 2),
        Mix::P2p => 1,
    };
    let (colls, p2p) = match kind {
        0 => {
            let wrong = bad == Some(i) && r == (n / 2 + 1) % n;
            (
                vec![call(Func::AllReduce, 1024 + usize::from(wrong), 0)],
                vec![],
            )
        }
        1 => (
            vec![],
            vec![
                call(Func::Send, 64, (r + 1) % n),
                call(Func::Recv, 64, (r + n - 1) % n),
            ],
        ),
        _ => (vec![call(Func::AllGather, 256, 0)], vec![]),
    };
    Launch {
        op_count: i,
        colls,
        p2p,
    }
}

struct Outcome {
    /// the slowest rank's mean time per launch
    per_launch: Duration,
    /// at the store per launch: requests, bytes; and the judge's
    store: (f64, f64),
    judge: (f64, f64),
    /// every rank's result of the launch with the bug (None: no bug)
    errors: Vec<Option<(ErrorKind, String)>>,
    hosts: usize,
}

/// Pins the calling thread to cores `first..first + k` (modulo the
/// machine's): its simulated host's.
fn pin(first: usize, k: usize) {
    let all = rankwise::machine::cores();
    // SAFETY: an all-zero cpu_set_t is an empty set; CPU_SET writes bits
    // inside it for indices below CPU_SETSIZE, which `% all` keeps them
    // (all is at most the machine's cores); sched_setaffinity reads the set
    // we pass with its size, for this thread (0).
    let ok = unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        for c in first..first + k {
            libc::CPU_SET(c % all, &mut set);
        }
        libc::sched_setaffinity(0, std::mem::size_of::<libc::cpu_set_t>(), &set) == 0
    };
    assert!(
        ok,
        "pinning to cores {first}..{}: {}",
        first + k,
        std::io::Error::last_os_error()
    );
}

fn run(n: usize, per_host: usize, launches: u64, way: Way, bad: Option<u64>, mix: Mix) -> Outcome {
    let key = Key::random().unwrap();
    let hub = Hub::start(key.clone()).unwrap();
    let addr = hub.addr();
    let per_host = if way == Way::OneHost { n } else { per_host };
    let dirs: Vec<tempfile::TempDir> = (0..n.div_ceil(per_host))
        .map(|_| tempfile::tempdir().unwrap())
        .collect();
    let dirs: Arc<Vec<std::path::PathBuf>> =
        Arc::new(dirs.iter().map(|d| d.path().to_path_buf()).collect());
    let requests: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let bytes: Vec<Arc<AtomicU64>> = (0..n).map(|_| Arc::default()).collect();
    let start = Arc::new(Barrier::new(n));
    let cores_per_host = cores_per_host();
    let threads: Vec<_> = (0..n)
        .map(|r| {
            let (key, dirs, start) = (key.clone(), dirs.clone(), start.clone());
            let store = hub.store().clone();
            let (requests, bytes) = (requests[r].clone(), bytes[r].clone());
            std::thread::spawn(move || {
                if let Some(k) = cores_per_host {
                    pin((r / per_host) * k, k);
                }
                let deadline = Instant::now() + Duration::from_secs(120);
                // rank 0 is in the store's process and asks it directly,
                // as the rank that made the unique id does in the library
                let inner: Arc<dyn SideChannel> = match r {
                    0 => store.clone(),
                    _ => Arc::new(Client::connect(addr, &key, r, deadline).unwrap()),
                };
                let chan = Counted {
                    inner,
                    requests: requests.clone(),
                    bytes: bytes.clone(),
                };
                let chan: Arc<dyn SideChannel> = Arc::new(chan);
                let owners: Vec<usize> = (0..n).collect();
                let dir = &dirs[r / per_host];
                let mut link = Link::new(chan.clone(), "scale".into(), owners.clone());
                match way {
                    Way::OneHost => {
                        link.lane = lane::join(dir, &*chan, "scale", r, &owners, true, deadline);
                        assert!(link.lane.is_some(), "rank {r}: no lane");
                    }
                    Way::Flat => {}
                    Way::Hosts => {
                        let id = tier::identity(dir);
                        link.tier =
                            tier::Tier::join(&link, r, id, dir, true, deadline).map(Box::new);
                        assert!(link.tier.is_some(), "rank {r}: no tier");
                    }
                }
                let mut p = Peers::new(r, n, Some(link));
                start.wait();
                // the launches' traffic only
                requests.store(0, Ordering::Relaxed);
                bytes.store(0, Ordering::Relaxed);
                let t0 = Instant::now();
                let mut error = None;
                for i in 0..launches {
                    let l = launch(r, n, i, bad, mix);
                    if let Err(f) = agree(&mut [(&mut p, &l)], Duration::from_secs(60)) {
                        error = Some((f.error.kind, f.error.message));
                        break;
                    }
                }
                let took = t0.elapsed() / launches as u32;
                let _ = p.leave(None);
                (took, error)
            })
        })
        .collect();
    let results: Vec<(Duration, Option<(ErrorKind, String)>)> =
        threads.into_iter().map(|t| t.join().unwrap()).collect();
    let per = |a: &[Arc<AtomicU64>]| {
        a.iter().map(|x| x.load(Ordering::Relaxed)).sum::<u64>() as f64 / launches as f64
    };
    Outcome {
        per_launch: results.iter().map(|r| r.0).max().unwrap_or_default(),
        store: (per(&requests), per(&bytes)),
        judge: (per(&requests[..1]), per(&bytes[..1])),
        errors: results.into_iter().map(|r| r.1).collect(),
        hosts: n.div_ceil(per_host),
    }
}

/// `--cores-per-host`, if given.
fn cores_per_host() -> Option<usize> {
    arg("--cores-per-host").map(|s| s.parse().expect("--cores-per-host takes a number"))
}

fn main() {
    let sizes = sizes("8,16,32,64");
    let per_host: usize = arg("--per-host").map_or(8, |s| s.parse().expect("--per-host"));
    let launches: u64 = arg("--launches").map_or(300, |s| s.parse().expect("--launches"));
    let mix = match arg("--mix").as_deref() {
        None | Some("all") => Mix::All,
        Some("colls") => Mix::Colls,
        Some("p2p") => Mix::P2p,
        Some(other) => panic!("--mix takes all, colls or p2p, not {other:?}"),
    };
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    let mut failed = false;
    println!(
        "strict mode, ranks as threads on {cores} cores{}, {per_host} ranks per simulated host, one store over TCP; {launches} launches ({})",
        cores_per_host().map_or(String::new(), |k| format!(
            ", each host's pinned to {k} of them"
        )),
        match mix {
            Mix::All => "AllReduce, a Send/Recv ring, AllGather",
            Mix::Colls => "AllReduce, AllGather",
            Mix::P2p => "a Send/Recv ring",
        }
    );
    println!(
        "{:>6} {:>6} {:>9} | {:>12} | {:>10} {:>12} | {:>10} {:>12}",
        "ranks",
        "hosts",
        "way",
        "µs/launch",
        "store req",
        "store bytes",
        "judge req",
        "judge bytes"
    );
    for &n in &sizes {
        for way in [Way::OneHost, Way::Flat, Way::Hosts] {
            if way == Way::Hosts && n <= per_host {
                continue;
            }
            let o = run(n, per_host, launches, way, None, mix);
            if let Some((r, e)) = o
                .errors
                .iter()
                .enumerate()
                .find_map(|(r, e)| e.clone().map(|e| (r, e)))
            {
                println!("{n} ranks {way:?}: a correct program failed on rank {r}: {e:?}");
                let mut seen: Vec<&(ErrorKind, String)> = Vec::new();
                for (q, e) in o.errors.iter().enumerate() {
                    if let Some(e) = e.as_ref().filter(|e| !seen.contains(e)) {
                        println!("  first on rank {q}: {e:?}");
                        seen.push(e);
                    }
                }
                failed = true;
            }
            println!(
                "{:>6} {:>6} {:>9} | {:>12.1} | {:>10.1} {:>12.0} | {:>10.1} {:>12.0}",
                n,
                o.hosts,
                format!("{way:?}"),
                o.per_launch.as_secs_f64() * 1e6,
                o.store.0,
                o.store.1,
                o.judge.0,
                o.judge.1
            );
        }
    }
    println!();
    println!("a count that differs on one rank (launch 30), by hosts:");
    for &n in sizes.iter().filter(|n| **n > per_host) {
        let o = run(n, per_host, 60, Way::Hosts, Some(30), Mix::All);
        let first = o.errors[0].clone();
        let alike = o.errors.iter().all(|e| *e == first);
        match (&first, alike) {
            (Some((ErrorKind::Mismatch, words)), true) => {
                println!("  {n} ranks on {} hosts: every rank: {words}", o.hosts)
            }
            _ => {
                println!("  {n} ranks: not named alike on every rank: {:?}", o.errors);
                failed = true;
            }
        }
    }
    if failed {
        std::process::exit(1);
    }
}
