//! The `rankwise` command line: one routing, every command's code in
//! `commands`.

use clap::{Parser, Subcommand};
use rankwise_cli::commands;
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
    Verify(commands::verify::Args),
    /// Check a run directory's per-rank CSVs and print the aggregated table
    Summarize(commands::summarize::Args),
    /// Run one collective and show every rank's input and output
    Run(commands::run::Args),
    /// Explain one call's contract: sizes, in-place equation, roles, roots, C call
    Explain(commands::explain::Args),
    /// nccl-tests' sweep and table: time, algbw, busbw and #wrong per size
    Bench(commands::bench::Args),
    /// Diagnose hangs and contract mismatches from NCCL's own logs
    Logs {
        #[command(subcommand)]
        cmd: commands::logs::LogsCommand,
    },
    /// Run a command with the checker in front of NCCL in every process it starts
    Check(commands::check::Args),
}

fn main() -> ExitCode {
    // a rank process started by `launch::process` runs its rank and ends
    if let Some(code) =
        rankwise::launch::process::serve_if_worker(&rankwise_cli::verify::runner::JOBS)
    {
        return code;
    }
    let cli = Cli::parse();
    // the commands that launch ranks read the RANKWISE_* variables: a bad
    // one stops them before anything starts
    match cli.command {
        Command::Verify(a) => commands::with_settings("verify", || commands::verify::run(a)),
        Command::Summarize(a) => commands::summarize::run(a),
        Command::Run(a) => commands::with_settings("run", || commands::run::run(a)),
        Command::Explain(a) => commands::explain::run(a),
        Command::Bench(a) => commands::with_settings("bench", || commands::bench::run(a)),
        Command::Logs { cmd } => commands::logs::run(cmd),
        // reads the RANKWISE_* variables its ranks will see itself
        Command::Check(a) => commands::check::run(a),
    }
}
