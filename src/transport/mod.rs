//! Moving bytes between ranks, and nothing about NCCL: the floor under the
//! engines and the interposer.
//!
//! - [`store`]: the side channel of ranks that share no memory, a key-value
//!   store with blocking reads and exchanges, in this process ([`store::Store`])
//!   or served over TCP ([`store::Hub`], [`store::Client`]);
//! - [`lane`]: the shared-memory lane, through which ranks that are
//!   processes of one host post and read an exchange's values with plain
//!   loads and stores.
//!
//! Neither knows what the bytes mean: the agreement above them decides
//! that.

pub mod lane;
pub mod store;
