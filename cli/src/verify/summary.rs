//! Reading a run directory back: the per-rank CSVs alone (no re-run),
//! checked against what the suite declares for the run's N, aggregated into
//! one record per (layer, operation, variant, pointer relation).
//!
//! A run passes only if every declared rank file exists, holds exactly the
//! declared rows (none missing, none duplicated, none unknown), every column
//! that names a row's case (run id, layer, rank, world size, operation,
//! variant, pointer relation, dtype, count) is the case's, every row's
//! `expected` column is the suite's reference for that rank, and every row
//! is correct. `verify` checks its own output through this same path.
//!
//! What it holds is bounded by the run, not by numbers the run states: at
//! most [`MAX_RANKS`] ranks, one rank file in memory at a time, each read
//! within `records`' size and line bounds.

use super::cases::{self, Layer, Plan, Suite};
use super::records::{self, Manifest, ReadError};
use std::collections::{BTreeSet, HashMap};
use std::path::Path;

/// The most ranks a manifest may declare: the most `rankwise verify` runs
/// (`cli::MAX_LOCAL_RANKS`). Everything summarize holds per rank is
/// bounded by it, whatever number a manifest states.
pub const MAX_RANKS: usize = 256;

/// Unexpected files named one by one per layer directory; the rest are counted.
const EXTRA_FILES_NAMED: usize = 10;

/// One aggregated record.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Record {
    pub layer: String,
    pub operation: String,
    pub variant: String,
    pub pointer_relation: String,
    pub ranks: Vec<usize>,
    pub pass: bool,
}

/// Totals of one layer.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerTotals {
    pub layer: String,
    pub rows: usize,
    pub records: usize,
    pub failed_records: usize,
}

/// A run directory, read and checked.
#[derive(Debug, Clone)]
pub struct Summary {
    pub manifest: Manifest,
    pub records: Vec<Record>,
    pub layers: Vec<LayerTotals>,
    /// Every way the run departs from what its suite declares; empty on a pass.
    pub problems: Vec<String>,
}

impl Summary {
    pub fn pass(&self) -> bool {
        self.problems.is_empty() && self.records.iter().all(|r| r.pass)
    }
    pub fn rows(&self) -> usize {
        self.layers.iter().map(|l| l.rows).sum()
    }
}

/// Reads and checks `dir`. `Err` when it cannot be read as a run at all
/// (no manifest, unknown suite); otherwise a summary whose `problems` list
/// every departure found.
pub fn summarize(dir: &Path) -> Result<Summary, String> {
    let manifest = Manifest::read(dir)?;
    let suite = Suite::parse(&manifest.suite).ok_or_else(|| {
        format!(
            "{}/manifest.json names suite '{}', which is not one of: seed, full",
            dir.display(),
            manifest.suite
        )
    })?;
    check_declared_ranks(dir, &manifest)?;
    let n = manifest.ranks;
    let plan = written_by(cases::plan(suite, n), &manifest.engine);
    let mut problems = Vec::new();
    check_manifest(&manifest, &plan, &mut problems);

    let mut records: Vec<Record> = Vec::new();
    let mut layers = Vec::new();
    for lp in &plan.layers {
        let layer = lp.layer.name();
        check_extra_files(dir, layer, n, &mut problems);
        let read = read_layer(dir, &manifest, suite, lp, &mut problems);
        if let Some(p) = missing_files(layer, n, &read.missing) {
            problems.push(p);
        }
        let mine = aggregate(lp, n, &read);
        layers.push(LayerTotals {
            layer: layer.to_string(),
            rows: read.row_count,
            records: mine.len(),
            failed_records: mine.iter().filter(|r| !r.pass).count(),
        });
        records.extend(mine);
    }
    Ok(Summary {
        manifest,
        records,
        layers,
        problems,
    })
}

/// The engine of runs written by `python -m rankwise.verify_torch` (the
/// framework cases through torch.distributed).
pub const TORCH_ENGINE: &str = "torch";

/// The layers a run of `engine` writes: a torch run writes the framework
/// layer only (torch.distributed has no face with explicit pointers);
/// every engine of `rankwise verify` writes both.
fn written_by(mut plan: Plan, engine: &str) -> Plan {
    if engine == TORCH_ENGINE {
        plan.layers.retain(|l| l.layer == Layer::Framework);
    }
    plan
}

/// A run of a rank count `rankwise verify` never writes is refused before
/// any file is read, with what each layer's directory holds.
fn check_declared_ranks(dir: &Path, manifest: &Manifest) -> Result<(), String> {
    if manifest.ranks > 0 && manifest.ranks <= MAX_RANKS {
        return Ok(());
    }
    let held: Vec<String> = Layer::ALL
        .iter()
        .map(|l| {
            format!(
                "raw/{l} holds {} rank file(s)",
                count_rank_files(&dir.join("raw").join(l.name()))
            )
        })
        .collect();
    Err(format!(
        "{}/manifest.json declares {} ranks: rankwise verify writes runs of 1 to {MAX_RANKS} ranks ({})",
        dir.display(),
        manifest.ranks,
        held.join(", ")
    ))
}

/// What one layer's rank files hold, as the checks found it.
struct LayerRead {
    /// (rank, case index) -> the row's pointer relation
    rows: HashMap<(usize, usize), String>,
    /// (case index, pointer relation) of the records that have a problem
    bad: BTreeSet<(usize, String)>,
    /// ranks without a file
    missing: Vec<usize>,
    row_count: usize,
}

/// Reads every rank's file of layer `lp` and checks each row against the
/// suite's case; each problem found is added to `problems`.
fn read_layer(
    dir: &Path,
    manifest: &Manifest,
    suite: Suite,
    lp: &cases::LayerPlan,
    problems: &mut Vec<String>,
) -> LayerRead {
    let (layer, n) = (lp.layer.name(), manifest.ranks);
    // a row names its case by (operation, variant)
    let index: HashMap<(&str, &str), usize> = lp
        .cases
        .iter()
        .enumerate()
        .map(|(i, c)| ((c.operation.as_str(), c.variant.as_str()), i))
        .collect();
    let mut read = LayerRead {
        rows: HashMap::new(),
        bad: BTreeSet::new(),
        missing: Vec::new(),
        row_count: 0,
    };
    for rank in 0..n {
        let path = records::rank_file(dir, layer, rank);
        let rel = format!("raw/{layer}/rank{rank}.csv");
        // a rank without rows fails its records by their absence
        let file_rows = match records::read_rank_file(&path, &rel) {
            Ok(r) => r,
            Err(ReadError::Missing) => {
                read.missing.push(rank);
                continue;
            }
            Err(ReadError::Bad(e)) => {
                problems.push(e);
                continue;
            }
        };
        read.row_count += file_rows.len();
        if file_rows.len() != lp.rows_per_rank() {
            problems.push(format!(
                "{rel} has {} rows, but suite {} declares {} per rank for layer {layer} at N={n}",
                file_rows.len(),
                suite.name(),
                lp.rows_per_rank()
            ));
        }
        let mut first_line: HashMap<usize, usize> = HashMap::new();
        for (k, row) in file_rows.into_iter().enumerate() {
            let line = k + 2;
            let at = format!("{rel} line {line}");
            let Some(&i) = index.get(&(row.operation.as_str(), row.variant.as_str())) else {
                problems.push(format!(
                    "{at}: {} / {} is not a case of suite {} at N={n}",
                    row.operation,
                    row.variant,
                    suite.name()
                ));
                continue;
            };
            let case = &lp.cases[i];
            if let Some(first) = first_line.get(&i) {
                problems.push(format!(
                    "{at}: duplicated row for {} / {} (first at line {first})",
                    row.operation, row.variant
                ));
                read.bad.insert((i, case.relation(n, rank)));
                continue;
            }
            first_line.insert(i, line);
            let row_problems = check_row(&row, case, manifest, layer, rank);
            if !row_problems.is_empty() {
                read.bad.insert((i, case.relation(n, rank)));
                for p in row_problems {
                    problems.push(format!("{at}: {} / {}: {p}", row.operation, row.variant));
                }
            }
            read.rows.insert((rank, i), row.pointer_relation);
        }
        for (i, c) in lp.cases.iter().enumerate() {
            if !first_line.contains_key(&i) {
                problems.push(format!(
                    "{rel}: row for {} / {} is missing",
                    c.operation, c.variant
                ));
                read.bad.insert((i, c.relation(n, rank)));
            }
        }
    }
    read
}

/// What is wrong with rank `rank`'s row of `case`: every column that says
/// what the record is must be the case's, and the value must be right.
fn check_row(
    row: &records::Row,
    case: &cases::Case,
    manifest: &Manifest,
    layer: &str,
    rank: usize,
) -> Vec<String> {
    let n = manifest.ranks;
    let mut problems = Vec::new();
    if row.run_id != manifest.run_id {
        problems.push(format!(
            "run id {} is not this run's ({})",
            row.run_id, manifest.run_id
        ));
    }
    if row.layer != layer {
        problems.push(format!("layer column says {}", row.layer));
    }
    if row.rank != rank {
        problems.push(format!(
            "rank column says {} in rank {rank}'s file",
            row.rank
        ));
    }
    if row.world_size != n {
        problems.push(format!(
            "world size column says {}, the run has {n}",
            row.world_size
        ));
    }
    if row.dtype != case.dtype.name() {
        problems.push(format!(
            "dtype column says {}, the case's dtype is {}",
            row.dtype,
            case.dtype.name()
        ));
    }
    let count = case.count(n, rank);
    if row.count != count {
        problems.push(format!(
            "count column says {}, the case's count on rank {rank} is {count}",
            row.count
        ));
    }
    let relation = case.relation(n, rank);
    if row.pointer_relation != relation {
        problems.push(format!(
            "pointer relation `{}` is not the case's `{relation}`",
            row.pointer_relation
        ));
    }
    let reference = records::expected_text(&case.expect(n, rank));
    if row.expected != reference {
        problems.push(format!(
            "expected column {} is not the suite's reference {reference}",
            row.expected
        ));
    }
    if row.correct && row.actual != row.expected {
        problems.push(format!(
            "marked correct, but actual {} differs from expected {}",
            row.actual, row.expected
        ));
    }
    if !row.correct {
        problems.push(format!(
            "incorrect: expected {}, actual {}{}",
            show(&row.expected),
            show(&row.actual),
            if row.note.is_empty() {
                String::new()
            } else {
                format!(" ({})", row.note)
            }
        ));
    }
    problems
}

/// One layer's records: each case's rows grouped by pointer relation, in
/// declared order, relations in order of their first rank; a record passes
/// when every rank of it has a row and none has a problem.
fn aggregate(lp: &cases::LayerPlan, n: usize, read: &LayerRead) -> Vec<Record> {
    let layer = lp.layer.name();
    let mut records = Vec::new();
    for (i, c) in lp.cases.iter().enumerate() {
        let mut mine: Vec<Record> = Vec::new();
        for rank in 0..n {
            let relation = match read.rows.get(&(rank, i)) {
                Some(r) => r.clone(),
                None => c.relation(n, rank),
            };
            let present = read.rows.contains_key(&(rank, i));
            let failed = read.bad.contains(&(i, relation.clone()));
            match mine.iter_mut().find(|r| r.pointer_relation == relation) {
                Some(r) => {
                    if present {
                        r.ranks.push(rank);
                    }
                    r.pass &= !failed && present;
                }
                None => mine.push(Record {
                    layer: layer.to_string(),
                    operation: c.operation.clone(),
                    variant: c.variant.clone(),
                    pointer_relation: relation,
                    ranks: if present { vec![rank] } else { Vec::new() },
                    pass: !failed && present,
                }),
            }
        }
        records.extend(mine);
    }
    records
}

fn show(s: &str) -> &str {
    if s.is_empty() { "(none)" } else { s }
}

fn check_manifest(m: &Manifest, plan: &Plan, problems: &mut Vec<String>) {
    for lp in &plan.layers {
        match m.layers.iter().find(|l| l.name == lp.layer.name()) {
            None => problems.push(format!(
                "manifest.json lists no layer {}, which suite {} declares",
                lp.layer,
                plan.suite.name()
            )),
            Some(l) if l.rows_per_rank != lp.rows_per_rank() => problems.push(format!(
                "manifest.json declares {} rows per rank for layer {}, but suite {} declares {} at N={}",
                l.rows_per_rank,
                lp.layer,
                plan.suite.name(),
                lp.rows_per_rank(),
                plan.n
            )),
            Some(_) => {}
        }
    }
    for l in &m.layers {
        match Layer::parse(&l.name) {
            None => problems.push(format!("manifest.json lists an unknown layer {}", l.name)),
            Some(layer) if plan.layer(layer).is_none() => problems.push(format!(
                "manifest.json lists layer {layer}, which a run of engine {} does not write",
                m.engine
            )),
            Some(_) => {}
        }
    }
}

/// One problem for the declared ranks that wrote no file in `layer`:
/// `missing rank file raw/native/rank3.csv: …`, or one line for many.
fn missing_files(layer: &str, n: usize, missing: &[usize]) -> Option<String> {
    let (&first, &last) = (missing.first()?, missing.last()?);
    let why = format!("the run declares {n} rank(s), so each must have written one");
    Some(if missing.len() == 1 {
        format!(
            "missing rank file raw/{layer}/rank{first}.csv: the run declares {n} rank(s), so rank {first} must have written one"
        )
    } else if last - first + 1 == missing.len() {
        format!(
            "missing rank files raw/{layer}/rank{first}.csv .. rank{last}.csv ({} files): {why}",
            missing.len()
        )
    } else {
        format!(
            "missing rank files raw/{layer}/rank<r>.csv for ranks {} ({} files): {why}",
            fmt_ranks(missing),
            missing.len()
        )
    })
}

/// `rank<r>.csv` entries in a layer directory, counted without keeping them.
fn count_rank_files(layer_dir: &Path) -> usize {
    let Ok(entries) = std::fs::read_dir(layer_dir) else {
        return 0;
    };
    entries
        .filter_map(|e| e.ok())
        .filter(|e| rank_of(&e.file_name().to_string_lossy()).is_some())
        .count()
}

/// `rank12.csv` -> 12; anything else (`rank012.csv` too) -> None.
fn rank_of(name: &str) -> Option<usize> {
    let r = name
        .strip_prefix("rank")
        .and_then(|s| s.strip_suffix(".csv"))
        .and_then(|s| s.parse::<usize>().ok())?;
    (name == format!("rank{r}.csv")).then_some(r)
}

/// Files in `raw/<layer>/` that no rank of the run writes: the first few by
/// name, then how many more, so a directory of millions costs a few lines.
fn check_extra_files(dir: &Path, layer: &str, n: usize, problems: &mut Vec<String>) {
    let Ok(entries) = std::fs::read_dir(dir.join("raw").join(layer)) else {
        return;
    };
    let mut named: BTreeSet<String> = BTreeSet::new();
    let mut total = 0usize;
    for e in entries.filter_map(|e| e.ok()) {
        let name = e.file_name().to_string_lossy().into_owned();
        if matches!(rank_of(&name), Some(r) if r < n) {
            continue;
        }
        total += 1;
        named.insert(name);
        if named.len() > EXTRA_FILES_NAMED {
            named.pop_last();
        }
    }
    for name in &named {
        problems.push(format!(
            "unexpected file raw/{layer}/{name}: a {n}-rank run has rank0.csv..rank{}.csv",
            n - 1
        ));
    }
    if total > named.len() {
        problems.push(format!(
            "and {} more unexpected files in raw/{layer}",
            total - named.len()
        ));
    }
}

/// `0-3`, `0,2-3`, `3`
pub fn fmt_ranks(ranks: &[usize]) -> String {
    if ranks.is_empty() {
        return "none".into();
    }
    let mut parts = Vec::new();
    let mut i = 0;
    while i < ranks.len() {
        let mut j = i;
        while j + 1 < ranks.len() && ranks[j + 1] == ranks[j] + 1 {
            j += 1;
        }
        parts.push(if j > i {
            format!("{}-{}", ranks[i], ranks[j])
        } else {
            ranks[i].to_string()
        });
        i = j + 1;
    }
    parts.join(",")
}

/// Left-aligned columns separated by two spaces.
pub fn render_table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for r in rows {
        for (w, c) in widths.iter_mut().zip(r) {
            *w = (*w).max(c.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut s = String::new();
        for (k, (c, w)) in cells.iter().zip(&widths).enumerate() {
            s.push_str(c);
            if k + 1 < cells.len() {
                s.push_str(&" ".repeat(w - c.chars().count() + 2));
            }
        }
        s.trim_end().to_string()
    };
    let mut out = line(headers.to_vec());
    out.push('\n');
    for r in rows {
        out.push_str(&line(r.iter().map(|s| s.as_str()).collect()));
        out.push('\n');
    }
    out
}

fn verdict(pass: bool) -> String {
    if pass { "PASS".into() } else { "FAIL".into() }
}

/// The aggregated table: layer, operation, variant, pointer relation, ranks, result.
pub fn records_table(records: &[Record]) -> String {
    let rows: Vec<Vec<String>> = records
        .iter()
        .map(|r| {
            vec![
                r.layer.clone(),
                r.operation.clone(),
                r.variant.clone(),
                r.pointer_relation.clone(),
                fmt_ranks(&r.ranks),
                verdict(r.pass),
            ]
        })
        .collect();
    render_table(
        &[
            "layer",
            "operation",
            "variant",
            "pointer relation",
            "ranks",
            "result",
        ],
        &rows,
    )
}

/// Per (layer, operation): records, failing records — for suites too long to list.
pub fn operations_table(records: &[Record]) -> String {
    let mut keys: Vec<(String, String)> = Vec::new();
    let mut agg: HashMap<(String, String), (usize, usize)> = HashMap::new();
    for r in records {
        let k = (r.layer.clone(), r.operation.clone());
        if !agg.contains_key(&k) {
            keys.push(k.clone());
        }
        let e = agg.entry(k).or_default();
        e.0 += 1;
        e.1 += usize::from(!r.pass);
    }
    let rows: Vec<Vec<String>> = keys
        .into_iter()
        .map(|k| {
            let (n, bad) = agg[&k];
            vec![k.0, k.1, n.to_string(), bad.to_string(), verdict(bad == 0)]
        })
        .collect();
    render_table(
        &["layer", "operation", "records", "failed", "result"],
        &rows,
    )
}

/// The seed's acceptance table (总验收): layer, rank rows, records, result, and a total.
pub fn acceptance_table(s: &Summary) -> String {
    let mut rows: Vec<Vec<String>> = s
        .layers
        .iter()
        .map(|l| {
            vec![
                l.layer.clone(),
                l.rows.to_string(),
                l.records.to_string(),
                verdict(l.failed_records == 0),
            ]
        })
        .collect();
    rows.push(vec![
        "total".into(),
        s.rows().to_string(),
        s.records.len().to_string(),
        verdict(s.pass()),
    ]);
    render_table(&["layer", "rank rows", "records", "result"], &rows)
}

/// `native 36 rows in 10 records, framework 56 rows in 14 records: 92 rows, 24 records, all PASS`
pub fn totals_line(s: &Summary) -> String {
    let parts: Vec<String> = s
        .layers
        .iter()
        .map(|l| format!("{} {} rows in {} records", l.layer, l.rows, l.records))
        .collect();
    let failed = s.records.iter().filter(|r| !r.pass).count();
    let verdict = if s.pass() {
        "all PASS".to_string()
    } else if failed > 0 {
        format!("{failed} record(s) FAIL")
    } else {
        format!("FAIL ({} problem(s))", s.problems.len())
    };
    format!(
        "{}: {} rows, {} records, {verdict}",
        parts.join(", "),
        s.rows(),
        s.records.len()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn summarize_reads_every_run_verify_writes() {
        assert_eq!(MAX_RANKS, crate::MAX_LOCAL_RANKS);
    }

    /// The largest run verify writes (the full suite on MAX_RANKS ranks)
    /// fits the reading bounds with room to spare: each row's length is
    /// estimated from its expected column (written twice: expected and
    /// actual) and the other columns' text plus 300 bytes for addresses.
    #[test]
    fn bounds_hold_the_largest_run() {
        let n = MAX_RANKS;
        let plan = cases::plan(Suite::Full, n);
        let mut longest = 0;
        for lp in &plan.layers {
            for rank in [0, n - 1] {
                let mut file = 0;
                for c in &lp.cases {
                    let line = 2 * records::expected_text(&c.expect(n, rank)).len()
                        + c.relation(n, rank).len()
                        + c.operation.len()
                        + c.variant.len()
                        + c.note.len()
                        + 300;
                    longest = longest.max(line);
                    file += line + 1;
                }
                assert!(
                    4 * file < records::MAX_RANK_FILE_BYTES as usize,
                    "{} rank {rank}: {file} bytes",
                    lp.layer
                );
            }
        }
        assert!(4 * longest < records::MAX_LINE_BYTES, "{longest} bytes");
    }

    #[test]
    fn missing_files_are_one_line() {
        assert_eq!(
            missing_files("native", 4, &[3]).unwrap(),
            "missing rank file raw/native/rank3.csv: the run declares 4 rank(s), so rank 3 must have written one"
        );
        assert_eq!(
            missing_files("native", 200, &(4..200).collect::<Vec<_>>()).unwrap(),
            "missing rank files raw/native/rank4.csv .. rank199.csv (196 files): the run declares 200 rank(s), so each must have written one"
        );
        assert_eq!(
            missing_files("framework", 8, &[1, 3, 4]).unwrap(),
            "missing rank files raw/framework/rank<r>.csv for ranks 1,3-4 (3 files): the run declares 8 rank(s), so each must have written one"
        );
        assert_eq!(missing_files("native", 4, &[]), None);
        assert_eq!(rank_of("rank12.csv"), Some(12));
        assert_eq!(rank_of("rank012.csv"), None);
        assert_eq!(rank_of("rank.csv"), None);
    }

    #[test]
    fn rank_ranges() {
        assert_eq!(fmt_ranks(&[0, 1, 2, 3]), "0-3");
        assert_eq!(fmt_ranks(&[0, 2, 3]), "0,2-3");
        assert_eq!(fmt_ranks(&[3]), "3");
        assert_eq!(fmt_ranks(&[]), "none");
    }

    #[test]
    fn tables_align() {
        let t = render_table(&["a", "bb"], &[vec!["xxx".into(), "y".into()]]);
        assert_eq!(t, "a    bb\nxxx  y\n");
    }
}
