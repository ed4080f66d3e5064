//! Staged copies for the typed face on engines whose buffers are not host
//! memory (`Capabilities::needs_staging`: the GPU engines). Each host
//! region of a typed call gets an engine allocation of the same length
//! with the region's bytes; the call's pointers are translated into them,
//! so the shared checks see the same extents, offsets and in-place
//! relations; after the launch the regions the call may write are copied
//! back and every allocation is freed.
//!
//! Typed calls never sit in a user's group, only in the groups rankwise
//! opens itself (`batch_isend_irecv`, `all_to_all_single`), so "after the
//! launch" is the end of the typed call.

use crate::core::Result;
use crate::engine::Memory;

/// One region of a typed call: a host slice's address, byte length, and
/// whether the call may write it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Region {
    pub addr: usize,
    pub len: usize,
    pub writable: bool,
}

#[derive(Debug)]
struct Staged {
    host: Region,
    dev: usize,
}

/// The regions staged for the typed call in progress.
#[derive(Debug, Default)]
pub struct Staging {
    staged: Vec<Staged>,
}

impl Staging {
    /// Copies each non-empty region into a new allocation of `mem`.
    ///
    /// # Safety
    /// Each region must be a live Rust slice of `len` bytes (writable ones
    /// borrowed exclusively) that stays borrowed until [`Staging::finish`].
    pub unsafe fn stage(&mut self, mem: &mut dyn Memory, regions: &[Region]) -> Result<()> {
        for r in regions {
            if r.addr == 0 || r.len == 0 || self.staged.iter().any(|s| s.host.addr == r.addr) {
                continue;
            }
            let dev = mem.alloc(r.len)?;
            // record first, so a failed write still frees it
            self.staged.push(Staged { host: *r, dev });
            // SAFETY: the caller guarantees a live slice of r.len bytes.
            let bytes = unsafe { std::slice::from_raw_parts(r.addr as *const u8, r.len) };
            mem.write(dev, bytes)?;
        }
        Ok(())
    }

    /// The engine address of host address `addr` (NULL stays NULL; an
    /// address no staged region holds is returned as is, for the checks
    /// to reject). One past a region's end maps to one past its copy's.
    pub fn translate(&self, addr: usize) -> usize {
        if addr == 0 {
            return 0;
        }
        // a region that holds the address wins over one it is just past
        // (slices may sit back to back)
        let inside = |s: &&Staged| addr >= s.host.addr && addr < s.host.addr + s.host.len;
        let just_past = |s: &&Staged| addr == s.host.addr + s.host.len;
        self.staged
            .iter()
            .find(inside)
            .or_else(|| self.staged.iter().find(just_past))
            .map_or(addr, |s| s.dev + (addr - s.host.addr))
    }

    /// After the launch: copies writable regions back when `copy_back`,
    /// then frees every allocation. Returns the first error.
    ///
    /// # Safety
    /// The regions staged must still be borrowed as [`Staging::stage`] requires.
    pub unsafe fn finish(&mut self, mem: &mut dyn Memory, copy_back: bool) -> Result<()> {
        let mut first = Ok(());
        for s in self.staged.drain(..) {
            if copy_back && s.host.writable {
                // SAFETY: the caller guarantees a live, exclusively borrowed
                // slice of host.len bytes.
                let dst =
                    unsafe { std::slice::from_raw_parts_mut(s.host.addr as *mut u8, s.host.len) };
                if let Err(e) = mem.read(s.dev, dst) {
                    first = first.and(Err(e));
                }
            }
            if let Err(e) = mem.free(s.dev) {
                first = first.and(Err(e));
            }
        }
        first
    }

    pub fn is_empty(&self) -> bool {
        self.staged.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{AddressSpace, Error, ErrorKind};
    use std::collections::BTreeMap;

    /// Engine memory far from any host address, as a GPU's is.
    #[derive(Default)]
    struct Far {
        blocks: BTreeMap<usize, Vec<u8>>,
        next: usize,
        frees: usize,
    }
    impl AddressSpace for Far {
        fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
            let (b, v) = self.blocks.range(..=addr).next_back()?;
            (addr < b + v.len().max(1)).then_some((*b, v.len()))
        }
    }
    impl Memory for Far {
        fn alloc(&mut self, bytes: usize) -> Result<usize> {
            let base = 0x1_0000_0000 + self.next;
            self.next += 4096;
            self.blocks.insert(base, vec![0; bytes]);
            Ok(base)
        }
        fn free(&mut self, base: usize) -> Result<()> {
            self.frees += 1;
            self.blocks
                .remove(&base)
                .map(|_| ())
                .ok_or_else(|| Error::new(ErrorKind::OutOfBounds, "not allocated"))
        }
        fn write(&mut self, addr: usize, src: &[u8]) -> Result<()> {
            let (b, _) = self.allocation_of(addr).unwrap();
            let v = self.blocks.get_mut(&b).unwrap();
            v[addr - b..addr - b + src.len()].copy_from_slice(src);
            Ok(())
        }
        fn read(&self, addr: usize, dst: &mut [u8]) -> Result<()> {
            let (b, _) = self.allocation_of(addr).unwrap();
            dst.copy_from_slice(&self.blocks[&b][addr - b..addr - b + dst.len()]);
            Ok(())
        }
        fn fill(&mut self, _: usize, _: usize, _: u8) -> Result<()> {
            Ok(())
        }
        fn fill_pattern(&mut self, _: usize, _: usize, _: &[u8]) -> usize {
            0
        }
    }

    #[test]
    fn regions_go_in_come_back_and_are_freed() {
        // back to back, as two slices of one buffer can be
        let mut both = [1u8, 2, 3, 4, 0, 0, 0, 0, 0, 0, 0, 0];
        let (input, output) = both.split_at_mut(4);
        let mut mem = Far::default();
        let mut st = Staging::default();
        let rin = Region {
            addr: input.as_ptr() as usize,
            len: 4,
            writable: false,
        };
        let rout = Region {
            addr: output.as_mut_ptr() as usize,
            len: 8,
            writable: true,
        };
        // SAFETY: both regions are live arrays borrowed for the test.
        unsafe {
            st.stage(
                &mut mem,
                &[
                    rin,
                    rout,
                    Region {
                        addr: 0,
                        len: 0,
                        writable: true,
                    },
                ],
            )
        }
        .unwrap();
        assert_eq!(mem.blocks.len(), 2, "empty regions are not staged");
        let din = st.translate(rin.addr);
        let dout = st.translate(rout.addr + 4);
        assert_eq!(mem.allocation_of(din), Some((din, 4)), "same extent");
        assert_eq!(dout - st.translate(rout.addr), 4, "offsets are kept");
        assert_eq!(
            st.translate(rout.addr + 8),
            st.translate(rout.addr) + 8,
            "one past the end"
        );
        assert_eq!(st.translate(0), 0);
        assert_eq!(
            st.translate(12345),
            12345,
            "unknown addresses stay for the checks"
        );
        let mut got = [0u8; 4];
        mem.read(din, &mut got).unwrap();
        assert_eq!(got, *input, "inputs are copied in");
        // the "launch" writes the output's copy
        mem.write(dout, &[9, 9]).unwrap();
        // SAFETY: the arrays are still borrowed here.
        unsafe { st.finish(&mut mem, true) }.unwrap();
        assert_eq!(output, [0, 0, 0, 0, 9, 9, 0, 0]);
        assert_eq!(input, [1, 2, 3, 4]);
        assert_eq!(both[..4], [1, 2, 3, 4]);
        assert!(mem.blocks.is_empty() && st.is_empty());
        assert_eq!(mem.frees, 2);
    }

    #[test]
    fn a_failed_launch_frees_without_copying_back() {
        let mut output = [7u8; 4];
        let mut mem = Far::default();
        let mut st = Staging::default();
        let r = Region {
            addr: output.as_mut_ptr() as usize,
            len: 4,
            writable: true,
        };
        // SAFETY: live array borrowed for the test.
        unsafe { st.stage(&mut mem, &[r]) }.unwrap();
        mem.write(st.translate(r.addr), &[0; 4]).unwrap();
        // SAFETY: still borrowed.
        unsafe { st.finish(&mut mem, false) }.unwrap();
        assert_eq!(output, [7; 4]);
        assert!(mem.blocks.is_empty());
    }
}
