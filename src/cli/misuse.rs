//! `rankwise verify --suite misuse`: runs the misuse catalogue
//! (`crate::misuse`) and prints, per scenario, what NCCL did with it (an
//! observation on real NCCL), what rankwise does, and the time to the
//! error. Exits 0 only if every scenario passes.

use super::{FAILED, fail};
use crate::misuse::{self, DEADLINE};
use std::process::ExitCode;

pub fn run(args: &super::verify::Args) -> ExitCode {
    if let Err(why) = args.engine.available() {
        return fail(
            "verify",
            format!("the {} engine cannot run here: {why}", args.engine),
        );
    }
    let scenarios = misuse::catalogue();
    // one scenario panics a rank on purpose: keep its message off the terminal
    let hook = std::panic::take_hook();
    std::panic::set_hook(Box::new(|_| {}));
    let outcomes: Vec<misuse::Outcome> = scenarios
        .iter()
        .map(|s| misuse::run(args.engine, s))
        .collect();
    std::panic::set_hook(hook);
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
        if args.ranks != 4 {
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
        println!(
            "\n{passed}/{} scenarios passed: every rank returned the expected error within {:?}, with no byte changed outside the call's legal outputs",
            outcomes.len(),
            DEADLINE
        );
        println!(
            "(NCCL column: observed on NCCL 2.28.9, one H200, each scenario's ranks as processes sharing it over sockets, rankwise's checks off; \"hangs\": no completion within 3 s)"
        );
    }
    if passed == outcomes.len() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(FAILED)
    }
}
