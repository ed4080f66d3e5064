//! The seed chapter's native cases (raw face, explicit pointers) on 4 ranks,
//! with the chapter's exact expected vectors.

use rankwise::{DataType, NULL, RedOp};
use rankwise_testkit::engines::{engines, launch};

const N: usize = 4;

#[test]
fn all_reduce_out_of_place_and_in_place() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i32;
            let input = vec![r + 1, r + 10, r * 2];
            let send = c.alloc_elems(3, DataType::Int32)?;
            let recv = c.alloc_elems(3, DataType::Int32)?;
            c.write(send, &input)?;
            c.nccl_all_reduce(send, recv, 3, DataType::Int32, RedOp::Sum)?;
            let oop = c.read::<i32>(recv, 3)?;
            c.write(send, &input)?;
            c.nccl_all_reduce(send, send, 3, DataType::Int32, RedOp::Sum)?;
            Ok((oop, c.read::<i32>(send, 3)?))
        })
        .unwrap();
        for (oop, ip) in outs {
            assert_eq!(oop, vec![10, 46, 12]);
            assert_eq!(ip, vec![10, 46, 12]);
        }
    }
}

#[test]
fn all_gather_in_place_uses_the_rank_offset() {
    for engine in engines() {
        let expected = vec![0, 10, 100, 1, 11, 101, 2, 12, 102, 3, 13, 103];
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i32;
            let local = vec![r, r + 10, r + 100];
            // out-of-place
            let send = c.alloc_elems(3, DataType::Int32)?;
            let recv = c.alloc_elems(12, DataType::Int32)?;
            c.write(send, &local)?;
            c.nccl_all_gather(send, recv, 3, DataType::Int32)?;
            let oop = c.read::<i32>(recv, 12)?;
            // in-place: storage of -1, own slice written at rank*3, sendbuff = recvbuff + rank*sendcount
            let buf = c.alloc_elems(12, DataType::Int32)?;
            c.write(buf, &[-1; 12])?;
            let mine = buf + c.rank() * 3 * 4;
            c.write(mine, &local)?;
            c.nccl_all_gather(mine, buf, 3, DataType::Int32)?;
            Ok((oop, c.read::<i32>(buf, 12)?))
        })
        .unwrap();
        for (oop, ip) in outs {
            assert_eq!(oop, expected);
            assert_eq!(ip, expected);
        }
    }
}

#[test]
fn reduce_scatter_in_place_uses_the_reverse_offset() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i32;
            let input: Vec<i32> = (0..12).map(|i| r * 100 + i).collect();
            let send = c.alloc_elems(12, DataType::Int32)?;
            let recv = c.alloc_elems(3, DataType::Int32)?;
            c.write(send, &input)?;
            c.nccl_reduce_scatter(send, recv, 3, DataType::Int32, RedOp::Sum)?;
            let oop = c.read::<i32>(recv, 3)?;
            c.write(send, &input)?;
            let shard = send + c.rank() * 3 * 4;
            c.nccl_reduce_scatter(send, shard, 3, DataType::Int32, RedOp::Sum)?;
            Ok((oop, c.read::<i32>(shard, 3)?))
        })
        .unwrap();
        let seed = [
            [600, 604, 608],
            [612, 616, 620],
            [624, 628, 632],
            [636, 640, 644],
        ];
        for (r, (oop, ip)) in outs.into_iter().enumerate() {
            assert_eq!(oop, seed[r]);
            assert_eq!(ip, seed[r]);
        }
    }
}

#[test]
fn broadcast_out_of_place_root_2_and_in_place_root_1() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i64;
            let input: Vec<i64> = (0..4).map(|j| r * 10 + j).collect();
            let send = c.alloc_elems(4, DataType::Int64)?;
            let recv = c.alloc_elems(4, DataType::Int64)?;
            c.write(send, &input)?;
            c.nccl_broadcast(send, recv, 4, DataType::Int64, 2)?;
            let oop = c.read::<i64>(recv, 4)?;
            c.nccl_broadcast(send, send, 4, DataType::Int64, 1)?;
            Ok((oop, c.read::<i64>(send, 4)?))
        })
        .unwrap();
        for (oop, ip) in outs {
            assert_eq!(oop, vec![20, 21, 22, 23]);
            assert_eq!(ip, vec![10, 11, 12, 13]);
        }
    }
}

#[test]
fn reduce_root_3_with_null_recvbuff_elsewhere() {
    for engine in engines() {
        let outs = launch(engine, N, |c| {
            let r = c.rank() as i32;
            let send = c.alloc_elems(2, DataType::Int32)?;
            c.write(send, &[r + 1, (r + 1) * 10])?;
            let recv = if c.rank() == 3 {
                c.alloc_elems(2, DataType::Int32)?
            } else {
                NULL
            };
            c.nccl_reduce(send, recv, 2, DataType::Int32, RedOp::Sum, 3)?;
            // only the root has an output to read
            if c.rank() == 3 {
                Ok(Some(c.read::<i32>(recv, 2)?))
            } else {
                Ok(None)
            }
        })
        .unwrap();
        assert_eq!(outs, vec![None, None, None, Some(vec![10, 100])]);
    }
}
