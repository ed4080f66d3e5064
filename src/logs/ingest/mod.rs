//! Files → per-process call streams ([`Collected`]).
//!
//! Input files (plain or gzip, any mix of ranks, interleaved or not) are cut
//! into segments: a plain file larger than `segment_bytes` is split at byte
//! offsets, and each segment owns the lines that *start* inside it, so the
//! segments partition the lines exactly. Segments are parsed in parallel
//! threads ([`segment`]); each builds its own streams, and the results are
//! merged in file and segment order ([`merge`]), so the outcome does not
//! depend on how the work was split. Memory grows with the number of calls
//! kept (16 bytes each), never with the size of the text: lines are read
//! into one reused buffer and parsed in place ([`io`]); a line over
//! [`LineSplitter::MAX_LINE`] bytes is skipped, and its length and place
//! reported.
//!
//! This file plans the segments, runs the worker threads and hands their
//! results to the merge in order; it also holds the hasher of the hot
//! path's integer keys.

mod io;
mod merge;
mod segment;

pub use io::{LineSplitter, Piece, expand_paths};

use crate::logs::flight::{self, DumpFormat};
use crate::logs::model::{Collected, FileInfo};
use io::{Segment, file_id, read_segment};
use merge::Merger;
use segment::{SegResult, SegState};
use std::collections::HashMap;
use std::fs::File;
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Read;
use std::path::PathBuf;
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

#[derive(Clone, Copy, Debug)]
pub struct Options {
    /// Worker threads (0: one per available core).
    pub threads: usize,
    /// Plain files larger than this are split into segments parsed in parallel.
    pub segment_bytes: u64,
    /// What the files are; `Auto` tells each file by its first bytes.
    pub format: Format,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            threads: 0,
            segment_bytes: 64 << 20,
            format: Format::Auto,
        }
    }
}

/// What kind of file an input is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum Format {
    /// Each file by its first bytes: a pickle or a JSON object with Flight
    /// Recorder's fields is a dump, anything else text.
    #[default]
    Auto,
    /// Text: NCCL's lines and PyTorch's, in any mix.
    Text,
    /// Flight Recorder dumps, pickle or JSON (told apart by their bytes).
    Flight,
    FlightJson,
    FlightPickle,
}

/// A file's kind, from `format` and its first bytes.
fn kind_of(format: Format, head: &[u8]) -> Option<DumpFormat> {
    match format {
        Format::Auto => flight::read::sniff(head),
        Format::Text => None,
        Format::Flight => Some(flight::read::sniff(head).unwrap_or(DumpFormat::Pickle)),
        Format::FlightJson => Some(DumpFormat::Json),
        Format::FlightPickle => Some(DumpFormat::Pickle),
    }
}

/// Read one Flight Recorder dump, bounded.
fn read_dump(path: &std::path::Path, f: File, format: DumpFormat) -> Result<flight::Dump, String> {
    let mut bytes = Vec::new();
    f.take(flight::read::MAX_DUMP_BYTES + 1)
        .read_to_end(&mut bytes)
        .map_err(|e| format!("read error: {e}"))?;
    if bytes.len() as u64 > flight::read::MAX_DUMP_BYTES {
        return Err(format!(
            "over the {} MiB bound on a Flight Recorder dump",
            flight::read::MAX_DUMP_BYTES >> 20
        ));
    }
    flight::read::parse(&path.display().to_string(), &bytes, format)
}

#[derive(Debug, thiserror::Error)]
pub enum InputError {
    #[error("cannot read '{path}': {source}")]
    Unreadable {
        path: String,
        source: std::io::Error,
    },
    #[error("no log files found in {0}")]
    NoFiles(String),
    #[error("no file could be read: {0}")]
    NothingReadable(String),
}

/// Read and parse all files.
pub fn collect(files: &[PathBuf], opts: Options) -> Result<Collected, InputError> {
    let mut infos: Vec<FileInfo> = Vec::with_capacity(files.len());
    // A file named twice is read once: its lines would otherwise be
    // reported twice (every WARN line, say).
    let mut kept: Vec<&PathBuf> = Vec::with_capacity(files.len());
    let mut ids = HashMap::new();
    let mut segments = Vec::new();
    let mut dumps = Vec::new();
    let mut unreadable = Vec::new();
    for path in files {
        let opened = File::open(path).and_then(|f| {
            let meta = f.metadata()?;
            let id = file_id(&meta, path)?;
            Ok((f, meta, id))
        });
        let (mut f, meta, id) = match opened {
            Ok(x) => x,
            Err(e) => {
                unreadable.push(format!("{}: cannot be read: {e}", path.display()));
                continue;
            }
        };
        if meta.is_dir() {
            unreadable.push(format!("{}: is a directory", path.display()));
            continue;
        }
        if let Some(&k) = ids.get(&id) {
            let info: &mut FileInfo = &mut infos[k];
            info.also_given_as.push(path.display().to_string());
            continue;
        }
        let i = kept.len();
        ids.insert(id, i);
        kept.push(path);
        let bytes = meta.len();
        let mut head = [0u8; 256];
        let got = read_head(&mut f, &mut head);
        if let Some(kind) = kind_of(opts.format, &head[..got]) {
            let reopened = File::open(path).map_err(|e| e.to_string());
            match reopened.and_then(|f| read_dump(path, f, kind)) {
                Ok(d) => dumps.push(d),
                Err(why) => unreadable.push(format!("{}: {why}", path.display())),
            }
            continue;
        }
        let gzip = got >= 2 && head[..2] == [0x1f, 0x8b];
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
    let mut out = merger.finish();
    if kept.is_empty() && dumps.is_empty() && !unreadable.is_empty() {
        return Err(InputError::NothingReadable(unreadable.join("; ")));
    }
    out.flight = dumps;
    out.unreadable = unreadable;
    Ok(out)
}

/// Up to `buf.len()` bytes from the start of `f`.
fn read_head(f: &mut File, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) | Err(_) => break,
            Ok(n) => got += n,
        }
    }
    got
}

/// Parse text already in memory (tests, fuzzing): one file named `name`.
pub fn collect_bytes(name: &str, text: &[u8]) -> Collected {
    let mut st = SegState::new();
    let mut splitter = LineSplitter::new();
    let _ = splitter.run(text, false, u64::MAX, |p| st.on_piece(p));
    st.finish();
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::model::{BadLine, Loc, SHOWN_TEXT};
    use std::io::Write;

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
                    ..Options::default()
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
                    ..Options::default()
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
                    ..Options::default()
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
                    ..Options::default()
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
}
