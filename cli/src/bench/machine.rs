//! What the machine can do: cores, the memory-copy bandwidth with one
//! thread and with every thread (the denominator of the copy bound), and
//! the memory a run may use ([`available_memory`]).
//!
//! Bandwidth is bytes copied per second (a copy of B bytes reads B and writes
//! B). Two copy kernels are measured, the C library's `memcpy` and the
//! engine's streaming copy (non-temporal stores, `memory::copy_streaming`),
//! and the bound uses the faster: the bound is what the machine can do, not
//! what one routine does.

use super::limits::{Available, ProcessLimit};
use rankwise::engine::local::memory::copy_streaming;
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

    /// A machine whose copy bandwidth was not measured (zero): for the
    /// ranks of an MPI job other than rank 0, whose figures are not shown.
    pub fn unprobed() -> Machine {
        Machine {
            cores: cores(),
            memcpy_1: 0.0,
            memcpy_all: 0.0,
            stream_1: 0.0,
            stream_all: 0.0,
        }
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

/// The cores this process may run on (the probe copies with one thread
/// per core), and how busy the machine has been.
pub use rankwise::machine::{busy_seconds, cores};

/// The CPUs online (`/sys/devices/system/cpu/online`), which is what
/// glibc's `malloc` counts when it bounds its arenas; the cores this
/// process may use ([`cores`]) when that cannot be read.
pub fn online_cpus() -> usize {
    std::fs::read_to_string("/sys/devices/system/cpu/online")
        .ok()
        .and_then(|t| cpu_list_len(&t))
        .unwrap_or_else(cores)
}

/// The number of CPUs in a kernel CPU list such as `0-3,8,10-11`.
pub fn cpu_list_len(list: &str) -> Option<usize> {
    list.trim().split(',').try_fold(0usize, |total, part| {
        let (lo, hi) = part.split_once('-').unwrap_or((part, part));
        let (lo, hi): (usize, usize) = (lo.parse().ok()?, hi.parse().ok()?);
        total.checked_add(hi.checked_sub(lo)?.checked_add(1)?)
    })
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

/// The memory this process may use now: the machine's `MemAvailable`, and
/// the address-space and data limits (`ulimit -v`, `ulimit -d`) less what
/// the process already maps. Read from `/proc`; where it cannot be read the
/// answer says why (and [`Available::machine_bytes`] assumes a stated amount).
pub fn available_memory() -> Available {
    let machine = std::fs::read_to_string("/proc/meminfo")
        .map_err(|e| format!("/proc/meminfo cannot be read ({e})"))
        .and_then(|t| {
            kib_field(&t, "MemAvailable").ok_or_else(|| "/proc/meminfo has no MemAvailable".into())
        });
    let limits = std::fs::read_to_string("/proc/self/limits").unwrap_or_default();
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let process = [
        ("address space (ulimit -v)", "Max address space", "VmSize"),
        ("data (ulimit -d)", "Max data size", "VmData"),
    ]
    .into_iter()
    .filter_map(|(name, limit, used)| {
        Some(ProcessLimit {
            name,
            limit: soft_limit(&limits, limit)?,
            used: kib_field(&status, used).unwrap_or(0),
        })
    })
    .collect();
    Available { machine, process }
}

/// A `Name:   1234 kB` line of `/proc/meminfo` or `/proc/self/status`, in bytes.
pub fn kib_field(text: &str, name: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(name)?.strip_prefix(':')?;
        let mut words = rest.split_whitespace();
        let kib: u64 = words.next()?.parse().ok()?;
        (words.next() == Some("kB"))
            .then_some(kib)?
            .checked_mul(1024)
    })
}

/// The soft limit, in bytes, on the `limit` line of `/proc/self/limits`;
/// `None` when it is unlimited or not there.
pub fn soft_limit(text: &str, limit: &str) -> Option<u64> {
    text.lines().find_map(|l| {
        let rest = l.strip_prefix(limit)?;
        let mut words = rest.split_whitespace();
        let soft = words.next()?;
        // the units column: bytes for every memory limit
        (words.nth(1) == Some("bytes")).then_some(())?;
        soft.parse().ok()
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_machine_has_been_busy_and_only_more_so_later() {
        let a = busy_seconds().expect("/proc/stat on Linux");
        let t = std::time::Instant::now();
        while t.elapsed() < std::time::Duration::from_millis(30) {
            std::hint::spin_loop();
        }
        let b = busy_seconds().unwrap();
        assert!(a > 0.0 && b >= a, "{a} then {b}");
    }

    #[test]
    fn memory_figures_are_read_from_proc_text() {
        let meminfo =
            "MemTotal:       24683584 kB\nMemFree:  100 kB\nMemAvailable:   22132848 kB\n";
        assert_eq!(kib_field(meminfo, "MemAvailable"), Some(22_132_848 * 1024));
        assert_eq!(kib_field(meminfo, "MemAvail"), None, "whole names only");
        assert_eq!(kib_field("MemAvailable: lots\n", "MemAvailable"), None);
        assert_eq!(kib_field("MemAvailable: 5 MB\n", "MemAvailable"), None);
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max data size             unlimited            unlimited            bytes     \n\
                      Max address space         4294967296           8589934592           bytes     \n";
        let limits: String = limits
            .lines()
            .map(|l| l.trim_start().to_string() + "\n")
            .collect();
        assert_eq!(soft_limit(&limits, "Max address space"), Some(4 << 30));
        assert_eq!(soft_limit(&limits, "Max data size"), None, "unlimited");
        assert_eq!(soft_limit(&limits, "Max stack size"), None, "absent");
    }

    #[test]
    fn cpu_lists_are_counted() {
        assert_eq!(cpu_list_len("0-1\n"), Some(2));
        assert_eq!(cpu_list_len("0"), Some(1));
        assert_eq!(cpu_list_len("0-3,8,10-11"), Some(7));
        assert_eq!(cpu_list_len("3-1"), None);
        assert_eq!(cpu_list_len(""), None);
    }
}
