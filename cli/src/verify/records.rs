//! Per-rank records: one CSV row per (rank, case), written by that rank to
//! `<run>/raw/<layer>/rank<r>.csv`, and the judgement that fills its
//! `correct` column (full element-wise equality, never a checksum).

use super::cases::{Actual, Case, Expect, Outcome};
use rankwise::core::{Error, Scalar};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// One row. Columns, in order: run id, layer, rank, world size, operation,
/// variant, pointer relation (the equation), the actual addresses, dtype,
/// count, expected, actual, correct, note.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Row {
    pub run_id: String,
    pub layer: String,
    pub rank: usize,
    pub world_size: usize,
    pub operation: String,
    pub variant: String,
    pub pointer_relation: String,
    pub addresses: String,
    pub dtype: String,
    pub count: usize,
    pub expected: String,
    pub actual: String,
    pub correct: bool,
    pub note: String,
}

/// `[10, 46, 12]`: each element as the shortest decimal that reads back to
/// it exactly (`inf`, `-inf`, `nan` for the non-finite floats).
pub fn fmt_values(v: &[Scalar]) -> String {
    let items: Vec<String> = v.iter().map(|x| format!("{x}")).collect();
    format!("[{}]", items.join(", "))
}

/// `ncclInvalidArgument (InvalidRoot)`
pub fn fmt_error_kind(e: &Error) -> String {
    format!("{} ({:?})", e.code().nccl_name(), e.kind)
}

/// The `expected` column of an expectation.
pub fn expected_text(e: &Expect) -> String {
    match e {
        Expect::Values(v) => fmt_values(v),
        Expect::NoOutput(_) => String::new(),
        Expect::Reject(kind) => format!("{} ({kind:?})", kind.code().nccl_name()),
    }
}

/// Element-wise, bit for bit (`Scalar`'s equality).
fn same(a: &[Scalar], b: &[Scalar]) -> bool {
    a == b
}

/// Builds the row of one rank's outcome: compares every element, and
/// fails the row on any other contract violation the run observed.
pub fn judge(run_id: &str, case: &Case, n: usize, rank: usize, outcome: &Outcome) -> Row {
    let expect = case.expect(n, rank);
    let mut notes: Vec<String> = Vec::new();
    if !case.note.is_empty() {
        notes.push(case.note.clone());
    }
    let (actual, mut correct) = match (&expect, &outcome.actual) {
        (Expect::Values(e), Actual::Values(a)) => (fmt_values(a), same(e, a)),
        (Expect::NoOutput(why), Actual::Nothing) => {
            notes.push((*why).to_string());
            (String::new(), true)
        }
        (Expect::Reject(kind), Actual::Error(err)) => {
            notes.push(format!("rejected: {}", err.message));
            (fmt_error_kind(err), err.kind == *kind)
        }
        (_, Actual::Error(err)) => {
            notes.push(format!("unexpected error: {err}"));
            (fmt_error_kind(err), false)
        }
        (Expect::Reject(_), a) => {
            notes.push("the call was accepted but the contract requires its rejection".into());
            (actual_text(a), false)
        }
        (Expect::Values(_), Actual::Nothing) => {
            notes.push("no output was produced".into());
            (String::new(), false)
        }
        (Expect::NoOutput(why), Actual::Values(a)) => {
            notes.push(format!("{why}, yet an output was read"));
            (fmt_values(a), false)
        }
    };
    if !outcome.problems.is_empty() {
        correct = false;
        notes.extend(outcome.problems.iter().cloned());
    }
    Row {
        run_id: run_id.to_string(),
        layer: case.layer.name().to_string(),
        rank,
        world_size: n,
        operation: case.operation.clone(),
        variant: case.variant.clone(),
        pointer_relation: case.relation(n, rank),
        addresses: outcome.addresses.clone(),
        dtype: case.dtype.name().to_string(),
        count: case.count(n, rank),
        expected: expected_text(&expect),
        actual,
        correct,
        note: notes.join("; "),
    }
}

fn actual_text(a: &Actual) -> String {
    match a {
        Actual::Values(v) => fmt_values(v),
        Actual::Nothing => String::new(),
        Actual::Error(e) => fmt_error_kind(e),
    }
}

/// `<run>/raw/<layer>/rank<r>.csv`
pub fn rank_file(run: &Path, layer: &str, rank: usize) -> PathBuf {
    run.join("raw").join(layer).join(format!("rank{rank}.csv"))
}

/// A rank's CSV writer.
pub struct RankWriter {
    inner: csv::Writer<std::fs::File>,
}

impl RankWriter {
    pub fn create(path: &Path) -> std::io::Result<RankWriter> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        Ok(RankWriter {
            inner: csv::Writer::from_path(path).map_err(std::io::Error::other)?,
        })
    }
    pub fn write(&mut self, row: &Row) -> std::io::Result<()> {
        self.inner.serialize(row).map_err(std::io::Error::other)
    }
    pub fn finish(mut self) -> std::io::Result<()> {
        self.inner.flush()
    }
}

/// The largest rank file `summarize` reads. The largest verify writes (the
/// full suite on 256 ranks) is about 4.3 MB (`bounds_hold_the_largest_run`).
pub const MAX_RANK_FILE_BYTES: u64 = 64 << 20;
/// The longest line of a rank file. The longest row verify writes (an
/// uneven AlltoAll's output, about N²/2 elements, in both the expected and
/// the actual column) is about 1.7 MB at N=256.
pub const MAX_LINE_BYTES: usize = 8 << 20;
/// The largest manifest: a few hundred bytes in every run verify writes.
pub const MAX_MANIFEST_BYTES: u64 = 1 << 20;

/// Why a file of a run could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadError {
    /// Nothing at that path (a dangling symlink is not this: it says where it points).
    Missing,
    /// Something is there but is not a readable file within bounds: what it is.
    Bad(String),
}

/// The bytes of the regular file at `path`, at most `max` of them; `shown`
/// names it in messages and `what` says what it should be ("a rank file").
/// Anything else at the path is said for what it is, and never opened: a
/// FIFO would block and a device like /dev/zero never ends.
pub fn read_bounded(path: &Path, shown: &str, what: &str, max: u64) -> Result<Vec<u8>, ReadError> {
    use std::os::unix::fs::FileTypeExt;
    let bad = |m: String| Err(ReadError::Bad(m));
    match std::fs::symlink_metadata(path) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Err(ReadError::Missing),
        Err(e) => return bad(format!("cannot inspect {shown}: {e}")),
        Ok(_) => {}
    }
    let md = match std::fs::metadata(path) {
        Ok(md) => md,
        Err(e) if e.raw_os_error() == Some(libc::ELOOP) => {
            return bad(format!("{shown} is a symlink loop, not {what}"));
        }
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            let to = std::fs::read_link(path)
                .map(|t| t.display().to_string())
                .unwrap_or_else(|_| "a missing file".into());
            return bad(format!(
                "{shown} is a symlink to {to}, which does not exist"
            ));
        }
        Err(e) => return bad(format!("cannot inspect {shown}: {e}")),
    };
    let t = md.file_type();
    let kind = if t.is_dir() {
        return bad(format!("{shown} is a directory, not {what}"));
    } else if t.is_fifo() {
        "FIFO"
    } else if t.is_char_device() {
        "character device"
    } else if t.is_block_device() {
        "block device"
    } else if t.is_socket() {
        "socket"
    } else {
        ""
    };
    if !t.is_file() {
        return bad(format!("{shown} is a {kind}, not a regular file"));
    }
    if md.len() > max {
        return bad(format!(
            "{shown} is {} bytes: {what} is at most {max} bytes",
            md.len()
        ));
    }
    let file = std::fs::File::open(path)
        .map_err(|e| ReadError::Bad(format!("cannot open {shown}: {e}")))?;
    // a file that grows after the size check is still cut at the bound
    read_capped(file, max)
        .map_err(|e| ReadError::Bad(format!("cannot read {shown}: {e}")))?
        .ok_or_else(|| {
            ReadError::Bad(format!(
                "{shown} holds more than {max} bytes: {what} is at most {max} bytes"
            ))
        })
}

/// Everything `reader` holds, or None when that is more than `max` bytes
/// (never reading more than one byte past the bound): what keeps a pipe, a
/// device or a growing file from filling memory.
pub fn read_capped(reader: impl std::io::Read, max: u64) -> std::io::Result<Option<Vec<u8>>> {
    use std::io::Read;
    let mut bytes = Vec::new();
    reader.take(max + 1).read_to_end(&mut bytes)?;
    Ok((bytes.len() as u64 <= max).then_some(bytes))
}

/// Reads a rank file (`shown` names it in messages): its rows, or what is
/// wrong with it: not a bounded regular file, a line too long, or the
/// first line that does not parse.
pub fn read_rank_file(path: &Path, shown: &str) -> Result<Vec<Row>, ReadError> {
    let bytes = read_bounded(path, shown, "a rank file", MAX_RANK_FILE_BYTES)?;
    for (i, line) in bytes.split(|b| *b == b'\n').enumerate() {
        if line.len() > MAX_LINE_BYTES {
            return Err(ReadError::Bad(format!(
                "{shown} line {} is longer than {MAX_LINE_BYTES} bytes: no row of a run is",
                i + 1
            )));
        }
    }
    let mut reader = csv::Reader::from_reader(bytes.as_slice());
    let mut rows = Vec::new();
    for (i, r) in reader.deserialize::<Row>().enumerate() {
        match r {
            Ok(row) => rows.push(row),
            // line 1 is the header
            Err(e) => {
                return Err(ReadError::Bad(format!(
                    "{shown} line {}: not a valid row: {e}",
                    i + 2
                )));
            }
        }
    }
    Ok(rows)
}

/// `<run>/manifest.json`: what the run declares, so `summarize` can check
/// the CSVs against what the suite declares for that N.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Manifest {
    pub tool: String,
    pub version: String,
    pub run_id: String,
    pub suite: String,
    pub ranks: usize,
    pub engine: String,
    pub layers: Vec<ManifestLayer>,
    /// How the seed's cases were adapted to this N.
    pub adaptations: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ManifestLayer {
    pub name: String,
    pub rows_per_rank: usize,
    pub rows: usize,
    pub records: usize,
}

pub const MANIFEST: &str = "manifest.json";

impl Manifest {
    pub fn write(&self, run: &Path) -> std::io::Result<()> {
        let text = serde_json::to_string_pretty(self).map_err(std::io::Error::other)?;
        std::fs::write(run.join(MANIFEST), text + "\n")
    }
    pub fn read(run: &Path) -> Result<Manifest, String> {
        let path = run.join(MANIFEST);
        let shown = path.display().to_string();
        let bytes = read_bounded(&path, &shown, "a manifest", MAX_MANIFEST_BYTES).map_err(|e| match e {
            ReadError::Missing => format!(
                "{} has no {MANIFEST}: not a rankwise run directory (rankwise verify writes one)",
                run.display()
            ),
            ReadError::Bad(why) => why,
        })?;
        serde_json::from_slice(&bytes).map_err(|e| format!("{shown} is not a valid manifest: {e}"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_capped_read_stops_one_byte_past_the_bound() {
        use std::io::Read;
        // an endless stream, like a pipe that never closes or /dev/zero
        assert_eq!(read_capped(std::io::repeat(7), 1000).unwrap(), None);
        let exact = std::io::repeat(7).take(1000);
        assert_eq!(read_capped(exact, 1000).unwrap(), Some(vec![7; 1000]));
        let over = std::io::repeat(7).take(1001);
        assert_eq!(read_capped(over, 1000).unwrap(), None);
    }

    #[test]
    fn values_print_exactly() {
        let f = |v: &[f64]| -> Vec<Scalar> { v.iter().map(|x| Scalar::Float(*x)).collect() };
        assert_eq!(
            fmt_values(&f(&[10.0, -3.0, 1.75, 0.001953125])),
            "[10, -3, 1.75, 0.001953125]"
        );
        assert_eq!(
            fmt_values(&[Scalar::Int(u64::MAX.into()), Scalar::Int(i64::MIN.into())]),
            "[18446744073709551615, -9223372036854775808]"
        );
        assert_eq!(
            fmt_values(&f(&[f64::INFINITY, f64::NEG_INFINITY, f64::NAN])),
            "[inf, -inf, nan]"
        );
        assert_eq!(fmt_values(&[]), "[]");
        assert!(!same(&f(&[0.0]), &f(&[-0.0])), "the sign of zero counts");
    }

    #[test]
    fn rows_round_trip_through_csv() {
        let dir = tempfile::tempdir().unwrap();
        let path = rank_file(dir.path(), "native", 2);
        let row = Row {
            run_id: "20260101T000000Z".into(),
            layer: "native".into(),
            rank: 2,
            world_size: 4,
            operation: "AllGather".into(),
            variant: "in-place".into(),
            pointer_relation: "sendbuff == recvbuff + rank*sendcount".into(),
            addresses: "sendbuff 0x1018 = recvbuff 0x1000 + 24 bytes (6 elements)".into(),
            dtype: "int32".into(),
            count: 3,
            expected: "[0, 10, 100]".into(),
            actual: "[0, 10, 100]".into(),
            correct: true,
            note: "a, b; \"quoted\"".into(),
        };
        let mut w = RankWriter::create(&path).unwrap();
        w.write(&row).unwrap();
        w.finish().unwrap();
        assert_eq!(read_rank_file(&path, "f").unwrap(), vec![row]);
        std::fs::write(&path, "garbage\n1,2\n").unwrap();
        assert!(
            matches!(read_rank_file(&path, "f"), Err(ReadError::Bad(e)) if e.starts_with("f line 2: not a valid row"))
        );
    }
}
