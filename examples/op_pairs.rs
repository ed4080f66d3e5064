//! Reductions measured against each other call by call: one 64 MiB
//! AllReduce per rank for each `TYPE:OP` given, the list run in turn (its
//! order rotating each round) in one process, out of place and in place,
//! and each call's time divided by that of the first `TYPE:OP` of the same
//! round and placement. On a machine whose memory bandwidth drifts with
//! its neighbours' load, calls a few milliseconds apart see the same
//! machine; runs of separate processes seconds apart often do not.
//!
//!     cargo run --release --example op_pairs -- N ROUNDS TYPE:OP…
//!     e.g. op_pairs 2 40 float:sum bfloat16:sum bfloat16:premulsum:0.3
//!
//! Prints, per `TYPE:OP` and placement, the median time [min–max] and the
//! median [min–max] of the per-round ratios. A call's time is its slowest
//! rank's (every rank starts after a one-byte AllReduce); threads pinned as
//! `rankwise bench` pins them; no checks (the tests check the values).
//! Inputs: 11-bit significands over ten binades, signs mixed (as
//! `kernel_data`'s `rand`), the same on every call: each in-place call
//! starts from a fresh copy of them, copied before the timed call.
//! `OP_PAIRS_MIB` sets the size per rank (default 64).

#[path = "support/hash.rs"]
mod hash;
use hash::hash;
use rankwise::launch::LaunchOptions;
use rankwise::{Comm, DataType, Element, RedOp, local, with_element_type};
use std::time::Instant;

/// One measured reduction.
#[derive(Clone, Copy)]
struct Item {
    dtype: DataType,
    op: RedOp,
}

fn parse(arg: &str) -> Result<Item, String> {
    let (t, op) = arg
        .split_once(':')
        .ok_or_else(|| format!("{arg:?}: expected TYPE:OP, e.g. bfloat16:sum"))?;
    let dtype = DataType::parse(t).ok_or_else(|| format!("{arg:?}: no datatype {t:?}"))?;
    if !dtype.is_float() {
        return Err(format!("{arg:?}: the floating-point types only"));
    }
    let op = match op.split_once(':') {
        Some(("premulsum", s)) => {
            RedOp::PreMulSum(s.parse().map_err(|_| format!("{arg:?}: scalar {s:?}"))?)
        }
        _ => RedOp::parse(op).ok_or_else(|| format!("{arg:?}: no reduction {op:?}"))?,
    };
    Ok(Item { dtype, op })
}

/// Rank `r`'s element `i`: ±m·2^e, m with 11 significant bits, e in −4…5.
fn value(r: usize, i: usize) -> f64 {
    let h = hash((i * 16 + r) as u64);
    let m = 1.0 + (h & 0x3FF) as f64 / 1024.0;
    let e = ((h >> 16) % 10) as i32 - 4;
    let sign = if h & 0x8000 == 0 { 1.0 } else { -1.0 };
    sign * m * 2f64.powi(e)
}

/// One rank's buffers for one item: the inputs, a pristine copy of them
/// for the in-place calls, and the output.
struct Bufs<T> {
    input: Vec<T>,
    work: Vec<T>,
    output: Vec<T>,
}

fn bufs<T: Element>(rank: usize, len: usize) -> Bufs<T> {
    let input: Vec<T> = (0..len).map(|i| T::from_f64(value(rank, i))).collect();
    Bufs {
        work: input.clone(),
        output: vec![T::from_f64(0.0); len],
        input,
    }
}

/// Times one call on this rank after the ranks meet.
fn timed(c: &mut Comm, call: impl FnOnce(&mut Comm) -> rankwise::Result<()>) -> f64 {
    c.all_reduce(&mut [0u8], RedOp::Sum).expect("barrier");
    let t = Instant::now();
    call(c).expect("the measured AllReduce");
    t.elapsed().as_secs_f64()
}

/// One item's buffers on one rank, whatever their element type.
trait Timed {
    /// Times one AllReduce with `op`, out of place or in place.
    fn time(&mut self, c: &mut Comm, op: RedOp, in_place: bool) -> f64;
}

impl<T: Element> Timed for Bufs<T> {
    fn time(&mut self, c: &mut Comm, op: RedOp, in_place: bool) -> f64 {
        if in_place {
            self.work.copy_from_slice(&self.input);
            timed(c, |c| c.all_reduce(&mut self.work, op))
        } else {
            timed(c, |c| c.all_reduce_into(&self.input, &mut self.output, op))
        }
    }
}

fn timed_bufs(dtype: DataType, rank: usize, bytes: usize) -> Box<dyn Timed> {
    let len = bytes / dtype.size();
    with_element_type!(dtype, T => Box::new(bufs::<T>(rank, len)))
}

/// `median [min–max]` of `v`, each value times `scale`, `digits` decimals.
fn spread(v: &[f64], scale: f64, digits: usize) -> String {
    let mut v: Vec<f64> = v.iter().map(|x| x * scale).collect();
    v.sort_by(f64::total_cmp);
    // the middle value, or the mean of the two middle ones
    let m = (v[(v.len() - 1) / 2] + v[v.len() / 2]) / 2.0;
    format!(
        "{m:.digits$} [{:.digits$}–{:.digits$}]",
        v[0],
        v[v.len() - 1]
    )
}

fn usage(why: &str) -> ! {
    eprintln!("op_pairs: {why}\nusage: op_pairs N ROUNDS TYPE:OP [TYPE:OP…]");
    std::process::exit(2)
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.len() < 4 {
        usage("expected N, ROUNDS and at least two TYPE:OP");
    }
    let n: usize = args[0]
        .parse()
        .unwrap_or_else(|_| usage("N: a number of ranks"));
    let rounds: usize = args[1]
        .parse()
        .ok()
        .filter(|r| *r > 0)
        .unwrap_or_else(|| usage("ROUNDS: a positive number"));
    let items: Vec<Item> = args[2..]
        .iter()
        .map(|a| parse(a).unwrap_or_else(|e| usage(&e)))
        .collect();
    let mib: usize = std::env::var("OP_PAIRS_MIB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64);
    let bytes = mib << 20;
    let k = items.len();
    let options = LaunchOptions::default().with_pinned_threads(true);
    // per rank: times[round][item][placement]
    let per_rank = local::launch_with(options, n, |c| {
        let mut bufs: Vec<Box<dyn Timed>> = items
            .iter()
            .map(|it| timed_bufs(it.dtype, c.rank(), bytes))
            .collect();
        // one untimed round: page faults and first touches
        for (b, it) in bufs.iter_mut().zip(&items) {
            b.time(c, it.op, false);
            b.time(c, it.op, true);
        }
        let mut times = vec![vec![[0.0f64; 2]; k]; rounds];
        for (round, row) in times.iter_mut().enumerate() {
            for j in 0..k {
                let i = (j + round) % k;
                for (p, in_place) in [false, true].into_iter().enumerate() {
                    row[i][p] = bufs[i].time(c, items[i].op, in_place);
                }
            }
            if c.rank() == 0 && (round + 1) % 10 == 0 {
                eprintln!("round {} of {rounds}", round + 1);
            }
        }
        Ok(times)
    })
    .unwrap_or_else(|e| {
        eprintln!("op_pairs: {e}");
        std::process::exit(1)
    });
    // a call's time is its slowest rank's
    let slowest = |round: usize, i: usize, p: usize| {
        per_rank.iter().map(|t| t[round][i][p]).fold(0.0, f64::max)
    };
    println!(
        "{mib} MiB AllReduce per rank, N = {n}, {rounds} rounds, ratios to {} in the same round",
        args[2]
    );
    println!("| type:op | placement | time (ms) | / {} |", args[2]);
    println!("|---|---|---|---|");
    for (i, arg) in args[2..].iter().enumerate() {
        for (p, name) in ["out of place", "in place"].into_iter().enumerate() {
            let t: Vec<f64> = (0..rounds).map(|r| slowest(r, i, p)).collect();
            let ratio: Vec<f64> = (0..rounds)
                .map(|r| slowest(r, i, p) / slowest(r, 0, p))
                .collect();
            println!(
                "| {arg} | {name} | {} | {} |",
                spread(&t, 1e3, 3),
                spread(&ratio, 1.0, 2)
            );
        }
    }
}
