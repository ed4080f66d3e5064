//! The `rankwise` command line.

use clap::{Parser, Subcommand};
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
    /// Diagnose hangs and contract mismatches from NCCL's own logs
    Logs {
        #[command(subcommand)]
        cmd: rankwise::logs::cli::LogsCommand,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Logs { cmd } => rankwise::logs::cli::run(cmd),
    }
}
