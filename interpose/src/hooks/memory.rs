//! The allocations this process made with `ncclMemAlloc`, and where a
//! pointer lives as far as the process can tell: what the per-call
//! extent checks read.

use rankwise::core::AddressSpace;
use std::collections::BTreeMap;
use std::sync::{Mutex, MutexGuard, OnceLock};

fn allocations() -> MutexGuard<'static, BTreeMap<usize, usize>> {
    static A: OnceLock<Mutex<BTreeMap<usize, usize>>> = OnceLock::new();
    A.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `ncclMemAlloc` returned `addr` of `bytes`.
pub fn allocated(addr: usize, bytes: usize) {
    if addr != 0 {
        allocations().insert(addr, bytes);
    }
}

/// `ncclMemFree(addr)`.
pub fn freed(addr: usize) {
    allocations().remove(&addr);
}

/// Where pointers live, as far as this process can tell: allocations made
/// with `ncclMemAlloc` (exact extents), then what the CUDA driver knows
/// (`cuMemGetAddressRange`: the whole `cudaMalloc` block, so a caching
/// allocator's sub-buffer is checked against its block). An address neither
/// knows is given an unbounded extent: its NULL, alignment and overlap
/// rules are checked, its extent is not.
pub struct Space;

impl AddressSpace for Space {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        if let Some((&base, &len)) = allocations().range(..=addr).next_back()
            && addr < base.saturating_add(len.max(1))
        {
            return Some((base, len));
        }
        if rankwise::engine::nccl::library::cuda_driver().is_ok()
            && let Some(r) = rankwise::engine::nccl::cuda::address_range(addr)
        {
            return Some(r);
        }
        Some((addr, usize::MAX - addr))
    }
}
