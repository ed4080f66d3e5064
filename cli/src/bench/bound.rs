//! The traffic bound: the least time a collective can take in one address
//! space on this machine, from the bytes it must move (each op's formula,
//! and why, in docs/reference/traffic-bound.md).
//!
//! With `s = count · size` (the per-rank count of docs/reference/contracts.md
//! §1, in bytes) and N ranks, every implementation must at least read each
//! input byte once and write each output byte once, all ranks together:
//!
//! | op | read | written | in place (written) |
//! |---|---|---|---|
//! | AllReduce | N·s | N·s | N·s |
//! | Reduce | N·s | s (root) | s |
//! | Broadcast | s (root's input, once) | N·s | (N−1)·s |
//! | AllGather | N·s (each input once) | N·N·s | (N−1)·N·s |
//! | ReduceScatter | N·N·s | N·s | N·s |
//! | AlltoAll | N·N·s | N·N·s | no in-place form |
//! | Gather | N·s | N·s (root) | (N−1)·s, and reads (N−1)·s |
//! | Scatter | N·s (root) | N·s | (N−1)·s, and reads (N−1)·s |
//!
//! A memory copy of B bytes reads B and writes B bytes, so at the machine's
//! copy bandwidth `C` (bytes copied per second, all threads) moving
//! `read + written` bytes takes at least `(read + written) / (2·C)`. For
//! AllReduce that is `N·s / C`: the time to copy every rank's buffer once.
//! This assumes the data does not fit in cache (the bound is for large
//! messages; small ones are bounded by synchronisation instead).

use rankwise::core::Func;
use rankwise::launch::EngineKind;

/// Whether the bound applies to an engine's calls: the engines whose ranks
/// move host memory (local, mpi). The nccl engine's buffers are in GPU
/// memory, which the host's copy bandwidth says nothing about: its rows
/// have no bound, and nothing copies host memory between its calls to
/// measure one.
pub fn applies(engine: EngineKind) -> bool {
    engine != EngineKind::Nccl
}

/// Bytes read and written, all ranks together (see the module doc).
pub fn traffic(
    func: Func,
    nranks: usize,
    count: usize,
    elem_size: usize,
    in_place: bool,
) -> (u64, u64) {
    let n = nranks as u64;
    let s = (count * elem_size) as u64;
    let ip = u64::from(in_place);
    match func {
        Func::AllReduce => (n * s, n * s),
        Func::Reduce => (n * s, s),
        Func::Broadcast => (s, (n - ip) * s),
        Func::AllGather => (n * s, (n - ip) * n * s),
        Func::ReduceScatter => (n * n * s, n * s),
        Func::AlltoAll => (n * n * s, n * n * s),
        Func::Gather | Func::Scatter => ((n - ip) * s, (n - ip) * s),
        Func::Send | Func::Recv => (s, s),
    }
}

/// Least time in seconds at copy bandwidth `copy_bw` (bytes copied per second).
pub fn copy_bound_secs(
    func: Func,
    nranks: usize,
    count: usize,
    elem_size: usize,
    in_place: bool,
    copy_bw: f64,
) -> f64 {
    let (r, w) = traffic(func, nranks, count, elem_size, in_place);
    (r + w) as f64 / (2.0 * copy_bw)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_bound_applies_to_the_engines_that_move_host_memory() {
        assert!(applies(EngineKind::Local));
        assert!(applies(EngineKind::Mpi));
        assert!(!applies(EngineKind::Nccl));
    }

    #[test]
    fn all_reduce_bound_is_copying_every_buffer_once() {
        // 4 ranks × 1 MiB at 1 GB/s copied: 4 MiB to copy
        let t = copy_bound_secs(Func::AllReduce, 4, 1 << 18, 4, false, 1e9);
        assert!((t - 4.0 * (1 << 20) as f64 / 1e9).abs() < 1e-12);
        assert_eq!(traffic(Func::AllGather, 4, 10, 1, false), (40, 160));
        assert_eq!(traffic(Func::AllGather, 4, 10, 1, true), (40, 120));
        assert_eq!(traffic(Func::Broadcast, 2, 10, 1, true), (10, 10));
    }

    /// The totals in nccl-tests' size S, as docs/reference/traffic-bound.md
    /// states them: written out per op, for 1 to 5 ranks.
    #[test]
    fn totals_in_nccl_tests_size_match_the_documented_formulas() {
        for n in 1..=5u64 {
            let q = 12usize; // elements per rank, 2 bytes each
            for f in Func::ALL {
                if matches!(f, Func::Send | Func::Recv) {
                    continue;
                }
                let big_s = f.alg_bytes(n as usize, q, 2) as u64;
                let total = |ip| {
                    let (r, w) = traffic(f, n as usize, q, 2, ip);
                    r + w
                };
                let (oop, ip) = match f {
                    Func::AllReduce => (2 * n * big_s, Some(2 * n * big_s)),
                    Func::Reduce | Func::ReduceScatter => ((n + 1) * big_s, Some((n + 1) * big_s)),
                    Func::Broadcast | Func::AllGather => ((n + 1) * big_s, Some(n * big_s)),
                    Func::AlltoAll => (2 * n * big_s, None),
                    // in place the root's own block stays: (N−1)/N of S each way
                    _ => (2 * big_s, Some(2 * big_s * (n - 1) / n)),
                };
                assert_eq!(total(false), oop, "{f} N={n} out of place");
                if let Some(ip) = ip {
                    assert_eq!(total(true), ip, "{f} N={n} in place");
                }
            }
        }
    }
}
