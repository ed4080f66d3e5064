//! The first divergence told as what happened: a rank that skipped calls
//! and went on, made an extra call, made two calls in the other order,
//! made a call with other arguments, or stopped. Generated logs with one
//! such fault, on 2, 3, 4 and 8 ranks, the faulty rank and the position
//! drawn at random: the report's first line must name the class, the
//! rank(s) and the call.

use proptest::prelude::*;
use rankwise::logs::report::analysis_text;
use rankwise::logs::{
    Analysis, FindingKind, Options, Settings, Severity, analyze_with, collect, expand_paths,
};
use rankwise_testkit::synth::{Fault, FaultKind, Layout, Prefix, Rng, Spec, Style};

/// The classes, with the fault kind that makes each.
const CLASSES: [FaultKind; 6] = [
    FaultKind::Skip,
    FaultKind::SkipSeveral,
    FaultKind::Extra,
    FaultKind::Swap,
    FaultKind::Count,
    FaultKind::Stop,
];

fn spec(nranks: u32, steps: u64, seed: u64, layout: Layout) -> Spec {
    Spec {
        nranks,
        steps,
        seed,
        p2p_percent: 25,
        period: None,
        style: Style {
            layout,
            prefix: Prefix::None,
            init_lines: true,
            rankwise_trace: false,
            noise_percent: 30,
        },
    }
}

/// Generate, write, read back and analyze; `None` when the workload has
/// no place for the fault.
fn run(kind: FaultKind, s: &Spec) -> Option<(Fault, Analysis)> {
    let fault = s.place(kind, &mut Rng::new(s.seed ^ 0xa11))?;
    let dir = tempfile::tempdir().unwrap();
    for (name, bytes) in s.render(fault) {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    let files = expand_paths(&[dir.path().to_path_buf()]).unwrap();
    let c = collect(&files, Options::default()).unwrap();
    // a rank that stops leaves nothing in its log to say so: the job hung
    let hung = kind == FaultKind::Stop;
    Some((fault, analyze_with(&c, &Settings { hung })))
}

/// `rank 3`, as the report names one rank.
fn rank(r: u32) -> String {
    format!("rank {r}")
}

fn check(kind: FaultKind, s: &Spec) {
    let Some((fault, a)) = run(kind, s) else {
        return;
    };
    let e = s.expected(fault);
    let first = analysis_text(&a)
        .lines()
        .next()
        .unwrap_or_default()
        .to_string();
    let ctx = format!(
        "{kind:?} on {} ranks, seed {}, steps {}\n{fault:?}\n{e:?}\nfirst line: {first}\nfindings: {:#?}",
        s.nranks, s.seed, s.steps, a.findings
    );
    assert_eq!(first, a.verdict, "{ctx}");
    let head = &a.findings[0];
    assert_eq!(head.severity, Severity::Error, "{ctx}");
    assert_eq!(Some(head.kind), e.kind, "{ctx}");
    assert_eq!(head.position, e.position, "{ctx}");
    let pos = e.position.unwrap();
    let two = s.nranks == 2;
    match head.kind {
        FindingKind::Skipped => {
            let r = e.ranks[0];
            assert_eq!(head.ranks, e.ranks, "{ctx}");
            assert!(
                first.starts_with(&format!("likely hang: {} skipped ", rank(r))),
                "{ctx}"
            );
            assert!(first.contains(e.call.as_deref().unwrap()), "{ctx}");
            let calls = match fault {
                Fault::Skip { calls, .. } => calls,
                _ => 1,
            };
            // the realignment: its calls from #p on are the others' from #p+d on
            assert!(
                first.contains(&format!(" calls from #{pos} on match ")),
                "{ctx}"
            );
            assert!(
                first.contains(&format!(" from #{} on", pos + calls)),
                "{ctx}"
            );
            if calls > 1 {
                assert!(first.contains(&format!("skipped {calls} calls (")), "{ctx}");
            }
            if two {
                // one rank's skipped call is the other's extra call: both are said
                let other = 1 - r;
                assert!(
                    first.contains(&format!("or {} made ", rank(other))),
                    "{ctx}"
                );
            }
        }
        FindingKind::Extra => {
            assert_eq!(head.ranks, e.ranks, "{ctx}");
            assert!(
                first.starts_with(&format!(
                    "likely hang: {} made an extra call {} (count 123456789 float32 sum",
                    rank(e.ranks[0]),
                    e.call.as_deref().unwrap()
                )),
                "{ctx}"
            );
            assert!(
                first.contains(&format!(
                    " calls from #{} on match the others' from #{pos} on",
                    pos + 1
                )),
                "{ctx}"
            );
        }
        FindingKind::Reordered => {
            let call = e.call.as_deref().unwrap();
            if two {
                // neither rank is the odd one out: both are named
                assert!(
                    first.starts_with("likely hang: rank 1 and rank 0 made ")
                        || first.starts_with("likely hang: rank 0 and rank 1 made "),
                    "{ctx}"
                );
                assert!(first.contains(" in different orders: "), "{ctx}");
            } else {
                assert_eq!(head.ranks, e.ranks, "{ctx}");
                assert!(
                    first.starts_with(&format!(
                        "likely hang: {} made {call} and ",
                        rank(e.ranks[0])
                    )),
                    "{ctx}"
                );
                assert!(first.contains(" in a different order: "), "{ctx}");
            }
            assert!(
                first.contains(&format!("from #{} on ", pos + 2)) && first.contains(" again"),
                "{ctx}"
            );
        }
        FindingKind::CountMismatch => {
            assert!(first.starts_with("contract mismatch: "), "{ctx}");
            assert!(first.contains(e.call.as_deref().unwrap()), "{ctx}");
            if two {
                // with two ranks the odd one is a guess: both are named
                let mut both = head.ranks.clone();
                both.extend(&head.other_ranks);
                both.sort_unstable();
                assert_eq!(both, [0, 1], "{ctx}");
                assert!(
                    first.contains("rank 0 ") && first.contains("rank 1 "),
                    "{ctx}"
                );
            } else {
                assert_eq!(head.ranks, e.ranks, "{ctx}");
                assert!(
                    first.starts_with(&format!(
                        "contract mismatch: {} has count ",
                        rank(e.ranks[0])
                    )),
                    "{ctx}"
                );
            }
        }
        FindingKind::Stopped => {
            assert_eq!(head.ranks, e.ranks, "{ctx}");
            assert!(
                first.starts_with(&format!(
                    "hang: {} never issued {} ",
                    rank(e.ranks[0]),
                    e.call.as_deref().unwrap()
                )),
                "{ctx}"
            );
        }
        other => panic!("unexpected headline {other:?}\n{ctx}"),
    }
    // the report's divergence agrees with the headline
    let d = a.communicators[0].divergence.as_ref().expect(&ctx);
    assert_eq!((d.position, d.kind), (pos, head.kind), "{ctx}");
}

#[test]
fn every_class_on_2_3_4_and_8_ranks() {
    for kind in CLASSES {
        for nranks in [2, 3, 4, 8] {
            for seed in 1..=4 {
                check(
                    kind,
                    &spec(nranks, 60, seed * 7 + u64::from(nranks), Layout::PerRank),
                );
            }
        }
    }
}

#[test]
fn a_skip_in_one_interleaved_file() {
    for nranks in [2, 3, 8] {
        check(
            FaultKind::Skip,
            &spec(nranks, 80, 40 + u64::from(nranks), Layout::Interleaved),
        );
    }
}

fn classes() -> impl Strategy<Value = FaultKind> {
    proptest::sample::select(CLASSES.to_vec())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn random_class_rank_and_position(
        kind in classes(),
        nranks in proptest::sample::select(vec![2u32, 3, 4, 8]),
        seed in any::<u64>(),
        steps in 12u64..160,
        interleaved in any::<bool>(),
    ) {
        let layout = if interleaved { Layout::Interleaved } else { Layout::PerRank };
        check(kind, &spec(nranks, steps, seed, layout));
    }
}
