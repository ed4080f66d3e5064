//! `argcheck`: bad arguments straight to NCCL, beside rankwise's verdict on the same call.

use super::*;

pub(crate) struct ArgCase {
    name: &'static str,
    /// Builds and issues the calls; returns what NCCL said to each.
    run: fn(&mut Comm, &raw_ctx::Ctx) -> Result<Vec<raw::Outcome>>,
}

pub(crate) mod raw_ctx {
    pub struct Ctx {
        pub stream: rankwise::engine::nccl::cuda::Stream,
    }
}

pub(crate) fn rc(
    func: Func,
    s: usize,
    r: usize,
    count: usize,
    dt: i32,
    op: i32,
    root: i32,
) -> RawCall {
    RawCall {
        func,
        sendbuff: s,
        recvbuff: r,
        count,
        datatype: dt,
        op,
        root,
    }
}

pub(crate) fn note(text: String) -> raw::Outcome {
    raw::Outcome {
        result: text,
        code: -1,
        last_error: String::new(),
    }
}

/// Waits for what NCCL accepted; says how that ended.
pub(crate) fn settle(c: &Comm, x: &raw_ctx::Ctx, out: &mut Vec<raw::Outcome>) {
    settle_within(c, x, out, Duration::from_secs(10))
}

pub(crate) fn settle_within(
    c: &Comm,
    x: &raw_ctx::Ctx,
    out: &mut Vec<raw::Outcome>,
    limit: Duration,
) {
    // SAFETY: the communicator is live.
    match unsafe { raw::wait(c.handle(), &x.stream, limit) } {
        Ok(true) => out.push(note("completed".into())),
        Ok(false) => out.push(note(format!("no completion within {limit:?}"))),
        Err(e) => out.push(note(format!("then: {}", e.message))),
    }
}

pub(crate) fn one(c: &mut Comm, x: &raw_ctx::Ctx, call: RawCall) -> Result<Vec<raw::Outcome>> {
    one_within(c, x, call, Duration::from_secs(10))
}

pub(crate) fn one_within(
    c: &mut Comm,
    x: &raw_ctx::Ctx,
    call: RawCall,
    limit: Duration,
) -> Result<Vec<raw::Outcome>> {
    // SAFETY: buffers come from this communicator's allocations (or are
    // NULL), and every rank makes the same call.
    let o = unsafe { raw::call(c.handle(), &x.stream, &call)? };
    // ncclSuccess, or ncclInProgress (7): a non-blocking communicator
    // accepts work and issues it later, so both are waited for
    let accepted = o.code == 0 || o.code == 7;
    let mut out = vec![o];
    if accepted {
        settle_within(c, x, &mut out, limit);
    }
    Ok(out)
}

pub(crate) fn arg_cases() -> Vec<ArgCase> {
    const F32: i32 = 7;
    vec![
        ArgCase {
            name: "Broadcast root -1",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::Broadcast, b, b, 16, F32, 0, -1))
            },
        },
        ArgCase {
            name: "Broadcast root N",
            run: |c, x| {
                let b = c.alloc(64)?;
                let n = c.size() as i32;
                one(c, x, rc(Func::Broadcast, b, b, 16, F32, 0, n))
            },
        },
        ArgCase {
            name: "AllReduce datatype 12",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, b, 16, 12, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce op 5 (no PreMulSum made)",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, b, 16, F32, 5, 0))
            },
        },
        ArgCase {
            name: "AllReduce sendbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, 0, b, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce recvbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                one(c, x, rc(Func::AllReduce, b, 0, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce count 0, NULL buffers",
            run: |c, x| one(c, x, rc(Func::AllReduce, 0, 0, 0, F32, 0, 0)),
        },
        ArgCase {
            name: "Reduce non-root recvbuff NULL",
            run: |c, x| {
                let b = c.alloc(64)?;
                let me = c.rank();
                let recv = if me == 0 { c.alloc(64)? } else { 0 };
                one(c, x, rc(Func::Reduce, b, recv, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce partial overlap (recvbuff = sendbuff + 4 elements)",
            run: |c, x| {
                let b = c.alloc(128)?;
                one(c, x, rc(Func::AllReduce, b, b + 16, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllReduce sendbuff extent 1 KiB past its allocation",
            run: |c, x| {
                let s = c.alloc(1024)?;
                let r = c.alloc(2048)?;
                one(c, x, rc(Func::AllReduce, s, r, 512, F32, 0, 0))
            },
        },
        ArgCase {
            name: "AllGather in place at the wrong offset",
            run: |c, x| {
                let n = c.size();
                let b = c.alloc(64 * n)?;
                // the rule is sendbuff == recvbuff + rank*count*size
                let off = ((c.rank() + 1) % n) * 64;
                one(c, x, rc(Func::AllGather, b + off, b, 16, F32, 0, 0))
            },
        },
        ArgCase {
            name: "Send to self without Recv (one group)",
            run: |c, x| {
                let b = c.alloc(64)?;
                let h = c.handle();
                let me = c.rank() as i32;
                let mut out = vec![raw::group_start(h)?];
                // SAFETY: a live buffer of this communicator.
                out.push(unsafe {
                    raw::call(h, &x.stream, &rc(Func::Send, b, 0, 16, F32, 0, me))?
                });
                out.push(raw::group_end(h)?);
                settle(c, x, &mut out);
                Ok(out)
            },
        },
        ArgCase {
            name: "ncclGroupEnd without ncclGroupStart",
            run: |c, _| Ok(vec![raw::group_end(c.handle())?]),
        },
    ]
}

/// What rankwise's checks say to the same case on the local engine.
pub(crate) fn rankwise_verdict(c: &mut Comm, name: &str) -> String {
    const F32: i32 = 7;
    let n = c.size();
    let me = c.rank();
    let r: Result<()> = (|| match name {
        "Broadcast root -1" => {
            let b = c.alloc(64)?;
            c.nccl_broadcast(b, b, 16, F32, -1)
        }
        "Broadcast root N" => {
            let b = c.alloc(64)?;
            c.nccl_broadcast(b, b, 16, F32, n as i32)
        }
        "AllReduce datatype 12" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 16, 12, 0)
        }
        "AllReduce op 5 (no PreMulSum made)" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 16, F32, 5)
        }
        "AllReduce sendbuff NULL" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(0, b, 16, F32, 0)
        }
        "AllReduce recvbuff NULL" => {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, 0, 16, F32, 0)
        }
        "AllReduce count 0, NULL buffers" => c.nccl_all_reduce(0, 0, 0, F32, 0),
        "Reduce non-root recvbuff NULL" => {
            let b = c.alloc(64)?;
            let recv = if me == 0 { c.alloc(64)? } else { 0 };
            c.nccl_reduce(b, recv, 16, F32, 0, 0)
        }
        "AllReduce partial overlap (recvbuff = sendbuff + 4 elements)" => {
            let b = c.alloc(128)?;
            c.nccl_all_reduce(b, b + 16, 16, F32, 0)
        }
        "AllReduce sendbuff extent 1 KiB past its allocation" => {
            let s = c.alloc(1024)?;
            let r = c.alloc(2048)?;
            c.nccl_all_reduce(s, r, 512, F32, 0)
        }
        "AllGather in place at the wrong offset" => {
            let b = c.alloc(64 * n)?;
            let off = ((me + 1) % n) * 64;
            c.nccl_all_gather(b + off, b, 16, F32)
        }
        "Send to self without Recv (one group)" => {
            let b = c.alloc(64)?;
            c.nccl_group_start()?;
            let s = c.nccl_send(b, 16, F32, me as i32);
            let e = c.nccl_group_end();
            s.and(e)
        }
        "ncclGroupEnd without ncclGroupStart" => c.nccl_group_end(),
        _ => Ok(()),
    })();
    match r {
        Ok(()) => "accepted".into(),
        Err(e) => format!("{} ({:?}): {}", e.code().nccl_name(), e.kind, e.message),
    }
}

pub(crate) fn argcheck_job(comm: &mut Comm, _args: &Value) -> Result<Value> {
    let ctx = raw_ctx::Ctx {
        stream: raw::stream()?,
    };
    let mut out = Vec::new();
    for case in arg_cases() {
        // a fresh communicator per case: NCCL's first error fails the one it ran on
        let mut d = comm.dup()?;
        let said = (case.run)(&mut d, &ctx);
        // SAFETY: live communicator.
        let after = unsafe { raw::async_error(d.handle()) }.ok();
        out.push(json!({
            "case": case.name,
            "nccl": match &said {
                Ok(v) => serde_json::to_value(v).unwrap_or(Value::Null),
                Err(e) => Value::String(e.to_string()),
            },
            "async_after": after.map(|a| a.result),
        }));
    }
    Ok(Value::Array(out))
}

pub(crate) fn argcheck(n: usize) -> Result<()> {
    let opts = LaunchOptions::default().with_timeout(Duration::from_secs(60));
    let nccl = on_nccl(n, &opts, "argcheck", Value::Null)?;
    let names: Vec<&str> = arg_cases().iter().map(|c| c.name).collect();
    let local = launch::launch_each(
        EngineKind::Local,
        LaunchOptions::default().with_tracer(rankwise::trace::Tracer::off()),
        n,
        |c| {
            let mut v = Vec::new();
            for name in &names {
                // each case on a fresh communicator: an error fails the one it ran on
                let mut d = c.dup()?;
                v.push(rankwise_verdict(&mut d, name));
            }
            Ok(v)
        },
    )?;
    println!(
        "argcheck: {n} rank(s); NCCL's result and last error on rank 0, rankwise's verdict on rank 0"
    );
    let r0 = nccl[0].as_ref().map_err(Clone::clone)?;
    let l0 = local[0].as_ref().map_err(Clone::clone)?;
    for (i, row) in r0.as_array().into_iter().flatten().enumerate() {
        println!("case: {}", row["case"].as_str().unwrap_or(""));
        println!("  nccl:     {}", row["nccl"]);
        println!("  async:    {}", row["async_after"]);
        println!("  rankwise: {}", l0.get(i).cloned().unwrap_or_default());
    }
    for (r, res) in nccl.iter().enumerate().skip(1) {
        if let Err(e) = res {
            println!("rank {r}: {e}");
        }
    }
    Ok(())
}
