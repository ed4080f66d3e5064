//! The interposer's tests' harness: the libraries (`librankwise_nccl.so`
//! and the stand-in NCCL), rank processes of the test binary that runs
//! them, and the NCCL API as a program sees it.
#![allow(dead_code)]

use crate::support_standin;
pub use crate::support_sym::sym;
use std::ffi::{c_char, c_int, c_void};
use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

// ---------------------------------------------------------------- the libraries

/// `librankwise_nccl.so` beside this test in `target/<profile>/deps` (cargo
/// builds it there for the tests: the crate is an rlib as well), or in
/// `target/<profile>` after a `cargo build`.
pub fn interposer() -> PathBuf {
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
pub fn standin() -> &'static Path {
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

pub struct Run {
    pub outputs: Vec<Output>,
    pub dir: tempfile::TempDir,
    pub elapsed: Duration,
    /// the ranks still running at the run's limit, which were killed
    pub hung: Vec<usize>,
    /// when each rank's process ended, after the first was started
    pub ended: Vec<Duration>,
}

impl Run {
    pub fn stderr(&self, r: usize) -> String {
        String::from_utf8_lossy(&self.outputs[r].stderr).into_owned()
    }
    pub fn stdout(&self, r: usize) -> String {
        String::from_utf8_lossy(&self.outputs[r].stdout).into_owned()
    }
    /// Every rank exited 0 (its own assertions held).
    pub fn assert_ok(&self) {
        for (r, o) in self.outputs.iter().enumerate() {
            let hung = match self.hung.contains(&r) {
                true => " (it hung: killed at the run's limit)",
                false => "",
            };
            assert!(
                o.status.success(),
                "rank {r} failed: {}{hung}\nstdout:\n{}\nstderr:\n{}",
                o.status,
                self.stdout(r),
                self.stderr(r)
            );
        }
    }
    /// The interposer's error lines of rank `r`.
    pub fn errors(&self, r: usize) -> Vec<String> {
        self.stderr(r)
            .lines()
            .filter(|l| l.starts_with("rankwise: nccl"))
            .map(str::to_string)
            .collect()
    }
}

/// Runs `scenario` on `n` rank processes, the interposer preloaded unless
/// `preload` is false, with extra environment `env`.
pub fn run(scenario: &str, n: usize, preload: bool, env: &[(&str, &str)]) -> Run {
    spawn(scenario, n, preload, env, Place::default())
}

/// [`run`] on simulated hosts of `per_host` ranks each: each host's ranks
/// get a segment directory of their own (`RANKWISE_SHM_DIR`), as ranks on
/// different machines have, so they share a lane only with each other.
#[allow(dead_code)]
pub fn run_on_hosts(scenario: &str, n: usize, per_host: usize, env: &[(&str, &str)]) -> Run {
    let place = Place {
        per_host: Some(per_host),
        ..Place::default()
    };
    spawn(scenario, n, true, env, place)
}

/// How long ranks may run when a test names no limit: far longer than any
/// test's ranks take, so that only a hang reaches it, and fails its test
/// instead of blocking the test run.
pub const LIMIT: Duration = Duration::from_secs(300);

/// What a test does while its ranks run, given the test's directory.
pub type During<'a> = Box<dyn FnMut(&Path) + 'a>;

/// Where and how [`spawn`] runs the ranks.
#[derive(Default)]
pub struct Place<'a> {
    /// ranks per simulated host: each host's ranks get a segment directory
    /// of their own
    pub per_host: Option<usize>,
    /// the command rank r's program runs under (`ip netns exec NS` for its
    /// host's network namespace), if any
    pub wrap: Option<&'a dyn Fn(usize) -> Vec<String>>,
    /// what the test does while the ranks run, given the test's directory
    pub during: Option<During<'a>>,
    /// when ranks still running are killed ([`LIMIT`] if None)
    pub limit: Option<Duration>,
}

/// The rank processes of a run, killed and reaped if the test gives up on
/// them (a panic in [`Place::during`]): none outlives its test.
struct Kids(Vec<Child>);

impl Drop for Kids {
    fn drop(&mut self) {
        for c in &mut self.0 {
            // a child already reaped is not signalled again
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

/// Starts `n` ranks of `scenario` placed as `place` says, and collects
/// their outputs once every one has ended or the limit is reached.
pub fn spawn(scenario: &str, n: usize, preload: bool, env: &[(&str, &str)], place: Place) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let exe = std::env::current_exe().unwrap();
    // built before the clock starts: a test's time is its ranks'
    let lib = standin();
    let start = Instant::now();
    let mut kids = Kids(Vec::with_capacity(n));
    for r in 0..n {
        let wrap = place.wrap.map(|w| w(r)).unwrap_or_default();
        let mut c = match wrap.split_first() {
            Some((first, rest)) => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
            None => Command::new(&exe),
        };
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
        .env("RANKWISE_STANDIN_LIB", lib)
        .env("RANKWISE_STANDIN_TIMEOUT", "10")
        .env_remove("RANKWISE_DEBUG")
        .env_remove("RANKWISE_DEBUG_FILE")
        .env_remove("RANKWISE_CHECK")
        .env_remove("RANKWISE_NCCL_LIBRARY")
        .env_remove("RANKWISE_STANDIN_ADDR")
        .env("RANKWISE_TIMEOUT", "20");
        if preload {
            c.env("LD_PRELOAD", interposer());
        }
        for (k, v) in env {
            c.env(k, v);
        }
        if let Some(k) = place.per_host {
            let host = dir.path().join(format!("host{}", r / k));
            std::fs::create_dir_all(&host).unwrap();
            c.env("RANKWISE_SHM_DIR", host);
        }
        // a rank reads nothing: none holds the test run's terminal
        c.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        kids.0.push(c.spawn().unwrap());
    }
    // read as the ranks write, so none blocks on a full pipe while the
    // test acts in `during` or waits
    let pipes: Vec<_> = kids
        .0
        .iter_mut()
        .map(|c| (drain(c.stdout.take()), drain(c.stderr.take())))
        .collect();
    if let Some(mut during) = place.during {
        during(dir.path());
    }
    let deadline = start + place.limit.unwrap_or(LIMIT);
    let mut status = vec![None; n];
    let mut ended = vec![Duration::ZERO; n];
    let mut hung = Vec::new();
    while status.iter().any(Option::is_none) {
        let late = Instant::now() >= deadline;
        for (r, c) in kids.0.iter_mut().enumerate() {
            if status[r].is_none() {
                status[r] = c.try_wait().unwrap();
                if status[r].is_none() && late {
                    let _ = c.kill();
                    status[r] = Some(c.wait().unwrap());
                    hung.push(r);
                }
                ended[r] = start.elapsed();
            }
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    let elapsed = start.elapsed();
    let outputs = status
        .into_iter()
        .zip(pipes)
        .map(|(st, (out, err))| Output {
            status: st.unwrap(),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        })
        .collect();
    Run {
        outputs,
        dir,
        elapsed,
        hung,
        ended,
    }
}

/// A thread reading `pipe` to its end.
fn drain(pipe: Option<impl Read + Send + 'static>) -> std::thread::JoinHandle<Vec<u8>> {
    let mut pipe = pipe.unwrap();
    std::thread::spawn(move || {
        let mut b = Vec::new();
        let _ = pipe.read_to_end(&mut b);
        b
    })
}

// ---------------------------------------------------------------- the NCCL API, as a program sees it

pub type Res = c_int;
pub type Comm = *mut c_void;
pub type Ptr = *mut c_void;
pub const NULL: Ptr = std::ptr::null_mut();
pub const INT32: c_int = 2;
pub const INT64: c_int = 4;
pub const FLOAT: c_int = 7;
pub const SUM: c_int = 0;
pub const MAX: c_int = 2;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId(pub [u8; 128]);

/// NCCL's functions as the process's global lookup finds them: the
/// interposer's when it is preloaded, the stand-in's otherwise.
#[derive(Clone, Copy)]
pub struct Nccl {
    pub get_unique_id: unsafe extern "C" fn(*mut UniqueId) -> Res,
    pub init_rank: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int) -> Res,
    pub split: unsafe extern "C" fn(Comm, c_int, c_int, *mut Comm, Ptr) -> Res,
    pub destroy: unsafe extern "C" fn(Comm) -> Res,
    pub last_error: unsafe extern "C" fn(Comm) -> *const c_char,
    pub mem_alloc: unsafe extern "C" fn(*mut Ptr, usize) -> Res,
    pub group_start: unsafe extern "C" fn() -> Res,
    pub group_end: unsafe extern "C" fn() -> Res,
    pub all_reduce: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub reduce: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, c_int, Comm, Ptr) -> Res,
    pub broadcast: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub all_gather: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Comm, Ptr) -> Res,
    pub reduce_scatter: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub all_to_all: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, Comm, Ptr) -> Res,
    pub gather: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub scatter: unsafe extern "C" fn(Ptr, Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub send: unsafe extern "C" fn(Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub recv: unsafe extern "C" fn(Ptr, usize, c_int, c_int, Comm, Ptr) -> Res,
    pub abort: unsafe extern "C" fn(Comm) -> Res,
    pub init_rank_config: unsafe extern "C" fn(*mut Comm, c_int, UniqueId, c_int, Ptr) -> Res,
    pub init_all: unsafe extern "C" fn(*mut Comm, c_int, *const c_int) -> Res,
    pub shrink: unsafe extern "C" fn(Comm, *mut c_int, c_int, *mut Comm, Ptr, c_int) -> Res,
    pub get_async_error: unsafe extern "C" fn(Comm, *mut Res) -> Res,
    pub user_rank: unsafe extern "C" fn(Comm, *mut c_int) -> Res,
    pub group_simulate_end: unsafe extern "C" fn(Ptr) -> Res,
    pub premul_create: unsafe extern "C" fn(*mut c_int, Ptr, c_int, c_int, Comm) -> Res,
    pub op_destroy: unsafe extern "C" fn(c_int, Comm) -> Res,
}

impl Nccl {
    pub fn load() -> Nccl {
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
            abort: sym("ncclCommAbort"),
            init_rank_config: sym("ncclCommInitRankConfig"),
            init_all: sym("ncclCommInitAll"),
            shrink: sym("ncclCommShrink"),
            get_async_error: sym("ncclCommGetAsyncError"),
            user_rank: sym("ncclCommUserRank"),
            group_simulate_end: sym("ncclGroupSimulateEnd"),
            premul_create: sym("ncclRedOpCreatePreMulSum"),
            op_destroy: sym("ncclRedOpDestroy"),
        }
    }
}

/// One rank's view: its communicator and typed host buffers from ncclMemAlloc.
pub struct Rank {
    pub nccl: Nccl,
    pub rank: usize,
    pub n: usize,
    pub comm: Comm,
}

/// A buffer of `len` elements of T from ncclMemAlloc (host memory here).
pub fn alloc<T: Copy>(nc: &Nccl, len: usize) -> *mut T {
    let mut p: Ptr = NULL;
    // SAFETY: an out-pointer and a size.
    let rc = unsafe { (nc.mem_alloc)(&mut p, len.max(1) * std::mem::size_of::<T>()) };
    assert_eq!(rc, 0, "ncclMemAlloc");
    p as *mut T
}

pub fn fill<T: Copy>(p: *mut T, v: &[T]) {
    // SAFETY: p holds at least v.len() elements (allocated for them).
    unsafe { std::ptr::copy_nonoverlapping(v.as_ptr(), p, v.len()) }
}

pub fn read<T: Copy>(p: *const T, len: usize) -> Vec<T> {
    // SAFETY: p holds len elements the call wrote.
    unsafe { std::slice::from_raw_parts(p, len) }.to_vec()
}

pub fn vec_of<T: Copy>(nc: &Nccl, v: &[T]) -> *mut T {
    let p = alloc::<T>(nc, v.len());
    fill(p, v);
    p
}

impl Rank {
    pub fn start() -> Rank {
        let (rank, n) = rank_and_size();
        let nccl = Nccl::load();
        let id = shared_id(&nccl, rank);
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

    pub fn last_error(&self) -> String {
        last_error(&self.nccl, self.comm)
    }

    pub fn all_reduce_i32(&self, v: &[i32]) -> (Res, Vec<i32>) {
        all_reduce_i32(&self.nccl, self.comm, v)
    }
}

/// `ncclGetLastError(comm)` as text.
pub fn last_error(nc: &Nccl, comm: Comm) -> String {
    // SAFETY: the answer is NULL or a NUL-terminated string.
    let p = unsafe { (nc.last_error)(comm) };
    if p.is_null() {
        return String::new();
    }
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// An AllReduce (sum) of `v` on `comm`: its code and output.
pub fn all_reduce_i32(nc: &Nccl, comm: Comm, v: &[i32]) -> (Res, Vec<i32>) {
    let s = vec_of(nc, v);
    let r = alloc::<i32>(nc, v.len());
    // SAFETY: buffers of v.len() int32 each.
    let rc = unsafe { (nc.all_reduce)(s as Ptr, r as Ptr, v.len(), INT32, SUM, comm, NULL) };
    (rc, read(r, v.len()))
}

/// The test's ncclUniqueId: rank 0 makes it and hands it to the others
/// through a file of the test's directory.
pub fn shared_id(nccl: &Nccl, rank: usize) -> UniqueId {
    shared_id_named(nccl, rank, "id")
}

/// [`shared_id`] through the file `name`: another id of the same test.
pub fn shared_id_named(nccl: &Nccl, rank: usize, name: &str) -> UniqueId {
    let dir = PathBuf::from(std::env::var("RANKWISE_TEST_DIR").unwrap());
    let idf = dir.join(name);
    let mut id = UniqueId([0; 128]);
    if rank == 0 {
        let tmp = dir.join(format!("{name}.tmp"));
        // SAFETY: an out-pointer to a whole id.
        assert_eq!(unsafe { (nccl.get_unique_id)(&mut id) }, 0);
        std::fs::write(&tmp, id.0).unwrap();
        std::fs::rename(&tmp, &idf).unwrap();
        return id;
    }
    let t = Instant::now();
    loop {
        if let Ok(b) = std::fs::read(&idf) {
            id.0.copy_from_slice(&b);
            return id;
        }
        assert!(
            t.elapsed() < Duration::from_secs(20),
            "no {name} from rank 0"
        );
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// The test's rank and size, from the environment `run` sets.
pub fn rank_and_size() -> (usize, usize) {
    let var = |k: &str| std::env::var(k).unwrap();
    (
        var("RANKWISE_TEST_RANK").parse().unwrap(),
        var("RANKWISE_TEST_NRANKS").parse().unwrap(),
    )
}

pub fn expect_eq<T: PartialEq + std::fmt::Debug>(
    what: &str,
    got: T,
    want: T,
) -> Result<(), String> {
    if got == want {
        Ok(())
    } else {
        Err(format!("{what}: got {got:?}, expected {want:?}"))
    }
}

/// Whether rank 0's ncclUniqueId carries a side channel's address (its
/// last 64 bytes, zero in NCCL's own ids).
pub fn id_names_a_side_channel(run: &Run) -> bool {
    let id = std::fs::read(run.dir.path().join("id")).unwrap();
    id[64..].iter().any(|b| *b != 0)
}

/// Every rank's journal, concatenated.
pub fn journals(dir: &std::path::Path) -> String {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| std::fs::read_to_string(e.unwrap().path()).unwrap())
        .collect()
}
