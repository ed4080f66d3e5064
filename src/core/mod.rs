//! The contract as data and pure functions: datatypes, reduction ops, op
//! kinds, the call record, buffer sizes and in-place equations, argument
//! checks, errors and trace formats; and what every engine shares around a
//! call: a rank's group state and launch counter (`group`), the launch an
//! engine receives (`launch`), AlltoAllv's lowering to Send/Recv (`lower`),
//! the cross-rank agreement comparison with its messages (`agree`) and the
//! one wire format of what ranks show each other (`wire`).
//! No I/O, no threads; every engine, the API faces and the CLI use these
//! same functions.

pub mod agree;
#[cfg(test)]
pub mod allocations;
pub mod bytes;
pub mod call;
pub mod check;
pub mod datatype;
pub mod error;
pub mod fp8;
pub mod func;
pub mod group;
pub mod launch;
pub mod layout;
pub mod lower;
pub mod redop;
pub mod scalar;
pub mod trace;
pub mod wire;

pub use call::{Call, RawCall};
pub use check::{AddressSpace, check_buffers, check_call};
pub use datatype::{DataType, Element, F8E4M3, F8E5M2};
pub use error::{Error, ErrorKind, Result, ResultCode};
pub use func::Func;
pub use group::{Group, Queued};
pub use launch::{Launch, Posted};
pub use layout::{
    InPlace, Layout, Role, footprint_elems, in_place, is_in_place, layout, poison_pattern, share,
    undefined_recv_elems,
};
pub use redop::RedOp;
pub use scalar::Scalar;
