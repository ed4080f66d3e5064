//! The parser and the analyzer on hostile input: random bytes, mutated real
//! lines, endless lines. Nothing may panic, and what is kept stays bounded by
//! the lines read.

use proptest::prelude::*;
use rankwise::logs::findings::MISSING_LISTED;
use rankwise::logs::parse::{Body, Line, Parser};
use rankwise::logs::report::{analysis_text, summary_text};
use rankwise::logs::resolve::MAX_NRANKS;
use rankwise::logs::summary::MAX_CALL_BYTES;
use rankwise::logs::{analyze, collect_bytes, summarize};

const REAL: &str = include_str!("../../tests/fixtures/nccl-2.28.9-1rank-torch-ctypes.log");

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
            // whatever survived is a well-formed record; a line that lost
            // its `host:pid:tid` header is read as a pasted one, without it
            prop_assert!(!h.host.is_empty() || (h.pid, h.tid) == (0, 0));
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
    assert_eq!(roots, rankwise::logs::findings::LIST_LIMIT);
    assert!(a.findings_omitted > 0);
    assert!(
        a.verdict.starts_with("invalid argument: rank 0 (h:1)"),
        "{}",
        a.verdict
    );
}

/// A number as a log line may state it: small ones, the edges of u32, of
/// the nranks bound (2^24), of the per-call byte bound (2^48) and of u64,
/// and anything at all.
fn number() -> impl Strategy<Value = u64> {
    prop_oneof![
        0u64..6,
        Just(u64::from(u32::MAX) - 1),
        Just(u64::from(u32::MAX)),
        Just(u64::from(u32::MAX) + 1),
        Just(u64::from(MAX_NRANKS)),
        Just(u64::from(MAX_NRANKS) + 1),
        Just(MAX_CALL_BYTES),
        Just(MAX_CALL_BYTES + 1),
        Just(u64::MAX),
        any::<u32>().prop_map(u64::from),
        any::<u64>(),
    ]
}

/// What one process states: its init line's rank and nranks, its COLL
/// lines' `[nranks=]`, an AllReduce and an AllGather count, the datatype of
/// both and a Send's peer.
#[derive(Clone, Debug)]
struct Proc {
    rank: u64,
    nranks: u64,
    coll_nranks: u64,
    count: u64,
    gather_count: u64,
    datatype: u64,
    peer: i64,
}

fn proc_() -> impl Strategy<Value = Proc> {
    (
        number(),
        number(),
        number(),
        number(),
        number(),
        prop_oneof![0u64..12, number()],
        prop_oneof![0i64..4, any::<i32>().prop_map(i64::from), any::<i64>()],
    )
        .prop_map(
            |(rank, nranks, coll_nranks, count, gather_count, datatype, peer)| Proc {
                rank,
                nranks,
                coll_nranks,
                count,
                gather_count,
                datatype,
                peer,
            },
        )
}

/// Three processes of one communicator, in the real 2.28.9 line formats.
fn numbers_log(procs: &[Proc]) -> String {
    let mut t = String::new();
    for (i, p) in procs.iter().enumerate() {
        t += &format!(
            "vm:{pid}:{pid} [{i}] NCCL INFO ncclCommInitRankConfig comm 0x{comm:x} rank {} nranks {} cudaDev {i} nvmlDev {i} busId 60 commId 0x67c0057cd53cedc1 - Init COMPLETE\n",
            p.rank,
            p.nranks,
            pid = 470 + i,
            comm = 0x209db0f0 + 0x1000 * i,
        );
    }
    for (i, p) in procs.iter().enumerate() {
        let head = format!("vm:{pid}:{pid} [{i}] NCCL INFO", pid = 470 + i);
        let tail = format!(
            "comm 0x{:x} [nranks={}] stream (nil)",
            0x209db0f0 + 0x1000 * i,
            p.coll_nranks
        );
        t += &format!(
            "{head} AllReduce: opCount 0 sendbuff 0x7f908ee00000 recvbuff 0x7f908ee00000 count {} datatype {} op 0 root 0 {tail}\n",
            p.count, p.datatype
        );
        t += &format!(
            "{head} AllGather: opCount 1 sendbuff 0x7f66dae00400 recvbuff 0x7f66dae00000 count {} datatype {} op 0 root 0 {tail}\n",
            p.gather_count, p.datatype
        );
        t += &format!(
            "{head} Send: opCount 2 sendbuff (nil) recvbuff 0x7f66dae00400 count 5 datatype 7 op 0 root {} {tail}\n",
            p.peer
        );
    }
    t
}

/// Bytes of a call by the nccl-tests convention, in 128 bits.
fn bytes_128(count: u64, size: u64, n: u64) -> u128 {
    u128::from(count) * u128::from(size) * u128::from(n)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    /// Whatever the numbers: no panic, a report the size of the input, and
    /// summary bytes as the closed form gives them, implausible calls apart.
    #[test]
    fn any_number_in_a_line(procs in proptest::collection::vec(proc_(), 3)) {
        let text = numbers_log(&procs);
        let c = collect_bytes("n.log", text.as_bytes());
        let a = analyze(&c);
        let s = summarize(&c);
        let out = [
            serde_json::to_string(&a).unwrap(),
            serde_json::to_string(&s).unwrap(),
            analysis_text(&a),
            summary_text(&s),
        ]
        .concat();
        prop_assert!(out.len() <= 64 * 1024 + 50 * text.len(), "{} bytes of report", out.len());
        for cm in &a.communicators {
            prop_assert!(cm.ranks_missing.len() <= cm.ranks_seen.len() + 1);
            prop_assert!(cm.nranks <= MAX_NRANKS.max(3));
        }
        for f in &a.findings {
            prop_assert!(f.ranks.len() <= MISSING_LISTED);
        }
        const SIZES: [u64; 12] = [1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1];
        for cm in &s.communicators {
            for r in &cm.ranks {
                let p = &procs[(r.pid - 470) as usize];
                let (mut bytes, mut implausible, mut unknown) = (0u128, 0u64, 0u64);
                // A COLL line is read when its [nranks=] fits in 32 bits, its
                // datatype and the Send's peer in a signed 32-bit int.
                let fits = p.coll_nranks <= u64::from(u32::MAX);
                if fits && p.datatype <= i32::MAX as u64 {
                    let calls = [(p.count, 1), (p.gather_count, u64::from(cm.nranks))];
                    match usize::try_from(p.datatype).ok().and_then(|d| SIZES.get(d)) {
                        Some(&size) => {
                            for (count, n) in calls {
                                let b = bytes_128(count, size, n);
                                if b <= u128::from(MAX_CALL_BYTES) {
                                    bytes += b;
                                } else {
                                    implausible += 1;
                                }
                            }
                        }
                        None => unknown += 2,
                    }
                }
                if fits && i32::try_from(p.peer).is_ok() {
                    bytes += 5 * 4; // the Send: 5 float32
                }
                prop_assert_eq!((r.bytes, r.implausible_count_calls, r.unknown_datatype_calls), (bytes, implausible, unknown), "{:?}", p);
            }
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// The binary on the same logs, under a 512 MiB address-space limit and a
    /// 30 s deadline: an allocation sized by a number read would die on it.
    #[test]
    fn any_number_in_a_line_through_the_binary(procs in proptest::collection::vec(proc_(), 3)) {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("n.log");
        std::fs::write(&path, numbers_log(&procs)).unwrap();
        for cmd in ["analyze", "summary"] {
            let o = std::process::Command::new("sh")
                .arg("-c")
                .arg("ulimit -v 524288 && exec timeout 30 \"$0\" \"$@\"")
                .arg(env!("CARGO_BIN_EXE_rankwise"))
                .args(["logs", cmd, "--json", path.to_str().unwrap()])
                .output()
                .unwrap();
            let err = String::from_utf8_lossy(&o.stderr);
            prop_assert!(matches!(o.status.code(), Some(0 | 1)), "{cmd}: {:?} {err}", o.status);
            prop_assert!(!err.contains("panicked"), "{err}");
            prop_assert!(o.stdout.len() <= 64 * 1024 + 50 * 4096);
        }
    }
}
