//! Bad inputs: bench.

use super::{Bad, bad};

pub const ROWS: &[Bad] = &[
    // every rank's buffers are its own layout's size, not ranks × the
    // largest row's count (8 ranks × 32 MiB took 4 GiB of buffers)
    bad(
        &[
            "bench",
            "all_reduce",
            "--ranks",
            "8",
            "-b",
            "32M",
            "-e",
            "32M",
            "-n",
            "1",
            "-w",
            "0",
        ],
        0,
        &["# Out of bounds values : 0 OK"],
    ),
];
