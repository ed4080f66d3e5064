//! `rankwise bench`: nccl-tests' sweep and table for rankwise's engines.
//!
//! This module owns everything the benchmark needs and nothing the engines
//! need (its command line is `commands::bench`): the size sweep and the bounds
//! every input is checked against before anything is allocated
//! ([`limits`]), the row plan, the memory it needs and the run itself
//! ([`run`]), a rank's buffers in a row and what is written and checked
//! in them ([`buffers`]), verifiable data and the element-wise checker
//! behind `#wrong` ([`data`]), the machine probe (cores, memory-copy bandwidth, available
//! memory, [`machine`]), the copy bound of every collective ([`bound`]),
//! and the outputs: the nccl-tests table ([`table`]), JSON, and an SVG plot
//! ([`plot`]).
//!
//! Bandwidth follows docs/reference/contracts.md §6 through [`Func::alg_bytes`] and
//! [`Func::bus_factor`]; a row's time is the median over the timed calls of
//! the slowest rank's time.

pub mod bound;
pub mod buffers;
pub mod data;
pub mod limits;
pub mod machine;
pub mod plot;
pub mod run;
pub mod table;

pub use machine::Machine;

use rankwise::core::{DataType, Func, RedOp};

/// What the timed calls reduce (`--fill`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, clap::ValueEnum)]
#[serde(rename_all = "lowercase")]
pub enum Fill {
    /// The small integers the checks verify (for float Avg and PreMulSum,
    /// one rank holding each element)
    Pattern,
    /// ±m·2^e, m of 11 significant bits, e in −4…5, signs mixed, as in
    /// gradients; the checked calls then run on the pattern
    Random,
}

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
    /// what the timed calls reduce
    pub fill: Fill,
    /// pin rank r to core r when ranks <= cores
    pub pin: bool,
    /// The engine the ranks run on.
    pub engine: rankwise::launch::EngineKind,
}

impl Options {
    /// Whether the options are inside [`limits`]' bounds: ranks, sizes,
    /// calls per row and the number of rows (not memory: that is the
    /// machine's, [`run::memory_needed`]).
    pub fn check(&self) -> Result<(), String> {
        limits::ranks(self.nranks, crate::MAX_LOCAL_RANKS)?;
        limits::sweep(self.min_bytes, self.max_bytes, self.factor)?;
        limits::calls("-n", self.iters, 1)?;
        limits::calls("-w", self.warmup, 0)?;
        limits::calls("-c", self.check, 0)?;
        if let Some(r) = self.root
            && r >= self.nranks
        {
            return Err(format!(
                "root {r} is out of range: valid roots are 0..={}",
                self.nranks - 1
            ));
        }
        let rows = run::plan_len(self);
        if rows == 0 {
            // the smallest size that holds one element per rank (§6)
            let (least, func, dtype) = self
                .funcs
                .iter()
                .flat_map(|&f| self.dtypes.iter().map(move |&d| (f, d)))
                .map(|(f, d)| (f.alg_bytes(self.nranks, 1, d.size()), f, d))
                .min_by_key(|x| x.0)
                .ok_or("no collective or datatype to run")?;
            return Err(format!(
                "no size from -b {} to -e {} holds one element per rank: {func} of {dtype} on {} ranks needs at least {least} bytes",
                self.min_bytes, self.max_bytes, self.nranks
            ));
        }
        limits::rows(rows)
    }

    /// The sweep ([`limits::sweep`]); empty for the options
    /// `commands::bench::Args::options` refuses (a size of 0, `-b` above `-e`, a
    /// factor that makes more than [`limits::MAX_SIZES`] sizes).
    pub fn sizes(&self) -> Vec<usize> {
        limits::sweep(self.min_bytes, self.max_bytes, self.factor).unwrap_or_default()
    }
}

/// One placement's figures.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Measure {
    /// median over timed calls of the slowest rank, in microseconds
    pub time_us: f64,
    pub mean_us: f64,
    pub min_us: f64,
    /// GB/s: `size / time` (docs/reference/contracts.md §6)
    pub algbw: f64,
    /// GB/s: `algbw × bus factor`
    pub busbw: f64,
    /// wrong elements over all ranks and checked calls; `None` when `-c 0`
    pub wrong: Option<u64>,
    /// the copy bound's time for this row ([`bound`]), in microseconds;
    /// `None` on the nccl engine, whose buffers are in GPU memory, which
    /// the host's copy bandwidth says nothing about
    pub bound_us: Option<f64>,
    /// the copy bandwidth (all threads, GB/s) the bound used: the median of
    /// copies between the timed calls for rows that stream from memory
    /// ([`run::from_memory`]), else the header's
    pub copy_bw_gbs: f64,
}

impl Measure {
    /// Fraction of the copy bound reached: bound time / time.
    pub fn of_bound(&self) -> Option<f64> {
        self.bound_us.map(|b| b / self.time_us)
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
            engine: options.engine.name(),
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
