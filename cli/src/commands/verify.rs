//! `rankwise verify`: runs a suite on N ranks of an engine, writes the run
//! directory (manifest, per-rank CSVs, traces, evidence), reads it back
//! through the same checks as `summarize`, and prints the result tables and
//! the seed's four log facts. Exits 0 only if every record passes.
//!
//! On the mpi engine each rank is a process of an MPI job (see
//! `launch::mpirun`): every process runs its rank of each layer and writes
//! its own CSV, rank 0 makes the directory, reads every rank's rows back
//! and reports, and every process ends with rank 0's exit code.

use super::{FAILED, fail};
use crate::MAX_LOCAL_RANKS;
use crate::verify::cases::{self, Layer, Suite};
use crate::verify::evidence::{self, Fact};
use crate::verify::runner::{self, LayerRun};
use crate::verify::summary::{self, Summary};
use indicatif::{ProgressBar, ProgressStyle};
use rankwise::launch::EngineKind;
use std::io::{IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    /// Number of ranks (any N >= 1; the seed's roots adapt below N=4)
    /// [default: 4; under mpirun, the job's processes]. With --engine mpi
    /// outside mpirun, rankwise starts `mpirun -n N` itself
    #[arg(long, short = 'n')]
    pub ranks: Option<usize>,
    /// `seed` (the chapter's 92 rows at N=4), `full` (every op, datatype,
    /// count and root) or `misuse` (the catalogue of contract violations)
    #[arg(long, default_value = "seed")]
    pub suite: String,
    /// Engine to run on: local (threads), nccl (a process per rank, real
    /// NCCL), mpi (a process per rank of an MPI job; feature `mpi`)
    #[arg(long, value_parser = crate::commands::engine_parser(), default_value = "local")]
    pub engine: EngineKind,
    /// Run directory to write: a new or empty directory (default: a new
    /// runs/<UTC timestamp>, with -2, -3, … when runs share a second)
    #[arg(long)]
    pub out: Option<PathBuf>,
    /// Print one JSON object instead of tables
    #[arg(long)]
    pub json: bool,
}

/// The ranks a run uses when `--ranks` is not given.
pub const DEFAULT_RANKS: usize = 4;

/// One process's part in a run: the whole run, or (mpi engine) one rank of
/// an MPI job, where rank 0 makes the directory and reports.
#[derive(Clone, Copy)]
struct Part {
    rank: usize,
    mpi: bool,
}

impl Part {
    fn leads(self) -> bool {
        self.rank == 0
    }
    /// Ends the command: under mpirun, with rank 0's code on every process.
    fn end(self, code: u8) -> ExitCode {
        if self.mpi {
            rankwise::launch::mpirun::end_with_rank0(self.rank, code)
        } else {
            ExitCode::from(code)
        }
    }
    /// Says `msg` (rank 0 only) and ends with exit code 1.
    fn fail(self, msg: impl std::fmt::Display) -> ExitCode {
        if self.leads() {
            let _ = fail("verify", msg);
        }
        self.end(FAILED)
    }
}

pub fn run(args: Args) -> ExitCode {
    if args.suite == "misuse" {
        return super::misuse::run(&args);
    }
    let Some(suite) = Suite::parse(&args.suite) else {
        return fail(
            "verify",
            format!(
                "unknown suite '{}': expected seed, full or misuse",
                args.suite
            ),
        );
    };
    let wanted = args.ranks.unwrap_or(DEFAULT_RANKS);
    if let Some(code) = rankwise::launch::mpirun::relaunch("verify", args.engine, wanted) {
        return code;
    }
    let (part, n) = match place(&args, wanted) {
        Ok(placed) => placed,
        Err(code) => return code,
    };
    let plan = cases::plan(suite, n);
    let (out, run_id) = match claim_run_dir(&args, part, &plan) {
        Ok(claimed) => claimed,
        Err(code) => return code,
    };
    let quiet = !part.leads();
    let say = |line: String| {
        if quiet {
            return;
        }
        if args.json {
            eprintln!("{line}");
        } else {
            outln!("{line}");
        }
    };
    if !args.json && !quiet {
        outln!(
            "rankwise verify: suite {}, {n} rank(s), engine {}, run {run_id}",
            suite.name(),
            args.engine.describe()
        );
        outln!("writing {}", out.display());
    }
    for a in &plan.adaptations {
        say(format!("adapted to N={n}: {a}"));
    }
    let runs = match run_layers(&args, part, &plan, &run_id, &out, &say) {
        Ok(runs) => runs,
        Err(code) => return code,
    };
    if !part.leads() {
        // rank 0 reads every rank's rows back and reports
        return part.end(0);
    }
    report(&args, part, &plan, suite, &out, &runs)
}

/// This process's part in the run and the rank count: every rank here,
/// or one rank of an MPI job; refused when the engine cannot run here or
/// the count is not one verify takes.
fn place(args: &Args, wanted: usize) -> Result<(Part, usize), ExitCode> {
    let (part, n) = match rankwise::launch::mpirun::rank_of_job(args.engine) {
        None => (
            Part {
                rank: 0,
                mpi: false,
            },
            wanted,
        ),
        Some(Err(e)) => return Err(fail("verify", e)),
        Some(Ok((rank, size))) => {
            let part = Part { rank, mpi: true };
            if args.ranks.is_some_and(|r| r != size) {
                return Err(part.fail(format!(
                    "--ranks {wanted}, but mpirun started {size} process(es): each rank is one process (drop --ranks, or mpirun -n {wanted})"
                )));
            }
            (part, size)
        }
    };
    if !part.mpi
        && let Err(why) = args.engine.available()
    {
        return Err(fail(
            "verify",
            format!("the {} engine cannot run here: {why}", args.engine),
        ));
    }
    if let Err(e) = super::check_size(n, 1, rankwise::DataType::Int8, Some(MAX_LOCAL_RANKS)) {
        return Err(part.fail(e));
    }
    Ok((part, n))
}

/// The run's directory and id: rank 0 claims the directory and writes the
/// manifest; under mpirun the others then learn where the run goes (or why
/// it does not).
fn claim_run_dir(
    args: &Args,
    part: Part,
    plan: &cases::Plan,
) -> Result<(PathBuf, String), ExitCode> {
    let run_id = runner::utc_run_id();
    let made = if part.leads() {
        runner::create_run_dir(args.out.as_deref(), Path::new("runs"), &run_id).and_then(|out| {
            runner::manifest(plan, &run_id, args.engine.name())
                .write(&out)
                .map(|_| out.clone())
                .map_err(|e| format!("cannot write {}: {e}", out.join("manifest.json").display()))
        })
    } else {
        Err(String::new())
    };
    if !part.mpi {
        return made.map(|p| (p, run_id)).map_err(|e| fail("verify", e));
    }
    let mine = match &made {
        Ok(p) => serde_json::json!({ "out": p, "run_id": run_id }),
        Err(e) => serde_json::json!({ "error": e }),
    };
    let all =
        rankwise::launch::mpirun::share(mine.to_string().as_bytes()).map_err(|e| part.fail(e))?;
    let lead: serde_json::Value = all
        .first()
        .and_then(|b| serde_json::from_slice(b).ok())
        .unwrap_or_default();
    match (lead["out"].as_str(), lead["run_id"].as_str()) {
        (Some(o), Some(id)) => Ok((PathBuf::from(o), id.to_string())),
        _ => Err(part.fail(
            lead["error"]
                .as_str()
                .unwrap_or("rank 0 made no run directory"),
        )),
    }
}

/// Runs every layer of the plan, with progress: a bar on a terminal, plain
/// lines otherwise (stderr under --json); rank 0 keeps each layer's trace.
fn run_layers(
    args: &Args,
    part: Part,
    plan: &cases::Plan,
    run_id: &str,
    out: &Path,
    say: &dyn Fn(String),
) -> Result<Vec<LayerRun>, ExitCode> {
    let n = plan.n;
    let total: u64 = plan
        .layers
        .iter()
        .map(|l| (l.rows_per_rank() * n) as u64)
        .sum();
    let bar = (!args.json && !part.mpi && std::io::stdout().is_terminal()).then(|| {
        let b = ProgressBar::new(total);
        if let Ok(style) =
            ProgressStyle::with_template("{prefix:>9} [{bar:40}] {pos}/{len} rows {elapsed}")
        {
            b.set_style(style.progress_chars("=> "));
        }
        b
    });
    let mut runs: Vec<LayerRun> = Vec::new();
    for lp in &plan.layers {
        if let Some(b) = &bar {
            b.set_prefix(lp.layer.name());
        }
        let tick = || {
            if let Some(b) = &bar {
                b.inc(1);
            }
        };
        let timeout = rankwise::local::LaunchOptions::default().timeout;
        match runner::run_layer(args.engine, lp, n, run_id, out, timeout, &tick) {
            Ok(r) => {
                if bar.is_none() {
                    say(format!(
                        "{}: {} rows from {n} rank(s) in {:.2} s",
                        lp.layer,
                        lp.rows_per_rank() * n,
                        r.elapsed.as_secs_f64()
                    ));
                }
                if part.leads()
                    && let Err(e) = runner::save_trace(out, &r)
                {
                    say(format!("cannot save the {} trace: {e}", lp.layer));
                }
                runs.push(r);
            }
            Err(e) => {
                if let Some(b) = &bar {
                    b.finish_and_clear();
                }
                return Err(part.fail(format!("the {} layer could not run: {e}", lp.layer)));
            }
        }
    }
    if let Some(b) = &bar {
        b.finish_and_clear();
    }
    Ok(runs)
}

/// Rank 0's verdict: the trace's evidence, every rank's rows read back
/// through the same checks as `summarize`, and the tables.
fn report(
    args: &Args,
    part: Part,
    plan: &cases::Plan,
    suite: Suite,
    out: &Path,
    runs: &[LayerRun],
) -> ExitCode {
    let facts = match (
        plan.layer(Layer::Framework),
        runs.iter().find(|r| r.layer == Layer::Framework),
    ) {
        (Some(lp), Some(r)) => evidence::seed_facts(lp, plan.n, &r.op_counts, &r.trace),
        _ => Vec::new(),
    };
    if let Ok(text) = serde_json::to_string_pretty(&facts) {
        let _ = std::fs::write(out.join("evidence.json"), text + "\n");
    }
    let rank_failures: Vec<String> = runs
        .iter()
        .flat_map(|r| r.failures.iter().map(move |f| format!("{}: {f}", r.layer)))
        .collect();
    let summary = match summary::summarize(out) {
        Ok(s) => s,
        Err(e) => return part.fail(format!("cannot read back {}: {e}", out.display())),
    };
    let pass = summary.pass() && facts.iter().all(|f| f.pass) && rank_failures.is_empty();
    if args.json {
        print_json(&summary, &facts, &rank_failures, out, pass);
    } else {
        print_text(&summary, &facts, &rank_failures, out, suite, pass);
    }
    part.end(if pass { 0 } else { FAILED })
}

fn print_text(
    s: &Summary,
    facts: &[Fact],
    rank_failures: &[String],
    out: &Path,
    suite: Suite,
    pass: bool,
) {
    let mut o = String::new();
    o.push_str("\nAcceptance\n");
    o.push_str(&summary::acceptance_table(s));
    o.push('\n');
    if suite == Suite::Seed {
        o.push_str(&summary::records_table(&s.records));
    } else {
        o.push_str(&summary::operations_table(&s.records));
        let failing: Vec<_> = s.records.iter().filter(|r| !r.pass).cloned().collect();
        if !failing.is_empty() {
            o.push_str("\nFailing records\n");
            o.push_str(&summary::records_table(&failing));
        }
        o.push_str(&format!(
            "(every record: rankwise summarize {})\n",
            out.display()
        ));
    }
    if !facts.is_empty() {
        o.push_str(&format!(
            "\nEvidence from this run's own trace ({})\n",
            out.join("trace").join("framework.log").display()
        ));
        for f in facts {
            o.push_str(&format!(
                "  {}  {}\n",
                if f.pass { "PASS" } else { "FAIL" },
                f.claim
            ));
            for d in &f.details {
                o.push_str(&format!("        {d}\n"));
            }
        }
    }
    if !rank_failures.is_empty() {
        o.push_str("\nRanks that stopped early\n");
        for f in rank_failures {
            o.push_str(&format!("  {f}\n"));
        }
    }
    if !s.problems.is_empty() {
        o.push_str("\nProblems\n");
        for p in s.problems.iter().take(50) {
            o.push_str(&format!("  {p}\n"));
        }
        if s.problems.len() > 50 {
            o.push_str(&format!(
                "  … and {} more (rankwise summarize {})\n",
                s.problems.len() - 50,
                out.display()
            ));
        }
    }
    o.push('\n');
    o.push_str(&summary::totals_line(s));
    if !pass && s.pass() {
        o.push_str(" (but the evidence or a rank failed: see above)");
    }
    o.push('\n');
    o.push_str(&format!(
        "rows: {}/raw/<layer>/rank<r>.csv; re-check: rankwise summarize {}\n",
        out.display(),
        out.display()
    ));
    let mut stdout = std::io::stdout().lock();
    let _ = stdout.write_all(o.as_bytes());
}

fn print_json(s: &Summary, facts: &[Fact], rank_failures: &[String], out: &Path, pass: bool) {
    let v = serde_json::json!({
        "run_id": s.manifest.run_id,
        "suite": s.manifest.suite,
        "ranks": s.manifest.ranks,
        "engine": s.manifest.engine,
        "out": out.display().to_string(),
        "adaptations": s.manifest.adaptations,
        "layers": s.layers,
        "rows": s.rows(),
        "records_total": s.records.len(),
        "records": s.records,
        "problems": s.problems,
        "evidence": facts,
        "rank_failures": rank_failures,
        "pass": pass,
    });
    outln!("{}", serde_json::to_string_pretty(&v).unwrap_or_default());
}
