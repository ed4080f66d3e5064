//! Four ranks as threads of this process; the closure is each rank's program.
//!
//! `RANKWISE_DEBUG=INFO cargo run --release --example quickstart`

use rankwise::{RedOp, local};

fn main() -> Result<(), rankwise::Error> {
    let outs = local::launch(4, |comm| {
        let r = comm.rank() as i32;
        let mut x = vec![r + 1, r + 10, r * 2];
        comm.all_reduce(&mut x, RedOp::Sum)?;
        // the rank-major in-place AllGather: this rank's input is block r
        let mut g = vec![-1i32; 4 * 2];
        g[2 * comm.rank()..2 * comm.rank() + 2].copy_from_slice(&[r, r * 100]);
        comm.all_gather_in_place(&mut g)?;
        Ok((x, g))
    })?;
    for (r, (x, g)) in outs.iter().enumerate() {
        println!("rank {r}: all_reduce {x:?}  all_gather {g:?}");
    }
    Ok(())
}
