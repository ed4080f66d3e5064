//! Buffers between guard regions, for misuse scenarios: each buffer is
//! filled with a rank-specific pattern and snapshotted, so any byte a call
//! changes outside its legal outputs (a guard, an input) is counted.

use rankwise::{Comm, Result};

/// Bytes of guard before and after every buffer.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xCC;

/// Buffers with guard regions, and a snapshot to compare against.
#[derive(Default)]
pub struct Guards {
    regions: Vec<Region>,
}

struct Region {
    base: usize,
    len: usize,
    /// the interior may be written by the call (an output)
    writable: bool,
    snapshot: Vec<u8>,
}

impl Guards {
    /// A buffer of `bytes` between two guards, filled with a rank-specific
    /// pattern; returns the interior address.
    pub fn buffer(&mut self, c: &mut Comm, bytes: usize, writable: bool) -> Result<usize> {
        let base = c.alloc(bytes + 2 * GUARD)?;
        let mut fill = vec![GUARD_BYTE; bytes + 2 * GUARD];
        for (i, b) in fill[GUARD..GUARD + bytes].iter_mut().enumerate() {
            *b = (i * 7 + c.rank() * 31 + 1) as u8;
        }
        c.write(base, &fill)?;
        self.regions.push(Region {
            base,
            len: bytes,
            writable,
            snapshot: fill,
        });
        Ok(base + GUARD)
    }
    /// An input buffer (never written by the call).
    pub fn input(&mut self, c: &mut Comm, bytes: usize) -> Result<usize> {
        self.buffer(c, bytes, false)
    }
    /// An output buffer (its interior may be written).
    pub fn output(&mut self, c: &mut Comm, bytes: usize) -> Result<usize> {
        self.buffer(c, bytes, true)
    }
    /// The interior of every output buffer as it is now, in the order the
    /// buffers were made (for recording what a call wrote there).
    pub fn outputs(&self, c: &Comm) -> Result<Vec<Vec<u8>>> {
        self.regions
            .iter()
            .filter(|r| r.writable)
            .map(|r| c.read(r.base + GUARD, r.len))
            .collect()
    }
    /// The pattern an output's interior held before the call, per buffer.
    pub fn initial_outputs(&self) -> Vec<Vec<u8>> {
        self.regions
            .iter()
            .filter(|r| r.writable)
            .map(|r| r.snapshot[GUARD..GUARD + r.len].to_vec())
            .collect()
    }
    /// Bytes changed where nothing may change: guards, inputs.
    pub fn violations(&self, c: &Comm) -> usize {
        let mut bad = 0;
        for r in &self.regions {
            let now: Vec<u8> = c.read(r.base, r.len + 2 * GUARD).unwrap_or_default();
            for (i, (a, b)) in now.iter().zip(&r.snapshot).enumerate() {
                let interior = (GUARD..GUARD + r.len).contains(&i);
                if a != b && !(interior && r.writable) {
                    bad += 1;
                }
            }
        }
        bad
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn guards_catch_a_stray_write() {
        let out = rankwise::local::launch(1, |c| {
            let mut g = Guards::default();
            let inp = g.input(c, 16)?;
            let out = g.output(c, 16)?;
            c.write(out, &[1u8; 16])?;
            let clean = g.violations(c);
            c.write(out + 16, &[9u8])?; // one byte into the guard after the output
            c.write(inp, &[0u8])?; // and one into the input
            Ok((clean, g.violations(c)))
        })
        .unwrap();
        assert_eq!(out, vec![(0, 2)]);
        let out = rankwise::local::launch(1, |c| {
            let mut g = Guards::default();
            g.input(c, 4)?;
            let out = g.output(c, 4)?;
            let before = g.initial_outputs();
            c.write(out + 1, &[0u8])?;
            Ok((before, g.outputs(c)?))
        })
        .unwrap();
        let (before, after) = &out[0];
        assert_eq!(before, &vec![vec![1u8, 8, 15, 22]], "the output's fill");
        assert_eq!(
            after,
            &vec![vec![1u8, 0, 15, 22]],
            "only outputs, as written"
        );
    }
}
