//! How faithful rankwise's local engine is to real NCCL, measured on a GPU.
//! Every measurement runs rank processes through rankwise's own process
//! launcher (several ranks may share one GPU), so it needs what
//! `rankwise verify --engine nccl` needs: NCCL 2.28+ and a GPU.
//!
//! ```text
//! nccl_fidelity diff     --ranks N [--count C]  local vs nccl, same inputs, every op × dtype × reduction
//! nccl_fidelity argcheck --ranks N              bad arguments straight to NCCL, beside rankwise's verdict
//! nccl_fidelity fault    --ranks N --scenario S --timeout SECS [--checks]
//!                                               a misuse scenario on NCCL (rankwise's checks off unless --checks)
//! nccl_fidelity misuse   [--timeout SECS]       every misuse scenario, rankwise's checks on
//! nccl_fidelity misuse   --checks-off [--timeout SECS] [--scenarios A,B,…]
//!                                               every misuse scenario on NCCL alone: one JSON line each
//! nccl_fidelity percall  [--iters K]            time per call: rankwise's path vs a bare ncclAllReduce loop (N=1)
//! ```
//!
//! Without a GPU each command says what it looked for and exits 1.

use rankwise::core::{DataType, Element, F8E4M3, F8E5M2, Func, RawCall, Scalar, layout};
use rankwise::engine::nccl::raw;
use rankwise::launch::process::{self, Handler, Job};
use rankwise::launch::{self, EngineKind, LaunchOptions};
use rankwise::{Comm, Error, ErrorKind, RedOp, Result};
use rankwise_cli::misuse::Guards;
use serde_json::{Value, json};
use std::collections::BTreeMap;
use std::process::ExitCode;
use std::time::{Duration, Instant};

mod argcheck;
mod diff;
mod fault;
mod inputs;
mod percall;
mod unchecked;

use argcheck::*;
use diff::*;
use fault::*;
use inputs::*;
use percall::*;
use unchecked::*;

fn jobs() -> Vec<(&'static str, Handler)> {
    let mut j = rankwise_cli::verify::runner::JOBS.to_vec();
    j.push(("diff", diff_job as Handler));
    j.push(("argcheck", argcheck_job as Handler));
    j.push(("fault", fault_job as Handler));
    j.push(("percall", percall_job as Handler));
    j.push(("unchecked", unchecked_job as Handler));
    j
}

fn main() -> ExitCode {
    if let Some(code) = process::serve_if_worker(&jobs()) {
        return code;
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let flag = |name: &str| args.iter().any(|a| a == name);
    let opt = |name: &str| {
        args.iter()
            .position(|a| a == name)
            .and_then(|i| args.get(i + 1))
            .cloned()
    };
    let n: usize = opt("--ranks").and_then(|v| v.parse().ok()).unwrap_or(2);
    if let Err(why) = EngineKind::Nccl.available() {
        eprintln!("nccl_fidelity: the nccl engine cannot run here: {why}");
        return ExitCode::from(1);
    }
    println!("engine {}", EngineKind::Nccl.describe());
    let r = match args.first().map(String::as_str) {
        Some("diff") => diff(
            n,
            opt("--count").and_then(|v| v.parse().ok()).unwrap_or(256),
            flag("--isolate"),
        ),
        Some("argcheck") => argcheck(n),
        Some("fault") => fault(
            n,
            &opt("--scenario").unwrap_or_default(),
            Duration::from_secs_f64(
                opt("--timeout")
                    .and_then(|v| v.parse().ok())
                    .unwrap_or(20.0),
            ),
            flag("--checks"),
        ),
        Some("misuse") if flag("--checks-off") => misuse_unchecked(
            Duration::from_secs_f64(opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(5.0)),
            opt("--scenarios"),
        ),
        Some("misuse") => misuse(Duration::from_secs_f64(
            opt("--timeout").and_then(|v| v.parse().ok()).unwrap_or(5.0),
        )),
        Some("percall") => percall(opt("--iters").and_then(|v| v.parse().ok()).unwrap_or(2000)),
        _ => Err(Error::new(
            ErrorKind::InvalidUsage,
            "usage: nccl_fidelity diff|argcheck|fault|percall [--ranks N] …",
        )),
    };
    match r {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nccl_fidelity: {e}");
            ExitCode::from(1)
        }
    }
}

fn on_nccl(n: usize, opts: &LaunchOptions, name: &str, args: Value) -> Result<Vec<Result<Value>>> {
    let job = Job {
        name: name.into(),
        args,
        capture_trace: false,
    };
    let reports = process::run_job(EngineKind::Nccl, opts, n, &job, None)?;
    Ok(reports.into_iter().map(|r| r.result).collect())
}
