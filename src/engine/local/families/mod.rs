//! The data phase of each collective family, one file per family. Each
//! function runs on rank `me` after every rank posted an agreed call
//! (`calls[r]` is rank r's), does this rank's share, and touches memory only
//! through the [`Phase`] token. Each file states why its reads and writes
//! never race, in-place forms included. Small calls take another path,
//! [`own`]: each rank computes only its own results from copies of every
//! rank's input.
//!
//! Speed (see BENCHMARKS.md): the work is split so that every rank moves an
//! equal share and every input byte is read from memory once. Large copies
//! go in chunks that stay in cache between the N destinations they are
//! written to; large reductions go a few cache lines at a time, reduced in
//! registers and stored straight to every output. When a call's buffers
//! outgrow the last-level cache ([`streaming`]) its outputs are written
//! with non-temporal stores, which skip reading each destination line
//! before overwriting it.

mod alltoall;
mod broadcast;
mod gather;
mod own;
mod reduction;

pub use own::own;

use super::memory::Phase;
use crate::core::{Call, Func, footprint_elems};

/// Bytes per piece of a large copy: a piece read once stays in L2 while it
/// is written to every destination.
pub const COPY_CHUNK: usize = 64 << 10;

/// Whether a call writes its outputs with streaming stores: when its
/// buffers (every rank's inputs and outputs) are larger than
/// the last-level cache. Below that, the benchmark's repeated calls and an
/// application's next step find the data in the shared cache, and a
/// streaming store would send it to memory instead (at half the cache, the
/// threshold first used, 8 MiB AllGather, AlltoAll and Broadcast at N = 2
/// took 1.5–2x longer than with plain stores, and fell behind OpenMPI).
pub fn streaming(calls: &[Call]) -> bool {
    // the calls agree, so any rank's describes them all
    let c = &calls[0];
    footprint_elems(c.func, calls.len(), c.root, c.count) * c.datatype.size() > last_level_cache()
}

/// Bytes in the last-level cache, or 32 MiB when the size cannot be read.
pub fn last_level_cache() -> usize {
    static LLC: std::sync::OnceLock<usize> = std::sync::OnceLock::new();
    *LLC.get_or_init(|| read_last_level_cache().unwrap_or(32 << 20))
}

/// The largest cache of CPU 0, in bytes, from Linux's sysfs.
fn read_last_level_cache() -> Option<usize> {
    let dir = std::fs::read_dir("/sys/devices/system/cpu/cpu0/cache").ok()?;
    dir.filter_map(|e| std::fs::read_to_string(e.ok()?.path().join("size")).ok())
        .filter_map(|s| parse_cache_size(&s))
        .max()
}

/// `32768K`, `2M` or `512` (bytes), as sysfs writes cache sizes.
fn parse_cache_size(s: &str) -> Option<usize> {
    let s = s.trim();
    let (digits, unit) = match s.as_bytes().last()? {
        b'K' => (&s[..s.len() - 1], 1 << 10),
        b'M' => (&s[..s.len() - 1], 1 << 20),
        b'G' => (&s[..s.len() - 1], 1 << 30),
        _ => (s, 1),
    };
    digits.parse::<usize>().ok().map(|v| v * unit)
}

/// Copies with the store kind chosen for the whole call.
#[inline]
fn copy(p: &Phase, stream: bool, src: usize, dst: usize, bytes: usize) {
    if stream {
        p.copy_stream(src, dst, bytes);
    } else {
        p.copy(src, dst, bytes);
    }
}

/// Moves rank `me`'s share of the call; its stores are ordered (fenced)
/// when this returns.
pub fn run(p: &Phase, me: usize, calls: &[Call]) {
    share(p, me, calls);
    p.fence();
}

fn share(p: &Phase, me: usize, calls: &[Call]) {
    match calls[me].func {
        Func::AllReduce => reduction::all_reduce(p, me, calls),
        Func::Reduce => reduction::reduce(p, me, calls),
        Func::ReduceScatter => reduction::reduce_scatter(p, me, calls),
        Func::AllGather => gather::all_gather(p, me, calls),
        Func::Gather => gather::gather(p, me, calls),
        Func::Broadcast => broadcast::broadcast(p, me, calls),
        Func::Scatter => broadcast::scatter(p, me, calls),
        Func::AlltoAll => alltoall::all_to_all(p, me, calls),
        Func::Send | Func::Recv => unreachable!("point-to-point calls do not run as collectives"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn streaming_starts_where_the_buffers_outgrow_the_last_level_cache() {
        // a 2-rank AllReduce of q f32 spans 2 ranks × (send + recv) = 16·q bytes
        let calls = |q: usize| {
            let c = Call {
                func: Func::AllReduce,
                sendbuff: 0x1000,
                recvbuff: 0x2000,
                count: q,
                datatype: crate::core::DataType::Float32,
                op: crate::core::RedOp::Sum,
                op_code: 0,
                root: 0,
            };
            [c, c]
        };
        let q = last_level_cache() / 16;
        assert!(
            !streaming(&calls(q)),
            "exactly the cache's size stays cached"
        );
        assert!(streaming(&calls(q + 1)));
        assert!(!streaming(&calls(1)));
    }

    #[test]
    fn cache_sizes_parse_as_sysfs_writes_them() {
        assert_eq!(parse_cache_size("32768K\n"), Some(32 << 20));
        assert_eq!(parse_cache_size("2M"), Some(2 << 20));
        assert_eq!(parse_cache_size("4096"), Some(4096));
        assert_eq!(parse_cache_size("big"), None);
    }
}
