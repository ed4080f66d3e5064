//! `misuse --checks-off`: every misuse scenario on NCCL alone, one JSON line each.

use super::*;

/// A misuse scenario whose bad argument rankwise refuses on each rank
/// before NCCL sees it, written as the same calls straight to NCCL
/// (`engine::nccl::raw`): what NCCL returned to each call, then how the
/// work ended within `limit`.
pub(crate) type Unchecked =
    fn(&mut Comm, &mut Guards, &raw_ctx::Ctx, Duration) -> Result<Vec<raw::Outcome>>;

pub(crate) fn unchecked_program(name: &str) -> Option<Unchecked> {
    const I32: i32 = 2;
    let p: Unchecked = match name {
        "invalid-root" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::Broadcast, b, b, 16, I32, 0, 4), t)
        },
        "null-root-recvbuff" => |c, g, x, t| {
            let s = g.input(c, 64)?;
            one_within(c, x, rc(Func::Reduce, s, 0, 16, I32, 0, 2), t)
        },
        "out-of-bounds-extent" => |c, g, x, t| {
            // rank 1's recvbuff one element short, with a guard after it:
            // what NCCL writes past the end lands in the guard
            let q = 16;
            let short = usize::from(c.rank() == 1);
            let s = g.input(c, q * 4)?;
            let r = g.output(c, (4 * q - short) * 4)?;
            one_within(c, x, rc(Func::AllGather, s, r, q, I32, 0, 0), t)
        },
        "illegal-overlap" => |c, g, x, t| {
            let b = g.output(c, 4 * 16 * 4)?;
            one_within(c, x, rc(Func::AllGather, b, b, 16, I32, 0, 0), t)
        },
        "group-end-without-start" => |c, _, _, _| Ok(vec![raw::group_end(c.handle())?]),
        "send-to-self-without-recv" => |c, g, x, t| {
            let s = g.input(c, 64)?;
            let h = c.handle();
            let me = c.rank() as i32;
            let mut out = vec![raw::group_start(h)?];
            // SAFETY: a live buffer of this communicator.
            out.push(unsafe { raw::call(h, &x.stream, &rc(Func::Send, s, 0, 16, I32, 0, me))? });
            out.push(raw::group_end(h)?);
            settle_within(c, x, &mut out, t);
            Ok(out)
        },
        "bad-datatype-code" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::AllReduce, b, b, 16, 12, 0, 0), t)
        },
        "bad-op-code" => |c, g, x, t| {
            let b = g.output(c, 64)?;
            one_within(c, x, rc(Func::AllReduce, b, b, 16, I32, 9, 0), t)
        },
        _ => return None,
    };
    Some(p)
}

/// One rank of a misuse scenario with rankwise's cross-rank checks off
/// (and, for the argument scenarios, its per-call checks too): the error
/// or NCCL's answers, the time, the guard bytes changed, and every output
/// buffer's bytes before and after (hex, the first 4 KiB).
pub(crate) fn unchecked_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let name = args["scenario"].as_str().unwrap_or("");
    let limit = Duration::from_secs_f64(args["timeout"].as_f64().unwrap_or(5.0));
    let s = rankwise_cli::misuse::scenario(name)
        .ok_or_else(|| Error::new(ErrorKind::InvalidUsage, format!("no scenario {name}")))?;
    let mut g = Guards::default();
    let t = Instant::now();
    let (error, nccl) = match unchecked_program(name) {
        Some(p) => {
            let x = raw_ctx::Ctx {
                stream: raw::stream()?,
            };
            match p(comm, &mut g, &x, limit) {
                Ok(o) => (None, Some(o)),
                Err(e) => (Some(e), None),
            }
        }
        None => ((s.program)(comm, &mut g).err(), None),
    };
    let seconds = t.elapsed().as_secs_f64();
    let cap = |b: &[u8]| hex(&b[..b.len().min(4096)]);
    let after = g.outputs(comm);
    let before = g.initial_outputs();
    let changed: Vec<usize> = match &after {
        Ok(a) => a
            .iter()
            .zip(&before)
            .map(|(x, y)| x.iter().zip(y).filter(|(p, q)| p != q).count())
            .collect(),
        Err(_) => Vec::new(),
    };
    let violations = g.violations(comm);
    if let Some(e) = &error {
        comm.finish(Some(e));
    }
    Ok(json!({
        "error": error.map(|e| e.to_string()),
        "nccl": nccl,
        "seconds": seconds,
        "guard_violations": violations,
        "outputs_before": before.iter().map(|b| cap(b)).collect::<Vec<_>>(),
        "outputs_after": match &after {
            Ok(a) => json!(a.iter().map(|b| cap(b)).collect::<Vec<_>>()),
            Err(e) => json!(format!("unreadable: {e}")),
        },
        "output_bytes_changed": changed,
    }))
}

/// Every misuse scenario on NCCL with rankwise's checks off, each rank
/// bounded by `timeout` (then ncclCommAbort) and each job by a deadline
/// past that: one JSON line per scenario, what each rank did.
/// `only`: a comma-separated list of scenario names (default: all).
pub(crate) fn misuse_unchecked(timeout: Duration, only: Option<String>) -> Result<()> {
    let only: Option<Vec<String>> = only.map(|l| l.split(',').map(str::to_string).collect());
    if let Some(names) = &only {
        let known: Vec<&str> = rankwise_cli::misuse::catalogue()
            .iter()
            .map(|s| s.name)
            .collect();
        if let Some(bad) = names.iter().find(|n| !known.contains(&n.as_str())) {
            return Err(Error::new(
                ErrorKind::InvalidUsage,
                format!(
                    "--scenarios: no scenario {bad:?}; the catalogue has {}",
                    known.join(", ")
                ),
            ));
        }
    }
    println!(
        "misuse, rankwise's checks off: every scenario on NCCL rank processes at its catalogue size, timeout {timeout:?}"
    );
    for s in rankwise_cli::misuse::catalogue() {
        if only
            .as_ref()
            .is_some_and(|o| !o.iter().any(|n| n == s.name))
        {
            continue;
        }
        // SAFETY: measuring what NCCL does with the scenario's mismatched
        // calls is the point; every wait is bounded by `timeout` and ends
        // in ncclCommAbort, and the job's deadline kills what remains.
        let opts = unsafe {
            LaunchOptions::default()
                .with_timeout(timeout)
                .with_tracer(rankwise::trace::Tracer::off())
                .without_agreement_checks()
        };
        let job = Job {
            name: "unchecked".into(),
            args: json!({ "scenario": s.name, "timeout": timeout.as_secs_f64() }),
            capture_trace: false,
        };
        let t0 = Instant::now();
        let deadline = t0 + 3 * timeout + Duration::from_secs(30);
        let reports = process::run_job(EngineKind::Nccl, &opts, s.ranks, &job, Some(deadline))?;
        let ranks: Vec<Value> = reports
            .into_iter()
            .map(|r| match r.result {
                Ok(v) => v,
                Err(e) => json!({ "job_error": e.to_string() }),
            })
            .collect();
        println!(
            "{}",
            json!({
                "scenario": s.name,
                "ranks": s.ranks,
                "wall": t0.elapsed().as_secs_f64(),
                "per_rank": ranks,
            })
        );
    }
    Ok(())
}

/// The ErrorKind of `ncclInvalidUsage on rank 2: …` (the text names the
/// code, not the kind), from the code and the message's words.
pub(crate) fn kind_of(e: &str) -> String {
    let code = e.split_whitespace().next().unwrap_or("");
    let has = |w: &str| e.contains(w);
    let k = match code {
        "ncclTimeout" => "Timeout",
        "ncclRemoteError" => "RemoteError",
        "ncclInternalError" if has("panicked") => "Panic",
        "ncclInternalError" => "Internal",
        "ncclSystemError" => "System",
        "ncclInvalidArgument" if has("is out of range") => "InvalidRoot",
        "ncclInvalidArgument" if has("datatype code") => "InvalidDatatype",
        "ncclInvalidArgument" if has("reduction op code") => "InvalidOp",
        "ncclInvalidArgument" if has("is NULL") => "NullPointer",
        "ncclInvalidArgument" if has("overlaps") => "IllegalOverlap",
        "ncclInvalidArgument" if has("overruns") || has("not inside any allocation") => {
            "OutOfBounds"
        }
        "ncclInvalidArgument" => "BadLength",
        "ncclInvalidUsage" if has("has no matching") => "Unmatched",
        "ncclInvalidUsage" if has("failed earlier") => "CommFailed",
        "ncclInvalidUsage" if has("finished its program") => "Deadlock",
        "ncclInvalidUsage" if has("differ") || has("skipped") || has("mismatch") => "Mismatch",
        "ncclInvalidUsage" => "InvalidUsage",
        _ => "?",
    };
    k.to_string()
}
