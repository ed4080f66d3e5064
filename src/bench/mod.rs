//! `rankwise bench`: nccl-tests' sweep and table for rankwise's engines.
//!
//! This module owns everything the benchmark needs and nothing the engines
//! need: the command's options ([`cli`]), the size sweep and row plan
//! ([`run`]), verifiable data and the element-wise checker behind `#wrong`
//! ([`data`]), the machine probe (cores, memory-copy bandwidth, [`machine`]),
//! the copy bound of every collective ([`bound`]), and the outputs: the
//! nccl-tests table ([`table`]), JSON, and an SVG plot ([`plot`]).
//!
//! Bandwidth follows CONTRACTS.md §6 through [`Func::alg_bytes`] and
//! [`Func::bus_factor`]; a row's time is the median over the timed calls of
//! the slowest rank's time.

pub mod bound;
pub mod cli;
pub mod data;
pub mod machine;
pub mod plot;
pub mod run;
pub mod table;

pub use cli::{BenchArgs, main};
pub use machine::Machine;

use crate::core::{DataType, Func, RedOp};

/// What to run (the parsed command line).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Options {
    pub funcs: Vec<Func>,
    pub nranks: usize,
    pub min_bytes: usize,
    pub max_bytes: usize,
    pub factor: f64,
    pub dtypes: Vec<DataType>,
    pub ops: Vec<RedOp>,
    /// `None`: every root
    pub root: Option<usize>,
    pub iters: usize,
    pub warmup: usize,
    /// checked calls per row and placement; 0 disables checking (and says so)
    pub check: usize,
    /// pin rank r to core r when ranks <= cores
    pub pin: bool,
}

impl Options {
    /// The sweep: `min_bytes`, then × `factor` up to `max_bytes`.
    pub fn sizes(&self) -> Vec<usize> {
        let mut out = Vec::new();
        let mut s = self.min_bytes.max(1) as f64;
        while s <= self.max_bytes as f64 * (1.0 + 1e-9) {
            let b = s.round() as usize;
            if out.last() != Some(&b) {
                out.push(b);
            }
            if self.factor <= 1.0 {
                break;
            }
            s *= self.factor;
        }
        out
    }
}

/// One placement's figures.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Measure {
    /// median over timed calls of the slowest rank, in microseconds
    pub time_us: f64,
    pub mean_us: f64,
    pub min_us: f64,
    /// GB/s: `size / time` (CONTRACTS.md §6)
    pub algbw: f64,
    /// GB/s: `algbw × bus factor`
    pub busbw: f64,
    /// wrong elements over all ranks and checked calls; `None` when `-c 0`
    pub wrong: Option<u64>,
    /// the copy bound's time for this row ([`bound`]), in microseconds
    pub bound_us: f64,
    /// the copy bandwidth (all threads, GB/s) the bound used: the median of
    /// copies between the timed calls for rows that stream from memory
    /// ([`run::from_memory`]), else the header's
    pub copy_bw_gbs: f64,
}

impl Measure {
    /// Fraction of the copy bound reached: bound time / time.
    pub fn of_bound(&self) -> f64 {
        self.bound_us / self.time_us
    }
}

/// One line of the table.
#[derive(Debug, Clone, serde::Serialize)]
pub struct Row {
    pub func: Func,
    /// nccl-tests' size: the bytes algbw divides by
    pub size: usize,
    /// `size / datatype size`
    pub count: usize,
    pub dtype: DataType,
    pub op: Option<RedOp>,
    pub root: Option<usize>,
    /// out-of-place
    pub oop: Measure,
    /// in-place; `None` for AlltoAll, which has no in-place form
    pub ip: Option<Measure>,
}

impl Row {
    pub fn measures(&self) -> impl Iterator<Item = &Measure> {
        std::iter::once(&self.oop).chain(self.ip.as_ref())
    }
}

/// Everything one run produced (the `--json` document).
#[derive(Debug, Clone, serde::Serialize)]
pub struct Report {
    pub engine: &'static str,
    pub options: Options,
    pub machine: Machine,
    pub rows: Vec<Row>,
    /// total wrong elements (nccl-tests' "Out of bounds values"); `None` when unchecked
    pub out_of_bounds: Option<u64>,
    /// mean busbw over every placement of every row, GB/s
    pub avg_busbw: f64,
}

impl Report {
    pub fn new(options: Options, machine: Machine, rows: Vec<Row>) -> Report {
        let checked = options.check > 0;
        let wrong: u64 = rows
            .iter()
            .flat_map(|r| r.measures())
            .filter_map(|m| m.wrong)
            .sum();
        let bws: Vec<f64> = rows
            .iter()
            .flat_map(|r| r.measures())
            .map(|m| m.busbw)
            .collect();
        let avg_busbw = if bws.is_empty() {
            0.0
        } else {
            bws.iter().sum::<f64>() / bws.len() as f64
        };
        Report {
            engine: "local",
            options,
            machine,
            rows,
            out_of_bounds: checked.then_some(wrong),
            avg_busbw,
        }
    }
    /// Whether every checked element was right (false when nothing was checked is not failure).
    pub fn all_right(&self) -> bool {
        self.out_of_bounds.unwrap_or(0) == 0
    }
}
