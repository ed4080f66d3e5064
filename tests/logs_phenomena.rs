//! `rankwise logs` on what people actually have: fragments, skew, device
//! numbers that are not ranks, trimmed extracts, wrapped and interleaved
//! lines, PyTorch's watchdog lines, WARN-only logs, and Flight Recorder
//! dumps (tests/fixtures/logs-phenomena, tests/fixtures/pytorch-2.11-gloo-cpu).

use rankwise::logs::{
    Analysis, FindingKind, Options, Settings, Severity, analyze_with, collect, expand_paths,
};
use std::path::PathBuf;

fn fixture(rel: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures")
        .join(rel)
}

fn run(rel: &str, hung: bool) -> Analysis {
    let files = expand_paths(&[fixture(rel)]).unwrap();
    let c = collect(&files, Options::default()).unwrap();
    analyze_with(&c, &Settings { hung })
}

fn kinds(a: &Analysis) -> Vec<FindingKind> {
    a.findings.iter().map(|f| f.kind).collect()
}

fn errors(a: &Analysis) -> Vec<String> {
    a.findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .map(|f| f.message.clone())
        .collect()
}

#[test]
fn healthy_inputs_raise_no_alarm() {
    for rel in [
        "logs-phenomena/fragment-opcount",
        "logs-phenomena/skew",
        "logs-phenomena/device-not-rank",
        "logs-phenomena/prefixless",
        "logs-phenomena/wrapped-interleaved",
        "pytorch-2.11-gloo-cpu/healthy/json",
        "pytorch-2.11-gloo-cpu/healthy/pickle",
    ] {
        let a = run(rel, false);
        assert_eq!(a.problems, 0, "{rel}: {:#?}", errors(&a));
        assert!(a.hang_evidence.is_none(), "{rel}: {:?}", a.hang_evidence);
    }
}

#[test]
fn fragments_starting_at_different_calls_are_truncation_by_op_count() {
    let a = run("logs-phenomena/fragment-opcount", false);
    let cm = &a.communicators[0];
    assert_eq!(cm.ranks_seen, [0, 1, 2, 3]);
    let t: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Truncated)
        .collect();
    assert_eq!(t.len(), 1, "{:#?}", a.findings);
    // rank 2's paste starts latest: at opCount 0x139d + 9
    assert!(
        t[0].message
            .contains("rank 2's first call has opCount 13a6"),
        "{}",
        t[0].message
    );
    assert_eq!(t[0].ranks, [2]);
    // compared from 0x13a6 to the end of the shortest log (rank 2's, 52): 43 positions
    assert_eq!(cm.agreed_collectives, 43);
    // the ends differ too: ordinary skew, said in the verdict
    assert!(kinds(&a).contains(&FindingKind::LogsEndApart));
    assert!(a.verdict.starts_with("no divergence"), "{}", a.verdict);
}

#[test]
fn logs_that_end_apart_are_skew_unless_the_job_hung() {
    let a = run("logs-phenomena/skew", false);
    assert_eq!(a.problems, 0);
    assert!(
        a.verdict.contains(
            "the logs end with rank 1 one call behind ranks 0,2 on commId 0x5eed (ordinary skew if the job was running; if it hung here, rank 1 never issued Broadcast #12"
        ),
        "{}",
        a.verdict
    );
    let h = run("logs-phenomena/skew", true);
    assert_eq!(h.problems, 1, "{:#?}", h.findings);
    let f = &h.findings[0];
    assert_eq!(
        (f.kind, f.ranks.clone(), f.position),
        (FindingKind::Stopped, vec![1], Some(12))
    );
    assert!(
        h.verdict
            .starts_with("hang: rank 1 never issued Broadcast #12"),
        "{}",
        h.verdict
    );
    assert!(h.verdict.contains("as --hung says"), "{}", h.verdict);
}

#[test]
fn the_device_number_is_not_taken_for_a_rank() {
    let a = run("logs-phenomena/device-not-rank", false);
    assert_eq!(a.problems, 0, "{:#?}", errors(&a));
    assert_eq!(a.communicators.len(), 2, "{:#?}", a.communicators);
    for cm in &a.communicators {
        assert!(
            cm.members.iter().all(|m| !m.rank_known),
            "{:#?}",
            cm.members
        );
        // each communicator holds one device index, on both processes
        let devs: Vec<_> = cm.members.iter().map(|m| m.dev).collect();
        assert_eq!(devs[0], devs[1]);
        let pids: Vec<_> = cm.members.iter().map(|m| m.pid).collect();
        assert_eq!(pids, [300, 301]);
    }
    let notes: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Unaligned)
        .collect();
    assert!(
        notes[0].message.contains("a peer number names no one"),
        "{}",
        notes[0].message
    );
}

#[test]
fn lines_without_nccls_header_are_read() {
    let a = run("logs-phenomena/prefixless", false);
    assert_eq!(a.counts.calls, 18);
    assert_eq!(a.communicators.len(), 1);
    assert_eq!(a.communicators[0].agreed_collectives, 9);
    // no header: no host, no pid; members are named by comm pointer
    assert_eq!(a.communicators[0].members[0].comm, "0x3a90");
}

#[test]
fn wrapped_and_interleaved_lines_are_joined_back() {
    let a = run("logs-phenomena/wrapped-interleaved", false);
    assert_eq!(a.counts.calls, 20, "{:?}", a.counts);
    assert_eq!(a.counts.rejoined_lines, 2);
    assert_eq!(a.counts.malformed_lines, 0);
    assert_eq!(a.communicators[0].agreed_collectives, 10);
}

#[test]
fn watchdog_lines_alone_tell_a_mismatch_and_a_rank_behind() {
    let a = run("logs-phenomena/watchdog-mismatch", false);
    assert!(
        a.hang_evidence
            .as_deref()
            .unwrap()
            .starts_with("PyTorch's watchdog timed out")
    );
    let f = &a.findings[0];
    assert_eq!(f.kind, FindingKind::WatchdogMismatch, "{:#?}", a.findings);
    assert_eq!((f.ranks.clone(), f.position), (vec![3], Some(80078)));
    assert!(
        f.message
            .contains("ranks 0-2,4-7 in BROADCAST (numel 5056 in, 5056 out), rank 3 in ALLREDUCE"),
        "{}",
        f.message
    );
    assert!(
        a.verdict.starts_with("contract mismatch: "),
        "{}",
        a.verdict
    );

    let b = run("logs-phenomena/watchdog-behind", false);
    let s: Vec<_> = b
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Stopped)
        .collect();
    assert_eq!(s.len(), 1, "{:#?}", b.findings);
    assert_eq!(
        (s[0].ranks.clone(), s[0].other_ranks.clone(), s[0].position),
        (vec![1, 2], vec![0], Some(11))
    );
    assert!(b.verdict.starts_with("hang: in process group default_pg, rank 0 enqueued work up to 12 while ranks 1-2 at work 10"), "{}", b.verdict);
}

#[test]
fn warn_lines_are_sorted_into_causes() {
    for (file, kind, words) in [
        (
            "network",
            FindingKind::NetworkError,
            "transport retry counter exceeded",
        ),
        (
            "peer-size",
            FindingKind::PeerSizeMismatch,
            "different counts or datatypes",
        ),
        (
            "duplicate-gpu",
            FindingKind::DuplicateGpu,
            "CUDA_VISIBLE_DEVICES",
        ),
        ("oom", FindingKind::OutOfMemory, "out of memory"),
        (
            "connection",
            FindingKind::ConnectionFailed,
            "NCCL_SOCKET_IFNAME",
        ),
        ("version", FindingKind::VersionMismatch, "same one"),
    ] {
        let a = run(&format!("logs-phenomena/warn-only/{file}.log"), false);
        assert_eq!(kinds(&a), [kind], "{file}: {:#?}", a.findings);
        assert!(
            a.findings[0].message.contains(words),
            "{file}: {}",
            a.findings[0].message
        );
        assert_eq!(a.problems, 1);
    }
    // a network error is never told as a mismatch
    let a = run("logs-phenomena/warn-only/network.log", false);
    assert!(
        a.verdict
            .starts_with("network error (not an application mismatch)"),
        "{}",
        a.verdict
    );
}

#[test]
fn flight_recorder_dumps_of_a_real_cpu_run_name_the_skip() {
    for fmt in ["json", "pickle"] {
        let a = run(&format!("pytorch-2.11-gloo-cpu/skip/{fmt}"), false);
        let f: Vec<_> = a
            .findings
            .iter()
            .filter(|f| f.severity == Severity::Error)
            .collect();
        assert!(!f.is_empty(), "{fmt}: {:#?}", a.findings);
        // at sequence id 2, rank 2 called all_reduce where the others broadcast
        assert_eq!(f[0].ranks, [2], "{fmt}: {:#?}", f);
        assert_eq!(f[0].position, Some(2));
        assert!(f[0].message.contains("broadcast"), "{}", f[0].message);

        let a = run(&format!("pytorch-2.11-gloo-cpu/count/{fmt}"), false);
        let f: Vec<_> = a
            .findings
            .iter()
            .filter(|f| f.kind == FindingKind::CountMismatch)
            .collect();
        assert_eq!(f.len(), 1, "{fmt}: {:#?}", a.findings);
        assert_eq!(f[0].ranks, [2]);
        assert!(f[0].message.contains("in [[5]]"), "{}", f[0].message);
    }
}

#[test]
fn an_unreadable_dump_is_named_with_why_and_the_rest_is_read() {
    let dir = tempfile::tempdir().unwrap();
    for r in 0..4 {
        let src = fixture(&format!(
            "pytorch-2.11-gloo-cpu/healthy/json/fr_rank{r}.json"
        ));
        std::fs::copy(src, dir.path().join(format!("fr_rank{r}.json"))).unwrap();
    }
    std::fs::write(
        dir.path().join("fr_rank9.json"),
        b"{\"version\": \"2.10\", \"entries\": 7}",
    )
    .unwrap();
    let files = expand_paths(&[dir.path().to_path_buf()]).unwrap();
    let a = analyze_with(
        &collect(&files, Options::default()).unwrap(),
        &Settings::default(),
    );
    let u: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::Unreadable)
        .collect();
    assert_eq!(u.len(), 1, "{:#?}", a.findings);
    assert!(
        u[0].message
            .ends_with("fr_rank9.json: 'entries' is not a list"),
        "{}",
        u[0].message
    );
    assert_eq!(a.problems, 0);
    assert_eq!(a.flight_groups.len(), 1);
}
