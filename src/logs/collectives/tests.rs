//! The collective order on small hand-written logs.

use crate::logs::analyze;
use crate::logs::findings::FindingKind;
use crate::logs::ingest::collect_bytes;
use crate::logs::testlog::{call, init};

#[test]
fn agreeing_ranks_have_no_divergence() {
    let mut t = String::new();
    for r in 0..4 {
        init(&mut t, r, 4, 0xabc);
    }
    for k in 0..10 {
        for r in 0..4 {
            call(&mut t, r, 4, "AllReduce", k, 100 + k, 7, 0, 0);
        }
    }
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    assert_eq!(a.problems, 0, "{:#?}", a.findings);
    assert!(a.verdict.starts_with("no divergence"), "{}", a.verdict);
    assert_eq!(a.communicators.len(), 1);
    assert_eq!(a.communicators[0].ranks_seen, [0, 1, 2, 3]);
    assert_eq!(a.communicators[0].agreed_collectives, 10);
    assert_eq!(a.communicators[0].members[2].launches, 10);
}

#[test]
fn a_stopped_rank_is_named_with_its_position() {
    let mut t = String::new();
    for r in 0..4 {
        init(&mut t, r, 4, 0xabc);
    }
    for k in 0..10 {
        for r in 0..4 {
            if r == 3 && k >= 7 {
                continue;
            }
            call(&mut t, r, 4, "AllReduce", k, 1 << 20, 7, 0, 0);
        }
    }
    // nothing says the job hung: the logs end apart, no fault
    let c = collect_bytes("x", t.as_bytes());
    let a = analyze(&c);
    let f = &a.findings[0];
    assert_eq!(
        (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
        (FindingKind::LogsEndApart, Some(7), vec![3], vec![0, 1, 2])
    );
    assert_eq!(a.problems, 0);
    assert_eq!(
        a.verdict,
        "no divergence: 1 communicator, 4 rank streams, 37 calls agree; the logs end with rank 3 3 calls behind ranks 0-2 on commId 0xabc (ordinary skew if the job was running; if it hung here, rank 3 never issued AllReduce #7 (count 1048576 float32 sum, opCount 7))"
    );
    // told it hung, the same logs name where
    let a = crate::logs::analyze_with(&c, &crate::logs::Settings { hung: true });
    let f = &a.findings[0];
    assert_eq!(
        (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
        (FindingKind::Stopped, Some(7), vec![3], vec![0, 1, 2])
    );
    assert_eq!(
        a.verdict,
        "hang: rank 3 never issued AllReduce #7 (count 1048576 float32 sum, opCount 7) on commId 0xabc where ranks 0-2 wait (the job hung, as --hung says)"
    );
}

#[test]
fn mismatches_name_the_minority() {
    for (field, kind) in [
        ("count", FindingKind::CountMismatch),
        ("dt", FindingKind::DatatypeMismatch),
        ("op", FindingKind::RedopMismatch),
        ("root", FindingKind::RootMismatch),
        ("kind", FindingKind::OpMismatch),
    ] {
        let mut t = String::new();
        for r in 0..3 {
            init(&mut t, r, 3, 0x5);
        }
        for k in 0..6u64 {
            for r in 0..3 {
                let odd = r == 1 && k == 4;
                let op = if field == "kind" && odd {
                    "Broadcast"
                } else {
                    "Reduce"
                };
                let count = if field == "count" && odd { 9 } else { 8 };
                let dt = if field == "dt" && odd { 9 } else { 7 };
                let redop = if field == "op" && odd { 2 } else { 0 };
                let root = if field == "root" && odd { 2 } else { 0 };
                call(&mut t, r, 3, op, k, count, dt, redop, root);
            }
        }
        let a = analyze(&collect_bytes("x", t.as_bytes()));
        let f = &a.findings[0];
        assert_eq!(
            (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
            (kind, Some(4), vec![1], vec![0, 2]),
            "{field}: {}",
            a.verdict
        );
        assert!(
            a.verdict.starts_with("contract mismatch: "),
            "{}",
            a.verdict
        );
    }
}

#[test]
fn a_swap_of_the_last_two_calls_claims_no_match_after_them() {
    let mut t = String::new();
    for r in 0..3 {
        init(&mut t, r, 3, 0x7);
    }
    for k in 0..6u64 {
        for r in 0..3 {
            // rank 1 makes the last two calls in the other order
            let swapped = r == 1 && k >= 4;
            let op = if (k == 5) != swapped {
                "Broadcast"
            } else {
                "AllReduce"
            };
            call(&mut t, r, 3, op, k, 64, 7, 0, 0);
        }
    }
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    assert_eq!(
        a.findings[0].kind,
        FindingKind::Reordered,
        "{:#?}",
        a.findings
    );
    assert!(
        a.verdict
            .contains("no collective follows them on any of these ranks"),
        "{}",
        a.verdict
    );
    assert!(!a.verdict.contains(" match "), "{}", a.verdict);
}

#[test]
fn zero_count_collectives_are_listed_not_errors() {
    let mut t = String::new();
    for r in 0..2 {
        init(&mut t, r, 2, 0x9);
    }
    for r in 0..2 {
        call(&mut t, r, 2, "AllReduce", 0, 4, 7, 0, 0);
        call(&mut t, r, 2, "AllReduce", 1, 0, 7, 0, 0);
        call(&mut t, r, 2, "AllReduce", 1, 4, 7, 0, 0);
    }
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    assert_eq!(a.problems, 0);
    let z: Vec<_> = a
        .findings
        .iter()
        .filter(|f| f.kind == FindingKind::ZeroCount)
        .collect();
    assert_eq!(z.len(), 1);
    assert_eq!(z[0].position, Some(1));
    // the zero-count call is not a launch
    assert_eq!(a.communicators[0].members[0].launches, 2);
    assert_eq!(a.communicators[0].members[0].zero_count, 1);
}

/// A program of six collectives (NCCL names, count, datatype, root),
/// with the opCount NCCL prints for each: the zero-count #1 does not
/// advance it. Ranks in `skipping` leave out `#3`.
fn program(nranks: u32, skipping: &[u32]) -> String {
    let calls: [(&str, u64, i32, i32, u64); 6] = [
        ("AllReduce", 8, 7, 0, 0),
        ("AllReduce", 0, 7, 0, 1),
        ("AllGather", 8, 7, 0, 1),
        ("Broadcast", 4, 7, 0, 2),
        ("Broadcast", 4, 7, 2, 3),
        ("AllReduce", 1, 7, 0, 4),
    ];
    let mut t = String::new();
    for r in 0..nranks {
        init(&mut t, r, nranks, 0xabc);
    }
    for (k, (op, count, dt, root, _)) in calls.iter().enumerate() {
        for r in 0..nranks {
            if k == 3 && skipping.contains(&r) {
                continue;
            }
            // a rank that skipped #3 launched one call fewer
            let behind = u64::from(k > 3 && skipping.contains(&r));
            call(
                &mut t,
                r,
                nranks,
                op,
                calls[k].4 - behind,
                *count,
                *dt,
                0,
                *root,
            );
        }
    }
    t
}

/// The 1-based line of the first line holding `needle`.
fn line_of(t: &str, needle: &str) -> usize {
    t.lines().position(|l| l.contains(needle)).unwrap() + 1
}

#[test]
fn a_rank_that_skips_a_call_and_goes_on_is_said_to_have_skipped_it() {
    let t = program(4, &[2]);
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    let line = line_of(&t, "[0] NCCL INFO Broadcast: opCount 2 ");
    assert_eq!(
        a.verdict,
        format!(
            "likely hang: rank 2 skipped Broadcast #3 (count 4 float32 root 0, called by ranks 0-1,3 at opCount 2, x:{line}) on commId 0xabc: its calls from #3 on match the others' from #4 on; from there its opCount runs 1 behind theirs"
        )
    );
    let f = &a.findings[0];
    assert_eq!(
        (f.kind, f.position, f.ranks.clone(), f.other_ranks.clone()),
        (FindingKind::Skipped, Some(3), vec![2], vec![0, 1, 3])
    );
    let d = a.communicators[0].divergence.as_ref().unwrap();
    assert_eq!((d.position, d.kind), (3, FindingKind::Skipped));
    assert_eq!(d.departures.len(), 1);
    let dep = &d.departures[0];
    assert_eq!(
        (
            dep.ranks.clone(),
            dep.kind,
            dep.calls,
            dep.realigned,
            dep.lined_up
        ),
        (vec![2], FindingKind::Skipped, 1, Some([3, 4]), 2)
    );
    // three positions agree: #0-#2
    assert_eq!(a.communicators[0].agreed_collectives, 3);
}

#[test]
fn with_two_ranks_a_skip_is_also_an_extra_call_on_the_other() {
    let t = program(2, &[1]);
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    let line = line_of(&t, "[0] NCCL INFO Broadcast: opCount 2 ");
    assert_eq!(
        a.verdict,
        format!(
            "likely hang: rank 1 skipped Broadcast #3 (count 4 float32 root 0, called by rank 0 at opCount 2, x:{line}) on commId 0xabc, or rank 0 made an extra call: rank 1's calls from #3 on match rank 0's from #4 on; from there rank 1's opCount runs 1 behind rank 0's"
        )
    );
}

#[test]
fn several_ranks_skipping_the_same_call_are_named_together() {
    let t = program(8, &[1, 5, 6]);
    let a = analyze(&collect_bytes("x", t.as_bytes()));
    assert!(
            a.verdict.starts_with(
                "likely hang: ranks 1,5-6 skipped Broadcast #3 (count 4 float32 root 0, called by ranks 0,2-4,7 at opCount 2, "
            ),
            "{}",
            a.verdict
        );
    assert!(
            a.verdict
                .ends_with(": their calls from #3 on match the others' from #4 on; from there their opCount runs 1 behind the others'"),
            "{}",
            a.verdict
        );
}
