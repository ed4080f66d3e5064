//! The reduction kernels' time per element on data of different shapes,
//! Sum next to PreMulSum(0.3), in cache (two or four inputs of 1 MiB in
//! all per data set, eight sets, within the last-level cache): the 16-bit
//! fused step costs more where lanes land on a 16-bit midpoint, so its
//! speed depends on the data, which
//! `benches/kernels.rs` (one shape) does not show. Best of 30 rounds, each
//! reducing eight different data sets in turn (see [`SETS`]).
//!
//! Each op gets two figures: over the whole buffers at once, and through
//! blocks of [`reduction_block_bytes`] each stored to an output array, as
//! the local engine computes a large call (its per-block work and the
//! stores included): the time the engine's arithmetic takes, which the
//! memory traffic of a call from memory has to hide.
//!
//!     cargo run --release --example kernel_data [TYPE…]
//!
//! TYPE: float, half, bfloat16, f8e4m3, f8e5m2 (default: all of them).
//!
//! Shapes: `onehot` one nonzero input per element, a small integer (what
//! `rankwise bench` checks Avg and PreMulSum with); `same` every rank the
//! same value (a benchmark's in-place calls after the first); `rand`
//! random 11-bit significands over 10 binades, signs mixed.

#[path = "support/hash.rs"]
mod hash;
use half::{bf16, f16};
use hash::hash;
use rankwise::RedOp;
use rankwise::core::{F8E4M3, F8E5M2};
use rankwise::engine::local::reduction_block_bytes;
use rankwise::kernels::{Arith, Isa, reduce_blocks_on, reduce_into_on};
use std::time::Instant;

/// Element `i` of rank `r`'s input among `n`, in data set `set`.
fn value(shape: &str, n: usize, r: usize, i: usize, set: usize) -> f64 {
    let h = hash(((set << 40) + i * 16 + r) as u64);
    match shape {
        "onehot" if i % n == r => (1 + h % 200) as f64,
        "onehot" => 0.0,
        "same" => 0.45 * (1 + hash(((set << 40) + i) as u64) % 200) as f64,
        _ => f16::from_bits(((h & 0x83FF) | ((10 + (h >> 16) % 10) << 10)) as u16).to_f64(),
    }
}

/// Data sets reduced in turn: the processor's branch predictor learns
/// one set's outcomes when the same data comes round every pass (with one
/// set, bfloat16's PreMulSum at N = 2 measured 0.36 ns per element on
/// random data where unseen data takes 0.51), so the passes cycle
/// through more outcomes than it holds.
const SETS: usize = 8;

fn run<T: Arith>(name: &str, n: usize, shape: &str) {
    let len = (1 << 20) / std::mem::size_of::<T>() / n;
    let x: Vec<Vec<Vec<T>>> = (0..SETS)
        .map(|set| {
            (0..n)
                .map(|r| {
                    (0..len)
                        .map(|i| T::from_f64(value(shape, n, r, i, set)))
                        .collect()
                })
                .collect()
        })
        .collect();
    let mut acc = vec![T::default(); len];
    let mut line = format!("{name:9} N={n} {shape:7}");
    let mut out = vec![T::default(); len];
    let size = std::mem::size_of::<T>();
    let per_block = reduction_block_bytes(size) / size;
    let mut block = vec![T::default(); per_block];
    let isa = Isa::detected();
    for op in [RedOp::Sum, RedOp::Avg, RedOp::PreMulSum(0.3)] {
        let (mut whole, mut blocks) = (f64::MAX, f64::MAX);
        for _ in 0..30 {
            let t = Instant::now();
            for set in &x {
                reduce_into_on(isa, &mut acc, op, n, |s| &set[s]);
            }
            whole = whole.min(t.elapsed().as_secs_f64() / SETS as f64);
            let t = Instant::now();
            for set in &x {
                let starts = (0..len - len % per_block).step_by(per_block);
                let input = |s: usize, at: usize| &set[s][at..at + per_block];
                let emit = |at: usize, b: &[T]| out[at..at + per_block].copy_from_slice(b);
                reduce_blocks_on(isa, &mut block, starts, op, n, input, emit);
            }
            blocks = blocks.min(t.elapsed().as_secs_f64() / SETS as f64);
        }
        let ns = |secs: f64| secs * 1e9 / len as f64;
        line += &format!("  {op}: {:.3} / {:.3} ns", ns(whole), ns(blocks));
    }
    println!("{line}");
}

/// One type's rows: its name, N and the data's shape.
type Runner = fn(&str, usize, &str);

fn main() {
    let types: [(&str, Runner); 5] = [
        ("float", run::<f32>),
        ("half", run::<f16>),
        ("bfloat16", run::<bf16>),
        ("f8e4m3", run::<F8E4M3>),
        ("f8e5m2", run::<F8E5M2>),
    ];
    let wanted: Vec<String> = std::env::args().skip(1).collect();
    for w in &wanted {
        if !types.iter().any(|(name, _)| name == w) {
            eprintln!(
                "kernel_data: no type {w:?}; the types are float, half, bfloat16, f8e4m3, f8e5m2"
            );
            std::process::exit(2);
        }
    }
    println!(
        "ns per element, best of 30, on {:?}: whole buffers / blocks as the engine's \
         ({} bytes of 8- and 16-bit types, {} of wider ones)",
        Isa::detected(),
        reduction_block_bytes(1),
        reduction_block_bytes(4)
    );
    for n in [2, 4] {
        for shape in ["onehot", "same", "rand"] {
            for (name, run) in types {
                if wanted.is_empty() || wanted.iter().any(|w| w == name) {
                    run(name, n, shape);
                }
            }
        }
    }
}
