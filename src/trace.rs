//! The tracer: where NCCL-format lines go. `RANKWISE_DEBUG` (`WARN` or
//! `INFO`), `RANKWISE_DEBUG_SUBSYS` (comma list of `INIT`, `COLL`, `ALL`;
//! a leading `^` excludes; default all) and `RANKWISE_DEBUG_FILE` (`%h` host,
//! `%p` pid, `%r` rank) behave like their NCCL_ counterparts; `settings`
//! parses them. Tests capture lines in memory with [`Tracer::memory`].
//!
//! Tracing never stops a run: a trace file that cannot be opened sends its
//! lines to stderr, and one that fails a write loses the later lines. Each
//! is said once on stderr, not once per line or per rank.

use crate::core::RawCall;
use crate::core::trace::{LinePrefix, coll_line, info_line, init_line, warn_line};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

pub use crate::settings::Level;
use crate::settings::Settings;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Subsys {
    Init,
    Coll,
}

/// Lines captured in memory, in the order they were printed.
pub type TraceBuffer = Arc<Mutex<Vec<String>>>;

#[derive(Clone)]
enum Sink {
    Stderr,
    /// a path pattern, resolved per rank
    File(String),
    Memory(TraceBuffer),
}

/// Trace configuration shared by the ranks of a launch.
#[derive(Clone)]
pub struct Tracer {
    level: Level,
    init: bool,
    coll: bool,
    sink: Sink,
}

impl Default for Tracer {
    fn default() -> Self {
        Tracer::off()
    }
}

impl Tracer {
    pub fn off() -> Tracer {
        Tracer {
            level: Level::Off,
            init: false,
            coll: false,
            sink: Sink::Stderr,
        }
    }

    /// Configuration from `RANKWISE_DEBUG`, `RANKWISE_DEBUG_SUBSYS`,
    /// `RANKWISE_DEBUG_FILE`; a bad value is replaced by its default
    /// ([`Settings::from_env_or_defaults`]).
    pub fn from_env() -> Tracer {
        Tracer::from_settings(&Settings::from_env_or_defaults())
    }

    /// The trace configuration of `settings`.
    pub fn from_settings(settings: &Settings) -> Tracer {
        Tracer {
            level: settings.debug,
            init: settings.subsystems.init,
            coll: settings.subsystems.coll,
            sink: match &settings.debug_file {
                Some(p) => Sink::File(p.clone()),
                None => Sink::Stderr,
            },
        }
    }

    /// Every INFO and WARN line into a shared buffer.
    pub fn memory() -> (Tracer, TraceBuffer) {
        let buf = TraceBuffer::default();
        (
            Tracer {
                level: Level::Info,
                init: true,
                coll: true,
                sink: Sink::Memory(buf.clone()),
            },
            buf,
        )
    }

    pub fn is_on(&self) -> bool {
        self.level > Level::Off
    }

    /// The tracer of one rank: resolves the file and the line prefix.
    pub fn for_rank(&self, rank: usize) -> RankTracer {
        let out = if self.level == Level::Off {
            Out::None
        } else {
            match &self.sink {
                Sink::Stderr => Out::Stderr,
                Sink::Memory(b) => Out::Memory(b.clone()),
                Sink::File(pattern) => match open_shared(&expand(pattern, rank)) {
                    Some(f) => Out::File(f),
                    None => Out::Stderr,
                },
            }
        };
        RankTracer {
            cfg: self.clone(),
            out,
            host: host().to_string(),
            pid: std::process::id(),
            rank,
        }
    }
}

fn expand(pattern: &str, rank: usize) -> String {
    pattern
        .replace("%h", host())
        .replace("%p", &std::process::id().to_string())
        .replace("%r", &rank.to_string())
}

/// A trace file, shared by the ranks that trace into the same path.
struct TraceFile {
    path: String,
    /// `None` once a write failed: the later lines are dropped.
    file: Mutex<Option<File>>,
}

impl TraceFile {
    /// Appends one line. The first failed write is said on stderr and ends
    /// the file's trace; nothing is said for the lines after it.
    fn write_line(&self, line: &str) {
        let mut file = self.file.lock().unwrap_or_else(|p| p.into_inner());
        let Some(f) = file.as_mut() else { return };
        if let Err(e) = writeln!(f, "{line}") {
            *file = None;
            say(&format!(
                "rankwise: trace file {}: write failed: {e} (later trace lines are lost)",
                self.path
            ));
        }
    }
}

/// One handle per path, so ranks tracing into the same file share it; a
/// path that cannot be opened is said once and then traced to stderr.
fn open_shared(path: &str) -> Option<Arc<TraceFile>> {
    static FILES: OnceLock<Mutex<HashMap<String, Option<Arc<TraceFile>>>>> = OnceLock::new();
    let mut files = FILES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(f) = files.get(path) {
        return f.clone();
    }
    let f = match File::options().create(true).append(true).open(path) {
        Ok(file) => Some(Arc::new(TraceFile {
            path: path.to_string(),
            file: Mutex::new(Some(file)),
        })),
        Err(e) => {
            say(&format!(
                "rankwise: cannot open RANKWISE_DEBUG_FILE {path}: {e}; tracing to stderr"
            ));
            None
        }
    };
    files.insert(path.to_string(), f.clone());
    f
}

/// One line on stderr; a closed or full stderr loses it rather than
/// panicking a rank (`eprintln!` would).
fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn host() -> &'static str {
    static HOST: OnceLock<String> = OnceLock::new();
    HOST.get_or_init(|| {
        std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|s| s.trim().to_string())
            .unwrap_or_else(|_| "localhost".to_string())
    })
}

fn tid() -> u32 {
    // SAFETY: gettid has no preconditions and cannot fail.
    unsafe { libc::gettid() as u32 }
}

enum Out {
    None,
    Stderr,
    File(Arc<TraceFile>),
    Memory(TraceBuffer),
}

/// A rank's view of the tracer.
pub struct RankTracer {
    cfg: Tracer,
    out: Out,
    host: String,
    pid: u32,
    rank: usize,
}

impl RankTracer {
    /// The configuration this tracer was made from.
    pub fn config(&self) -> &Tracer {
        &self.cfg
    }
    fn emit(&self, line: String) {
        match &self.out {
            Out::None => {}
            Out::Stderr => say(&line),
            Out::File(f) => f.write_line(&line),
            Out::Memory(b) => b.lock().unwrap_or_else(|p| p.into_inner()).push(line),
        }
    }
    fn prefix(&self) -> LinePrefix<'_> {
        LinePrefix {
            host: &self.host,
            pid: self.pid,
            tid: tid(),
            dev: self.rank,
        }
    }
    pub fn coll_enabled(&self) -> bool {
        self.cfg.level >= Level::Info && self.cfg.coll
    }
    pub fn coll(&self, call: &RawCall, op_count: u64, comm: usize, nranks: usize) {
        if self.coll_enabled() {
            self.emit(coll_line(&self.prefix(), call, op_count, comm, nranks));
        }
    }
    pub fn init(&self, comm: usize, nranks: usize, comm_id: u64) {
        if self.cfg.level >= Level::Info && self.cfg.init {
            self.emit(init_line(&self.prefix(), comm, self.rank, nranks, comm_id));
        }
    }
    pub fn warn(&self, message: &str) {
        if self.cfg.level >= Level::Warn {
            self.emit(warn_line(&self.prefix(), message));
        }
    }
    /// An INFO line about a communicator's set-up (subsystem INIT).
    pub fn init_info(&self, message: &str) {
        if self.cfg.level >= Level::Info && self.cfg.init {
            self.emit(info_line(&self.prefix(), message));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_write_ends_the_file_once() {
        let f = TraceFile {
            path: "/dev/full".into(),
            file: Mutex::new(Some(
                File::options().append(true).open("/dev/full").unwrap(),
            )),
        };
        f.write_line("first");
        assert!(
            f.file.lock().unwrap().is_none(),
            "the failed write ends the trace"
        );
        f.write_line("second");
        assert!(f.file.lock().unwrap().is_none());
    }

    #[test]
    fn file_pattern_expands_rank_and_pid() {
        let p = expand("/tmp/x.%r.%p.log", 3);
        assert_eq!(p, format!("/tmp/x.3.{}.log", std::process::id()));
    }
}
