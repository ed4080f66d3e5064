//! Bad inputs: bench. Sizes, factor, ranks and calls are checked before
//! any thread starts, and the memory a sweep needs is compared with what
//! the machine and the process's limits allow before anything is
//! allocated (the rows run under `ulimit -v` 4 GiB, so a sweep that needs
//! more address space is refused by that limit on any machine).

use super::{Bad, bad};

pub const ROWS: &[Bad] = &[
    // sizes: what the machine cannot hold is refused, saying how much it needs
    bad(
        &[
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "-b",
            "64G",
            "-e",
            "64G",
        ],
        1,
        &[
            "this sweep needs",
            "256.00 GiB of buffers for 2 ranks of float rows up to 68719476736 bytes",
            "lower -e or --ranks",
        ],
    ),
    bad(
        &[
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "-b",
            "4G",
            "-e",
            "4G",
        ],
        1,
        &[
            "this sweep needs",
            "16.00 GiB of buffers for 2 ranks of float rows up to 4294967296 bytes",
        ],
    ),
    bad(
        &["bench", "all_reduce", "--ranks", "2", "-b", "8", "-e", "4G"],
        1,
        &["16.00 GiB of buffers for 2 ranks of float rows up to 4294967296 bytes"],
    ),
    bad(
        &[
            "bench",
            "all_reduce",
            "--ranks",
            "2",
            "-b",
            "1G",
            "-e",
            "1G",
        ],
        1,
        &[
            "this sweep needs",
            "4.00 GiB of buffers",
            "lower -e or --ranks",
        ],
    ),
    bad(
        &[
            "bench",
            "all_reduce",
            "-b",
            "9223372036854775808",
            "-e",
            "9223372036854775808",
        ],
        1,
        &[
            "needs more than 2^64 bytes of memory",
            "9223372036854775808 bytes",
        ],
    ),
    bad(
        &["bench", "all_reduce", "-b", "9223372036854775808"],
        1,
        &["-b 9223372036854775808 is larger than -e 67108864"],
    ),
    bad(
        &[
            "bench",
            "all_reduce",
            "-b",
            "18446744073709551615",
            "-e",
            "18446744073709551615",
        ],
        1,
        &["needs more than 2^64 bytes of memory"],
    ),
    bad(
        &[
            "bench",
            "all_gather",
            "-d",
            "int8",
            "-b",
            "18446744073709551615",
            "-e",
            "18446744073709551615",
        ],
        1,
        &["needs more than 2^64 bytes of memory"],
    ),
    bad(
        &["bench", "all_reduce", "-b", "18446744073709551615"],
        1,
        &["-b 18446744073709551615 is larger than -e 67108864"],
    ),
    bad(
        &["bench", "all_reduce", "-b", "18446744073709551616"],
        2,
        &["`18446744073709551616` is too large: a size is at most 18446744073709551615 bytes"],
    ),
    bad(
        &["bench", "all_reduce", "-e", "17179869184G"],
        2,
        &["`17179869184G` is too large"],
    ),
    bad(
        &["bench", "all_reduce", "-b", "0", "-e", "0"],
        1,
        &["-b 0: sizes are in bytes and start at 1"],
    ),
    bad(
        &["bench", "all_reduce", "-b", "0"],
        1,
        &["-b 0: sizes are in bytes and start at 1"],
    ),
    bad(
        &["bench", "all_reduce", "-b", "16", "-e", "8"],
        1,
        &["-b 16 is larger than -e 8"],
    ),
    bad(
        &["bench", "all_reduce", "--ranks", "2", "-b", "1", "-e", "3"],
        1,
        &[
            "no size from -b 1 to -e 3 holds one element per rank: AllReduce of float on 2 ranks needs at least 4 bytes",
        ],
    ),
    bad(
        &[
            "bench",
            "reduce_scatter",
            "--ranks",
            "4",
            "-b",
            "8",
            "-e",
            "8",
        ],
        1,
        &["ReduceScatter of float on 4 ranks needs at least 16 bytes"],
    ),
    // the factor: a factor close to 1 is refused with the number of sizes it makes
    bad(
        &["bench", "all_reduce", "-f", "1.0000000001"],
        1,
        &[
            "-f 1.0000000001 makes",
            "a sweep has at most 512: use -f 1.0",
        ],
    ),
    bad(
        &[
            "bench",
            "all_reduce",
            "-b",
            "8",
            "-e",
            "16",
            "-f",
            "1.0000000001",
        ],
        1,
        &["from -b 8 to -e 16; a sweep has at most 512: use -f 1.00142 or more"],
    ),
    bad(
        &["bench", "all_reduce", "-f", "1"],
        1,
        &["-f must be greater than 1 to step from -b 8 to -e 67108864, not 1"],
    ),
    bad(
        &["bench", "all_reduce", "-f", "0.5"],
        1,
        &["-f must be greater than 1"],
    ),
    bad(
        &["bench", "all_reduce", "-f", "nan"],
        1,
        &["-f must be a finite number, not NaN"],
    ),
    bad(
        &["bench", "all_reduce", "-f", "inf"],
        1,
        &["-f must be a finite number, not inf"],
    ),
    // ranks: bounded by what the local engine runs, before any thread starts
    bad(
        &["bench", "all_reduce", "--ranks", "18446744073709551615"],
        1,
        &[
            "--ranks 18446744073709551615 is more than the local engine runs here (at most 256: one thread per rank)",
        ],
    ),
    bad(
        &["bench", "all_reduce", "--ranks", "10000"],
        1,
        &["--ranks 10000 is more than the local engine runs here (at most 256"],
    ),
    bad(
        &["bench", "all_reduce", "--ranks", "257"],
        1,
        &["at most 256"],
    ),
    bad(
        &["bench", "all_reduce", "--ranks", "0"],
        1,
        &["--ranks must be at least 1"],
    ),
    bad(
        &["bench", "broadcast", "--ranks", "2", "-r", "2"],
        1,
        &["root 2 is out of range: valid roots are 0..=1"],
    ),
    bad(
        &["bench", "broadcast", "-r", "99999999999999999999"],
        1,
        &["-r takes a rank or all, not `99999999999999999999`"],
    ),
    // calls per row
    bad(
        &["bench", "all_reduce", "-n", "0"],
        1,
        &["-n must be at least 1, not 0"],
    ),
    bad(
        &["bench", "all_reduce", "-n", "18446744073709551615"],
        1,
        &["-n 18446744073709551615 is more calls per row than the bench makes (at most 100000)"],
    ),
    bad(
        &["bench", "all_reduce", "-w", "18446744073709551615"],
        1,
        &["-w 18446744073709551615 is more calls per row"],
    ),
    bad(
        &["bench", "all_reduce", "-c", "100001"],
        1,
        &["-c 100001 is more calls per row"],
    ),
    // rows: every root of 256 ranks, every datatype and op
    bad(
        &[
            "bench", "all", "--ranks", "256", "-r", "all", "-d", "all", "-o", "all",
        ],
        1,
        &["rows (collectives × datatypes × ops × roots × sizes); at most 100000"],
    ),
    bad(
        &["bench", "all_reduce", "-d", "float128"],
        1,
        &["unknown datatype `float128`"],
    ),
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
