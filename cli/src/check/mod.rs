//! What `rankwise check -- CMD` is made of (the command itself, its
//! arguments and its steps, is `commands::check`):
//!
//! - `library`: the `librankwise_nccl.so` it preloads (embedded in the
//!   binary, or `RANKWISE_PRELOAD`'s) and the proof that it loads here;
//! - `launch`: finding the command, running it with the checker's
//!   environment, passing signals on, its end as an exit code;
//! - `verdict`: the journals read by the log analyzer, in a few lines.

pub mod launch;
pub mod library;
pub mod verdict;
