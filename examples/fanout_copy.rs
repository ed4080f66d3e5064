//! How fast this machine moves memory when each byte read is written to k
//! places, as AllGather and Broadcast do (k = N out of place): one thread
//! per core, each reading its own 32 MiB source in 64 KiB pieces and
//! copying every piece to k destinations while it is in cache, with the C
//! library's copy and with the engine's streaming copy. Prints the traffic
//! rate (bytes read plus bytes written, per second) for k = 1, 2, 4 and its
//! ratio to k = 1, the plain copy that `%bound` divides by
//! (docs/reference/traffic-bound.md). Where writes cost more than reads,
//! the ratio falls below 1 and so does the share of the bound a
//! write-heavy collective can reach.
//!
//!     cargo run --release --example fanout_copy [ROUNDS]

use rankwise::engine::local::memory::copy_streaming;
use std::time::Instant;

const SOURCE: usize = 32 << 20;
const PIECE: usize = 64 << 10;
const FANOUT: [usize; 3] = [1, 2, 4];

type Copy = fn(&mut [u8], &[u8]);

fn memcpy(d: &mut [u8], s: &[u8]) {
    d.copy_from_slice(s)
}

/// Seconds for every thread to copy its source to `k` destinations.
fn round(bufs: &mut [(Vec<u8>, Vec<Vec<u8>>)], k: usize, copy: Copy) -> f64 {
    let t = Instant::now();
    std::thread::scope(|sc| {
        for (src, dsts) in bufs.iter_mut() {
            sc.spawn(move || {
                for at in (0..SOURCE).step_by(PIECE) {
                    for d in dsts.iter_mut().take(k) {
                        copy(&mut d[at..at + PIECE], &src[at..at + PIECE]);
                    }
                }
            });
        }
    });
    t.elapsed().as_secs_f64()
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let threads = rankwise::machine::cores();
    // every page touched before timing
    let mut bufs: Vec<(Vec<u8>, Vec<Vec<u8>>)> = (0..threads)
        .map(|t| (vec![t as u8 + 1; SOURCE], vec![vec![1u8; SOURCE]; 4]))
        .collect();
    println!(
        "{threads} threads, {} MiB read per thread, best of {rounds} rounds",
        SOURCE >> 20
    );
    println!("| copy | k | GB/s (read + written) | / k = 1 |");
    println!("|---|---:|---:|---:|");
    for (name, copy) in [
        ("memcpy", memcpy as Copy),
        ("streaming", copy_streaming as Copy),
    ] {
        let mut base = 0.0;
        for k in FANOUT {
            let best = (0..rounds)
                .map(|_| round(&mut bufs, k, copy))
                .fold(f64::INFINITY, f64::min);
            let rate = (threads * SOURCE * (1 + k)) as f64 / best / 1e9;
            if k == 1 {
                base = rate;
            }
            println!("| {name} | {k} | {rate:.1} | {:.2} |", rate / base);
        }
    }
}
