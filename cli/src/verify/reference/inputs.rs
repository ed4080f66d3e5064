//! The contract's outputs from every rank's inputs, and the full suite's
//! input schemes, chosen so every reduction is exact in every datatype.

use super::arith::{exact_limit, reduce, signed};
use super::seed::encode;
use rankwise::core::{DataType, F8E4M3, F8E5M2, Func, RedOp, Scalar};

/// The output the contract defines on `rank` (docs/reference/contracts.md §1), from every
/// rank's send buffer `inputs[s]`; None where the rank has no defined output
/// (Reduce and Gather off the root).
pub fn contract_output(
    func: Func,
    op: RedOp,
    dt: DataType,
    rank: usize,
    root: usize,
    q: usize,
    inputs: &[Vec<Scalar>],
) -> Option<Vec<Scalar>> {
    let n = inputs.len();
    let across = |at: usize| -> Scalar {
        let xs: Vec<Scalar> = inputs.iter().map(|x| x[at]).collect();
        reduce(op, dt, &xs)
    };
    Some(match func {
        Func::AllReduce => (0..q).map(across).collect(),
        Func::Reduce if rank == root => (0..q).map(across).collect(),
        Func::Broadcast => inputs[root][..q].to_vec(),
        Func::AllGather => inputs.iter().flat_map(|x| x[..q].to_vec()).collect(),
        Func::ReduceScatter => (0..q).map(|j| across(rank * q + j)).collect(),
        Func::AlltoAll => (0..n)
            .flat_map(|s| inputs[s][rank * q..(rank + 1) * q].to_vec())
            .collect(),
        Func::Gather if rank == root => inputs.iter().flat_map(|x| x[..q].to_vec()).collect(),
        Func::Scatter => inputs[root][rank * q..(rank + 1) * q].to_vec(),
        _ => return None,
    })
}

/// The finite fp8 values other than -0, in code order: a palette of distinct
/// values a byte-moving op must deliver bit for bit.
fn fp8_palette(dt: DataType) -> &'static [f64] {
    use std::sync::OnceLock;
    static E4M3: OnceLock<Vec<f64>> = OnceLock::new();
    static E5M2: OnceLock<Vec<f64>> = OnceLock::new();
    let build = |decode: fn(u8) -> f32| -> Vec<f64> {
        (0..=255u8)
            .filter(|c| *c != 0x80)
            .map(decode)
            .filter(|v| v.is_finite())
            .map(f64::from)
            .collect()
    };
    match dt {
        DataType::Float8e4m3 => E4M3.get_or_init(|| build(|c| F8E4M3(c).to_f32())),
        _ => E5M2.get_or_init(|| build(|c| F8E5M2(c).to_f32())),
    }
}

/// The `k`-th value of the type's palette of distinct exact values; wraps
/// for the narrow types (8-bit integers: 256 values, half: 4097, bfloat16:
/// 513, fp8: its finite codes).
pub fn palette(dt: DataType, k: u64) -> f64 {
    use DataType::*;
    match dt {
        Int8 => (k % 256) as u8 as i8 as f64,
        Uint8 => (k % 256) as f64,
        Float16 | Bfloat16 => {
            let l = exact_limit(dt);
            let m = k % (2 * l + 1);
            if m <= l {
                m as f64
            } else {
                m as f64 - (2 * l + 1) as f64
            }
        }
        Float8e4m3 | Float8e5m2 => {
            let p = fp8_palette(dt);
            p[(k % p.len() as u64) as usize]
        }
        _ => k as f64,
    }
}

/// A data-moving op's input element: rank `s`'s block for destination `d`,
/// offset `o` (a buffer with a single block uses `d = 0`). The seed's
/// `s*10000 + d*100 + o` where the type holds every such code exactly;
/// otherwise the dense index `(s·N + d)·q + o` through the type's palette.
pub fn movement_value(dt: DataType, n: usize, q: usize, s: usize, d: usize, o: usize) -> f64 {
    let seed_fits = n <= 100
        && q <= 100
        && ((n.max(1) - 1) * 10000 + (n.max(1) - 1) * 100 + 99) as u64 <= exact_limit(dt);
    if seed_fits {
        encode(s, d, o)
    } else {
        palette(dt, ((s * n + d) * q + o) as u64)
    }
}

/// Inputs for a sum (and Avg) that no partial sum can round or overflow:
/// magnitudes at most `limit/N` (and at most 9, to stay readable); when N
/// exceeds the limit, zeros and ones with at most `limit` ones per element.
pub fn sum_input(dt: DataType, n: usize, s: usize, j: usize) -> f64 {
    let limit = exact_limit(dt);
    let v = (limit / n as u64).min(9);
    if v == 0 {
        let p = (n as u64).div_ceil(limit) as usize;
        return f64::from((s + j).is_multiple_of(p));
    }
    let h = (s * 7 + j * 3 + 1) as u64;
    if signed(dt) {
        (h % (2 * v + 1)) as f64 - v as f64
    } else {
        (h % (v + 1)) as f64
    }
}

/// Inputs for a product: 1, 2 or (signed types) -1, with at most six 2s per
/// element across ranks, so every product is a power of two of magnitude <= 64.
pub fn prod_input(dt: DataType, n: usize, s: usize, j: usize) -> f64 {
    let p = n.div_ceil(6).max(2);
    if (s + 2 * j).is_multiple_of(p) {
        2.0
    } else if signed(dt) && (s * 3 + j) % 5 == 1 {
        -1.0
    } else {
        1.0
    }
}

/// Inputs for Max/Min: small integers (|v| <= 5), varied across ranks and elements.
pub fn minmax_input(dt: DataType, s: usize, j: usize) -> f64 {
    let h = ((s * 5 + j * 3 + 2) % 11) as f64;
    if signed(dt) { h - 5.0 } else { h }
}

/// Rank `s`'s send buffer of `len` elements for the full suite's `func` with
/// API count `q` and reduction `op`.
pub fn matrix_input(
    func: Func,
    op: RedOp,
    dt: DataType,
    n: usize,
    s: usize,
    q: usize,
    len: usize,
) -> Vec<f64> {
    (0..len)
        .map(|j| {
            if func.reduces() {
                match op {
                    RedOp::Prod => prod_input(dt, n, s, j),
                    RedOp::Max | RedOp::Min => minmax_input(dt, s, j),
                    _ => sum_input(dt, n, s, j),
                }
            } else {
                encoded_element(dt, n, s, q, len, j)
            }
        })
        .collect()
}

/// Element `j` of rank `s`'s encoded send buffer of `len` elements: a
/// buffer of `N·q` elements is `N` blocks by destination, any other a
/// single block (`d = 0`); see [`movement_value`].
pub fn encoded_element(dt: DataType, n: usize, s: usize, q: usize, len: usize, j: usize) -> f64 {
    if q > 0 && len == n * q && len > q {
        movement_value(dt, n, q, s, j / q, j % q)
    } else {
        movement_value(dt, n, q.max(len), s, 0, j)
    }
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use rankwise::core::{DataType, Func, RedOp};

    /// Every reduction of the full suite's inputs is exact in its type: the
    /// result round-trips through the type unchanged, for every N up to 40.
    #[test]
    fn matrix_reductions_are_exact_in_every_type() {
        for dt in DataType::ALL {
            for n in 1..=40 {
                for op in RedOp::BUILTIN {
                    let inputs: Vec<Vec<f64>> = (0..n)
                        .map(|s| matrix_input(Func::AllReduce, op, dt, n, s, 13, 13))
                        .collect();
                    for x in inputs.iter().flatten() {
                        assert_eq!(round_to(dt, *x), *x, "{dt} input {x}");
                    }
                    let exact_inputs = per_rank(dt, &inputs);
                    let out = contract_output(Func::AllReduce, op, dt, 0, 0, 13, &exact_inputs);
                    for (j, y) in out.unwrap().iter().map(|y| y.to_f64()).enumerate() {
                        assert_eq!(round_to(dt, y), y, "{dt} {op} N={n} element {j}: {y}");
                        if op != RedOp::Avg || !dt.is_float() {
                            // and the exact value: no partial result rounded
                            let xs: Vec<f64> = inputs.iter().map(|x| x[j]).collect();
                            let exact = match op {
                                RedOp::Sum => xs.iter().sum::<f64>(),
                                RedOp::Prod => xs.iter().product(),
                                RedOp::Max => xs.iter().copied().fold(f64::MIN, f64::max),
                                RedOp::Min => xs.iter().copied().fold(f64::MAX, f64::min),
                                _ => (xs.iter().sum::<f64>() / n as f64).trunc(),
                            };
                            assert_eq!(y, exact);
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn movement_values_are_distinct_where_the_type_allows() {
        for dt in DataType::ALL {
            let (n, q) = (4, 7);
            let mut seen: Vec<u64> = Vec::new();
            for s in 0..n {
                for d in 0..n {
                    for o in 0..q {
                        let v = movement_value(dt, n, q, s, d, o);
                        assert_eq!(round_to(dt, v), v, "{dt}: {v} is exact");
                        seen.push(v.to_bits());
                    }
                }
            }
            seen.sort();
            seen.dedup();
            assert_eq!(seen.len(), n * n * q, "{dt}: 112 distinct values");
        }
        assert_eq!(movement_value(DataType::Int32, 4, 2, 3, 1, 1), 30101.0);
    }
}
