//! Write a synthetic multi-rank NCCL log, optionally with one injected fault.
//!
//!     cargo run --release --example logs_gen -- DIR [--ranks N] [--steps N] [--seed N]
//!         [--period STEPS] [--fault none|stop|op|count|datatype|redop|root|unmatched-send|unmatched-recv|p2p-count|invalid-root|zero-count|skip|skip-several|extra|swap]
//!         [--interleaved] [--prefix none|timestamp|torchrun|mpirun] [--no-init] [--rankwise] [--noise PERCENT] [--gzip]
//!
//! Prints the fault placed and what an analyzer must report about it.

use rankwise_testkit::synth::{FaultKind, Layout, Prefix, Rng, Spec, Style};
use std::io::Write;

fn main() {
    let mut args = std::env::args().skip(1);
    let dir = std::path::PathBuf::from(args.next().expect("usage: logs_gen DIR [options]"));
    let mut spec = Spec {
        nranks: 8,
        steps: 200,
        seed: 1,
        p2p_percent: 25,
        period: None,
        style: Style::default(),
    };
    let mut kind = FaultKind::None;
    let mut gzip = false;
    while let Some(a) = args.next() {
        let mut val = || args.next().expect("option needs a value");
        match a.as_str() {
            "--ranks" => spec.nranks = val().parse().unwrap(),
            "--steps" => spec.steps = val().parse().unwrap(),
            "--seed" => spec.seed = val().parse().unwrap(),
            "--p2p" => spec.p2p_percent = val().parse().unwrap(),
            "--period" => spec.period = Some(val().parse().unwrap()),
            "--noise" => spec.style.noise_percent = val().parse().unwrap(),
            "--interleaved" => spec.style.layout = Layout::Interleaved,
            "--no-init" => spec.style.init_lines = false,
            "--rankwise" => spec.style.rankwise_trace = true,
            "--gzip" => gzip = true,
            "--prefix" => {
                spec.style.prefix = match val().as_str() {
                    "none" => Prefix::None,
                    "timestamp" => Prefix::Timestamp,
                    "torchrun" => Prefix::Torchrun,
                    "mpirun" => Prefix::Mpirun,
                    p => panic!("unknown prefix {p}"),
                }
            }
            "--fault" => {
                kind = match val().as_str() {
                    "none" => FaultKind::None,
                    "stop" => FaultKind::Stop,
                    "op" => FaultKind::OpKind,
                    "count" => FaultKind::Count,
                    "datatype" => FaultKind::Datatype,
                    "redop" => FaultKind::Redop,
                    "root" => FaultKind::Root,
                    "unmatched-send" => FaultKind::UnmatchedSend,
                    "unmatched-recv" => FaultKind::UnmatchedRecv,
                    "p2p-count" => FaultKind::P2pCount,
                    "invalid-root" => FaultKind::InvalidRoot,
                    "zero-count" => FaultKind::ZeroCount,
                    "skip" => FaultKind::Skip,
                    "skip-several" => FaultKind::SkipSeveral,
                    "extra" => FaultKind::Extra,
                    "swap" => FaultKind::Swap,
                    f => panic!("unknown fault {f}"),
                }
            }
            o => panic!("unknown option {o}"),
        }
    }
    let fault = spec
        .place(kind, &mut Rng::new(spec.seed ^ 0xfa17))
        .expect("no eligible position for this fault in this workload");
    std::fs::create_dir_all(&dir).unwrap();
    let mut open: Vec<(String, Box<dyn Write>)> = Vec::new();
    spec.render_to(fault, |name, bytes| {
        let i = match open.iter().position(|(n, _)| n == name) {
            Some(i) => i,
            None => {
                let path = dir.join(if gzip {
                    format!("{name}.gz")
                } else {
                    name.to_string()
                });
                let f = std::io::BufWriter::with_capacity(
                    1 << 20,
                    std::fs::File::create(path).unwrap(),
                );
                let w: Box<dyn Write> = if gzip {
                    Box::new(flate2::write::GzEncoder::new(
                        f,
                        flate2::Compression::fast(),
                    ))
                } else {
                    Box::new(f)
                };
                open.push((name.to_string(), w));
                open.len() - 1
            }
        };
        open[i].1.write_all(bytes).unwrap();
    });
    for (_, mut w) in open {
        w.flush().unwrap();
    }
    println!("fault: {fault:?}");
    let e = spec.expected(fault);
    println!(
        "expected: kind {:?} ranks {:?} peer {:?} position {:?}",
        e.kind, e.ranks, e.peer, e.position
    );
}
