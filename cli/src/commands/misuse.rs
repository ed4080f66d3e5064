//! `rankwise verify --suite misuse`: runs the misuse catalogue
//! (`crate::misuse`) and prints, per scenario, what NCCL did with it (an
//! observation on real NCCL), what rankwise does, and the time to the
//! error. Exits 0 only if every scenario passes.

use super::{FAILED, fail};
use crate::misuse::{self, DEADLINE};
use std::process::ExitCode;

pub fn run(args: &super::verify::Args) -> ExitCode {
    let scenarios = misuse::catalogue();
    // the most ranks any scenario uses: the processes an mpi job needs
    let most = scenarios.iter().map(|s| s.ranks).max().unwrap_or(1);
    if let Some(code) = rankwise::launch::mpirun::relaunch("verify", args.engine, most) {
        return code;
    }
    let mut rank = 0;
    let mut mpi = false;
    match rankwise::launch::mpirun::rank_of_job(args.engine) {
        None => {
            if let Err(why) = args.engine.available() {
                return fail(
                    "verify",
                    format!("the {} engine cannot run here: {why}", args.engine),
                );
            }
        }
        Some(Err(e)) => return fail("verify", e),
        Some(Ok((r, size))) => {
            (rank, mpi) = (r, true);
            if size < most {
                if r == 0 {
                    let _ = fail(
                        "verify",
                        format!(
                            "the misuse suite needs {most} processes on the mpi engine (its largest scenario has {most} ranks), and mpirun started {size} (mpirun -n {most})"
                        ),
                    );
                }
                return rankwise::launch::mpirun::end_with_rank0(r, FAILED);
            }
        }
    }
    // one scenario panics a rank on purpose: keep its message off the terminal
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcomes: Result<Vec<misuse::Outcome>, String> = scenarios
        .iter()
        .map(|s| run_one(args.engine, mpi, s))
        .collect();
    std::panic::set_hook(hook);
    let outcomes = match outcomes {
        Ok(o) => o,
        Err(e) => {
            if rank == 0 {
                let _ = fail("verify", e);
            }
            return end(mpi, rank, FAILED);
        }
    };
    if rank != 0 {
        // rank 0 holds every rank's outcome and reports
        return end(mpi, rank, 0);
    }
    let passed = outcomes.iter().filter(|o| o.passed).count();
    if args.json {
        let rows: Vec<serde_json::Value> = scenarios
            .iter()
            .zip(&outcomes)
            .map(|(s, o)| {
                serde_json::json!({
                    "scenario": s.name,
                    "what": s.what,
                    "ranks": s.ranks,
                    "nccl": s.nccl,
                    "rankwise": o.summary(),
                    "errors": o.ranks.iter().map(|r| r.error.as_ref().map(|e| serde_json::json!({
                        "code": e.code().code(), "name": e.code().nccl_name(), "kind": format!("{:?}", e.kind), "message": e.message,
                    }))).collect::<Vec<_>>(),
                    "expected": o.expected.iter().map(|k| k.map(|k| format!("{k:?}"))).collect::<Vec<_>>(),
                    "seconds_to_error": o.ranks.iter().map(|r| r.elapsed.as_secs_f64()).collect::<Vec<_>>(),
                    "guard_violations": o.ranks.iter().map(|r| r.violations).sum::<usize>(),
                    "passed": o.passed,
                    "problems": o.problems(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "suite": "misuse", "passed": passed, "scenarios": rows })
        );
    } else {
        if args.ranks.is_some_and(|r| r != 4) {
            println!(
                "(each scenario uses its own rank count; --ranks is ignored by the misuse suite)"
            );
        }
        println!(
            "{:<32} {:<42} {:>9}  {:<6} what NCCL 2.28.9 did, checks off",
            "scenario", "rankwise", "to error", "result"
        );
        for (s, o) in scenarios.iter().zip(&outcomes) {
            println!(
                "{:<32} {:<42} {:>7.1}ms  {:<6} {}",
                s.name,
                o.summary(),
                o.slowest().as_secs_f64() * 1e3,
                if o.passed { "PASS" } else { "FAIL" },
                s.nccl
            );
            for p in o.problems() {
                println!("    {p}");
            }
        }
        let mapped: Vec<&misuse::Scenario> = scenarios
            .iter()
            .filter(|s| s.needs_diagnosis && !args.engine.capabilities().diagnoses_deadlock)
            .collect();
        if let Some(first) = mapped.first() {
            println!(
                "\nThe {} engine does not diagnose deadlocks (no rank sees every rank's waits): {} end in the wait timeout ({:?} here), so there every rank must return Timeout",
                args.engine,
                mapped.iter().map(|s| s.name).collect::<Vec<_>>().join(", "),
                misuse::timeout(first, args.engine)
            );
        }
        println!(
            "\n{passed}/{} scenarios passed: every rank returned the expected error within {:?}, with no byte changed outside the call's legal outputs",
            outcomes.len(),
            DEADLINE
        );
        println!(
            "(NCCL column: observed on NCCL 2.28.9, one H200, each scenario's ranks as processes sharing it over sockets, rankwise's checks off; \"hangs\": no completion within 3 s)"
        );
    }
    end(mpi, rank, if passed == outcomes.len() { 0 } else { FAILED })
}

/// One scenario, on threads of this process or (mpi) on the job's processes.
fn run_one(
    engine: rankwise::launch::EngineKind,
    mpi: bool,
    s: &misuse::Scenario,
) -> Result<misuse::Outcome, String> {
    #[cfg(feature = "mpi")]
    if mpi {
        return misuse::run_mpi(s).map_err(|e| format!("scenario {}: {e}", s.name));
    }
    // without the feature no process is an mpi rank
    let _ = mpi;
    Ok(misuse::run(engine, s))
}

fn end(mpi: bool, rank: usize, code: u8) -> ExitCode {
    if mpi {
        rankwise::launch::mpirun::end_with_rank0(rank, code)
    } else {
        ExitCode::from(code)
    }
}
