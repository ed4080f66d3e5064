//! `librankwise_nccl.so`: NCCL's contracts checked live, in any program,
//! in front of the real NCCL.
//!
//! ```text
//! LD_PRELOAD=target/release/librankwise_nccl.so torchrun ... train.py
//! ```
//!
//! The library exports every entry point of NCCL 2.28's API; the dynamic
//! loader binds the program's calls to them ahead of libnccl's. Each call gets rankwise's argument checks, and at
//! launch every rank's call is compared across ranks before NCCL is called;
//! a mismatch is `ncclInvalidUsage` with one line naming the ranks, the call
//! and both sides' arguments, instead of an NCCL hang. Everything else is
//! NCCL's: the real function is called with the program's own arguments.
//!
//! Modules, one job each:
//!
//! - `real`: finding NCCL's functions (`pnccl*` first) in the library the
//!   program uses;
//! - `driver`: the few CUDA driver functions used (capture status, events),
//!   found only where the process has loaded the driver;
//! - `exports`: the C entry points;
//! - `process`: the process's exit, forks and signals, as the interposer
//!   hooks them (with `real`, `driver` and `exports`, all of the crate's
//!   `unsafe`);
//! - `hooks`: what happens around each call, in rooms of one job (the
//!   switches, the allocation registry, the communicator registry, the
//!   per-call checks and groups, the launch's agreement as a client of
//!   `rankwise::agreement`); rankwise's `core` decides every rule and words
//!   every error;
//! - `side`: the side channel's store, found through the unique id (a
//!   communicator whose ranks all share one host agrees on its collectives
//!   through the shared-memory lane instead, set up through the store).
//!
//! Environment: `RANKWISE_CHECK=0` forwards every call untouched;
//! `RANKWISE_CHECK=local` makes each call's own checks (arguments,
//! datatype, op, NULL, alignment, overlap, extent) and nothing across ranks:
//! no side channel, no store, no waiting on other ranks;
//! `RANKWISE_SHM=0` keeps every exchange in the store, even between ranks
//! of one host;
//! `RANKWISE_TIMEOUT` (seconds) bounds every wait for other ranks;
//! `RANKWISE_ABORT=1` aborts the process after an error line;
//! `RANKWISE_DEBUG=INFO` with `RANKWISE_DEBUG_FILE` (`%h`, `%p`, `%r`) keeps
//! a per-rank journal in NCCL's trace format, one write per line;
//! `RANKWISE_NCCL_LIBRARY` names the real libnccl.

mod driver;
mod exports;
mod hooks;
mod process;
mod real;
mod side;
