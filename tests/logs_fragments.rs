//! Zero false alarms: random healthy multi-rank logs, each rank's log cut
//! at its own random start and end (a paste, a log copied while the job
//! ran), must raise no error and claim no hang. With `--hung` the same
//! fragments may be read as a hang, but only as ranks that stopped.

use proptest::prelude::*;
use rankwise::logs::{FindingKind, Settings, Severity, analyze_with, collect_bytes};
use rankwise_testkit::synth::{Fault, Layout, Prefix, Spec, Style};

fn spec(nranks: u32, steps: u64, seed: u64, init_lines: bool, prefix: Prefix) -> Spec {
    Spec {
        nranks,
        steps,
        seed,
        p2p_percent: 25,
        period: None,
        style: Style {
            layout: Layout::PerRank,
            prefix,
            init_lines,
            rankwise_trace: false,
            noise_percent: 30,
        },
    }
}

/// Each rank's lines from `start[r]` percent to `end[r]` percent of its file.
fn cut(files: Vec<(String, Vec<u8>)>, cuts: &[(u8, u8)]) -> Vec<u8> {
    let mut all = Vec::new();
    for (r, (_, bytes)) in files.into_iter().enumerate() {
        let lines: Vec<&[u8]> = bytes.split(|b| *b == b'\n').collect();
        let (a, b) = cuts[r % cuts.len()];
        let (a, b) = (a.min(b), a.max(b));
        let from = lines.len() * usize::from(a) / 100;
        let to = (lines.len() * usize::from(b) / 100).max(from);
        for l in &lines[from..to] {
            all.extend_from_slice(l);
            all.push(b'\n');
        }
    }
    all
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn healthy_fragments_raise_no_alarm(
        nranks in 2u32..7,
        steps in 20u64..90,
        seed in any::<u64>(),
        init_lines in any::<bool>(),
        torchrun in any::<bool>(),
        cuts in proptest::collection::vec((0u8..45, 55u8..=100), 8),
    ) {
        let prefix = if torchrun { Prefix::Torchrun } else { Prefix::Timestamp };
        let s = spec(nranks, steps, seed, init_lines, prefix);
        let text = cut(s.render(Fault::None), &cuts);
        let c = collect_bytes("cut.log", &text);
        let a = analyze_with(&c, &Settings::default());
        let errors: Vec<_> = a.findings.iter().filter(|f| f.severity == Severity::Error).collect();
        prop_assert!(errors.is_empty(), "{}\n{:#?}", a.verdict, errors);
        prop_assert!(a.hang_evidence.is_none());
        prop_assert_eq!(a.problems, 0);

        // told the job hung, the same fragments show at most ranks that stopped
        let h = analyze_with(&c, &Settings { hung: true });
        for f in h.findings.iter().filter(|f| f.severity == Severity::Error) {
            prop_assert!(
                matches!(f.kind, FindingKind::Stopped | FindingKind::UnmatchedSend | FindingKind::UnmatchedRecv),
                "{:?}: {}", f.kind, f.message
            );
        }
    }
}
