//! The benchmark's checker as a conformance sweep: every collective, every
//! datatype and reduction op, every root, odd rank counts and sizes that
//! cross the engine's chunk, share and streaming thresholds, each output
//! element of every rank compared with its closed-form value (and guard
//! zones and out-of-place inputs checked untouched).

use rankwise::{DataType, Func, RedOp};
use rankwise_cli::bench::{Fill, Options, run};

fn opts(
    funcs: &[Func],
    nranks: usize,
    min: usize,
    max: usize,
    factor: f64,
    dtypes: &[DataType],
    ops: &[RedOp],
) -> Options {
    Options {
        funcs: funcs.to_vec(),
        nranks,
        min_bytes: min,
        max_bytes: max,
        factor,
        dtypes: dtypes.to_vec(),
        ops: ops.to_vec(),
        root: None,
        iters: 1,
        warmup: 0,
        check: 2,
        fill: Fill::Pattern,
        pin: false,
        engine: rankwise::launch::EngineKind::Local,
    }
}

fn assert_all_right(o: &Options) -> usize {
    let rows = run::run(o, 1e10, &|_| {}).expect("the sweep runs");
    assert!(!rows.is_empty());
    for r in &rows {
        for m in r.measures() {
            assert_eq!(
                m.wrong,
                Some(0),
                "{} {} {:?} root {:?} size {}: wrong elements",
                r.func,
                r.dtype,
                r.op,
                r.root,
                r.size
            );
        }
    }
    rows.len()
}

#[test]
fn every_collective_datatype_and_op_on_odd_sizes() {
    for n in [1, 3, 4] {
        // 1 to 4 KiB by x7: counts that do not divide into lines or ranks
        let o = opts(
            &Func::COLLECTIVES,
            n,
            1,
            4096,
            7.0,
            &DataType::ALL,
            &RedOp::BUILTIN,
        );
        assert_all_right(&o);
    }
}

#[test]
fn large_sizes_cross_the_chunk_and_streaming_thresholds() {
    // 5 ranks so shares are uneven; up to 1.8 MB, so outputs of 9 MB and more stream
    let o = opts(
        &Func::COLLECTIVES,
        5,
        300_000,
        2 << 20,
        6.0,
        &[DataType::Float32],
        &[RedOp::Sum],
    );
    assert_all_right(&o);
    let o = opts(
        &[Func::AllReduce, Func::ReduceScatter],
        2,
        1 << 20,
        1 << 20,
        2.0,
        &[DataType::Float64, DataType::Bfloat16, DataType::Int8],
        &[RedOp::Max, RedOp::Avg],
    );
    assert_all_right(&o);
}

#[test]
fn timed_calls_on_random_data_leave_the_checks_on_the_pattern() {
    // the out-of-place timed calls' result is not the pattern's, so a
    // check that reused it (as it does with the pattern) would count
    // nearly every element wrong
    let floats = [DataType::Float32, DataType::Bfloat16];
    let sets: [(&[DataType], &[RedOp]); 2] = [
        (&floats, &[RedOp::Sum, RedOp::Avg, RedOp::PreMulSum(0.3)]),
        (&[DataType::Int32], &[RedOp::Sum, RedOp::Avg]),
    ];
    for (dtypes, ops) in sets {
        let mut o = opts(&Func::COLLECTIVES, 3, 1000, 4000, 4.0, dtypes, ops);
        o.fill = Fill::Random;
        o.check = 1;
        assert_all_right(&o);
    }
}

#[test]
fn oversubscribed_ranks_complete() {
    let o = opts(
        &[Func::AllReduce, Func::AllGather],
        9,
        8,
        64 << 10,
        16.0,
        &[DataType::Float32],
        &[RedOp::Sum],
    );
    assert_all_right(&o);
}
