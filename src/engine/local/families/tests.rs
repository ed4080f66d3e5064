//! Every family, cut into parts and moved by several threads that claim
//! the parts in a scrambled order, against closed-form results: the
//! disjointness each family's module doc argues, checked element by
//! element on every rank, in and out of place.

use super::{Part, run};
use crate::core::{Call, Element, Func, RedOp};
use crate::engine::local::memory::Phase;
use std::sync::atomic::{AtomicUsize, Ordering::Relaxed};

const N: usize = 3;
const ROOT: usize = 1;
/// Counts that end inside a cache line, and cuts with empty parts.
const COUNTS: [usize; 3] = [1, 333, 4099];
const PER_RANK: [usize; 3] = [1, 2, 5];

/// One rank's memory: the send buffer at `send`, the receive buffer at
/// `recv` (element offsets into `mem`; equal or overlapping in place).
struct Rank<T> {
    mem: Vec<T>,
    send: usize,
    recv: usize,
}

/// Where each rank's buffers go, as element offsets: (send, recv, total).
type Place = fn(r: usize, send_len: usize, recv_len: usize) -> (usize, usize, usize);

fn out_of_place(_: usize, send_len: usize, recv_len: usize) -> (usize, usize, usize) {
    (0, send_len, send_len + recv_len)
}
/// AllReduce, Reduce, Broadcast in place: one buffer for both.
fn same(_: usize, send_len: usize, recv_len: usize) -> (usize, usize, usize) {
    (0, 0, send_len.max(recv_len))
}
/// AllGather in place: the input is block r of the output.
fn input_is_block(r: usize, send_len: usize, recv_len: usize) -> (usize, usize, usize) {
    (r * send_len, 0, recv_len)
}
/// ReduceScatter in place: the output is block r of the input.
fn output_is_block(r: usize, send_len: usize, recv_len: usize) -> (usize, usize, usize) {
    (0, r * recv_len, send_len)
}

/// Runs `func` over N ranks whose send buffers hold `input(r, i)` and
/// whose memory is otherwise `fill`, moving its `N·per_rank` parts from 3
/// threads that claim them in the order `k·7 mod of` (7 is prime to every
/// `of` used); returns each rank's receive buffer.
fn moved<T: Element>(
    func: Func,
    count: usize,
    per_rank: usize,
    place: Place,
    input: impl Fn(usize, usize) -> T,
    fill: T,
) -> Vec<Vec<T>> {
    let dt = T::DTYPE;
    let mut ranks: Vec<Rank<T>> = (0..N)
        .map(|r| {
            let l = crate::core::layout::layout(func, N, r, ROOT, count);
            let (send, recv, len) = place(r, l.send_elems, l.recv_elems);
            let mut mem = vec![fill; len.max(1)];
            for i in 0..l.send_elems {
                mem[send + i] = input(r, i);
            }
            Rank { mem, send, recv }
        })
        .collect();
    let size = dt.size();
    let calls: Vec<Call> = ranks
        .iter_mut()
        .map(|k| {
            let base = k.mem.as_mut_ptr() as usize;
            Call {
                func,
                sendbuff: base + k.send * size,
                recvbuff: base + k.recv * size,
                count,
                datatype: dt,
                op: RedOp::Sum,
                op_code: 0,
                root: ROOT,
            }
        })
        .collect();
    let of = N * per_rank;
    assert_ne!(of % 7, 0);
    let next = AtomicUsize::new(0);
    std::thread::scope(|s| {
        for _ in 0..3 {
            s.spawn(|| {
                // SAFETY: as in a data phase: every rank's memory outlives
                // the scope and is untouched by this test meanwhile, and the
                // calls describe it; the parts write disjoint bytes and read
                // none that another part writes (what this test checks).
                let phase = unsafe { Phase::enter() };
                loop {
                    let k = next.fetch_add(1, Relaxed);
                    if k >= of {
                        break;
                    }
                    run(
                        &phase,
                        Part {
                            index: k * 7 % of,
                            of,
                        },
                        &calls,
                    );
                }
                phase.fence();
            });
        }
    });
    ranks
        .into_iter()
        .enumerate()
        .map(|(r, k)| {
            let recv_elems = crate::core::layout::layout(func, N, r, ROOT, count).recv_elems;
            k.mem[k.recv..k.recv + recv_elems].to_vec()
        })
        .collect()
}

/// Rank r's element i, for reductions (sums stay exact in i32).
fn x(r: usize, i: usize) -> i32 {
    (1000 * r + i) as i32
}
/// Σ_r x(r, i) = 1000·N(N−1)/2 + N·i.
fn sum(i: usize) -> i32 {
    (1000 * N * (N - 1) / 2 + N * i) as i32
}
/// Rank r's byte i, for copies.
fn b(r: usize, i: usize) -> u8 {
    (7 * r + 3 * i) as u8
}

/// Calls every (count, parts per rank) with `check(count, outputs, what)`.
fn each_cut<T: Element>(
    func: Func,
    places: &[(&str, Place)],
    input: impl Fn(usize, usize) -> T + Copy,
    fill: T,
    check: impl Fn(usize, &[Vec<T>], &str),
) {
    for count in COUNTS {
        for per_rank in PER_RANK {
            for (name, place) in places {
                let outs = moved(func, count, per_rank, *place, input, fill);
                let what = format!("{func}, count {count}, {per_rank} parts per rank, {name}");
                assert_eq!(outs.len(), N);
                check(count, &outs, &what);
            }
        }
    }
}

#[test]
fn reductions_cut_into_parts_moved_in_any_order() {
    let both: [(&str, Place); 2] = [("out of place", out_of_place), ("in place", same)];
    each_cut(Func::AllReduce, &both, x, -1, |_, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, sum(i), "rank {d} element {i}, {what}");
            }
        }
    });
    each_cut(Func::Reduce, &both, x, -1, |count, outs, what| {
        assert_eq!(outs[ROOT].len(), count);
        for (i, v) in outs[ROOT].iter().enumerate() {
            assert_eq!(*v, sum(i), "root element {i}, {what}");
        }
    });
    let rs: [(&str, Place); 2] = [
        ("out of place", out_of_place),
        ("in place", output_is_block),
    ];
    each_cut(Func::ReduceScatter, &rs, x, -1, |count, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            assert_eq!(out.len(), count);
            for (o, v) in out.iter().enumerate() {
                assert_eq!(*v, sum(d * count + o), "rank {d} element {o}, {what}");
            }
        }
    });
}

#[test]
fn copies_cut_into_parts_moved_in_any_order() {
    let oop: [(&str, Place); 1] = [("out of place", out_of_place)];
    let ag: [(&str, Place); 2] = [("out of place", out_of_place), ("in place", input_is_block)];
    each_cut(Func::AllGather, &ag, b, 0xEE, |count, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            assert_eq!(out.len(), N * count);
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, b(i / count, i % count), "rank {d} byte {i}, {what}");
            }
        }
    });
    let bc: [(&str, Place); 2] = [("out of place", out_of_place), ("in place", same)];
    each_cut(Func::Broadcast, &bc, b, 0xEE, |_, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, b(ROOT, i), "rank {d} byte {i}, {what}");
            }
        }
    });
    each_cut(Func::AlltoAll, &oop, b, 0xEE, |count, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            for (i, v) in out.iter().enumerate() {
                let (s, o) = (i / count, i % count);
                assert_eq!(*v, b(s, d * count + o), "rank {d} byte {i}, {what}");
            }
        }
    });
    each_cut(Func::Gather, &oop, b, 0xEE, |count, outs, what| {
        assert_eq!(outs[ROOT].len(), N * count);
        for (i, v) in outs[ROOT].iter().enumerate() {
            assert_eq!(*v, b(i / count, i % count), "root byte {i}, {what}");
        }
    });
    each_cut(Func::Scatter, &oop, b, 0xEE, |count, outs, what| {
        for (d, out) in outs.iter().enumerate() {
            assert_eq!(out.len(), count);
            for (i, v) in out.iter().enumerate() {
                assert_eq!(*v, b(ROOT, d * count + i), "rank {d} byte {i}, {what}");
            }
        }
    });
}
