//! Device memory behind the engine's [`Memory`] interface. Every allocation
//! is kept in a table of (base, requested length), so the shared checks see
//! exactly the extent the program asked for (the driver rounds allocations
//! up; `cuMemGetAddressRange` would report the rounded size) and run before
//! NCCL is called; every copy is bounds-checked against the table.
//!
//! The table is generic over where the bytes live ([`Backend`]): the GPU
//! ([`Gpu`]) in the engine, host memory in the tests that run without one.

use crate::core::{AddressSpace, Error, ErrorKind, Result};
use crate::engine::Memory;
use std::collections::BTreeMap;

/// Raw storage operations; ranges are checked by [`Table`] first.
pub trait Backend {
    fn alloc_zeroed(&mut self, bytes: usize) -> Result<usize>;
    fn free(&mut self, base: usize) -> Result<()>;
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()>;
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()>;
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()>;
}

/// The current context's GPU memory.
#[derive(Default)]
pub struct Gpu;

impl Backend for Gpu {
    fn alloc_zeroed(&mut self, bytes: usize) -> Result<usize> {
        super::cuda::alloc_zeroed(bytes)
    }
    fn free(&mut self, base: usize) -> Result<()> {
        super::cuda::free(base)
    }
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()> {
        super::cuda::write(addr, src)
    }
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        super::cuda::read(addr, dst)
    }
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()> {
        super::cuda::fill(addr, bytes, byte)
    }
}

/// A rank's allocations by base address, over a backend.
pub struct Table<B: Backend> {
    allocs: BTreeMap<usize, usize>,
    backend: B,
}

impl<B: Backend> Table<B> {
    pub fn new(backend: B) -> Table<B> {
        Table {
            allocs: BTreeMap::new(),
            backend,
        }
    }

    /// Live allocations.
    pub fn len(&self) -> usize {
        self.allocs.len()
    }
    pub fn is_empty(&self) -> bool {
        self.allocs.is_empty()
    }

    /// Checks that `[addr, addr+bytes)` lies inside one allocation, in the
    /// local engine's words.
    fn extent(&self, addr: usize, bytes: usize, what: &str) -> Result<()> {
        match self.allocation_of(addr) {
            Some((base, len)) if addr.checked_add(bytes).is_some_and(|e| e <= base + len) => Ok(()),
            Some((base, len)) => Err(Error::new(
                ErrorKind::OutOfBounds,
                format!(
                    "{what}: {bytes} bytes at {addr:#x} run past the end of allocation {base:#x} ({len} bytes) by {} bytes",
                    addr.saturating_add(bytes) - (base + len)
                ),
            )),
            None if bytes == 0 => Ok(()),
            None => Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("{what}: {addr:#x} is not inside any allocation"),
            )),
        }
    }

    /// Frees everything still allocated (the engine's end).
    pub fn release_all(&mut self) {
        for base in std::mem::take(&mut self.allocs).into_keys() {
            let _ = self.backend.free(base);
        }
    }
}

impl<B: Backend> AddressSpace for Table<B> {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        let (base, len) = self.allocs.range(..=addr).next_back()?;
        (addr < base + (*len).max(1)).then_some((*base, *len))
    }
}

impl<B: Backend> Memory for Table<B> {
    fn alloc(&mut self, bytes: usize) -> Result<usize> {
        let base = self.backend.alloc_zeroed(bytes)?;
        self.allocs.insert(base, bytes);
        Ok(base)
    }
    fn free(&mut self, base: usize) -> Result<()> {
        if self.allocs.remove(&base).is_none() {
            return Err(Error::new(
                ErrorKind::OutOfBounds,
                format!("free: {base:#x} is not the base address of a live allocation"),
            ));
        }
        self.backend.free(base)
    }
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()> {
        self.extent(addr, src.len(), "write")?;
        self.backend.write(addr, src)
    }
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        self.extent(addr, dst.len(), "read")?;
        self.backend.read(addr, dst)
    }
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()> {
        self.extent(addr, bytes, "fill")?;
        self.backend.fill(addr, bytes, byte)
    }
    fn fill_pattern(&mut self, addr: usize, max_bytes: usize, pattern: &[u8]) -> usize {
        let Some((base, len)) = self.allocation_of(addr) else {
            return 0;
        };
        let step = pattern.len().max(1);
        let room = (base + len).saturating_sub(addr).min(max_bytes);
        let bytes = room - room % step;
        let buf: Vec<u8> = pattern.iter().copied().cycle().take(bytes).collect();
        match self.backend.write(addr, &buf) {
            Ok(()) => bytes,
            Err(_) => 0,
        }
    }
}

impl<B: Backend> Drop for Table<B> {
    fn drop(&mut self) {
        self.release_all();
    }
}

/// Host memory with device-like addresses, for the tests that run without a
/// GPU: each allocation is a Vec, addressed from a made-up base.
#[derive(Default)]
pub struct Host {
    blocks: BTreeMap<usize, Vec<u8>>,
    next: usize,
}

impl Host {
    fn block(&self, addr: usize, bytes: usize) -> Result<(&Vec<u8>, usize)> {
        let (base, v) = self
            .blocks
            .range(..=addr)
            .next_back()
            .ok_or_else(|| Error::new(ErrorKind::Internal, "host backend: no block"))?;
        let off = addr - base;
        if off + bytes > v.len() {
            return Err(Error::new(
                ErrorKind::Internal,
                "host backend: past the block",
            ));
        }
        Ok((v, off))
    }
}

impl Backend for Host {
    fn alloc_zeroed(&mut self, bytes: usize) -> Result<usize> {
        // bases 256-byte aligned and spaced like cudaMalloc's
        let base = 0x7f00_0000_0000 + self.next;
        self.next += bytes.max(1).next_multiple_of(512);
        self.blocks.insert(base, vec![0; bytes.max(1)]);
        Ok(base)
    }
    fn free(&mut self, base: usize) -> Result<()> {
        self.blocks
            .remove(&base)
            .map(|_| ())
            .ok_or_else(|| Error::new(ErrorKind::Internal, "host backend: double free"))
    }
    fn write(&mut self, addr: usize, src: &[u8]) -> Result<()> {
        let (_, off) = self.block(addr, src.len())?;
        let base = addr - off;
        let v = self.blocks.get_mut(&base).expect("block just found");
        v[off..off + src.len()].copy_from_slice(src);
        Ok(())
    }
    fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
        let (v, off) = self.block(addr, dst.len())?;
        dst.copy_from_slice(&v[off..off + dst.len()]);
        Ok(())
    }
    fn fill(&mut self, addr: usize, bytes: usize, byte: u8) -> Result<()> {
        self.write(addr, &vec![byte; bytes])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn extents_are_the_requested_lengths() {
        let mut t = Table::new(Host::default());
        let a = t.alloc(10).unwrap();
        let b = t.alloc(0).unwrap();
        assert_eq!(t.allocation_of(a), Some((a, 10)));
        assert_eq!(t.allocation_of(a + 9), Some((a, 10)));
        assert_eq!(t.allocation_of(a + 10), None, "one past the end is outside");
        assert_eq!(
            t.allocation_of(b),
            Some((b, 0)),
            "a 0-byte allocation has an address"
        );
        assert_eq!(t.allocation_of(a - 1), None);
        t.write(a + 2, &[1, 2, 3]).unwrap();
        let mut out = [0u8; 10];
        t.read(a, &mut out).unwrap();
        assert_eq!(out, [0, 0, 1, 2, 3, 0, 0, 0, 0, 0]);
        let e = t.write(a + 8, &[0; 4]).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfBounds);
        assert!(e.message.contains("run past the end of allocation"), "{e}");
        assert!(e.message.ends_with("(10 bytes) by 2 bytes"), "{e}");
        let e = t.fill(0x1000, 1, 0).unwrap_err();
        assert!(e.message.contains("is not inside any allocation"), "{e}");
    }

    #[test]
    fn free_takes_base_addresses_once() {
        let mut t = Table::new(Host::default());
        let a = t.alloc(64).unwrap();
        assert!(
            t.free(a + 1)
                .unwrap_err()
                .message
                .contains("not the base address")
        );
        t.free(a).unwrap();
        assert!(t.free(a).is_err());
        assert!(t.is_empty());
    }

    #[test]
    fn patterns_stop_at_the_allocation_end() {
        let mut t = Table::new(Host::default());
        let a = t.alloc(10).unwrap();
        assert_eq!(t.fill_pattern(a + 1, 100, &[0xAB, 0xCD, 0xEF, 0x01]), 8);
        let mut out = [0u8; 10];
        t.read(a, &mut out).unwrap();
        assert_eq!(out, [0, 0xAB, 0xCD, 0xEF, 0x01, 0xAB, 0xCD, 0xEF, 0x01, 0]);
        assert_eq!(t.fill_pattern(0x10, 4, &[1]), 0);
    }
}
