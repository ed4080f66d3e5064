//! The `rankwise` commands, every one of them: each submodule holds one
//! command's clap arguments and its `run(args) -> ExitCode`; `main.rs` only
//! dispatches.
//!
//! Exit codes: `rankwise::exit`.

/// `println!` that ignores a closed stdout: `rankwise verify | head` must
/// end quietly, not with a panic.
macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($arg)*);
    }};
}
/// `print!` that ignores a closed stdout.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout().lock(), $($arg)*);
    }};
}

pub mod bench;
pub mod check;
pub mod explain;
pub mod logs;
pub mod misuse;
pub mod run;
pub mod summarize;
pub mod verify;

use rankwise::core::{DataType, Func, RedOp};
pub use rankwise::exit::{FAILED, REJECTED, fail};
use rankwise::launch::EngineKind;
use std::process::ExitCode;

/// Runs a command that launches ranks, unless a `RANKWISE_*` variable has a
/// value it does not accept: then each bad variable is said (name, value,
/// what is accepted) and the command never starts (exit 1).
pub fn with_settings(cmd: &str, command: impl FnOnce() -> ExitCode) -> ExitCode {
    match rankwise::settings::Settings::from_env() {
        Ok(_) => command(),
        Err(errors) => {
            for e in &errors {
                eprintln!("rankwise {cmd}: {e}");
            }
            ExitCode::from(FAILED)
        }
    }
}

/// clap's parser for `--engine`: every engine rankwise knows, each with its
/// summary in `--help`; a build without the one asked for says so when the
/// command starts.
pub fn engine_parser() -> impl clap::builder::TypedValueParser<Value = EngineKind> {
    use clap::builder::{PossibleValue, PossibleValuesParser, TypedValueParser};
    let values = EngineKind::KNOWN.map(|e| PossibleValue::new(e.name()).help(e.summary()));
    PossibleValuesParser::new(values).map(|name| {
        EngineKind::KNOWN
            .into_iter()
            .find(|e| e.name() == name)
            .expect("clap accepts only the known names")
    })
}

/// clap value parser for a collective name (`all_reduce`, `AllReduce`, `ncclAllReduce`, …).
pub fn parse_collective(s: &str) -> Result<Func, String> {
    match Func::parse(s) {
        Some(f) if Func::COLLECTIVES.contains(&f) => Ok(f),
        Some(f) => Err(format!(
            "{} is point-to-point, not a collective; expected one of: {}",
            f.cli_name(),
            collective_names()
        )),
        None => Err(format!("expected one of: {}", collective_names())),
    }
}

fn collective_names() -> String {
    Func::COLLECTIVES
        .iter()
        .map(|f| f.cli_name())
        .collect::<Vec<_>>()
        .join(", ")
}

/// clap value parser for a datatype (`int32`, `float`, `bf16`, `ncclFloat8e4m3`, …).
pub fn parse_dtype(s: &str) -> Result<DataType, String> {
    DataType::parse(s).ok_or_else(|| {
        format!(
            "expected one of: {}",
            DataType::ALL
                .iter()
                .map(|d| d.name())
                .collect::<Vec<_>>()
                .join(", ")
        )
    })
}

/// clap value parser for a reduction op.
pub fn parse_redop(s: &str) -> Result<RedOp, String> {
    RedOp::parse(s).ok_or_else(|| "expected one of: sum, prod, max, min, avg".to_string())
}

/// Checks `--ranks` and that `ranks × count × size` bytes fit the address
/// space (`isize::MAX` bytes, the most any allocation or pointer offset can
/// span). A refusal names the argument that is too large: `--ranks` when
/// even one element per rank overflows, `--count` when even one rank's
/// elements do, else both.
pub fn check_size(
    ranks: usize,
    count: usize,
    dt: DataType,
    max_ranks: Option<usize>,
) -> Result<(), String> {
    if ranks == 0 {
        return Err("--ranks must be at least 1: a communicator has at least one rank".into());
    }
    if let Some(max) = max_ranks
        && ranks > max
    {
        return Err(format!(
            "--ranks {ranks} is more than the local engine runs here (at most {max}: one thread per rank)"
        ));
    }
    let limit = isize::MAX as u128;
    let size = dt.size();
    // ranks × count < 2^128 always fits; × size may not
    let (n, q, b) = (ranks as u128, count as u128, size as u128);
    if (n * q).checked_mul(b).is_some_and(|bytes| bytes <= limit) {
        return Ok(());
    }
    let (dt, space) = (
        dt.name(),
        format!("the address space (at most {limit} bytes)"),
    );
    Err(if n * b > limit {
        format!(
            "--ranks {ranks} is too large: {ranks} ranks × {size} bytes ({dt}) overflow {space} even at count 1"
        )
    } else if q * b > limit {
        format!(
            "--count {count} is too large: {count} elements × {size} bytes ({dt}) overflow {space} even on one rank"
        )
    } else {
        format!(
            "--ranks {ranks} × --count {count} is too large: {ranks} × {count} elements × {size} bytes ({dt}) overflow {space}; lower --ranks or --count"
        )
    })
}

/// The call both `run` and `explain` take: the op and its arguments.
#[derive(clap::Args, Debug)]
pub struct CallArgs {
    /// all_reduce, reduce, broadcast, all_gather, reduce_scatter, all_to_all, gather or scatter
    #[arg(value_parser = parse_collective, value_name = "OP")]
    pub collective: Func,
    /// Number of ranks in the communicator
    #[arg(long, short = 'n')]
    pub ranks: usize,
    /// The API count (its meaning per op: `rankwise explain`)
    #[arg(long, short = 'c')]
    pub count: usize,
    /// Datatype (int8 uint8 int32 uint32 int64 uint64 half float double bfloat16 f8e4m3 f8e5m2)
    #[arg(long, short = 'd', value_parser = parse_dtype, default_value = "int32")]
    pub dtype: DataType,
    /// Reduction (sum, prod, max, min, avg) of reducing ops [default: sum]
    #[arg(long = "op", short = 'o', value_parser = parse_redop)]
    pub redop: Option<RedOp>,
    /// Root of reduce, broadcast, gather, scatter [default: 0]; out-of-range roots show the rejection
    #[arg(long, short = 'r', allow_hyphen_values = true)]
    pub root: Option<i64>,
    /// Use the op's in-place pointer equation
    #[arg(long)]
    pub in_place: bool,
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// Sizes spread over the whole range and clustered at the limits.
    fn size_arg() -> impl Strategy<Value = usize> {
        let edge = isize::MAX as usize;
        prop_oneof![
            any::<usize>(),
            0..4096usize,
            (edge / 8 - 4)..(edge / 8 + 4),
            (edge / 2 - 4)..(edge / 2 + 4),
            (edge - 4)..=usize::MAX,
            (1usize << 31)..(1usize << 33),
        ]
    }

    proptest! {
        /// Accepted exactly when N × count × size <= isize::MAX, computed
        /// exactly; a refusal blames --ranks when N × size alone is over,
        /// --count when count × size alone is, else both.
        #[test]
        fn sizes_are_refused_exactly_when_they_overflow(
            n in size_arg(),
            q in size_arg(),
            dt in proptest::sample::select(DataType::ALL.to_vec()),
        ) {
            prop_assume!(n > 0);
            let limit = isize::MAX as u128;
            let big = |x: u128| x > limit;
            let bytes = (n as u128).checked_mul(q as u128).and_then(|e| e.checked_mul(dt.size() as u128));
            match check_size(n, q, dt, None) {
                Ok(()) => prop_assert!(bytes.is_some_and(|b| !big(b)), "{n} × {q} × {}", dt.size()),
                Err(e) => {
                    prop_assert!(bytes.is_none_or(big), "{e}");
                    let blame = if big(n as u128 * dt.size() as u128) {
                        format!("--ranks {n} is too large")
                    } else if big(q as u128 * dt.size() as u128) {
                        format!("--count {q} is too large")
                    } else {
                        format!("--ranks {n} × --count {q} is too large")
                    };
                    prop_assert!(e.starts_with(&blame), "{e}");
                }
            }
        }
    }

    #[test]
    fn the_issue_cases_blame_the_right_argument() {
        let e = check_size(usize::MAX, 3, DataType::Int32, None).unwrap_err();
        assert!(e.starts_with("--ranks 18446744073709551615 is too large: 18446744073709551615 ranks × 4 bytes (int32) overflow"), "{e}");
        let e = check_size(4096, usize::MAX, DataType::Int32, None).unwrap_err();
        assert!(
            e.starts_with("--count 18446744073709551615 is too large"),
            "{e}"
        );
        assert_eq!(
            check_size(1 << 20, 1 << 39, DataType::Float64, None),
            Ok(())
        );
        assert!(
            check_size(1 << 20, 1 << 40, DataType::Float64, Some(256))
                .unwrap_err()
                .contains("at most 256")
        );
    }
}
