//! The full suite's additions to the seed:
//! - native: every collective (the NCCL 2.28 AlltoAll, Gather and Scatter
//!   included) × every datatype × every reduction op that applies × counts
//!   0, 1, 7 and 13 (which no N > 1 below 7 divides) × out-of-place and
//!   in-place, with the root rotating over the ranks; then every legal root
//!   of every rooted op, out-of-place (NULL where allowed) and in place;
//! - framework: the typed entry points the seed does not call (`gather`,
//!   `scatter` and their in-place forms at every root, out-of-place
//!   `reduce`, `all_to_all_single` without splits, `all_reduce_into`,
//!   `all_gather_in_place`, `reduce_scatter_in_place`) across datatypes.

use super::framework::Kind;
use super::native::{Inputs, Spec};
use super::{Body, Case, Layer};
use rankwise::core::{DataType, Func, RedOp};

/// Counts of the matrix: empty, one element, and two primes.
pub const COUNTS: [usize; 4] = [0, 1, 7, 13];
/// The count of the every-root sweep (not in [`COUNTS`], so its variants are distinct).
pub const ROOT_SWEEP_COUNT: usize = 5;

fn placement(in_place: bool) -> &'static str {
    if in_place { "in-place" } else { "out-of-place" }
}

fn case(spec: Spec, variant: String) -> Case {
    Case {
        layer: Layer::Native,
        operation: spec.func.name().to_string(),
        variant,
        dtype: spec.dtype,
        body: Body::Native(spec),
        note: String::new(),
    }
}

pub fn native(n: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    let mut turn = 0usize;
    let mut next_root = |rooted: bool| {
        turn += 1;
        if rooted { (turn - 1) % n } else { 0 }
    };
    for func in [Func::AllReduce, Func::ReduceScatter, Func::Reduce] {
        for dt in DataType::ALL {
            for op in RedOp::BUILTIN {
                for q in COUNTS {
                    for in_place in [false, true] {
                        let root = next_root(func.is_rooted());
                        let at = if func.is_rooted() {
                            format!(" root {root}")
                        } else {
                            String::new()
                        };
                        let variant = format!("{dt} {op} count {q}{at} {}", placement(in_place));
                        cases.push(case(
                            matrix(func, dt, q, op, root, in_place, false),
                            variant,
                        ));
                    }
                }
            }
        }
    }
    for func in [
        Func::Broadcast,
        Func::AllGather,
        Func::AlltoAll,
        Func::Gather,
        Func::Scatter,
    ] {
        for dt in DataType::ALL {
            for q in COUNTS {
                for in_place in [false, true] {
                    if in_place && func == Func::AlltoAll {
                        continue;
                    }
                    let root = next_root(func.is_rooted());
                    let at = if func.is_rooted() {
                        format!(" root {root}")
                    } else {
                        String::new()
                    };
                    let variant = format!("{dt} count {q}{at} {}", placement(in_place));
                    cases.push(case(
                        matrix(func, dt, q, RedOp::Sum, root, in_place, false),
                        variant,
                    ));
                }
            }
        }
    }
    for func in [Func::Reduce, Func::Broadcast, Func::Gather, Func::Scatter] {
        for root in 0..n {
            for in_place in [false, true] {
                let q = ROOT_SWEEP_COUNT;
                let variant = format!("int32 count {q} root {root} {}", placement(in_place));
                cases.push(case(
                    matrix(func, DataType::Int32, q, RedOp::Sum, root, in_place, true),
                    variant,
                ));
            }
        }
    }
    cases
}

fn matrix(
    func: Func,
    dtype: DataType,
    count: usize,
    op: RedOp,
    root: usize,
    in_place: bool,
    null: bool,
) -> Spec {
    Spec {
        func,
        dtype,
        count,
        op,
        root: root as i64,
        in_place,
        null_when_allowed: null,
        inputs: Inputs::Matrix,
    }
}

fn typed(operation: &str, variant: String, dtype: DataType, kind: Kind) -> Case {
    Case {
        layer: Layer::Framework,
        operation: operation.to_string(),
        variant,
        dtype,
        body: Body::Framework(kind),
        note: String::new(),
    }
}

pub fn framework(n: usize) -> Vec<Case> {
    let mut cases = Vec::new();
    let q = 3;
    for root in 0..n {
        for in_place in [false, true] {
            let (g, s) = if in_place {
                ("gather_in_place", "scatter_in_place")
            } else {
                ("gather", "scatter")
            };
            cases.push(typed(
                "Gather",
                format!("{g} int64 count {q} root {root}"),
                DataType::Int64,
                Kind::Gather { root, in_place, q },
            ));
            cases.push(typed(
                "Scatter",
                format!("{s} int64 count {q} root {root}"),
                DataType::Int64,
                Kind::Scatter { root, in_place, q },
            ));
        }
        cases.push(typed(
            "Reduce",
            format!("reduce out-of-place int64 count {q} root {root}"),
            DataType::Int64,
            Kind::ReduceTo { root, q },
        ));
    }
    for q in [0, 1, 7] {
        cases.push(typed(
            "AlltoAll",
            format!("no splits (ncclAlltoAll) int64 count {q}"),
            DataType::Int64,
            Kind::AlltoAllSingle { q },
        ));
    }
    for dt in DataType::ALL {
        let q = 7;
        cases.push(typed(
            "AllReduce",
            format!("all_reduce_into {dt} sum count {q}"),
            dt,
            Kind::AllReduceInto { op: RedOp::Sum, q },
        ));
        cases.push(typed(
            "AllGather",
            format!("all_gather_in_place {dt} count {q}"),
            dt,
            Kind::AllGatherInPlace { q },
        ));
        cases.push(typed(
            "ReduceScatter",
            format!("reduce_scatter_in_place {dt} sum count {q}"),
            dt,
            Kind::ReduceScatterInPlace { op: RedOp::Sum, q },
        ));
    }
    for op in RedOp::BUILTIN {
        let q = 13;
        cases.push(typed(
            "AllReduce",
            format!("all_reduce_into int32 {op} count {q}"),
            DataType::Int32,
            Kind::AllReduceInto { op, q },
        ));
        cases.push(typed(
            "ReduceScatter",
            format!("reduce_scatter_in_place float {op} count {q}"),
            DataType::Float32,
            Kind::ReduceScatterInPlace { op, q },
        ));
    }
    cases
}
