//! Per-rank records: one CSV row per (rank, case), written by that rank to
//! `<run>/raw/<layer>/rank<r>.csv`, and the judgement that fills its
//! `correct` column (full element-wise equality, never a checksum).

use super::cases::{Actual, Case, Expect, Outcome};
use crate::core::{Error, Scalar};
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

/// Reads a rank file: its rows, or the first line that does not parse.
pub fn read_rank_file(path: &Path) -> Result<Vec<Row>, String> {
    let mut reader =
        csv::Reader::from_path(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut rows = Vec::new();
    for (i, r) in reader.deserialize::<Row>().enumerate() {
        match r {
            Ok(row) => rows.push(row),
            // line 1 is the header
            Err(e) => {
                return Err(format!(
                    "{} line {}: not a valid row: {e}",
                    path.display(),
                    i + 2
                ));
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
        let text = std::fs::read_to_string(&path).map_err(|e| {
            if e.kind() == std::io::ErrorKind::NotFound {
                format!(
                    "{} has no {MANIFEST}: not a rankwise run directory (rankwise verify writes one)",
                    run.display()
                )
            } else {
                format!("cannot read {}: {e}", path.display())
            }
        })?;
        serde_json::from_str(&text)
            .map_err(|e| format!("{} is not a valid manifest: {e}", path.display()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(read_rank_file(&path).unwrap(), vec![row]);
        std::fs::write(&path, "garbage\n1,2\n").unwrap();
        assert!(read_rank_file(&path).unwrap_err().contains("line 2"));
    }
}
