//! `rankwise logs analyze|summary FILE|DIR...`
//!
//! Exit codes, as for every rankwise command: 0 when no problem was found;
//! 1 when a divergence, hang or mismatch was diagnosed, or for bad input (a
//! missing file, no NCCL lines, no call that could be read); 2 for clap's
//! usage errors.

use rankwise::logs::analyze::analyze;
use rankwise::logs::ingest::{Options, collect, expand_paths};
use rankwise::logs::report::{analysis_text, file_notes, summary_text};
use rankwise::logs::summary::summarize;
use std::io::Write;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(clap::Subcommand, Debug)]
pub enum LogsCommand {
    /// Diagnose hangs and contract mismatches: the first position where
    /// ranks diverge, unmatched Send/Recv, invalid arguments.
    Analyze(AnalyzeArgs),
    /// Calls and bytes per communicator, rank and op.
    Summary(SummaryArgs),
}

#[derive(clap::Args, Debug)]
pub struct InputArgs {
    /// NCCL_DEBUG=INFO logs: files or directories (walked recursively);
    /// ranks may be in separate files or interleaved; `.gz` is read directly.
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// Print JSON instead of text.
    #[arg(long)]
    pub json: bool,
    /// Parser threads (0: one per core).
    #[arg(long, default_value_t = 0, value_name = "N")]
    pub threads: usize,
}

#[derive(clap::Args, Debug)]
pub struct AnalyzeArgs {
    #[command(flatten)]
    pub input: InputArgs,
}

#[derive(clap::Args, Debug)]
pub struct SummaryArgs {
    #[command(flatten)]
    pub input: InputArgs,
}

/// Exit code of bad input (and of a diagnosed problem).
const FAILED: u8 = 1;

fn fail(msg: impl std::fmt::Display) -> ExitCode {
    eprintln!("rankwise logs: {msg}");
    ExitCode::from(FAILED)
}

fn emit(text: &str) {
    // A closed pipe (`| head`) is not an error worth a panic.
    let mut out = std::io::stdout().lock();
    let _ = out.write_all(text.as_bytes());
    let _ = out.flush();
}

fn read(input: &InputArgs) -> Result<rankwise::logs::model::Collected, ExitCode> {
    let files = expand_paths(&input.paths).map_err(fail)?;
    let collected = collect(
        &files,
        Options {
            threads: input.threads,
            ..Options::default()
        },
    )
    .map_err(fail)?;
    let c = &collected.counts;
    // An input error still says what happened to the files (a line too long, say).
    let mut notes = String::new();
    file_notes(&mut notes, &collected.files);
    let fail = |msg: String| fail(format!("{msg}\n{notes}").trim_end());
    let files_word = format!(
        "{} file{}",
        collected.files.len(),
        if collected.files.len() == 1 { "" } else { "s" }
    );
    if c.nccl_lines == 0 {
        return Err(fail(format!(
            "no NCCL lines in the {} lines read from {files_word} (were the logs written with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL?)",
            c.lines,
        )));
    }
    if c.calls == 0 {
        if let Some(bad) = &collected.first_malformed_call {
            return Err(fail(format!(
                "no call could be read: all {} COLL lines in {files_word} are malformed ({} malformed NCCL lines in all); the first is {}:{}, where {}: {}",
                c.malformed_calls,
                c.malformed_lines,
                collected.files[bad.loc.file as usize].path,
                bad.loc.line,
                bad.why,
                bad.text,
            )));
        }
        // A rank whose only call NCCL rejected logs a WARN and no COLL
        // line: that is still worth analysing.
        if c.warn_lines == 0 {
            return Err(fail(format!(
                "no call in the {} NCCL lines of {files_word}: no COLL line (were the logs written with NCCL_DEBUG_SUBSYS including COLL?)",
                c.nccl_lines,
            )));
        }
    }
    Ok(collected)
}

pub fn run(cmd: LogsCommand) -> ExitCode {
    match cmd {
        LogsCommand::Analyze(args) => {
            let collected = match read(&args.input) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let a = analyze(&collected);
            if args.input.json {
                match serde_json::to_string_pretty(&a) {
                    Ok(s) => emit(&(s + "\n")),
                    Err(e) => return fail(e),
                }
            } else {
                emit(&analysis_text(&a));
            }
            if a.problems > 0 {
                ExitCode::from(FAILED)
            } else {
                ExitCode::SUCCESS
            }
        }
        LogsCommand::Summary(args) => {
            let collected = match read(&args.input) {
                Ok(c) => c,
                Err(code) => return code,
            };
            let s = summarize(&collected);
            if args.input.json {
                match serde_json::to_string_pretty(&s) {
                    Ok(j) => emit(&(j + "\n")),
                    Err(e) => return fail(e),
                }
            } else {
                emit(&summary_text(&s));
            }
            ExitCode::SUCCESS
        }
    }
}
