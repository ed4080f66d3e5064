//! How much of the traffic bound (docs/reference/traffic-bound.md) this
//! machine's memory leaves to an op that writes more than it reads, or
//! reads more than it writes. The bound prices every byte at half a
//! copied one; a copy reads and writes at once, so where the memory reads
//! or writes alone little faster than it does inside a copy, the bytes of
//! the heavier direction take longer than the bound by themselves.
//!
//! One thread per core, each with its own 32 MiB source and four 32 MiB
//! destinations (every page touched before timing), best of ROUNDS:
//!
//! - the fan-out: every 64 KiB piece of the source copied to k = 1, 2, 4
//!   places while it is in cache (AllGather and Broadcast out of place,
//!   k = N), with the C library's copy and the engine's streaming copy;
//!   k = 1 is the copy the bound divides by;
//! - writes alone: the four destinations written from one piece in cache;
//! - reads alone: the four destinations summed, one after another and
//!   all four at once (as a reduction of four inputs reads), the faster;
//! - the fan-in: k = 2, 4 destinations summed into the source, 32 bytes
//!   of each at a time, streamed out (Reduce and ReduceScatter out of
//!   place, which read N bytes per byte written).
//!
//! Then the ceiling for each k: the bound's time for 1 + k bytes moved
//! over the time the k written bytes take alone (fan-out), the k read
//! bytes take alone, or the fan-in itself takes.
//!
//!     cargo run --release --example memory_ceiling [ROUNDS]

use rankwise::engine::local::memory::copy_streaming;
use std::time::Instant;

const SOURCE: usize = 32 << 20;
const PIECE: usize = 64 << 10;
const FANOUT: [usize; 3] = [1, 2, 4];
const PLACES: usize = 4;

type Copy = fn(&mut [u8], &[u8]);

fn memcpy(d: &mut [u8], s: &[u8]) {
    d.copy_from_slice(s)
}

/// One thread's buffers: a source and [`PLACES`] destinations.
type Buffers = (Vec<u8>, Vec<Vec<u8>>);

/// What a round does with each thread's buffers.
#[derive(Clone, Copy)]
enum Pattern {
    /// every piece of the source copied to the first k destinations
    FanOut(usize, Copy),
    /// the destinations written from the source's first piece
    WritesAlone(Copy),
    /// the destinations read one after another
    ReadsAlone,
    /// the destinations read together, a word of each in turn
    ReadsTogether,
    /// the first k destinations summed into the source, streamed out
    FanIn(usize),
}

fn run(bufs: &mut Buffers, pattern: Pattern) {
    let (src, dsts) = bufs;
    match pattern {
        Pattern::FanOut(k, copy) => {
            for at in (0..SOURCE).step_by(PIECE) {
                for d in dsts.iter_mut().take(k) {
                    copy(&mut d[at..at + PIECE], &src[at..at + PIECE]);
                }
            }
        }
        Pattern::WritesAlone(copy) => {
            for at in (0..SOURCE).step_by(PIECE) {
                for d in dsts.iter_mut() {
                    copy(&mut d[at..at + PIECE], &src[..PIECE]);
                }
            }
        }
        Pattern::ReadsAlone => {
            let sum = dsts.iter().fold(0u64, |acc, d| {
                d.chunks_exact(8).fold(acc, |a, w| {
                    a.wrapping_add(u64::from_ne_bytes(w.try_into().expect("8 bytes")))
                })
            });
            std::hint::black_box(sum);
        }
        Pattern::ReadsTogether => {
            // four streams at once, as a reduction of four inputs reads
            let [d0, d1, d2, d3] = &dsts[..] else {
                unreachable!("{PLACES} destinations")
            };
            let sum = lines(d0).zip(lines(d1)).zip(lines(d2).zip(lines(d3))).fold(
                0u64,
                |acc, ((a, b), (c, d))| {
                    let mut x = [0u8; 32];
                    for i in 0..32 {
                        x[i] = a[i] ^ b[i] ^ c[i] ^ d[i];
                    }
                    acc.wrapping_add(
                        u64::from_ne_bytes(x[..8].try_into().expect("8 bytes"))
                            ^ u64::from_ne_bytes(x[24..].try_into().expect("8 bytes")),
                    )
                },
            );
            std::hint::black_box(sum);
        }
        Pattern::FanIn(k) => {
            let inputs: Vec<&[u8]> = dsts[..k].iter().map(|d| &d[..]).collect();
            fan_in(src, &inputs);
        }
    }
}

/// `out` = a sum of `inputs` read as a reduction reads them: 32 bytes of
/// every input at a time in registers, each result streamed out. Only
/// the traffic is measured, so the sums are whatever is cheapest (32-bit
/// lanes in the body, bytes in the unaligned head and tail and where the
/// CPU lacks AVX2).
fn fan_in(out: &mut [u8], inputs: &[&[u8]]) {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: AVX2 is present (checked above).
        return unsafe { fan_in_avx2(out, inputs) };
    }
    for (i, o) in out.iter_mut().enumerate() {
        *o = inputs.iter().fold(0u8, |a, x| a.wrapping_add(x[i]));
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
fn fan_in_avx2(out: &mut [u8], inputs: &[&[u8]]) {
    use std::arch::x86_64::*;
    assert!(inputs.iter().all(|x| x.len() >= out.len()));
    // streaming stores need 32-byte alignment: the head and tail plainly
    let head = out.as_ptr().align_offset(32).min(out.len());
    let body = (out.len() - head) / 32 * 32;
    for i in (0..head).chain(head + body..out.len()) {
        out[i] = inputs.iter().fold(0u8, |a, x| a.wrapping_add(x[i]));
    }
    for at in (head..head + body).step_by(32) {
        let mut sum = _mm256_setzero_si256();
        for x in inputs {
            // SAFETY: `at + 32 <= out.len() <= x.len()`; unaligned load.
            let v = unsafe { _mm256_loadu_si256(x.as_ptr().add(at).cast()) };
            sum = _mm256_add_epi32(sum, v);
        }
        // SAFETY: `at + 32 <= head + body <= out.len()`, and `out + at` is
        // 32-byte aligned (`head` aligns it; `at - head` is a multiple of 32).
        unsafe { _mm256_stream_si256(out.as_mut_ptr().add(at).cast(), sum) };
    }
    _mm_sfence();
}

/// `d` 32 bytes at a time.
fn lines(d: &[u8]) -> impl Iterator<Item = [u8; 32]> + '_ {
    d.chunks_exact(32).map(|c| c.try_into().expect("32 bytes"))
}

/// The best time of `rounds` rounds, every thread running `pattern`.
fn best(bufs: &mut [Buffers], rounds: usize, pattern: Pattern) -> f64 {
    (0..rounds)
        .map(|_| {
            let t = Instant::now();
            std::thread::scope(|sc| {
                for b in bufs.iter_mut() {
                    sc.spawn(move || run(b, pattern));
                }
            });
            t.elapsed().as_secs_f64()
        })
        .fold(f64::INFINITY, f64::min)
}

fn main() {
    let rounds: usize = std::env::args()
        .nth(1)
        .and_then(|a| a.parse().ok())
        .unwrap_or(5);
    let threads = rankwise::machine::cores();
    let mut bufs: Vec<Buffers> = (0..threads)
        .map(|t| (vec![t as u8 + 1; SOURCE], vec![vec![1u8; SOURCE]; PLACES]))
        .collect();
    let bytes = (threads * SOURCE) as f64;
    println!(
        "{threads} threads, {} MiB source per thread, best of {rounds} rounds",
        SOURCE >> 20
    );
    println!("| copy | k | GB/s (read + written) | / k = 1 |");
    println!("|---|---:|---:|---:|");
    // the bound's copy rate (bytes copied per second, the faster kind's)
    // and the fastest writing alone (seconds per byte written)
    let (mut copy_rate, mut write) = (0.0f64, f64::INFINITY);
    for (name, copy) in [
        ("memcpy", memcpy as Copy),
        ("streaming", copy_streaming as Copy),
    ] {
        let mut base = 0.0;
        for k in FANOUT {
            let rate = (1 + k) as f64 * bytes / best(&mut bufs, rounds, Pattern::FanOut(k, copy));
            if k == 1 {
                base = rate;
                copy_rate = copy_rate.max(rate / 2.0);
            }
            println!("| {name} | {k} | {:.1} | {:.2} |", rate / 1e9, rate / base);
        }
        let alone = best(&mut bufs, rounds, Pattern::WritesAlone(copy));
        write = write.min(alone / (PLACES as f64 * bytes));
    }
    // seconds per byte read, the faster way's
    let read = [Pattern::ReadsAlone, Pattern::ReadsTogether]
        .map(|p| best(&mut bufs, rounds, p))
        .into_iter()
        .fold(f64::INFINITY, f64::min)
        / (PLACES as f64 * bytes);
    println!(
        "\ncopy (the bound's rate): {:.1} GB/s copied; writing alone: {:.1} GB/s; reading alone: {:.1} GB/s",
        copy_rate / 1e9,
        1.0 / write / 1e9,
        1.0 / read / 1e9
    );
    println!(
        "| k | the most of the bound k writes per read leave | k reads per write leave | the fan-in of k measured |"
    );
    println!("|---:|---:|---:|---:|");
    for k in FANOUT {
        // the bound's time for 1 + k bytes moved, over the heavier side's
        // alone, or over the fan-in's own time
        let bound = (1 + k) as f64 / (2.0 * copy_rate);
        let fan_in = match k {
            1 => "—".to_string(),
            _ => {
                let t = best(&mut bufs, rounds, Pattern::FanIn(k)) / bytes;
                format!("{:.2}", bound / t)
            }
        };
        let k = k as f64;
        println!(
            "| {k} | {:.2} | {:.2} | {fan_in} |",
            bound / (k * write),
            bound / (k * read)
        );
    }
}
