//! The parser and the analyzer on hostile input: random bytes, mutated real
//! lines, endless lines. Nothing may panic, and what is kept stays bounded by
//! the lines read.

use proptest::prelude::*;
use rankwise::logs::parse::{Body, Line, Parser};
use rankwise::logs::report::{analysis_text, summary_text};
use rankwise::logs::{analyze, collect_bytes, summarize};

const REAL: &str = include_str!("fixtures/nccl-2.28.9-1rank-torch-ctypes.log");

fn real_lines() -> Vec<&'static str> {
    REAL.lines().filter(|l| l.contains(" NCCL ")).collect()
}

/// Parse, analyze, summarize and render: everything a user can trigger.
fn everything(text: &[u8]) {
    let c = collect_bytes("fuzz.log", text);
    let lines = c.counts.lines;
    assert!(c.counts.calls <= lines);
    let kept: usize = c.streams.iter().map(|s| s.calls.len()).sum();
    assert_eq!(kept as u64, c.counts.calls);
    assert!(c.sigs.len() as u64 <= c.counts.calls);
    assert!(c.warnings.len() as u64 <= c.counts.warn_lines);
    let a = analyze(&c);
    let _ = analysis_text(&a);
    let _ = serde_json::to_string(&a).unwrap();
    let _ = summary_text(&summarize(&c));
}

#[derive(Debug, Clone)]
enum Mutation {
    Replace(usize, u8),
    Delete(usize, usize),
    Insert(usize, Vec<u8>),
    Truncate(usize),
    DupToken(usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    prop_oneof![
        (any::<usize>(), any::<u8>()).prop_map(|(i, b)| Mutation::Replace(i, b)),
        (any::<usize>(), 0usize..12).prop_map(|(i, n)| Mutation::Delete(i, n)),
        (
            any::<usize>(),
            proptest::collection::vec(
                prop_oneof![
                    Just(b' '),
                    Just(b':'),
                    Just(b'['),
                    Just(b']'),
                    Just(b'0'),
                    Just(b'x'),
                    Just(b'-'),
                    any::<u8>()
                ],
                0..10
            )
        )
            .prop_map(|(i, v)| Mutation::Insert(i, v)),
        any::<usize>().prop_map(Mutation::Truncate),
        any::<usize>().prop_map(Mutation::DupToken),
    ]
}

fn apply(line: &str, muts: &[Mutation]) -> Vec<u8> {
    let mut b = line.as_bytes().to_vec();
    for m in muts {
        let n = b.len().max(1);
        match m {
            Mutation::Replace(i, x) => {
                if !b.is_empty() {
                    let i = i % n;
                    b[i] = *x;
                }
            }
            Mutation::Delete(i, k) => {
                let i = i % n;
                let j = (i + k).min(b.len());
                if i < b.len() {
                    b.drain(i..j);
                }
            }
            Mutation::Insert(i, v) => {
                let i = i % (b.len() + 1);
                b.splice(i..i, v.iter().copied());
            }
            Mutation::Truncate(i) => b.truncate(i % n),
            Mutation::DupToken(i) => {
                let toks: Vec<&[u8]> = b.split(|c| *c == b' ').collect();
                let t = toks[i % toks.len()].to_vec();
                let i = i % (b.len() + 1);
                b.splice(i..i, t.into_iter().chain([b' ']));
            }
        }
    }
    b
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn random_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let p = Parser::new();
        for line in bytes.split(|b| *b == b'\n') {
            let _ = p.parse(line);
        }
        everything(&bytes);
    }

    #[test]
    fn random_text_around_the_marker(
        parts in proptest::collection::vec(
            prop_oneof![
                Just(" NCCL INFO ".to_string()), Just(" NCCL WARN ".to_string()),
                Just("h:1:2 [0]".to_string()), Just("AllReduce: opCount ".to_string()),
                Just("comm 0x".to_string()), Just(" rank ".to_string()), Just("nranks".to_string()),
                Just("[nranks=".to_string()), Just("invalid root ".to_string()), Just("\n".to_string()),
                "[0-9a-fx:\\[\\] -]{0,12}",
            ],
            0..40,
        )
    ) {
        everything(parts.concat().as_bytes());
    }

    #[test]
    fn mutated_real_lines(
        pick in any::<proptest::sample::Index>(),
        muts in proptest::collection::vec(mutation(), 1..5),
    ) {
        let lines = real_lines();
        let line = lines[pick.index(lines.len())];
        let mutated = apply(line, &muts);
        let p = Parser::new();
        if let Line::Nccl(h, Body::Coll(c)) = p.parse(&mutated) {
            // whatever survived is a well-formed record
            prop_assert!(!h.host.is_empty());
            let _ = c.op.name();
        }
        // mutated line in its real context
        let mut text = REAL.as_bytes().to_vec();
        text.extend_from_slice(&mutated);
        text.push(b'\n');
        text.extend_from_slice(REAL.as_bytes());
        everything(&text);
    }
}

#[test]
fn an_endless_line_is_cut_not_buffered() {
    // 5 MiB without a newline, then a real line
    let mut text = vec![b'7'; 5 << 20];
    text.push(b'\n');
    text.extend_from_slice(
        real_lines()
            .iter()
            .find(|l| l.contains("opCount"))
            .unwrap()
            .as_bytes(),
    );
    let c = collect_bytes("long.log", &text);
    assert_eq!(c.counts.lines, 2);
    assert_eq!(c.counts.calls, 1);
    // skipped, and reported with its place and length
    assert_eq!(c.counts.long_lines, 1);
    assert_eq!(c.files[0].first_long_line, Some((1, 5 << 20)));
    assert_eq!(c.streams[0].loc(0).line, 2);
}

#[test]
fn a_flood_of_distinct_comms_keeps_one_stream_each() {
    let mut t = String::new();
    for i in 0..5000u64 {
        t += &format!(
            "h:{i}:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count {i} datatype 7 op 0 root 0 comm 0x{:x} [nranks=2] stream (nil)\n",
            i + 1
        );
    }
    let c = collect_bytes("flood.log", t.as_bytes());
    assert_eq!(c.streams.len(), 5000);
    let a = analyze(&c);
    // 5000 processes, nranks 2, no init lines: paired by order into 2500 communicators
    assert_eq!(
        a.communicators
            .iter()
            .map(|c| c.ranks_seen.len())
            .sum::<usize>(),
        5000
    );
}

#[test]
fn a_flood_of_warnings_is_counted_not_kept() {
    let mut t = String::from(
        "h:1:1 [0] NCCL INFO ncclCommInitRank comm 0x10 rank 0 nranks 2 cudaDev 0 nvmlDev 0 busId 0 commId 0xa - Init COMPLETE\n",
    );
    for i in 0..5000 {
        t += &format!(
            "h:1:1 [0] misc/argcheck.cc:48 NCCL WARN Broadcast : invalid root {i} (root should be in the 0..2 range)\n"
        );
        t += "h:1:1 [0] transport.cc:1 NCCL WARN Connection closed\n";
    }
    let c = collect_bytes("warn.log", t.as_bytes());
    assert_eq!(c.counts.warn_lines, 10_000);
    assert!(c.warnings.len() <= 1000);
    let a = analyze(&c);
    let roots = a
        .findings
        .iter()
        .filter(|f| f.kind == rankwise::logs::FindingKind::InvalidRoot)
        .count();
    assert_eq!(roots, rankwise::logs::analyze::LIST_LIMIT);
    assert!(a.findings_omitted > 0);
    assert!(
        a.verdict.starts_with("invalid argument: rank 0 (h:1)"),
        "{}",
        a.verdict
    );
}
