//! Bad inputs: the RANKWISE_* environment variables. Every command that
//! launches ranks (run, verify, verify --suite misuse, bench) refuses a bad
//! value before it starts, naming the variable, the value and what is
//! accepted; a trace file that cannot be written is reported, once.

use super::{Bad, nothing};

/// The four commands that read the settings, each with arguments that
/// would succeed under good settings.
const RUN: &[&str] = &["run", "all_reduce", "--ranks", "2", "--count", "2"];
const VERIFY: &[&str] = &["verify", "--ranks", "2", "--out", "{dir}/run"];
const MISUSE: &[&str] = &["verify", "--suite", "misuse"];
const BENCH: &[&str] = &[
    "bench",
    "all_reduce",
    "--ranks",
    "2",
    "-b",
    "8",
    "-e",
    "8",
    "-w",
    "0",
    "-n",
    "1",
];

/// One row: `VAR=value` given to `cmd` answers exit 1 and names the
/// variable and its value besides `says`.
macro_rules! row {
    ($cmd:expr, $var:literal, $value:literal, $($says:expr),+) => {
        Bad {
            args: $cmd,
            env: &[($var, $value)],
            setup: nothing,
            code: 1,
            says: &[concat!($var, "=", $value), $($says),+],
        }
    };
}

/// The table: the rows given whole, then every `VAR=value => says` pair on
/// each of the four commands.
macro_rules! table {
    ([$($whole:expr),* $(,)?] $($var:literal = $value:literal => [$($says:expr),+];)*) => {
        &[
            $($whole,)*
            $(
                row!(RUN, $var, $value, $($says),+),
                row!(VERIFY, $var, $value, $($says),+),
                row!(MISUSE, $var, $value, $($says),+),
                row!(BENCH, $var, $value, $($says),+),
            )*
        ]
    };
}

/// The accepted values, as every RANKWISE_TIMEOUT refusal states them.
const TIMEOUTS: &str = "expected a positive finite number of seconds, at most 1000000000";

pub const ROWS: &[Bad] = table! {
    [
        // the trace is lost, the run is not: one report, and the command's own result
        Bad {
            args: RUN,
            env: &[("RANKWISE_DEBUG", "INFO"), ("RANKWISE_DEBUG_FILE", "/dev/full")],
            setup: nothing,
            code: 0,
            says: &[
                "rankwise: trace file /dev/full: write failed: No space left on device",
                "later trace lines are lost",
                "[10000, 10002]",
            ],
        },
        // a trace file that cannot be opened: said, and the lines go to stderr
        Bad {
            args: RUN,
            env: &[
                ("RANKWISE_DEBUG", "INFO"),
                ("RANKWISE_DEBUG_FILE", "no/such/dir/trace.%r"),
            ],
            setup: nothing,
            code: 0,
            says: &["cannot open RANKWISE_DEBUG_FILE", "NCCL INFO AllReduce: opCount 0"],
        },
    ]
    "RANKWISE_TIMEOUT" = "inf" => ["not finite", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "1e300" => ["more than 1000000000 s", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "0" => ["not more than 0", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "-1" => ["not more than 0", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "abc" => ["not a number", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "nan" => ["not a number", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "30s" => ["not a number", TIMEOUTS];
    "RANKWISE_TIMEOUT" = "1e-12" => ["shorter than 1 ns", TIMEOUTS];
    "RANKWISE_POISON" = "yes" => ["expected 0 or 1"];
    "RANKWISE_DEBUG" = "LOUD" => ["expected VERSION, WARN, INFO or TRACE"];
    "RANKWISE_DEBUG_SUBSYS" = "COLL,NETWORK" => ["NETWORK is not a subsystem", "INIT, COLL, P2P, ALL"];
};
