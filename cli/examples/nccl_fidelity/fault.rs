//! `fault` and `misuse`: misuse scenarios on NCCL with rankwise's checks in front (or off, for one scenario).

use super::*;

pub(crate) fn fault_job(comm: &mut Comm, args: &Value) -> Result<Value> {
    let name = args["scenario"].as_str().unwrap_or("");
    let s = rankwise_cli::misuse::scenario(name)
        .ok_or_else(|| Error::new(ErrorKind::InvalidUsage, format!("no scenario {name}")))?;
    let mut g = rankwise_cli::misuse::Guards::default();
    let t = Instant::now();
    let r = (s.program)(comm, &mut g);
    let violations = g.violations(comm);
    if let Err(e) = &r {
        // as a failing program ends: the other ranks learn why at once
        comm.finish(Some(e));
    }
    Ok(json!({
        "error": r.err().map(|e| e.to_string()),
        "seconds": t.elapsed().as_secs_f64(),
        "guard_violations": violations,
    }))
}

pub(crate) fn fault(n: usize, scenario: &str, timeout: Duration, checks: bool) -> Result<()> {
    let mut opts = LaunchOptions::default().with_timeout(timeout);
    if !checks {
        // SAFETY: measuring what NCCL does with the mismatched calls of a
        // misuse scenario is the point; every wait is bounded by `timeout`
        // and ends in ncclCommAbort.
        opts = unsafe { opts.without_agreement_checks() };
    }
    let t = Instant::now();
    let res = on_nccl(n, &opts, "fault", json!({ "scenario": scenario }))?;
    println!(
        "fault {scenario}: {n} rank(s), rankwise checks {}, timeout {:?}: {:.1} s",
        if checks { "on" } else { "off" },
        timeout,
        t.elapsed().as_secs_f64()
    );
    for (r, x) in res.iter().enumerate() {
        match x {
            Ok(v) => println!("  rank {r}: {v}"),
            Err(e) => println!("  rank {r}: {e}"),
        }
    }
    Ok(())
}

/// Every misuse scenario on rank processes with rankwise's checks on: the
/// error each rank returns beside the one the catalogue expects.
pub(crate) fn misuse(timeout: Duration) -> Result<()> {
    println!(
        "misuse: every scenario on NCCL rank processes, rankwise's checks on, timeout {timeout:?} (0.3 s where the scenario's rank arrives late)"
    );
    let (mut passed, mut total, mut changed) = (0, 0, 0u64);
    for s in rankwise_cli::misuse::catalogue() {
        let t = if s.short_timeout {
            Duration::from_millis(300)
        } else {
            timeout
        };
        let opts = LaunchOptions::default()
            .with_timeout(t)
            .with_tracer(rankwise::trace::Tracer::off());
        let t0 = Instant::now();
        let res = on_nccl(s.ranks, &opts, "fault", json!({ "scenario": s.name }))?;
        let wall = t0.elapsed().as_secs_f64();
        let mut got = Vec::new();
        let mut ok = true;
        for (r, x) in res.iter().enumerate() {
            let (kind, violations) = match x {
                Ok(v) => (
                    v["error"].as_str().map_or("ok".to_string(), kind_of),
                    v["guard_violations"].as_u64().unwrap_or(0),
                ),
                Err(e) => (format!("{:?}", e.kind), 0),
            };
            let want = (s.expect)(r).map_or("ok".to_string(), |k| format!("{k:?}"));
            ok &= kind == want && violations == 0;
            changed += violations;
            got.push(format!("{r}:{kind}"));
        }
        total += 1;
        passed += usize::from(ok);
        let first = res
            .first()
            .and_then(|x| x.as_ref().ok())
            .and_then(|v| v["error"].as_str().map(str::to_string))
            .unwrap_or_default();
        println!(
            "{:<34} {:<5} {:>5.1} s  {}  | {}",
            s.name,
            if ok { "as" } else { "DIFF" },
            wall,
            got.join(" "),
            first.chars().take(200).collect::<String>()
        );
    }
    println!("{passed} of {total} scenarios end in the catalogue's error on every rank");
    println!("guard bytes changed, all scenarios and ranks: {changed}");
    Ok(())
}
