//! rankwise: NCCL's collective contracts, executable.
//!
//! The library's floors, bottom up; a module uses only its own floor and
//! those below it (`tests/layers.rs` keeps it so):
//!
//! - `core`: the contract as data and pure functions (datatypes, reduction
//!   ops, buffer sizes, in-place equations, argument checks, errors,
//!   groups, lowering, the cross-rank comparison, trace line formats);
//!   `kernels`: the element-wise reductions every engine computes with;
//!   `settings`: the `RANKWISE_*` variables; `machine`: what the machine
//!   offers (cores); `exit`: how a rankwise process ends.
//! - `trace`: writes NCCL-format lines where `RANKWISE_DEBUG*` ask.
//! - `transport`: moving bytes between ranks, nothing about NCCL: the
//!   side channel (`store`) and the shared-memory lane (`lane`).
//! - `agreement`: how ranks agree on a launch before data moves: posts on
//!   the wire, rounds, verdicts, over either transport.
//! - `engine`: what executes a checked call (`local`: threads of this
//!   process; `mpi`: processes of an MPI job; `nccl`: real NCCL), behind
//!   one trait; an engine uses transports, never a launcher.
//! - `api`: the two faces of a communicator (raw: pointers as in NCCL's C
//!   API; typed: slices, with torch.distributed's names).
//! - `launch`: starts the ranks of an engine (threads, one process per
//!   rank, an MPI job) and hands each its communicator.
//! - `logs`: reads NCCL's logs and rankwise's own trace, and diagnoses
//!   hangs and mismatches.
//!
//! The command line (`rankwise-cli`) and the checker loaded in front of
//! NCCL (`rankwise-nccl`, `librankwise_nccl.so`) are crates of their own
//! on this library.
//!
//! ```
//! use rankwise::{local, RedOp};
//! let outs = local::launch(4, |comm| {
//!     let r = comm.rank() as i32;
//!     let mut x = vec![r + 1, r + 10, r * 2];
//!     comm.all_reduce(&mut x, RedOp::Sum)?;
//!     Ok(x)
//! })?;
//! assert!(outs.iter().all(|x| *x == vec![10, 46, 12]));
//! # Ok::<(), rankwise::Error>(())
//! ```

pub mod agreement;
pub mod api;
pub mod core;
pub mod engine;
pub mod exit;
pub mod kernels;
pub mod launch;
pub mod logs;
pub mod machine;
pub mod settings;
pub mod trace;
pub mod transport;

pub use api::{Comm, NULL, P2POp};
pub use core::{DataType, Element, Error, ErrorKind, Func, RedOp, Result, ResultCode};
pub use launch::local;
#[cfg(feature = "mpi")]
pub use launch::mpi;
