//! The mpi engine against the local engine and against closed forms, one
//! rank per process. Run by `cargo test --features mpi`: this binary starts
//! itself under `mpirun -n N` for N = 1..=4; each rank process runs every
//! collective in both faces, for every datatype and reduction, on the mpi
//! engine, and the same program on N threads of the local engine, and
//! compares its own outputs byte for byte (inputs are small integers, so
//! every sum is exact in every datatype). Integer AllReduce, AllGather and
//! Broadcast are also checked against closed forms.

use rankwise::core::bytes;
use rankwise::{
    Comm, DataType, Element, NULL, P2POp, RedOp, Result, local, mpi, with_element_type,
};
use std::process::{Command, ExitCode};

/// Rank r's j-th input: small enough that every partial sum or product of
/// four inputs is exact in every datatype, fp8 e5m2 (two mantissa bits)
/// included, so the order in which MPI combines ranks cannot show.
fn x(r: usize, j: usize, prod: bool) -> f64 {
    if prod {
        ((r + j) % 3) as f64
    } else {
        ((7 * r + 5 * j) % 3) as f64
    }
}

fn ops(n: usize, float: bool) -> Vec<RedOp> {
    let mut v = vec![
        RedOp::Sum,
        RedOp::Prod,
        RedOp::Max,
        RedOp::Min,
        RedOp::PreMulSum(0.5),
    ];
    // Avg on floats scales by 1/N rounded to the type: exact only for powers of 2
    if !float || n.is_power_of_two() {
        v.push(RedOp::Avg);
    }
    v
}

/// Every call of the suite on `c`, each output as bytes, in order.
fn suite<T: Element>(c: &mut Comm, q: usize) -> Result<Vec<Vec<u8>>> {
    let (n, r) = (c.size(), c.rank());
    let mut outs = Vec::new();
    let input = |prod: bool| -> Vec<T> { (0..q).map(|j| T::from_f64(x(r, j, prod))).collect() };
    let blocks =
        |prod: bool| -> Vec<T> { (0..n * q).map(|j| T::from_f64(x(r, j, prod))).collect() };
    let mut keep = |v: &[T]| outs.push(bytes::of(v).to_vec());
    for op in ops(n, T::DTYPE.is_float()) {
        let prod = op == RedOp::Prod;
        let mut a = input(prod);
        c.all_reduce(&mut a, op)?;
        keep(&a);
        let mut o = vec![T::default(); q];
        c.all_reduce_into(&input(prod), &mut o, op)?;
        keep(&o);
        for root in 0..n {
            if let Some(v) = c.reduce(&input(prod), root, op)? {
                keep(&v);
            }
            if let Some(v) = c.reduce_in_place(input(prod), root, op)? {
                keep(&v);
            }
        }
        let mut o = vec![T::default(); q];
        c.reduce_scatter_tensor(&mut o, &blocks(prod), op)?;
        keep(&o);
        let mut b = blocks(prod);
        let mine = c.reduce_scatter_in_place(&mut b, op)?.to_vec();
        keep(&mine);
    }
    for root in 0..n {
        let mut b = input(false);
        c.broadcast(&mut b, root)?;
        keep(&b);
        let mut g = (r == root).then(|| vec![T::default(); n * q]);
        c.gather(&input(false), g.as_deref_mut(), root)?;
        if let Some(g) = g {
            keep(&g);
        }
        let mut s = vec![T::default(); q];
        let full = blocks(false);
        c.scatter((r == root).then_some(&full[..]), &mut s, root)?;
        keep(&s);
        let mut gi = if r == root {
            blocks(false)
        } else {
            input(false)
        };
        c.gather_in_place(&mut gi, root)?;
        keep(&gi);
        let mut si = if r == root {
            blocks(false)
        } else {
            vec![T::default(); q]
        };
        c.scatter_in_place(&mut si, root)?;
        keep(&si);
    }
    let mut o = vec![T::default(); n * q];
    c.all_gather_into_tensor(&mut o, &input(false))?;
    keep(&o);
    let mut b = blocks(false);
    c.all_gather_in_place(&mut b)?;
    keep(&b);
    let mut o = vec![T::default(); n * q];
    c.all_to_all_single(&mut o, &blocks(false), None, None)?;
    keep(&o);
    // AlltoAllv: rank r sends s + r + 1 elements to rank s
    let splits_in: Vec<usize> = (0..n).map(|s| s + r + 1).collect();
    let splits_out: Vec<usize> = (0..n).map(|s| r + s + 1).collect();
    let send: Vec<T> = (0..splits_in.iter().sum::<usize>())
        .map(|j| T::from_f64(x(r, j, false)))
        .collect();
    let mut recv = vec![T::default(); splits_out.iter().sum()];
    c.all_to_all_single(&mut recv, &send, Some(&splits_out), Some(&splits_in))?;
    keep(&recv);
    // a ring through batch_isend_irecv, and the raw face
    let mut got = vec![T::default(); q];
    let data = input(false);
    c.batch_isend_irecv(&mut [
        P2POp::Isend(&data, (r + 1) % n),
        P2POp::Irecv(&mut got, (r + n - 1) % n),
    ])?;
    keep(&got);
    let dt = T::DTYPE;
    let (s, d) = (c.alloc_elems(q, dt)?, c.alloc_elems(q, dt)?);
    c.write(s, &input(false))?;
    c.nccl_all_reduce(s, d, q, dt, RedOp::Max)?;
    keep(&c.read::<T>(d, q)?);
    c.nccl_reduce(s, if r == 0 { d } else { NULL }, q, dt, RedOp::Sum, 0)?;
    keep(&c.read::<T>(d, q)?);
    Ok(outs)
}

fn rank_process() -> std::result::Result<(), String> {
    let mut comm = mpi::init().map_err(|e| e.to_string())?;
    let (n, r) = (comm.size(), comm.rank());
    // 5 elements travel inside the agreement message (the engine's small
    // path); 300 (at least 300 bytes in every datatype) go through MPI's
    // collectives
    for (dt, q) in DataType::ALL.into_iter().flat_map(|d| [(d, 5), (d, 300)]) {
        let on_mpi = with_element_type!(dt, T => suite::<T>(&mut comm, q))
            .map_err(|e| format!("{dt} × {q} on mpi: {e}"))?;
        let on_local = with_element_type!(dt, T => local::launch(n, |c| suite::<T>(c, q)))
            .map_err(|e| format!("{dt} × {q} on local: {e}"))?;
        let want = &on_local[r];
        if on_mpi.len() != want.len() {
            return Err(format!(
                "{dt} × {q}: {} outputs on mpi, {} on local",
                on_mpi.len(),
                want.len()
            ));
        }
        for (k, (a, b)) in on_mpi.iter().zip(want).enumerate() {
            if a != b {
                return Err(format!(
                    "rank {r} of {n}, {dt} × {q}, output {k}: mpi {a:?} != local {b:?}"
                ));
            }
        }
    }
    // closed forms, independent of both engines, on both paths
    for q in [6, 600] {
        let mut a: Vec<i64> = (0..q).map(|j| (r * 100 + j) as i64).collect();
        comm.all_reduce(&mut a, RedOp::Sum)
            .map_err(|e| e.to_string())?;
        let total: i64 = (0..n).map(|s| (s * 100) as i64).sum();
        for (j, v) in a.iter().enumerate() {
            if *v != total + (n * j) as i64 {
                return Err(format!(
                    "rank {r}: AllReduce[{j}] = {v}, expected {}",
                    total + (n * j) as i64
                ));
            }
        }
        let mut g = vec![0i32; n * q];
        let mine: Vec<i32> = (0..q).map(|j| (r * 10 + j) as i32).collect();
        comm.all_gather_into_tensor(&mut g, &mine)
            .map_err(|e| e.to_string())?;
        for (i, v) in g.iter().enumerate() {
            let want = ((i / q) * 10 + i % q) as i32;
            if *v != want {
                return Err(format!("rank {r}: AllGather[{i}] = {v}, expected {want}"));
            }
        }
        // sums that wrap (OpenMPI 4.1's own MPI_SUM on 8-bit types saturates)
        let mut w: Vec<u8> = (0..q).map(|j| (200 + 7 * r + j) as u8).collect();
        comm.all_reduce(&mut w, RedOp::Sum)
            .map_err(|e| e.to_string())?;
        for (j, v) in w.iter().enumerate() {
            let want = ((0..n).map(|s| 200 + 7 * s + j).sum::<usize>() % 256) as u8;
            if *v != want {
                return Err(format!(
                    "rank {r}: uint8 AllReduce[{j}] = {v}, expected {want}"
                ));
            }
        }
        let mut b: Vec<u8> = (0..q).map(|j| (r * 16 + j) as u8).collect();
        comm.broadcast(&mut b, n - 1).map_err(|e| e.to_string())?;
        if b != (0..q).map(|j| ((n - 1) * 16 + j) as u8).collect::<Vec<_>>() {
            return Err(format!("rank {r}: Broadcast from {} gave {b:?}", n - 1));
        }
    }
    rooted_around_the_carry_limits(&mut comm).map_err(|e| format!("rank {r} of {n}: {e}"))?;
    Ok(())
}

/// Root r's j-th input to the rooted calls below, as a byte.
fn rooted_value(r: usize, j: usize) -> u8 {
    ((r * 31 + j * 7) % 251) as u8
}

/// Broadcast (in place and out of place) and Scatter (out of place and in
/// place) from the first and the last rank, at inputs of just under and
/// just over the sizes where the engine stops carrying a call's input in
/// the agreement (256 bytes from every rank, 8 KiB from a root over shared
/// memory), in bytes and in 8-byte floats, against closed forms.
fn rooted_around_the_carry_limits(c: &mut Comm) -> Result<()> {
    let (n, me) = (c.size(), c.rank());
    let check = |what: &str, got: Vec<f64>, want: Vec<f64>| -> Result<()> {
        match got.iter().zip(&want).position(|(a, b)| a != b) {
            None if got.len() == want.len() => Ok(()),
            at => Err(rankwise::Error::new(
                rankwise::ErrorKind::InvalidUsage,
                format!("{what}: element {at:?} is wrong: got {got:?}, expected {want:?}"),
            )),
        }
    };
    for (size, dt) in [(1, DataType::Uint8), (8, DataType::Float64)] {
        for total in [256, 264, 8192, 8200] {
            for root in [0, n - 1] {
                let input = |count: usize| -> Vec<f64> {
                    (0..count).map(|j| f64::from(rooted_value(me, j))).collect()
                };
                let from_root = |lo: usize, hi: usize| -> Vec<f64> {
                    (lo..hi).map(|j| f64::from(rooted_value(root, j))).collect()
                };
                let as_dt = |v: &[f64]| -> Vec<u8> {
                    if size == 1 {
                        v.iter().map(|x| *x as u8).collect()
                    } else {
                        bytes::of(v).to_vec()
                    }
                };
                let of_dt = |b: &[u8]| -> Vec<f64> {
                    if size == 1 {
                        b.iter().map(|x| f64::from(*x)).collect()
                    } else {
                        b.chunks(8)
                            .map(|w| f64::from_le_bytes(w.try_into().unwrap()))
                            .collect()
                    }
                };
                let tag = format!("{dt} root {root}, {total} bytes");
                // Broadcast of `total` bytes
                let q = total / size;
                let (s, d) = (c.alloc(total)?, c.alloc(total)?);
                c.write(s, &as_dt(&input(q)))?;
                for (to, what) in [(d, "Broadcast"), (s, "in-place Broadcast")] {
                    c.nccl_broadcast(s, to, q, dt, root as i32)?;
                    let got = of_dt(&c.read::<u8>(to, total)?);
                    check(&format!("{what} {tag}"), got, from_root(0, q))?;
                }
                // Scatter: the root's whole input at or just over `total`
                let q = if total.is_power_of_two() {
                    total / (size * n)
                } else {
                    total.div_ceil(size * n)
                }
                .max(1);
                let block = q * size;
                let (s, d) = (c.alloc(n * block)?, c.alloc(block)?);
                c.write(s, &as_dt(&input(n * q)))?;
                c.nccl_scatter(s, d, q, dt, root as i32)?;
                let want = from_root(me * q, (me + 1) * q);
                check(
                    &format!("Scatter {tag}"),
                    of_dt(&c.read::<u8>(d, block)?),
                    want.clone(),
                )?;
                let mine = if me == root { s + me * block } else { d };
                if me != root {
                    c.fill(d, block, 0)?;
                }
                c.nccl_scatter(s, mine, q, dt, root as i32)?;
                check(
                    &format!("in-place Scatter {tag}"),
                    of_dt(&c.read::<u8>(mine, block)?),
                    want,
                )?;
            }
        }
    }
    Ok(())
}

/// A broken program, one per mode: every rank must end with the expected
/// error (printed as `rank R: KIND: message`), none may hang.
fn fault_process(mode: &str) -> std::result::Result<(), String> {
    let mut comm = mpi::init_with(
        rankwise::launch::LaunchOptions::default().with_timeout(std::time::Duration::from_secs(20)),
    )
    .map_err(|e| e.to_string())?;
    let (n, r) = (comm.size(), comm.rank());
    let result = match mode {
        "count-mismatch" => {
            let mut x = vec![1i32; if r == 1 { 5 } else { 4 }];
            comm.all_reduce(&mut x, RedOp::Sum)
        }
        "skipped-call" => {
            let mut x = vec![1f32; 4];
            if r != 1
                && let Err(e) = comm.broadcast(&mut x, 0)
            {
                println!("rank {r}: {:?}: {}", e.kind, e.message);
                comm.finish(Some(&e));
                return Ok(());
            }
            comm.all_reduce(&mut x, RedOp::Sum)
        }
        "finishes-early" if r == n - 1 => return Ok(()),
        "finishes-early" => comm.all_reduce(&mut [1u8; 4], RedOp::Sum),
        "send-recv-count-mismatch" if r == 0 => comm.send(&[1i64; 3], 1),
        "send-recv-count-mismatch" => comm.recv(&mut [0i64; 2], 0),
        "send-never-received" if r == 1 => return Ok(()),
        "send-never-received" => comm.send(&[1i64; 3], 1),
        "rank-fails" if r == 0 => Err(rankwise::Error::new(
            rankwise::ErrorKind::InvalidUsage,
            "rank 0 gives up",
        )),
        "rank-fails" => comm.all_reduce(&mut [1u8; 4], RedOp::Sum),
        _ => return Err(format!("unknown mode {mode}")),
    };
    let e = match result {
        Ok(()) => return Err(format!("rank {r}: no error")),
        Err(e) => e,
    };
    println!("rank {r}: {:?}: {}", e.kind, e.message);
    comm.finish(Some(&e));
    Ok(())
}

/// Runs this binary as `n` MPI processes in `mode` with `env`; its exit
/// status and output. With `apart`, rank r's `RANKWISE_SHM_DIR` is
/// `apart/r`, so no two ranks find each other's shared-memory segment, as
/// on separate hosts.
fn mpirun(
    n: usize,
    mode: &str,
    env: &[(&str, &str)],
    apart: Option<&std::path::Path>,
) -> (bool, String) {
    let mut cmd = Command::new("mpirun");
    cmd.args(["--oversubscribe", "-n", &n.to_string()]);
    if running_as_root() {
        cmd.arg("--allow-run-as-root");
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    if let Some(dir) = apart {
        for r in 0..n {
            std::fs::create_dir_all(dir.join(r.to_string())).expect("a segment directory");
        }
        cmd.args([
            "sh",
            "-c",
            "RANKWISE_SHM_DIR=\"$RW_APART/$OMPI_COMM_WORLD_RANK\" exec \"$0\"",
        ])
        .env("RW_APART", dir);
    }
    let out = cmd
        .arg(exe)
        .env("RANKWISE_MPI_TEST", mode)
        .envs(env.iter().copied())
        .output()
        .expect("mpirun runs (install openmpi-bin)");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), text)
}

fn main() -> ExitCode {
    if std::env::var_os("OMPI_COMM_WORLD_SIZE").is_some() {
        let mode = std::env::var("RANKWISE_MPI_TEST").unwrap_or_default();
        let result = if mode == "suite" {
            rank_process()
        } else {
            fault_process(&mode)
        };
        return match result {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("FAILED: {e}");
                ExitCode::FAILURE
            }
        };
    }
    let mut failed = false;
    let mut report = |ok: bool, what: String, text: &str| {
        println!("{what}: {}", if ok { "ok" } else { "FAILED" });
        if !ok {
            failed = true;
            println!("{text}");
        }
    };
    // the agreement goes through shared memory (processes of one host),
    // or with RANKWISE_SHM=0 through MPI messages: both, and the trace says
    // which each rank took
    let trace = std::env::temp_dir().join(format!("rankwise-mpi-test-{}", std::process::id()));
    // "apart": every rank its own segment directory, as on separate hosts
    for (n, shm) in [
        (1, "1"),
        (2, "1"),
        (3, "1"),
        (4, "1"),
        (2, "0"),
        (3, "0"),
        (3, "apart"),
    ] {
        let _ = std::fs::remove_dir_all(&trace);
        std::fs::create_dir_all(&trace).expect("a trace directory");
        let file = trace.join("t.%r.log");
        let env = [
            ("RANKWISE_SHM", if shm == "apart" { "1" } else { shm }),
            ("RANKWISE_DEBUG", "INFO"),
            ("RANKWISE_DEBUG_SUBSYS", "INIT"),
            ("RANKWISE_DEBUG_FILE", file.to_str().expect("a UTF-8 path")),
        ];
        let apart = trace.join("apart");
        let (ok, text) = mpirun(
            n,
            "suite",
            &env,
            (shm == "apart").then_some(apart.as_path()),
        );
        let lane = if shm == "1" {
            "through shared memory"
        } else {
            "through MPI messages"
        };
        let said = (0..n)
            .filter(|r| {
                std::fs::read_to_string(trace.join(format!("t.{r}.log")))
                    .is_ok_and(|t| t.contains(lane))
            })
            .count();
        let how = match shm {
            "apart" => "every rank its own RANKWISE_SHM_DIR".to_string(),
            v => format!("RANKWISE_SHM={v}"),
        };
        report(
            ok && (n == 1 || said == n),
            format!(
                "mpi engine, {n} process(es), {how}, every collective against local ({said} rank(s) traced agreeing {lane})"
            ),
            &text,
        );
    }
    let _ = std::fs::remove_dir_all(&trace);
    // each fault: (mode, ranks, what every rank's line must say)
    let faults: [(&str, usize, &str); 6] = [
        (
            "count-mismatch",
            3,
            "Mismatch: AllReduce #0: count differs: ranks 0,2 pass 4, rank 1 passes 5",
        ),
        (
            "skipped-call",
            3,
            "Mismatch: Broadcast #0: ranks are in different operations: ranks 0,2 call Broadcast #0, rank 1 calls AllReduce #0; rank 1 skipped a call",
        ),
        (
            "finishes-early",
            3,
            "Deadlock: deadlock: rank 2 finished its program without entering AllReduce (opCount 0) on the mpi engine, which rank",
        ),
        (
            "send-recv-count-mismatch",
            2,
            "Mismatch: Send/Recv mismatch: rank 0's Send #0 to rank 1 (count 3, int64) meets rank 1's Recv #0 from rank 0 (count 2, int64)",
        ),
        (
            "send-never-received",
            2,
            "Unmatched: rank 0 waits in the Send/Recv signature exchange with rank 1 (opCount 0) but rank 1 finished its program without the matching call",
        ),
        (
            "rank-fails",
            3,
            "RemoteError: rank 0 failed: ncclInvalidUsage: rank 0 gives up",
        ),
    ];
    for ((mode, n, want), shm) in faults.iter().flat_map(|f| [(*f, "1"), (*f, "0")]) {
        let (ok, text) = mpirun(n, mode, &[("RANKWISE_SHM", shm)], None);
        let ranks_reporting = match mode {
            "finishes-early" | "rank-fails" => n - 1,
            "send-never-received" => 1,
            _ => n,
        };
        let lines: Vec<&str> = text.lines().filter(|l| l.contains(want)).collect();
        report(
            ok && lines.len() == ranks_reporting,
            format!(
                "mpi engine, {mode} on {n} processes, RANKWISE_SHM={shm}: the error on every rank"
            ),
            &text,
        );
    }
    if failed {
        ExitCode::FAILURE
    } else {
        ExitCode::SUCCESS
    }
}

/// mpirun refuses to run as root unless told to.
fn running_as_root() -> bool {
    std::env::var("USER").is_ok_and(|u| u == "root")
        || Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|o| o.stdout.starts_with(b"0"))
}
