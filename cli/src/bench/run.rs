//! The sweep: one launch of `nranks` rank threads (or, on the mpi engine,
//! this process's rank of the MPI job) runs every row, through the raw
//! face, exactly as nccl-tests drives NCCL.
//!
//! Per row and placement (out-of-place, then in-place): `warmup` untimed
//! calls, `iters` timed calls (each rank times each call; a call's time is
//! the slowest rank's, and the row reports the median over calls; rows that
//! stream from memory copy a probe buffer before each timed call, for their
//! copy bound, see [`Reprobe`]), then
//! `check` checked calls: fresh verifiable inputs ([`super::data`]), outputs
//! and a guard zone past them poisoned, one call, then every output element
//! of every rank compared with its closed-form value, the guard zone and (out
//! of place) the inputs checked untouched. The out-of-place timed calls are
//! the first checked call's: their last result is what is compared (with
//! `--fill random`, whose data no closed form checks, every checked call
//! is a fresh one).

use super::bound;
use super::buffers::{Bufs, bufs, check, fill_random, prepare};
use super::data::{Converter, Pattern};
use super::limits::{self, Available, Need};
use super::machine::{self, PROBE_BYTES, Probe};
use super::{Fill, Measure, Options, Row};
use rankwise::api::Comm;
use rankwise::core::{
    DataType, Element, Error, ErrorKind, Func, RedOp, Result, footprint_elems, layout,
};
use rankwise::engine::local::last_level_cache;
use rankwise::launch::{self, LaunchOptions};
use rankwise::with_element_type;
use std::sync::{Barrier, Mutex};
use std::time::Instant;

/// Elements checked past the end of every output.
pub const GUARD_ELEMS: usize = 64;

/// One line of the table before it runs.
#[derive(Clone, Copy, Debug)]
pub struct Plan {
    pub func: Func,
    pub dtype: DataType,
    pub op: Option<RedOp>,
    pub root: Option<usize>,
    /// the per-rank count of docs/reference/contracts.md §1
    pub q: usize,
}

impl Plan {
    /// nccl-tests' `size`: the bytes algbw divides by (§6).
    pub fn size(&self, nranks: usize) -> usize {
        self.func.alg_bytes(nranks, self.q, self.dtype.size())
    }
}

/// The rows `opts` asks for, in nccl-tests' order (datatype, op, root, size);
/// sizes too small for one element per rank are left out (see [`skipped`]).
pub fn plan(opts: &Options) -> Vec<Plan> {
    let sizes = opts.sizes();
    let mut plans = Vec::new();
    for &func in &opts.funcs {
        for &dtype in &opts.dtypes {
            let qs = counts(opts, &sizes, func, dtype);
            for op in ops(opts, func) {
                for root in roots(opts, func) {
                    plans.extend(qs.iter().map(|&q| Plan {
                        func,
                        dtype,
                        op,
                        root,
                        q,
                    }));
                }
            }
        }
    }
    plans
}

/// How many rows [`plan`] makes, without making them (the options may ask
/// for more than memory holds).
pub fn plan_len(opts: &Options) -> u128 {
    let sizes = opts.sizes();
    let mut rows = 0u128;
    for &func in &opts.funcs {
        let ops = if func.reduces() { opts.ops.len() } else { 1 };
        let roots = match (func.is_rooted(), opts.root) {
            (true, None) => opts.nranks,
            _ => 1,
        };
        for &dtype in &opts.dtypes {
            let qs = counts(opts, &sizes, func, dtype).len();
            rows += ops as u128 * roots as u128 * qs as u128;
        }
    }
    rows
}

/// The reduction ops of `func`'s rows (`None` for a copy).
fn ops(opts: &Options, func: Func) -> Vec<Option<RedOp>> {
    if func.reduces() {
        opts.ops.iter().copied().map(Some).collect()
    } else {
        vec![None]
    }
}

/// The roots of `func`'s rows (`None` for an unrooted collective).
fn roots(opts: &Options, func: Func) -> Vec<Option<usize>> {
    match (func.is_rooted(), opts.root) {
        (true, Some(r)) => vec![Some(r)],
        (true, None) => (0..opts.nranks).map(Some).collect(),
        (false, _) => vec![None],
    }
}

/// The per-rank counts of the sweep for `func` and `dtype`: each size's,
/// without those below one element per rank and without repeats.
fn counts(opts: &Options, sizes: &[usize], func: Func, dtype: DataType) -> Vec<usize> {
    let mut qs: Vec<usize> = sizes
        .iter()
        .map(|&b| per_rank_count(func, opts.nranks, dtype, b))
        .filter(|&q| q > 0)
        .collect();
    qs.dedup();
    qs
}

/// The per-rank count for nccl-tests' `size` in bytes (§6: the size is
/// N × the count for the gathered and scattered collectives).
fn per_rank_count(func: Func, n: usize, dtype: DataType, bytes: usize) -> usize {
    let total = bytes / dtype.size();
    if func.alg_bytes(n, 1, 1) == n && n > 1 {
        total / n
    } else {
        total
    }
}

/// Sizes of the sweep that give fewer than one element per rank for `func`.
pub fn skipped(opts: &Options, func: Func, dtype: DataType) -> Vec<usize> {
    let n = opts.nranks;
    opts.sizes()
        .into_iter()
        .filter(|b| per_rank_count(func, n, dtype, *b) == 0)
        .collect()
}

/// Whether a row's buffers (every rank's send and receive buffers, out of
/// place) are at least twice the last-level cache, so every call streams
/// from memory: such rows are bounded by memory bandwidth, and their bound
/// uses copy bandwidth measured between their timed calls ([`Reprobe`]).
/// Smaller rows keep their data in cache from one call to the next; a copy
/// between calls would evict it, so they use the header's figure.
pub fn from_memory(p: &Plan, nranks: usize) -> bool {
    let elems = footprint_elems(p.func, nranks, p.root.unwrap_or(0), p.q);
    elems * p.dtype.size() >= 2 * last_level_cache()
}

/// Copy bandwidth measured between the timed calls of rows that stream
/// from memory. On a shared machine the bandwidth other tenants leave
/// drifts by up to 2x within seconds, so each call is compared with copies
/// made under the same conditions: one probe before every timed call, and
/// the bound uses the median probe as the time uses the median call.
/// Rank 0 copies while the other ranks sleep on a blocking barrier: a rank
/// that spins would take a core from the copy.
struct Reprobe {
    probe: Mutex<Probe>,
    barrier: Barrier,
}

impl Reprobe {
    /// Called by every rank; rank 0 gets the copy bandwidth (all threads).
    fn between_calls(&self, rank: usize) -> Option<f64> {
        self.barrier.wait();
        let bw = (rank == 0).then(|| {
            let mut p = self.probe.lock().unwrap_or_else(|e| e.into_inner());
            p.copy_all()
        });
        self.barrier.wait();
        bw
    }
}

/// Elements of the two buffers every rank allocates for `plans` (rows of
/// one datatype): the first holds the send buffer out of place and the
/// whole region in place, the second the receive buffer out of place, each
/// followed by a guard zone. Every rank uses the same buffers for every
/// root, so they are the root's layout (docs/reference/contracts.md §1), the largest of
/// any rank's; an in-place region is the larger of its two buffers. `None`
/// when a count does not fit in the address space.
pub fn buffer_elems<'a>(
    plans: impl IntoIterator<Item = &'a Plan>,
    nranks: usize,
) -> Option<(usize, usize)> {
    let mut most = (0, 0);
    for p in plans {
        // `layout` multiplies the count by the ranks unchecked
        nranks.checked_mul(p.q)?;
        let root = p.root.unwrap_or(0);
        let l = layout(p.func, nranks, root, root, p.q);
        let first = l.send_elems.max(l.recv_elems).checked_add(GUARD_ELEMS)?;
        let second = l.recv_elems.checked_add(GUARD_ELEMS)?;
        most = (most.0.max(first), most.1.max(second));
    }
    Some(most)
}

/// Elements the checker holds at once per rank, in each of its (at most
/// three) host vectors: outputs and inputs are written and compared chunk
/// by chunk, so checking needs no copy of a whole buffer.
pub const CHECK_CHUNK: usize = 8192;

/// Thread stack of a rank: Rust's default for spawned threads, and its
/// guard page.
const STACK_BYTES: u64 = (2 << 20) + 4096;

/// Address space glibc's `malloc` maps for each thread arena it makes (it
/// makes one for a thread that finds the others busy, up to 8 per CPU).
const ARENA_BYTES: u64 = 64 << 20;

/// What one row costs rank 0 besides its buffers: its plan, its figures,
/// and its line of table or JSON.
const ROW_BYTES: u64 = (std::mem::size_of::<Plan>() + std::mem::size_of::<Row>() + 1024) as u64;

/// The memory the run of `plans` needs ([`Need`]), counted with checked
/// arithmetic: every rank's two buffers for the datatype that needs the
/// most ([`buffer_elems`]; the buffers of one datatype are freed before the
/// next), plus per rank a thread stack, the checker's chunks and the timed
/// calls' times, plus the rows, plus the copy-bandwidth probe's buffers
/// (one pair per core; the machine probe before the run and the probe
/// between timed calls do not overlap). Reserved besides: a `malloc` arena
/// for each thread that may run at once (main, ranks, probe threads), at
/// most 8 per online CPU, and one more while an arena is being made (glibc
/// maps twice an arena's size to align it).
pub fn memory_needed(opts: &Options, plans: &[Plan], cores: usize, cpus: usize) -> Need {
    let n = opts.nranks;
    let mut buffers = Some(0u64);
    let mut largest = String::from("no row");
    for &dtype in &opts.dtypes {
        let mine = || plans.iter().filter(|p| p.dtype == dtype);
        let Some(top) = mine().map(|p| p.size(n)).max() else {
            continue;
        };
        let bytes = buffer_elems(mine(), n)
            .and_then(|(a, b)| a.checked_add(b))
            .and_then(|e| e.checked_mul(dtype.size()))
            .and_then(|e| e.checked_mul(n))
            .and_then(|e| u64::try_from(e).ok());
        if bytes.is_none() || bytes > buffers {
            largest = format!("{n} ranks of {dtype} rows up to {top} bytes");
            buffers = bytes;
        }
        if bytes.is_none() {
            break;
        }
    }
    // the rest is bounded by Options::check; saturating keeps unchecked
    // options from wrapping
    let [n, cores, cpus, iters, rows] = [n, cores, cpus, opts.iters, plans.len()].map(|x| x as u64);
    let widest = opts.dtypes.iter().map(|d| d.size()).max().unwrap_or(0) as u64;
    let per_rank = STACK_BYTES
        + 3 * CHECK_CHUNK as u64 * widest
        // the converter's tables (`data::Converter`)
        + 4096 * widest
        + 256 * 16
        // each timed call's time, a copy to take the median, and a probe per call
        + (3 * 8u64).saturating_mul(iters);
    let rest = n
        .saturating_mul(per_rank)
        .saturating_add(rows.saturating_mul(ROW_BYTES))
        .saturating_add((2 * PROBE_BYTES as u64).saturating_mul(cores));
    let arenas = (1 + n).saturating_add(cores).min(8 * cpus) + 1;
    Need {
        buffers,
        largest,
        rest,
        reserved: arenas.saturating_mul(ARENA_BYTES),
    }
}

/// Whether the run of `plans` fits in `avail` ([`memory_needed`] on this
/// machine's cores, [`limits::fits`]).
pub fn fits(opts: &Options, plans: &[Plan], avail: &Available) -> std::result::Result<(), String> {
    let need = memory_needed(opts, plans, machine::cores(), machine::online_cpus());
    limits::fits(&need, avail)
}

/// Runs every planned row; `on_row` sees each finished row (called on rank 0).
/// `copy_bw` is the machine's copy bandwidth (all threads) for the copy
/// bound of rows that fit in cache; rows that stream from memory
/// ([`from_memory`]) measure it between their timed calls ([`Reprobe`]).
/// Options that [`Options::check`] refuses, and a run that does not fit in
/// the memory there is ([`fits`]), are refused before any thread starts or
/// any buffer is allocated.
pub fn run(opts: &Options, copy_bw: f64, on_row: &(dyn Fn(&Row) + Sync)) -> Result<Vec<Row>> {
    let refused = |e| Error::new(ErrorKind::InvalidUsage, e);
    opts.check().map_err(refused)?;
    let plans = plan(opts);
    fits(opts, &plans, &machine::available_memory()).map_err(refused)?;
    run_checked(opts, &plans, copy_bw, on_row)
}

/// [`run`] for a caller that has checked the options and that [`plan`]'s
/// rows fit (`rankwise bench` does, before it probes the machine: checking
/// again after the probe would count twice the address space the probe's
/// threads left behind).
pub fn run_checked(
    opts: &Options,
    plans: &[Plan],
    copy_bw: f64,
    on_row: &(dyn Fn(&Row) + Sync),
) -> Result<Vec<Row>> {
    let reprobe = (bound::applies(opts.engine)
        && plans.iter().any(|p| from_memory(p, opts.nranks)))
    .then(|| Reprobe {
        probe: Mutex::new(Probe::new()),
        barrier: Barrier::new(opts.nranks),
    });
    let reprobe = reprobe.as_ref();
    let options = LaunchOptions::default().with_pinned_threads(opts.pin);
    #[cfg(feature = "mpi")]
    if opts.engine == rankwise::launch::EngineKind::Mpi {
        // this process is one rank of the MPI job; the reprobe's barrier
        // is for threads, so rows that stream from memory use `copy_bw`
        let mut c = rankwise::mpi::init_with(options)?;
        let rows = rank_rows(&mut c, opts, plans, copy_bw, None, on_row);
        c.finish(rows.as_ref().err());
        return rows;
    }
    let mut per_rank = launch::launch_with(opts.engine, options, opts.nranks, |c| {
        rank_rows(c, opts, plans, copy_bw, reprobe, on_row)
    })?;
    Ok(per_rank.swap_remove(0))
}

/// One rank's part of the sweep: every row, rank 0 keeping (and passing
/// to `on_row`) the finished rows, the others none.
fn rank_rows(
    c: &mut Comm,
    opts: &Options,
    plans: &[Plan],
    copy_bw: f64,
    reprobe: Option<&Reprobe>,
    on_row: &(dyn Fn(&Row) + Sync),
) -> Result<Vec<Row>> {
    let mut rows = Vec::with_capacity(if c.rank() == 0 { plans.len() } else { 0 });
    // one pair of buffers per datatype, sized for its largest row
    for dtype in opts.dtypes.iter().copied() {
        let mine = || plans.iter().filter(move |p| p.dtype == dtype);
        if mine().next().is_none() {
            continue;
        }
        let (ea, eb) = buffer_elems(mine(), opts.nranks).ok_or_else(|| {
            Error::new(
                ErrorKind::InvalidUsage,
                format!("the {dtype} rows' buffers do not fit in the address space"),
            )
        })?;
        let a = c.alloc_elems(ea, dtype)?;
        let b = c.alloc_elems(eb, dtype)?;
        for p in mine() {
            let row =
                with_element_type!(dtype, T => run_row::<T>(c, opts, p, a, b, copy_bw, reprobe)?);
            if c.rank() == 0 {
                on_row(&row);
                rows.push(row);
            }
        }
        c.free(a)?;
        c.free(b)?;
    }
    Ok(rows)
}

pub(super) fn call(c: &mut Comm, p: &Plan, bf: &Bufs) -> Result<()> {
    let (s, r, q, dt) = (bf.send, bf.recv, p.q, p.dtype);
    let op = p.op.unwrap_or(RedOp::Sum);
    let root = p.root.unwrap_or(0) as i32;
    match p.func {
        Func::AllReduce => c.nccl_all_reduce(s, r, q, dt, op),
        Func::Reduce => c.nccl_reduce(s, r, q, dt, op, root),
        Func::ReduceScatter => c.nccl_reduce_scatter(s, r, q, dt, op),
        Func::AllGather => c.nccl_all_gather(s, r, q, dt),
        Func::Broadcast => c.nccl_broadcast(s, r, q, dt, root),
        Func::AlltoAll => c.nccl_all_to_all(s, r, q, dt),
        Func::Gather => c.nccl_gather(s, r, q, dt, root),
        Func::Scatter => c.nccl_scatter(s, r, q, dt, root),
        Func::Send | Func::Recv => unreachable!("the benchmark runs collectives only"),
    }
}

#[allow(clippy::too_many_arguments)]
fn run_row<T: Element>(
    c: &mut Comm,
    opts: &Options,
    p: &Plan,
    a: usize,
    b: usize,
    copy_bw: f64,
    reprobe: Option<&Reprobe>,
) -> Result<Row> {
    let n = opts.nranks;
    let oop = measure::<T>(c, opts, p, a, b, false, copy_bw, reprobe)?;
    let ip = if p.func == Func::AlltoAll {
        None
    } else {
        Some(measure::<T>(c, opts, p, a, b, true, copy_bw, reprobe)?)
    };
    Ok(Row {
        func: p.func,
        size: p.size(n),
        count: p.size(n) / p.dtype.size(),
        dtype: p.dtype,
        op: p.op,
        root: p.root,
        oop,
        ip,
    })
}

/// Times and checks one placement of one row; rank 0's figures are the row's.
#[allow(clippy::too_many_arguments)]
fn measure<T: Element>(
    c: &mut Comm,
    opts: &Options,
    p: &Plan,
    a: usize,
    b: usize,
    in_place: bool,
    copy_bw: f64,
    reprobe: Option<&Reprobe>,
) -> Result<Measure> {
    let (rank, n) = (c.rank(), opts.nranks);
    let es = p.dtype.size();
    let op = p.op.unwrap_or(RedOp::Sum);
    let mut conv = Converter::<T>::new(n, op);
    let pattern = |seed: u64| Pattern::new(p.func, p.dtype, op, n, p.root.unwrap_or(0), seed);
    let bf = bufs(p, &pattern(0), rank, a, b, in_place);

    // out of place, the timed calls compute the first checked result
    // unless they reduce random data
    let random = opts.fill == Fill::Random;
    if random {
        fill_random::<T>(c, p, &pattern(0), &bf, rank)?;
    } else if !in_place {
        prepare(c, p, &pattern(0), &mut conv, &bf, rank)?;
    }
    for _ in 0..opts.warmup {
        call(c, p, &bf)?;
    }
    let reprobe = reprobe.filter(|_| from_memory(p, n));
    let mut probes = Vec::new();
    let mut times = Vec::with_capacity(opts.iters);
    for i in 0..opts.iters {
        if let Some(r) = reprobe {
            probes.extend(r.between_calls(rank));
        }
        // start together (after a probe, ranks wake from the barrier at
        // different times)
        if i == 0 || reprobe.is_some() {
            c.all_reduce(&mut [0u8], RedOp::Sum)?;
        }
        let t = Instant::now();
        call(c, p, &bf)?;
        times.push(t.elapsed().as_secs_f64());
    }
    let copy_bw = if probes.is_empty() {
        copy_bw
    } else {
        median(&mut probes)
    };
    let mut wrong = 0u64;
    for k in 0..opts.check {
        let pat = pattern(k as u64);
        if in_place || k > 0 || random {
            prepare(c, p, &pat, &mut conv, &bf, rank)?;
            call(c, p, &bf)?;
        }
        wrong += check(c, p, &pat, &mut conv, &bf, rank, in_place)?;
    }
    // a call's time is its slowest rank's; #wrong sums every rank's
    c.all_reduce(&mut times, RedOp::Max)?;
    let mut w = [wrong];
    c.all_reduce(&mut w, RedOp::Sum)?;
    let median = median(&mut times.clone());
    let mean = times.iter().sum::<f64>() / times.len().max(1) as f64;
    let min = times.iter().copied().fold(f64::INFINITY, f64::min);
    let size = p.size(n) as f64;
    let algbw = size / median / 1e9;
    let bound_secs = bound::applies(opts.engine)
        .then(|| bound::copy_bound_secs(p.func, n, p.q, es, in_place, copy_bw));
    Ok(Measure {
        time_us: median * 1e6,
        mean_us: mean * 1e6,
        min_us: min * 1e6,
        algbw,
        busbw: algbw * p.func.bus_factor(n),
        wrong: (opts.check > 0).then_some(w[0]),
        bound_us: bound_secs.map(|b| b * 1e6),
        copy_bw_gbs: copy_bw / 1e9,
    })
}

/// Middle value (mean of the two middle ones for an even count).
pub fn median(v: &mut [f64]) -> f64 {
    if v.is_empty() {
        return f64::NAN;
    }
    v.sort_by(f64::total_cmp);
    let m = v.len() / 2;
    if v.len() % 2 == 1 {
        v[m]
    } else {
        (v[m - 1] + v[m]) / 2.0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_stream_from_memory_at_twice_the_last_level_cache() {
        // a 2-rank AllReduce of q f32 spans 2 ranks × (send + recv) = 16·q
        // bytes; ReduceScatter's send buffers are N times its output
        let row = |func, q| Plan {
            func,
            dtype: DataType::Float32,
            op: Some(RedOp::Sum),
            root: None,
            q,
        };
        let llc2 = 2 * last_level_cache();
        assert!(from_memory(&row(Func::AllReduce, llc2 / 16), 2));
        assert!(!from_memory(&row(Func::AllReduce, llc2 / 16 - 1), 2));
        // 4 ranks × (4q + q) f32 = 80·q bytes
        assert!(from_memory(&row(Func::ReduceScatter, llc2 / 80 + 1), 4));
        assert!(!from_memory(&row(Func::ReduceScatter, llc2 / 80 - 1), 4));
    }

    fn opts(funcs: &[Func], nranks: usize, min: usize, max: usize) -> Options {
        Options {
            funcs: funcs.to_vec(),
            nranks,
            min_bytes: min,
            max_bytes: max,
            factor: 2.0,
            dtypes: vec![DataType::Float32],
            ops: vec![RedOp::Sum],
            root: Some(0),
            iters: 20,
            warmup: 5,
            check: 1,
            fill: Fill::Pattern,
            pin: false,
            engine: rankwise::launch::EngineKind::Local,
        }
    }

    fn one(func: Func, q: usize) -> Plan {
        Plan {
            func,
            dtype: DataType::Float32,
            op: None,
            root: Some(1),
            q,
        }
    }

    #[test]
    fn buffers_are_the_roots_layout_and_a_guard() {
        // (send, receive) of the root for q = 10 on 4 ranks, from
        // docs/reference/contracts.md §1; the first buffer also holds the in-place region
        let g = GUARD_ELEMS;
        let cases = [
            (Func::AllReduce, 10 + g, 10 + g),
            (Func::Reduce, 10 + g, 10 + g),
            (Func::Broadcast, 10 + g, 10 + g),
            (Func::AllGather, 40 + g, 40 + g),
            (Func::ReduceScatter, 40 + g, 10 + g),
            (Func::AlltoAll, 40 + g, 40 + g),
            (Func::Gather, 40 + g, 40 + g),
            (Func::Scatter, 40 + g, 10 + g),
        ];
        for (func, first, second) in cases {
            assert_eq!(
                buffer_elems([&one(func, 10)], 4),
                Some((first, second)),
                "{func}"
            );
        }
        // one pair serves every row of a datatype: each buffer its largest
        let rows = [one(Func::ReduceScatter, 10), one(Func::AllGather, 3)];
        assert_eq!(buffer_elems(&rows, 4), Some((40 + g, 12 + g)));
        // a count the address space cannot hold is not laid out
        assert_eq!(
            buffer_elems([&one(Func::AllGather, usize::MAX / 2)], 4),
            None
        );
        assert_eq!(buffer_elems([&one(Func::AllReduce, usize::MAX)], 1), None);
    }

    #[test]
    fn memory_needed_counts_every_ranks_buffers() {
        // AllReduce of 2^30 floats on 2 ranks: 2 ranks × 2 buffers × (2^30 + 64) × 4
        let o = opts(&[Func::AllReduce], 2, 4 << 30, 4 << 30);
        let plans = plan(&o);
        let need = memory_needed(&o, &plans, 2, 2);
        assert_eq!(need.buffers, Some(2 * 2 * ((1 << 30) + 64) * 4));
        assert!(
            need.largest
                .contains("2 ranks of float rows up to 4294967296 bytes")
        );
        // stacks, chunks, times, rows, and 2 pairs of probe buffers
        let probe = 2 * 2 * PROBE_BYTES as u64;
        assert!(need.rest >= probe + 2 * (2 << 20) && need.rest < probe + (8 << 20));
        // arenas: main, 2 ranks, 2 probe threads, and one being made
        assert_eq!(need.reserved, 6 * ARENA_BYTES);
        // at most 8 arenas per CPU
        let wide = opts(&[Func::AllReduce], 256, 8, 8);
        let need = memory_needed(&wide, &plan(&wide), 2, 2);
        assert_eq!(need.reserved, 17 * ARENA_BYTES);
        // more than 2^64 bytes is said, not wrapped
        let o = opts(&[Func::AllGather], 4, 1 << 62, 1 << 62);
        assert_eq!(memory_needed(&o, &plan(&o), 1, 1).buffers, None);
    }

    #[test]
    fn plan_len_counts_the_plan_without_making_it() {
        let mut o = opts(&Func::COLLECTIVES, 3, 1, 1 << 20);
        o.dtypes = DataType::ALL.to_vec();
        o.ops = RedOp::BUILTIN.to_vec();
        for root in [Some(2), None] {
            o.root = root;
            assert_eq!(plan_len(&o), plan(&o).len() as u128);
        }
        // every root of 256 ranks, every datatype and op: counted, not made
        o.nranks = 256;
        assert!(plan_len(&o) > 100_000);
    }

    #[test]
    fn only_rank_zero_probes_between_calls() {
        let n = 3;
        let reprobe = Reprobe {
            probe: Mutex::new(Probe::new()),
            barrier: Barrier::new(n),
        };
        let got: Vec<Option<f64>> = std::thread::scope(|s| {
            let handles: Vec<_> = (0..n)
                .map(|r| {
                    let reprobe = &reprobe;
                    s.spawn(move || reprobe.between_calls(r))
                })
                .collect();
            handles.into_iter().map(|h| h.join().unwrap()).collect()
        });
        assert!(got[0].is_some_and(|bw| bw > 0.0), "{got:?}");
        assert!(got[1..].iter().all(Option::is_none), "{got:?}");
    }
}
