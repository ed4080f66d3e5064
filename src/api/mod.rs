//! The two faces of one communicator, [`Comm`]:
//! - raw (`raw.rs`): pointer-level, mirrors NCCL's C API — addresses from the
//!   rank's allocation registry, NULL, raw datatype/op codes, groups;
//! - typed (`typed.rs`): slice-level and safe, with torch.distributed's names;
//!   its in-place variants take the one full buffer, so the pointer equation
//!   cannot be got wrong.
//!
//! Both end in [`Comm::submit`]: checks in NCCL's order, the trace line,
//! zero-count discard, group queueing, launch.

mod comm;
mod raw;
mod staging;
mod typed;

pub use comm::Comm;
pub use raw::{DtypeArg, NULL, OpArg};
pub use typed::P2POp;
