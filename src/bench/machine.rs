//! What the machine can do: cores, and the memory-copy bandwidth with one
//! thread and with every thread, the denominator of the copy bound.
//!
//! Bandwidth is bytes copied per second (a copy of B bytes reads B and writes
//! B). Two copy kernels are measured, the C library's `memcpy` and the
//! engine's streaming copy (non-temporal stores, `memory::copy_streaming`),
//! and the bound uses the faster: the bound is what the machine can do, not
//! what one routine does.

use crate::engine::local::memory::copy_streaming;
use std::time::Instant;

/// Buffer per thread: far larger than any core's private cache.
pub const PROBE_BYTES: usize = 64 << 20;

#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Machine {
    /// `std::thread::available_parallelism`
    pub cores: usize,
    /// bytes copied per second by `memcpy`, one thread
    pub memcpy_1: f64,
    /// … with `cores` threads at once, all together
    pub memcpy_all: f64,
    /// bytes copied per second by the streaming copy, one thread
    pub stream_1: f64,
    /// … with `cores` threads at once
    pub stream_all: f64,
}

impl Machine {
    /// Copy bandwidth with one thread: the faster kernel.
    pub fn copy_1(&self) -> f64 {
        self.memcpy_1.max(self.stream_1)
    }
    /// Copy bandwidth with every thread: the bound's denominator.
    pub fn copy_all(&self) -> f64 {
        self.memcpy_all.max(self.stream_all)
    }

    /// Measures: each figure is the best of `reps` copies of
    /// [`PROBE_BYTES`] per thread (threads start together).
    pub fn probe(reps: usize) -> Machine {
        let mut p = Probe::new();
        let memcpy_1 = rate(&mut p.bufs[..1], &p.cores, reps, memcpy);
        let stream_1 = rate(&mut p.bufs[..1], &p.cores, reps, stream);
        let memcpy_all = rate(&mut p.bufs, &p.cores, reps, memcpy);
        let stream_all = rate(&mut p.bufs, &p.cores, reps, stream);
        Machine {
            cores: p.bufs.len(),
            memcpy_1,
            memcpy_all,
            stream_1,
            stream_all,
        }
    }
}

fn memcpy(d: &mut [u8], s: &[u8]) {
    d.copy_from_slice(s)
}

fn stream(d: &mut [u8], s: &[u8]) {
    copy_streaming(d, s)
}

/// The cores this process may run on (`std::thread::available_parallelism`):
/// the probe copies with one thread per core.
pub fn cores() -> usize {
    std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1)
}

/// Buffers for measuring the copy bandwidth again during a run: on a shared
/// machine it drifts, so rows that stream from memory are compared with
/// copies made between their timed calls (`run`).
pub struct Probe {
    bufs: Vec<(Vec<u8>, Vec<u8>)>,
    /// the process's cores, read when the probe is made (on an unpinned thread)
    cores: Vec<core_affinity::CoreId>,
}

impl Default for Probe {
    fn default() -> Self {
        Probe::new()
    }
}

impl Probe {
    /// [`PROBE_BYTES`] twice per core, every page touched.
    pub fn new() -> Probe {
        let cores = cores();
        let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..cores)
            .map(|t| (vec![t as u8 + 1; PROBE_BYTES], vec![0u8; PROBE_BYTES]))
            .collect();
        for (s, d) in &mut bufs {
            d.copy_from_slice(s);
        }
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        Probe { bufs, cores }
    }
    /// Copy bandwidth with every thread now: the faster kernel, one round each.
    pub fn copy_all(&mut self) -> f64 {
        rate(&mut self.bufs, &self.cores, 1, memcpy).max(rate(
            &mut self.bufs,
            &self.cores,
            1,
            stream,
        ))
    }
}

/// Best bytes per second over `reps` rounds, each round one copy per buffer
/// pair on its own thread.
fn rate(
    bufs: &mut [(Vec<u8>, Vec<u8>)],
    cores: &[core_affinity::CoreId],
    reps: usize,
    copy: impl Fn(&mut [u8], &[u8]) + Sync,
) -> f64 {
    let mut best = f64::INFINITY;
    let bytes: usize = bufs.iter().map(|(s, _)| s.len()).sum();
    // thread t on core t: threads inherit their creator's affinity, and the
    // creator may be a rank pinned to one core (so `cores` is read where the
    // probe is made, not here)
    for _ in 0..reps.max(1) {
        let barrier = std::sync::Barrier::new(bufs.len());
        let copy = &copy;
        let barrier = &barrier;
        let secs = std::thread::scope(|sc| {
            let handles: Vec<_> = bufs
                .iter_mut()
                .enumerate()
                .map(|(t, (s, d))| {
                    sc.spawn(move || {
                        if let Some(core) = cores.get(t) {
                            core_affinity::set_for_current(*core);
                        }
                        barrier.wait();
                        let t = Instant::now();
                        copy(d, s);
                        std::hint::black_box(&d[0]);
                        t.elapsed().as_secs_f64()
                    })
                })
                .collect();
            handles
                .into_iter()
                .map(|h| h.join().unwrap_or(f64::INFINITY))
                .fold(0.0, f64::max)
        });
        best = best.min(secs);
    }
    bytes as f64 / best
}
