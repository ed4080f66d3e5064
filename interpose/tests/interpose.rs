//! `librankwise_nccl.so` in front of a stand-in NCCL (`tests/standin/nccl.rs`,
//! built here with `rustc` into `libnccl.so.2`: NCCL's C API over host
//! memory across processes). Every test starts N rank processes of this
//! test binary (`rank_main` below is the rank program) with the interposer
//! in `LD_PRELOAD`; each rank dlopens the stand-in (`RTLD_GLOBAL`) and calls
//! the NCCL API through `dlsym(RTLD_DEFAULT)`, as a program linked against
//! libnccl would, so its calls meet the interposer first.
//!
//! Every test here uses the stand-in; none needs a GPU.

use std::ffi::{c_char, c_int, c_void};
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;
use support_sym::sym;

// ---------------------------------------------------------------- the libraries

/// `librankwise_nccl.so` beside this test in `target/<profile>/deps` (cargo
/// builds it there for the tests: the crate is an rlib as well), or in
/// `target/<profile>` after a `cargo build`.
fn interposer() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let deps = exe.parent().unwrap();
    for p in [
        deps.join("librankwise_nccl.so"),
        deps.parent().unwrap().join("librankwise_nccl.so"),
    ] {
        if p.exists() {
            return p;
        }
    }
    panic!(
        "librankwise_nccl.so is not next to {} (cargo build --release -p rankwise-nccl)",
        exe.display()
    );
}

/// The stand-in NCCL, built once per test run with the same rustc.
fn standin() -> &'static Path {
    static LIB: OnceLock<PathBuf> = OnceLock::new();
    LIB.get_or_init(|| {
        let dir = std::env::current_exe()
            .unwrap()
            .parent()
            .unwrap()
            .join(format!("standin-nccl-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        support_standin::build(&dir)
    })
}

// ---------------------------------------------------------------- running ranks

struct Run {
    outputs: Vec<Output>,
    dir: tempfile::TempDir,
    elapsed: Duration,
}

impl Run {
    fn stderr(&self, r: usize) -> String {
        String::from_utf8_lossy(&self.outputs[r].stderr).into_owned()
    }
    fn stdout(&self, r: usize) -> String {
        String::from_utf8_lossy(&self.outputs[r].stdout).into_owned()
    }
    /// Every rank exited 0 (its own assertions held).
    fn assert_ok(&self) {
        for (r, o) in self.outputs.iter().enumerate() {
            assert!(
                o.status.success(),
                "rank {r} failed: {}\nstdout:\n{}\nstderr:\n{}",
                o.status,
                self.stdout(r),
                self.stderr(r)
            );
        }
    }
    /// The interposer's error lines of rank `r`.
    fn errors(&self, r: usize) -> Vec<String> {
        self.stderr(r)
            .lines()
            .filter(|l| l.starts_with("rankwise: nccl"))
            .map(str::to_string)
            .collect()
    }
}

/// Runs `scenario` on `n` rank processes, the interposer preloaded unless
/// `preload` is false, with extra environment `env`.
fn run(scenario: &str, n: usize, preload: bool, env: &[(&str, &str)]) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    let start = Instant::now();
    let children: Vec<_> = (0..n)
        .map(|r| {
            let mut c = Command::new(&exe);
            c.args([
                "--exact",
                "rank_main",
                "--nocapture",
                "--test-threads=1",
                "-q",
            ])
            .env("RANKWISE_TEST_RANK", r.to_string())
            .env("RANKWISE_TEST_NRANKS", n.to_string())
            .env("RANKWISE_TEST_SCENARIO", scenario)
            .env("RANKWISE_TEST_DIR", dir.path())
            .env("RANKWISE_STANDIN_DIR", dir.path())
            .env("RANKWISE_STANDIN_LIB", standin())
            .env("RANKWISE_STANDIN_TIMEOUT", "10")
            .env_remove("RANKWISE_DEBUG")
            .env_remove("RANKWISE_DEBUG_FILE")
            .env_remove("RANKWISE_CHECK")
            .env_remove("RANKWISE_NCCL_LIBRARY")
            .env("RANKWISE_TIMEOUT", "20");
            if preload {
                c.env("LD_PRELOAD", interposer());
            }
            for (k, v) in env {
                c.env(k, v);
            }
            c.stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();
    let outputs = children
        .into_iter()
        .map(|c| c.wait_with_output().unwrap())
        .collect();
    Run {
        outputs,
        dir,
        elapsed: start.elapsed(),
    }
}

// ---------------------------------------------------------------- the NCCL API, as a program sees it

type Res = c_int;
type Comm = *mut c_void;
type Ptr = *mut c_void;
const NULL: Ptr = std::ptr::null_mut();
const INT32: c_int = 2;
const INT64: c_int = 4;
const FLOAT: c_int = 7;
const SUM: c_int = 0;
const MAX: c_int = 2;

#[repr(C)]
#[derive(Clone, Copy)]
struct UniqueId([u8; 128]);

/// NCCL's functions as the process's global lookup finds them: the
/// interposer's when it is preloaded, the stand-in's otherwise.
struct Nccl {
    get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Res,
    init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> Res,
    split: unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, Ptr) -> Res,
    destroy: unsafe extern "C" fn(Comm) -> Res,
    last_error: unsafe extern "C" fn(Comm) -> *const c_char,
    mem_alloc: unsafe extern "C" fn(*mut Ptr, usize) -> Res,
    group_start: unsafe extern "C" fn() -> Res,
    group_end: unsafe extern "C" fn() -> Res,
    all_reduce: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    reduce: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, c_int, Comm, Ptr) -> Res,
    broadcast: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    all_gather: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Comm, Ptr) -> Res,
    reduce_scatter: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    all_to_all: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Comm, Ptr) -> Res,
    gather: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    scatter: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    send: unsafe extern "C" fn(Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    recv: unsafe extern "C" fn(Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
}

impl Nccl {
    fn load() -> Nccl {
        let lib = std::env::var("RANKWISE_STANDIN_LIB").unwrap();
        let c = std::ffi::CString::new(lib).unwrap();
        // SAFETY: loading the stand-in, whose initialisers are Rust's std's.
        let h = unsafe { libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
        assert!(!h.is_null(), "dlopen of the stand-in failed");
        Nccl {
            get_unique_id: sym("ncclGetUniqueId"),
            init_rank: sym("ncclCommInitRank"),
            split: sym("ncclCommSplit"),
            destroy: sym("ncclCommDestroy"),
            last_error: sym("ncclGetLastError"),
            mem_alloc: sym("ncclMemAlloc"),
            group_start: sym("ncclGroupStart"),
            group_end: sym("ncclGroupEnd"),
            all_reduce: sym("ncclAllReduce"),
            reduce: sym("ncclReduce"),
            broadcast: sym("ncclBroadcast"),
            all_gather: sym("ncclAllGather"),
            reduce_scatter: sym("ncclReduceScatter"),
            all_to_all: sym("ncclAlltoAll"),
            gather: sym("ncclGather"),
            scatter: sym("ncclScatter"),
            send: sym("ncclSend"),
            recv: sym("ncclRecv"),
        }
    }
}

/// One rank's view: its communicator and typed host buffers from ncclMemAlloc.
struct Rank {
    nccl: Nccl,
    rank: usize,
    n: usize,
    comm: Comm,
}

/// A buffer of `len` elements of T from ncclMemAlloc (host memory here).
fn alloc<T: Copy>(nc: &Nccl, len: usize) -> *mut T {
    let mut p: Ptr = NULL;
    // SAFETY: an out-pointer and a size.
    let rc = unsafe { (nc.mem_alloc)(&mut p, len.max(1) * std::mem::size_of::<T>()) };
    assert_eq!(rc, 0, "ncclMemAlloc");
    p as *mut T
}

fn fill<T: Copy>(p: *mut T, v: &[T]) {
    // SAFETY: p holds at least v.len() elements (allocated for them).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) }
}

fn read<T: Copy>(p: *const T, len: usize) -> Vec<T> {
    // SAFETY: p holds len elements the call wrote.
    unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
}

fn vec_of<T: Copy>(nc: &Nccl, v: &[T]) -> *mut T {
    let p = alloc::<T>(nc, v.len());
    fill(p, v);
    p
}

impl Rank {
    fn start() -> Rank {
        let var = |k: &str| std::env::var(k).unwrap();
        let (rank, n): (usize, usize) = (
            var("RANKWISE_TEST_RANK").parse().unwrap(),
            var("RANKWISE_TEST_NRANKS").parse().unwrap(),
        );
        let dir = PathBuf::from(var("RANKWISE_TEST_DIR"));
        let nccl = Nccl::load();
        let idf = dir.join("id");
        let mut id = UniqueId([0; 128]);
        if rank == 0 {
            // SAFETY: an out-pointer to a whole id.
            assert_eq!(unsafe { (nccl.get_unique_id)(&mut id) }, 0);
            std::fs::write(dir.join("id.tmp"), id.0).unwrap();
            std::fs::rename(dir.join("id.tmp"), &idf).unwrap();
        } else {
            let t = Instant::now();
            loop {
                if let Ok(b) = std::fs::read(&idf) {
                    id.0.copy_from_slice(&b);
                    break;
                }
                assert!(t.elapsed() < Duration::from_secs(20), "no id from rank 0");
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        let mut comm: Comm = NULL;
        // SAFETY: out-pointer, size, id, rank.
        let rc = unsafe { (nccl.init_rank)(&mut comm, n as c_int, id, rank as c_int) };
        assert_eq!(rc, 0, "ncclCommInitRank");
        Rank {
            nccl,
            rank,
            n,
            comm,
        }
    }

    fn last_error(&self) -> String {
        // SAFETY: a live communicator; the answer is a NUL-terminated string.
        let p = unsafe { (self.nccl.last_error)(self.comm) };
        if p.is_null() {
            return String::new();
        }
        // SAFETY: as above.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    }

    fn all_reduce_i32(&self, v: &[i32]) -> (Res, Vec<i32>) {
        let s = vec_of(&self.nccl, v);
        let r = alloc::<i32>(&self.nccl, v.len());
        // SAFETY: buffers of v.len() int32 each.
        let rc = unsafe {
            (self.nccl.all_reduce)(s as Ptr, r as Ptr, v.len(), INT32, SUM, self.comm, NULL)
        };
        (rc, read(r, v.len()))
    }
}

fn expect_eq<T: PartialEq + std::fmt::Debug>(what: &str, got: T, want: T) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

// ---------------------------------------------------------------- rank programs

/// Every collective and Send/Recv pattern, outputs against closed forms.
fn forward(k: &Rank) -> Result<(), String> {
    let (r, n, nc, comm) = (k.rank as i64, k.n as i64, &k.nccl, k.comm);
    let tri = n * (n - 1) / 2;
    // AllReduce int32 sum, out of place
    let v: Vec<i32> = (0..5).map(|i| (100 * r + i) as i32).collect();
    let (rc, out) = k.all_reduce_i32(&v);
    expect_eq("AllReduce rc", rc, 0)?;
    expect_eq(
        "AllReduce",
        out,
        (0..5).map(|i| (100 * tri + n * i) as i32).collect(),
    )?;
    // AllReduce float max, in place
    let x = vec_of(nc, &(0..4).map(|i| (r + i) as f32).collect::<Vec<_>>());
    // SAFETY: buffers allocated for the counts passed (so every call below).
    let rc = unsafe { (nc.all_reduce)(x as Ptr, x as Ptr, 4, FLOAT, MAX, comm, NULL) };
    expect_eq("AllReduce max rc", rc, 0)?;
    expect_eq(
        "AllReduce max",
        read(x, 4),
        (0..4).map(|i| (n - 1 + i) as f32).collect(),
    )?;
    // Broadcast int64 from the last rank
    let root = n - 1;
    let s = vec_of(
        nc,
        &(0..3)
            .map(|i| if r == root { 1000 + i } else { -1 })
            .collect::<Vec<i64>>(),
    );
    let d = alloc::<i64>(nc, 3);
    // SAFETY: as above.
    let rc = unsafe { (nc.broadcast)(s as Ptr, d as Ptr, 3, INT64, root as c_int, comm, NULL) };
    expect_eq("Broadcast rc", rc, 0)?;
    expect_eq("Broadcast", read(d, 3), vec![1000, 1001, 1002])?;
    // Reduce int32 sum to rank 1 % n; non-roots pass NULL
    let root = 1 % n;
    let s = vec_of(
        nc,
        &(0..4).map(|i| (100 * r + i) as i32).collect::<Vec<_>>(),
    );
    let d = if r == root {
        alloc::<i32>(nc, 4)
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: as above.
    let rc = unsafe { (nc.reduce)(s as Ptr, d as Ptr, 4, INT32, SUM, root as c_int, comm, NULL) };
    expect_eq("Reduce rc", rc, 0)?;
    if r == root {
        expect_eq(
            "Reduce",
            read(d, 4),
            (0..4).map(|i| (100 * tri + n * i) as i32).collect(),
        )?;
    }
    // AllGather
    let s = vec_of(nc, &[(10 * r) as i32, (10 * r + 1) as i32]);
    let d = alloc::<i32>(nc, 2 * n as usize);
    // SAFETY: as above.
    let rc = unsafe { (nc.all_gather)(s as Ptr, d as Ptr, 2, INT32, comm, NULL) };
    expect_eq("AllGather rc", rc, 0)?;
    expect_eq(
        "AllGather",
        read(d, 2 * n as usize),
        (0..n)
            .flat_map(|j| [(10 * j) as i32, (10 * j + 1) as i32])
            .collect(),
    )?;
    // ReduceScatter
    let s = vec_of(
        nc,
        &(0..n)
            .flat_map(|j| [(r + 10 * j) as i32, (r + 10 * j + 1) as i32])
            .collect::<Vec<_>>(),
    );
    let d = alloc::<i32>(nc, 2);
    // SAFETY: as above.
    let rc = unsafe { (nc.reduce_scatter)(s as Ptr, d as Ptr, 2, INT32, SUM, comm, NULL) };
    expect_eq("ReduceScatter rc", rc, 0)?;
    expect_eq(
        "ReduceScatter",
        read(d, 2),
        vec![(tri + n * 10 * r) as i32, (tri + n * (10 * r + 1)) as i32],
    )?;
    // AlltoAll
    let s = vec_of(
        nc,
        &(0..n)
            .flat_map(|j| [(100 * r + 10 * j) as i32, (100 * r + 10 * j + 1) as i32])
            .collect::<Vec<_>>(),
    );
    let d = alloc::<i32>(nc, 2 * n as usize);
    // SAFETY: as above.
    let rc = unsafe { (nc.all_to_all)(s as Ptr, d as Ptr, 2, INT32, comm, NULL) };
    expect_eq("AlltoAll rc", rc, 0)?;
    expect_eq(
        "AlltoAll",
        read(d, 2 * n as usize),
        (0..n)
            .flat_map(|j| [(100 * j + 10 * r) as i32, (100 * j + 10 * r + 1) as i32])
            .collect(),
    )?;
    // Gather to rank 0, Scatter from the last rank
    let s = vec_of(nc, &[r as i32, (r + 10) as i32]);
    let d = if r == 0 {
        alloc::<i32>(nc, 2 * n as usize)
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: as above.
    let rc = unsafe { (nc.gather)(s as Ptr, d as Ptr, 2, INT32, 0, comm, NULL) };
    expect_eq("Gather rc", rc, 0)?;
    if r == 0 {
        expect_eq(
            "Gather",
            read(d, 2 * n as usize),
            (0..n).flat_map(|j| [j as i32, (j + 10) as i32]).collect(),
        )?;
    }
    let root = n - 1;
    let s = if r == root {
        vec_of(
            nc,
            &(0..n)
                .flat_map(|j| [(7 * j) as i32, (7 * j + 1) as i32])
                .collect::<Vec<_>>(),
        )
    } else {
        std::ptr::null_mut()
    };
    let d = alloc::<i32>(nc, 2);
    // SAFETY: as above.
    let rc = unsafe { (nc.scatter)(s as Ptr, d as Ptr, 2, INT32, root as c_int, comm, NULL) };
    expect_eq("Scatter rc", rc, 0)?;
    expect_eq(
        "Scatter",
        read(d, 2),
        vec![(7 * r) as i32, (7 * r + 1) as i32],
    )?;
    // a grouped ring of Send/Recv
    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let s = vec_of(
        nc,
        &[(3 * r) as i32, (3 * r + 1) as i32, (3 * r + 2) as i32],
    );
    let d = alloc::<i32>(nc, 3);
    // SAFETY: as above.
    let rc = unsafe {
        (nc.group_start)();
        (nc.send)(s as Ptr, 3, INT32, next as c_int, comm, NULL);
        (nc.recv)(d as Ptr, 3, INT32, prev as c_int, comm, NULL);
        (nc.group_end)()
    };
    expect_eq("ring rc", rc, 0)?;
    expect_eq(
        "ring",
        read(d, 3),
        vec![
            (3 * prev) as i32,
            (3 * prev + 1) as i32,
            (3 * prev + 2) as i32,
        ],
    )?;
    // AlltoAllv as PyTorch issues it: one group of Send/Recv, splits 2s+d+1
    alltoallv(k, |_src, _dst| 0).map_err(|(rc, e)| format!("AlltoAllv rc {rc}: {e}"))?;
    // a count-0 AllReduce with NULL buffers is accepted and dropped
    // SAFETY: count 0 touches no memory.
    let rc = unsafe { (nc.all_reduce)(NULL, NULL, 0, INT32, SUM, comm, NULL) };
    expect_eq("count-0 rc", rc, 0)?;
    // a split by parity, and an AllReduce on the child
    let mut child: Comm = NULL;
    // SAFETY: a live communicator and an out-pointer.
    let rc = unsafe { (nc.split)(comm, (r % 2) as c_int, r as c_int, &mut child, NULL) };
    expect_eq("split rc", rc, 0)?;
    let s = vec_of(nc, &[r as i32]);
    let d = alloc::<i32>(nc, 1);
    // SAFETY: as above.
    let rc = unsafe { (nc.all_reduce)(s as Ptr, d as Ptr, 1, INT32, SUM, child, NULL) };
    expect_eq("child AllReduce rc", rc, 0)?;
    expect_eq(
        "child AllReduce",
        read(d, 1)[0] as i64,
        (0..n).filter(|j| j % 2 == r % 2).sum::<i64>(),
    )?;
    // SAFETY: live communicators, destroyed once.
    unsafe {
        expect_eq("child destroy", (nc.destroy)(child), 0)?;
        expect_eq("destroy", (nc.destroy)(comm), 0)?;
    }
    println!("forward ok");
    Ok(())
}

/// AlltoAllv with splits `2s+d+1` from s to d, as one group of Send/Recv in
/// peer order; `skew(src, dst)` is added to the count this rank expects
/// from `src`. Outputs are checked when the group succeeds.
fn alltoallv(k: &Rank, skew: impl Fn(usize, usize) -> usize) -> Result<(), (Res, String)> {
    let (me, n, nc, comm) = (k.rank, k.n, &k.nccl, k.comm);
    let count = |s: usize, d: usize| 2 * s + d + 1;
    let mut recvs = Vec::new();
    // SAFETY: buffers allocated for the counts passed.
    let rc = unsafe {
        (nc.group_start)();
        for p in 0..n {
            let s = vec_of(nc, &vec![(1000 * me + p) as i32; count(me, p)]);
            (nc.send)(s as Ptr, count(me, p), INT32, p as c_int, comm, NULL);
            let want = count(p, me) + skew(p, me);
            let d = alloc::<i32>(nc, want);
            (nc.recv)(d as Ptr, want, INT32, p as c_int, comm, NULL);
            recvs.push((p, d, want));
        }
        (nc.group_end)()
    };
    if rc != 0 {
        return Err((rc, k.last_error()));
    }
    for (p, d, len) in recvs {
        let got = read(d, len);
        if got != vec![(1000 * p + me) as i32; len] {
            return Err((0, format!("AlltoAllv from {p}: {got:?}")));
        }
    }
    Ok(())
}

/// Every argument check, each rejected on the rank that made the call;
/// then a correct call still runs.
fn argcheck(k: &Rank) -> Result<(), String> {
    let (n, nc, comm) = (k.n, &k.nccl, k.comm);
    let b = alloc::<i32>(nc, 4 * n);
    let f = alloc::<f32>(nc, 8);
    let small = alloc::<i32>(nc, 4);
    let me = k.rank;
    // SAFETY: every call is rejected before any buffer is touched, except the last.
    let cases: Vec<(&str, Res)> = unsafe {
        vec![
            (
                "root",
                (nc.broadcast)(b as Ptr, b as Ptr, 4, INT32, n as c_int, comm, NULL),
            ),
            ("peer", (nc.send)(b as Ptr, 4, INT32, -1, comm, NULL)),
            (
                "datatype",
                (nc.all_reduce)(b as Ptr, b as Ptr, 4, 12, SUM, comm, NULL),
            ),
            (
                "op",
                (nc.all_reduce)(b as Ptr, b as Ptr, 4, INT32, 9, comm, NULL),
            ),
            (
                "null send",
                (nc.all_reduce)(NULL, b as Ptr, 4, INT32, SUM, comm, NULL),
            ),
            (
                "null recv",
                (nc.all_reduce)(b as Ptr, NULL, 4, INT32, SUM, comm, NULL),
            ),
            (
                "overlap",
                (nc.all_gather)(
                    b.add(((me + 1) % n) * 4) as Ptr,
                    b as Ptr,
                    4,
                    INT32,
                    comm,
                    NULL,
                ),
            ),
            (
                "misaligned",
                (nc.all_reduce)(
                    (f as *mut u8).add(1) as Ptr,
                    f as Ptr,
                    2,
                    FLOAT,
                    SUM,
                    comm,
                    NULL,
                ),
            ),
            (
                "extent",
                (nc.all_reduce)(small as Ptr, b as Ptr, 8, INT32, SUM, comm, NULL),
            ),
        ]
    };
    for (what, rc) in &cases {
        println!("argcheck {what} rc {rc}");
        expect_eq(what, *rc, 4)?;
    }
    let (rc, out) = k.all_reduce_i32(&[k.rank as i32, 1]);
    expect_eq(
        "AllReduce after the rejected calls",
        (rc, out),
        (0, vec![(n * (n - 1) / 2) as i32, n as i32]),
    )?;
    println!("argcheck ok");
    Ok(())
}

/// Rank 2 passes count 5 where the others pass 4; then every rank calls
/// again on the failed communicator.
fn count(k: &Rank) -> Result<(), String> {
    let len = if k.rank == 2 { 5 } else { 4 };
    let (rc, _) = k.all_reduce_i32(&vec![1; len]);
    expect_eq("mismatched AllReduce rc", rc, 5)?;
    let err = k.last_error();
    if !err.contains("count differs") {
        return Err(format!("ncclGetLastError says {err:?}"));
    }
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    expect_eq("the next call on the failed communicator", rc, 5)?;
    println!("count ok");
    Ok(())
}

/// Rank 2 skips a Broadcast and calls the next AllReduce.
fn skip(k: &Rank) -> Result<(), String> {
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    expect_eq("first AllReduce", rc, 0)?;
    let b = vec_of(&k.nccl, &[7i32; 4]);
    let rc = if k.rank == 2 {
        k.all_reduce_i32(&[1; 4]).0
    } else {
        // SAFETY: a buffer of 4 int32.
        unsafe { (k.nccl.broadcast)(b as Ptr, b as Ptr, 4, INT32, 0, k.comm, NULL) }
    };
    expect_eq("the skipped call's rc", rc, 5)?;
    println!("skip ok");
    Ok(())
}

/// Rank 0 Sends to rank 1, which calls AllReduce with the others.
fn unmatched(k: &Rank) -> Result<(), String> {
    let rc = if k.rank == 0 {
        let s = vec_of(&k.nccl, &[3i32; 16]);
        // SAFETY: a buffer of 16 int32.
        unsafe {
            (k.nccl.group_start)();
            (k.nccl.send)(s as Ptr, 16, INT32, 1, k.comm, NULL);
            (k.nccl.group_end)()
        }
    } else {
        k.all_reduce_i32(&[1; 4]).0
    };
    println!("unmatched rc {rc}");
    if rc == 0 {
        return Err("the unmatched call returned ncclSuccess".into());
    }
    Ok(())
}

/// AlltoAllv where rank 2 expects 1 more element from rank 3 than rank 3
/// sends it (a split that is not the transpose of rank 3's).
fn alltoallv_bad(k: &Rank) -> Result<(), String> {
    match alltoallv(k, |src, dst| usize::from(src == 3 && dst == 2)) {
        Ok(()) => Err("the AlltoAllv with a wrong split succeeded".into()),
        Err((5, msg)) => {
            println!("alltoallv rc 5: {msg}");
            Ok(())
        }
        Err((rc, msg)) => Err(format!("rc {rc}: {msg}")),
    }
}

/// Count mismatch with the checks off: forwarded, and the stand-in (like
/// NCCL) returns success.
fn unchecked_count(k: &Rank) -> Result<(), String> {
    let len = if k.rank == 2 { 5 } else { 4 };
    let (rc, _) = k.all_reduce_i32(&vec![1; len]);
    expect_eq("forwarded AllReduce rc", rc, 0)?;
    println!("unchecked ok");
    Ok(())
}

/// `RANKWISE_CHECK=local`: a bad root is still refused on its rank; rank
/// 2's count mismatch is not seen (nothing is compared across ranks) and
/// is forwarded, and the stand-in, like NCCL, returns success.
fn local(k: &Rank) -> Result<(), String> {
    let b = vec_of(&k.nccl, &[1i32; 4]);
    let n = k.n as c_int;
    // SAFETY: a buffer of 4 int32; the call is refused before it is read.
    let rc = unsafe { (k.nccl.broadcast)(b as Ptr, b as Ptr, 4, INT32, n, k.comm, NULL) };
    expect_eq("bad root rc", rc, 4)?;
    let len = if k.rank == 2 { 5 } else { 4 };
    let (rc, _) = k.all_reduce_i32(&vec![1; len]);
    expect_eq("forwarded mismatched AllReduce rc", rc, 0)?;
    println!("local ok");
    Ok(())
}

/// One AllReduce with every rank; then the last rank leaves the second to
/// the others: it waits past their deadline, or (`RANKWISE_TEST_LEAVE`)
/// destroys its communicator and ends.
fn late(k: &Rank) -> Result<(), String> {
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    expect_eq("first AllReduce", rc, 0)?;
    if k.rank == k.n - 1 {
        if std::env::var("RANKWISE_TEST_LEAVE").is_ok() {
            // SAFETY: a live communicator, destroyed once.
            expect_eq("destroy", unsafe { (k.nccl.destroy)(k.comm) }, 0)?;
        } else {
            std::thread::sleep(Duration::from_secs(4));
        }
        println!("late ok");
        return Ok(());
    }
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    println!("second AllReduce rc {rc}: {}", k.last_error());
    if rc == 0 {
        return Err("the AllReduce the last rank never made returned ncclSuccess".into());
    }
    println!("late ok");
    Ok(())
}

/// `RANKWISE_TEST_CALLS` AllReduces of 2 int32 in a row, each checked,
/// timed per call.
fn percall(k: &Rank) -> Result<(), String> {
    let calls: usize = std::env::var("RANKWISE_TEST_CALLS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(300);
    let (nc, n) = (&k.nccl, k.n as i32);
    let s = vec_of(nc, &[k.rank as i32, 1]);
    let d = alloc::<i32>(nc, 2);
    let t = Instant::now();
    for i in 0..calls {
        // SAFETY: buffers of 2 int32.
        let rc = unsafe { (nc.all_reduce)(s as Ptr, d as Ptr, 2, INT32, SUM, k.comm, NULL) };
        expect_eq(
            &format!("call {i}"),
            (rc, read(d, 2)),
            (0, vec![n * (n - 1) / 2, n]),
        )?;
    }
    let us = t.elapsed().as_secs_f64() * 1e6 / calls as f64;
    println!("percall {calls} calls {us:.1} us per call");
    Ok(())
}

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    let Ok(scenario) = std::env::var("RANKWISE_TEST_SCENARIO") else {
        return;
    };
    let k = Rank::start();
    let r = match scenario.as_str() {
        "forward" => forward(&k),
        "argcheck" => argcheck(&k),
        "count" => count(&k),
        "skip" => skip(&k),
        "unmatched" => unmatched(&k),
        "alltoallv" => alltoallv_bad(&k),
        "unchecked" => unchecked_count(&k),
        "local" => local(&k),
        "late" => late(&k),
        "percall" => percall(&k),
        s => Err(format!("no scenario {s}")),
    };
    if let Err(e) = r {
        panic!("rank {}: {e}", k.rank);
    }
}

// ---------------------------------------------------------------- the tests

#[test]
fn correct_calls_are_forwarded_and_give_the_closed_forms() {
    let run = run("forward", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.stdout(r).contains("forward ok"), "{}", run.stdout(r));
        assert!(run.errors(r).is_empty(), "rank {r}: {:?}", run.errors(r));
    }
}

#[test]
fn the_same_program_without_the_interposer_gives_the_same_results() {
    let run = run("forward", 3, false, &[]);
    run.assert_ok();
}

#[test]
fn every_argument_check_rejects_the_call_on_its_rank() {
    let run = run("argcheck", 2, true, &[]);
    run.assert_ok();
    for r in 0..2 {
        let errs = run.errors(r).join("\n");
        for want in [
            "ncclInvalidArgument on rank",
            "Broadcast: root 2 is out of range: valid roots are 0..=1",
            "Send: peer -1 is out of range",
            "AllReduce: datatype code 12 is invalid",
            "AllReduce: reduction op code 9 is invalid",
            "AllReduce: sendbuff is NULL",
            "AllReduce: recvbuff is NULL",
            "AllGather: sendbuff",
            "is not the in-place form",
            "is misaligned",
            "the extent overruns by 16 bytes",
        ] {
            assert!(errs.contains(want), "rank {r} lacks {want:?}:\n{errs}");
        }
        assert_eq!(
            run.errors(r).len(),
            9,
            "one line per rejected call:\n{errs}"
        );
    }
}

#[test]
fn a_count_mismatch_is_an_error_on_every_rank_naming_the_ranks() {
    let run = run("count", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        let errs = run.errors(r);
        let head = errs[0].split(" (comm ").next().unwrap();
        assert_eq!(
            head,
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: AllReduce #0: count differs: ranks 0,1,3 pass 4, rank 2 passes 5 [ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum]"
            )
        );
        assert!(
            errs[1].contains("this communicator failed earlier"),
            "{errs:?}"
        );
    }
    assert!(
        run.elapsed < Duration::from_secs(15),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn a_skipped_call_is_an_error_on_every_rank_naming_the_rank() {
    let run = run("skip", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        let e = &run.errors(r)[0];
        assert!(
            e.contains(
                "ranks 0,1,3 call Broadcast #1, rank 2 calls AllReduce #1; rank 2 skipped a call"
            ),
            "rank {r}: {e}"
        );
        assert!(
            e.contains(
                "[ranks 0,1,3: Broadcast count 4 int32 root 0; rank 2: AllReduce count 4 int32 sum]"
            ),
            "{e}"
        );
    }
}

#[test]
fn an_unmatched_send_is_an_error_naming_both_ranks() {
    let run = run("unmatched", 4, true, &[("RANKWISE_TIMEOUT", "2")]);
    run.assert_ok();
    let e0 = run.errors(0).join("\n");
    assert!(
        e0.contains("Send #0 to rank 1 (count 16, int32, opCount 0) has no matching Recv"),
        "{e0}"
    );
    // whichever deadline passes first: rank 0's own, or rank 1's, which
    // then fails and says so
    assert!(
        e0.contains("rank 1 posted none within 2s [rank 1 was last in AllReduce (opCount 0)]")
            || e0.contains(
                "rank 1 failed without posting one (ncclTimeout on rank 1: rank 0 did not enter AllReduce #0 within 2s"
            ),
        "{e0}"
    );
    for r in 1..4 {
        let e = run.errors(r).join("\n");
        assert!(e.contains("rank 0"), "rank {r}: {e}");
    }
    assert!(
        run.elapsed < Duration::from_secs(15),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn alltoallv_splits_that_are_not_transposes_fail_every_rank() {
    let run = run("alltoallv", 4, true, &[]);
    run.assert_ok();
    let pair = "Send/Recv mismatch: rank 3's Send #0 to rank 2 (count 9, int32, opCount 0) meets rank 2's Recv #0 from rank 3 (count 10, int32, opCount 0)";
    for r in 0..4 {
        let e = run.errors(r).join("\n");
        assert!(e.contains(pair), "rank {r}: {e}");
        if r < 2 {
            assert!(e.contains("a peer of this group, found"), "rank {r}: {e}");
        }
    }
}

#[test]
fn with_rankwise_check_0_calls_are_only_forwarded() {
    let run = run("unchecked", 4, true, &[("RANKWISE_CHECK", "0")]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.errors(r).is_empty(), "{:?}", run.errors(r));
    }
}

/// Whether rank 0's ncclUniqueId carries a side channel's address (its
/// last 64 bytes, zero in NCCL's own ids).
fn id_names_a_side_channel(run: &Run) -> bool {
    let id = std::fs::read(run.dir.path().join("id")).unwrap();
    id[64..].iter().any(|b| *b != 0)
}

#[test]
fn with_rankwise_check_local_each_call_is_checked_on_its_own_rank_only() {
    let run = run("local", 4, true, &[("RANKWISE_CHECK", "local")]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.stdout(r).contains("local ok"), "{}", run.stdout(r));
        let errs = run.errors(r);
        assert_eq!(errs.len(), 1, "rank {r}: {errs:?}");
        assert!(
            errs[0].contains("Broadcast: root 4 is out of range: valid roots are 0..=3"),
            "{errs:?}"
        );
        assert!(
            !run.stderr(r).contains("side channel"),
            "rank {r}: {}",
            run.stderr(r)
        );
    }
    assert!(
        !id_names_a_side_channel(&run),
        "no side channel: the id is NCCL's own"
    );
}

#[test]
fn a_rank_that_never_comes_is_named_with_where_it_was_last() {
    let run = run("late", 4, true, &[("RANKWISE_TIMEOUT", "2")]);
    run.assert_ok();
    assert!(id_names_a_side_channel(&run));
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains(&format!(
                "ncclTimeout on rank {r}: rank 3 did not enter AllReduce #1 within 2s [rank 3 was last in AllReduce (opCount 0)]"
            )),
            "rank {r}: {e}"
        );
    }
    assert!(run.errors(3).is_empty(), "{:?}", run.errors(3));
}

#[test]
fn a_rank_that_never_comes_is_named_through_the_store_too() {
    let run = run(
        "late",
        4,
        true,
        &[("RANKWISE_TIMEOUT", "2"), ("RANKWISE_SHM", "0")],
    );
    run.assert_ok();
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains("rank 3 did not enter AllReduce #1 within 2s [rank 3 was last in AllReduce (opCount 0)]"),
            "rank {r}: {e}"
        );
    }
}

/// Every rank's journal, concatenated.
fn journals(dir: &std::path::Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect()
}

#[test]
fn ranks_on_one_host_agree_through_shared_memory_unless_told_not_to() {
    for (shm, lane, other) in [
        (None, "through shared memory", "through the store"),
        (
            Some("0"),
            "through the store at 127.0.0.1:",
            "through shared memory",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let pattern = dir.path().join("journal.%p.log");
        let mut env = vec![
            ("RANKWISE_DEBUG", "INFO"),
            ("RANKWISE_DEBUG_FILE", pattern.to_str().unwrap()),
        ];
        env.extend(shm.map(|v| ("RANKWISE_SHM", v)));
        let run = run("count", 4, true, &env);
        run.assert_ok();
        for r in 0..4 {
            let e = &run.errors(r)[0];
            assert!(
                e.contains("count differs: ranks 0,1,3 pass 4, rank 2 passes 5"),
                "RANKWISE_SHM={shm:?}, rank {r}: {e}"
            );
        }
        let j = journals(dir.path());
        assert_eq!(j.matches(lane).count(), 4, "RANKWISE_SHM={shm:?}:\n{j}");
        assert!(!j.contains(other), "RANKWISE_SHM={shm:?}:\n{j}");
    }
}

#[test]
fn a_rank_that_finished_ends_the_wait_at_once() {
    let run = run("late", 4, true, &[("RANKWISE_TEST_LEAVE", "1")]);
    run.assert_ok();
    for r in 0..3 {
        let e = run.errors(r).join("\n");
        assert!(
            e.contains("rank 3 finished its program without entering AllReduce #1"),
            "rank {r}: {e}"
        );
    }
    // RANKWISE_TIMEOUT is 20 s here
    assert!(
        run.elapsed < Duration::from_secs(10),
        "took {:?}",
        run.elapsed
    );
}

#[test]
fn many_calls_in_a_row_each_agree_and_give_the_closed_form() {
    let run = run("percall", 4, true, &[]);
    run.assert_ok();
    for r in 0..4 {
        assert!(run.errors(r).is_empty(), "{:?}", run.errors(r));
        let line = run.stdout(r);
        assert!(line.contains("percall 300 calls"), "{line}");
    }
    eprintln!("{}", run.stdout(0).trim());
}

#[test]
fn the_journal_is_read_by_rankwise_logs_analyze() {
    let env = [("RANKWISE_DEBUG", "INFO"), ("RANKWISE_DEBUG_FILE", "")];
    // a correct run: the analyzer finds every rank and nothing wrong
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let pattern = pattern.to_str().unwrap();
    let ok = run("forward", 4, true, &[env[0], (env[1].0, pattern)]);
    ok.assert_ok();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Default::default()).unwrap();
    assert_eq!(a.problems, 0, "{}", a.verdict);
    let main = a
        .communicators
        .iter()
        .find(|c| c.nranks == 4)
        .expect("the 4-rank communicator");
    assert_eq!(main.ranks_seen, vec![0, 1, 2, 3]);
    // the skip: the journal alone says who skipped what
    let dir = tempfile::tempdir().unwrap();
    let pattern = dir.path().join("journal.%p.log");
    let skip = run(
        "skip",
        4,
        true,
        &[env[0], (env[1].0, pattern.to_str().unwrap())],
    );
    skip.assert_ok();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Default::default()).unwrap();
    assert!(a.verdict.contains("rank 2"), "{}", a.verdict);
    assert!(a.verdict.contains("Broadcast"), "{}", a.verdict);
    let _ = ok.dir;
}
