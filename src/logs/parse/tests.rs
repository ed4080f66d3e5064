//! The parser on real and hand-written lines of every form it reads.

use super::fields::{parse_hex, parse_i32, parse_i64, parse_ptr, parse_u64};
use super::*;

fn p(line: &str) -> Line<'_> {
    Parser::new().parse(line.as_bytes())
}

fn coll(line: &str) -> (Head<'_>, Coll) {
    match p(line) {
        Line::Nccl(h, Body::Coll(c)) => (h, c),
        other => panic!("not a COLL line: {other:?}"),
    }
}

#[test]
fn real_allreduce_line() {
    let (h, c) = coll(
        "vm:590:590 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7fd796e00000 recvbuff 0x7fd796e00000 count 3 datatype 4 op 0 root 0 comm 0x22c2a4f0 [nranks=1] stream (nil)",
    );
    assert_eq!(
        (h.host, h.pid, h.tid, h.dev),
        (&b"vm"[..], 590, 590, Some(0))
    );
    assert_eq!(c.op, Func::AllReduce);
    assert_eq!(c.op_count, Some(0));
    assert_eq!(c.sendbuff, 0x7fd796e00000);
    assert_eq!(c.count, 3);
    assert_eq!(c.datatype, 4);
    assert_eq!(c.comm, 0x22c2a4f0);
    assert_eq!(c.nranks, Some(1));
}

#[test]
fn send_prints_peer_as_root_and_buffer_as_recvbuff() {
    let (_, c) = coll(
        "vm:447:447 [0] NCCL INFO Send: opCount 1a sendbuff (nil) recvbuff 0x7f66dae00200 count 9 datatype 7 op 0 root 3 comm 0x23ebc600 [nranks=4] stream 0x2b37a4b0",
    );
    assert_eq!(c.op, Func::Send);
    assert_eq!(c.op_count, Some(0x1a));
    assert_eq!(c.sendbuff, 0);
    assert_eq!(c.recvbuff, 0x7f66dae00200);
    assert_eq!(c.root, 3);
    assert_eq!(c.nranks, Some(4));
}

#[test]
fn prefixes_are_tolerated_and_give_rank_hints() {
    let base = "node7:12:13 [2] NCCL INFO Broadcast: opCount ff sendbuff 0x1 recvbuff 0x1 count 4 datatype 1 op 0 root 0 comm 0xabc [nranks=8] stream (nil)";
    let (h, c) = coll(base);
    assert_eq!((h.prefix_rank, h.prefix_local), (None, None));
    assert_eq!(c.op_count, Some(255));

    let l = format!("[rank5]:{base}");
    let (h, _) = coll(&l);
    assert_eq!(h.host, b"node7");
    assert_eq!(h.prefix_rank, Some(5));

    let l = format!("[default3]:{base}");
    let (h, _) = coll(&l);
    assert_eq!((h.prefix_rank, h.prefix_local), (None, Some(3)));

    let l = format!("[1,6]<stdout>:{base}");
    let (h, _) = coll(&l);
    assert_eq!((h.host, h.prefix_rank), (&b"node7"[..], Some(6)));

    let l = format!("[2026-12-02 16:09:41] {base}");
    let (h, _) = coll(&l);
    assert_eq!((h.host, h.pid, h.prefix_rank), (&b"node7"[..], 12, None));

    let l = format!("[2026-12-02 16:09:41.123] [rank4]: {base}\r\n");
    let (h, c) = coll(&l);
    assert_eq!((h.prefix_rank, c.count), (Some(4), 4));
}

#[test]
fn init_lines_of_every_form() {
    type Case = (
        &'static str,
        u64,
        Option<u32>,
        Option<u32>,
        Option<u64>,
        InitPhase,
    );
    let cases: [Case; 6] = [
        (
            "vm:473:473 [0] NCCL INFO ncclCommInitRankConfig comm 0x209db0f0 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x67c0057cd53cedc1 - Init COMPLETE",
            0x209db0f0,
            Some(0),
            Some(1),
            Some(0x67c0057cd53cedc1),
            InitPhase::Complete,
        ),
        (
            "h:1:1 [3] NCCL INFO ncclCommInitRank comm 0x55aa rank 3 nranks 4 cudaDev 3 nvmlDev 3 busId 4f000 commId 0x1234 - Init START",
            0x55aa,
            Some(3),
            Some(4),
            Some(0x1234),
            InitPhase::Start,
        ),
        (
            "h:1:1 [1] NCCL INFO comm 0x55ab rank 1 nranks 2 cudaDev 1 busId 4f000 commId 0x99 - Init COMPLETE",
            0x55ab,
            Some(1),
            Some(2),
            Some(0x99),
            InitPhase::Complete,
        ),
        (
            "vm:473:473 [0] NCCL INFO comm 0x209db0f0 rank 0 nRanks 1 nNodes 1 localRanks 1 localRank 0 MNNVL 0",
            0x209db0f0,
            Some(0),
            Some(1),
            None,
            InitPhase::Topology,
        ),
        (
            "vm:473:473 [0] NCCL INFO comm 0x209db0f0 rank 0 nranks 1 cudaDev 0 busId 60 - Destroy COMPLETE",
            0x209db0f0,
            Some(0),
            Some(1),
            None,
            InitPhase::Destroy,
        ),
        (
            "vm:447:447 [0] NCCL INFO ncclCommSplit comm 0x2cb3be70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 parent 0x23ebc600 splitCount 1 color 59908776 key 0- Init START",
            0x2cb3be70,
            Some(0),
            Some(1),
            None,
            InitPhase::Start,
        ),
    ];
    for (line, comm, rank, nranks, id, phase) in cases {
        match p(line) {
            Line::Nccl(_, Body::Init(i)) => {
                assert_eq!(
                    (i.comm, i.rank, i.nranks, i.comm_id, i.phase),
                    (comm, rank, nranks, id, phase),
                    "{line}"
                );
            }
            other => panic!("{line}: {other:?}"),
        }
    }
    match p(
        "vm:447:447 [0] NCCL INFO ncclCommSplit comm 0x2cb3be70 rank 0 nranks 1 cudaDev 0 nvmlDev 0 busId 60 parent 0x23ebc600 splitCount 1 color 59908776 key 0 - Init COMPLETE",
    ) {
        Line::Nccl(_, Body::Init(i)) => {
            assert_eq!(
                (i.parent, i.split_count, i.color),
                (Some(0x23ebc600), Some(1), Some(59908776))
            );
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn other_info_lines_are_not_init() {
    for l in [
        "vm:473:473 [0] NCCL INFO Init timings - ncclCommInitRankConfig: rank 0 nranks 1 total 0.55 (kernels 0.52)",
        "vm:473:473 [0] NCCL INFO Channel 00/64 : 0",
        "vm:473:473 [0] NCCL INFO enqueue.cc:2643 -> 4",
        "vm:473:473 [0] NCCL INFO NCCL version 2.28.9+cuda13.0",
        "vm:473:473 [0] NCCL INFO Foo: opCount 0 count 3",
    ] {
        assert_eq!(
            p(l),
            Line::Nccl(
                Head {
                    host: b"vm",
                    pid: 473,
                    tid: 473,
                    dev: Some(0),
                    prefix_rank: None,
                    prefix_local: None
                },
                Body::Other
            ),
            "{l}"
        );
    }
}

#[test]
fn warn_lines() {
    let w = |l| match p(l) {
        Line::Nccl(_, Body::Warn(w)) => (w.op, w.kind),
        other => panic!("{other:?}"),
    };
    assert_eq!(
        w(
            "[2026-12-02 16:09:41] vm:473:473 [0] misc/argcheck.cc:48 NCCL WARN Broadcast : invalid root 1 (root should be in the 0..1 range)"
        ),
        (Some(Func::Broadcast), WarnKind::InvalidRoot(1))
    );
    assert_eq!(
        w("h:9:9 [3] NCCL WARN Broadcast : invalid root 4 (valid roots are 0..=3)"),
        (Some(Func::Broadcast), WarnKind::InvalidRoot(4))
    );
    assert_eq!(
        w("h:9:9 [3] NCCL WARN Reduce: root 4 is out of range: valid roots are 0..=3"),
        (Some(Func::Reduce), WarnKind::InvalidRoot(4))
    );
    assert_eq!(
        w(
            "[2026-12-02 16:23:23] vm:447:447 [0] misc/argcheck.cc:52 NCCL WARN AllReduce : invalid type 42"
        ),
        (Some(Func::AllReduce), WarnKind::InvalidType(42))
    );
    assert_eq!(
        w(
            "[2026-12-02 16:23:23] vm:447:447 [0] misc/argcheck.cc:67 NCCL WARN AllReduce : reduction operation 42 unknown to this communicator"
        ),
        (Some(Func::AllReduce), WarnKind::InvalidOp(42))
    );
    assert_eq!(
        w("h:1:1 [0] misc/argcheck.cc:60 NCCL WARN AllReduce : invalid reduction operation 7"),
        (Some(Func::AllReduce), WarnKind::InvalidOp(7))
    );
    assert_eq!(
        w("h:1:1 [0] transport/net.cc:1 NCCL WARN Call to connect returned Connection refused"),
        (None, WarnKind::Connection)
    );
    // rankwise's checker's own lines (from an H200 journal), whatever they name
    for l in [
        "vm:4927:4927 [1] NCCL WARN ncclInvalidUsage on rank 1: deadlock: rank 1 waits in AllReduce (opCount 1) for rank 0, which waits in Send (opCount 1) for rank 1's Recv #0 from rank 0, which rank 1 has not made: neither can go on",
        "vm:1:1 [3] NCCL WARN ncclRemoteError on rank 3: watch: hang: the stream of rank 2 has not reached collective launch 2 (AllReduce #1) for 10 s",
        "vm:1:1 [0] NCCL WARN ncclInvalidUsage on rank 0: Broadcast: invalid root 4",
    ] {
        assert_eq!(w(l).1, WarnKind::Checker, "{l}");
    }
    // NCCL's words that only look alike are not the checker's
    for l in [
        "h:1:1 [0] NCCL WARN ncclInvalidUsage on rank: nothing",
        "h:1:1 [0] NCCL WARN nccl on rank 1: x",
        "h:1:1 [0] NCCL WARN ncclSystemError on rank 1 was seen",
    ] {
        assert_ne!(w(l).1, WarnKind::Checker, "{l}");
    }
}

#[test]
fn malformed_and_foreign_lines() {
    assert_eq!(p(""), Line::NotNccl);
    assert_eq!(p("ok [1, 10, 0] [0, 1, 2, 3, 4, 5]"), Line::NotNccl);
    // PyTorch's report of an NCCL error is read as such
    assert!(matches!(
        p(
            "bad root: DistBackendError('NCCL error in: /pytorch/torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp:3780, invalid argument"
        ),
        Line::Torch(Torch {
            event: TorchEvent::Error,
            ..
        })
    ));
    // a COLL line without NCCL's header, cut before its count
    assert_eq!(
        p("NCCL INFO AllReduce: opCount 0"),
        Line::Malformed(Broken::Call(BadField {
            field: "count",
            value: None
        }))
    );
    // required field missing / unreadable: which one, and what it held
    let call = |field, value: Option<&'static [u8]>| {
        Line::Malformed(Broken::Call(BadField { field, value }))
    };
    assert_eq!(
        p(
            "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 datatype 7 op 0 root 0 comm 0x5 [nranks=2] stream (nil)"
        ),
        call("count", None)
    );
    assert_eq!(
        p(
            "h:1:1 [0] NCCL INFO AllReduce: opCount zz sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm 0x5 [nranks=2] stream (nil)"
        ),
        call("opCount", Some(b"zz"))
    );
    assert_eq!(
        p(
            "h:1:1 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 0 comm"
        ),
        call("comm", None)
    );
    assert_eq!(
        p(
            "h:1:1 [0] NCCL INFO Send: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 2147483648 comm 0x5 [nranks=4294967296] stream (nil)"
        ),
        call("root", Some(b"2147483648"))
    );
    assert_eq!(
        p(
            "h:1:1 [0] NCCL INFO Send: opCount 0 sendbuff 0x1 recvbuff 0x1 count 1 datatype 7 op 0 root 2 comm 0x5 [nranks=4294967296] stream (nil)"
        ),
        call("[nranks=]", Some(b"4294967296"))
    );
    assert_eq!(
        BadField {
            field: "count",
            value: Some(b"x3")
        }
        .describe(),
        "count is 'x3', expected an unsigned 64-bit integer"
    );
    assert_eq!(
        BadField {
            field: "comm",
            value: None
        }
        .describe(),
        "comm is missing, expected a pointer (0x… or (nil))"
    );
    // an init line without its rank
    assert_eq!(
        p(
            "vm:473:473 [0] NCCL INFO ncclCommInitRankConfig comm 0x209db0f0 rank x nranks 1 cudaDev 0 nvmlDev 0 busId 60 commId 0x67c0057cd53cedc1 - Init COMPLETE"
        ),
        Line::Malformed(Broken::Init)
    );
}

#[test]
fn reads_back_every_line_cores_trace_writes() {
    use crate::core::RawCall;
    use crate::core::trace::{LinePrefix, coll_line, init_line, warn_line};
    let pre = LinePrefix {
        host: "node3",
        pid: 77,
        tid: 78,
        dev: 2,
    };
    for (i, func) in Func::ALL.into_iter().enumerate() {
        let call = RawCall {
            func,
            sendbuff: if func == Func::Recv {
                0
            } else {
                0x7f00_0000_1000
            },
            recvbuff: if func == Func::Send {
                0
            } else {
                0x7f00_0000_2000
            },
            count: 1000 + i,
            datatype: (i % 12) as i32,
            op: (i % 5) as i32,
            root: (i % 4) as i32,
        };
        let line = coll_line(&pre, &call, 0x1a + i as u64, 0x55aa_0000, 4);
        let (h, c) = coll(&line);
        assert_eq!(
            (h.host, h.pid, h.tid, h.dev),
            (&b"node3"[..], 77, 78, Some(2))
        );
        // Send logs its buffer under recvbuff
        let buffer = if func == Func::Send {
            call.sendbuff
        } else {
            call.recvbuff
        };
        assert_eq!(
            (c.op, c.op_count, c.count, c.datatype, c.redop, c.root),
            (
                func,
                Some(0x1a + i as u64),
                1000 + i as u64,
                call.datatype,
                call.op,
                call.root
            ),
            "{line}"
        );
        assert_eq!(c.recvbuff, buffer as u64, "{line}");
        assert_eq!((c.comm, c.nranks), (0x55aa_0000, Some(4)), "{line}");
    }
    match p(&init_line(&pre, 0x55aa_0000, 2, 4, 0xfeed)) {
        Line::Nccl(_, Body::Init(i)) => assert_eq!(
            (i.comm, i.rank, i.nranks, i.comm_id, i.phase),
            (
                0x55aa_0000,
                Some(2),
                Some(4),
                Some(0xfeed),
                InitPhase::Complete
            )
        ),
        other => panic!("{other:?}"),
    }
    let warn = warn_line(
        &pre,
        "Broadcast : invalid root 4 (root should be in the 0..4 range)",
    );
    match p(&warn) {
        Line::Nccl(_, Body::Warn(w)) => {
            assert_eq!(
                (w.op, w.kind),
                (Some(Func::Broadcast), WarnKind::InvalidRoot(4))
            )
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn numbers() {
    assert_eq!(parse_hex(b"0x7fd796e00000"), Some(0x7fd796e00000));
    assert_eq!(parse_hex(b"ffffffffffffffff"), Some(u64::MAX));
    assert_eq!(parse_hex(b"1ffffffffffffffff"), None);
    assert_eq!(parse_u64(b"18446744073709551615"), Some(u64::MAX));
    assert_eq!(parse_u64(b"18446744073709551616"), None);
    assert_eq!(parse_i64(b"-3"), Some(-3));
    assert_eq!(parse_i32(b"4294967296"), None);
    assert_eq!(parse_ptr(b"(nil)"), Some(0));
    assert_eq!(parse_ptr(b"22c2a4f0"), None);
}

#[test]
fn every_line_of_the_real_fixtures_is_classified() {
    let parser = Parser::new();
    for text in [
        include_str!("../../../tests/fixtures/nccl-2.28.9-1rank-init-coll.log"),
        include_str!("../../../tests/fixtures/nccl-2.28.9-1rank-torch-ctypes.log"),
    ] {
        for line in text.lines() {
            let parsed = parser.parse(line.as_bytes());
            assert!(!matches!(parsed, Line::Malformed(_)), "{line}");
            if line.contains(" NCCL INFO ") && line.contains(": opCount ") {
                assert!(matches!(parsed, Line::Nccl(_, Body::Coll(_))), "{line}");
            }
            if line.contains(" NCCL ") && line.contains(" - Init COMPLETE") {
                assert!(matches!(parsed, Line::Nccl(_, Body::Init(_))), "{line}");
            }
        }
    }
}

#[test]
fn warn_lines_are_sorted_by_cause() {
    let kind = |msg: &str| match p(&format!("h:1:1 [0] x.cc:1 NCCL WARN {msg}")) {
        Line::Nccl(_, Body::Warn(w)) => w.kind,
        other => panic!("{other:?}"),
    };
    for (msg, k) in [
        (
            "NET/IB : Got completion from peer 10.0.0.2<55921> with status=12 opcode=1 len=0 vendor err 129 (Send) localGid ::ffff:10.0.0.1",
            WarnKind::Network,
        ),
        ("NET/IB : Got async event : port error", WarnKind::Network),
        ("NET/Socket : socket progress error", WarnKind::Network),
        // NCCL's own size check between peers, over the network: a mismatch
        (
            "NET/IB : collective mismatch error, local size 1048576 remote size 524288",
            WarnKind::PeerSizeMismatch,
        ),
        (
            "NET/Socket : message truncated : receiving 4096 bytes instead of 2048",
            WarnKind::PeerSizeMismatch,
        ),
        (
            "Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 1a000",
            WarnKind::DuplicateGpu,
        ),
        ("Cuda failure 2 'out of memory'", WarnKind::OutOfMemory),
        ("Failed to CUDA calloc 6291456 bytes", WarnKind::OutOfMemory),
        (
            "Cuda failure 'an illegal memory access was encountered'",
            WarnKind::Cuda,
        ),
        (
            "socketStartConnect: Connect to 10.0.0.9<43211> failed : Connection refused",
            WarnKind::Connection,
        ),
        (
            "Bootstrap : no socket interface found",
            WarnKind::Connection,
        ),
        (
            "Mismatched NCCL version detected : rank 2 version 22105 rank 0 version 21903",
            WarnKind::VersionMismatch,
        ),
        ("NET/IB : No device found.", WarnKind::Other),
        (
            "Could not find real path of /sys/class/pci_bus/0000:00/../../0000:00:05.0",
            WarnKind::Other,
        ),
    ] {
        assert_eq!(kind(msg), k, "{msg}");
    }
    assert_eq!(super::ib_status(b"with status=12 opcode=1"), Some(12));
    assert!(
        super::ib_status_name(12)
            .unwrap()
            .contains("retry counter exceeded")
    );
}

#[test]
fn pytorch_watchdog_lines() {
    let t = |l: &'static str| match p(l) {
        Line::Torch(t) => t,
        other => panic!("{l}: {other:?}"),
    };
    let a = t(
        "[rank7]:[E816 03:12:17.412007 ProcessGroupNCCL.cpp:632] [Rank 7] Watchdog caught collective operation timeout: WorkNCCL(SeqNum=80078, OpType=BROADCAST, NumelIn=5056, NumelOut=5056, Timeout(ms)=600000) ran for 600026 milliseconds before timing out.",
    );
    assert_eq!(a.rank, Some(7));
    assert_eq!(
        a.event,
        TorchEvent::Timeout {
            seq: 80078,
            op: b"BROADCAST",
            numel_in: Some(5056),
            numel_out: Some(5056),
            timeout_ms: Some(600000),
            ran_ms: Some(600026)
        }
    );
    let b = t(
        "[rank1]:[E1105 11:02:01.6 ProcessGroupNCCL.cpp:1785] [PG ID 2 PG GUID 5(tp_group) Rank 1] failure detected by watchdog at work sequence id: 11 PG status: last enqueued work: 10, last completed work: 9",
    );
    assert_eq!((b.rank, b.pg), (Some(1), Some(&b"tp_group"[..])));
    assert_eq!(
        b.event,
        TorchEvent::Progress {
            at: Some(11),
            enqueued: 10,
            completed: Some(9)
        }
    );
    let c = t(
        "[E816 03:12:17 ProcessGroupNCCL.cpp:1664] [Rank 3] Exception (either an error or timeout) detected by watchdog at work: 80078, last enqueued NCCL work: 80078, last completed NCCL work: 80077.",
    );
    assert_eq!(c.rank, Some(3));
    assert!(matches!(
        c.event,
        TorchEvent::Progress {
            enqueued: 80078,
            completed: Some(80077),
            ..
        }
    ));
    // the same words in other output are not a watchdog line
    assert_eq!(p("epoch 3: WorkNCCL( is a class name"), Line::NotNccl);
}

#[test]
fn coll_lines_without_a_header_and_with_srun_labels() {
    match p(
        "AllReduce: opCount 1f sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x3a90 [nranks=2] stream 0x4e20",
    ) {
        Line::Nccl(h, Body::Coll(c)) => {
            assert_eq!((h.host, h.pid, h.dev), (&b""[..], 0, None));
            assert_eq!(
                (c.op, c.op_count, c.comm, c.complete),
                (Func::AllReduce, Some(0x1f), 0x3a90, true)
            );
        }
        other => panic!("{other:?}"),
    }
    let (h, _) = coll(
        "3: node2:44:45 [1] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x5 [nranks=4] stream (nil)",
    );
    assert_eq!((h.prefix_rank, h.dev), (Some(3), Some(1)));
    // a line cut before `stream` parses, and says it is not complete
    let (_, c) = coll(
        "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x5",
    );
    assert!(!c.complete);
    // another process's line inside this one
    match p(
        "h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7fh:2:9 [1] NCCL INFO AllReduce: opCount 1 sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x6 [nranks=2] stream (nil)",
    ) {
        Line::Interleaved { line, split } => {
            assert_eq!(
                &line[..split],
                b"h:1:1 [0] NCCL INFO AllReduce: opCount 1 sendbuff 0x7f"
            );
            assert!(line[split..].starts_with(b"h:2:9 [1] NCCL INFO AllReduce"));
        }
        other => panic!("{other:?}"),
    }
}
