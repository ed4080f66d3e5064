//! What the cross-rank agreement check costs per call: 8-byte AllReduce
//! latency with and without it, interleaved in one run.
//!
//! `cargo run --release --example check_cost`

use rankwise::RedOp;
use rankwise::local::{self, LaunchOptions};
use std::time::{Duration, Instant};

const ITERS: u32 = 20_000;
const WARMUP: u32 = 2_000;
const ROUNDS: usize = 7;

/// Mean time per AllReduce of 2 f32 on rank 0, over ITERS calls.
fn per_call(n: usize, opts: LaunchOptions) -> Duration {
    let times = local::launch_with(opts, n, |c| {
        let mut x = [1.0f32, 2.0];
        for _ in 0..WARMUP {
            c.all_reduce(&mut x, RedOp::Sum)?;
        }
        let t = Instant::now();
        for _ in 0..ITERS {
            c.all_reduce(&mut x, RedOp::Sum)?;
        }
        Ok(t.elapsed() / ITERS)
    })
    .expect("matched program");
    times[0]
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

fn main() {
    println!(
        "8-byte AllReduce, mean per call over {ITERS} calls, median of {ROUNDS} interleaved rounds"
    );
    println!(
        "{:>5} {:>14} {:>14} {:>14}",
        "ranks", "checked", "unchecked", "check cost"
    );
    for n in [1, 2, 4] {
        let (mut on, mut off) = (Vec::new(), Vec::new());
        for _ in 0..ROUNDS {
            let base = LaunchOptions::default().with_tracer(rankwise::trace::Tracer::off());
            on.push(per_call(n, base.clone()));
            // SAFETY: every rank makes exactly the same calls.
            off.push(per_call(n, unsafe { base.without_agreement_checks() }));
        }
        let (a, b) = (median(on), median(off));
        let diff = a.as_nanos() as i128 - b.as_nanos() as i128;
        println!(
            "{n:>5} {:>12.2}µs {:>12.2}µs {:>12}ns",
            a.as_secs_f64() * 1e6,
            b.as_secs_f64() * 1e6,
            diff
        );
    }
}
