//! nccl-tests' text table: `#` header lines, one line per row, the two
//! closing lines (`Out of bounds values`, `Avg bus bandwidth`).

use super::{Machine, Measure, Options, Report, Row};
use rankwise::core::Func;

const GB: f64 = 1e9;

/// The lines before the table: what runs, the machine, what the columns mean.
pub fn header(opts: &Options, m: &Machine) -> String {
    let names: Vec<&str> = opts.funcs.iter().map(|f| f.name()).collect();
    let mut s = String::new();
    s += &format!(
        "# rankwise bench {} | engine {} | {} ranks ({})\n",
        names.join(","),
        opts.engine.describe(),
        opts.nranks,
        if opts.engine == rankwise::launch::EngineKind::Mpi {
            "processes of an MPI job"
        } else {
            "threads of one process"
        }
    );
    s += &format!(
        "# machine: {} cores | copy bandwidth 1 thread {:.2} GB/s, {} threads {:.2} GB/s (memcpy {:.2} / {:.2}, streaming {:.2} / {:.2})\n",
        m.cores,
        m.copy_1() / GB,
        m.cores,
        m.copy_all() / GB,
        m.memcpy_1 / GB,
        m.memcpy_all / GB,
        m.stream_1 / GB,
        m.stream_all / GB
    );
    let pinned = if opts.engine == rankwise::launch::EngineKind::Mpi {
        "processes placed by mpirun"
    } else if opts.pin && opts.nranks <= m.cores {
        "rank r pinned to core r"
    } else {
        "threads not pinned"
    };
    s += &format!(
        "# sweep: {} to {} bytes x{} | -n {} timed, -w {} warmup, -c {} checked calls per row and placement | {pinned}\n",
        opts.min_bytes, opts.max_bytes, opts.factor, opts.iters, opts.warmup, opts.check
    );
    s += "# time: median over timed calls of the slowest rank (us); algbw = size/time, busbw = algbw x bus factor (GB/s)\n";
    s += "# %bound: the traffic bound's time / time: bytes every rank must read and write, at the all-threads copy bandwidth\n";
    if !super::bound::applies(opts.engine) {
        s += "#         (N/A on the nccl engine: its buffers are in GPU memory, which this machine's copy bandwidth does not bound)\n";
    } else if opts.engine == rankwise::launch::EngineKind::Mpi {
        s += "#         (the bandwidth measured before the sweep, for every row)\n";
    } else {
        s += "#         (rows whose buffers are at least twice the last-level cache: the median of copies made between their timed calls)\n";
    }
    if opts.fill == super::Fill::Random {
        s += "# data: the timed calls reduce random values (--fill random); the checked calls, the pattern\n";
    }
    if opts.check == 0 {
        s += "# WARNING: checking is disabled (-c 0): #wrong shows N/A and nothing was verified\n";
    }
    s
}

/// The column headings of one collective's block.
pub fn columns(func: Func) -> String {
    let b = "  %bound";
    let e = "        ";
    let ip = if func == Func::AlltoAll {
        "in-place (none for AlltoAll)"
    } else {
        "in-place"
    };
    // a row is 52 characters of description, then two groups of 45
    let gw = 45;
    format!(
        "#\n# {}\n#{:51}{:^gw$}{:^gw$}\n#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}{b}  {:>9}  {:>7}  {:>7}  {:>6}{b}\n#{:>11}  {:>12}  {:>8}  {:>6}  {:>6}  {:>9}  {:>7}  {:>7}  {:>6}{e}  {:>9}  {:>7}  {:>7}  {:>6}{e}\n",
        func.name(),
        "",
        "out-of-place",
        ip,
        "size",
        "count",
        "type",
        "redop",
        "root",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "time",
        "algbw",
        "busbw",
        "#wrong",
        "(B)",
        "(elements)",
        "",
        "",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        "",
        "(us)",
        "(GB/s)",
        "(GB/s)",
        ""
    )
}

fn placement(m: Option<&Measure>) -> String {
    let Some(m) = m else {
        let b = format!("  {:>6}", "N/A");
        return format!(
            "  {:>9}  {:>7}  {:>7}  {:>6}{b}",
            "N/A", "N/A", "N/A", "N/A"
        );
    };
    let wrong = m
        .wrong
        .map(|w| w.to_string())
        .unwrap_or_else(|| "N/A".into());
    let time = if m.time_us >= 1e5 {
        format!("{:.0}", m.time_us)
    } else {
        format!("{:.2}", m.time_us)
    };
    let b = match m.of_bound() {
        Some(f) => format!("  {:>5.1}%", 100.0 * f),
        None => format!("  {:>6}", "N/A"),
    };
    format!(
        "  {time:>9}  {:>7.2}  {:>7.2}  {wrong:>6}{b}",
        m.algbw, m.busbw
    )
}

/// One table line.
pub fn row(r: &Row) -> String {
    let redop = r.op.map(|o| o.name()).unwrap_or("none");
    let root = r.root.map(|x| x as i64).unwrap_or(-1);
    format!(
        " {:>11}  {:>12}  {:>8}  {:>6}  {:>6}{}{}",
        r.size,
        r.count,
        r.dtype.name(),
        redop,
        root,
        placement(Some(&r.oop)),
        placement(r.ip.as_ref())
    )
}

/// The closing lines.
pub fn footer(rep: &Report) -> String {
    let oob = match rep.out_of_bounds {
        Some(0) => "0 OK".to_string(),
        Some(n) => format!("{n} FAILED"),
        None => "N/A (not checked: -c 0)".to_string(),
    };
    format!(
        "# Out of bounds values : {oob}\n# Avg bus bandwidth    : {:.4}\n#\n",
        rep.avg_busbw
    )
}

/// The whole table as one string (what the command prints without a terminal).
pub fn render(rep: &Report) -> String {
    let mut s = header(&rep.options, &rep.machine);
    let mut last = None;
    for r in &rep.rows {
        if last != Some(r.func) {
            s += &columns(r.func);
            last = Some(r.func);
        }
        s += &row(r);
        s.push('\n');
    }
    s + &footer(rep)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn measure(bound_us: Option<f64>) -> Measure {
        Measure {
            time_us: 200.0,
            mean_us: 210.0,
            min_us: 190.0,
            algbw: 1.0,
            busbw: 1.0,
            wrong: Some(0),
            bound_us,
            copy_bw_gbs: 20.0,
        }
    }

    #[test]
    fn a_placement_shows_the_bound_it_has_and_n_a_without_one() {
        // 150 us of 200: 75%
        let with = placement(Some(&measure(Some(150.0))));
        assert!(with.ends_with("  75.0%"), "{with:?}");
        let without = placement(Some(&measure(None)));
        assert!(without.ends_with("     N/A"), "{without:?}");
        // the same width, so the columns stay aligned
        assert_eq!(with.len(), without.len());
    }

    #[test]
    fn the_header_says_why_the_nccl_engine_has_no_bound() {
        let machine = Machine {
            cores: 2,
            memcpy_1: 1e10,
            memcpy_all: 2e10,
            stream_1: 1e10,
            stream_all: 2e10,
        };
        let mut opts = Options {
            funcs: vec![Func::AllReduce],
            nranks: 1,
            min_bytes: 8,
            max_bytes: 8,
            factor: 2.0,
            dtypes: vec![rankwise::core::DataType::Float32],
            ops: vec![rankwise::core::RedOp::Sum],
            root: None,
            iters: 1,
            warmup: 0,
            check: 1,
            fill: super::super::Fill::Pattern,
            pin: false,
            engine: rankwise::launch::EngineKind::Nccl,
        };
        let why = "N/A on the nccl engine";
        assert!(header(&opts, &machine).contains(why));
        opts.engine = rankwise::launch::EngineKind::Local;
        assert!(!header(&opts, &machine).contains(why));
    }
}
