//! The rank programs the interposer's tests run, one per scenario: each
//! makes NCCL calls through the interposer and checks what comes back
//! against closed forms.
#![allow(dead_code)]

use crate::ranks::*;
use std::ffi::c_int;
use std::time::{Duration, Instant};

/// Every collective and Send/Recv pattern, outputs against closed forms.
pub fn forward(k: &Rank) -> Result<(), String> {
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
pub fn alltoallv(k: &Rank, skew: impl Fn(usize, usize) -> usize) -> Result<(), (Res, String)> {
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
pub fn argcheck(k: &Rank) -> Result<(), String> {
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
pub fn count(k: &Rank) -> Result<(), String> {
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
pub fn skip(k: &Rank) -> Result<(), String> {
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
pub fn unmatched(k: &Rank) -> Result<(), String> {
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

/// A ring exchange made outside a group: each rank Sends to the next
/// before it Recvs from the one before, so each Send waits for a Recv its
/// peer makes only after its own Send.
pub fn ring_ungrouped(k: &Rank) -> Result<(), String> {
    let (r, n) = (k.rank, k.n);
    let s = vec_of(&k.nccl, &[r as i32; 8]);
    // SAFETY: a buffer of 8 int32.
    let rc = unsafe { (k.nccl.send)(s as Ptr, 8, INT32, ((r + 1) % n) as c_int, k.comm, NULL) };
    println!("ring send rc {rc}");
    if rc == 0 {
        return Err("a Send in a ring made outside a group returned ncclSuccess".into());
    }
    Ok(())
}

/// AlltoAllv where rank 2 expects 1 more element from rank 3 than rank 3
/// sends it (a split that is not the transpose of rank 3's).
pub fn alltoallv_bad(k: &Rank) -> Result<(), String> {
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
pub fn unchecked_count(k: &Rank) -> Result<(), String> {
    let len = if k.rank == 2 { 5 } else { 4 };
    let (rc, _) = k.all_reduce_i32(&vec![1; len]);
    expect_eq("forwarded AllReduce rc", rc, 0)?;
    println!("unchecked ok");
    Ok(())
}

/// `RANKWISE_CHECK=local`: a bad root is still refused on its rank; rank
/// 2's count mismatch is not seen (nothing is compared across ranks) and
/// is forwarded, and the stand-in, like NCCL, returns success.
pub fn local(k: &Rank) -> Result<(), String> {
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
pub fn late(k: &Rank) -> Result<(), String> {
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
pub fn percall(k: &Rank) -> Result<(), String> {
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

/// Watch mode: the bug `RANKWISE_TEST_BUG` names (`count`, `skip`,
/// `extra`, `swap`, `unmatched`, `late`: rank 3 stops calling for 3 s, or
/// `clean`: none) after a few correct
/// steps, then AllReduces until one is refused (the checker failed the
/// communicator) or 5 s pass; with `RANKWISE_TEST_END` the rank destroys
/// its communicator right after the bug instead. Prints what it saw.
pub fn watch(k: &Rank) -> Result<(), String> {
    let (nc, comm, r, n) = (&k.nccl, k.comm, k.rank, k.n);
    let b = vec_of(nc, &[1i32; 64]);
    let big = alloc::<i32>(nc, 64 * n);
    let ok = |what: &str, rc: Res| expect_eq(what, rc, 0);
    let step = |i: usize| -> Result<(), String> {
        ok("step AllReduce", k.all_reduce_i32(&[1; 4]).0)?;
        // SAFETY: buffers of 64 int32 (`big`: 64 per rank).
        unsafe {
            (nc.group_start)();
            (nc.send)(b as Ptr, 8, INT32, ((r + 1) % n) as c_int, comm, NULL);
            (nc.recv)(b as Ptr, 8, INT32, ((r + n - 1) % n) as c_int, comm, NULL);
            ok("step ring", (nc.group_end)())?;
            ok(
                "step AllGather",
                (nc.all_gather)(b as Ptr, big as Ptr, 8 + i % 3, INT32, comm, NULL),
            )?;
            // count 0: NCCL does nothing, and neither is it compared
            ok(
                "step empty",
                (nc.all_reduce)(b as Ptr, b as Ptr, 0, INT32, SUM, comm, NULL),
            )?;
        }
        Ok(())
    };
    for i in 0..5 {
        step(i)?;
    }
    let bug = std::env::var("RANKWISE_TEST_BUG").unwrap_or_default();
    // SAFETY: a buffer of 64 int32.
    let bcast = || unsafe { (nc.broadcast)(b as Ptr, b as Ptr, 4, INT32, 0, comm, NULL) };
    // SAFETY: a buffer of 64 int32 and one of 64 per rank.
    let gather = || unsafe { (nc.all_gather)(b as Ptr, big as Ptr, 4, INT32, comm, NULL) };
    // SAFETY: a buffer of 64 int32.
    let reduce = || unsafe { (nc.reduce)(b as Ptr, b as Ptr, 4, INT32, SUM, 0, comm, NULL) };
    // SAFETY: a buffer of 64 int32.
    let send = || unsafe { (nc.send)(b as Ptr, 16, INT32, 1, comm, NULL) };
    // SAFETY: a buffer of 64 int32.
    let recv = |count| unsafe { (nc.recv)(b as Ptr, count, INT32, 0, comm, NULL) };
    let rcs: Vec<Res> = match bug.as_str() {
        "count" => vec![k.all_reduce_i32(&vec![1; if r == 2 { 5 } else { 4 }]).0],
        "skip" if r == 2 => vec![],
        "skip" => vec![bcast()],
        "extra" if r == 1 => vec![reduce(), gather()],
        "extra" => vec![gather()],
        "swap" if r == 0 => vec![gather(), bcast()],
        "swap" => vec![bcast(), gather()],
        "unmatched" if r == 0 => vec![send()],
        // the program's last calls: counts that differ, with no cut after
        "lastsplit" if r == 0 => vec![send()],
        "lastsplit" if r == 1 => vec![recv(8)],
        "late" if r == 3 => {
            // makes no call for 3 s while the others go on
            std::thread::sleep(Duration::from_secs(3));
            vec![]
        }
        "unmatched" | "clean" | "late" | "lastsplit" => vec![],
        other => return Err(format!("no bug {other}")),
    };
    for rc in rcs {
        ok("the bug's own calls (watch mode forwards them)", rc)?;
    }
    if std::env::var("RANKWISE_TEST_END").is_ok() {
        if bug != "lastsplit" {
            ok("AllReduce", k.all_reduce_i32(&[1; 4]).0)?;
        }
        // SAFETY: a live communicator, destroyed once.
        ok("destroy", unsafe { (nc.destroy)(comm) })?;
        println!("watch ended");
        return Ok(());
    }
    let t = Instant::now();
    let mut calls = 0;
    let rc = loop {
        let rc = k.all_reduce_i32(&[1; 4]).0;
        calls += 1;
        if rc != 0 || t.elapsed() > Duration::from_secs(5) {
            break rc;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    let mut async_rc = 0;
    // SAFETY: a live communicator and an out-pointer.
    unsafe { (nc.get_async_error)(comm, &mut async_rc) };
    println!(
        "watch rc {rc} async {async_rc} after {} ms and {calls} calls: {}",
        t.elapsed().as_millis(),
        k.last_error()
    );
    // SAFETY: a live communicator, destroyed once.
    unsafe { (nc.destroy)(comm) };
    Ok(())
}

/// A GPU hang every rank's calls agree on (`RANKWISE_TEST_BUG`): after 5
/// AllReduces, `kernel`: rank 2's stream runs a kernel that never ends;
/// `network`: every rank's next collective never finishes. Every rank
/// then makes a sixth AllReduce on a thread of its own (a GPU's call
/// returns at once; the stand-in's may wait). And one they do not agree
/// on, `isend`: rank 0 makes a Send to rank 1 instead (PyTorch's isend
/// while the others all_reduce). And two launches of Sends and Recvs
/// alone that never finish, the program's last: `recv`, rank 1's Recv
/// from rank 0, which sends nothing; `splits`, an AlltoAllv whose splits
/// on rank 2 are not the transpose of the others'. Meanwhile the program polls
/// `ncclCommGetAsyncError` as a framework's watchdog does, and prints how
/// long after the sixth call the communicator failed.
pub fn stuck(k: &Rank) -> Result<(), String> {
    let (nc, n) = (&k.nccl, k.n as i32);
    for _ in 0..5 {
        let (rc, out) = k.all_reduce_i32(&[1; 4]);
        expect_eq("AllReduce", rc, 0)?;
        expect_eq("AllReduce's sum", out, vec![n; 4])?;
    }
    let bug = std::env::var("RANKWISE_TEST_BUG").unwrap_or_default();
    let hook = match bug.as_str() {
        "kernel" if k.rank == 2 => Some("standin_stuck_kernel"),
        "network" => Some("standin_hang_next"),
        "kernel" | "isend" | "recv" | "splits" => None,
        other => return Err(format!("no bug {other:?}")),
    };
    if let Some(name) = hook {
        sym::<extern "C" fn()>(name)();
    }
    let (rank, comm, nc) = (k.rank as c_int, k.comm as usize, *nc);
    let (s, r) = (
        vec_of(&nc, &[1i32; 16]) as usize,
        alloc::<i32>(&nc, 16) as usize,
    );
    let t = Instant::now();
    std::thread::spawn(move || {
        let (s, r, comm) = (s as Ptr, r as Ptr, comm as Comm);
        // AlltoAllv's splits: rank 2 expects 5 elements from rank 0, which sends 3
        let split = |src: c_int, dst: c_int| 2 * src + dst + 1;
        let want = |src: c_int| {
            if (src, rank) == (0, 2) {
                5
            } else {
                split(src, rank)
            }
        };
        // SAFETY: buffers of 16 int32 (every count below is at most 10); a
        // live communicator.
        unsafe {
            match bug.as_str() {
                "isend" if rank == 0 => (nc.send)(s, 16, INT32, 1, comm, NULL),
                "isend" => (nc.all_reduce)(s, r, 4, INT32, SUM, comm, NULL),
                "recv" if rank == 1 => (nc.recv)(r, 16, INT32, 0, comm, NULL),
                "recv" => 0,
                "splits" => {
                    (nc.group_start)();
                    for p in 0..n {
                        (nc.send)(s, split(rank, p) as usize, INT32, p, comm, NULL);
                        (nc.recv)(r, want(p) as usize, INT32, p, comm, NULL);
                    }
                    (nc.group_end)()
                }
                _ => (nc.all_reduce)(s, r, 4, INT32, SUM, comm, NULL),
            }
        }
    });
    let mut rc = 0;
    while rc == 0 && t.elapsed() < Duration::from_secs(15) {
        std::thread::sleep(Duration::from_millis(20));
        // SAFETY: a live communicator and an out-pointer.
        unsafe { (nc.get_async_error)(k.comm, &mut rc) };
    }
    println!("stuck async {rc} after {} ms", t.elapsed().as_millis());
    // the sixth call's thread may still wait in the stand-in: leave without it
    use std::io::Write;
    let _ = std::io::stdout().flush();
    std::process::exit(0);
}

/// Three AllReduces with every rank, their sums checked; then the rank
/// says it is ready (a file `ready.<rank>` in the test's directory) and
/// waits for the file `cut`, which the test makes once it has cut a host
/// off the network, before a fourth AllReduce, which must fail. Prints
/// how long that call took and what it says.
pub fn cut(k: &Rank) -> Result<(), String> {
    let (n, r) = (k.n as i32, k.rank as i32);
    for i in 0..3 {
        expect_eq(
            "AllReduce before the cut",
            k.all_reduce_i32(&[r, i, 1]),
            (0, vec![n * (n - 1) / 2, n * i, n]),
        )?;
    }
    let dir = std::path::PathBuf::from(std::env::var("RANKWISE_TEST_DIR").unwrap());
    std::fs::write(dir.join(format!("ready.{r}")), b"").map_err(|e| e.to_string())?;
    let t = Instant::now();
    while !dir.join("cut").exists() {
        if t.elapsed() > Duration::from_secs(60) {
            return Err("no cut within 60 s".into());
        }
        std::thread::sleep(Duration::from_millis(1));
    }
    let t = Instant::now();
    let (rc, _) = k.all_reduce_i32(&[1; 4]);
    println!(
        "cut rc {rc} after {} ms: {}",
        t.elapsed().as_millis(),
        k.last_error()
    );
    if rc == 0 {
        return Err("the AllReduce after the cut returned ncclSuccess".into());
    }
    // SAFETY: a live communicator, destroyed once.
    unsafe { (k.nccl.destroy)(k.comm) };
    Ok(())
}

/// The rank program: runs only in the processes `run` starts.
pub fn rank_main() {
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
        "ring_ungrouped" => ring_ungrouped(&k),
        "alltoallv" => alltoallv_bad(&k),
        "unchecked" => unchecked_count(&k),
        "local" => local(&k),
        "late" => late(&k),
        "percall" => percall(&k),
        "watch" => watch(&k),
        "stuck" => stuck(&k),
        "cut" => cut(&k),
        s => Err(format!("no scenario {s}")),
    };
    if let Err(e) = r {
        panic!("rank {}: {e}", k.rank);
    }
}
