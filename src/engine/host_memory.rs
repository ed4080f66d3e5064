//! Host memory behind [`Memory`]: the per-rank allocation registry of the
//! engines whose ranks run on CPUs (local, mpi). An allocation has a real,
//! stable address that the raw face may offset freely, and the registry
//! tells the shared checks the extent of every address before any call
//! touches it.
//!
//! Why the unsafe accesses here are sound: every address they touch was
//! first found inside a live allocation of this rank ([`Registry::extent`]),
//! and outside a call only the owning rank touches its allocations (the
//! local engine's data phase, where other ranks do, has its own rules:
//! `engine::local::memory`).

use crate::core::{AddressSpace, Error, ErrorKind, Result};
use crate::engine::Memory;
use std::cell::UnsafeCell;
use std::sync::Arc;

/// One registered allocation: storage with a stable address.
pub struct Allocation {
    storage: Box<[UnsafeCell<u128>]>,
    len: usize,
}

// SAFETY: the cells are only written through raw pointers under the rules in
// the module doc (disjoint writes inside a phase, owner-only outside).
unsafe impl Sync for Allocation {}

impl Allocation {
    fn new(len: usize) -> Allocation {
        let words = len.div_ceil(16).max(1);
        let storage = (0..words)
            .map(|_| UnsafeCell::new(0u128))
            .collect::<Box<[_]>>();
        Allocation { storage, len }
    }
    fn base(&self) -> usize {
        UnsafeCell::raw_get(self.storage.as_ptr()) as usize
    }
}

/// A rank's allocations, by base address.
#[derive(Default)]
pub struct Registry {
    allocs: Vec<(usize, Arc<Allocation>)>,
}

impl Registry {
    /// A zero-filled allocation of `bytes` (16-byte aligned; 0 bytes gives a
    /// 16-byte one so every allocation has a distinct address).
    pub fn alloc(&mut self, bytes: usize) -> usize {
        let a = Arc::new(Allocation::new(bytes));
        let base = a.base();
        let at = self.allocs.partition_point(|(b, _)| *b < base);
        self.allocs.insert(at, (base, a));
        base
    }

    pub fn free(&mut self, base: usize) -> Result<()> {
        match self.allocs.binary_search_by_key(&base, |(b, _)| *b) {
            Ok(i) => {
                self.allocs.remove(i);
                Ok(())
            }
            Err(_) => Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("free: {base:#x} is not the base address of a live allocation"),
            )),
        }
    }

    /// Checks that `[addr, addr+bytes)` lies inside one allocation.
    fn extent(&self, addr: usize, bytes: usize, what: &str) -> Result<()> {
        match self.allocation_of(addr) {
            Some((base, len)) if addr + bytes <= base + len => Ok(()),
            Some((base, len)) => Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{what}: {bytes} bytes at {addr:#x} run past the end of allocation {base:#x} ({len} bytes) by {} bytes",
                    addr + bytes - (base + len)
                ),
            )),
            None if bytes == 0 => Ok(()),
            None => Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("{what}: {addr:#x} is not inside any allocation"),
            )),
        }
    }

    /// Copies `src` into registered memory.
    fn write_bytes(&self, addr: usize, src: &[u8]) -> Result<()> {
        self.extent(addr, src.len(), "write")?;
        // SAFETY: the extent lies inside a live allocation of this rank, and
        // outside a call only the owning rank touches its allocations.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), addr as *mut u8, src.len()) };
        Ok(())
    }

    /// Copies `dst.len()` bytes out of registered memory.
    fn read_bytes(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.extent(addr, dst.len(), "read")?;
        // SAFETY: as in `write_bytes`; `dst` has room for exactly its length.
        unsafe { std::ptr::copy_nonoverlapping(addr as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    /// Repeats `pattern` over up to `max_bytes` bytes at `addr`, stopping at
    /// the end of its allocation; returns the bytes written (0 when `addr`
    /// is not registered).
    fn fill_pattern_bytes(&self, addr: usize, max_bytes: usize, pattern: &[u8]) -> usize {
        let Some((base, len)) = self.allocation_of(addr) else {
            return 0;
        };
        let room = (base + len).saturating_sub(addr).min(max_bytes);
        let bytes = room - room % pattern.len().max(1);
        for at in (0..bytes).step_by(pattern.len().max(1)) {
            // SAFETY: inside a live allocation of this rank (checked above),
            // touched only by its owner outside a call.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    pattern.as_ptr(),
                    (addr + at) as *mut u8,
                    pattern.len(),
                )
            };
        }
        bytes
    }

    /// Fills `bytes` bytes with `byte`.
    fn fill_bytes(&self, addr: usize, bytes: usize, byte: u8) -> Result<()> {
        self.extent(addr, bytes, "fill")?;
        // SAFETY: as in `write_bytes`.
        unsafe { std::ptr::write_bytes(addr as *mut u8, byte, bytes) };
        Ok(())
    }
}

impl Memory for Registry {
    fn alloc(&mut self, bytes: usize) -> Result<usize> {
        Ok(Registry::alloc(self, bytes))
    }
    fn free(&mut self, base: usize) -> Result<()> {
        Registry::free(self, base)
    }
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()> {
        self.write_bytes(addr, src)
    }
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.read_bytes(addr, dst)
    }
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()> {
        self.fill_bytes(addr, bytes, byte)
    }
    fn fill_pattern(&mut self, addr: usize, max_bytes: usize, pattern: &[u8]) -> usize {
        self.fill_pattern_bytes(addr, max_bytes, pattern)
    }
}

impl AddressSpace for Registry {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        let i = self.allocs.partition_point(|(b, _)| *b <= addr);
        let (base, a) = self.allocs.get(i.checked_sub(1)?)?;
        (addr < base + a.len.max(1)).then_some((*base, a.len))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::bytes;

    #[test]
    fn registry_resolves_and_bounds() {
        let mut r = Registry::default();
        let a = r.alloc(40);
        let b = r.alloc(8);
        assert_eq!(a % 16, 0);
        assert_eq!(r.allocation_of(a + 39), Some((a, 40)));
        assert_eq!(r.allocation_of(b), Some((b, 8)));
        Memory::write(&mut r, a + 4, bytes::of(&[1i32, 2, 3])).unwrap();
        let mut got = [7i32; 4];
        Memory::read(&r, a, bytes::of_mut(&mut got)).unwrap();
        assert_eq!(got, [0, 1, 2, 3]);
        let e = Memory::write(&mut r, a + 32, bytes::of(&[1i32, 2, 3])).unwrap_err();
        assert!(e.message.contains("by 4 bytes"), "{}", e.message);
        assert!(Memory::read(&r, 0x10, &mut [0u8]).is_err());
        r.free(a).unwrap();
        assert!(r.free(a).is_err());
        assert!(
            Memory::read(&r, a, &mut [0u8]).is_err(),
            "freed memory is no longer addressable"
        );
    }
}
