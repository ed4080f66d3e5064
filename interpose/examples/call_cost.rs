//! What `librankwise_nccl.so` costs per call, on the CPU: rank processes
//! of this program (4 unless `--ranks` says otherwise) make AllReduces
//! through the tests' stand-in NCCL (`tests/standin/nccl.rs`, built here
//! with rustc), without the interposer, then with it at
//! `RANKWISE_CHECK=0`, `local`, `watch` and in full, the five modes interleaved over
//! several rounds.
//!
//! ```text
//! cargo build --release -p rankwise-nccl --lib --examples
//! target/release/examples/call_cost [--ranks 4] [--rounds 5] [--calls 2000] [--large-calls 200] [--noop-calls 200000] [--so PATH] [--standin PATH]
//! ```
//!
//! Three workloads: AllReduces of 2 int32 and of 64 Ki int32 (256 KiB)
//! through the stand-in, which moves the data through files in
//! `/dev/shm`, and AllReduces of 2 int32 through the stand-in made a no-op
//! (`RANKWISE_STANDIN_NULL=1`: an NCCL that costs nothing, so what is left
//! is the interposer's own cost, and the waits for the other ranks it
//! adds), 200,000 calls by default so that the loop outlasts a preemption
//! and includes watch mode's background rounds. Each rank times its own loop after a warm-up (and checks the
//! last result where data moves); a run's figure is its slowest rank's mean
//! per call (a collective waits for its last rank), a mode's the median
//! over rounds. Ranks are processes: on a machine with fewer cores than
//! ranks they take turns, and every wait between them is longer. For
//! scale, it first times one loopback TCP round trip on this machine: full
//! checks cost at least one per launch (a rank's request to the store).

use std::ffi::{c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

#[path = "../tests/support/standin.rs"]
mod support_standin;
#[path = "../tests/support/sym.rs"]
mod support_sym;
use support_sym::sym;

const INT32: c_int = 2;
const SUM: c_int = 0;
/// Elements of the large AllReduce: 256 KiB of int32.
const LARGE: usize = 1 << 16;
const WARMUP: usize = 50;

/// The modes, as (name, LD_PRELOAD the interposer, RANKWISE_CHECK).
const MODES: [(&str, bool, Option<&str>); 5] = [
    ("stand-in alone", false, None),
    ("RANKWISE_CHECK=0", true, Some("0")),
    ("RANKWISE_CHECK=local", true, Some("local")),
    ("RANKWISE_CHECK=watch", true, Some("watch")),
    ("full checks", true, None),
];

type Comm = *mut c_void;
type Ptr = *mut c_void;

fn main() {
    match std::env::var("CALL_COST_RANK") {
        Ok(r) => rank(r.parse().expect("CALL_COST_RANK is a rank")),
        Err(_) => parent(),
    }
}

fn arg(name: &str, default: usize) -> usize {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == name)
        .and_then(|i| args.get(i + 1))
        .map(|v| {
            v.parse()
                .unwrap_or_else(|_| panic!("{name} takes a number"))
        })
        .unwrap_or(default)
}

/// CPU-seconds this process's finished children have used.
fn children_seconds() -> f64 {
    // SAFETY: an all-zero rusage is valid, and getrusage fills it in.
    let mut u: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: a valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_CHILDREN, &mut u) };
    let s = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 * 1e-6;
    s(u.ru_utime) + s(u.ru_stime)
}

/// This machine's floor for anything the ranks do through a socket: the
/// µs of one 1-byte round trip over loopback TCP between two threads
/// (median of 5 runs of 2000), the trip a rank's request to the store
/// makes at least once per agreed launch.
fn tcp_round_trip() -> f64 {
    use std::io::{Read, Write};
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let echo = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_nodelay(true).unwrap();
        let mut b = [0u8; 1];
        while s.read_exact(&mut b).is_ok() {
            s.write_all(&b).unwrap();
        }
    });
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_nodelay(true).unwrap();
    let mut b = [0u8; 1];
    let runs: Vec<f64> = (0..5)
        .map(|_| {
            let t = Instant::now();
            for _ in 0..2000 {
                c.write_all(&b).unwrap();
                c.read_exact(&mut b).unwrap();
            }
            t.elapsed().as_secs_f64() * 1e6 / 2000.0
        })
        .collect();
    drop(c);
    echo.join().unwrap();
    median(&runs)
}

fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|s| s.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

/// The interposer: `--so PATH`, else the one beside this example
/// (`target/<profile>/examples/..`).
/// The path given after `flag`, if any.
fn path_arg(flag: &str) -> Option<PathBuf> {
    let args: Vec<String> = std::env::args().collect();
    args.iter()
        .position(|a| a == flag)
        .and_then(|i| args.get(i + 1))
        .map(PathBuf::from)
}

fn interposer() -> PathBuf {
    if let Some(p) = path_arg("--so") {
        return p;
    }
    let exe = std::env::current_exe().unwrap();
    let so = exe
        .parent()
        .unwrap()
        .parent()
        .unwrap()
        .join("librankwise_nccl.so");
    assert!(
        so.exists(),
        "{} is missing: cargo build --release -p rankwise-nccl",
        so.display()
    );
    so
}

/// What one run asks of its ranks.
struct Job<'a> {
    nranks: usize,
    lib: &'a Path,
    so: &'a Path,
    /// the loops: (elements, calls) each
    loops: &'a [(usize, usize)],
    /// the stand-in moves nothing
    null: bool,
}

/// One run of the ranks in `mode`: the slowest rank's µs per call of each
/// loop, and whether the unique id carried a side channel.
fn run(job: &Job<'_>, mode: usize) -> (Vec<f64>, bool) {
    let (_, preload, check) = MODES[mode];
    let dir = tempdir();
    let exe = std::env::current_exe().unwrap();
    let loops = job
        .loops
        .iter()
        .map(|(len, n)| format!("{len}x{n}"))
        .collect::<Vec<_>>()
        .join(",");
    let children: Vec<_> = (0..job.nranks)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.env("CALL_COST_RANK", r.to_string())
                .env("CALL_COST_NRANKS", job.nranks.to_string())
                .env("CALL_COST_DIR", &dir)
                .env("CALL_COST_LOOPS", &loops)
                .env("RANKWISE_STANDIN_LIB", job.lib)
                .env("RANKWISE_STANDIN_DIR", &dir)
                .env("RANKWISE_STANDIN_NULL", if job.null { "1" } else { "0" })
                .env("RANKWISE_TIMEOUT", "60")
                .env_remove("RANKWISE_CHECK")
                .env_remove("RANKWISE_DEBUG")
                .env_remove("LD_PRELOAD");
            if preload {
                // the interposer forwards to this stand-in, never to a real
                // libnccl.so.2 the loader would find on a GPU machine
                c.env("LD_PRELOAD", job.so)
                    .env("RANKWISE_NCCL_LIBRARY", job.lib);
            }
            if let Some(v) = check {
                c.env("RANKWISE_CHECK", v);
            }
            c.stdout(std::process::Stdio::piped()).spawn().unwrap()
        })
        .collect();
    let mut slowest = vec![0f64; job.loops.len()];
    for (r, c) in children.into_iter().enumerate() {
        let out = c.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "rank {r} failed: {text}");
        let w: Vec<f64> = text
            .split_whitespace()
            .filter_map(|x| x.parse().ok())
            .collect();
        assert_eq!(w.len(), job.loops.len(), "rank {r} said {text:?}");
        for (s, x) in slowest.iter_mut().zip(w) {
            *s = s.max(x);
        }
    }
    let id = std::fs::read(dir.join("id")).unwrap();
    let side = id[64..].iter().any(|b| *b != 0);
    let _ = std::fs::remove_dir_all(&dir);
    (slowest, side)
}

/// A fresh directory in memory (`/dev/shm`) where there is one: the
/// stand-in writes a file per rank per call, and on a disk's file system
/// that costs more, and varies more, than everything measured here.
fn tempdir() -> PathBuf {
    static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let k = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let shm = Path::new("/dev/shm");
    let base = if shm.is_dir() {
        shm.to_path_buf()
    } else {
        std::env::temp_dir()
    };
    let d = base.join(format!("rankwise-call-cost-{}-{k}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn median(v: &[f64]) -> f64 {
    let mut v = v.to_vec();
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn parent() {
    let nranks = arg("--ranks", 4);
    let rounds = arg("--rounds", 5);
    let calls = arg("--calls", 2000);
    let large = arg("--large-calls", 200);
    // a no-op call costs well under a microsecond: a loop of 2000 of them
    // lasts about a millisecond, where one preemption moves the mean, and
    // sees none of the background rounds watch mode runs every 100 ms
    let noop = arg("--noop-calls", 200_000);
    let so = interposer();
    let build = tempdir();
    // a stand-in built elsewhere, for a machine without rustc
    let lib = path_arg("--standin").unwrap_or_else(|| support_standin::build(&build));
    let cores = std::thread::available_parallelism().map_or(0, |n| n.get());
    println!(
        "{nranks} rank processes on {cores} CPUs; AllReduce of 2 int32 ({calls} calls) and of {LARGE} int32 = 256 KiB ({large} calls) through the stand-in, of 2 int32 through the no-op stand-in ({noop} calls); {WARMUP} warm-up calls each"
    );
    println!("interposer: {}", so.display());
    println!("load average before: {}", load_average());
    println!(
        "one loopback TCP round trip between two threads: {:.1} µs",
        tcp_round_trip()
    );
    let t = Instant::now();
    let (busy, ours) = (
        rankwise::machine::busy_seconds().unwrap_or(0.0),
        children_seconds(),
    );
    let data = Job {
        nranks,
        lib: &lib,
        so: &so,
        loops: &[(2, calls), (LARGE, large)],
        null: false,
    };
    let null = Job {
        loops: &[(2, noop)],
        null: true,
        ..data
    };
    // per mode, per workload, one figure per round
    let mut times = vec![vec![Vec::new(); 3]; MODES.len()];
    for round in 0..rounds {
        // each round starts from another mode, so drift in the machine's
        // load does not always land on the same one
        for k in 0..MODES.len() {
            let m = (round + k) % MODES.len();
            // the modes that compare across ranks reach a side channel
            let across = matches!(MODES[m].0, "full checks" | "RANKWISE_CHECK=watch");
            let (d, side) = run(&data, m);
            let (z, side_too) = run(&null, m);
            if side != across || side_too != across {
                // an interposer that does not know the mode (--so of an
                // older build) checks in full
                println!(
                    "warning: {}: the unique id {} a side channel",
                    MODES[m].0,
                    if side { "carried" } else { "did not carry" }
                );
            }
            for (w, x) in d.into_iter().chain(z).enumerate() {
                times[m][w].push(x);
            }
        }
    }
    let wall = t.elapsed().as_secs_f64();
    let ours = children_seconds() - ours;
    println!(
        "load average after: {}; {wall:.0} s, the ranks used {ours:.1} CPU-s, other processes {:.1} CPU-s",
        load_average(),
        (rankwise::machine::busy_seconds().unwrap_or(0.0) - busy - ours).max(0.0)
    );
    println!(
        "\nµs per call (slowest rank, median of {rounds} rounds; + is the difference from the stand-in alone)"
    );
    println!(
        "{:<22} {:>9} {:>8} {:>10} {:>8} {:>9} {:>8}",
        "", "stand-in", "8 B", "stand-in", "256 KiB", "no-op", "8 B"
    );
    let med: Vec<Vec<f64>> = times
        .iter()
        .map(|w| w.iter().map(|v| median(v)).collect())
        .collect();
    for (m, (name, _, _)) in MODES.iter().enumerate() {
        let cell = |w: usize| {
            let plus = if m == 0 {
                "-".to_string()
            } else {
                format!("{:+.2}", med[m][w] - med[0][w])
            };
            (med[m][w], plus)
        };
        let (a, pa) = cell(0);
        let (b, pb) = cell(1);
        let (c, pc) = cell(2);
        println!("{name:<22} {a:>9.1} {pa:>8} {b:>10.1} {pb:>8} {c:>9.2} {pc:>8}");
    }
    println!("\neach round's figures:");
    for (m, (name, _, _)) in MODES.iter().enumerate() {
        let all: Vec<String> = times[m]
            .iter()
            .map(|v| {
                v.iter()
                    .map(|x| format!("{x:.1}"))
                    .collect::<Vec<_>>()
                    .join(" ")
            })
            .collect();
        println!("{name:<22} [{}] [{}] [{}]", all[0], all[1], all[2]);
    }
    let _ = std::fs::remove_dir_all(&build);
}

// ---------------------------------------------------------------- a rank

/// A rank: NCCL as a program linked to it sees it (the interposer's entry
/// points first when preloaded), each loop timed, its µs per call printed.
fn rank(rank: usize) {
    let var = |k: &str| std::env::var(k).unwrap();
    let dir = PathBuf::from(var("CALL_COST_DIR"));
    let nranks: usize = var("CALL_COST_NRANKS").parse().unwrap();
    let loops: Vec<(usize, usize)> = var("CALL_COST_LOOPS")
        .split(',')
        .map(|l| {
            let (len, n) = l.split_once('x').unwrap();
            (len.parse().unwrap(), n.parse().unwrap())
        })
        .collect();
    let moves = var("RANKWISE_STANDIN_NULL") != "1";
    let lib = std::ffi::CString::new(var("RANKWISE_STANDIN_LIB")).unwrap();
    // SAFETY: loading the stand-in, whose initialisers are Rust's std's.
    let h = unsafe { libc::dlopen(lib.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!h.is_null(), "dlopen of the stand-in failed");
    let get_unique_id: unsafe extern "C" fn(*mut [u8; 128]) -> c_int = sym("ncclGetUniqueId");
    let init_rank: unsafe extern "C" fn(*mut Comm, c_int, [u8; 128], c_int) -> c_int =
        sym("ncclCommInitRank");
    let mem_alloc: unsafe extern "C" fn(*mut Ptr, usize) -> c_int = sym("ncclMemAlloc");
    let all_reduce: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> c_int =
        sym("ncclAllReduce");
    let destroy: unsafe extern "C" fn(Comm) -> c_int = sym("ncclCommDestroy");

    let mut id = [0u8; 128];
    let idf = dir.join("id");
    if rank == 0 {
        // SAFETY: an out-pointer to a whole id.
        assert_eq!(unsafe { get_unique_id(&mut id) }, 0);
        std::fs::write(dir.join("id.tmp"), id).unwrap();
        std::fs::rename(dir.join("id.tmp"), &idf).unwrap();
    } else {
        let t = Instant::now();
        loop {
            if let Ok(b) = std::fs::read(&idf) {
                id.copy_from_slice(&b);
                break;
            }
            assert!(t.elapsed() < Duration::from_secs(30), "no id from rank 0");
            std::thread::sleep(Duration::from_millis(1));
        }
    }
    let mut comm: Comm = std::ptr::null_mut();
    // SAFETY: out-pointer, size, id, rank.
    let rc = unsafe { init_rank(&mut comm, nranks as c_int, id, rank as c_int) };
    assert_eq!(rc, 0, "ncclCommInitRank");
    let buffer = |len: usize, v: i32| -> *mut i32 {
        let mut p: Ptr = std::ptr::null_mut();
        // SAFETY: an out-pointer and a size.
        assert_eq!(unsafe { mem_alloc(&mut p, len * 4) }, 0, "ncclMemAlloc");
        let p = p as *mut i32;
        // SAFETY: p holds len int32 (allocated just above).
        unsafe { std::slice::from_raw_parts_mut(p, len) }.fill(v);
        p
    };
    // one loop: µs per call of `n` timed calls of `len` int32, the last
    // result checked against the sum of the ranks' (rank + 1)s
    let timed = |len: usize, n: usize| -> f64 {
        let s = buffer(len, rank as i32 + 1);
        let d = buffer(len, 0);
        let go = || {
            let null = std::ptr::null_mut();
            // SAFETY: buffers of len int32 each.
            let rc = unsafe { all_reduce(s as Ptr, d as Ptr, len, INT32, SUM, comm, null) };
            assert_eq!(rc, 0, "AllReduce");
        };
        for _ in 0..WARMUP.min(n) {
            go();
        }
        let t = Instant::now();
        for _ in 0..n {
            go();
        }
        let us = t.elapsed().as_secs_f64() * 1e6 / n.max(1) as f64;
        if moves {
            let want = (nranks * (nranks + 1) / 2) as i32;
            // SAFETY: d holds len int32 the calls wrote.
            let got = unsafe { std::slice::from_raw_parts(d, len) };
            assert!(got.iter().all(|x| *x == want), "AllReduce result");
        }
        us
    };
    let us: Vec<String> = loops
        .iter()
        .map(|&(len, n)| format!("{:.3}", timed(len, n)))
        .collect();
    // SAFETY: a live communicator, destroyed once.
    assert_eq!(unsafe { destroy(comm) }, 0);
    println!("{}", us.join(" "));
}
