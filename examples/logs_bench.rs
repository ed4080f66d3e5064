//! Speed and memory of `rankwise logs analyze` on a generated gigabyte.
//!
//!     cargo run --release --example logs_bench -- [--dir DIR] [--bytes N]
//!         [--ranks N] [--interleaved] [--period STEPS] [--threads N]
//!         [--fault skip|extra|swap|count|stop]
//!
//! Generates the log into DIR (default /tmp/rankwise-logs-bench) unless it is
//! already there, then times reading + parsing and the analysis separately
//! and prints the peak resident memory. `--period` repeats the workload every
//! STEPS steps, as a training loop does (fewer distinct calls); without it
//! every collective draws a fresh count. `--fault` injects one fault at a
//! random place (the analysis then has a divergence to tell).

use rankwise::logs::{Options, analyze, collect, expand_paths};
use rankwise_testkit::synth::{Fault, FaultKind, Layout, Rng, Spec, Style};
use std::io::Write;
use std::time::Instant;

/// CPU seconds (user + system) this process has used, from /proc/self/stat.
fn own_cpu_s() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    let after = stat.rsplit(')').next().unwrap_or_default();
    let f: Vec<f64> = after
        .split_whitespace()
        .filter_map(|x| x.parse().ok())
        .collect();
    // fields after the command name: state is not numeric, so utime and stime
    // are the 12th and 13th numbers
    f.get(10)
        .zip(f.get(11))
        .map_or(f64::NAN, |(u, s)| (u + s) / 100.0)
}

fn peak_rss_mib() -> Option<f64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmHWM:"))?;
    let kib: f64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib / 1024.0)
}

fn main() {
    let mut args = std::env::args().skip(1);
    let mut dir = std::path::PathBuf::from("/tmp/rankwise-logs-bench");
    let mut bytes: u64 = 1_000_000_000;
    let mut spec = Spec {
        nranks: 8,
        steps: 0,
        seed: 42,
        p2p_percent: 25,
        period: None,
        style: Style {
            noise_percent: 300,
            ..Style::default()
        },
    };
    let mut threads = 0;
    let mut period = None;
    let mut fault_kind = FaultKind::None;
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("option needs a value");
        match a.as_str() {
            "--dir" => dir = val().into(),
            "--bytes" => bytes = val().parse().unwrap(),
            "--ranks" => spec.nranks = val().parse().unwrap(),
            "--interleaved" => spec.style.layout = Layout::Interleaved,
            "--period" => period = Some(val().parse::<u64>().unwrap()),
            "--threads" => threads = val().parse().unwrap(),
            "--fault" => {
                fault_kind = match val().as_str() {
                    "skip" => FaultKind::Skip,
                    "extra" => FaultKind::Extra,
                    "swap" => FaultKind::Swap,
                    "count" => FaultKind::Count,
                    "stop" => FaultKind::Stop,
                    f => panic!("unknown fault {f}"),
                }
            }
            o => panic!("unknown option {o}"),
        }
    }
    spec.period = period;
    if !dir.exists() {
        // size one step from a sample, then scale to the target
        let mut sample = spec.clone();
        sample.steps = 2000;
        let sample_bytes: usize = sample.render(Fault::None).iter().map(|f| f.1.len()).sum();
        spec.steps = bytes * 2000 / sample_bytes as u64;
        let fault = spec
            .place(fault_kind, &mut Rng::new(spec.seed ^ 0xbe7c))
            .expect("no place for the fault");
        std::fs::create_dir_all(&dir).unwrap();
        let t = Instant::now();
        let mut files: Vec<(String, std::io::BufWriter<std::fs::File>)> = Vec::new();
        spec.render_to(fault, |name, chunk| {
            let i = match files.iter().position(|(n, _)| n == name) {
                Some(i) => i,
                None => {
                    let f = std::fs::File::create(dir.join(name)).unwrap();
                    files.push((
                        name.to_string(),
                        std::io::BufWriter::with_capacity(1 << 20, f),
                    ));
                    files.len() - 1
                }
            };
            files[i].1.write_all(chunk).unwrap();
        });
        for (_, mut f) in files {
            f.flush().unwrap();
        }
        eprintln!(
            "generated {} steps into {} in {:.1} s, fault {fault:?}",
            spec.steps,
            dir.display(),
            t.elapsed().as_secs_f64()
        );
    }

    let files = expand_paths(std::slice::from_ref(&dir)).unwrap();
    let total: u64 = files
        .iter()
        .map(|f| std::fs::metadata(f).unwrap().len())
        .sum();
    let (busy0, own0) = (
        rankwise::machine::busy_seconds().unwrap_or(f64::NAN),
        own_cpu_s(),
    );
    let t0 = Instant::now();
    let collected = collect(
        &files,
        Options {
            threads,
            ..Options::default()
        },
    )
    .unwrap();
    let t_read = t0.elapsed().as_secs_f64();
    let t1 = Instant::now();
    let a = analyze(&collected);
    let t_analyze = t1.elapsed().as_secs_f64();
    let total_s = t0.elapsed().as_secs_f64();
    let own = own_cpu_s() - own0;
    let others = rankwise::machine::busy_seconds().unwrap_or(f64::NAN) - busy0 - own;
    println!("{}", a.verdict);
    println!(
        "{} files, {:.3} GB, {} lines, {} calls, {} distinct call signatures",
        files.len(),
        total as f64 / 1e9,
        collected.counts.lines,
        collected.counts.calls,
        collected.sigs.len()
    );
    println!(
        "read+parse {t_read:.2} s, analyze {t_analyze:.2} s, total {total_s:.2} s ({:.0} MB/s, {:.1} M lines/s), peak RSS {:.0} MiB",
        total as f64 / 1e6 / total_s,
        collected.counts.lines as f64 / 1e6 / total_s,
        peak_rss_mib().unwrap_or(f64::NAN)
    );
    println!(
        "CPU: this process {own:.2} s, other processes during the run {others:.2} s{}",
        if others > 0.25 * total_s {
            " (contended: the machine was busy with other work)"
        } else {
            ""
        }
    );
}
