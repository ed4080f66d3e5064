//! rankwise: NCCL's collective contracts, executable.
//!
//! Layers, top calls down: `cli` (binary) → `verify`, `bench`, `logs` →
//! `api` (raw and typed faces of a communicator) → `core` (the contract as
//! pure functions) and `engine` (what executes a checked call).

pub mod core;
pub mod logs;
