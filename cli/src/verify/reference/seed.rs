//! The seed chapter's own closed forms (`seed_*`), written for any N, and
//! the encodings its cases use.

/// The seed's AlltoAll encoding: `source*10000 + destination*100 + offset`.
pub fn encode(source: usize, destination: usize, offset: usize) -> f64 {
    (source * 10000 + destination * 100 + offset) as f64
}

/// Seed AllReduce, inputs `[r+1, r+10, 2r]`, SUM: `[N(N+1)/2, 10N + N(N-1)/2, N(N-1)]`
/// (`[10, 46, 12]` at N=4).
pub fn seed_all_reduce_sum(n: usize) -> Vec<f64> {
    let n = n as f64;
    vec![
        n * (n + 1.0) / 2.0,
        10.0 * n + n * (n - 1.0) / 2.0,
        n * (n - 1.0),
    ]
}

/// Seed AllReduce, inputs `[r, -r, r/2 + 1/4]` (float32), MAX: `[N-1, 0, (N-1)/2 + 1/4]`.
pub fn seed_all_reduce_max(n: usize) -> Vec<f64> {
    let top = (n - 1) as f64;
    vec![top, 0.0, top * 0.5 + 0.25]
}

/// Seed AllGather, inputs `[r, r+10, r+100]`: every rank gets `y[s·3 + j] = s + [0,10,100][j]`.
pub fn seed_all_gather(n: usize) -> Vec<f64> {
    (0..n)
        .flat_map(|s| [0.0, 10.0, 100.0].map(|k| s as f64 + k))
        .collect()
}

/// Seed ReduceScatter, inputs `x_r[i] = r*100 + i` over `3N` elements, SUM:
/// rank r gets `i*N + 100*N(N-1)/2` for its global indices `i in 3r..3r+3`.
pub fn seed_reduce_scatter(n: usize, rank: usize) -> Vec<f64> {
    let constant = 100 * n * (n - 1) / 2;
    (rank * 3..rank * 3 + 3)
        .map(|i| (i * n + constant) as f64)
        .collect()
}

/// Seed Reduce, inputs `[r+1, (r+1)*10]`, SUM on the root: `[N(N+1)/2, 10·N(N+1)/2]`.
pub fn seed_reduce(n: usize) -> Vec<f64> {
    let t = (n * (n + 1) / 2) as f64;
    vec![t, 10.0 * t]
}

/// Broadcast with inputs `x_r[j] = r*scale + j`: every rank gets the root's.
pub fn seed_broadcast(root: usize, scale: usize, len: usize) -> Vec<f64> {
    (0..len).map(|j| (root * scale + j) as f64).collect()
}

/// Equal AlltoAll with `q` elements per peer, encoded inputs: rank d gets
/// `[from 0][from 1]…`, `y[s·q + o] = encode(s, d, o)`.
pub fn all_to_all_equal(n: usize, q: usize, d: usize) -> Vec<f64> {
    (0..n)
        .flat_map(|s| (0..q).map(move |o| encode(s, d, o)))
        .collect()
}

/// The seed's uneven split: source s sends `s + d + 1` elements to destination d.
pub fn uneven_split(s: usize, d: usize) -> usize {
    s + d + 1
}

/// Uneven AlltoAllv: rank d gets `s + d + 1` elements from each source s, in source order.
pub fn all_to_all_uneven(n: usize, d: usize) -> Vec<f64> {
    (0..n)
        .flat_map(|s| (0..uneven_split(s, d)).map(move |o| encode(s, d, o)))
        .collect()
}

/// Grouped ring: rank r sends `[r, r+100]` to r+1 and receives its predecessor's.
pub fn ring(n: usize, rank: usize) -> Vec<f64> {
    let prev = ((rank + n - 1) % n) as f64;
    vec![prev, prev + 100.0]
}

#[cfg(test)]
mod tests {
    use super::super::test_support::*;
    use super::super::*;
    use rankwise::core::{DataType, Func, RedOp};

    #[test]
    fn seed_closed_forms_give_the_chapter_vectors_at_4_ranks() {
        assert_eq!(seed_all_reduce_sum(4), vec![10.0, 46.0, 12.0]);
        assert_eq!(seed_all_reduce_max(4), vec![3.0, 0.0, 1.75]);
        assert_eq!(
            seed_all_gather(4),
            [0, 10, 100, 1, 11, 101, 2, 12, 102, 3, 13, 103].map(f64::from)
        );
        let rs: Vec<Vec<f64>> = (0..4).map(|r| seed_reduce_scatter(4, r)).collect();
        assert_eq!(
            rs,
            [
                [600, 604, 608],
                [612, 616, 620],
                [624, 628, 632],
                [636, 640, 644]
            ]
            .map(|r| r.map(f64::from).to_vec())
        );
        assert_eq!(seed_reduce(4), vec![10.0, 100.0]);
        assert_eq!(
            all_to_all_uneven(4, 2),
            [
                200, 201, 202, 10200, 10201, 10202, 10203, 20200, 20201, 20202, 20203, 20204,
                30200, 30201, 30202, 30203, 30204, 30205
            ]
            .map(f64::from)
        );
        assert_eq!(ring(4, 0), vec![3.0, 103.0]);
        assert_eq!(ring(4, 1), vec![0.0, 100.0]);
    }

    /// The closed forms agree with the contract definition on the seed's
    /// inputs at every N: two independent derivations of the same numbers.
    #[test]
    fn closed_forms_match_the_contract_definition() {
        for n in 1..=9 {
            let ar: Vec<Vec<f64>> = (0..n)
                .map(|r| vec![r as f64 + 1.0, r as f64 + 10.0, r as f64 * 2.0])
                .collect();
            let (i32_, f32_, i64_) = (DataType::Int32, DataType::Float32, DataType::Int64);
            let ar = per_rank(i32_, &ar);
            let got = contract_output(Func::AllReduce, RedOp::Sum, i32_, 0, 0, 3, &ar);
            assert_eq!(got.unwrap(), sc(i32_, &seed_all_reduce_sum(n)));
            let mx: Vec<Vec<f64>> = (0..n)
                .map(|r| vec![r as f64, 0.0 - r as f64, r as f64 * 0.5 + 0.25])
                .collect();
            let mx = per_rank(f32_, &mx);
            let got = contract_output(Func::AllReduce, RedOp::Max, f32_, 0, 0, 3, &mx);
            assert_eq!(got.unwrap(), sc(f32_, &seed_all_reduce_max(n)));
            let rs: Vec<Vec<f64>> = (0..n)
                .map(|r| (0..3 * n).map(|i| (r * 100 + i) as f64).collect())
                .collect();
            let rs = per_rank(i64_, &rs);
            for r in 0..n {
                let got = contract_output(
                    Func::ReduceScatter,
                    RedOp::Sum,
                    DataType::Int64,
                    r,
                    0,
                    3,
                    &rs,
                );
                assert_eq!(got.unwrap(), sc(i64_, &seed_reduce_scatter(n, r)));
            }
            let red: Vec<Vec<f64>> = (0..n)
                .map(|r| vec![r as f64 + 1.0, (r as f64 + 1.0) * 10.0])
                .collect();
            let red = per_rank(i32_, &red);
            let root = n - 1;
            let got = contract_output(
                Func::Reduce,
                RedOp::Sum,
                DataType::Int32,
                root,
                root,
                2,
                &red,
            );
            assert_eq!(got.unwrap(), sc(i32_, &seed_reduce(n)));
            assert_eq!(
                contract_output(Func::Reduce, RedOp::Sum, DataType::Int32, 0, n - 1, 2, &red)
                    .is_none(),
                n > 1
            );
            let a2a: Vec<Vec<f64>> = (0..n)
                .map(|s| {
                    (0..n)
                        .flat_map(|d| (0..2).map(move |o| encode(s, d, o)))
                        .collect()
                })
                .collect();
            let a2a = per_rank(i64_, &a2a);
            for d in 0..n {
                let got =
                    contract_output(Func::AlltoAll, RedOp::Sum, DataType::Int64, d, 0, 2, &a2a);
                assert_eq!(got.unwrap(), sc(i64_, &all_to_all_equal(n, 2, d)));
            }
        }
    }
}
