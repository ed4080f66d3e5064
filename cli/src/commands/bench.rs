//! The `rankwise bench` command line: nccl-tests' flags, parsed into
//! [`Options`], and the command's output and exit code.

use crate::MAX_LOCAL_RANKS;
use crate::bench::limits::{self, ASSUMED_AVAILABLE, Bytes};
use crate::bench::{Fill, Options, Report, machine, machine::Machine, plot, run, table};
use crate::commands::fail;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use rankwise::core::{DataType, Func, RedOp};
use rankwise::launch::EngineKind;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::process::ExitCode;

/// Flags follow nccl-tests (`-b -e -f -d -o -r -n -w -c`).
#[derive(clap::Args, Debug, Clone)]
pub struct Args {
    /// Collective: all_reduce, reduce, broadcast, all_gather, reduce_scatter,
    /// all_to_all, gather, scatter (any spelling: AllReduce, ncclAllReduce),
    /// a comma-separated list, or `all`
    #[arg(value_name = "OP")]
    pub collective: String,
    /// Number of ranks, at most 256 [default: the number of cores, at most 256]
    #[arg(long)]
    pub ranks: Option<usize>,
    /// Smallest size in bytes (nccl-tests' size: suffixes K, M, G = 2^10, 2^20, 2^30)
    #[arg(short = 'b', long = "minbytes", default_value = "8", value_parser = parse_size)]
    pub min_bytes: usize,
    /// Largest size in bytes
    #[arg(short = 'e', long = "maxbytes", default_value = "64M", value_parser = parse_size)]
    pub max_bytes: usize,
    /// Factor between sizes
    #[arg(short = 'f', long = "stepfactor", default_value_t = 2.0)]
    pub factor: f64,
    /// Datatype (float, half, bfloat16, int32, f8e4m3, …) or `all`
    #[arg(short = 'd', long = "datatype", default_value = "float")]
    pub dtype: String,
    /// Reduction op (sum, prod, max, min, avg), `premulsum:SCALAR` (float
    /// types) or `all` (the five built-in ops)
    #[arg(short = 'o', long = "op", default_value = "sum")]
    pub redop: String,
    /// Root of rooted collectives, or `all`
    #[arg(short = 'r', long = "root", default_value = "0")]
    pub root: String,
    /// Timed calls per row and placement
    #[arg(short = 'n', long = "iters", default_value_t = 20)]
    pub iters: usize,
    /// Untimed calls before timing
    #[arg(short = 'w', long = "warmup_iters", default_value_t = 5)]
    pub warmup: usize,
    /// Checked calls per row and placement (0 disables checking, loudly)
    #[arg(short = 'c', long = "check", default_value_t = 1)]
    pub check: usize,
    /// What the timed calls reduce
    #[arg(long, value_enum, default_value = "pattern")]
    pub fill: Fill,
    /// Engine to run on: local (threads), or mpi (a process per rank of an
    /// MPI job; outside mpirun, rankwise starts `mpirun -n RANKS` itself)
    #[arg(long, value_parser = crate::commands::engine_parser(), default_value = "local")]
    pub engine: EngineKind,
    /// Print one JSON document instead of the table
    #[arg(long)]
    pub json: bool,
    /// Write busbw against size, with the traffic bound, as an SVG file
    #[arg(long, value_name = "FILE.svg")]
    pub plot: Option<PathBuf>,
    /// Leave rank threads where the scheduler puts them (by default rank r
    /// runs on core r when there are enough cores, as mpirun binds ranks)
    #[arg(long)]
    pub no_pin: bool,
}

/// `8`, `64K`, `128M`, `1G` (also `64KiB`, `64KB`, `1g`): powers of 1024.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let lower = t.to_ascii_lowercase();
    let body = lower
        .strip_suffix("ib")
        .or_else(|| lower.strip_suffix('b'))
        .unwrap_or(&lower);
    let (num, mult) = match body.chars().last() {
        Some('k') => (&body[..body.len() - 1], 1u64 << 10),
        Some('m') => (&body[..body.len() - 1], 1 << 20),
        Some('g') => (&body[..body.len() - 1], 1 << 30),
        _ => (body, 1),
    };
    let too_large = || format!("`{s}` is too large: a size is at most {} bytes", usize::MAX);
    let v: u64 = num.trim().parse().map_err(|e: std::num::ParseIntError| {
        if *e.kind() == std::num::IntErrorKind::PosOverflow {
            too_large()
        } else {
            format!("`{s}` is not a size: use a number of bytes with an optional K, M or G suffix (e.g. 8, 64K, 128M, 1G)")
        }
    })?;
    v.checked_mul(mult)
        .and_then(|b| usize::try_from(b).ok())
        .ok_or_else(too_large)
}

fn parse_funcs(s: &str) -> Result<Vec<Func>, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(Func::COLLECTIVES.to_vec());
    }
    s.split(',')
        .map(|p| match Func::parse(p.trim()) {
            Some(f) if !f.is_p2p() => Ok(f),
            _ => Err(format!(
                "unknown collective `{p}`: expected one of {} or all",
                Func::COLLECTIVES.map(|f| f.cli_name()).join(", ")
            )),
        })
        .collect()
}

/// `-o`: a built-in op, `all` of them, or `premulsum:SCALAR` (a PreMulSum
/// op made with that scalar, as `ncclRedOpCreatePreMulSum` makes one).
fn parse_ops(s: &str) -> Result<Vec<RedOp>, String> {
    if s.eq_ignore_ascii_case("all") {
        return Ok(RedOp::BUILTIN.to_vec());
    }
    if let Some((name, scalar)) = s.split_once(':')
        && name.eq_ignore_ascii_case("premulsum")
    {
        return match scalar.trim().parse::<f64>() {
            Ok(k) if k.is_finite() => Ok(vec![RedOp::PreMulSum(k)]),
            _ => Err(format!(
                "-o {s}: the scalar of premulsum must be a finite number, as in premulsum:0.3"
            )),
        };
    }
    RedOp::parse(s).map(|op| vec![op]).ok_or_else(|| {
        format!(
            "unknown reduction op `{s}`: expected sum, prod, max, min, avg, premulsum:SCALAR or all"
        )
    })
}

impl Args {
    /// The options these flags describe, or what is wrong with them: every
    /// bound of [`crate::bench::limits`] but memory is checked here.
    pub fn options(&self) -> Result<Options, String> {
        let nranks = self
            .ranks
            .unwrap_or_else(|| machine::cores().min(MAX_LOCAL_RANKS));
        // before anything is made per rank
        limits::ranks(nranks, MAX_LOCAL_RANKS)?;
        let funcs = parse_funcs(&self.collective)?;
        let dtypes = if self.dtype.eq_ignore_ascii_case("all") {
            DataType::ALL.to_vec()
        } else {
            vec![DataType::parse(&self.dtype).ok_or_else(|| format!("unknown datatype `{}`: expected float, half, bfloat16, double, int8, uint8, int32, uint32, int64, uint64, f8e4m3, f8e5m2 or all", self.dtype))?]
        };
        let ops = parse_ops(&self.redop)?;
        let premul = ops.iter().any(|o| matches!(o, RedOp::PreMulSum(_)));
        if let Some(dt) = dtypes.iter().find(|d| premul && !d.is_float()) {
            return Err(format!(
                "-o {}: premulsum rows are checked for floating-point types (half, float, double, bfloat16, f8e4m3, f8e5m2), not {}",
                self.redop,
                dt.name()
            ));
        }
        let root = if self.root.eq_ignore_ascii_case("all") {
            None
        } else {
            Some(
                self.root
                    .parse()
                    .map_err(|_| format!("-r takes a rank or all, not `{}`", self.root))?,
            )
        };
        let opts = Options {
            funcs,
            nranks,
            min_bytes: self.min_bytes,
            max_bytes: self.max_bytes,
            factor: self.factor,
            dtypes,
            ops,
            root,
            iters: self.iters,
            warmup: self.warmup,
            check: self.check,
            fill: self.fill,
            pin: !self.no_pin,
            engine: self.engine,
        };
        opts.check()?;
        Ok(opts)
    }
}

/// Runs the command: exit 0 when every checked element was right, 1 when
/// any was wrong or the arguments were (or the sweep needs more memory
/// than there is), 2 when the engine refused a call.
pub fn run(mut args: Args) -> ExitCode {
    use rankwise::launch::mpirun;
    let wanted = args
        .ranks
        .unwrap_or_else(|| machine::cores().min(MAX_LOCAL_RANKS));
    if let Some(code) = mpirun::relaunch("bench", args.engine, wanted) {
        return code;
    }
    // under mpirun (mpi engine) this process is one rank; rank 0 reports
    let Some(job) = mpirun::rank_of_job(args.engine) else {
        return ExitCode::from(sweep(&args, 0, false));
    };
    let (rank, size) = match job {
        Ok(j) => j,
        Err(e) => return fail("bench", e),
    };
    if args.ranks.is_some_and(|r| r != size) {
        if rank == 0 {
            let _ = fail(
                "bench",
                format!(
                    "--ranks {wanted}, but mpirun started {size} process(es): each rank is one process (drop --ranks, or mpirun -n {wanted})"
                ),
            );
        }
        return mpirun::end_with_rank0(rank, 1);
    }
    args.ranks = Some(size);
    let code = sweep(&args, rank, true);
    mpirun::end_with_rank0(rank, code)
}

/// The command on this process: the whole sweep (rank 0 of an MPI job, or
/// every rank's threads) with its output, or, on another rank of an MPI
/// job, that rank's part without output. Returns the exit code.
fn sweep(args: &Args, rank: usize, mpi: bool) -> u8 {
    let speak = rank == 0;
    let fail = |cmd: &str, e: String| {
        if speak {
            eprintln!("rankwise {cmd}: {e}");
        }
        1
    };
    let opts = match args.options() {
        Ok(o) => o,
        Err(e) => return fail("bench", e),
    };
    if !mpi && let Err(why) = opts.engine.available() {
        return fail(
            "bench",
            format!("the {} engine cannot run here: {why}", opts.engine),
        );
    }
    // what the sweep needs, before the probe or a rank allocates anything
    let plans = run::plan(&opts);
    let avail = machine::available_memory();
    if let Err(why) = &avail.machine
        && speak
    {
        eprintln!(
            "rankwise bench: {why}: assuming {} of memory is available",
            Bytes(ASSUMED_AVAILABLE)
        );
    }
    if let Err(e) = run::fits(&opts, &plans, &avail) {
        return fail("bench", e);
    }
    // the other ranks of an MPI job keep out of rank 0's probe
    let machine = if speak {
        Machine::probe(3)
    } else {
        Machine::unprobed()
    };
    // the others wait for the probe here, asleep (MPI's own waits spin)
    if mpi && let Err(e) = rankwise::launch::mpirun::share(&[]) {
        return fail("bench", e);
    }
    let out = std::io::stdout();
    let table = !args.json && speak;
    if table {
        let _ = write!(out.lock(), "{}", table::header(&opts, &machine));
        for f in &opts.funcs {
            for dt in &opts.dtypes {
                let skipped = run::skipped(&opts, *f, *dt);
                if !skipped.is_empty() {
                    let _ = writeln!(
                        out.lock(),
                        "# {f} {dt}: sizes below one element per rank left out: {skipped:?}"
                    );
                }
            }
        }
    }
    let bar = if speak && std::io::stderr().is_terminal() {
        let b =
            ProgressBar::with_draw_target(Some(plans.len() as u64), ProgressDrawTarget::stderr());
        if let Ok(style) = ProgressStyle::with_template("{bar:40} {pos}/{len} rows {elapsed} {msg}")
        {
            b.set_style(style);
        }
        b
    } else {
        ProgressBar::hidden()
    };
    let last = std::sync::Mutex::new(None);
    let on_row = |r: &crate::bench::Row| {
        if table {
            let mut last = last.lock().unwrap_or_else(|p| p.into_inner());
            let mut text = String::new();
            if *last != Some(r.func) {
                text += &table::columns(r.func);
                *last = Some(r.func);
            }
            text += &table::row(r);
            bar.suspend(|| {
                let mut o = std::io::stdout().lock();
                let _ = writeln!(o, "{}", text.trim_end_matches('\n'));
                let _ = o.flush();
            });
        }
        bar.set_message(format!("{} {}B", r.func, r.size));
        bar.inc(1);
    };
    let rows = match run::run_checked(&opts, &plans, machine.copy_all(), &on_row) {
        Ok(rows) => rows,
        Err(e) => {
            bar.finish_and_clear();
            if speak {
                eprintln!("rankwise bench: {e}");
            }
            return 2;
        }
    };
    bar.finish_and_clear();
    if !speak {
        return 0;
    }
    let report = Report::new(opts, machine, rows);
    if table {
        let _ = write!(out.lock(), "{}", table::footer(&report));
    } else {
        match serde_json::to_string_pretty(&report) {
            Ok(j) => {
                let _ = writeln!(out.lock(), "{j}");
            }
            Err(e) => {
                eprintln!("rankwise bench: cannot write JSON: {e}");
                return 2;
            }
        }
    }
    if let Some(path) = &args.plot
        && let Err(e) = std::fs::write(path, plot::svg(&report))
    {
        eprintln!("rankwise bench: cannot write {}: {e}", path.display());
        return 2;
    }
    if report.all_right() {
        0
    } else {
        eprintln!(
            "rankwise bench: {} wrong elements",
            report.out_of_bounds.unwrap_or(0)
        );
        1
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cmd {
        #[command(flatten)]
        args: Args,
    }

    #[test]
    fn sizes_take_suffixes() {
        assert_eq!(parse_size("8"), Ok(8));
        assert_eq!(parse_size("64K"), Ok(65536));
        assert_eq!(parse_size("128M"), Ok(128 << 20));
        assert_eq!(parse_size("1G"), Ok(1 << 30));
        assert_eq!(parse_size("64KiB"), Ok(65536));
        assert!(parse_size("12Q").unwrap_err().contains("is not a size"));
        assert!(parse_size("-8").unwrap_err().contains("is not a size"));
        assert_eq!(parse_size("18446744073709551615"), Ok(18446744073709551615));
        for big in [
            "18446744073709551616",
            "99999999999999999999999",
            "17179869184G",
        ] {
            assert_eq!(
                parse_size(big).unwrap_err(),
                format!("`{big}` is too large: a size is at most 18446744073709551615 bytes")
            );
        }
    }

    fn refused(args: &[&str]) -> String {
        let argv = [&["x"], args].concat();
        Cmd::try_parse_from(argv)
            .unwrap()
            .args
            .options()
            .unwrap_err()
    }

    #[test]
    fn out_of_bounds_flags_are_refused_before_anything_runs() {
        let e = refused(&["allreduce", "--ranks", "18446744073709551615"]);
        assert!(e.contains("at most 256: one thread per rank"), "{e}");
        assert!(refused(&["allreduce", "--ranks", "0"]).contains("at least 1"));
        let e = refused(&["allreduce", "-b", "0", "-e", "0"]);
        assert!(e.contains("start at 1"), "{e}");
        let e = refused(&["allreduce", "-f", "1.0000000001"]);
        assert!(e.contains("a sweep has at most 512"), "{e}");
        let e = refused(&["allreduce", "-n", "0"]);
        assert_eq!(e, "-n must be at least 1, not 0");
        let e = refused(&["allreduce", "-c", "18446744073709551615"]);
        assert!(e.contains("at most 100000"), "{e}");
        // 4 bytes of int8 on 8 ranks is less than one element per rank
        let e = refused(&[
            "reduce_scatter",
            "--ranks",
            "8",
            "-b",
            "1",
            "-e",
            "4",
            "-d",
            "int8",
        ]);
        assert!(
            e.contains("ReduceScatter of int8 on 8 ranks needs at least 8 bytes"),
            "{e}"
        );
        let e = refused(&[
            "all", "--ranks", "256", "-r", "all", "-d", "all", "-o", "all",
        ]);
        assert!(e.contains("at most 100000 are run at once"), "{e}");
    }

    #[test]
    fn premulsum_takes_its_scalar_and_float_types_only() {
        let c =
            Cmd::try_parse_from(["x", "allreduce", "-o", "premulsum:0.3", "-d", "half"]).unwrap();
        assert_eq!(c.args.options().unwrap().ops, vec![RedOp::PreMulSum(0.3)]);
        let e = refused(&["allreduce", "-o", "premulsum:abc"]);
        assert!(
            e.contains("must be a finite number, as in premulsum:0.3"),
            "{e}"
        );
        let e = refused(&["allreduce", "-o", "premulsum:inf"]);
        assert!(e.contains("must be a finite number"), "{e}");
        let e = refused(&["allreduce", "-o", "premulsum:2", "-d", "int32"]);
        assert!(
            e.contains("floating-point types") && e.ends_with("not int32"),
            "{e}"
        );
        let e = refused(&["allreduce", "-o", "premulsum:2", "-d", "all"]);
        assert!(e.contains("not int8"), "{e}");
        let e = refused(&["allreduce", "-o", "mulsum"]);
        assert!(e.contains("premulsum:SCALAR"), "{e}");
    }

    #[test]
    fn flags_follow_nccl_tests() {
        let c = Cmd::try_parse_from([
            "x",
            "allreduce",
            "--ranks",
            "4",
            "-b",
            "8",
            "-e",
            "1M",
            "-f",
            "4",
            "-d",
            "all",
            "-o",
            "all",
            "-r",
            "all",
        ])
        .unwrap();
        let o = c.args.options().unwrap();
        assert_eq!(o.funcs, vec![Func::AllReduce]);
        assert_eq!(o.dtypes.len(), 12);
        assert_eq!(o.ops.len(), 5);
        assert_eq!(o.root, None);
        assert_eq!(
            o.sizes(),
            vec![8, 32, 128, 512, 2048, 8192, 32768, 131072, 524288]
        );
        let bad = Cmd::try_parse_from(["x", "broadcast", "--ranks", "4", "-r", "4"]).unwrap();
        assert_eq!(
            bad.args.options().unwrap_err(),
            "root 4 is out of range: valid roots are 0..=3"
        );
        assert!(
            Cmd::try_parse_from(["x", "send"])
                .unwrap()
                .args
                .options()
                .is_err()
        );
    }
}
