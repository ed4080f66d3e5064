//! Files → per-process call streams.
//!
//! Input files (plain or gzip, any mix of ranks, interleaved or not) are cut
//! into segments: a plain file larger than `segment_bytes` is split at byte
//! offsets, and each segment owns the lines that *start* inside it, so the
//! segments partition the lines exactly. Segments are parsed in parallel
//! threads; each builds its own streams, keyed by (host, pid, comm pointer),
//! and the results are merged in file and segment order, so the outcome does
//! not depend on how the work was split.
//!
//! A stream is one process's view of one communicator: its calls in order,
//! compactly (an interned call signature, the opCount, the line), plus what
//! its init lines said. Memory grows with the number of calls kept (16 bytes
//! each), never with the size of the text: lines are read into one reused
//! buffer and parsed in place; a line over [`LineSplitter::MAX_LINE`] bytes
//! is skipped, and its length and place reported.

use super::parse::{Body, Broken, Head, InitPhase, Line, Parser, WarnKind};
use crate::core::Func;
use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A small, fast hasher for the integer keys of the hot path.
#[derive(Default, Clone, Copy)]
pub struct FxHasher(u64);

impl Hasher for FxHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for chunk in bytes.chunks(8) {
            let mut v = [0u8; 8];
            v[..chunk.len()].copy_from_slice(chunk);
            self.write_u64(u64::from_le_bytes(v));
        }
    }
    #[inline]
    fn write_u8(&mut self, i: u8) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_i32(&mut self, i: i32) {
        self.write_u64(i as u32 as u64);
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
    #[inline]
    fn write_usize(&mut self, i: usize) {
        self.write_u64(i as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

pub type FxMap<K, V> = HashMap<K, V, BuildHasherDefault<FxHasher>>;

/// What a call's COLL line says, minus pointers and opCount: the part every
/// rank must agree on (and, for Send/Recv, the peer).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Sig {
    pub op: Func,
    pub count: u64,
    pub datatype: i32,
    pub redop: i32,
    pub root: i32,
}

/// One call as kept in memory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CallRec {
    /// Index into [`Collected::sigs`].
    pub sig: u32,
    /// 1-based line in its file (saturates at `u32::MAX`).
    pub line: u32,
    /// The opCount NCCL printed, or `u64::MAX` when the line had none.
    pub op_count: u64,
}

/// A place in the input: file index into [`Collected::files`] and 1-based line.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Loc {
    pub file: u32,
    pub line: u64,
}

impl Loc {
    /// Line `line` of a segment, before the merge gives it its file and offset.
    fn at(line: u32) -> Loc {
        Loc {
            file: 0,
            line: u64::from(line),
        }
    }
}

/// What a process said about one comm pointer (one epoch of it: a pointer
/// reused after `Destroy COMPLETE` starts a new stream).
#[derive(Clone, Debug, Default)]
pub struct Stream {
    pub host: u32,
    pub pid: u32,
    pub comm: u64,
    pub epoch: u32,
    pub calls: Vec<CallRec>,
    /// `(file, first call index)` runs: which file each call came from.
    pub file_runs: Vec<(u32, u32)>,
    /// The rank its init lines state (the first one stated), and where.
    pub rank: Option<u32>,
    pub rank_at: Loc,
    /// nranks as its init lines state it (the first one stated), and where.
    pub nranks_init: Option<u32>,
    pub nranks_init_at: Loc,
    /// nranks as its COLL lines state it (`[nranks=N]`, the first one), and where.
    pub nranks_coll: Option<u32>,
    pub nranks_coll_at: Loc,
    /// A later line of the stream that states a different nranks than the
    /// first line of its kind: (value, where, stated by an init line).
    pub nranks_other: Option<(u32, Loc, bool)>,
    pub comm_id: Option<u64>,
    pub parent: Option<u64>,
    pub color: Option<i64>,
    pub split_count: Option<u32>,
    pub init_complete: bool,
    pub dev: Option<u32>,
    pub prefix_rank: Option<u32>,
    pub prefix_local: Option<u32>,
    pub first: Loc,
    pub last: Loc,
    /// Where `Destroy COMPLETE` / `Abort COMPLETE` was logged.
    pub ended: Option<(InitPhase, Loc)>,
}

impl Stream {
    /// The file and line of call `i`.
    pub fn loc(&self, i: usize) -> Loc {
        let run = self
            .file_runs
            .partition_point(|&(_, start)| start as usize <= i);
        let file = self.file_runs[run.saturating_sub(1)].0;
        Loc {
            file,
            line: u64::from(self.calls[i].line),
        }
    }

    pub fn nranks(&self) -> Option<u32> {
        self.nranks_init.or(self.nranks_coll)
    }
}

/// An NCCL WARN line.
#[derive(Clone, Debug)]
pub struct WarnRec {
    pub host: u32,
    pub pid: u32,
    pub dev: Option<u32>,
    pub loc: Loc,
    pub op: Option<Func>,
    pub kind: WarnKind,
    pub text: String,
}

/// Line counts, by what the parser made of them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize)]
pub struct Counts {
    pub lines: u64,
    pub nccl_lines: u64,
    pub calls: u64,
    pub init_lines: u64,
    pub warn_lines: u64,
    /// NCCL lines that carry nothing the analyzer uses (topology, channels, …).
    pub other_nccl_lines: u64,
    /// Lines that are not NCCL's (application output, blank lines).
    pub not_nccl_lines: u64,
    /// NCCL COLL/init lines with a required field missing or unreadable.
    pub malformed_lines: u64,
    /// Of those, COLL lines: calls that could not be read.
    pub malformed_calls: u64,
    /// Lines over [`LineSplitter::MAX_LINE`] bytes: skipped, not read.
    pub long_lines: u64,
    /// Calls skipped because another file had already logged them.
    pub repeated_calls: u64,
}

impl Counts {
    fn add(&mut self, o: &Counts) {
        self.lines += o.lines;
        self.nccl_lines += o.nccl_lines;
        self.calls += o.calls;
        self.init_lines += o.init_lines;
        self.warn_lines += o.warn_lines;
        self.other_nccl_lines += o.other_nccl_lines;
        self.not_nccl_lines += o.not_nccl_lines;
        self.malformed_lines += o.malformed_lines;
        self.malformed_calls += o.malformed_calls;
        self.long_lines += o.long_lines;
        self.repeated_calls += o.repeated_calls;
    }
}

#[derive(Clone, Debug, serde::Serialize)]
pub struct FileInfo {
    pub path: String,
    pub bytes: u64,
    pub gzip: bool,
    pub lines: u64,
    /// A problem met while reading (a truncated gzip stream, an I/O error);
    /// the lines before it were used.
    pub note: Option<String>,
    /// Other paths given for this same file (the same path twice, a link
    /// to it, a directory holding it): the file is read once.
    pub also_given_as: Vec<String>,
    /// Lines over [`LineSplitter::MAX_LINE`] bytes, skipped.
    pub long_lines: u64,
    /// The first of them: `(line, length in bytes)`.
    pub first_long_line: Option<(u64, u64)>,
}

/// What makes two paths one file: its device and inode.
#[cfg(unix)]
fn file_id(meta: &std::fs::Metadata, _path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Ok((meta.dev(), meta.ino()))
}

/// What makes two paths one file: where it resolves to.
#[cfg(not(unix))]
fn file_id(_meta: &std::fs::Metadata, path: &Path) -> io::Result<PathBuf> {
    path.canonicalize()
}

/// Everything read from the input.
#[derive(Debug, Default)]
pub struct Collected {
    pub files: Vec<FileInfo>,
    pub hosts: Vec<String>,
    pub sigs: Vec<Sig>,
    pub streams: Vec<Stream>,
    pub warnings: Vec<WarnRec>,
    pub counts: Counts,
    /// Calls of a process that a later file repeats (the same run logged
    /// twice, e.g. a per-rank file and a console copy): the repeat is skipped.
    pub repeats: Vec<String>,
    /// `(file, host, pid)`: a process whose calls in that file repeat what
    /// an earlier file holds; its WARN lines there are repeats too.
    pub repeated_procs: Vec<(u32, u32, u32)>,
    /// The first COLL line that could not be read.
    pub first_malformed_call: Option<BadLine>,
}

/// A line that could not be read, as reported.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BadLine {
    pub loc: Loc,
    /// Which field was wrong, with what, and what was expected.
    pub why: String,
    /// The line, cut to [`SHOWN_TEXT`] bytes.
    pub text: String,
}

/// The most bytes of a line quoted in a report.
pub const SHOWN_TEXT: usize = 200;

/// A line's text as quoted in a report: lossy UTF-8, cut to [`SHOWN_TEXT`] bytes.
fn quoted(line: &[u8]) -> String {
    let line = &line[..line.len().min(SHOWN_TEXT + 1)];
    match line.len() > SHOWN_TEXT {
        true => format!("{}…", String::from_utf8_lossy(&line[..SHOWN_TEXT])),
        false => String::from_utf8_lossy(line).into_owned(),
    }
}

#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Worker threads (0: one per available core).
    pub threads: usize,
    /// Plain files larger than this are split into segments parsed in parallel.
    pub segment_bytes: u64,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            segment_bytes: 64 << 20,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read '{path}': {source}")]
    Unreadable { path: String, source: io::Error },
    #[error("no log files found in {0}")]
    NoFiles(String),
}

/// Files named on the command line: files as given, directories walked
/// recursively in name order (hidden entries skipped).
pub fn expand_paths(paths: &[PathBuf]) -> Result<Vec<PathBuf>, InputError> {
    let mut out = Vec::new();
    for p in paths {
        let meta = std::fs::metadata(p).map_err(|e| InputError::Unreadable {
            path: p.display().to_string(),
            source: e,
        })?;
        if meta.is_dir() {
            let before = out.len();
            walk(p, &mut out)?;
            if out.len() == before {
                return Err(InputError::NoFiles(p.display().to_string()));
            }
        } else {
            out.push(p.clone());
        }
    }
    Ok(out)
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> Result<(), InputError> {
    let err = |e| InputError::Unreadable {
        path: dir.display().to_string(),
        source: e,
    };
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .map_err(err)?
        .collect::<Result<Vec<_>, _>>()
        .map_err(err)?;
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        if e.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let path = e.path();
        let ft = e.file_type().map_err(err)?;
        if ft.is_dir() {
            walk(&path, out)?;
        } else if ft.is_file() || (ft.is_symlink() && path.is_file()) {
            out.push(path);
        }
    }
    Ok(())
}

struct Segment {
    file: u32,
    start: u64,
    end: u64,
}

/// Read and parse all files.
pub fn collect(files: &[PathBuf], opts: Options) -> Result<Collected, InputError> {
    let mut infos: Vec<FileInfo> = Vec::with_capacity(files.len());
    // A file named twice is read once: its lines would otherwise be
    // reported twice (every WARN line, say).
    let mut kept: Vec<&PathBuf> = Vec::with_capacity(files.len());
    let mut ids = HashMap::new();
    let mut segments = Vec::new();
    for path in files {
        let unreadable = |e| InputError::Unreadable {
            path: path.display().to_string(),
            source: e,
        };
        let mut f = File::open(path).map_err(unreadable)?;
        let meta = f.metadata().map_err(unreadable)?;
        let id = file_id(&meta, path).map_err(unreadable)?;
        if let Some(&k) = ids.get(&id) {
            let info: &mut FileInfo = &mut infos[k];
            info.also_given_as.push(path.display().to_string());
            continue;
        }
        let i = kept.len();
        ids.insert(id, i);
        kept.push(path);
        let bytes = meta.len();
        let mut magic = [0u8; 2];
        let gzip = f.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
        infos.push(FileInfo {
            path: path.display().to_string(),
            bytes,
            gzip,
            lines: 0,
            note: None,
            also_given_as: Vec::new(),
            long_lines: 0,
            first_long_line: None,
        });
        let seg = opts.segment_bytes.max(1);
        if gzip || bytes <= seg {
            segments.push(Segment {
                file: i as u32,
                start: 0,
                end: u64::MAX,
            });
        } else {
            let mut s = 0;
            while s < bytes {
                let e = if bytes - s > seg { s + seg } else { u64::MAX };
                segments.push(Segment {
                    file: i as u32,
                    start: s,
                    end: e,
                });
                s = s.saturating_add(seg);
            }
        }
    }

    let threads = match opts.threads {
        0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
        n => n,
    }
    .min(segments.len())
    .max(1);
    let results: Vec<Mutex<Option<SegResult>>> =
        segments.iter().map(|_| Mutex::new(None)).collect();
    let next = AtomicUsize::new(0);
    // Results are merged in segment order as soon as they are ready, so
    // only the segments in flight are held apart from the merged whole.
    let merger = Mutex::new((Merger::new(infos), 0usize));
    fn lock(m: &Mutex<Option<SegResult>>) -> std::sync::MutexGuard<'_, Option<SegResult>> {
        m.lock().unwrap_or_else(|p| p.into_inner())
    }
    let work = || {
        let mut splitter = LineSplitter::new();
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(seg) = segments.get(i) else { break };
            let r = read_segment(kept[seg.file as usize], seg, &mut splitter);
            *lock(&results[i]) = Some(r);
            let mut guard = merger.lock().unwrap_or_else(|p| p.into_inner());
            let (m, done) = &mut *guard;
            while *done < segments.len() {
                let Some(r) = lock(&results[*done]).take() else {
                    break;
                };
                m.add(segments[*done].file, r);
                *done += 1;
            }
        }
    };
    if threads == 1 {
        work();
    } else {
        std::thread::scope(|s| {
            for _ in 0..threads {
                s.spawn(work);
            }
        });
    }
    let (merger, done) = merger.into_inner().unwrap_or_else(|p| p.into_inner());
    debug_assert_eq!(done, segments.len());
    Ok(merger.finish())
}

/// Parse text already in memory (tests, fuzzing): one file named `name`.
pub fn collect_bytes(name: &str, text: &[u8]) -> Collected {
    let mut st = SegState::new();
    let mut splitter = LineSplitter::new();
    let _ = splitter.run(text, false, u64::MAX, |p| st.on_piece(p));
    let mut m = Merger::new(vec![FileInfo {
        path: name.to_string(),
        bytes: text.len() as u64,
        gzip: false,
        lines: 0,
        note: None,
        also_given_as: Vec::new(),
        long_lines: 0,
        first_long_line: None,
    }]);
    m.add(0, SegResult { st, note: None });
    m.finish()
}

struct SegResult {
    st: SegState,
    note: Option<String>,
}

fn read_segment(path: &Path, seg: &Segment, splitter: &mut LineSplitter) -> SegResult {
    let mut st = SegState::new();
    let note = (|| -> io::Result<()> {
        let mut f = File::open(path)?;
        let mut magic = [0u8; 2];
        let gzip = f.read_exact(&mut magic).is_ok() && magic == [0x1f, 0x8b];
        f.seek(SeekFrom::Start(seg.start.saturating_sub(1)))?;
        if gzip {
            let gz = flate2::read::MultiGzDecoder::new(io::BufReader::with_capacity(1 << 16, f));
            splitter.run(gz, false, u64::MAX, |p| st.on_piece(p))
        } else {
            let budget = seg.end.saturating_sub(seg.start.saturating_sub(1));
            splitter.run(f, seg.start > 0, budget, |p| st.on_piece(p))
        }
    })()
    .err()
    .map(|e| match e.kind() {
        io::ErrorKind::UnexpectedEof => {
            "truncated gzip stream: lines before the cut were used".to_string()
        }
        _ => format!("read error, lines before it were used: {e}"),
    });
    SegResult { st, note }
}

/// Splits a byte stream into lines with one reused buffer.
pub struct LineSplitter {
    buf: Vec<u8>,
}

impl Default for LineSplitter {
    fn default() -> Self {
        Self::new()
    }
}

impl LineSplitter {
    /// Longest line read, in bytes (without its `\n`): a longer line is
    /// reported with its length and skipped, never held whole.
    pub const MAX_LINE: usize = 1 << 20;

    pub fn new() -> Self {
        LineSplitter {
            // one byte more than a line, so a full buffer without a `\n`
            // is a line over the bound
            buf: vec![0; Self::MAX_LINE + 1],
        }
    }

    /// Call `on` for every line that starts before byte `budget` of `r`:
    /// its text without the `\n`, or for a line over [`Self::MAX_LINE`],
    /// its length (read through to its end, whatever the budget). With
    /// `skip_first`, the text up to and including the first `\n` is not a
    /// line of this reader.
    pub fn run<R: Read>(
        &mut self,
        mut r: R,
        skip_first: bool,
        budget: u64,
        mut on: impl FnMut(Piece<'_>),
    ) -> io::Result<()> {
        let buf = &mut self.buf;
        let (mut start, mut filled) = (0usize, 0usize);
        let mut consumed: u64 = 0; // stream offset of buf[0]
        let mut skip = if skip_first { Skip::Foreign } else { Skip::No };
        loop {
            while let Some(nl) = memchr::memchr(b'\n', &buf[start..filled]) {
                match skip {
                    Skip::No => {
                        if consumed + start as u64 >= budget {
                            return Ok(());
                        }
                        on(Piece::Line(&buf[start..start + nl]));
                    }
                    Skip::Foreign => skip = Skip::No,
                    Skip::Long(n) => {
                        on(Piece::Long(n + nl as u64));
                        skip = Skip::No;
                    }
                }
                start += nl + 1;
            }
            match skip {
                // The rest starts a line at or past the budget: the next reader's.
                Skip::No | Skip::Foreign if consumed + start as u64 >= budget => return Ok(()),
                Skip::No => {
                    buf.copy_within(start..filled, 0);
                    consumed += start as u64;
                    filled -= start;
                    if filled == buf.len() {
                        // No `\n` in a full buffer: a line over the bound.
                        skip = Skip::Long(filled as u64);
                        consumed += filled as u64;
                        filled = 0;
                    }
                }
                // Inside a line not delivered: what is left of the buffer is all of it.
                Skip::Foreign | Skip::Long(_) => {
                    let rest = (filled - start) as u64;
                    if let Skip::Long(n) = &mut skip {
                        *n += rest;
                    }
                    consumed += filled as u64;
                    filled = 0;
                }
            }
            start = 0;
            let n = loop {
                match r.read(&mut buf[filled..]) {
                    Ok(n) => break n,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        Self::last(skip, &buf[..filled], &mut on);
                        return Err(e);
                    }
                }
            };
            if n == 0 {
                Self::last(skip, &buf[..filled], &mut on);
                return Ok(());
            }
            filled += n;
        }
    }

    /// The last line, which has no `\n`.
    fn last(skip: Skip, rest: &[u8], on: &mut impl FnMut(Piece<'_>)) {
        match skip {
            Skip::No if !rest.is_empty() => on(Piece::Line(rest)),
            Skip::Long(n) => on(Piece::Long(n + rest.len() as u64)),
            _ => {}
        }
    }
}

/// What [`LineSplitter::run`] delivers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Piece<'a> {
    /// A line, without its `\n`.
    Line(&'a [u8]),
    /// A line over [`LineSplitter::MAX_LINE`]: its length in bytes.
    Long(u64),
}

/// Whether the splitter is inside a line it does not deliver.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Skip {
    No,
    /// The line the previous reader owns.
    Foreign,
    /// A line over the bound, and its bytes so far.
    Long(u64),
}

type StreamKey = (u32, u32, u64);

/// WARN lines kept per segment (the rest are only counted).
const MAX_WARNINGS: usize = 1000;

/// Parse state of one segment.
struct SegState {
    parser: Parser,
    host_ids: HashMap<Box<[u8]>, u32>,
    hosts: Vec<Box<[u8]>>,
    /// The host of the previous line (most lines repeat it).
    last_host: Option<u32>,
    sig_ids: FxMap<Sig, u32>,
    sigs: Vec<Sig>,
    streams: Vec<Stream>,
    current: FxMap<StreamKey, usize>,
    /// Epoch bumps per key (pointer reuse after a destroy).
    bumps: FxMap<StreamKey, u32>,
    warnings: Vec<WarnRec>,
    counts: Counts,
    /// The segment's first malformed COLL line.
    first_malformed_call: Option<BadLine>,
    /// The segment's first line over the bound: (line, length).
    first_long_line: Option<(u64, u64)>,
}

impl SegState {
    fn new() -> Self {
        SegState {
            parser: Parser::new(),
            host_ids: HashMap::new(),
            hosts: Vec::new(),
            last_host: None,
            sig_ids: FxMap::default(),
            sigs: Vec::new(),
            streams: Vec::new(),
            current: FxMap::default(),
            bumps: FxMap::default(),
            warnings: Vec::new(),
            counts: Counts::default(),
            first_malformed_call: None,
            first_long_line: None,
        }
    }

    fn host_id(&mut self, host: &[u8]) -> u32 {
        if let Some(id) = self.last_host
            && &*self.hosts[id as usize] == host
        {
            return id;
        }
        let id = match self.host_ids.get(host) {
            Some(&id) => id,
            None => {
                let id = self.hosts.len() as u32;
                self.hosts.push(host.into());
                self.host_ids.insert(host.into(), id);
                id
            }
        };
        self.last_host = Some(id);
        id
    }

    fn stream(&mut self, head: &Head<'_>, comm: u64, line: u32) -> usize {
        let host = self.host_id(head.host);
        let key = (host, head.pid, comm);
        let idx = match self.current.get(&key) {
            Some(&i) => i,
            None => self.new_stream(key, line),
        };
        let s = &mut self.streams[idx];
        if s.dev.is_none() {
            s.dev = head.dev;
        }
        if head.prefix_rank.is_some() {
            s.prefix_rank = head.prefix_rank;
        }
        if head.prefix_local.is_some() {
            s.prefix_local = head.prefix_local;
        }
        s.last.line = u64::from(line);
        idx
    }

    fn new_stream(&mut self, key: StreamKey, line: u32) -> usize {
        let idx = self.streams.len();
        self.streams.push(Stream {
            host: key.0,
            pid: key.1,
            comm: key.2,
            epoch: self.bumps.get(&key).copied().unwrap_or(0),
            first: Loc {
                file: 0,
                line: u64::from(line),
            },
            ..Stream::default()
        });
        self.current.insert(key, idx);
        idx
    }

    fn bump(&mut self, idx: usize) {
        let s = &self.streams[idx];
        let key = (s.host, s.pid, s.comm);
        *self.bumps.entry(key).or_insert(0) += 1;
        self.current.remove(&key);
    }

    fn on_piece(&mut self, p: Piece<'_>) {
        match p {
            Piece::Line(l) => self.on_line(l),
            Piece::Long(len) => {
                self.counts.lines += 1;
                self.counts.long_lines += 1;
                if self.first_long_line.is_none() {
                    self.first_long_line = Some((self.counts.lines, len));
                }
            }
        }
    }

    fn on_line(&mut self, raw: &[u8]) {
        self.counts.lines += 1;
        let line = u32::try_from(self.counts.lines).unwrap_or(u32::MAX);
        match self.parser.parse(raw) {
            Line::NotNccl => self.counts.not_nccl_lines += 1,
            Line::Malformed(what) => {
                self.counts.nccl_lines += 1;
                self.counts.malformed_lines += 1;
                if let Broken::Call(bad) = what {
                    self.counts.malformed_calls += 1;
                    if self.first_malformed_call.is_none() {
                        self.first_malformed_call = Some(BadLine {
                            loc: Loc::at(line),
                            why: bad.describe(),
                            text: quoted(raw),
                        });
                    }
                }
            }
            Line::Nccl(head, body) => {
                self.counts.nccl_lines += 1;
                match body {
                    Body::Coll(c) => {
                        self.counts.calls += 1;
                        let sig = Sig {
                            op: c.op,
                            count: c.count,
                            datatype: c.datatype,
                            redop: c.redop,
                            root: c.root,
                        };
                        let next = self.sigs.len() as u32;
                        let sig = *self.sig_ids.entry(sig).or_insert_with(|| {
                            self.sigs.push(sig);
                            next
                        });
                        let idx = self.stream(&head, c.comm, line);
                        let s = &mut self.streams[idx];
                        if let Some(n) = c.nranks {
                            match s.nranks_coll {
                                None => {
                                    s.nranks_coll = Some(n);
                                    s.nranks_coll_at = Loc::at(line);
                                }
                                Some(m) if m != n && s.nranks_other.is_none() => {
                                    s.nranks_other = Some((n, Loc::at(line), false));
                                }
                                Some(_) => {}
                            }
                        }
                        s.calls.push(CallRec {
                            sig,
                            line,
                            op_count: c.op_count.unwrap_or(u64::MAX),
                        });
                    }
                    Body::Init(i) => {
                        self.counts.init_lines += 1;
                        let mut idx = self.stream(&head, i.comm, line);
                        let fresh_init = matches!(i.phase, InitPhase::Start)
                            || (matches!(i.phase, InitPhase::Complete)
                                && !self.streams[idx].init_complete);
                        if fresh_init && !self.streams[idx].calls.is_empty() {
                            // A new communicator at a reused address.
                            self.bump(idx);
                            idx = self.stream(&head, i.comm, line);
                        }
                        let s = &mut self.streams[idx];
                        let here = Loc::at(line);
                        if s.rank.is_none() && i.rank.is_some() {
                            s.rank = i.rank;
                            s.rank_at = here;
                        }
                        if let Some(n) = i.nranks {
                            match s.nranks_init {
                                None => {
                                    s.nranks_init = Some(n);
                                    s.nranks_init_at = here;
                                }
                                Some(m) if m != n && s.nranks_other.is_none() => {
                                    s.nranks_other = Some((n, here, true));
                                }
                                Some(_) => {}
                            }
                        }
                        s.comm_id = i.comm_id.or(s.comm_id);
                        s.parent = i.parent.or(s.parent);
                        s.color = i.color.or(s.color);
                        s.split_count = i.split_count.or(s.split_count);
                        match i.phase {
                            InitPhase::Complete => s.init_complete = true,
                            InitPhase::Destroy | InitPhase::Abort => {
                                s.ended = Some((
                                    i.phase,
                                    Loc {
                                        file: 0,
                                        line: u64::from(line),
                                    },
                                ));
                                self.bump(idx);
                            }
                            InitPhase::Start | InitPhase::Topology => {}
                        }
                    }
                    Body::Warn(w) => {
                        self.counts.warn_lines += 1;
                        if self.warnings.len() >= MAX_WARNINGS {
                            return; // counted, not kept: a WARN flood must not grow memory
                        }
                        let host = self.host_id(head.host);
                        let text = String::from_utf8_lossy(&w.text[..w.text.len().min(300)]);
                        self.warnings.push(WarnRec {
                            host,
                            pid: head.pid,
                            dev: head.dev,
                            loc: Loc {
                                file: 0,
                                line: u64::from(line),
                            },
                            op: w.op,
                            kind: w.kind,
                            text: text.into_owned(),
                        });
                    }
                    Body::Other => self.counts.other_nccl_lines += 1,
                }
            }
        }
    }
}

/// Folds segment results, in order, into one [`Collected`].
struct Merger {
    out: Collected,
    host_ids: HashMap<Box<[u8]>, u32>,
    sig_ids: FxMap<Sig, u32>,
    /// (host, pid, comm, epoch) → global stream index.
    index: FxMap<(u32, u32, u64, u32), usize>,
    /// Epoch base per (host, pid, comm): bumps seen in earlier segments.
    base: FxMap<StreamKey, u32>,
    /// Lines already delivered per file (the line offset of the next segment).
    file_lines: Vec<u64>,
    /// (file, global stream) pairs whose calls repeat an earlier file's.
    repeated: std::collections::HashSet<(u32, usize)>,
}

impl Merger {
    fn new(files: Vec<FileInfo>) -> Self {
        let n = files.len();
        Merger {
            out: Collected {
                files,
                ..Collected::default()
            },
            host_ids: HashMap::new(),
            sig_ids: FxMap::default(),
            index: FxMap::default(),
            base: FxMap::default(),
            file_lines: vec![0; n],
            repeated: std::collections::HashSet::new(),
        }
    }

    fn add(&mut self, file: u32, r: SegResult) {
        let SegResult { st, note } = r;
        let f = file as usize;
        let offset = self.file_lines[f];
        self.file_lines[f] += st.counts.lines;
        self.out.files[f].lines += st.counts.lines;
        if note.is_some() && self.out.files[f].note.is_none() {
            self.out.files[f].note = note;
        }
        let info = &mut self.out.files[f];
        info.long_lines += st.counts.long_lines;
        if info.first_long_line.is_none() {
            info.first_long_line = st.first_long_line.map(|(line, len)| (line + offset, len));
        }
        self.out.counts.add(&st.counts);
        let loc = |line: u64| Loc {
            file,
            line: line + offset,
        };

        let hosts: Vec<u32> = st
            .hosts
            .iter()
            .map(|h| match self.host_ids.get(h) {
                Some(&id) => id,
                None => {
                    let id = self.out.hosts.len() as u32;
                    self.out.hosts.push(String::from_utf8_lossy(h).into_owned());
                    self.host_ids.insert(h.clone(), id);
                    id
                }
            })
            .collect();
        let sigs: Vec<u32> = st
            .sigs
            .iter()
            .map(|s| {
                let next = self.out.sigs.len() as u32;
                *self.sig_ids.entry(*s).or_insert_with(|| {
                    self.out.sigs.push(*s);
                    next
                })
            })
            .collect();
        let line32 = |l: u32| -> u32 { u32::try_from(u64::from(l) + offset).unwrap_or(u32::MAX) };

        for mut s in st.streams {
            let host = hosts[s.host as usize];
            let key = (host, s.pid, s.comm);
            let epoch = self.base.get(&key).copied().unwrap_or(0) + s.epoch;
            for c in &mut s.calls {
                c.sig = sigs[c.sig as usize];
                c.line = line32(c.line);
            }
            let first = loc(s.first.line);
            let last = loc(s.last.line);
            let ended = s.ended.map(|(p, l)| (p, loc(l.line)));
            s.rank_at = loc(s.rank_at.line);
            s.nranks_init_at = loc(s.nranks_init_at.line);
            s.nranks_coll_at = loc(s.nranks_coll_at.line);
            s.nranks_other = s.nranks_other.map(|(n, l, init)| (n, loc(l.line), init));
            match self.index.get(&(host, s.pid, s.comm, epoch)) {
                None => {
                    self.index
                        .insert((host, s.pid, s.comm, epoch), self.out.streams.len());
                    s.host = host;
                    s.epoch = epoch;
                    s.first = first;
                    s.last = last;
                    s.ended = ended;
                    s.file_runs = vec![(file, 0)];
                    self.out.streams.push(s);
                }
                Some(&g) => {
                    let d = &mut self.out.streams[g];
                    let new_file = d.file_runs.last().map(|r| r.0) != Some(file);
                    // opCount never goes back within a communicator: a file
                    // that restarts it below what was read is a second copy.
                    let restarts = match (s.calls.first(), d.calls.last()) {
                        (Some(a), Some(b)) => {
                            a.op_count != u64::MAX
                                && b.op_count != u64::MAX
                                && a.op_count < b.op_count
                        }
                        _ => false,
                    };
                    if self.repeated.contains(&(file, g)) || (new_file && restarts) {
                        if self.repeated.insert((file, g)) {
                            let first_file = d.file_runs[0].0 as usize;
                            self.out.repeated_procs.push((file, host, s.pid));
                            self.out.repeats.push(format!(
                                "{} repeats the calls of {}:{} comm 0x{:x} already read from {}; skipped, with that process's WARN lines there",
                                self.out.files[f].path,
                                self.out.hosts[host as usize],
                                s.pid,
                                s.comm,
                                self.out.files[first_file].path
                            ));
                        }
                        self.out.counts.repeated_calls += s.calls.len() as u64;
                        continue;
                    }
                    if new_file {
                        d.file_runs.push((file, d.calls.len() as u32));
                    }
                    d.calls.extend_from_slice(&s.calls);
                    if d.rank.is_none() {
                        (d.rank, d.rank_at) = (s.rank, s.rank_at);
                    }
                    // The first statement of each kind is kept; a different
                    // later one is remembered for the report.
                    for (mine, mine_at, theirs, theirs_at, init) in [
                        (
                            &mut d.nranks_init,
                            &mut d.nranks_init_at,
                            s.nranks_init,
                            s.nranks_init_at,
                            true,
                        ),
                        (
                            &mut d.nranks_coll,
                            &mut d.nranks_coll_at,
                            s.nranks_coll,
                            s.nranks_coll_at,
                            false,
                        ),
                    ] {
                        match (*mine, theirs) {
                            (None, Some(_)) => (*mine, *mine_at) = (theirs, theirs_at),
                            (Some(m), Some(n)) if m != n && d.nranks_other.is_none() => {
                                d.nranks_other = Some((n, theirs_at, init));
                            }
                            _ => {}
                        }
                    }
                    d.nranks_other = d.nranks_other.or(s.nranks_other);
                    d.comm_id = d.comm_id.or(s.comm_id);
                    d.parent = d.parent.or(s.parent);
                    d.color = d.color.or(s.color);
                    d.split_count = d.split_count.or(s.split_count);
                    d.init_complete |= s.init_complete;
                    d.dev = d.dev.or(s.dev);
                    d.prefix_rank = s.prefix_rank.or(d.prefix_rank);
                    d.prefix_local = s.prefix_local.or(d.prefix_local);
                    d.last = d.last.max(last);
                    d.ended = ended.or(d.ended);
                }
            }
        }
        for (key, n) in st.bumps {
            let key = (hosts[key.0 as usize], key.1, key.2);
            *self.base.entry(key).or_insert(0) += n;
        }
        if self.out.first_malformed_call.is_none() {
            self.out.first_malformed_call = st.first_malformed_call.map(|b| BadLine {
                loc: loc(b.loc.line),
                ..b
            });
        }
        for mut w in st.warnings {
            w.host = hosts[w.host as usize];
            w.loc = loc(w.loc.line);
            self.out.warnings.push(w);
        }
    }

    fn finish(mut self) -> Collected {
        for s in &mut self.out.streams {
            s.calls.shrink_to_fit();
        }
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    fn lines_of(text: &[u8], skip_first: bool, budget: u64) -> Vec<String> {
        let mut out = Vec::new();
        LineSplitter::new()
            .run(text, skip_first, budget, |p| match p {
                Piece::Line(l) => out.push(String::from_utf8_lossy(l).into_owned()),
                Piece::Long(n) => out.push(format!("<{n} bytes>")),
            })
            .unwrap();
        out
    }

    #[test]
    fn splitter_lines_and_budget() {
        assert_eq!(
            lines_of(b"a\nbb\n\nccc", false, u64::MAX),
            ["a", "bb", "", "ccc"]
        );
        assert_eq!(lines_of(b"a\nbb\nccc\n", false, 2), ["a"]);
        assert_eq!(lines_of(b"a\nbb\nccc\n", false, 3), ["a", "bb"]);
        assert_eq!(lines_of(b"xa\nbb\nccc\n", true, u64::MAX), ["bb", "ccc"]);
        assert_eq!(lines_of(b"", false, u64::MAX), Vec::<String>::new());
    }

    #[test]
    fn splitter_skips_overlong_lines_and_gives_their_length() {
        const M: usize = LineSplitter::MAX_LINE;
        let x = |n: usize| vec![b'x'; n];
        let cat = |parts: &[&[u8]]| parts.concat();
        // (text, lines as delivered)
        let cases: Vec<(Vec<u8>, Vec<String>)> = vec![
            (
                cat(&[&x(M), b"\nnext\n"]),
                vec![format!("{}", "x".repeat(M)), "next".into()],
            ),
            (
                cat(&[&x(M + 1), b"\nnext\n"]),
                vec![format!("<{} bytes>", M + 1), "next".into()],
            ),
            (
                cat(&[b"a\n", &x(2 * M + 10), b"\nnext"]),
                vec!["a".into(), format!("<{} bytes>", 2 * M + 10), "next".into()],
            ),
            // the last line, over the bound and without a `\n`
            (
                cat(&[b"a\n", &x(3 * M + 7)]),
                vec!["a".into(), format!("<{} bytes>", 3 * M + 7)],
            ),
        ];
        for (text, expected) in cases {
            assert_eq!(lines_of(&text, false, u64::MAX), expected);
        }
        // A long line that starts inside the budget is this reader's to the
        // end; the next reader skips it as the one before its start.
        let text = cat(&[b"a\n", &x(3 * M), b"\nb\nc\n"]);
        assert_eq!(
            lines_of(&text, false, 10),
            ["a".to_string(), format!("<{} bytes>", 3 * M)]
        );
        let second = &text[9..];
        assert_eq!(lines_of(second, true, u64::MAX), ["b", "c"]);
        // and a reader whose whole range lies inside that line delivers nothing
        assert_eq!(lines_of(&text[M..], true, 10), Vec::<String>::new());
    }

    fn synthetic_text() -> Vec<u8> {
        let mut t = Vec::new();
        for r in 0..3u32 {
            writeln!(
                t,
                "h:{}:{} [{r}] NCCL INFO ncclCommInitRank comm 0x{:x} rank {r} nranks 3 cudaDev {r} nvmlDev {r} busId 0 commId 0xabc - Init COMPLETE",
                100 + r,
                100 + r,
                0x1000 + r
            )
            .unwrap();
        }
        for i in 0..500u32 {
            for r in 0..3u32 {
                writeln!(
                    t,
                    "h:{}:{} [{r}] NCCL INFO AllReduce: opCount {i:x} sendbuff 0x1 recvbuff 0x1 count {} datatype 7 op 0 root 0 comm 0x{:x} [nranks=3] stream (nil)",
                    100 + r,
                    100 + r,
                    i % 7,
                    0x1000 + r
                )
                .unwrap();
                if i % 50 == 0 {
                    writeln!(t, "some application output {i}").unwrap();
                }
            }
        }
        t
    }

    #[test]
    fn segments_and_threads_do_not_change_the_result() {
        let text = synthetic_text();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("all.log");
        std::fs::write(&path, &text).unwrap();
        let whole = collect_bytes("all.log", &text);
        for (threads, seg) in [(1, 1 << 30), (1, 997), (2, 4096), (3, 64)] {
            let c = collect(
                std::slice::from_ref(&path),
                Options {
                    threads,
                    segment_bytes: seg,
                },
            )
            .unwrap();
            assert_eq!(c.counts, whole.counts, "threads {threads} seg {seg}");
            assert_eq!(c.streams.len(), 3);
            for (a, b) in c.streams.iter().zip(&whole.streams) {
                assert_eq!(
                    (a.host, a.pid, a.comm, a.rank),
                    (b.host, b.pid, b.comm, b.rank)
                );
                let sa: Vec<_> = a
                    .calls
                    .iter()
                    .map(|c| (c.sig, c.line, c.op_count))
                    .collect();
                let sb: Vec<_> = b
                    .calls
                    .iter()
                    .map(|c| (c.sig, c.line, c.op_count))
                    .collect();
                // sig ids may differ in numbering; compare what they stand for
                let da: Vec<_> = a.calls.iter().map(|x| c.sigs[x.sig as usize]).collect();
                let db: Vec<_> = b.calls.iter().map(|x| whole.sigs[x.sig as usize]).collect();
                assert_eq!(da, db);
                assert_eq!(
                    sa.iter().map(|x| (x.1, x.2)).collect::<Vec<_>>(),
                    sb.iter().map(|x| (x.1, x.2)).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn gzip_is_read_and_truncation_is_a_note() {
        let text = synthetic_text();
        let dir = tempfile::tempdir().unwrap();
        let gz_path = dir.path().join("all.log.gz");
        let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        enc.write_all(&text).unwrap();
        let gz = enc.finish().unwrap();
        std::fs::write(&gz_path, &gz).unwrap();
        let c = collect(std::slice::from_ref(&gz_path), Options::default()).unwrap();
        assert_eq!(c.counts, collect_bytes("x", &text).counts);
        assert!(c.files[0].gzip && c.files[0].note.is_none());

        std::fs::write(&gz_path, &gz[..gz.len() / 2]).unwrap();
        let c = collect(std::slice::from_ref(&gz_path), Options::default()).unwrap();
        assert!(c.files[0].note.as_deref().unwrap().contains("truncated"));
        assert!(c.counts.calls > 0 && c.counts.calls < 1500);
    }

    #[test]
    fn pointer_reuse_after_destroy_starts_a_new_stream() {
        let text = b"h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 0 commId 0xa - Init COMPLETE
h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x10 [nranks=2] stream (nil)
h:1:1 [0] NCCL INFO comm 0x10 rank 0 nranks 2 cudaDev 0 busId 0 - Destroy COMPLETE
h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 1 nranks 4 cudaDev 0 nvmlDev 0 busId 0 commId 0xb - Init COMPLETE
h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x10 [nranks=4] stream (nil)
";
        let c = collect_bytes("x", text);
        assert_eq!(c.streams.len(), 2);
        assert_eq!(
            (
                c.streams[0].comm_id,
                c.streams[0].calls.len(),
                c.streams[0].rank
            ),
            (Some(0xa), 1, Some(0))
        );
        assert_eq!(
            (
                c.streams[1].comm_id,
                c.streams[1].calls.len(),
                c.streams[1].rank
            ),
            (Some(0xb), 1, Some(1))
        );
        assert!(c.streams[0].ended.is_some());
        assert_eq!(c.streams[1].loc(0).line, 5);
    }

    #[test]
    fn malformed_coll_lines_are_counted_and_the_first_is_kept() {
        let good = "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 4 datatype 7 op 0 root 0 comm 0x10 [nranks=1] stream (nil)";
        let bad_count = good.replace("count 4", "count four");
        let no_comm = good.replace("comm 0x10 ", "");
        let bad_init = "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank r nranks 1 cudaDev 0 nvmlDev 0 busId 0 commId 0xa - Init COMPLETE";
        let lines = [good, bad_init, good, &bad_count, &no_comm, good];
        let text = lines.join("\n");
        let c = collect_bytes("x", text.as_bytes());
        assert_eq!(
            (
                c.counts.calls,
                c.counts.malformed_lines,
                c.counts.malformed_calls
            ),
            (3, 3, 2)
        );
        let bad = c.first_malformed_call.unwrap();
        assert_eq!(
            bad,
            BadLine {
                loc: Loc { file: 0, line: 4 },
                why: "count is 'four', expected an unsigned 64-bit integer".into(),
                text: bad_count.clone()
            }
        );

        // split into segments, the first one in file order is kept
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let mut big = String::new();
        for i in 0..2000 {
            big += if i == 1500 || i == 1900 {
                &bad_count
            } else {
                good
            };
            big.push('\n');
        }
        std::fs::write(&path, &big).unwrap();
        for threads in [1, 2] {
            let c = collect(
                std::slice::from_ref(&path),
                Options {
                    threads,
                    segment_bytes: 4096,
                },
            )
            .unwrap();
            assert_eq!(c.counts.malformed_calls, 2);
            assert_eq!(c.first_malformed_call.unwrap().loc.line, 1501);
        }

        // a long line is quoted in part
        let long = good
            .replace("stream (nil)", &"x".repeat(1000))
            .replace("count 4", "count -4");
        let c = collect_bytes("x", long.as_bytes());
        let bad = c.first_malformed_call.unwrap();
        assert_eq!(bad.text, format!("{}…", &long[..SHOWN_TEXT]));
        assert_eq!(
            bad.why,
            "count is '-4', expected an unsigned 64-bit integer"
        );
    }

    #[test]
    fn a_file_given_twice_is_read_once() {
        let text = synthetic_text();
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("all.log");
        std::fs::write(&path, &text).unwrap();
        let hard = dir.path().join("hard.log");
        std::fs::hard_link(&path, &hard).unwrap();
        let soft = dir.path().join("soft.log");
        std::os::unix::fs::symlink(&path, &soft).unwrap();
        let copy = dir.path().join("copy.log");
        std::fs::write(&copy, &text).unwrap();
        let given = [
            path.clone(),
            hard.clone(),
            path.clone(),
            soft.clone(),
            copy.clone(),
        ];
        for segment_bytes in [64 << 20, 4096] {
            let c = collect(
                &given,
                Options {
                    threads: 2,
                    segment_bytes,
                },
            )
            .unwrap();
            let paths: Vec<&str> = c.files.iter().map(|f| f.path.as_str()).collect();
            assert_eq!(paths, [path.to_str().unwrap(), copy.to_str().unwrap()]);
            assert_eq!(
                c.files[0].also_given_as,
                [
                    hard.to_str().unwrap(),
                    path.to_str().unwrap(),
                    soft.to_str().unwrap()
                ]
            );
            assert!(c.files[1].also_given_as.is_empty());
            let lines = text
                .split(|b| *b == b'\n')
                .filter(|l| !l.is_empty())
                .count() as u64;
            assert_eq!(c.counts.lines, 2 * lines);
        }
    }

    #[test]
    fn a_long_line_is_reported_with_its_place_whatever_the_segments() {
        const M: usize = LineSplitter::MAX_LINE;
        let mut text = synthetic_text();
        let calls_before = collect_bytes("x", &text).counts.calls;
        let lines_before = text.iter().filter(|b| **b == b'\n').count() as u64;
        text.extend(std::iter::repeat_n(b'z', 3 * M + 5));
        text.push(b'\n');
        text.extend_from_slice(&synthetic_text());
        text.extend(std::iter::repeat_n(b'y', M + 1));
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("long.log");
        std::fs::write(&path, &text).unwrap();
        let whole = collect_bytes("long.log", &text);
        for (threads, segment_bytes) in [(1, 1 << 30), (2, 4096), (2, 1 << 20), (3, 997)] {
            let c = collect(
                std::slice::from_ref(&path),
                Options {
                    threads,
                    segment_bytes,
                },
            )
            .unwrap();
            let f = &c.files[0];
            assert_eq!(
                (f.long_lines, f.first_long_line),
                (2, Some((lines_before + 1, 3 * M as u64 + 5))),
                "threads {threads} seg {segment_bytes}"
            );
            assert_eq!(c.counts.long_lines, 2);
            assert_eq!(c.counts.lines, 2 * lines_before + 2);
            assert_eq!(c.counts.calls, 2 * calls_before);
            assert_eq!(c.counts, whole.counts);
            // the calls after the long line keep their line numbers
            let last = |c: &Collected| c.streams.iter().map(|s| s.loc(s.calls.len() - 1)).max();
            assert_eq!(last(&c), last(&whole));
        }
    }

    #[test]
    fn missing_path_is_an_input_error() {
        let e = expand_paths(&[PathBuf::from("/nonexistent/rankwise-logs")]).unwrap_err();
        assert!(e.to_string().contains("/nonexistent/rankwise-logs"));
        let dir = tempfile::tempdir().unwrap();
        assert!(matches!(
            expand_paths(&[dir.path().to_path_buf()]),
            Err(InputError::NoFiles(_))
        ));
    }
}
