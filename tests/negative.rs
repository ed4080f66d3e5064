//! Misuse gives a specific error on every affected rank: never a hang, never
//! a silent overrun. How fast each error comes is measured by `rankwise
//! verify --suite misuse` (its "to error" column), not asserted here: a
//! loaded machine may take any time, and every wait is bounded anyway.

use rankwise::launch::{EngineKind, LaunchOptions};
use rankwise::{Comm, DataType, Error, ErrorKind, NULL, RedOp, Result};
use rankwise_testkit::engines::{engines, launch, launch_each};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// Runs `program` on `n` ranks and returns each rank's error (None for Ok).
/// Waits are bounded at 30 s so a regression fails instead of hanging.
fn errors(
    engine: EngineKind,
    n: usize,
    program: impl Fn(&mut Comm) -> Result<()> + Sync,
) -> Vec<Option<Error>> {
    let opts = LaunchOptions::default().with_timeout(Duration::from_secs(30));
    let res = launch_each(engine, opts, n, |c| program(c)).unwrap();
    res.into_iter().map(|r| r.err()).collect()
}

/// Every rank but `failing` got a RemoteError that names `failing`.
fn assert_others_remote(errs: &[Option<Error>], failing: usize) {
    for (r, e) in errs.iter().enumerate().filter(|(r, _)| *r != failing) {
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("rank {r} got no error"));
        assert_eq!(e.kind, ErrorKind::RemoteError, "rank {r}: {e}");
        assert_eq!(e.rank, Some(r));
        assert!(
            e.message.contains(&format!("rank {failing} failed")),
            "rank {r}: {e}"
        );
    }
}

fn assert_all(errs: &[Option<Error>], kind: ErrorKind, text: &str) {
    for (r, e) in errs.iter().enumerate() {
        let e = e
            .as_ref()
            .unwrap_or_else(|| panic!("rank {r} got no error"));
        assert_eq!(e.kind, kind, "rank {r}: {e}");
        assert_eq!(e.rank, Some(r));
        assert!(e.message.contains(text), "rank {r}: {e}");
    }
}

#[test]
fn root_minus_one_and_root_n_even_with_count_0() {
    for engine in engines() {
        for (root, count) in [(-1, 4), (4, 4), (-1, 0), (4, 0)] {
            let errs = errors(engine, 4, |c| {
                let b = c.alloc(16)?;
                c.nccl_broadcast(b, b, count, DataType::Int32, root)
            });
            assert_all(
                &errs,
                ErrorKind::InvalidRoot,
                &format!("root {root} is out of range: valid roots are 0..=3"),
            );
        }
    }
}

#[test]
fn bad_datatype_and_op_codes_on_the_raw_face() {
    for engine in engines() {
        let errs = errors(engine, 3, |c| {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 4, 12, RedOp::Sum)
        });
        assert_all(
            &errs,
            ErrorKind::InvalidDatatype,
            "datatype code 12 is invalid",
        );
        let errs = errors(engine, 3, |c| {
            let b = c.alloc(64)?;
            c.nccl_all_reduce(b, b, 4, DataType::Float32, 9)
        });
        assert_all(
            &errs,
            ErrorKind::InvalidOp,
            "reduction op code 9 is invalid",
        );
    }
}

#[test]
fn null_recvbuff_on_the_root() {
    for engine in engines() {
        let errs = errors(engine, 4, |c| {
            let s = c.alloc(8)?;
            c.nccl_reduce(s, NULL, 2, DataType::Int32, RedOp::Sum, 2)
        });
        // the root is rejected at its check; the others wait, then learn it failed
        let root = errs[2].as_ref().unwrap();
        assert_eq!(root.kind, ErrorKind::NullPointer);
        assert!(
            root.message
                .contains("recvbuff is NULL but rank 2 (the root) must receive 2 elements"),
            "{root}"
        );
        assert_eq!(root.rank, Some(2));
        assert_others_remote(&errs, 2);
    }
}

/// A raw pointer that is not a whole number of elements into its allocation
/// is refused on its rank, naming the pointer, the datatype and the
/// alignment it needs; no rank forms a misaligned view of it.
#[test]
fn misaligned_raw_pointers_are_refused() {
    for engine in engines() {
        // rank 1's recvbuff is one byte into its allocation
        let errs = errors(engine, 3, |c| {
            let s = c.alloc(16)?;
            let r = c.alloc(17)?;
            let r = if c.rank() == 1 { r + 1 } else { r };
            c.nccl_all_reduce(s, r, 4, DataType::Float32, RedOp::Sum)
        });
        let e = errs[1].as_ref().expect("rank 1 is refused");
        assert_eq!(e.kind, ErrorKind::OutOfBounds, "{e}");
        assert_eq!(e.rank, Some(1));
        assert!(
        e.to_string().starts_with("ncclInvalidArgument on rank 1: AllReduce: recvbuff 0x")
            && e.message.contains(
                " is misaligned: float elements are 4 bytes, so recvbuff must be a multiple of 4, but rank 1 passed an address 1 byte past one"
            ),
        "{e}"
    );
        assert_others_remote(&errs, 1);
        // Send/Recv: a double at a 4-byte offset
        let errs = errors(engine, 2, |c| {
            let b = c.alloc(24)?;
            if c.rank() == 0 {
                c.nccl_send(b + 4, 2, DataType::Float64, 1)
            } else {
                c.nccl_recv(b, 2, DataType::Float64, 0)
            }
        });
        let e = errs[0].as_ref().expect("the sender is refused");
        assert_eq!((e.kind, e.rank), (ErrorKind::OutOfBounds, Some(0)), "{e}");
        assert!(
        e.message
            .contains("is misaligned: double elements are 8 bytes, so sendbuff must be a multiple of 8, but rank 0 passed an address 4 bytes past one"),
        "{e}"
    );
        let e = errs[1].as_ref().expect("the receiver learns of it");
        assert_eq!(e.rank, Some(1), "{e}");
        assert!(e.message.contains("rank 0"), "{e}");
    }
}

#[test]
fn extent_past_the_end_of_its_allocation() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| {
            let s = c.alloc(12)?;
            let r = c.alloc(28)?; // AllGather of 3 int32 on 2 ranks needs 24 bytes... from offset 8: 32
            c.nccl_all_gather(s, r + 8, 3, DataType::Int32)
        });
        assert_all(&errs, ErrorKind::OutOfBounds, "overruns by 4 bytes");
    }
}

#[test]
fn all_gather_with_send_equal_to_recv_on_rank_1() {
    for engine in engines() {
        let errs = errors(engine, 4, |c| {
            let b = c.alloc(4 * 4 * 3)?;
            c.nccl_all_gather(b, b, 3, DataType::Int32)
        });
        // on rank 0 the call is in-place (offset 0); ranks 1-3 overlap illegally
        for (r, e) in errs.iter().enumerate().skip(1) {
            let e = e.as_ref().unwrap();
            assert_eq!(e.kind, ErrorKind::IllegalOverlap, "{e}");
            assert_eq!(e.rank, Some(r));
            assert!(
                e.message.contains("sendbuff == recvbuff + rank*sendcount"),
                "{e}"
            );
        }
        let e = errs[0].as_ref().unwrap();
        assert_eq!((e.kind, e.rank), (ErrorKind::RemoteError, Some(0)), "{e}");
    }
}

#[test]
fn unmatched_send() {
    for engine in engines() {
        if !engine.capabilities().diagnoses_deadlock {
            rankwise_testkit::engines::skipped(format!(
                "unmatched_send on {engine}: it needs deadlock diagnosis"
            ));
            continue;
        }
        let errs = errors(engine, 4, |c| {
            let b = c.alloc(16)?;
            if c.rank() == 0 {
                c.nccl_send(b, 4, DataType::Int32, 1)
            } else {
                // rank 1 never receives from 0: it goes straight into an AllReduce
                c.nccl_all_reduce(b, b, 4, DataType::Int32, RedOp::Sum)
            }
        });
        assert_all(
            &errs,
            ErrorKind::Unmatched,
            "rank 0 waits in Send #0 to rank 1",
        );
    }
}

#[test]
fn send_recv_count_mismatch_is_an_error_on_both_ranks() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| {
            let b = c.alloc(64)?;
            if c.rank() == 0 {
                c.nccl_send(b, 4, DataType::Int32, 1)
            } else {
                c.nccl_recv(b, 3, DataType::Int32, 0)
            }
        });
        assert_all(
            &errs,
            ErrorKind::Mismatch,
            "Send/Recv mismatch: rank 0's Send #0 to rank 1 (count 4, int32",
        );
        assert!(
            errs[1]
                .as_ref()
                .unwrap()
                .message
                .contains("rank 1's Recv #0 from rank 0 (count 3, int32")
        );
    }
}

#[test]
fn all_to_all_v_splits_that_are_not_transposes() {
    for engine in engines() {
        let errs = errors(engine, 3, |c| {
            let me = c.rank();
            // rank 0 sends 2 to rank 1, but rank 1 expects 3 from rank 0; everything else is 1
            let ins: Vec<usize> = (0..3)
                .map(|d| if me == 0 && d == 1 { 2 } else { 1 })
                .collect();
            let outs: Vec<usize> = (0..3)
                .map(|s| if me == 1 && s == 0 { 3 } else { 1 })
                .collect();
            let input = vec![0i32; ins.iter().sum()];
            let mut output = vec![0i32; outs.iter().sum()];
            c.all_to_all_single(&mut output, &input, Some(&outs), Some(&ins))
        });
        for r in [0, 1] {
            let e = errs[r].as_ref().unwrap();
            assert_eq!(e.kind, ErrorKind::Mismatch, "{e}");
            assert!(
                e.message.contains("rank 0's Send #0 to rank 1 (count 2")
                    && e.message.contains("(count 3"),
                "{e}"
            );
        }
    }
}

#[test]
fn all_to_all_v_zero_split_against_a_non_zero_one() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| {
            let me = c.rank();
            // rank 0 sends nothing to rank 1, which expects 2 elements from it
            let ins = if me == 0 { vec![1, 0] } else { vec![1, 1] };
            let outs = if me == 1 { vec![2, 1] } else { vec![1, 1] };
            let input = vec![0u8; ins.iter().sum()];
            let mut output = vec![0u8; outs.iter().sum()];
            c.all_to_all_single(&mut output, &input, Some(&outs), Some(&ins))
        });
        assert_all(&errs, ErrorKind::Mismatch, "count 0");
    }
}

#[test]
fn group_end_without_start() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| c.nccl_group_end());
        assert_all(
            &errs,
            ErrorKind::InvalidUsage,
            "ncclGroupEnd without a matching ncclGroupStart",
        );
    }
}

#[test]
fn send_to_self_needs_a_recv_from_self_in_the_group() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| {
            let b = c.alloc(16)?;
            let me = c.rank() as i32;
            c.nccl_group_start()?;
            c.nccl_send(b, 4, DataType::Int32, me)?;
            c.nccl_group_end()
        });
        assert_all(
            &errs,
            ErrorKind::InvalidUsage,
            "a send to self needs a matching recv from self",
        );
    }
}

#[test]
fn a_rank_that_panics_mid_collective() {
    for engine in engines() {
        if !engine.capabilities().diagnoses_deadlock {
            rankwise_testkit::engines::skipped(format!(
                "a_rank_that_panics_mid_collective on {engine}: its message is the local launcher's"
            ));
            continue;
        }
        let res = launch_each(
            engine,
            LaunchOptions::default().with_timeout(Duration::from_secs(30)),
            4,
            |c| {
                let mut x = vec![1.0f32; 8];
                if c.rank() == 2 {
                    panic!("injected failure");
                }
                c.all_reduce(&mut x, RedOp::Sum)?;
                Ok(x)
            },
        )
        .unwrap();
        for (r, out) in res.iter().enumerate() {
            let e = out.as_ref().unwrap_err();
            assert_eq!(e.rank, Some(r), "{e}");
            if r == 2 {
                assert_eq!(e.kind, ErrorKind::Panic);
            } else {
                assert_eq!(e.kind, ErrorKind::RemoteError, "{e}");
                assert!(
                    e.message.contains("rank 2 panicked: injected failure"),
                    "{e}"
                );
            }
        }
    }
}

#[test]
fn errors_inside_a_group_are_returned_at_its_end() {
    for engine in engines() {
        let errs = errors(engine, 2, |c| {
            let b = c.alloc(16)?;
            c.nccl_group_start()?;
            let inner = c.nccl_broadcast(b, b, 4, DataType::Int32, 7);
            assert_eq!(inner.unwrap_err().kind, ErrorKind::InvalidRoot);
            c.nccl_all_reduce(b, b, 4, DataType::Int32, RedOp::Sum)?;
            c.nccl_group_end()
        });
        assert_all(&errs, ErrorKind::InvalidRoot, "root 7 is out of range");
    }
}

#[test]
fn timeout_names_the_rank_that_never_arrives() {
    for engine in engines() {
        if !engine.capabilities().diagnoses_deadlock {
            rankwise_testkit::engines::skipped(format!(
                "timeout_names_the_rank_that_never_arrives on {engine}: its ranks share a counter in memory"
            ));
            continue;
        }
        // rank 1 stays busy outside rankwise until the others have their
        // errors: however slow the machine, it is still away when they time out
        let timed_out = AtomicUsize::new(0);
        let res = launch_each(
            engine,
            LaunchOptions::default().with_timeout(Duration::from_millis(200)),
            3,
            |c| {
                if c.rank() == 1 {
                    for _ in 0..60_000 {
                        if timed_out.load(Ordering::SeqCst) == 2 {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(1));
                    }
                    return Ok(());
                }
                let mut x = [1u64; 2];
                let r = c.all_reduce(&mut x, RedOp::Sum);
                timed_out.fetch_add(1, Ordering::SeqCst);
                r
            },
        )
        .unwrap();
        assert!(res[1].is_ok());
        for r in [0, 2] {
            let e = res[r].as_ref().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Timeout, "{e}");
            assert!(e.message.contains("AllReduce (opCount 0) timed out"), "{e}");
            assert!(
                e.message.contains("rank 1: running outside rankwise"),
                "{e}"
            );
        }
    }
}

#[test]
fn premulsum_calls_reuse_one_op_per_scalar() {
    for engine in engines() {
        let codes = launch(engine, 2, |c| {
            let mut x = [1.0f32; 4];
            for _ in 0..3 {
                c.all_reduce(&mut x, RedOp::PreMulSum(0.5))?;
            }
            c.all_reduce(&mut x, RedOp::PreMulSum(2.0))?;
            // the next code handed out shows how many ops the calls created
            Ok((x, c.create_pre_mul_sum(3.0)))
        })
        .unwrap();
        for (x, next) in codes {
            // over 2 ranks, PreMulSum(0.5) sums 2 × x/2 = x; PreMulSum(2) sums 2 × 2x = 4x
            assert_eq!(x, [4.0; 4]);
            assert_eq!(
                next, 7,
                "codes 5 and 6 for the two scalars, nothing per call"
            );
        }
    }
}

#[test]
fn typed_buffers_of_n_blocks_must_have_n_blocks() {
    for engine in engines() {
        // 3 ranks × 4 elements: AllGather's output, ReduceScatter's input and the
        // root's Gather output must all hold 12, and 11 is refused on every rank
        let errs = errors(engine, 3, |c| {
            let x = [1.0f32; 4];
            let mut short = [0.0f32; 11];
            c.all_gather_into_tensor(&mut short, &x)
        });
        assert_all(
            &errs,
            ErrorKind::BadLength,
            "output has 11 elements, expected 3 ranks × 4 = 12",
        );
        let errs = errors(engine, 3, |c| {
            let mut out = [0.0f32; 4];
            c.reduce_scatter_tensor(&mut out, &[1.0f32; 13], RedOp::Sum)
        });
        assert_all(
            &errs,
            ErrorKind::BadLength,
            "input has 13 elements, expected 3 ranks × 4 = 12",
        );
        let errs = errors(engine, 3, |c| {
            let x = [1.0f32; 4];
            if c.rank() == 1 {
                let mut short = [0.0f32; 11];
                c.gather(&x, Some(&mut short), 1)
            } else {
                c.gather(&x, None, 1)
            }
        });
        let e = errs[1]
            .as_ref()
            .expect("the root's short buffer is refused");
        assert_eq!(e.kind, ErrorKind::BadLength, "{e}");
        assert!(e.message.contains("expected 3 ranks × 4 = 12"), "{e}");
    }
}

/// A timeout longer than any deadline a clock can hold means "never time
/// out", not a panic; a rank that arrives late is still waited for.
#[test]
fn a_timeout_past_any_clock_waits_without_panicking() {
    for engine in engines() {
        let res = launch_each(
            engine,
            LaunchOptions::default().with_timeout(Duration::MAX),
            2,
            |c| {
                if c.rank() == 1 {
                    // late enough that rank 0 parks with its deadline
                    std::thread::sleep(Duration::from_millis(100));
                }
                let mut x = [c.rank() as u64 + 1; 2];
                c.all_reduce(&mut x, RedOp::Sum)?;
                Ok(x)
            },
        )
        .unwrap();
        for r in res {
            assert_eq!(r.unwrap(), [3, 3]);
        }
    }
}
