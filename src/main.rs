//! The `rankwise` command line.

use clap::{Parser, Subcommand};
use rankwise::cli;
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "rankwise",
    version,
    about = "NCCL's collective contracts, executable"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the conformance suite on N ranks of an engine and prove every record
    Verify(cli::verify::Args),
    /// Check a run directory's per-rank CSVs and print the aggregated table
    Summarize(cli::summarize::Args),
    /// Run one collective and show every rank's input and output
    Run(cli::run::Args),
    /// Explain one call's contract: sizes, in-place equation, roles, roots, C call
    Explain(cli::explain::Args),
    /// nccl-tests' sweep and table: time, algbw, busbw and #wrong per size
    Bench(rankwise::bench::BenchArgs),
    /// Diagnose hangs and contract mismatches from NCCL's own logs
    Logs {
        #[command(subcommand)]
        cmd: rankwise::logs::cli::LogsCommand,
    },
}

fn main() -> ExitCode {
    // a rank process started by `launch::process` runs its rank and ends
    if let Some(code) = rankwise::launch::process::serve_if_worker(&rankwise::verify::runner::JOBS)
    {
        return code;
    }
    let cli = Cli::parse();
    // the commands that launch ranks read the RANKWISE_* variables: a bad
    // one stops them before anything starts
    match cli.command {
        Command::Verify(a) => cli::with_settings("verify", || cli::verify::run(a)),
        Command::Summarize(a) => cli::summarize::run(a),
        Command::Run(a) => cli::with_settings("run", || cli::run::run(a)),
        Command::Explain(a) => cli::explain::run(a),
        Command::Bench(args) => cli::with_settings("bench", || rankwise::bench::main(args)),
        Command::Logs { cmd } => rankwise::logs::cli::run(cmd),
    }
}
