//! Where streaming stores start to pay on this machine: the local engine
//! writes a call's outputs with them when the call's buffers outgrow the
//! last-level cache, and with plain stores below that, so repeated calls
//! find their data in the cache. Whether the cache gives the data back
//! faster than memory takes streamed lines depends on the machine (on a
//! large L3 shared by many cores, two cores may not get its capacity or
//! its speed); this measures it with the engine's own streaming copy.
//!
//! One thread per core this process may run on, each copying its share of
//! a footprint (source plus destination) again and again (256 MiB or the
//! footprint, whichever is more, per round), best of ROUNDS after one
//! untimed round, for footprints from 1 MiB to 512 MiB:
//!
//!     cargo run --release --example store_crossover [ROUNDS]
//!
//! Prints per footprint the rate of the C library's copy (plain stores)
//! and of the streaming copy, read plus written, their ratio, and which
//! the engine would choose for a call of that footprint.

use rankwise::engine::local::memory::copy_streaming;
use rankwise::engine::local::{last_level_cache, streams_footprint};
use std::time::Instant;

type Copy = fn(&mut [u8], &[u8]);

fn memcpy(d: &mut [u8], s: &[u8]) {
    d.copy_from_slice(s)
}

/// Bytes read plus written per second, best of `rounds`, every thread
/// copying its own source to its own destination with `copy`, `times`
/// times in a row (so a round lasts long enough to time, and the
/// footprint is copied again as a benchmark's or a training loop's calls
/// touch theirs).
fn rate(bufs: &mut [(Vec<u8>, Vec<u8>)], rounds: usize, times: usize, copy: Copy) -> f64 {
    let bytes: usize = bufs.iter().map(|(s, d)| s.len() + d.len()).sum();
    let mut best = f64::INFINITY;
    // the first round is untimed: it faults the pages in and fills the cache
    for round in 0..=rounds {
        let t = Instant::now();
        std::thread::scope(|sc| {
            for (src, dst) in bufs.iter_mut() {
                sc.spawn(move || {
                    for _ in 0..times {
                        copy(dst, src);
                    }
                });
            }
        });
        if round > 0 {
            best = best.min(t.elapsed().as_secs_f64());
        }
    }
    (times * bytes) as f64 / best
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .filter(|&r| r > 0)
        .unwrap_or(5);
    let threads = rankwise::machine::cores();
    let llc = last_level_cache();
    println!(
        "{threads} threads, last-level cache {} MiB, best of {rounds} rounds",
        llc >> 20
    );
    println!(
        "| footprint (MiB) | plain GB/s | streaming GB/s | streaming / plain | the engine streams |"
    );
    println!("|---:|---:|---:|---:|---|");
    for shift in 20..=29 {
        let footprint = 1usize << shift;
        // each thread's source and destination: half its share each, whole lines
        let half = (footprint / threads / 2) & !63;
        let mut bufs: Vec<(Vec<u8>, Vec<u8>)> = (0..threads)
            .map(|t| (vec![t as u8 + 1; half], vec![0u8; half]))
            .collect();
        // at least 256 MiB copied per round
        let times = ((256 << 20) / footprint).max(1);
        let plain = rate(&mut bufs, rounds, times, memcpy);
        let streaming = rate(&mut bufs, rounds, times, copy_streaming);
        println!(
            "| {} | {:.1} | {:.1} | {:.2} | {} |",
            footprint >> 20,
            plain / 1e9,
            streaming / 1e9,
            streaming / plain,
            if streams_footprint(footprint) {
                "yes"
            } else {
                "no"
            }
        );
    }
}
