//! The tracer: where NCCL-format lines go. `RANKWISE_DEBUG` (`WARN` or
//! `INFO`), `RANKWISE_DEBUG_SUBSYS` (comma list of `INIT`, `COLL`, `ALL`;
//! a leading `^` excludes; default all) and `RANKWISE_DEBUG_FILE` (`%h` host,
//! `%p` pid, `%r` rank) behave like their NCCL_ counterparts. Tests capture
//! lines in memory with [`Tracer::memory`].

use crate::core::RawCall;
use crate::core::trace::{LinePrefix, coll_line, init_line, warn_line};
use std::collections::HashMap;
use std::fs::File;
use std::io::Write;
use std::sync::{Arc, Mutex, OnceLock};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Level {
    Off,
    Warn,
    Info,
}

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

    /// Configuration from `RANKWISE_DEBUG`, `RANKWISE_DEBUG_SUBSYS`, `RANKWISE_DEBUG_FILE`.
    pub fn from_env() -> Tracer {
        let level = match std::env::var("RANKWISE_DEBUG")
            .unwrap_or_default()
            .to_ascii_uppercase()
            .as_str()
        {
            "INFO" | "TRACE" => Level::Info,
            "WARN" | "VERSION" => Level::Warn,
            _ => Level::Off,
        };
        let (init, coll) =
            parse_subsys(&std::env::var("RANKWISE_DEBUG_SUBSYS").unwrap_or_default());
        let sink = match std::env::var("RANKWISE_DEBUG_FILE") {
            Ok(p) if !p.is_empty() => Sink::File(p),
            _ => Sink::Stderr,
        };
        Tracer {
            level,
            init,
            coll,
            sink,
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
                    Ok(f) => Out::File(f),
                    Err(e) => {
                        eprintln!(
                            "rankwise: cannot open RANKWISE_DEBUG_FILE {pattern}: {e}; tracing to stderr"
                        );
                        Out::Stderr
                    }
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

fn parse_subsys(s: &str) -> (bool, bool) {
    if s.trim().is_empty() {
        return (true, true);
    }
    let (exclude, list) = match s.strip_prefix('^') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let mut init = false;
    let mut coll = false;
    for item in list.split(',').map(|t| t.trim().to_ascii_uppercase()) {
        match item.as_str() {
            "ALL" => (init, coll) = (true, true),
            "INIT" => init = true,
            "COLL" | "P2P" => coll = true,
            _ => {}
        }
    }
    if exclude {
        (!init, !coll)
    } else {
        (init, coll)
    }
}

fn expand(pattern: &str, rank: usize) -> String {
    pattern
        .replace("%h", host())
        .replace("%p", &std::process::id().to_string())
        .replace("%r", &rank.to_string())
}

/// One handle per path, so ranks tracing into the same file share it.
fn open_shared(path: &str) -> std::io::Result<Arc<Mutex<File>>> {
    static FILES: OnceLock<Mutex<HashMap<String, Arc<Mutex<File>>>>> = OnceLock::new();
    let mut files = FILES
        .get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner());
    if let Some(f) = files.get(path) {
        return Ok(f.clone());
    }
    let f = Arc::new(Mutex::new(
        File::options().create(true).append(true).open(path)?,
    ));
    files.insert(path.to_string(), f.clone());
    Ok(f)
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
    File(Arc<Mutex<File>>),
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
    fn emit(&self, line: String) {
        match &self.out {
            Out::None => {}
            Out::Stderr => eprintln!("{line}"),
            Out::File(f) => {
                let mut f = f.lock().unwrap_or_else(|p| p.into_inner());
                let _ = writeln!(f, "{line}");
            }
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
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subsys_lists() {
        assert_eq!(parse_subsys(""), (true, true));
        assert_eq!(parse_subsys("COLL"), (false, true));
        assert_eq!(parse_subsys("INIT,COLL"), (true, true));
        assert_eq!(parse_subsys("^COLL"), (true, false));
        assert_eq!(parse_subsys("ALL"), (true, true));
    }

    #[test]
    fn file_pattern_expands_rank_and_pid() {
        let p = expand("/tmp/x.%r.%p.log", 3);
        assert_eq!(p, format!("/tmp/x.3.{}.log", std::process::id()));
    }
}
