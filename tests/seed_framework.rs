//! The seed chapter's framework cases (typed face, torch.distributed names)
//! on 4 ranks, with the chapter's exact expected vectors, and the four facts
//! its NCCL log showed, checked on rankwise's own trace.

use rankwise::launch::LaunchOptions;
use rankwise::trace::Tracer;
use rankwise::{ErrorKind, P2POp, RedOp, ResultCode};
use rankwise_testkit::engines::{engines, launch, launch_with};

const N: usize = 4;

#[test]
fn all_reduce_sum_int64_max_float32_and_count_0() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i64;
            let mut x = vec![r + 1, r + 10, r * 2];
            c.all_reduce(&mut x, RedOp::Sum)?;
            let rf = c.rank() as f32;
            let mut y = vec![rf, -rf, rf * 0.5 + 0.25];
            c.all_reduce(&mut y, RedOp::Max)?;
            let mut empty: Vec<f32> = vec![];
            c.all_reduce(&mut empty, RedOp::Sum)?;
            Ok((x, y, empty))
        })
        .unwrap();
        for (x, y, e) in outs {
            assert_eq!(x, vec![10, 46, 12]);
            assert_eq!(y, vec![3.0, 0.0, 1.75]);
            assert!(e.is_empty());
        }
    }
}

#[test]
fn broadcast_root_0_and_root_2() {
    for engine in engines() {
        for root in [0usize, 2] {
            let outs = launch(engine, N, |c| {
                let mut x: Vec<i64> = (0..4).map(|j| c.rank() as i64 * 1000 + j).collect();
                c.broadcast(&mut x, root)?;
                Ok(x)
            })
            .unwrap();
            let want: Vec<i64> = (0..4).map(|j| root as i64 * 1000 + j).collect();
            assert!(outs.iter().all(|x| *x == want), "root {root}: {outs:?}");
        }
    }
}

#[test]
fn reduce_root_0_and_root_3_only_the_root_has_output() {
    for engine in engines() {
        for root in [0usize, 3] {
            let outs = launch(engine, N, |c| {
                let r = c.rank() as i64;
                c.reduce(&[r + 1, (r + 1) * 10], root, RedOp::Sum)
            })
            .unwrap();
            for (r, out) in outs.iter().enumerate() {
                if r == root {
                    assert_eq!(out.as_deref(), Some(&[10i64, 100][..]));
                } else {
                    assert!(out.is_none(), "rank {r} must have nothing to read");
                }
            }
        }
    }
}

#[test]
fn all_gather_list_and_flat() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i32;
            let input = [r, r + 10, r + 100];
            let list = c.all_gather(&input)?;
            let mut flat = vec![0; 12];
            c.all_gather_into_tensor(&mut flat, &input)?;
            Ok((list, flat))
        })
        .unwrap();
        for (list, flat) in outs {
            for (s, block) in list.iter().enumerate() {
                let s = s as i32;
                assert_eq!(block, &vec![s, s + 10, s + 100]);
            }
            assert_eq!(flat, vec![0, 10, 100, 1, 11, 101, 2, 12, 102, 3, 13, 103]);
        }
    }
}

#[test]
fn reduce_scatter_12_to_3() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let input: Vec<i64> = (0..12).map(|i| i + c.rank() as i64 * 100).collect();
            let mut out = vec![0; 3];
            c.reduce_scatter_tensor(&mut out, &input, RedOp::Sum)?;
            Ok(out)
        })
        .unwrap();
        for (r, out) in outs.iter().enumerate() {
            // expected = rank_slice * world + 100 * world * (world - 1) / 2
            let want: Vec<i64> = (r * 3..r * 3 + 3)
                .map(|i| i as i64 * N as i64 + 100 * (N * (N - 1) / 2) as i64)
                .collect();
            assert_eq!(out, &want);
        }
    }
}

fn encode(src: usize, dst: usize, off: usize) -> i64 {
    (src * 10000 + dst * 100 + off) as i64
}

#[test]
fn all_to_all_equal_and_uneven() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let me = c.rank();
            let input: Vec<i64> = (0..N)
                .flat_map(|d| (0..2).map(move |o| encode(me, d, o)))
                .collect();
            let mut out = vec![0; 2 * N];
            c.all_to_all_single(&mut out, &input, None, None)?;
            let in_splits: Vec<usize> = (0..N).map(|d| me + d + 1).collect();
            let out_splits: Vec<usize> = (0..N).map(|s| s + me + 1).collect();
            let input: Vec<i64> = (0..N)
                .flat_map(|d| (0..me + d + 1).map(move |o| encode(me, d, o)))
                .collect();
            let mut uneven = vec![0; out_splits.iter().sum()];
            c.all_to_all_single(&mut uneven, &input, Some(&out_splits), Some(&in_splits))?;
            Ok((out, uneven))
        })
        .unwrap();
        for (d, (equal, uneven)) in outs.iter().enumerate() {
            let want: Vec<i64> = (0..N)
                .flat_map(|s| (0..2).map(move |o| encode(s, d, o)))
                .collect();
            assert_eq!(equal, &want);
            let want: Vec<i64> = (0..N)
                .flat_map(|s| (0..s + d + 1).map(move |o| encode(s, d, o)))
                .collect();
            assert_eq!(uneven, &want);
        }
        // the chapter prints rank 2's uneven output
        assert_eq!(
            outs[2].1,
            vec![
                200, 201, 202, 10200, 10201, 10202, 10203, 20200, 20201, 20202, 20203, 20204,
                30200, 30201, 30202, 30203, 30204, 30205
            ]
        );
    }
}

#[test]
fn grouped_ring_send_recv() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let me = c.rank();
            let (next, prev) = ((me + 1) % N, (me + N - 1) % N);
            let send = [me as i64, me as i64 + 100];
            let mut recv = [0i64; 2];
            c.batch_isend_irecv(&mut [P2POp::Isend(&send, next), P2POp::Irecv(&mut recv, prev)])?;
            Ok(recv)
        })
        .unwrap();
        assert_eq!(outs, vec![[3, 103], [0, 100], [1, 101], [2, 102]]);
    }
}

#[test]
fn invalid_root_is_rejected_on_every_rank() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let mut x = vec![1i64; 4];
            Ok(c.broadcast(&mut x, 4).unwrap_err())
        })
        .unwrap();
        for (r, e) in outs.iter().enumerate() {
            assert_eq!(e.kind, ErrorKind::InvalidRoot);
            assert_eq!(e.code(), ResultCode::InvalidArgument);
            assert_eq!(e.rank, Some(r));
            assert!(
                e.message
                    .contains("root 4 is out of range: valid roots are 0..=3"),
                "{}",
                e.message
            );
        }
    }
}

/// The four log facts of the chapter, on rankwise's own trace.
#[test]
fn trace_shows_the_seed_log_facts() {
    for engine in engines() {
        let (tracer, lines) = Tracer::memory();
        // each rank returns its own trace lines: on an engine whose ranks
        // are processes, each process's tracer sees only its own rank
        let per_rank = launch_with(
            engine,
            LaunchOptions::default().with_tracer(tracer),
            N,
            |c| {
                let me = c.rank();
                let mut x = vec![1i64, 2, 3];
                c.all_reduce(&mut x, RedOp::Sum)?;
                let mut empty: Vec<f32> = vec![];
                c.all_reduce(&mut empty, RedOp::Sum)?;
                let mut b = vec![0i64; 4];
                c.broadcast(&mut b, 0)?;
                let input = vec![me as i64; 2 * N];
                let mut out = vec![0; 2 * N];
                let eq = vec![2; N];
                c.all_to_all_single(&mut out, &input, Some(&eq), Some(&eq))?;
                let in_splits: Vec<usize> = (0..N).map(|d| me + d + 1).collect();
                let out_splits: Vec<usize> = (0..N).map(|s| s + me + 1).collect();
                let input = vec![0i64; in_splits.iter().sum()];
                let mut out = vec![0; out_splits.iter().sum()];
                c.all_to_all_single(&mut out, &input, Some(&out_splits), Some(&in_splits))?;
                let _ = c.broadcast(&mut b, 4);
                let tag = format!(" [{me}] NCCL");
                let mine: Vec<String> = lines
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|l| l.contains(&tag))
                    .cloned()
                    .collect();
                Ok(mine)
            },
        )
        .unwrap();
        let lines: Vec<String> = per_rank.concat();
        let rank0: Vec<&String> = lines.iter().filter(|l| l.contains(" [0] NCCL")).collect();
        let field = |l: &str, key: &str| -> String {
            let mut it = l.split_whitespace();
            while let Some(w) = it.next() {
                if w == key {
                    return it.next().unwrap().to_string();
                }
            }
            panic!("no {key} in {l}")
        };
        let colls: Vec<&&String> = rank0.iter().filter(|l| l.contains("opCount")).collect();
        // 1. the zero-count AllReduce is logged and the next call shows the same opCount
        assert!(colls[1].contains("AllReduce:") && colls[1].contains("count 0 "));
        assert_eq!(field(colls[1], "opCount"), "1");
        assert!(colls[2].contains("Broadcast:"));
        assert_eq!(field(colls[2], "opCount"), "1");
        // 2. equal-split AlltoAllv: N Send/Recv pairs under one opCount, peer order
        let eq: Vec<&&&String> = colls
            .iter()
            .filter(|l| field(l, "opCount") == "2")
            .collect();
        assert_eq!(eq.len(), 2 * N);
        for (p, pair) in eq.chunks(2).enumerate() {
            assert!(pair[0].contains("Send:") && pair[1].contains("Recv:"));
            assert_eq!(field(pair[0], "root"), p.to_string());
            assert_eq!(field(pair[0], "count"), "2");
        }
        // 3. uneven: per-peer counts equal rank 0's input splits [1,2,3,4]
        let uneven: Vec<&&&String> = colls
            .iter()
            .filter(|l| field(l, "opCount") == "3")
            .collect();
        let sends: Vec<String> = uneven
            .iter()
            .filter(|l| l.contains("Send:"))
            .map(|l| field(l, "count"))
            .collect();
        assert_eq!(sends, vec!["1", "2", "3", "4"]);
        // 4. the invalid root is rejected at the argument check on every rank
        for r in 0..N {
            let warn = lines
                .iter()
                .filter(|l| {
                    l.contains(&format!(
                        " [{r}] NCCL WARN Broadcast: root 4 is out of range"
                    ))
                })
                .count();
            assert_eq!(warn, 1, "rank {r}");
        }
    }
}
