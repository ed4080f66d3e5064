//! The rank programs of the API tests: the entry points beyond init,
//! collectives and groups, each used as a program would, with outputs
//! checked against closed forms and mismatches expected to be caught.
#![allow(dead_code)]

use crate::ranks::*;
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// `ncclConfig_t` as 2.28 lays it out: size, magic, version, then the
/// attributes, `blocking` first.
#[repr(C)]
pub struct Config {
    size: usize,
    magic: u32,
    version: u32,
    blocking: c_int,
    rest: [c_int; 16],
}

impl Config {
    /// NCCL_CONFIG_INITIALIZER with `blocking` set.
    pub fn blocking(blocking: bool) -> Config {
        Config {
            size: std::mem::size_of::<Config>(),
            magic: 0xcafe_beef,
            version: 22809,
            blocking: c_int::from(blocking),
            rest: [c_int::MIN; 16],
        }
    }
}

/// `ncclSimInfo_t`: size, magic, version, the estimated time.
#[repr(C)]
pub struct SimInfo {
    size: usize,
    magic: u32,
    version: u32,
    estimated_time: f32,
}

/// One AllReduce per communicator of `comms`, from one thread in one
/// group; rank r contributes `value(r)` in `count(r)` int32. The group's
/// code and each output.
fn grouped_all_reduce(
    nc: &Nccl,
    comms: &[Comm],
    count: impl Fn(usize) -> usize,
    value: impl Fn(usize) -> i32,
) -> (Res, Vec<Vec<i32>>) {
    let bufs: Vec<(*mut i32, *mut i32, usize)> = (0..comms.len())
        .map(|r| {
            let n = count(r);
            (vec_of(nc, &vec![value(r); n]), alloc::<i32>(nc, n), n)
        })
        .collect();
    // SAFETY: buffers of count(r) int32 each.
    let rc = unsafe {
        (nc.group_start)();
        for (c, (s, d, n)) in comms.iter().zip(&bufs) {
            (nc.all_reduce)(*s as Ptr, *d as Ptr, *n, INT32, SUM, *c, NULL);
        }
        (nc.group_end)()
    };
    (rc, bufs.iter().map(|(_, d, n)| read(*d, *n)).collect())
}

/// Several ranks of one communicator from one thread: correct AllReduces
/// give the closed form on every rank; one with another count on rank 2
/// is caught.
fn all_ranks_here(nc: &Nccl, comms: &[Comm]) -> Result<(), String> {
    let n = comms.len();
    let sum: i32 = (0..n as i32).map(|r| r + 1).sum();
    let (rc, outs) = grouped_all_reduce(nc, comms, |_| 3, |r| r as i32 + 1);
    expect_eq("grouped AllReduce rc", rc, 0)?;
    expect_eq("grouped AllReduce", outs, vec![vec![sum; 3]; n])?;
    let (rc, _) = grouped_all_reduce(nc, comms, |r| if r == 2 { 5 } else { 4 }, |_| 1);
    expect_eq("mismatched grouped AllReduce rc", rc, 5)?;
    let err = last_error(nc, NULL);
    if !err.contains("count differs") || !err.contains("rank 2 passes 5") {
        return Err(format!("ncclGetLastError(NULL) says {err:?}"));
    }
    Ok(())
}

/// `ncclCommInitAll` of 4 ranks in this one process.
pub fn init_all() -> Result<(), String> {
    let nc = Nccl::load();
    let mut comms = [NULL; 4];
    // SAFETY: room for 4 communicators; no device list.
    let rc = unsafe { (nc.init_all)(comms.as_mut_ptr(), 4, std::ptr::null()) };
    expect_eq("ncclCommInitAll rc", rc, 0)?;
    all_ranks_here(&nc, &comms)?;
    println!("init_all ok");
    Ok(())
}

/// 4 ranks initialised from this one thread inside a group, as nccl.h
/// shows it: the inits return at once, and the communicators are checked.
pub fn grouped_init() -> Result<(), String> {
    let nc = Nccl::load();
    let id = shared_id(&nc, 0);
    let mut comms = [NULL; 4];
    let t = Instant::now();
    // SAFETY: out-pointers, the size, the id and each rank.
    let rc = unsafe {
        (nc.group_start)();
        for (r, c) in comms.iter_mut().enumerate() {
            (nc.init_rank)(c, 4, id, r as c_int);
        }
        (nc.group_end)()
    };
    expect_eq("grouped init rc", rc, 0)?;
    println!("grouped init took {} ms", t.elapsed().as_millis());
    all_ranks_here(&nc, &comms)?;
    println!("grouped_init ok");
    Ok(())
}

/// Ranks 0..n-1 shrink the communicator without the last rank; the new
/// one agrees and is checked.
pub fn shrink(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 2]).0, 0)?;
    let last = k.n - 1;
    if k.rank == last {
        println!("shrink ok (excluded)");
        return Ok(());
    }
    let mut excluded = [last as c_int];
    let mut child: Comm = NULL;
    // SAFETY: a live communicator, one excluded rank, an out-pointer.
    let rc = unsafe { (k.nccl.shrink)(k.comm, excluded.as_mut_ptr(), 1, &mut child, NULL, 0) };
    expect_eq("ncclCommShrink rc", rc, 0)?;
    let m = last as i32;
    let (rc, out) = all_reduce_i32(&k.nccl, child, &[k.rank as i32, 1]);
    expect_eq(
        "AllReduce on the shrunk communicator",
        (rc, out),
        (0, vec![m * (m - 1) / 2, m]),
    )?;
    let len = if k.rank == 1 { 5 } else { 4 };
    let (rc, _) = all_reduce_i32(&k.nccl, child, &vec![1; len]);
    expect_eq("mismatched AllReduce on the shrunk communicator", rc, 5)?;
    println!("shrink ok: {}", k.last_error());
    Ok(())
}

/// A non-blocking communicator (`config.blocking = 0`) and a non-blocking
/// split of it: each returns `ncclInProgress` at once, becomes ready as
/// `ncclCommGetAsyncError` says, and is checked.
pub fn non_blocking() -> Result<(), String> {
    let (rank, n) = rank_and_size();
    let nc = Nccl::load();
    let id = shared_id(&nc, rank);
    let mut config = Config::blocking(false);
    let mut comm: Comm = NULL;
    let t = Instant::now();
    // SAFETY: out-pointer, size, id, rank, a whole config.
    let rc = unsafe {
        (nc.init_rank_config)(
            &mut comm,
            n as c_int,
            id,
            rank as c_int,
            &mut config as *mut Config as Ptr,
        )
    };
    println!("non-blocking init took {} ms", t.elapsed().as_millis());
    expect_eq("non-blocking init rc", rc, 7)?;
    wait_ready(&nc, comm)?;
    let (rc, _) = all_reduce_i32(&nc, comm, &vec![1; if rank == 1 { 5 } else { 4 }]);
    expect_eq("mismatched AllReduce rc", rc, 5)?;
    // a non-blocking split (by parity) of a blocking communicator
    let mut child: Comm = NULL;
    let mut blocking = Config::blocking(true);
    let mut parent: Comm = NULL;
    let id = shared_id_named(&nc, rank, "id2");
    // SAFETY: as above, blocking this time.
    let rc = unsafe {
        (nc.init_rank_config)(
            &mut parent,
            n as c_int,
            id,
            rank as c_int,
            &mut blocking as *mut Config as Ptr,
        )
    };
    expect_eq("blocking init rc", rc, 0)?;
    // SAFETY: a live communicator, an out-pointer, a whole config.
    let rc = unsafe {
        (nc.split)(
            parent,
            (rank % 2) as c_int,
            rank as c_int,
            &mut child,
            &mut config as *mut Config as Ptr,
        )
    };
    expect_eq("non-blocking split rc", rc, 7)?;
    wait_ready(&nc, child)?;
    let len = if rank == 2 { 5 } else { 4 };
    let (rc, _) = all_reduce_i32(&nc, child, &vec![1; len]);
    // ranks 0 and 2 share a child: rank 2's count differs
    expect_eq(
        "mismatched AllReduce on the split rc",
        rc,
        if rank % 2 == 0 { 5 } else { 0 },
    )?;
    println!("non_blocking ok");
    Ok(())
}

/// Polls `ncclCommGetAsyncError` until the communicator is ready.
fn wait_ready(nc: &Nccl, comm: Comm) -> Result<(), String> {
    let t = Instant::now();
    loop {
        let mut st: Res = -1;
        // SAFETY: a communicator NCCL is making, an out-pointer.
        let rc = unsafe { (nc.get_async_error)(comm, &mut st) };
        expect_eq("ncclCommGetAsyncError rc", rc, 0)?;
        match st {
            0 => return Ok(()),
            7 if t.elapsed() < Duration::from_secs(10) => {
                std::thread::sleep(Duration::from_millis(1))
            }
            s => return Err(format!("async error {s}")),
        }
    }
}

/// A group closed by `ncclGroupSimulateEnd`, then a real group and a
/// plain call: both reach NCCL and give the closed form.
pub fn simulate(k: &Rank) -> Result<(), String> {
    let nc = &k.nccl;
    let n = k.n as i32;
    let s = vec_of(nc, &[k.rank as i32, 1]);
    let d = alloc::<i32>(nc, 2);
    let mut sim = SimInfo {
        size: std::mem::size_of::<SimInfo>(),
        magic: 0x7468_5283,
        version: 22809,
        estimated_time: -1.0,
    };
    // SAFETY: buffers of 2 int32, a whole ncclSimInfo_t.
    let rc = unsafe {
        (nc.group_start)();
        (nc.all_reduce)(s as Ptr, d as Ptr, 2, INT32, SUM, k.comm, NULL);
        (nc.group_simulate_end)(&mut sim as *mut SimInfo as Ptr)
    };
    expect_eq("ncclGroupSimulateEnd rc", rc, 0)?;
    if sim.estimated_time < 0.0 {
        return Err("NCCL saw no call to simulate".into());
    }
    fill(d, &[-1, -1]);
    // SAFETY: as above.
    let rc = unsafe {
        (nc.group_start)();
        (nc.all_reduce)(s as Ptr, d as Ptr, 2, INT32, SUM, k.comm, NULL);
        (nc.group_end)()
    };
    expect_eq(
        "the group after it",
        (rc, read(d, 2)),
        (0, vec![n * (n - 1) / 2, n]),
    )?;
    let (rc, out) = k.all_reduce_i32(&[2, 3]);
    expect_eq("a call after it", (rc, out), (0, vec![2 * n, 3 * n]))?;
    println!("simulate ok");
    Ok(())
}

/// A PreMulSum op destroyed inside the group whose AllReduce uses it,
/// before the group's end: the call still reaches NCCL with its op.
pub fn premul(k: &Rank) -> Result<(), String> {
    let nc = &k.nccl;
    let n = k.n as f32;
    let x = vec_of(nc, &[k.rank as f32 + 1.0, 2.0]);
    let d = alloc::<f32>(nc, 2);
    let mut op: c_int = -1;
    let mut scalar = 0.5f32;
    // SAFETY: an out-pointer, a host scalar of one float, buffers of 2 floats.
    let rc = unsafe {
        (nc.group_start)();
        let made = (nc.premul_create)(&mut op, &mut scalar as *mut f32 as Ptr, FLOAT, 1, k.comm);
        assert_eq!(made, 0, "ncclRedOpCreatePreMulSum");
        (nc.all_reduce)(x as Ptr, d as Ptr, 2, FLOAT, op, k.comm, NULL);
        let destroyed = (nc.op_destroy)(op, k.comm);
        assert_eq!(destroyed, 0, "ncclRedOpDestroy");
        (nc.group_end)()
    };
    let sum = n * (n + 1.0) / 2.0;
    expect_eq(
        "PreMulSum AllReduce",
        (rc, read(d, 2)),
        (0, vec![0.5 * sum, n]),
    )?;
    println!("premul ok");
    Ok(())
}

/// `ncclGetLastError(NULL)`: this thread's last error (a refused call),
/// another thread's own, and the text still there after destroy.
pub fn last_error_of_thread(k: &Rank) -> Result<(), String> {
    let nc = &k.nccl;
    let b = vec_of(nc, &[1i32; 4]);
    // SAFETY: a NULL recvbuff: refused before any buffer is read.
    let rc = unsafe { (nc.all_reduce)(b as Ptr, NULL, 4, INT32, SUM, k.comm, NULL) };
    expect_eq("refused AllReduce rc", rc, 4)?;
    // SAFETY: the answer is a NUL-terminated string.
    let p = unsafe { (nc.last_error)(NULL) };
    let text = |p| {
        // SAFETY: a NUL-terminated string the interposer keeps.
        unsafe { std::ffi::CStr::from_ptr(p) }
            .to_string_lossy()
            .into_owned()
    };
    let mine = text(p);
    if !mine.contains("AllReduce: recvbuff is NULL") {
        return Err(format!("ncclGetLastError(NULL) says {mine:?}"));
    }
    let last = nc.last_error;
    let theirs = std::thread::spawn(move || last_error_addr(last))
        .join()
        .unwrap();
    if theirs.contains("recvbuff") {
        return Err(format!(
            "another thread's ncclGetLastError(NULL) says {theirs:?}"
        ));
    }
    // SAFETY: a live communicator, destroyed once.
    expect_eq("destroy", unsafe { (nc.destroy)(k.comm) }, 0)?;
    expect_eq("the text after destroy", text(p), mine.clone())?;
    println!("last_error ok: {mine}");
    Ok(())
}

fn last_error_addr(f: unsafe extern "C" fn(Comm) -> *const std::ffi::c_char) -> String {
    // SAFETY: NULL asks for this thread's; the answer is NUL-terminated.
    let p = unsafe { f(NULL) };
    // SAFETY: as above.
    unsafe { std::ffi::CStr::from_ptr(p) }
        .to_string_lossy()
        .into_owned()
}

/// `ncclCommGetAsyncError` before and after a count mismatch.
pub fn async_error(k: &Rank) -> Result<(), String> {
    let ask = || {
        let mut st: Res = -1;
        // SAFETY: a live communicator, an out-pointer.
        let rc = unsafe { (k.nccl.get_async_error)(k.comm, &mut st) };
        (rc, st)
    };
    expect_eq("async error before", ask(), (0, 0))?;
    let len = if k.rank == 2 { 5 } else { 4 };
    expect_eq(
        "mismatched AllReduce rc",
        k.all_reduce_i32(&vec![1; len]).0,
        5,
    )?;
    expect_eq("async error after", ask(), (0, 5))?;
    // NCCL's own readiness test inside ncclCommUserRank asks
    // ncclCommGetAsyncError too: it gets NCCL's answer, not the checker's
    let mut rank: c_int = -1;
    // SAFETY: a live communicator, an out-pointer.
    let rc = unsafe { (k.nccl.user_rank)(k.comm, &mut rank) };
    expect_eq(
        "ncclCommUserRank after the failure",
        (rc, rank),
        (0, k.rank as c_int),
    )?;
    println!("async_error ok");
    Ok(())
}

/// The last rank never makes the second AllReduce: the others' code.
pub fn timeout_code(k: &Rank) -> Result<(), String> {
    expect_eq("first AllReduce", k.all_reduce_i32(&[1; 4]).0, 0)?;
    if k.rank == k.n - 1 {
        std::thread::sleep(Duration::from_secs(3));
        return Ok(());
    }
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    println!("timeout rc {rc}: {}", k.last_error());
    Ok(())
}

/// An AllReduce on a stream the driver says is being captured.
pub fn capture(k: &Rank) -> Result<(), String> {
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    expect_eq("AllReduce rc", rc, 0)?;
    let (nc, n) = (&k.nccl, k.n as i32);
    let s = vec_of(nc, &[1i32; 4]);
    let d = alloc::<i32>(nc, 4);
    // the stand-in's driver: this stream is being captured
    let captured = 0xca97 as Ptr;
    // SAFETY: buffers of 4 int32.
    let rc = unsafe { (nc.all_reduce)(s as Ptr, d as Ptr, 4, INT32, SUM, k.comm, captured) };
    expect_eq("captured AllReduce", (rc, read(d, 4)), (0, vec![n; 4]))?;
    println!("capture ok");
    Ok(())
}

/// The rank program of the API tests.
pub fn rank_main() {
    let Ok(scenario) = std::env::var("RANKWISE_TEST_SCENARIO") else {
        return;
    };
    let r = match scenario.as_str() {
        "init_all" => init_all(),
        "grouped_init" => grouped_init(),
        "non_blocking" => non_blocking(),
        s => {
            let k = Rank::start();
            match s {
                "shrink" => shrink(&k),
                "simulate" => simulate(&k),
                "premul" => premul(&k),
                "last_error" => last_error_of_thread(&k),
                "async_error" => async_error(&k),
                "timeout_code" => timeout_code(&k),
                "capture" => capture(&k),
                s => Err(format!("no scenario {s}")),
            }
        }
    };
    if let Err(e) = r {
        panic!("{e}");
    }
}
