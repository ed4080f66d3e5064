//! The data phase of each collective family, one file per family. Each
//! function runs after every rank posted an agreed call (`calls[r]` is
//! rank r's), moves one [`Part`] of the call (rank r's share, or a piece of
//! it when the ranks claim parts as they go), and touches memory only
//! through the [`Phase`] token. Each file states why its reads and writes
//! never race, in-place forms included. Small calls take another path,
//! [`own`]: each rank computes only its own results from copies of every
//! rank's input.
//!
//! Speed (see BENCHMARKS.md): the work is split so that every rank moves an
//! equal share and every input byte is read from memory once; calls larger
//! than the last-level cache are cut finer ([`parts_per_rank`]). Large copies
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
pub use reduction::reduction_block_bytes;

pub use own::own;

use super::memory::{LINE, Phase};
use crate::core::{Call, Func, footprint_elems, share};
use std::ops::Range;

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
    streams(&calls[0], calls.len())
}

/// [`streaming`] for an agreed call `c` of `n` ranks.
fn streams(c: &Call, n: usize) -> bool {
    streams_footprint(footprint_bytes(c, n))
}

/// Whether a call whose buffers span `bytes` over all ranks writes its
/// outputs with streaming stores: the rule of [`streaming`], for tools
/// that set it beside their own measurements (`examples/store_crossover`).
pub fn streams_footprint(bytes: usize) -> bool {
    bytes > last_level_cache()
}

fn footprint_bytes(c: &Call, n: usize) -> usize {
    footprint_elems(c.func, n, c.root, c.count) * c.datatype.size()
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

/// One piece of a call's data phase: part `index` of `of` equal parts,
/// `of` a multiple of N, so `of / N` parts per rank block (a family whose
/// work is a block per rank, such as AllGather's inputs or ReduceScatter's
/// outputs, splits each block into that many). Parts write disjoint bytes
/// and none reads what another writes (each family's module doc), so any
/// rank may move any part, in any order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Part {
    pub index: usize,
    pub of: usize,
}

impl Part {
    /// Rank `me`'s share when the N ranks split the call one part each.
    pub fn share(me: usize, n: usize) -> Part {
        Part { index: me, of: n }
    }

    /// The rank block this part lies in, for a call of `n` ranks.
    fn block(self, n: usize) -> usize {
        self.index / (self.of / n)
    }

    /// This part's elements of its rank block of `len` elements of `size`
    /// bytes, cut at cache-line boundaries.
    fn of_block(self, n: usize, len: usize, size: usize) -> Range<usize> {
        let per_block = self.of / n;
        lines_of(len, size, per_block, self.index % per_block)
    }

    /// This part's elements of `len` elements of `size` bytes split over
    /// all the parts, cut at cache-line boundaries.
    fn of_all(self, len: usize, size: usize) -> Range<usize> {
        lines_of(len, size, self.of, self.index)
    }
}

/// Piece `i` of `parts` of `len` elements of `size` bytes (at most a
/// line), cut at cache-line boundaries.
fn lines_of(len: usize, size: usize, parts: usize, i: usize) -> Range<usize> {
    let per_line = LINE / size;
    let lines = share(len.div_ceil(per_line), parts, i);
    (lines.start * per_line).min(len)..(lines.end * per_line).min(len)
}

/// Bytes of a call's footprint per part when the ranks claim parts as
/// they go ([`parts_per_rank`]): each part a few hundred microseconds of
/// memory traffic, so a claim (one atomic operation) costs nothing beside
/// it, while a rank the scheduler holds back delays the call by one part at
/// most.
const PART_BYTES: usize = 4 << 20;
/// Parts per rank block at most.
const MAX_PARTS_PER_RANK: usize = 64;

/// How many parts each rank block of a call is cut into; above 1 the
/// ranks claim parts as they go (`exec.rs`: each its own share's first,
/// then the others' that are left) instead of each moving its own share.
/// Only calls that stream ([`streaming`]) are cut: there no data
/// waits in a core's cache for the next call, which a fixed split would
/// find again, and the time a call takes is the time of its slowest share.
/// When the ranks outnumber the cores, or another process takes a core, a
/// fixed split leaves a rank's whole share waiting for a time slice while
/// a core whose rank finished sits idle.
pub fn parts_per_rank(c: &Call, n: usize) -> usize {
    if !streams(c, n) {
        return 1;
    }
    (footprint_bytes(c, n) / (n * PART_BYTES)).clamp(1, MAX_PARTS_PER_RANK)
}

/// Moves one part of the call. Streaming stores are weakly ordered: the
/// caller runs [`Phase::fence`] after its last part, before it signals
/// completion.
pub fn run(p: &Phase, part: Part, calls: &[Call]) {
    debug_assert!(part.index < part.of && part.of.is_multiple_of(calls.len()));
    match calls[0].func {
        Func::AllReduce => reduction::all_reduce(p, part, calls),
        Func::Reduce => reduction::reduce(p, part, calls),
        Func::ReduceScatter => reduction::reduce_scatter(p, part, calls),
        Func::AllGather => gather::all_gather(p, part, calls),
        Func::Gather => gather::gather(p, part, calls),
        Func::Broadcast => broadcast::broadcast(p, part, calls),
        Func::Scatter => broadcast::scatter(p, part, calls),
        Func::AlltoAll => alltoall::all_to_all(p, part, calls),
        Func::Send | Func::Recv => unreachable!("point-to-point calls do not run as collectives"),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod unit_tests {
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
