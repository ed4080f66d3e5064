//! The local engine's own paths, through its front door: calls small
//! enough to go inline in the mailbox or for the coordinator alone, and
//! large ones every rank shares, alternating; mismatches on either side of
//! those thresholds; outputs large enough to stream, at any alignment.

use rankwise::core::{Error, ErrorKind, RedOp};
use rankwise::engine::local::{
    ALONE_BYTES, ALONE_BYTES_OVERSUBSCRIBED, PAYLOAD_BYTES, last_level_cache,
};
use rankwise::local::{LaunchOptions, launch, launch_each};
use std::time::Duration;

fn quick() -> LaunchOptions {
    LaunchOptions::default().with_timeout(Duration::from_secs(20))
}

fn every_rank_reports_the_count_mismatch(res: &[Result<(), Error>]) {
    for (r, e) in res.iter().enumerate() {
        let e = e.as_ref().expect_err("every rank fails");
        assert_eq!(e.kind, ErrorKind::Mismatch, "rank {r}: {e}");
        assert!(e.message.contains("count differs"), "{}", e.message);
    }
}

#[test]
fn small_and_large_launches_alternate_correctly() {
    // the coordinator works alone below ALONE_BYTES and with everyone above
    // elements of f32: 4x either threshold in bytes
    let big = ALONE_BYTES.max(ALONE_BYTES_OVERSUBSCRIBED);
    for n in [2, 3, 5] {
        let outs = launch(n, |c| {
            let r = c.rank() as f32;
            let mut sums = Vec::new();
            for len in [1, big, 3, big + 1, 2] {
                let mut x = vec![r + 1.0; len];
                c.all_reduce(&mut x, RedOp::Sum)?;
                sums.push((x[0], x[len - 1]));
            }
            Ok(sums)
        })
        .unwrap();
        let total = (1..=n).sum::<usize>() as f32;
        for s in outs {
            assert!(
                s.iter().all(|&(a, b)| a == total && b == total),
                "{n} ranks: {s:?}"
            );
        }
    }
}

#[test]
fn a_mismatch_fails_every_rank_small_or_large() {
    for len in [4usize, ALONE_BYTES_OVERSUBSCRIBED] {
        let res = launch_each(quick(), 3, |c| {
            let mut x = vec![1i32; if c.rank() == 1 { len + 1 } else { len }];
            c.all_reduce(&mut x, RedOp::Sum)
        })
        .unwrap();
        every_rank_reports_the_count_mismatch(&res);
    }
}

#[test]
fn ranks_that_disagree_on_going_inline_get_the_mismatch() {
    // rank 1's count makes its call too large to go inline: it waits at
    // the rendezvous while the others read its post and report
    let big = PAYLOAD_BYTES + ALONE_BYTES.max(ALONE_BYTES_OVERSUBSCRIBED);
    let res = launch_each(quick(), 3, |c| {
        let mut x = vec![1u8; if c.rank() == 1 { big } else { 8 }];
        c.all_reduce(&mut x, RedOp::Sum)
    })
    .unwrap();
    every_rank_reports_the_count_mismatch(&res);
}

#[test]
fn back_to_back_inline_launches_never_read_a_stale_slot() {
    // many small calls in a row cycle through both mailbox slots; each
    // result depends on the call's index, so a stale slot shows
    for n in [2, 3] {
        let outs = launch(n, |c| {
            let r = c.rank() as i64;
            let mut got = Vec::new();
            for k in 0..50i64 {
                let mut x = [r * 100 + k, k];
                c.all_reduce(&mut x, RedOp::Sum)?;
                got.push(x);
            }
            Ok(got)
        })
        .unwrap();
        let n = n as i64;
        for got in outs {
            for (k, x) in got.iter().enumerate() {
                let k = k as i64;
                assert_eq!(*x, [100 * n * (n - 1) / 2 + n * k, n * k], "call {k}");
            }
        }
    }
}

#[test]
fn a_rank_that_skips_the_call_is_named_not_waited_for() {
    let res = launch_each(quick(), 3, |c| {
        if c.rank() == 2 {
            return Ok(());
        }
        let mut x = [1u8; 4];
        c.all_reduce(&mut x, RedOp::Sum)
    })
    .unwrap();
    for r in &res[..2] {
        let e = r.as_ref().expect_err("waiting ranks fail");
        assert_eq!(e.kind, ErrorKind::Deadlock, "{e}");
        assert!(
            e.message.contains("rank 2 finished without entering"),
            "{}",
            e.message
        );
    }
}

/// A large AllReduce of `T` on 2 ranks, out of place and in place, against
/// `value(i, r)` summed over the ranks: large enough to stream, with rank
/// r's buffers `shifts[r]` elements into their allocations, so the
/// outputs line up with each other or not, and the shares start anywhere
/// within a line.
fn large_all_reduce_of<T>(value: fn(usize, usize) -> T, add: fn(T, T) -> T)
where
    T: rankwise::Element + PartialEq + std::fmt::Debug,
{
    // 2 ranks × send and recv of `len` elements
    let size = std::mem::size_of::<T>();
    let len = last_level_cache() / (4 * size) + 5;
    for shifts in [[0, 0], [3, 3], [0, 1], [5, 2]] {
        let outs = launch(2, |c| {
            let r = c.rank();
            let input: Vec<T> = (0..len + 8).map(|i| value(i, r)).collect();
            let mut out = vec![T::default(); len + 8];
            let s = shifts[r];
            c.all_reduce_into(&input[s..s + len], &mut out[s..s + len], RedOp::Sum)?;
            let mut inplace: Vec<T> = input[s..s + len].to_vec();
            c.all_reduce(&mut inplace, RedOp::Sum)?;
            Ok((out, inplace, s))
        })
        .unwrap();
        let name = std::any::type_name::<T>();
        for (out, inplace, s) in outs {
            let want = |i: usize| add(value(i + shifts[0], 0), value(i + shifts[1], 1));
            assert!(
                out[..s]
                    .iter()
                    .chain(&out[s + len..])
                    .all(|x| *x == T::default())
            );
            for i in 0..len {
                assert_eq!(out[s + i], want(i), "{name} {shifts:?} element {i}");
                assert_eq!(inplace[i], want(i), "{name} {shifts:?} in place {i}");
            }
        }
    }
}

#[test]
fn large_outputs_at_any_offset_within_a_line() {
    // small repeating values: every sum is exact in f32 however large the
    // cache makes the call (a 260 MiB L3 makes it 2^24+ elements)
    large_all_reduce_of(|i, r| (i % 4096 * (r + 1)) as f32, |a, b| a + b);
}

#[test]
fn large_calls_of_narrow_types_at_any_offset_within_a_line() {
    // 8- and 16-bit types go through larger blocks than f32: small
    // integers, so every sum is exact in the type
    large_all_reduce_of(
        |i, r| half::bf16::from_f32((i % 64 * (r + 1)) as f32),
        |a, b| half::bf16::from_f32(a.to_f32() + b.to_f32()),
    );
    large_all_reduce_of(|i, r| (i % 32 * (r + 1)) as u8, |a, b| a + b);
}

#[test]
fn large_calls_in_one_group_and_after_it_each_get_every_part() {
    // calls that stream are cut into parts that the ranks claim as they go,
    // numbered over the launch's calls; a group of two such calls, then a
    // single one, on 3 ranks (an AllReduce of `len` f32 spans 24·len bytes)
    let (n, len) = (3usize, last_level_cache() / 16 + 5);
    let q = len / 2;
    let outs = launch(n, |c| {
        use rankwise::core::DataType::Float32;
        let r = c.rank();
        let ar = c.alloc_elems(len, Float32)?;
        let x: Vec<f32> = (0..len).map(|i| (i % 4096 * (r + 1)) as f32).collect();
        c.write(ar, &x)?;
        let (ag_send, ag_recv) = (c.alloc_elems(q, Float32)?, c.alloc_elems(n * q, Float32)?);
        let x: Vec<f32> = (0..q).map(|i| (i % 4096 + r) as f32).collect();
        c.write(ag_send, &x)?;
        let (rs_send, rs_recv) = (c.alloc_elems(n * q, Float32)?, c.alloc_elems(q, Float32)?);
        let x: Vec<f32> = (0..n * q).map(|i| (i % 4096 * (r + 1)) as f32).collect();
        c.write(rs_send, &x)?;
        c.nccl_group_start()?;
        c.nccl_all_reduce(ar, ar, len, Float32, RedOp::Sum)?;
        c.nccl_all_gather(ag_send, ag_recv, q, Float32)?;
        c.nccl_group_end()?;
        c.nccl_reduce_scatter(rs_send, rs_recv, q, Float32, RedOp::Sum)?;
        Ok((
            c.read::<f32>(ar, len)?,
            c.read::<f32>(ag_recv, n * q)?,
            c.read::<f32>(rs_recv, q)?,
        ))
    })
    .unwrap();
    // Σ_r (i mod 4096)(r + 1) = (i mod 4096)·N(N+1)/2
    let ranks = (n * (n + 1) / 2) as f32;
    for (d, (ar, ag, rs)) in outs.iter().enumerate() {
        for (i, v) in ar.iter().enumerate() {
            assert_eq!(*v, (i % 4096) as f32 * ranks, "rank {d} AllReduce {i}");
        }
        for (i, v) in ag.iter().enumerate() {
            assert_eq!(*v, (i % q % 4096 + i / q) as f32, "rank {d} AllGather {i}");
        }
        for (o, v) in rs.iter().enumerate() {
            let i = d * q + o;
            assert_eq!(*v, (i % 4096) as f32 * ranks, "rank {d} ReduceScatter {o}");
        }
    }
}
