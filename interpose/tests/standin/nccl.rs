//! A stand-in for libnccl.so.2, for the interposer's CPU tests: NCCL's C
//! API over host memory, across the processes of a test, exporting every
//! function twice as NCCL builds do (`pncclX` and `ncclX`). The tests build
//! it with plain `rustc` (std only) into `libnccl.so.2`.
//!
//! Ranks meet in a directory named by the unique id (under
//! `RANKWISE_STANDIN_DIR`): a collective is one file per rank holding its
//! contribution, written whole then renamed, and every rank reads every
//! file it needs and computes its own output; a Send is a file its Recv
//! waits for. Calls inside a group run at `ncclGroupEnd`: every Send and
//! every collective's contribution first, then the collectives' outputs,
//! then the Recvs, so a grouped exchange never waits on itself (nor do the
//! ranks of `ncclCommInitAll`, all threads of one process). A PreMulSum
//! op's scalar is read when the call is made, as NCCL reads it.
//! Every wait gives up after `RANKWISE_STANDIN_TIMEOUT` seconds (20) with
//! `ncclInternalError`, so a test that lets a mismatch through ends.
//! `RANKWISE_STANDIN_NULL=1` makes every collective and Send/Recv return
//! success at once, moving nothing: an NCCL that costs nothing, for
//! measuring what the interposer costs by itself.
//! `ncclGetVersion` says 2.28.9 unless `RANKWISE_STANDIN_VERSION` says
//! otherwise. `ncclGetUniqueId` names the IPv4 address
//! `RANKWISE_STANDIN_ADDR` gives (127.0.0.1 without it) as its bootstrap's.
//!
//! A non-blocking communicator (`config.blocking = 0`) is made at once but
//! says `ncclInProgress` (and hides its rank and size) until the first
//! `ncclCommGetAsyncError` on it. A pretend CUDA driver is beside it
//! (`driver.rs`: capture status, events, and hooks that hang its GPU).
//!
//! Like NCCL, its collectives and its `ncclCommCount`, `ncclCommUserRank`
//! and `ncclCommCuDevice` first ask the public `ncclCommGetAsyncError`
//! (through the dynamic linker, so an interposer answers) whether the
//! communicator is ready.
//!
//! It checks nothing: that is the interposer's job. Reductions: Sum, Prod,
//! Max, Min, Avg (integer Avg divides the wrapped sum) on the 8 integer and
//! 2 wide float types, and PreMulSum on float and double.

mod driver;

use driver::{HANG_NEXT, STUCK};
use std::cell::RefCell;
use std::collections::HashMap;
use std::ffi::{c_char, c_int, c_void};
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

type Res = c_int;

#[repr(C)]
#[derive(Clone, Copy)]
pub struct UniqueId {
    internal: [u8; 128],
}

struct Comm {
    dir: PathBuf,
    rank: usize,
    nranks: usize,
    seq: u64,
    splits: u64,
    shrinks: u64,
    /// a non-blocking communicator not yet said to be ready: its rank and
    /// size are not told, and the first ncclCommGetAsyncError says
    /// ncclInProgress
    pending: bool,
    sent: Vec<u64>,
    recvd: Vec<u64>,
    premul: HashMap<c_int, f64>,
    next_op: c_int,
}

#[derive(Clone, Copy)]
struct Op {
    comm: *mut Comm,
    func: u8,
    s: usize,
    r: usize,
    count: usize,
    dt: c_int,
    op: c_int,
    root: c_int,
    /// a PreMulSum op's scalar, read when the call is made (as NCCL does:
    /// the op may be destroyed once the call returned)
    scalar: f64,
}

const ALLREDUCE: u8 = 0;
const REDUCE: u8 = 1;
const BROADCAST: u8 = 2;
const ALLGATHER: u8 = 3;
const REDUCESCATTER: u8 = 4;
const ALLTOALL: u8 = 5;
const GATHER: u8 = 6;
const SCATTER: u8 = 7;
const SEND: u8 = 8;
const RECV: u8 = 9;

thread_local! {
    static GROUP: RefCell<(u32, Vec<Op>)> = RefCell::new((0, Vec::new()));
}

fn timeout() -> Duration {
    let s = std::env::var("RANKWISE_STANDIN_TIMEOUT")
        .ok()
        .and_then(|v| v.parse::<f64>().ok())
        .unwrap_or(20.0);
    Duration::from_secs_f64(s)
}

fn size_of(dt: c_int) -> usize {
    match dt {
        0 | 1 | 10 | 11 => 1,
        6 | 9 => 2,
        2 | 3 | 7 => 4,
        4 | 5 | 8 => 8,
        _ => 0,
    }
}

fn put(path: &PathBuf, bytes: &[u8]) -> Result<(), Res> {
    // one temporary name per process: ranks write their files side by side
    let mut tmp = path.clone().into_os_string();
    tmp.push(format!(".tmp{}", std::process::id()));
    std::fs::write(&tmp, bytes).map_err(|_| 2)?;
    std::fs::rename(&tmp, path).map_err(|_| 2)
}

fn take(path: &PathBuf) -> Result<Vec<u8>, Res> {
    let deadline = Instant::now() + timeout();
    loop {
        if let Ok(b) = std::fs::read(path) {
            return Ok(b);
        }
        if Instant::now() >= deadline {
            eprintln!("stand-in nccl: gave up waiting for {}", path.display());
            return Err(3);
        }
        // short sleeps, so a call costs about what the ranks' own work
        // costs rather than a millisecond (the interposer's cost is measured
        // against it); no spinning, which steals the core a peer needs
        std::thread::sleep(Duration::from_micros(20));
    }
}

unsafe fn bytes<'a>(addr: usize, n: usize) -> &'a [u8] {
    if n == 0 {
        return &[];
    }
    std::slice::from_raw_parts(addr as *const u8, n)
}

unsafe fn write(addr: usize, b: &[u8]) {
    if !b.is_empty() {
        std::ptr::copy(b.as_ptr(), addr as *mut u8, b.len());
    }
}

macro_rules! fold_int {
    ($t:ty, $acc:ident, $parts:ident, $op:expr, $n:expr) => {{
        let w = std::mem::size_of::<$t>();
        let get = |b: &[u8], i: usize| <$t>::from_le_bytes(b[i * w..(i + 1) * w].try_into().unwrap());
        let len = $acc.len() / w;
        for i in 0..len {
            let mut x = get(&$parts[0], i);
            for p in &$parts[1..] {
                let y = get(p, i);
                x = match $op {
                    0 | 4 => x.wrapping_add(y),
                    1 => x.wrapping_mul(y),
                    2 => x.max(y),
                    _ => x.min(y),
                };
            }
            if $op == 4 {
                x = (x as i128 / $n as i128) as $t;
            }
            $acc[i * w..(i + 1) * w].copy_from_slice(&x.to_le_bytes());
        }
    }};
}

macro_rules! fold_float {
    ($t:ty, $acc:ident, $parts:ident, $op:expr, $n:expr, $scalar:expr) => {{
        let w = std::mem::size_of::<$t>();
        let get = |b: &[u8], i: usize| <$t>::from_le_bytes(b[i * w..(i + 1) * w].try_into().unwrap());
        let len = $acc.len() / w;
        for i in 0..len {
            let pre = |x: $t| -> $t {
                match $op {
                    4 => x / ($n as $t),
                    o if o >= 5 => x * ($scalar as $t),
                    _ => x,
                }
            };
            let mut x = pre(get(&$parts[0], i));
            for p in &$parts[1..] {
                let y = pre(get(p, i));
                x = match $op {
                    1 => x * y,
                    2 => x.max(y),
                    3 => x.min(y),
                    _ => x + y,
                };
            }
            $acc[i * w..(i + 1) * w].copy_from_slice(&x.to_le_bytes());
        }
    }};
}

/// The element-wise reduction of `parts` (one per rank, in rank order).
fn reduce(parts: &[Vec<u8>], dt: c_int, op: c_int, scalar: f64) -> Result<Vec<u8>, Res> {
    let mut acc = parts[0].clone();
    let n = parts.len();
    match dt {
        0 => fold_int!(i8, acc, parts, op, n),
        1 => fold_int!(u8, acc, parts, op, n),
        2 => fold_int!(i32, acc, parts, op, n),
        3 => fold_int!(u32, acc, parts, op, n),
        4 => fold_int!(i64, acc, parts, op, n),
        5 => fold_int!(u64, acc, parts, op, n),
        7 => fold_float!(f32, acc, parts, op, n, scalar),
        8 => fold_float!(f64, acc, parts, op, n, scalar),
        _ => {
            eprintln!("stand-in nccl: no reduction on datatype {dt}");
            return Err(4);
        }
    }
    Ok(acc)
}

fn null() -> bool {
    static NULL: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *NULL.get_or_init(|| std::env::var("RANKWISE_STANDIN_NULL").as_deref() == Ok("1"))
}

unsafe fn run(o: &Op) -> Res {
    use std::sync::atomic::Ordering::SeqCst;
    if STUCK.load(SeqCst) {
        // queued behind a kernel that never ends: it never runs
        return 0;
    }
    if !matches!(o.func, SEND | RECV) && HANG_NEXT.swap(false, SeqCst) {
        std::thread::sleep(timeout());
        return 3;
    }
    if null() {
        return 0;
    }
    match post(o).and_then(|seq| finish(o, seq)) {
        Ok(()) => 0,
        Err(rc) => rc,
    }
}

/// A call's first half: a Send's file, a collective's contribution (with
/// the collective's number on its communicator). Collectives of several
/// communicators in one group post all before any finishes, so ranks that
/// are threads of one process (`ncclCommInitAll`) never wait on
/// themselves.
unsafe fn post(o: &Op) -> Result<u64, Res> {
    let c = &mut *o.comm;
    let (n, me, sz) = (c.nranks, c.rank, size_of(o.dt));
    let q = o.count * sz;
    if o.func == SEND {
        let peer = o.root as usize;
        let k = c.sent[peer];
        c.sent[peer] += 1;
        put(&c.dir.join(format!("p{me}-{peer}.{k}")), bytes(o.s, q))?;
        return Ok(0);
    }
    if o.func == RECV || o.count == 0 {
        return Ok(0);
    }
    let seq = c.seq;
    c.seq += 1;
    let root = o.root as usize;
    let mine: &[u8] = match o.func {
        ALLREDUCE | REDUCE | ALLGATHER | GATHER => bytes(o.s, q),
        REDUCESCATTER | ALLTOALL => bytes(o.s, n * q),
        BROADCAST => if me == root { bytes(o.s, q) } else { &[] },
        SCATTER => if me == root { bytes(o.s, n * q) } else { &[] },
        _ => return Err(3),
    };
    put(&c.dir.join(format!("c{seq}.{me}")), mine)?;
    Ok(seq)
}

/// A call's second half: a Recv, or a collective's output from every
/// rank's contribution.
unsafe fn finish(o: &Op, seq: u64) -> Result<(), Res> {
    let c = &mut *o.comm;
    let (n, me, sz) = (c.nranks, c.rank, size_of(o.dt));
    let q = o.count * sz;
    if o.func == SEND {
        return Ok(());
    }
    if o.func == RECV {
        let peer = o.root as usize;
        let k = c.recvd[peer];
        c.recvd[peer] += 1;
        let b = take(&c.dir.join(format!("p{peer}-{me}.{k}")))?;
        if b.len() != q {
            // as NCCL's, which waits for bytes its peer never sends (H200)
            eprintln!("stand-in nccl: rank {me} Recv of {q} bytes got {}", b.len());
            std::thread::sleep(timeout());
            return Err(3);
        }
        write(o.r, &b);
        return Ok(());
    }
    if o.count == 0 {
        return Ok(());
    }
    let root = o.root as usize;
    let get = |r: usize| take(&c.dir.join(format!("c{seq}.{r}")));
    let scalar = o.scalar;
    match o.func {
        ALLREDUCE | REDUCE => {
            if o.func == REDUCE && me != root {
                // every rank reads every contribution, so files stay consistent
                return Ok(());
            }
            let parts = (0..n).map(get).collect::<Result<Vec<_>, _>>()?;
            write(o.r, &reduce(&parts, o.dt, o.op, scalar)?);
        }
        BROADCAST => write(o.r, &get(root)?),
        ALLGATHER => {
            let all: Vec<u8> = (0..n).map(get).collect::<Result<Vec<_>, _>>()?.concat();
            write(o.r, &all);
        }
        GATHER => {
            if me == root {
                let all: Vec<u8> = (0..n).map(get).collect::<Result<Vec<_>, _>>()?.concat();
                write(o.r, &all);
            }
        }
        REDUCESCATTER => {
            let parts = (0..n)
                .map(|r| get(r).map(|b| b[me * q..(me + 1) * q].to_vec()))
                .collect::<Result<Vec<_>, _>>()?;
            write(o.r, &reduce(&parts, o.dt, o.op, scalar)?);
        }
        ALLTOALL => {
            let all: Vec<u8> = (0..n)
                .map(|r| get(r).map(|b| b[me * q..(me + 1) * q].to_vec()))
                .collect::<Result<Vec<_>, _>>()?
                .concat();
            write(o.r, &all);
        }
        SCATTER => {
            let b = get(root)?;
            write(o.r, &b[me * q..(me + 1) * q]);
        }
        _ => return Err(3),
    }
    Ok(())
}

unsafe fn submit(mut o: Op) -> Res {
    if o.comm.is_null() {
        return 4;
    }
    if !(*o.comm).pending {
        let rc = ensure_ready(o.comm);
        if rc != 0 {
            return rc;
        }
    }
    if o.op >= 5 && matches!(o.func, ALLREDUCE | REDUCE | REDUCESCATTER) {
        match (*o.comm).premul.get(&o.op) {
            Some(v) => o.scalar = *v,
            None => {
                eprintln!("stand-in nccl: op {} is no live PreMulSum op", o.op);
                return 4;
            }
        }
    }
    let queued = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 > 0 {
            g.1.push(o);
            true
        } else {
            false
        }
    });
    if queued { 0 } else { run(&o) }
}

extern "C" {
    fn dlsym(handle: *mut c_void, symbol: *const c_char) -> *mut c_void;
}

/// NCCL's readiness test (its `ncclCommEnsureReady`, which its collectives
/// and its `ncclCommCount`, `ncclCommUserRank` and `ncclCommCuDevice`
/// run): it asks the public `ncclCommGetAsyncError`, bound by the dynamic
/// linker as NCCL's own build binds it, so an interposer's definition is
/// the one asked. The code it reports is returned, `ncclInProgress` as
/// `ncclInvalidArgument`, as NCCL does.
unsafe fn ensure_ready(comm: *mut Comm) -> Res {
    static F: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    // RTLD_DEFAULT (a null handle in glibc): the process's global scope
    let f = *F.get_or_init(|| dlsym(std::ptr::null_mut(), c"ncclCommGetAsyncError".as_ptr()) as usize);
    if f == 0 {
        return 0;
    }
    let f: unsafe extern "C" fn(*mut Comm, *mut c_int) -> Res = std::mem::transmute(f);
    let mut st = 0;
    let rc = f(comm, &mut st);
    if rc != 0 {
        return rc;
    }
    if st == 7 { 4 } else { st }
}

macro_rules! export {
    ($p:ident, $n:ident, ($($a:ident: $t:ty),*) -> $r:ty $body:block) => {
        #[no_mangle]
        pub unsafe extern "C" fn $p($($a: $t),*) -> $r $body
        #[no_mangle]
        pub unsafe extern "C" fn $n($($a: $t),*) -> $r { $p($($a),*) }
    };
}

export!(pncclGetVersion, ncclGetVersion, (v: *mut c_int) -> Res {
    // 2.28.9, or what RANKWISE_STANDIN_VERSION says
    *v = std::env::var("RANKWISE_STANDIN_VERSION")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(22809);
    0
});

static COUNTER: Mutex<u64> = Mutex::new(0);

export!(pncclGetUniqueId, ncclGetUniqueId, (id: *mut UniqueId) -> Res {
    let mut k = COUNTER.lock().unwrap();
    *k += 1;
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    let magic = t ^ ((std::process::id() as u64) << 32) ^ (*k << 56);
    let mut b = [0u8; 128];
    b[..8].copy_from_slice(&magic.to_le_bytes());
    // AF_INET, and the address of the interface NCCL's bootstrap would
    // pick: RANKWISE_STANDIN_ADDR's (a simulated host's), else loopback
    let ip = match std::env::var("RANKWISE_STANDIN_ADDR") {
        Ok(a) => match a.parse::<std::net::Ipv4Addr>() {
            Ok(ip) => ip,
            Err(_) => return 4,
        },
        Err(_) => std::net::Ipv4Addr::LOCALHOST,
    };
    b[8..10].copy_from_slice(&2u16.to_le_bytes());
    b[12..16].copy_from_slice(&ip.octets());
    (*id).internal = b;
    0
});

fn base_dir() -> PathBuf {
    std::env::var_os("RANKWISE_STANDIN_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir)
}

fn new_comm(dir: PathBuf, rank: usize, nranks: usize) -> *mut Comm {
    let _ = std::fs::create_dir_all(&dir);
    Box::into_raw(Box::new(Comm {
        dir,
        rank,
        nranks,
        seq: 0,
        splits: 0,
        shrinks: 0,
        pending: false,
        sent: vec![0; nranks],
        recvd: vec![0; nranks],
        premul: HashMap::new(),
        next_op: 5,
    }))
}

unsafe fn init(comm: *mut *mut Comm, nranks: c_int, id: UniqueId, rank: c_int) -> Res {
    if nranks <= 0 || rank < 0 || rank >= nranks {
        return 4;
    }
    let magic = u64::from_le_bytes(id.internal[..8].try_into().unwrap());
    *comm = new_comm(base_dir().join(format!("{magic:016x}")), rank as usize, nranks as usize);
    0
}

export!(pncclCommInitRank, ncclCommInitRank, (comm: *mut *mut Comm, nranks: c_int, id: UniqueId, rank: c_int) -> Res {
    init(comm, nranks, id, rank)
});

/// Whether an `ncclConfig_t` asks for a non-blocking communicator: its
/// `blocking` field (after size, magic and version) is 0.
unsafe fn non_blocking(config: *mut c_void) -> bool {
    !config.is_null() && *(config as *const u8).add(16).cast::<c_int>() == 0
}

export!(pncclCommInitRankConfig, ncclCommInitRankConfig, (comm: *mut *mut Comm, nranks: c_int, id: UniqueId, rank: c_int, config: *mut c_void) -> Res {
    let rc = init(comm, nranks, id, rank);
    if rc == 0 && non_blocking(config) {
        (**comm).pending = true;
        return 7;
    }
    rc
});

export!(pncclCommInitAll, ncclCommInitAll, (comms: *mut *mut Comm, ndev: c_int, _devlist: *const c_int) -> Res {
    if ndev <= 0 || comms.is_null() {
        return 4;
    }
    let mut id = std::mem::zeroed::<UniqueId>();
    pncclGetUniqueId(&mut id);
    let magic = u64::from_le_bytes(id.internal[..8].try_into().unwrap());
    let dir = base_dir().join(format!("all{magic:016x}"));
    for r in 0..ndev as usize {
        *comms.add(r) = new_comm(dir.clone(), r, ndev as usize);
    }
    0
});

export!(pncclCommShrink, ncclCommShrink, (comm: *mut Comm, exclude: *mut c_int, n_exclude: c_int, newcomm: *mut *mut Comm, config: *mut c_void, _flags: c_int) -> Res {
    let c = &mut *comm;
    let gone: Vec<usize> = (0..n_exclude.max(0) as usize).map(|i| *exclude.add(i) as usize).collect();
    if gone.contains(&c.rank) {
        return 4;
    }
    let members: Vec<usize> = (0..c.nranks).filter(|r| !gone.contains(r)).collect();
    let rank = members.iter().position(|r| *r == c.rank).unwrap_or(0);
    let k = c.shrinks;
    c.shrinks += 1;
    *newcomm = new_comm(c.dir.join(format!("k{k}")), rank, members.len());
    if non_blocking(config) {
        (**newcomm).pending = true;
        return 7;
    }
    0
});

export!(pncclCommRevoke, ncclCommRevoke, (_comm: *mut Comm, _flags: c_int) -> Res { 0 });

export!(pncclCommRegister, ncclCommRegister, (_comm: *mut Comm, _buff: *mut c_void, _size: usize, handle: *mut *mut c_void) -> Res {
    *handle = 0x4e6 as *mut c_void;
    0
});

export!(pncclCommDeregister, ncclCommDeregister, (_comm: *mut Comm, _handle: *mut c_void) -> Res { 0 });

export!(pncclCommWindowRegister, ncclCommWindowRegister, (_comm: *mut Comm, _buff: *mut c_void, _size: usize, win: *mut *mut c_void, _flags: c_int) -> Res {
    *win = 0x3a5 as *mut c_void;
    0
});

export!(pncclCommWindowDeregister, ncclCommWindowDeregister, (_comm: *mut Comm, _win: *mut c_void) -> Res { 0 });

export!(pncclResetDebugInit, ncclResetDebugInit, () -> () {});

export!(pncclCommSplit, ncclCommSplit, (comm: *mut Comm, color: c_int, key: c_int, newcomm: *mut *mut Comm, _config: *mut c_void) -> Res {
    let c = &mut *comm;
    let k = c.splits;
    c.splits += 1;
    if put(&c.dir.join(format!("split{k}.{}", c.rank)), format!("{color} {key}").as_bytes()).is_err() {
        return 2;
    }
    let mut members = Vec::new();
    for r in 0..c.nranks {
        let b = match take(&c.dir.join(format!("split{k}.{r}"))) {
            Ok(b) => b,
            Err(rc) => return rc,
        };
        let s = String::from_utf8_lossy(&b).to_string();
        let mut it = s.split(' ').map(|x| x.parse::<c_int>().unwrap_or(-1));
        let (col, key) = (it.next().unwrap_or(-1), it.next().unwrap_or(0));
        if col == color && color >= 0 {
            members.push((key, r));
        }
    }
    if color < 0 {
        *newcomm = std::ptr::null_mut();
        return 0;
    }
    members.sort();
    let rank = members.iter().position(|m| m.1 == c.rank).unwrap_or(0);
    *newcomm = new_comm(c.dir.join(format!("s{k}c{color}")), rank, members.len());
    if non_blocking(_config) {
        (**newcomm).pending = true;
        return 7;
    }
    0
});

/// The communicator's size or rank (`what`), told only once it is ready.
unsafe fn tell(comm: *mut Comm, out: *mut c_int, what: fn(&Comm) -> usize) -> Res {
    if (*comm).pending {
        return 7;
    }
    let rc = ensure_ready(comm);
    if rc == 0 {
        *out = what(&*comm) as c_int;
    }
    rc
}

export!(pncclCommCount, ncclCommCount, (comm: *mut Comm, count: *mut c_int) -> Res { tell(comm, count, |c| c.nranks) });

export!(pncclCommUserRank, ncclCommUserRank, (comm: *mut Comm, rank: *mut c_int) -> Res { tell(comm, rank, |c| c.rank) });

export!(pncclCommCuDevice, ncclCommCuDevice, (comm: *mut Comm, dev: *mut c_int) -> Res {
    if !(*comm).pending {
        let rc = ensure_ready(comm);
        if rc != 0 {
            return rc;
        }
    }
    *dev = 0;
    0
});

export!(pncclCommFinalize, ncclCommFinalize, (_comm: *mut Comm) -> Res { 0 });

export!(pncclCommDestroy, ncclCommDestroy, (comm: *mut Comm) -> Res {
    if !comm.is_null() {
        drop(Box::from_raw(comm));
    }
    0
});

export!(pncclCommAbort, ncclCommAbort, (comm: *mut Comm) -> Res { pncclCommDestroy(comm) });

export!(pncclCommGetAsyncError, ncclCommGetAsyncError, (comm: *mut Comm, st: *mut c_int) -> Res {
    *st = if std::mem::replace(&mut (*comm).pending, false) { 7 } else { 0 };
    0
});

export!(pncclGetErrorString, ncclGetErrorString, (_rc: c_int) -> *const c_char {
    c"stand-in nccl error".as_ptr()
});

export!(pncclGetLastError, ncclGetLastError, (_comm: *mut Comm) -> *const c_char {
    c"".as_ptr()
});

static ALLOCS: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());

export!(pncclMemAlloc, ncclMemAlloc, (ptr: *mut *mut c_void, size: usize) -> Res {
    let layout = std::alloc::Layout::from_size_align(size.max(1), 256).unwrap();
    let p = std::alloc::alloc_zeroed(layout);
    if p.is_null() {
        return 2;
    }
    ALLOCS.lock().unwrap().push((p as usize, size.max(1)));
    *ptr = p as *mut c_void;
    0
});

export!(pncclMemFree, ncclMemFree, (ptr: *mut c_void) -> Res {
    let mut a = ALLOCS.lock().unwrap();
    if let Some(i) = a.iter().position(|x| x.0 == ptr as usize) {
        let (p, size) = a.swap_remove(i);
        std::alloc::dealloc(p as *mut u8, std::alloc::Layout::from_size_align(size, 256).unwrap());
    }
    0
});

export!(pncclRedOpCreatePreMulSum, ncclRedOpCreatePreMulSum, (op: *mut c_int, scalar: *mut c_void, dt: c_int, _residence: c_int, comm: *mut Comm) -> Res {
    let c = &mut *comm;
    let v = match dt {
        7 => *(scalar as *const f32) as f64,
        8 => *(scalar as *const f64),
        _ => return 4,
    };
    *op = c.next_op;
    c.premul.insert(c.next_op, v);
    c.next_op += 1;
    0
});

export!(pncclRedOpDestroy, ncclRedOpDestroy, (op: c_int, comm: *mut Comm) -> Res {
    (*comm).premul.remove(&op);
    0
});

export!(pncclGroupStart, ncclGroupStart, () -> Res {
    GROUP.with(|g| g.borrow_mut().0 += 1);
    0
});

/// Closes one level of the thread's group: its calls at the outermost.
fn close_group() -> Option<Vec<Op>> {
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.0 == 0 {
            return None;
        }
        g.0 -= 1;
        Some(if g.0 == 0 { std::mem::take(&mut g.1) } else { Vec::new() })
    })
}

export!(pncclGroupEnd, ncclGroupEnd, () -> Res {
    let Some(ops) = close_group() else { return 5 };
    if null() {
        return 0;
    }
    // every call's first half, then every call's second: nothing a group
    // waits for is behind it
    let mut rc = 0;
    let mut seqs = Vec::with_capacity(ops.len());
    for o in &ops {
        match post(o) {
            Ok(seq) => seqs.push(seq),
            Err(r) => return r,
        }
    }
    for pass in [1, 2] {
        for (o, seq) in ops.iter().zip(&seqs) {
            let class = if o.func == RECV { 2 } else { 1 };
            if class == pass {
                if let Err(r) = finish(o, *seq) {
                    if rc == 0 {
                        rc = r;
                    }
                }
            }
        }
    }
    rc
});

/// `ncclSimInfo_t`'s fields before the estimate: size, magic, version.
#[repr(C)]
pub struct SimInfo {
    size: usize,
    magic: u32,
    version: u32,
    estimated_time: f32,
}

export!(pncclGroupSimulateEnd, ncclGroupSimulateEnd, (sim: *mut SimInfo) -> Res {
    let Some(ops) = close_group() else { return 5 };
    if !sim.is_null() {
        // a made-up estimate: a microsecond per call
        (*sim).estimated_time = ops.len() as f32;
    }
    0
});

type S = *const c_void;
type R = *mut c_void;

fn op(comm: *mut Comm, func: u8, s: usize, r: usize, count: usize, dt: c_int, op: c_int, root: c_int) -> Op {
    Op { comm, func, s, r, count, dt, op, root, scalar: 1.0 }
}

export!(pncclAllReduce, ncclAllReduce, (s: S, r: R, n: usize, dt: c_int, o: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, ALLREDUCE, s as usize, r as usize, n, dt, o, 0))
});
export!(pncclReduce, ncclReduce, (s: S, r: R, n: usize, dt: c_int, o: c_int, root: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, REDUCE, s as usize, r as usize, n, dt, o, root))
});
export!(pncclBroadcast, ncclBroadcast, (s: S, r: R, n: usize, dt: c_int, root: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, BROADCAST, s as usize, r as usize, n, dt, 0, root))
});
export!(pncclBcast, ncclBcast, (b: R, n: usize, dt: c_int, root: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, BROADCAST, b as usize, b as usize, n, dt, 0, root))
});
export!(pncclAllGather, ncclAllGather, (s: S, r: R, n: usize, dt: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, ALLGATHER, s as usize, r as usize, n, dt, 0, 0))
});
export!(pncclReduceScatter, ncclReduceScatter, (s: S, r: R, n: usize, dt: c_int, o: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, REDUCESCATTER, s as usize, r as usize, n, dt, o, 0))
});
export!(pncclAlltoAll, ncclAlltoAll, (s: S, r: R, n: usize, dt: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, ALLTOALL, s as usize, r as usize, n, dt, 0, 0))
});
export!(pncclGather, ncclGather, (s: S, r: R, n: usize, dt: c_int, root: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, GATHER, s as usize, r as usize, n, dt, 0, root))
});
export!(pncclScatter, ncclScatter, (s: S, r: R, n: usize, dt: c_int, root: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, SCATTER, s as usize, r as usize, n, dt, 0, root))
});
export!(pncclSend, ncclSend, (s: S, n: usize, dt: c_int, peer: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, SEND, s as usize, 0, n, dt, 0, peer))
});
export!(pncclRecv, ncclRecv, (r: R, n: usize, dt: c_int, peer: c_int, comm: *mut Comm, _st: *mut c_void) -> Res {
    submit(op(comm, RECV, 0, r as usize, n, dt, 0, peer))
});
