//! Generated multi-rank logs with one injected fault of each kind, at random
//! positions: the analyzer must name the kind, the rank(s) and the position.

use proptest::prelude::*;
use rankwise::logs::{
    Analysis, FindingKind, Options, Settings, Severity, analyze_with, collect, expand_paths,
};
use rankwise_testkit::synth::{Fault, FaultKind, Layout, Prefix, Rng, Spec, Style};
use std::io::Write;

#[derive(Clone, Copy, Debug)]
struct Case {
    kind: FaultKind,
    seed: u64,
    nranks: u32,
    steps: u64,
    layout: Layout,
    prefix: Prefix,
    init_lines: bool,
    rankwise_trace: bool,
    gzip: bool,
    segment_bytes: u64,
    threads: usize,
}

fn spec(c: &Case) -> Spec {
    Spec {
        nranks: c.nranks,
        steps: c.steps,
        seed: c.seed,
        p2p_percent: 30,
        period: None,
        style: Style {
            layout: c.layout,
            prefix: c.prefix,
            init_lines: c.init_lines,
            rankwise_trace: c.rankwise_trace,
            noise_percent: 40,
        },
    }
}

/// Write the generated files, read them back through the file reader, analyze.
fn run(c: &Case) -> Option<(Fault, Analysis, Spec)> {
    let s = spec(c);
    let fault = s.place(c.kind, &mut Rng::new(c.seed ^ 0x5eed))?;
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in s.render(fault) {
        if c.gzip {
            let f = std::fs::File::create(dir.path().join(format!("{name}.gz"))).unwrap();
            let mut gz = flate2::write::GzEncoder::new(f, flate2::Compression::fast());
            gz.write_all(&bytes).unwrap();
            gz.finish().unwrap();
        } else {
            std::fs::write(dir.path().join(name), bytes).unwrap();
        }
    }
    let files = expand_paths(&[dir.path().to_path_buf()]).unwrap();
    let collected = collect(
        &files,
        Options {
            threads: c.threads,
            segment_bytes: c.segment_bytes,
            ..Options::default()
        },
    )
    .unwrap();
    // a rank that stops (after a call NCCL rejected, or just so) leaves
    // nothing in its log to say the job hung: these are runs that hung
    let hung = matches!(c.kind, FaultKind::Stop | FaultKind::InvalidRoot);
    Some((fault, analyze_with(&collected, &Settings { hung }), s))
}

fn check(c: &Case) {
    let Some((fault, a, s)) = run(c) else {
        return; // no eligible position in this workload (e.g. no Send/Recv)
    };
    let e = s.expected(fault);
    let ctx = format!(
        "{c:?}\n{fault:?}\nverdict: {}\nfindings: {:#?}",
        a.verdict, a.findings
    );

    assert_eq!(a.communicators.len(), 1, "{ctx}");
    let comm = &a.communicators[0];
    assert_eq!(comm.ranks_seen, (0..c.nranks).collect::<Vec<_>>(), "{ctx}");
    assert!(comm.ranks_missing.is_empty(), "{ctx}");
    // opCount runs give each rank's launches: fused groups once, zero-count calls never
    let launches: Vec<u64> = comm.members.iter().map(|m| m.launches).collect();
    assert_eq!(launches, e.launches, "{ctx}");

    match e.kind {
        None => {
            assert_eq!(a.problems, 0, "{ctx}");
            assert!(a.verdict.starts_with("no divergence"), "{ctx}");
            if let Fault::ZeroCount { at } = fault {
                let z: Vec<_> = a
                    .findings
                    .iter()
                    .filter(|f| f.kind == FindingKind::ZeroCount)
                    .collect();
                assert_eq!(z.len(), 1, "{ctx}");
                assert_eq!(z[0].position, Some(at), "{ctx}");
                assert_eq!(z[0].ranks, (0..c.nranks).collect::<Vec<_>>(), "{ctx}");
            }
        }
        Some(kind) => {
            let head = &a.findings[0];
            assert_eq!(head.severity, Severity::Error, "{ctx}");
            assert_eq!(head.kind, kind, "{ctx}");
            assert_eq!(head.ranks, e.ranks, "{ctx}");
            assert_eq!(head.position, e.position, "{ctx}");
            assert_eq!(head.peer, e.peer, "{ctx}");
            let others: Vec<u32> = (0..c.nranks).filter(|r| !e.ranks.contains(r)).collect();
            if kind == FindingKind::Stopped || head.peer.is_none() {
                assert_eq!(head.other_ranks, others, "{ctx}");
            }
            // the verdict is the headline finding
            let pos = e.position.unwrap();
            assert!(
                a.verdict.contains(&format!("#{pos} "))
                    || a.verdict.contains(&format!("#{pos}\u{20}")),
                "{ctx}"
            );
            let label = match kind {
                FindingKind::Stopped => "hang: ",
                FindingKind::Skipped
                | FindingKind::Extra
                | FindingKind::Reordered
                | FindingKind::UnmatchedSend
                | FindingKind::UnmatchedRecv => "likely hang: ",
                _ => "contract mismatch: ",
            };
            assert!(a.verdict.starts_with(label), "{ctx}");
            let div = comm.divergence.as_ref();
            if head.peer.is_none() {
                assert_eq!(div.map(|d| d.position), e.position, "{ctx}");
            } else {
                assert!(div.is_none(), "{ctx}");
            }
            if let Fault::InvalidRoot { rank, .. } = fault {
                let w: Vec<_> = a
                    .findings
                    .iter()
                    .filter(|f| f.kind == FindingKind::InvalidRoot)
                    .collect();
                assert_eq!(w.len(), 1, "{ctx}");
                assert_eq!(w[0].ranks, vec![rank], "{ctx}");
                assert!(a.verdict.contains("invalid root"), "{ctx}");
            }
        }
    }
}

fn base(kind: FaultKind, seed: u64) -> Case {
    Case {
        kind,
        seed,
        nranks: 4,
        steps: 80,
        layout: Layout::PerRank,
        prefix: Prefix::None,
        init_lines: true,
        rankwise_trace: false,
        gzip: false,
        segment_bytes: 64 << 20,
        threads: 0,
    }
}

#[test]
fn every_fault_kind_is_named() {
    for kind in FaultKind::ALL {
        for seed in 1..=6 {
            check(&base(kind, seed));
        }
    }
}

#[test]
fn interleaved_gzip_and_split_segments() {
    for (i, kind) in FaultKind::ALL.into_iter().enumerate() {
        let mut c = base(kind, 100 + i as u64);
        c.layout = Layout::Interleaved;
        c.prefix = Prefix::Timestamp;
        c.nranks = 6;
        c.segment_bytes = 1500;
        c.threads = 2;
        check(&c);
        c.gzip = true;
        c.segment_bytes = 64 << 20;
        check(&c);
    }
}

#[test]
fn without_init_lines_ranks_come_from_prefixes() {
    for (i, kind) in FaultKind::ALL.into_iter().enumerate() {
        let mut c = base(kind, 200 + i as u64);
        c.init_lines = false;
        c.prefix = Prefix::Torchrun;
        c.nranks = 7;
        check(&c);
        c.prefix = Prefix::Mpirun;
        c.layout = Layout::Interleaved;
        check(&c);
        // rankwise's trace without init lines: one process, the device
        // number in `[..]`, no rank anywhere. The collective order is still
        // checked (members named by process, in device order); Send/Recv
        // cannot be, as a peer number names no one.
        c.prefix = Prefix::None;
        c.rankwise_trace = true;
        if matches!(
            kind,
            FaultKind::UnmatchedSend | FaultKind::UnmatchedRecv | FaultKind::P2pCount
        ) {
            let (_, a, _) = run(&c).unwrap();
            assert_eq!(a.problems, 0, "{kind:?}: {}", a.verdict);
            assert!(
                a.findings
                    .iter()
                    .any(|f| f.kind == FindingKind::Unaligned && f.message.contains("names no one")),
                "{kind:?}: {:#?}",
                a.findings
            );
        } else {
            check(&c);
        }
    }
}

fn kinds() -> impl Strategy<Value = FaultKind> {
    proptest::sample::select(FaultKind::ALL.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn random_workloads_random_faults(
        kind in kinds(),
        seed in any::<u64>(),
        nranks in 3u32..9,
        steps in 10u64..150,
        interleaved in any::<bool>(),
        prefix in 0u8..4,
        gzip in any::<bool>(),
        small_segments in any::<bool>(),
    ) {
        let c = Case {
            kind,
            seed,
            nranks,
            steps,
            layout: if interleaved { Layout::Interleaved } else { Layout::PerRank },
            prefix: [Prefix::None, Prefix::Timestamp, Prefix::Torchrun, Prefix::Mpirun][prefix as usize],
            init_lines: true,
            rankwise_trace: false,
            gzip,
            segment_bytes: if small_segments { 4096 } else { 64 << 20 },
            threads: 2,
        };
        check(&c);
    }
}
