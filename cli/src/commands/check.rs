//! `rankwise check [OPTIONS] -- CMD [ARGS]...`: runs CMD with
//! `librankwise_nccl.so` in front of NCCL in every process it starts, then
//! reads the journals and says whether a contract was broken.
//!
//! Everything that can be wrong with the request is found before CMD
//! starts, each a one-line error and exit 1: no command, a command that
//! cannot be found, a bad `--mode` or `--timeout`, a bad `RANKWISE_*`
//! variable, a journal directory that cannot be made or written, a library
//! that does not load here. Then: CMD runs (signals sent to `rankwise` are
//! passed on), its journals are analysed, and the exit code is CMD's, or
//! [`VIOLATION`] when the checker found a contract violation, or 1 when CMD
//! succeeded but made no NCCL call the checker saw.

use crate::check::launch::{self, End};
use crate::check::library::{self, Source};
use crate::check::verdict::{self, Verdict};
pub use rankwise::exit::{FAILED, VIOLATION};
use rankwise::settings::{self, Settings};
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

const EXAMPLES: &str = "\
Examples:
  rankwise check -- torchrun --nproc-per-node 4 train.py
  rankwise check --timeout 60 -- mpirun -n 4 ./allreduce_test
  rankwise check --journal /shared/journal -- srun -n 16 python train.py

Every process CMD starts gets the checker through LD_PRELOAD (put first,
what was there kept) and writes a journal into the journal directory. At
the end, the journals are read as `rankwise logs analyze DIR` reads them:

  rankwise check: 40 calls on 1 communicator across 4 ranks: no contract violation

Exit code: CMD's; 3 when the checker found a contract violation; 1 for bad
input (nothing started) or when CMD made no NCCL call the checker saw.
RANKWISE_PRELOAD=PATH preloads that library instead of the built-in one.";

#[derive(clap::Args, Debug)]
#[command(after_help = EXAMPLES)]
pub struct Args {
    /// strict: each call's own checks, and every launch agreed across ranks
    /// before NCCL runs it; watch: each call's own checks, every call
    /// forwarded at once, and the ranks' calls compared in the background
    /// (a mismatch fails the communicator within a second); local: each call's own checks only (nothing
    /// waits on other ranks; the journals are still compared at the end);
    /// off: every call forwarded untouched
    #[arg(long, value_name = "MODE", default_value = "strict")]
    pub mode: String,
    /// Seconds a rank waits for its peers at a launch before naming who did
    /// not come (a finite number above 0; sets RANKWISE_TIMEOUT) [default: 300]
    #[arg(long, value_name = "SECS")]
    pub timeout: Option<String>,
    /// Abort the process right after the checker reports an error
    /// (RANKWISE_ABORT=1)
    #[arg(long)]
    pub abort_on_error: bool,
    /// A new or empty directory for the journals, one per process; every
    /// rank must be able to write there [default: a new
    /// ./rankwise-check-<UTC time>]
    #[arg(long, value_name = "DIR")]
    pub journal: Option<PathBuf>,
    /// The command and its arguments, after `--`
    #[arg(trailing_var_arg = true, value_name = "CMD")]
    pub command: Vec<OsString>,
}

/// `--mode`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    Strict,
    Watch,
    Local,
    Off,
}

impl Mode {
    pub fn parse(s: &str) -> Result<Mode, String> {
        match s {
            "strict" => Ok(Mode::Strict),
            "watch" => Ok(Mode::Watch),
            "local" => Ok(Mode::Local),
            "off" => Ok(Mode::Off),
            _ => Err(format!("--mode {s}: expected strict, watch, local or off")),
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Mode::Strict => "strict",
            Mode::Watch => "watch",
            Mode::Local => "local",
            Mode::Off => "off",
        }
    }
    /// Its `RANKWISE_CHECK` value.
    fn check_value(self) -> &'static str {
        match self {
            Mode::Strict => "full",
            Mode::Watch => "watch",
            Mode::Local => "local",
            Mode::Off => "0",
        }
    }
}

/// What was asked, checked; nothing started yet.
struct Plan {
    mode: Mode,
    /// CMD as given, for messages.
    shown: String,
    program: PathBuf,
    args: Vec<OsString>,
    /// Variables set for CMD besides LD_PRELOAD.
    env: Vec<(&'static str, String)>,
}

pub fn run(args: Args) -> ExitCode {
    let fail = |msg: String| rankwise::exit::fail("check", msg);
    let plan = match plan(&args) {
        Ok(p) => p,
        Err(msg) => return fail(msg),
    };
    let (journal, made) = match make_journal(args.journal.as_deref()) {
        Ok(j) => j,
        Err(msg) => return fail(msg),
    };
    let lib = match library::prepare(&Source::from_env(), &journal) {
        Ok(l) => l,
        Err(msg) => {
            // nothing started: leave nothing behind
            let _ = std::fs::remove_file(journal.join(library::FILE_NAME));
            if made {
                let _ = std::fs::remove_dir(&journal);
            }
            return fail(msg);
        }
    };
    let shown = plan.shown.clone();
    let mut env: Vec<(OsString, OsString)> = plan
        .env
        .iter()
        .map(|(k, v)| (OsString::from(k), OsString::from(v)))
        .collect();
    env.push((
        settings::DEBUG_FILE.into(),
        journal.join("rankwise.%h.%p.log").into_os_string(),
    ));
    let existing = std::env::var_os("LD_PRELOAD");
    env.push((
        "LD_PRELOAD".into(),
        library::preload_value(&lib, existing.as_deref()),
    ));
    say(&format!(
        "mode {}, journals in {}",
        plan.mode.name(),
        journal.display()
    ));
    let end = match launch::run(&plan.program, &plan.args, &env) {
        Ok(e) => e,
        Err(msg) => return fail(msg),
    };
    conclude(plan.mode, &journal, &shown, end)
}

/// Every check on the request that needs nothing written.
fn plan(args: &Args) -> Result<Plan, String> {
    let Some((cmd, rest)) = args.command.split_first() else {
        return Err("no command to run: rankwise check [OPTIONS] -- CMD [ARGS]...".into());
    };
    let mode = Mode::parse(&args.mode)?;
    let mut env: Vec<(&'static str, String)> = vec![
        (settings::CHECK, mode.check_value().into()),
        (settings::DEBUG, "INFO".into()),
        (settings::DEBUG_SUBSYS, "INIT,COLL".into()),
    ];
    if let Some(t) = &args.timeout {
        let (_, errors) =
            Settings::parse(|name| (name == settings::TIMEOUT).then(|| OsString::from(t)));
        if let Some(e) = errors.first() {
            return Err(format!("--timeout {t}: {}", e.why));
        }
        env.push((settings::TIMEOUT, t.clone()));
    }
    if args.abort_on_error {
        env.push((settings::ABORT, "1".into()));
    }
    // the variables the ranks will see, ours over the environment's
    let (_, errors) = Settings::parse(|name| match env.iter().find(|(k, _)| *k == name) {
        Some((_, v)) => Some(OsString::from(v)),
        None => std::env::var_os(name),
    });
    if !errors.is_empty() {
        let all: Vec<String> = errors.iter().map(|e| e.to_string()).collect();
        return Err(all.join("; "));
    }
    let program = launch::find_command(cmd, std::env::var_os("PATH").as_deref())?;
    Ok(Plan {
        mode,
        shown: cmd.to_string_lossy().into_owned(),
        program,
        args: rest.to_vec(),
        env,
    })
}

/// Runs `rankwise-check-<UTC time>` end with `-2`, `-3`, … when an earlier
/// run of the same second holds the name.
const MAX_SAME_SECOND: usize = 100;

/// The journal directory, made (or found empty) and proven writable, as an
/// absolute path (CMD's processes may change directory), and whether it was
/// made here.
fn make_journal(asked: Option<&Path>) -> Result<(PathBuf, bool), String> {
    let mut made = true;
    let dir = match asked {
        Some(d) => {
            match std::fs::read_dir(d) {
                Ok(mut entries) => {
                    made = false;
                    if entries.next().is_some() {
                        return Err(format!(
                            "--journal {}: the directory holds files already; give a new or empty one, so the verdict reads this run's journals only",
                            d.display()
                        ));
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                    std::fs::create_dir_all(d).map_err(|e| {
                        format!("--journal {}: cannot make the directory: {e}", d.display())
                    })?;
                }
                Err(e) => return Err(format!("--journal {}: {e}", d.display())),
            }
            d.to_path_buf()
        }
        None => new_default_dir()?,
    };
    let dir = std::path::absolute(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
    let probe = dir.join(".rankwise-check-probe");
    if let Err(e) = std::fs::write(&probe, b"").and_then(|()| std::fs::remove_file(&probe)) {
        if made {
            let _ = std::fs::remove_dir(&dir);
        }
        return Err(format!(
            "cannot write in the journal directory {}: {e}",
            dir.display()
        ));
    }
    Ok((dir, made))
}

fn new_default_dir() -> Result<PathBuf, String> {
    let base = format!("rankwise-check-{}", crate::verify::runner::utc_run_id());
    for k in 1..=MAX_SAME_SECOND {
        let name = if k == 1 {
            base.clone()
        } else {
            format!("{base}-{k}")
        };
        match std::fs::create_dir(&name) {
            Ok(()) => return Ok(PathBuf::from(name)),
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => continue,
            Err(e) => {
                return Err(format!(
                    "cannot make the journal directory ./{name}: {e} (choose one with --journal)"
                ));
            }
        }
    }
    Err(format!(
        "./{base} and {MAX_SAME_SECOND} more like it exist already: choose a journal directory with --journal"
    ))
}

/// The verdict lines, and the exit code: a violation's, else CMD's, else 1
/// when nothing was checked.
fn conclude(mode: Mode, journal: &Path, shown: &str, end: End) -> ExitCode {
    if !end.success() {
        say(&format!("{shown} {end}"));
    }
    if mode == Mode::Off {
        say("--mode off: NCCL calls were forwarded unchecked");
        return ExitCode::from(end.code());
    }
    let v = verdict::judge(journal, shown);
    for line in v.lines() {
        say(line);
    }
    ExitCode::from(match v {
        Verdict::Violation { .. } => VIOLATION,
        _ if !end.success() => end.code(),
        Verdict::Clean { .. } => 0,
        Verdict::NoCalls { .. } | Verdict::Unreadable { .. } => FAILED,
    })
}

/// One line on stderr, `rankwise check: …`; stdout stays CMD's.
fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr().lock(), "rankwise check: {line}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn modes_are_the_four_names_and_nothing_else() {
        assert_eq!(Mode::parse("strict"), Ok(Mode::Strict));
        assert_eq!(Mode::parse("watch"), Ok(Mode::Watch));
        assert_eq!(Mode::parse("local"), Ok(Mode::Local));
        assert_eq!(Mode::parse("off"), Ok(Mode::Off));
        for bad in ["full", "Strict", "", "0", "1"] {
            assert_eq!(
                Mode::parse(bad),
                Err(format!(
                    "--mode {bad}: expected strict, watch, local or off"
                ))
            );
        }
        for m in [Mode::Strict, Mode::Watch, Mode::Local, Mode::Off] {
            // each mode's value is one the checker accepts, meaning that mode
            let (s, errors) = Settings::parse(|name| {
                (name == settings::CHECK).then(|| OsString::from(m.check_value()))
            });
            assert!(errors.is_empty());
            assert_eq!(
                s.checks,
                match m {
                    Mode::Strict => settings::Checks::Full,
                    Mode::Watch => settings::Checks::Watch,
                    Mode::Local => settings::Checks::Local,
                    Mode::Off => settings::Checks::Off,
                }
            );
        }
    }
}
