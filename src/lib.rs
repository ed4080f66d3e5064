//! rankwise: NCCL's collective contracts, executable.
//!
//! Layers, top calls down: the `rankwise` binary (`cli`) → `verify`, `logs` →
//! `api` (raw and typed faces of a communicator) → `core` (the contract as
//! pure functions) and `engine` (what executes a checked call), whose
//! host engines reduce with `kernels`; `trace`
//! writes NCCL-format lines; `settings` reads the `RANKWISE_*` variables.
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

pub mod api;
pub mod bench;
pub mod cli;
pub mod core;
pub mod engine;
pub mod kernels;
pub mod launch;
pub mod logs;
pub mod misuse;
pub mod settings;
pub mod trace;
pub mod verify;

pub use api::{Comm, NULL, P2POp};
pub use core::{DataType, Element, Error, ErrorKind, Func, RedOp, Result, ResultCode};
pub use engine::local;
#[cfg(feature = "mpi")]
pub use engine::mpi;
