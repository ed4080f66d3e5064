//! The allocations this process made with `ncclMemAlloc`, and where a
//! pointer lives as far as the process can tell: what the per-call
//! extent checks read.

use rankwise::core::AddressSpace;
use std::sync::{Mutex, MutexGuard};

/// (base, bytes) of each allocation, sorted by base: a program has few,
/// and every checked call looks one or two up, where a binary search of a
/// vector costs less than a tree's walk.
fn allocations() -> MutexGuard<'static, Vec<(usize, usize)>> {
    static A: Mutex<Vec<(usize, usize)>> = Mutex::new(Vec::new());
    A.lock().unwrap_or_else(|p| p.into_inner())
}

/// `ncclMemAlloc` returned `addr` of `bytes`.
pub fn allocated(addr: usize, bytes: usize) {
    if addr != 0 {
        let mut a = allocations();
        match a.binary_search_by_key(&addr, |&(base, _)| base) {
            Ok(i) => a[i].1 = bytes,
            Err(i) => a.insert(i, (addr, bytes)),
        }
    }
}

/// `ncclMemFree(addr)`.
pub fn freed(addr: usize) {
    let mut a = allocations();
    if let Ok(i) = a.binary_search_by_key(&addr, |&(base, _)| base) {
        a.remove(i);
    }
}

/// Where pointers live, as far as this process can tell: allocations made
/// with `ncclMemAlloc` (exact extents), then what the CUDA driver knows
/// (`cuMemGetAddressRange`: the whole `cudaMalloc` block, so a caching
/// allocator's sub-buffer is checked against its block). An address neither
/// knows is given an unbounded extent: its NULL, alignment and overlap
/// rules are checked, its extent is not. It holds the registry for the
/// one call's checks: both buffers looked up under one lock.
pub struct Space(MutexGuard<'static, Vec<(usize, usize)>>);

impl Space {
    /// The registry as it is now, until dropped.
    pub fn now() -> Space {
        Space(allocations())
    }

    /// The allocation holding `addr`, if this process made it.
    fn made_here(&self, addr: usize) -> Option<(usize, usize)> {
        // the last allocation starting at or below addr
        let i = self
            .0
            .partition_point(|&(base, _)| base <= addr)
            .checked_sub(1)?;
        let (base, len) = self.0[i];
        (addr < base.saturating_add(len.max(1))).then_some((base, len))
    }
}

impl AddressSpace for Space {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        if let Some(r) = self.made_here(addr) {
            return Some(r);
        }
        if rankwise::engine::nccl::library::cuda_driver().is_ok()
            && let Some(r) = rankwise::engine::nccl::cuda::address_range(addr)
        {
            return Some(r);
        }
        Some((addr, usize::MAX - addr))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Allocations registered out of order are found by any address
    /// inside them, the one just past an end is not, and a freed one is
    /// forgotten while its neighbours stay.
    #[test]
    fn each_address_finds_the_allocation_that_holds_it() {
        let (a, b, c) = (0x7000_0000, 0x7000_1000, 0x7000_3000);
        allocated(b, 0x800);
        allocated(c, 0x100);
        allocated(a, 0x1000);
        let held = |addr| Space::now().made_here(addr);
        assert_eq!(held(a), Some((a, 0x1000)));
        assert_eq!(held(a + 0xfff), Some((a, 0x1000)));
        assert_eq!(held(b + 0x7ff), Some((b, 0x800)));
        assert_eq!(held(b + 0x800), None, "one past b's end");
        assert_eq!(held(c + 0x10), Some((c, 0x100)));
        assert_eq!(held(a - 1), None);
        freed(b);
        assert_eq!(held(b), None);
        assert_eq!(held(a + 0x10), Some((a, 0x1000)));
        assert_eq!(held(c), Some((c, 0x100)));
        freed(a);
        freed(c);
    }
}
