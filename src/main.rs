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
    /// nccl-tests' sweep and table: time, algbw, busbw and #wrong per size
    Bench(rankwise::bench::BenchArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Command::Bench(args) => rankwise::bench::main(args),
    }
}
