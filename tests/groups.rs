//! Successful runs of what a single call does not cover: groups of several
//! collectives, groups mixing collectives with Send/Recv, nested groups, a
//! duplicated communicator, a user-created PreMulSum op over its life, and
//! pinned rank threads. Each rank's program is a named function, apart
//! from the launch that runs it; every output is compared element by element
//! with a closed-form formula of rank, block and offset (docs/reference/contracts.md §7).

use rankwise::launch::LaunchOptions;
use rankwise::{Comm, DataType, ErrorKind, NULL, RedOp, Result};
use rankwise_testkit::engines::{engines, launch, launch_with};

const N: usize = 4;

/// `N(N-1)/2`: the sum of the ranks.
fn rank_sum(n: usize) -> i64 {
    (n * (n - 1) / 2) as i64
}

/// What the grouped-collectives program reads back on one rank.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Collectives {
    all_reduce: Vec<i32>,
    all_gather: Vec<f32>,
    reduce_scatter: Vec<i64>,
    broadcast: Vec<u8>,
    /// launches this group took (the opCount advance)
    launches: u64,
}

const AR_COUNT: usize = 40;
const AG_COUNT: usize = 3;
const RS_COUNT: usize = 5;
const BC_COUNT: usize = 9;
const BC_ROOT: usize = 2;

/// Four collectives of four datatypes in one group, large enough (the
/// AllReduce's 160 bytes) that none would go inline alone.
fn grouped_collectives(c: &mut Comm) -> Result<Collectives> {
    let (n, r) = (c.size(), c.rank());
    // AllReduce, int32 Sum: x_r[j] = 1000 r + j
    let ar = c.alloc_elems(AR_COUNT, DataType::Int32)?;
    let x: Vec<i32> = (0..AR_COUNT).map(|j| (1000 * r + j) as i32).collect();
    c.write(ar, &x)?;
    // AllGather, float: x_r[j] = 10 r + j + 0.5
    let ag_send = c.alloc_elems(AG_COUNT, DataType::Float32)?;
    let ag_recv = c.alloc_elems(n * AG_COUNT, DataType::Float32)?;
    let x: Vec<f32> = (0..AG_COUNT).map(|j| (10 * r + j) as f32 + 0.5).collect();
    c.write(ag_send, &x)?;
    // ReduceScatter, int64 Max: x_r[b q + o] = 10000 b + 100 o + r
    let rs_send = c.alloc_elems(n * RS_COUNT, DataType::Int64)?;
    let rs_recv = c.alloc_elems(RS_COUNT, DataType::Int64)?;
    let x: Vec<i64> = (0..n * RS_COUNT)
        .map(|i| (10000 * (i / RS_COUNT) + 100 * (i % RS_COUNT) + r) as i64)
        .collect();
    c.write(rs_send, &x)?;
    // Broadcast from rank 2, uint8: x_r[j] = 7 j + r (only the root's is sent)
    let bc = c.alloc_elems(BC_COUNT, DataType::Uint8)?;
    let x: Vec<u8> = (0..BC_COUNT).map(|j| (7 * j + r) as u8).collect();
    c.write(bc, &x)?;

    let before = c.op_count();
    c.nccl_group_start()?;
    c.nccl_all_reduce(ar, ar, AR_COUNT, DataType::Int32, RedOp::Sum)?;
    c.nccl_all_gather(ag_send, ag_recv, AG_COUNT, DataType::Float32)?;
    c.nccl_reduce_scatter(rs_send, rs_recv, RS_COUNT, DataType::Int64, RedOp::Max)?;
    c.nccl_broadcast(bc, bc, BC_COUNT, DataType::Uint8, BC_ROOT as i32)?;
    // nothing has launched yet
    assert_eq!(c.op_count(), before, "a call inside a group launched early");
    c.nccl_group_end()?;
    Ok(Collectives {
        all_reduce: c.read(ar, AR_COUNT)?,
        all_gather: c.read(ag_recv, n * AG_COUNT)?,
        reduce_scatter: c.read(rs_recv, RS_COUNT)?,
        broadcast: c.read(bc, BC_COUNT)?,
        launches: c.op_count() - before,
    })
}

fn grouped_collectives_expected(n: usize, d: usize) -> Collectives {
    Collectives {
        // Σ_s (1000 s + j) = 1000 N(N-1)/2 + N j
        all_reduce: (0..AR_COUNT)
            .map(|j| (1000 * rank_sum(n) + (n * j) as i64) as i32)
            .collect(),
        // y[s q + j] = x_s[j]
        all_gather: (0..n * AG_COUNT)
            .map(|i| (10 * (i / AG_COUNT) + i % AG_COUNT) as f32 + 0.5)
            .collect(),
        // rank d gets block d, the largest rank's value: 10000 d + 100 o + N-1
        reduce_scatter: (0..RS_COUNT)
            .map(|o| (10000 * d + 100 * o + n - 1) as i64)
            .collect(),
        broadcast: (0..BC_COUNT).map(|j| (7 * j + BC_ROOT) as u8).collect(),
        launches: 1,
    }
}

#[test]
fn a_group_of_four_collectives_is_one_launch_and_each_gets_its_own_result() {
    for engine in engines() {
        let outs = launch(engine, N, grouped_collectives).unwrap();
        for (d, got) in outs.into_iter().enumerate() {
            assert_eq!(got, grouped_collectives_expected(N, d), "rank {d}");
        }
    }
}

/// What the mixed group reads back on one rank.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Mixed {
    ring: Vec<i32>,
    all_reduce: Vec<f64>,
    gather: Option<Vec<u32>>,
    launches: u64,
}

const RING_COUNT: usize = 6;
const MIX_AR_COUNT: usize = 33;
const GATHER_COUNT: usize = 2;
const GATHER_ROOT: usize = 1;

/// A ring of Send/Recv (each rank to the next) fused with an AllReduce and a
/// Gather: one launch, no deadlock, every result in place.
fn mixed_group(c: &mut Comm) -> Result<Mixed> {
    let (n, r) = (c.size(), c.rank());
    let send = c.alloc_elems(RING_COUNT, DataType::Int32)?;
    let recv = c.alloc_elems(RING_COUNT, DataType::Int32)?;
    let x: Vec<i32> = (0..RING_COUNT).map(|o| (100 * r + o) as i32).collect();
    c.write(send, &x)?;
    let ar = c.alloc_elems(MIX_AR_COUNT, DataType::Float64)?;
    let x: Vec<f64> = (0..MIX_AR_COUNT)
        .map(|j| (r as f64 + 1.0) * 0.25 + j as f64)
        .collect();
    c.write(ar, &x)?;
    let g_send = c.alloc_elems(GATHER_COUNT, DataType::Uint32)?;
    let x: Vec<u32> = (0..GATHER_COUNT).map(|o| (10 * r + o) as u32).collect();
    c.write(g_send, &x)?;
    let g_recv = if r == GATHER_ROOT {
        c.alloc_elems(n * GATHER_COUNT, DataType::Uint32)?
    } else {
        NULL
    };

    let (next, prev) = ((r + 1) % n, (r + n - 1) % n);
    let before = c.op_count();
    c.nccl_group_start()?;
    c.nccl_send(send, RING_COUNT, DataType::Int32, next as i32)?;
    c.nccl_all_reduce(ar, ar, MIX_AR_COUNT, DataType::Float64, RedOp::Sum)?;
    c.nccl_recv(recv, RING_COUNT, DataType::Int32, prev as i32)?;
    c.nccl_gather(
        g_send,
        g_recv,
        GATHER_COUNT,
        DataType::Uint32,
        GATHER_ROOT as i32,
    )?;
    c.nccl_group_end()?;
    Ok(Mixed {
        ring: c.read(recv, RING_COUNT)?,
        all_reduce: c.read(ar, MIX_AR_COUNT)?,
        gather: if r == GATHER_ROOT {
            Some(c.read(g_recv, n * GATHER_COUNT)?)
        } else {
            None
        },
        launches: c.op_count() - before,
    })
}

fn mixed_group_expected(n: usize, d: usize) -> Mixed {
    let prev = (d + n - 1) % n;
    Mixed {
        // the predecessor's 100 s + o
        ring: (0..RING_COUNT).map(|o| (100 * prev + o) as i32).collect(),
        // Σ_s ((s+1)/4 + j) = N(N+1)/8 + N j (exact in f64)
        all_reduce: (0..MIX_AR_COUNT)
            .map(|j| (n * (n + 1)) as f64 / 8.0 + (n * j) as f64)
            .collect(),
        // root: y[s q + o] = 10 s + o
        gather: (d == GATHER_ROOT).then(|| {
            (0..n * GATHER_COUNT)
                .map(|i| (10 * (i / GATHER_COUNT) + i % GATHER_COUNT) as u32)
                .collect()
        }),
        launches: 1,
    }
}

#[test]
fn a_group_mixing_collectives_and_a_send_recv_ring_completes_in_one_launch() {
    for engine in engines() {
        let outs = launch(engine, N, mixed_group).unwrap();
        for (d, got) in outs.into_iter().enumerate() {
            assert_eq!(got, mixed_group_expected(N, d), "rank {d}");
        }
    }
}

/// What the nested-groups program reads back on one rank.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Nested {
    /// opCount advance after the inner end, then after the outer end
    launches_after_inner: u64,
    launches_after_outer: u64,
    all_reduce: Vec<i64>,
    exchange: Vec<i8>,
    all_to_all: Vec<i32>,
}

const NEST_AR_COUNT: usize = 20;
const EXCHANGE_COUNT: usize = 3;
const A2A_COUNT: usize = 2;

/// Three levels of groups: the inner ends launch nothing, the outermost end
/// launches everything queued at any depth as one operation.
fn nested_groups(c: &mut Comm) -> Result<Nested> {
    let (n, r) = (c.size(), c.rank());
    let ar = c.alloc_elems(NEST_AR_COUNT, DataType::Int64)?;
    let x: Vec<i64> = (0..NEST_AR_COUNT)
        .map(|j| (r as i64 - 2) * (j as i64 + 1))
        .collect();
    c.write(ar, &x)?;
    // pairwise exchange with the partner r ^ 1
    let partner = r ^ 1;
    let ex_send = c.alloc_elems(EXCHANGE_COUNT, DataType::Int8)?;
    let ex_recv = c.alloc_elems(EXCHANGE_COUNT, DataType::Int8)?;
    let x: Vec<i8> = (0..EXCHANGE_COUNT)
        .map(|o| -(10 * r as i8) - o as i8)
        .collect();
    c.write(ex_send, &x)?;
    let a_send = c.alloc_elems(n * A2A_COUNT, DataType::Int32)?;
    let a_recv = c.alloc_elems(n * A2A_COUNT, DataType::Int32)?;
    // x_s[d q + o] = 10000 s + 100 d + o
    let x: Vec<i32> = (0..n * A2A_COUNT)
        .map(|i| (10000 * r + 100 * (i / A2A_COUNT) + i % A2A_COUNT) as i32)
        .collect();
    c.write(a_send, &x)?;

    let before = c.op_count();
    c.nccl_group_start()?;
    c.nccl_all_reduce(ar, ar, NEST_AR_COUNT, DataType::Int64, RedOp::Min)?;
    c.nccl_group_start()?;
    c.nccl_send(ex_send, EXCHANGE_COUNT, DataType::Int8, partner as i32)?;
    c.nccl_group_start()?;
    c.nccl_all_to_all(a_send, a_recv, A2A_COUNT, DataType::Int32)?;
    c.nccl_group_end()?;
    c.nccl_recv(ex_recv, EXCHANGE_COUNT, DataType::Int8, partner as i32)?;
    c.nccl_group_end()?;
    let launches_after_inner = c.op_count() - before;
    c.nccl_group_end()?;
    Ok(Nested {
        launches_after_inner,
        launches_after_outer: c.op_count() - before,
        all_reduce: c.read(ar, NEST_AR_COUNT)?,
        exchange: c.read(ex_recv, EXCHANGE_COUNT)?,
        all_to_all: c.read(a_recv, n * A2A_COUNT)?,
    })
}

fn nested_groups_expected(n: usize, d: usize) -> Nested {
    let partner = d ^ 1;
    Nested {
        launches_after_inner: 0,
        launches_after_outer: 1,
        // min over s of (s - 2)(j + 1) is rank 0's: -2 (j + 1)
        all_reduce: (0..NEST_AR_COUNT).map(|j| -2 * (j as i64 + 1)).collect(),
        exchange: (0..EXCHANGE_COUNT)
            .map(|o| -(10 * partner as i8) - o as i8)
            .collect(),
        // y[s q + o] = x_s[d q + o] = 10000 s + 100 d + o
        all_to_all: (0..n * A2A_COUNT)
            .map(|i| (10000 * (i / A2A_COUNT) + 100 * d + i % A2A_COUNT) as i32)
            .collect(),
    }
}

#[test]
fn nested_groups_launch_once_at_the_outermost_end() {
    for engine in engines() {
        let outs = launch(engine, N, nested_groups).unwrap();
        for (d, got) in outs.into_iter().enumerate() {
            assert_eq!(got, nested_groups_expected(N, d), "rank {d}");
        }
    }
}

/// What the dup program reads back on one rank.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct Dup {
    first: Vec<u64>,
    on_dup: Vec<f32>,
    second: Vec<u64>,
    /// each communicator's opCount at the end: they count apart
    op_counts: (u64, u64),
    distinct_ids: bool,
}

const DUP_COUNT: usize = 24;

/// A communicator and its duplicate used in the same order on every rank:
/// parent, duplicate, parent. Each has its own operation counter.
fn dup_in_order(c: &mut Comm) -> Result<Dup> {
    let r = c.rank();
    let mut d = c.dup()?;
    let a = c.alloc_elems(DUP_COUNT, DataType::Uint64)?;
    let x: Vec<u64> = (0..DUP_COUNT).map(|j| (r * 1000 + j) as u64).collect();
    c.write(a, &x)?;
    let b = d.alloc_elems(DUP_COUNT, DataType::Float32)?;
    let y: Vec<f32> = (0..DUP_COUNT).map(|j| (r * j) as f32).collect();
    d.write(b, &y)?;

    c.nccl_all_reduce(a, a, DUP_COUNT, DataType::Uint64, RedOp::Sum)?;
    let first = c.read(a, DUP_COUNT)?;
    d.nccl_all_reduce(b, b, DUP_COUNT, DataType::Float32, RedOp::Max)?;
    c.nccl_all_reduce(a, a, DUP_COUNT, DataType::Uint64, RedOp::Sum)?;
    Ok(Dup {
        first,
        on_dup: d.read(b, DUP_COUNT)?,
        second: c.read(a, DUP_COUNT)?,
        op_counts: (c.op_count(), d.op_count()),
        distinct_ids: c.comm_id() != d.comm_id(),
    })
}

fn dup_expected(n: usize) -> Dup {
    // Σ_s (1000 s + j) = 1000 N(N-1)/2 + N j; the second sum is N times that
    let first: Vec<u64> = (0..DUP_COUNT)
        .map(|j| (1000 * rank_sum(n)) as u64 + (n * j) as u64)
        .collect();
    Dup {
        second: first.iter().map(|v| v * n as u64).collect(),
        first,
        // max over s of s j: (N-1) j
        on_dup: (0..DUP_COUNT).map(|j| ((n - 1) * j) as f32).collect(),
        op_counts: (2, 1),
        distinct_ids: true,
    }
}

#[test]
fn a_duplicated_communicator_used_in_order_beside_its_parent() {
    for engine in engines() {
        let outs = launch(engine, N, dup_in_order).unwrap();
        for (d, got) in outs.into_iter().enumerate() {
            assert_eq!(got, dup_expected(N), "rank {d}");
        }
    }
}

/// What the PreMulSum program saw on one rank.
#[derive(Debug, PartialEq, serde::Serialize, serde::Deserialize)]
struct PreMul {
    code: i32,
    scaled: Vec<f32>,
    use_after_destroy: (ErrorKind, String),
    second_destroy: ErrorKind,
    after: Vec<f32>,
}

const PREMUL_COUNT: usize = 50;

/// `ncclRedOpCreatePreMulSum`, a call with the op, `ncclRedOpDestroy`, then
/// the same code again: refused as an invalid op by the argument check, on
/// every rank, after which the communicator still works.
fn premul_life(c: &mut Comm) -> Result<PreMul> {
    let r = c.rank();
    let send = c.alloc_elems(PREMUL_COUNT, DataType::Float32)?;
    let recv = c.alloc_elems(PREMUL_COUNT, DataType::Float32)?;
    let x: Vec<f32> = (0..PREMUL_COUNT).map(|j| (r + j) as f32).collect();
    c.write(send, &x)?;
    let code = c.create_pre_mul_sum(1.5);
    c.nccl_all_reduce(send, recv, PREMUL_COUNT, DataType::Float32, code)?;
    let scaled = c.read(recv, PREMUL_COUNT)?;
    c.destroy_op(code)?;
    let e = c
        .nccl_all_reduce(send, recv, PREMUL_COUNT, DataType::Float32, code)
        .expect_err("a destroyed op is refused");
    let use_after_destroy = (e.kind, e.message);
    let second_destroy = c.destroy_op(code).expect_err("destroyed twice").kind;
    c.nccl_all_reduce(send, recv, PREMUL_COUNT, DataType::Float32, RedOp::Sum)?;
    Ok(PreMul {
        code,
        scaled,
        use_after_destroy,
        second_destroy,
        after: c.read(recv, PREMUL_COUNT)?,
    })
}

fn premul_expected(n: usize) -> PreMul {
    let sum = |j: usize| (rank_sum(n) as usize + n * j) as f32;
    PreMul {
        // the first op this communicator creates
        code: 5,
        // Σ_s 1.5 (s + j): exact in float for these small integers
        scaled: (0..PREMUL_COUNT).map(|j| 1.5 * sum(j)).collect(),
        use_after_destroy: (
            ErrorKind::InvalidOp,
            "AllReduce: reduction op code 5 is invalid: valid codes are 0..=4 (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg) or a PreMulSum op created on this communicator".into(),
        ),
        second_destroy: ErrorKind::InvalidOp,
        after: (0..PREMUL_COUNT).map(sum).collect(),
    }
}

#[test]
fn a_premulsum_op_is_created_used_and_destroyed_and_refused_after() {
    for engine in engines() {
        let outs = launch(engine, N, premul_life).unwrap();
        for (d, got) in outs.into_iter().enumerate() {
            assert_eq!(got, premul_expected(N), "rank {d}");
        }
    }
}

const PIN_COUNT: usize = 4096;

/// An AllReduce large enough to move data between ranks' buffers, and a
/// Broadcast, on threads pinned to cores.
fn pinned_program(c: &mut Comm) -> Result<(Vec<i32>, Vec<i32>)> {
    let r = c.rank();
    let a = c.alloc_elems(PIN_COUNT, DataType::Int32)?;
    let x: Vec<i32> = (0..PIN_COUNT).map(|j| (r * j) as i32 - j as i32).collect();
    c.write(a, &x)?;
    c.nccl_all_reduce(a, a, PIN_COUNT, DataType::Int32, RedOp::Sum)?;
    let b = c.alloc_elems(PIN_COUNT, DataType::Int32)?;
    c.write(b, &x)?;
    c.nccl_broadcast(b, b, PIN_COUNT, DataType::Int32, (c.size() - 1) as i32)?;
    Ok((c.read(a, PIN_COUNT)?, c.read(b, PIN_COUNT)?))
}

fn pinned_expected(n: usize) -> (Vec<i32>, Vec<i32>) {
    // Σ_s (s j - j) = j (N(N-1)/2 - N); the root N-1 sends (N-2) j
    let sum = (0..PIN_COUNT)
        .map(|j| j as i32 * (rank_sum(n) as i32 - n as i32))
        .collect();
    let bcast = (0..PIN_COUNT).map(|j| (n as i32 - 2) * j as i32).collect();
    (sum, bcast)
}

#[test]
fn pinned_threads_run_collectives() {
    for engine in engines() {
        // 2 ranks are pinned on any machine with 2 cores; more ranks than cores
        // run unpinned, as documented, and must work the same
        for n in [1, 2, N] {
            let opts = LaunchOptions::default().with_pinned_threads(true);
            let outs = launch_with(engine, opts, n, pinned_program).unwrap();
            for (d, got) in outs.into_iter().enumerate() {
                assert!(got == pinned_expected(n), "n {n} rank {d}");
            }
        }
    }
}
