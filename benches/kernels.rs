//! Reduction kernels per datatype and op, next to memcpy, in GB/s of memory
//! traffic (bytes read + bytes written per second): one reduction of two
//! 1 MiB inputs into a 1 MiB accumulator reads 2 MiB and writes 1 MiB; a
//! memcpy of 1 MiB reads 1 MiB and writes 1 MiB. The buffers fit in L2, so
//! this measures the kernels' arithmetic, not the memory system.
//! `reduce_two` runs on the best instruction set the CPU has (what the
//! engines use), `reduce_two_portable` on the target's baseline.
//!
//!     cargo bench --bench kernels

use divan::Bencher;
use divan::counter::BytesCount;
use half::{bf16, f16};
use rankwise::RedOp;
use rankwise::core::{F8E4M3, F8E5M2};
use rankwise::kernels::{Arith, Isa, reduce_into_on};

const BYTES: usize = 1 << 20;

fn main() {
    divan::main();
}

#[divan::bench(
    types = [i8, u8, i32, u32, i64, u64, f16, bf16, f32, f64, F8E4M3, F8E5M2],
    args = ["sum", "prod", "max", "min", "avg", "premulsum"],
    sample_count = 30,
)]
fn reduce_two<T: Arith>(b: Bencher, op: &str) {
    reduce_two_on::<T>(b, op, Isa::detected());
}

#[divan::bench(
    types = [f16, bf16, f32, f64],
    args = ["sum", "avg", "premulsum"],
    sample_count = 30,
)]
fn reduce_two_portable<T: Arith>(b: Bencher, op: &str) {
    reduce_two_on::<T>(b, op, Isa::Portable);
}

fn reduce_two_on<T: Arith>(b: Bencher, op: &str, isa: Isa) {
    let n = BYTES / std::mem::size_of::<T>();
    let x: Vec<Vec<T>> = (0..2)
        .map(|r| (0..n).map(|i| T::from_f64(((i + r) % 7) as f64)).collect())
        .collect();
    let mut acc = vec![T::default(); n];
    // PreMulSum with a scalar that is not a power of two: its products round
    let op = match op {
        "premulsum" => RedOp::PreMulSum(0.3),
        o => RedOp::parse(o).expect("a built-in op"),
    };
    b.counter(BytesCount::new(3 * BYTES)).bench_local(|| {
        reduce_into_on(isa, &mut acc, op, 2, |s| &x[s]);
        divan::black_box(&acc);
    });
}

#[divan::bench(sample_count = 30)]
fn memcpy(b: Bencher) {
    let src = vec![1u8; BYTES];
    let mut dst = vec![0u8; BYTES];
    b.counter(BytesCount::new(2 * BYTES)).bench_local(|| {
        dst.copy_from_slice(divan::black_box(&src));
        divan::black_box(&dst);
    });
}
