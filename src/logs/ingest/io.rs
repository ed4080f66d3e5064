//! Reading the input: the paths given, the files' identity (a file named
//! twice is read once), and one segment of one file, plain or gzip, cut
//! into lines with one reused buffer ([`LineSplitter`]).

use super::InputError;
use super::segment::{SegResult, SegState};
use std::fs::File;
use std::io::{self, Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// What makes two paths one file: its device and inode.
#[cfg(unix)]
pub(super) fn file_id(meta: &std::fs::Metadata, _path: &Path) -> io::Result<(u64, u64)> {
    use std::os::unix::fs::MetadataExt;
    Ok((meta.dev(), meta.ino()))
}

/// What makes two paths one file: where it resolves to.
#[cfg(not(unix))]
pub(super) fn file_id(_meta: &std::fs::Metadata, path: &Path) -> io::Result<PathBuf> {
    path.canonicalize()
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

pub(super) struct Segment {
    pub(super) file: u32,
    pub(super) start: u64,
    pub(super) end: u64,
}

pub(super) fn read_segment(path: &Path, seg: &Segment, splitter: &mut LineSplitter) -> SegResult {
    let mut st = SegState::new();
    let read = (|| -> io::Result<()> {
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
    })();
    st.finish();
    let note = read.err().map(|e| match e.kind() {
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

#[cfg(test)]
mod tests {
    use super::*;

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
