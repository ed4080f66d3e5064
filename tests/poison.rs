//! Poison mode: buffers the contract leaves undefined are filled with a
//! recognisable pattern after each call; defined outputs are untouched by it.

use rankwise::launch::{EngineKind, LaunchOptions};
use rankwise::{DataType, RedOp};
use rankwise_testkit::engines::{engines, launch_with};

fn run(engine: EngineKind, poison: bool) -> Vec<(Vec<u32>, Vec<u32>, Vec<i32>)> {
    launch_with(
        engine,
        LaunchOptions::default().with_poison(poison),
        3,
        |c| {
            let me = c.rank() as f32;
            // Reduce to root 0, every rank passes a recvbuff
            let s = c.alloc_elems(4, DataType::Float32)?;
            let r = c.alloc_elems(4, DataType::Float32)?;
            c.write(s, &[me, 1.0, 2.0, 3.0])?;
            c.nccl_reduce(s, r, 4, DataType::Float32, RedOp::Sum, 0)?;
            let reduced: Vec<u32> = c.read::<f32>(r, 4)?.iter().map(|x| x.to_bits()).collect();
            // Gather to root 2, non-roots pass an (unused) recvbuff too
            let gs = c.alloc_elems(2, DataType::Int32)?;
            let gr = c.alloc_elems(6, DataType::Int32)?;
            c.write(gs, &[c.rank() as i32, 7])?;
            c.nccl_gather(gs, gr, 2, DataType::Int32, 2)?;
            let gathered = c.read::<i32>(gr, 6)?;
            // the send buffer is an input: never poisoned
            let input: Vec<u32> = c.read::<f32>(s, 4)?.iter().map(|x| x.to_bits()).collect();
            Ok((reduced, input, gathered))
        },
    )
    .unwrap()
}

#[test]
fn undefined_outputs_are_poisoned_and_defined_ones_are_not() {
    for engine in engines() {
        let out = run(engine, true);
        let snan = 0x7FA0_0000u32;
        assert_eq!(
            out[0].0,
            [3.0f32, 3.0, 6.0, 9.0].map(f32::to_bits).to_vec(),
            "the root's result is intact"
        );
        for r in [1, 2] {
            assert_eq!(
                out[r].0,
                vec![snan; 4],
                "rank {r}'s Reduce recvbuff is a signalling NaN"
            );
            assert!(f32::from_bits(out[r].0[0]).is_nan());
        }
        for (r, o) in out.iter().enumerate() {
            assert_eq!(
                o.1,
                [r as f32, 1.0, 2.0, 3.0].map(f32::to_bits).to_vec(),
                "inputs are never poisoned"
            );
        }
        assert_eq!(
            out[2].2,
            vec![0, 7, 1, 7, 2, 7],
            "the Gather root's result is intact"
        );
        let a5 = i32::from_ne_bytes([0xA5; 4]);
        for r in [0, 1] {
            assert_eq!(
                out[r].2,
                vec![a5; 6],
                "rank {r}'s unused Gather recvbuff is 0xA5"
            );
        }
    }
}

#[test]
fn without_poison_the_undefined_buffers_are_left_alone() {
    for engine in engines() {
        let out = run(engine, false);
        for r in [1, 2] {
            assert_eq!(
                out[r].0,
                vec![0; 4],
                "fresh allocations are zero and nothing wrote them"
            );
        }
        assert_eq!(out[0].2, vec![0; 6]);
    }
}
