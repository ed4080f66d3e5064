//! Real NCCL 2.28.9 logs (tests/fixtures/, captured through PyTorch 2.11 and
//! through libnccl directly, see scripts/capture_nccl_log.py) read end to end.

use rankwise::Func;
use rankwise::logs::resolve::IdentifiedBy;
use rankwise::logs::{Analysis, FindingKind, Options, analyze, collect_bytes, summarize};
use std::io::Write;
use std::path::PathBuf;

const INIT_COLL: &str = include_str!("fixtures/nccl-2.28.9-1rank-init-coll.log");
const TORCH_CTYPES: &str = include_str!("fixtures/nccl-2.28.9-1rank-torch-ctypes.log");

fn fixture(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(name)
}

/// Line numbers of the WARN lines, found without the parser.
fn warn_lines(text: &str) -> Vec<u64> {
    text.lines()
        .enumerate()
        .filter(|(_, l)| l.contains(" NCCL WARN "))
        .map(|(i, _)| i as u64 + 1)
        .collect()
}

/// COLL lines per comm pointer, found without the parser.
fn coll_lines(text: &str, comm: &str) -> usize {
    text.lines()
        .filter(|l| l.contains(": opCount ") && l.contains(&format!("comm {comm} ")))
        .count()
}

fn torch_analysis() -> Analysis {
    analyze(&collect_bytes("torch.log", TORCH_CTYPES.as_bytes()))
}

#[test]
fn the_torch_and_ctypes_capture_has_three_communicators() {
    let a = torch_analysis();
    let names: Vec<_> = a.communicators.iter().map(|c| c.name.as_str()).collect();
    assert_eq!(
        names,
        [
            "commId 0xf503134762c30b75",
            "comm 0x2cb3be70 (color 59908776, split from commId 0xf503134762c30b75)",
            "commId 0x92c6eac989fbaeff",
        ]
    );
    let by: Vec<_> = a.communicators.iter().map(|c| c.identified_by).collect();
    assert_eq!(
        by,
        [
            IdentifiedBy::CommId,
            IdentifiedBy::Split,
            IdentifiedBy::CommId
        ]
    );
    for (c, ptr) in a
        .communicators
        .iter()
        .zip(["0x23ebc600", "0x2cb3be70", "0x2ce7ed40"])
    {
        assert_eq!(c.nranks, 1);
        assert_eq!(c.ranks_seen, [0]);
        assert!(c.divergence.is_none());
        let m = &c.members[0];
        assert_eq!(m.comm, ptr);
        assert!(!m.rank_inferred, "init lines give the rank");
        assert_eq!(m.calls as usize, coll_lines(TORCH_CTYPES, ptr));
        assert_eq!(m.ended.as_deref(), Some("destroyed"));
    }
    assert_eq!(
        a.counts.calls as usize,
        TORCH_CTYPES.matches(": opCount ").count()
    );
    assert_eq!(a.counts.malformed_lines, 0);
}

#[test]
fn torch_group_calls_zero_count_and_p2p() {
    let a = torch_analysis();
    let torch = &a.communicators[0];
    let m = &torch.members[0];
    // all_to_all_single with splits and batch_isend_irecv: two Send/Recv pairs to self
    assert_eq!((m.collectives, m.p2p), (11, 4));
    assert_eq!((torch.p2p_pairs, torch.p2p_matched), (1, 2));
    // all_reduce of an empty tensor: collective #9, logged with count 0
    let z: Vec<_> = a
        .findings
        .iter()
        .filter(|f| {
            f.kind == FindingKind::ZeroCount && f.comm.as_deref() == Some(torch.name.as_str())
        })
        .collect();
    assert_eq!(z.len(), 1);
    assert_eq!((z[0].position, z[0].op), (Some(9), Some(Func::AllReduce)));
    // on one rank NCCL 2.28 never advances opCount: every call is opCount 0
    assert_eq!(m.launches, 1);
    let last = m.last_call.as_ref().unwrap();
    assert_eq!(
        (last.op, last.count, last.datatype.as_str()),
        (Func::AllReduce, 4, "int32")
    );
    assert_eq!(last.op_count.as_deref(), Some("0"));

    let ctypes = &a.communicators[2];
    // a group fusing an AllReduce with Send/Recv, and a zero-count Send/Recv group
    assert_eq!(
        (ctypes.members[0].collectives, ctypes.members[0].p2p),
        (4, 4)
    );
    assert_eq!((ctypes.p2p_pairs, ctypes.p2p_matched), (1, 2));
    let last = ctypes.members[0].last_call.as_ref().unwrap();
    assert_eq!((last.op, last.count, last.peer), (Func::Recv, 0, Some(0)));
}

#[test]
fn argcheck_warnings_are_found_with_their_values_and_lines() {
    let a = torch_analysis();
    let lines = warn_lines(TORCH_CTYPES);
    let mut got: Vec<_> = a
        .findings
        .iter()
        .filter(|f| {
            matches!(
                f.kind,
                FindingKind::InvalidRoot | FindingKind::InvalidType | FindingKind::InvalidOp
            )
        })
        .map(|f| {
            let line: u64 = f
                .location
                .as_deref()
                .unwrap()
                .rsplit(':')
                .next()
                .unwrap()
                .parse()
                .unwrap();
            (line, f.kind, f.op, f.ranks.clone())
        })
        .collect();
    got.sort();
    assert_eq!(
        got,
        [
            (
                lines[0],
                FindingKind::InvalidRoot,
                Some(Func::Reduce),
                vec![0]
            ),
            (
                lines[1],
                FindingKind::InvalidType,
                Some(Func::AllReduce),
                vec![0]
            ),
            (
                lines[2],
                FindingKind::InvalidOp,
                Some(Func::AllReduce),
                vec![0]
            ),
            (
                lines[3],
                FindingKind::InvalidRoot,
                Some(Func::Broadcast),
                vec![0]
            ),
        ]
    );
    // the ctypes calls happen on the ctypes communicator, before it is destroyed
    for f in a.findings.iter().filter(|f| {
        f.location
            .as_deref()
            .is_some_and(|l| !l.ends_with(&format!(":{}", lines[3])))
    }) {
        if matches!(
            f.kind,
            FindingKind::InvalidRoot | FindingKind::InvalidType | FindingKind::InvalidOp
        ) {
            assert_eq!(
                f.comm.as_deref(),
                Some("commId 0x92c6eac989fbaeff"),
                "{f:?}"
            );
        }
    }
    assert!(
        a.findings
            .iter()
            .any(|f| f.message.contains("invalid root 3"))
    );
    assert!(
        a.findings
            .iter()
            .any(|f| f.message.contains("invalid type 42"))
    );
    assert!(
        a.verdict.starts_with("invalid argument: rank 0"),
        "{}",
        a.verdict
    );
}

#[test]
fn the_shared_fixture() {
    let a = analyze(&collect_bytes("init-coll.log", INIT_COLL.as_bytes()));
    assert_eq!(a.communicators.len(), 1);
    let c = &a.communicators[0];
    assert_eq!(c.name, "commId 0x67c0057cd53cedc1");
    assert_eq!(c.members[0].comm, "0x209db0f0");
    assert_eq!(c.members[0].calls, 4);
    let ops: Vec<_> = a.findings.iter().map(|f| (f.kind, f.position)).collect();
    assert!(ops.contains(&(FindingKind::ZeroCount, Some(1))));
    let w = a
        .findings
        .iter()
        .find(|f| f.kind == FindingKind::InvalidRoot)
        .unwrap();
    assert_eq!(
        w.location.as_deref(),
        Some(&*format!("init-coll.log:{}", warn_lines(INIT_COLL)[0]))
    );
    assert_eq!(w.comm.as_deref(), Some("commId 0x67c0057cd53cedc1"));
    // NCCL's "0..1 range" on a 1-rank communicator, said without ambiguity
    assert!(
        w.message
            .contains("root 1 is out of range: valid roots are 0..=0"),
        "{}",
        w.message
    );
}

#[test]
fn summary_bytes_of_the_torch_communicator() {
    let s = summarize(&collect_bytes("torch.log", TORCH_CTYPES.as_bytes()));
    let r = &s.communicators[0].ranks[0];
    let get = |op| {
        r.ops
            .iter()
            .find(|o| o.op == op)
            .map(|o| (o.calls, o.bytes))
    };
    // all_reduce: int64×3, f32×5, bf16×6, f32×2, f32×3, f32×0, int32×4
    assert_eq!(get(Func::AllReduce), Some((7, 24 + 20 + 12 + 8 + 12 + 16)));
    assert_eq!(get(Func::Reduce), Some((1, 14))); // f16×7
    assert_eq!(get(Func::Broadcast), Some((1, 4))); // uint8×4
    assert_eq!(get(Func::AllGather), Some((1, 24))); // N·6·4, N = 1
    assert_eq!(get(Func::AlltoAll), Some((1, 24)));
    assert_eq!(get(Func::Send), Some((2, 56))); // f32×5 + f32×9
    assert_eq!(get(Func::Recv), Some((2, 56)));
    assert_eq!(r.bytes, 92 + 14 + 4 + 24 + 24 + 56 + 56);
}

#[test]
fn launcher_prefixes_crlf_and_gzip_do_not_change_the_result() {
    let plain = torch_analysis();
    let key = |a: &Analysis| {
        (
            a.communicators
                .iter()
                .map(|c| (c.name.clone(), c.members[0].calls))
                .collect::<Vec<_>>(),
            // a launcher prefix names the rank of PyTorch's own lines too
            a.findings
                .iter()
                .map(|f| match f.kind {
                    FindingKind::TorchError => (f.kind, f.position, Vec::new()),
                    _ => (f.kind, f.position, f.ranks.clone()),
                })
                .collect::<Vec<_>>(),
            a.counts.calls,
        )
    };
    for prefix in [
        "[rank0]:",
        "[default0]:",
        "[1,0]<stdout>:",
        "[2026-12-02 16:23:23] ",
    ] {
        let text: String = TORCH_CTYPES
            .lines()
            .map(|l| format!("{prefix}{l}\r\n"))
            .collect();
        let a = analyze(&collect_bytes("p.log", text.as_bytes()));
        assert_eq!(key(&a), key(&plain), "{prefix}");
    }
    let dir = tempfile::tempdir().unwrap();
    let gz = dir.path().join("torch.log.gz");
    let mut enc = flate2::write::GzEncoder::new(
        std::fs::File::create(&gz).unwrap(),
        flate2::Compression::default(),
    );
    enc.write_all(TORCH_CTYPES.as_bytes()).unwrap();
    enc.finish().unwrap();
    let a = rankwise::logs::analyze_paths(&[gz], Options::default()).unwrap();
    assert_eq!(key(&a), key(&plain));
}

#[test]
fn both_fixtures_read_from_the_directory() {
    // a directory holding just the two one-rank logs (the fixtures'
    // directory also holds the H200 captures)
    let dir = tempfile::tempdir().unwrap();
    for name in [
        "nccl-2.28.9-1rank-init-coll.log",
        "nccl-2.28.9-1rank-torch-ctypes.log",
    ] {
        std::fs::copy(fixture(name), dir.path().join(name)).unwrap();
    }
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Options::default()).unwrap();
    assert_eq!(a.files.len(), 2);
    assert_eq!(a.communicators.len(), 4);
    assert_eq!(
        a.counts.lines as usize,
        INIT_COLL.lines().count() + TORCH_CTYPES.lines().count()
    );
}

#[test]
fn a_second_copy_of_a_log_is_skipped_not_doubled() {
    use rankwise_testkit::synth::{Fault, Spec, Style};
    let spec = Spec {
        nranks: 3,
        steps: 40,
        seed: 77,
        p2p_percent: 20,
        period: None,
        style: Style::default(),
    };
    let dir = tempfile::tempdir().unwrap();
    let files = spec.render(Fault::None);
    for (name, bytes) in &files {
        std::fs::write(dir.path().join(name), bytes).unwrap();
    }
    // a console log holding rank 1's lines again
    std::fs::write(dir.path().join("zz-console.log"), &files[1].1).unwrap();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Options::default()).unwrap();
    assert_eq!(a.problems, 0, "{}", a.verdict);
    let calls_1 = files[1]
        .1
        .split(|b| *b == b'\n')
        .filter(|l| l.windows(9).any(|w| w == b": opCount"))
        .count();
    assert_eq!(a.communicators.len(), 1);
    assert_eq!(a.communicators[0].members[1].calls as usize, calls_1);
    let r: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::RepeatedLog)
        .collect();
    assert_eq!(r.len(), 1);
    assert!(
        r[0].message.contains(&format!(
            "zz-console.log repeats the {calls_1} calls of node00:31007"
        )),
        "{}",
        r[0].message
    );

    // The same copy without init and destroy lines continues the stream in
    // the reader, where the restarted opCount gives it away.
    let lines = |bytes: &[u8], keep: &dyn Fn(&[u8]) -> bool| -> Vec<u8> {
        bytes
            .split(|b| *b == b'\n')
            .filter(|l| !l.is_empty() && keep(l))
            .flat_map(|l| l.iter().copied().chain([b'\n']))
            .collect()
    };
    let has = |l: &[u8], w: &[u8]| l.windows(w.len()).any(|x| x == w);
    std::fs::write(
        dir.path().join("zz-console.log"),
        lines(&files[1].1, &|l| has(l, b": opCount")),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rank001.log"),
        lines(&files[1].1, &|l| !has(l, b"Destroy")),
    )
    .unwrap();
    let a = rankwise::logs::analyze_paths(&[dir.path().to_path_buf()], Options::default()).unwrap();
    assert_eq!(a.problems, 0, "{}", a.verdict);
    assert_eq!(a.counts.repeated_calls as usize, calls_1);
    assert_eq!(a.communicators[0].members[1].calls as usize, calls_1);
    assert!(
        a.findings
            .iter()
            .any(|f| f.kind == FindingKind::RepeatedLog)
    );
}
