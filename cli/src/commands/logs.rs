//! `rankwise logs analyze|summary FILE|DIR... [--format F] [--hung]`
//!
//! Exit codes, as for every rankwise command: 0 when no problem was found;
//! 1 when a divergence, hang or mismatch was diagnosed, or for bad input (a
//! missing file, no NCCL lines, no call that could be read); 2 for clap's
//! usage errors.

use rankwise::logs::analyze::{Settings, analyze_with};
use rankwise::logs::ingest::{Format, Options, collect, expand_paths};
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

/// `--format`: what the inputs are.
#[derive(clap::ValueEnum, Clone, Copy, Debug, Default)]
pub enum FormatArg {
    /// Each file by its first bytes.
    #[default]
    Auto,
    /// Text: NCCL's lines (with or without their header) and PyTorch's
    /// watchdog lines.
    Text,
    /// PyTorch Flight Recorder dumps, pickle or JSON.
    Fr,
    /// Flight Recorder dumps as JSON.
    FrJson,
    /// Flight Recorder dumps as pickle.
    FrPickle,
}

impl From<FormatArg> for Format {
    fn from(f: FormatArg) -> Format {
        match f {
            FormatArg::Auto => Format::Auto,
            FormatArg::Text => Format::Text,
            FormatArg::Fr => Format::Flight,
            FormatArg::FrJson => Format::FlightJson,
            FormatArg::FrPickle => Format::FlightPickle,
        }
    }
}

#[derive(clap::Args, Debug)]
pub struct InputArgs {
    /// What people have after a failed job, in any mix: NCCL_DEBUG=INFO
    /// logs (one rank per file or interleaved, with or without NCCL's line
    /// header; `.gz` read directly), the launcher's stderr with PyTorch's
    /// watchdog lines, PyTorch Flight Recorder dumps (pickle or JSON).
    /// Files or directories (walked recursively).
    #[arg(required = true, value_name = "FILE|DIR")]
    pub paths: Vec<PathBuf>,
    /// What the files are (auto: each by its first bytes).
    #[arg(long, value_enum, default_value_t = FormatArg::Auto)]
    pub format: FormatArg,
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
    /// The job hung: read logs that end with ranks at different calls as
    /// a hang (who is stuck inside a call, who never made it). Without it,
    /// a hang is claimed only on evidence in the input (a watchdog timeout,
    /// an abort, an NCCL timeout, Flight Recorder entries stuck in
    /// `started`).
    #[arg(long)]
    pub hung: bool,
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
            format: input.format.into(),
            ..Options::default()
        },
    )
    .map_err(fail)?;
    let c = &collected.counts;
    // An input error still says what happened to the files (a line too long, say).
    let mut notes = String::new();
    file_notes(&mut notes, &collected.files);
    for u in &collected.unreadable {
        notes += &format!("  {u}\n");
    }
    let fail = |msg: String| fail(format!("{msg}\n{notes}").trim_end());
    let files_word = format!(
        "{} file{}",
        collected.files.len(),
        if collected.files.len() == 1 { "" } else { "s" }
    );
    // watchdog lines and Flight Recorder dumps are worth analysing alone
    let other_evidence = !collected.flight.is_empty()
        || collected
            .torch
            .iter()
            .any(|t| !matches!(t.event, rankwise::logs::model::TorchEventRec::Error { .. }));
    if c.nccl_lines == 0 && !other_evidence {
        return Err(fail(format!(
            "no NCCL lines in the {} lines read from {files_word} (were the logs written with NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=INIT,COLL?)",
            c.lines,
        )));
    }
    if c.calls == 0 && !other_evidence {
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
            let a = analyze_with(&collected, &Settings { hung: args.hung });
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
