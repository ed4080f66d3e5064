//! `rankwise summarize RUN_DIR`: reads a run's per-rank CSVs alone (no
//! re-run), checks them against what the run's suite declares for its N,
//! and prints the aggregated table and a totals line. Any missing or
//! unreadable rank file, missing, duplicated or unknown row, wrong row
//! count, identity column that is not the case's, or incorrect row fails it
//! with a message naming the file and line.

use super::{FAILED, fail};
use crate::verify::summary;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// A directory written by `rankwise verify`
    pub run_dir: PathBuf,
    /// Print one JSON object instead of the table
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: Args) -> ExitCode {
    let dir = &args.run_dir;
    if !dir.is_dir() {
        return fail("summarize", format!("{} is not a directory", dir.display()));
    }
    let s = match summary::summarize(dir) {
        Ok(s) => s,
        Err(e) => return fail("summarize", e),
    };
    if args.json {
        let v = serde_json::json!({
            "run_id": s.manifest.run_id,
            "suite": s.manifest.suite,
            "ranks": s.manifest.ranks,
            "layers": s.layers,
            "rows": s.rows(),
            "records_total": s.records.len(),
            "records": s.records,
            "problems": s.problems,
            "pass": s.pass(),
        });
        outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
    } else {
        outln!(
            "run {}: suite {}, {} rank(s), engine {}",
            s.manifest.run_id,
            s.manifest.suite,
            s.manifest.ranks,
            s.manifest.engine
        );
        out!("{}", summary::records_table(&s.records));
        outln!("{}", summary::totals_line(&s));
    }
    if s.pass() {
        return ExitCode::SUCCESS;
    }
    for p in &s.problems {
        eprintln!("rankwise summarize: {p}");
    }
    eprintln!(
        "rankwise summarize: {} FAILS: {} problem(s)",
        dir.display(),
        s.problems.len()
    );
    ExitCode::from(FAILED)
}
