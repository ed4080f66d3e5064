//! How fast this machine moves memory when each byte read is written to k
//! places, as AllGather and Broadcast do (k = N out of place): one thread
//! per core, each reading its own 32 MiB source in 64 KiB pieces and
//! copying every piece to k destinations while it is in cache, with the C
//! library's copy and with the engine's streaming copy. Prints the traffic
//! rate (bytes read plus bytes written, per second) for k = 1, 2, 4 and its
//! ratio to k = 1, the plain copy that `%bound` divides by
//! (docs/reference/traffic-bound.md).
//!
//! Then the writes alone: the same k = 4 destinations written from a piece
//! that stays in cache, so nothing is read from memory. The bound prices a
//! written byte as half a copied one; where writing alone is slower than
//! that, no fan-out reaches the bound, and the last column says how much of
//! it the writes leave: the bound's time for a fan-out of k over the time
//! its k written bytes take alone.
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

/// Where each piece comes from: the source's own bytes, or its first
/// piece every time (in cache after the first copy: the writes alone).
#[derive(Clone, Copy, PartialEq)]
enum From {
    Source,
    Cached,
}

/// Seconds for every thread to copy its source to `k` destinations.
fn round(bufs: &mut [(Vec<u8>, Vec<Vec<u8>>)], k: usize, copy: Copy, from: From) -> f64 {
    let t = Instant::now();
    std::thread::scope(|sc| {
        for (src, dsts) in bufs.iter_mut() {
            sc.spawn(move || {
                for at in (0..SOURCE).step_by(PIECE) {
                    let read = if from == From::Cached { 0 } else { at };
                    for d in dsts.iter_mut().take(k) {
                        copy(&mut d[at..at + PIECE], &src[read..read + PIECE]);
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
    let mut best = |k: usize, copy: Copy, from: From| {
        (0..rounds)
            .map(|_| round(&mut bufs, k, copy, from))
            .fold(f64::INFINITY, f64::min)
    };
    let bytes = (threads * SOURCE) as f64;
    println!(
        "{threads} threads, {} MiB read per thread, best of {rounds} rounds",
        SOURCE >> 20
    );
    println!("| copy | k | GB/s (read + written) | / k = 1 |");
    println!("|---|---:|---:|---:|");
    // the bound's copy rate (bytes copied per second) and the fastest
    // writing alone (seconds per byte written), each the better kind's
    let (mut copy_rate, mut write) = (0.0f64, f64::INFINITY);
    let k_max = FANOUT[FANOUT.len() - 1];
    for (name, copy) in [
        ("memcpy", memcpy as Copy),
        ("streaming", copy_streaming as Copy),
    ] {
        let mut base = 0.0;
        for k in FANOUT {
            let rate = (1 + k) as f64 * bytes / best(k, copy, From::Source);
            if k == 1 {
                base = rate;
                copy_rate = copy_rate.max(rate / 2.0);
            }
            println!("| {name} | {k} | {:.1} | {:.2} |", rate / 1e9, rate / base);
        }
        write = write.min(best(k_max, copy, From::Cached) / (k_max as f64 * bytes));
    }
    println!(
        "\nwriting alone: {:.1} GB/s; the copy bound's rate: {:.1} GB/s copied",
        1.0 / write / 1e9,
        copy_rate / 1e9
    );
    println!("| k | most of the bound the writes leave |");
    println!("|---:|---:|");
    for k in FANOUT {
        // the bound's time for 1 + k bytes moved over the writes' for k
        let bound = (1 + k) as f64 / (2.0 * copy_rate);
        println!("| {k} | {:.2} |", bound / (k as f64 * write));
    }
}
