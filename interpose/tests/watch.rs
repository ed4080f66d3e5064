//! Watch mode (`RANKWISE_CHECK=watch`) in front of a stand-in NCCL that
//! returns at once and moves nothing, as a GPU NCCL's calls return before
//! the work is done: every call is forwarded, and each bug class a program
//! makes is named on every rank within a second, the communicator then
//! failing (calls refused, `ncclCommGetAsyncError` reporting it); a
//! correct program is never named; a bug in the last calls before
//! `ncclCommDestroy` is named too; a hang every rank's calls agree on
//! (one rank's stream stuck before a launch, or a launch no rank finishes)
//! is named from the streams' events once it lasts `RANKWISE_TIMEOUT`, in
//! watch mode and by strict mode's completion check.
//! Four rank processes per test.

#[path = "support/programs.rs"]
mod programs;
#[path = "support/ranks.rs"]
mod ranks;
#[path = "support/standin.rs"]
mod support_standin;
#[path = "support/sym.rs"]
mod support_sym;

use ranks::*;

/// The rank program: runs only in the processes `run` starts.
#[test]
fn rank_main() {
    programs::rank_main();
}

fn watched(bug: &str, end: bool) -> Run {
    let mut env = vec![
        ("RANKWISE_CHECK", "watch"),
        ("RANKWISE_STANDIN_NULL", "1"),
        ("RANKWISE_TEST_BUG", bug),
    ];
    if end {
        env.push(("RANKWISE_TEST_END", "1"));
    }
    let run = run("watch", 4, true, &env);
    run.assert_ok();
    run
}

/// Rank `r`'s watch error line (without its comm), and how long after
/// the bug its program's calls were refused (ms).
fn named(run: &Run, r: usize) -> (String, u64) {
    let errs = run.errors(r);
    let first = errs.first().unwrap_or_else(|| {
        panic!(
            "rank {r} said nothing:\n{}\n{}",
            run.stdout(r),
            run.stderr(r)
        )
    });
    let line = first.split(" (comm ").next().unwrap().to_string();
    let out = run.stdout(r);
    let seen = out
        .lines()
        .find_map(|l| l.strip_prefix("watch rc "))
        .unwrap_or_else(|| panic!("rank {r}: {out}"));
    // `5 async 5 after 230 ms and 21 calls: ...`
    let words: Vec<&str> = seen.split(' ').collect();
    assert_eq!(words[0], "5", "rank {r}: the refused call's code: {seen}");
    assert_eq!(words[2], "5", "rank {r}: ncclCommGetAsyncError: {seen}");
    (line, words[4].parse().unwrap())
}

fn every_rank_names(bug: &str, what: &str, sides: &str) {
    let run = watched(bug, false);
    for r in 0..4 {
        let (line, ms) = named(&run, r);
        let sides = match sides {
            "" => String::new(),
            s => format!(" [{s}]"),
        };
        assert_eq!(
            line,
            format!("rankwise: ncclInvalidUsage on rank {r}: watch: {what}{sides}")
        );
        assert!(ms < 1000, "rank {r}: named after {ms} ms");
    }
}

#[test]
fn a_count_mismatch_is_named_on_every_rank() {
    every_rank_names(
        "count",
        "collective launch 11 on this communicator differs: AllReduce #15: count differs: ranks 0,1,3 pass 4, rank 2 passes 5",
        "ranks 0,1,3: AllReduce count 4 int32 sum; rank 2: AllReduce count 5 int32 sum",
    );
}

#[test]
fn a_skipped_collective_is_named() {
    every_rank_names(
        "skip",
        "collective launch 11 on this communicator differs: rank 2 skipped Broadcast #15 (its next collective is AllReduce #16, which the others make after it)",
        "ranks 0,1,3: Broadcast count 4 int32 root 0; rank 2: AllReduce count 4 int32 sum",
    );
}

#[test]
fn an_extra_collective_is_named() {
    every_rank_names(
        "extra",
        "collective launch 11 on this communicator differs: rank 1 made an extra Reduce #15 before AllGather #15",
        "ranks 0,2,3: AllGather count 4 int32; rank 1: Reduce count 4 int32 sum root 0",
    );
}

#[test]
fn two_collectives_in_another_order_are_named() {
    every_rank_names(
        "swap",
        "collective launch 11 on this communicator differs: rank 0 made Broadcast #15 and AllGather #16 in the other order",
        "ranks 1,2,3: Broadcast count 4 int32 root 0; rank 0: AllGather count 4 int32",
    );
}

#[test]
fn an_unmatched_send_is_named() {
    every_rank_names(
        "unmatched",
        "Send/Recv pairs do not match, so NCCL can never complete them in order: rank 0's Send #6 to rank 1 has no matching Recv: rank 1 made 5 Recvs from rank 0",
        "rank 0: 6 Sends (the last: count 16 int32) to rank 1; rank 1: 5 Recvs (the last: count 8 int32) from rank 0",
    );
}

#[test]
fn a_rank_that_stops_calling_is_named_after_the_timeout() {
    let run = run(
        "watch",
        4,
        true,
        &[
            ("RANKWISE_CHECK", "watch"),
            ("RANKWISE_STANDIN_NULL", "1"),
            ("RANKWISE_TEST_BUG", "late"),
            ("RANKWISE_TIMEOUT", "1"),
        ],
    );
    run.assert_ok();
    for r in 0..4 {
        let (line, ms) = named(&run, r);
        assert_eq!(
            line,
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: watch: rank 3 has made no collective launch past 10 for 1.0 s, while ranks 0,1,2 made launch 11 (AllReduce #15): NCCL waits for rank 3 there"
            )
        );
        // named after the timeout, well before rank 3 comes back
        if r < 3 {
            assert!((1000..2500).contains(&ms), "rank {r}: named after {ms} ms");
        }
    }
}

#[test]
fn a_correct_program_is_never_named() {
    let run = watched("clean", false);
    for r in 0..4 {
        assert_eq!(run.errors(r), Vec::<String>::new(), "rank {r}");
        let out = run.stdout(r);
        assert!(out.contains("watch rc 0 async 0 after"), "rank {r}: {out}");
    }
}

#[test]
fn sends_and_recvs_that_differ_as_the_last_calls_before_destroy_are_named() {
    // no collective follows them, nor does either wait (the no-op NCCL):
    // only the ends of the ranks' calls show the pair
    let run = watched("lastsplit", true);
    for r in 0..4 {
        assert_eq!(
            run.errors(r)
                .first()
                .map(|e| e.split(" (comm ").next().unwrap().to_string()),
            Some(format!(
                "rankwise: ncclInvalidUsage on rank {r}: watch: Send/Recv pairs do not match, so NCCL can never complete them in order: the Sends of rank 0 to rank 1 and the Recvs of rank 1 from rank 0 differ in count or datatype [rank 0: 6 Sends (the last: count 16 int32) to rank 1; rank 1: 6 Recvs (the last: count 8 int32) from rank 0]"
            )),
            "rank {r}: {}",
            run.stderr(r)
        );
        assert!(run.stdout(r).contains("watch ended"), "rank {r}");
    }
}

#[test]
fn a_bug_in_the_last_calls_before_destroy_is_named() {
    let run = watched("count", true);
    for r in 0..4 {
        let errs = run.errors(r);
        assert!(
            errs.first().is_some_and(|e| e.contains(
                "watch: collective launch 11 on this communicator differs: AllReduce #15: count differs"
            )),
            "rank {r}: {errs:?}\n{}",
            run.stderr(r)
        );
        assert!(run.stdout(r).contains("watch ended"), "rank {r}");
    }
}

/// Rank `r`'s error line and how long after its sixth call the
/// communicator failed with code `code` (ms), in a run of the `stuck`
/// program.
fn hung(run: &Run, r: usize, code: i32) -> (String, u64) {
    let errs = run.errors(r);
    let line = errs
        .first()
        .unwrap_or_else(|| panic!("rank {r} said nothing:\n{}", run.stderr(r)))
        .split(" (comm ")
        .next()
        .unwrap()
        .to_string();
    let out = run.stdout(r);
    let ms = out
        .lines()
        .find_map(|l| l.strip_prefix(&format!("stuck async {code} after ")))
        .and_then(|l| l.strip_suffix(" ms"))
        .unwrap_or_else(|| panic!("rank {r}: ncclCommGetAsyncError never said {code}: {out}"));
    (line, ms.parse().unwrap())
}

/// `ncclRemoteError` (what a hang is on NCCL 2.28, which has no
/// `ncclTimeout`) and `ncclInvalidUsage`.
const REMOTE_ERROR: i32 = 6;
const INVALID_USAGE: i32 = 5;

fn stuck(bug: &str) -> Run {
    stuck_in("watch", bug)
}

/// The `stuck` program with `bug` in mode `mode` (`full`: strict mode,
/// whose completion check runs watch mode's rounds beside the agreement).
fn stuck_in(mode: &str, bug: &str) -> Run {
    let run = run(
        "stuck",
        4,
        true,
        &[
            ("RANKWISE_CHECK", mode),
            ("RANKWISE_TEST_BUG", bug),
            ("RANKWISE_TIMEOUT", "2"),
            ("RANKWISE_STANDIN_TIMEOUT", "30"),
        ],
    );
    run.assert_ok();
    run
}

/// Runs the `stuck` program with `bug` and checks every rank's hang line:
/// after `rankwise: ncclRemoteError on rank R: watch: hang: `, `head`, a
/// duration of 2.x s, then `tail`; named after the threshold (2 s), long
/// before the stand-in gives up (30 s). In strict mode (`full`) the line
/// has no `watch: `.
fn every_rank_hung(bug: &str, head: &str, tail: &str) {
    every_rank_hung_in("watch", bug, head, tail);
}

fn every_rank_hung_in(mode: &str, bug: &str, head: &str, tail: &str) {
    let run = stuck_in(mode, bug);
    let watch = if mode == "watch" { "watch: " } else { "" };
    for r in 0..4 {
        let (line, ms) = hung(&run, r, REMOTE_ERROR);
        let start = format!("rankwise: ncclRemoteError on rank {r}: {watch}hang: {head} for 2.");
        assert!(line.starts_with(&start), "rank {r}: {line}");
        assert!(line.ends_with(tail), "rank {r}: {line}");
        assert!((2000..8000).contains(&ms), "rank {r}: failed after {ms} ms");
        println!("rank {r}: named after {ms} ms");
    }
}

#[test]
fn a_kernel_that_never_ends_on_one_rank_is_named_on_every_rank() {
    // every rank made the same six calls: only the streams tell
    every_rank_hung(
        "kernel",
        "the stream of rank 2 has not reached collective launch 6 (AllReduce #5)",
        " s: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); ranks 0,1,3 wait inside it for rank 2",
    );
}

#[test]
fn a_launch_no_rank_finishes_is_named_as_a_hang_in_nccl() {
    every_rank_hung(
        "network",
        "every rank has been inside collective launch 6 (AllReduce #5)",
        " s and it has not finished; no rank's own earlier work holds it up: NCCL or the network between the ranks does (NCCL_DEBUG=INFO names the transport)",
    );
}

/// Strict mode agreed the launch on every rank, so its agreement sees
/// nothing wrong: its completion check (the same streams' events and
/// rounds) names the hang.
#[test]
fn strict_mode_names_a_kernel_that_never_ends_and_a_launch_no_rank_finishes() {
    every_rank_hung_in(
        "full",
        "kernel",
        "the stream of rank 2 has not reached collective launch 6 (AllReduce #5)",
        " s: work queued before it on that stream has not finished (a kernel that does not end, or a call that waits on another communicator); ranks 0,1,3 wait inside it for rank 2",
    );
    every_rank_hung_in(
        "full",
        "network",
        "every rank has been inside collective launch 6 (AllReduce #5)",
        " s and it has not finished; no rank's own earlier work holds it up: NCCL or the network between the ranks does (NCCL_DEBUG=INFO names the transport)",
    );
}

#[test]
fn a_send_where_the_others_make_a_collective_is_a_stall_not_a_hang() {
    // rank 0's Send never finishes, nor does the others' AllReduce: but
    // rank 0 never made that AllReduce, so it is named for that
    let run = stuck("isend");
    for r in 0..4 {
        let (line, ms) = hung(&run, r, INVALID_USAGE);
        assert_eq!(
            line,
            format!(
                "rankwise: ncclInvalidUsage on rank {r}: watch: rank 0 has made no collective launch past 5 for 2.0 s, while ranks 1,2,3 made launch 6 (AllReduce #5): NCCL waits for rank 0 there"
            )
        );
        assert!((2000..8000).contains(&ms), "rank {r}: failed after {ms} ms");
    }
}

/// Runs the `stuck` program with `bug` and checks that every rank says
/// `rankwise: ncclInvalidUsage on rank R: watch: ` then `what` (the cause,
/// then both sides in brackets), within
/// the threshold's few rounds (2 s) and long before the stand-in gives up.
fn every_rank_told_unmatched(bug: &str, what: &str) {
    let run = stuck(bug);
    for r in 0..4 {
        let (line, ms) = hung(&run, r, INVALID_USAGE);
        assert_eq!(
            line,
            format!("rankwise: ncclInvalidUsage on rank {r}: watch: {what}")
        );
        assert!((2000..8000).contains(&ms), "rank {r}: failed after {ms} ms");
        println!("rank {r}: named after {ms} ms");
    }
}

#[test]
fn a_recv_with_no_send_and_no_collective_after_is_named() {
    // the program's last launch is rank 1's Recv: no cut follows it, only
    // its unfinished flight tells
    every_rank_told_unmatched(
        "recv",
        "Send/Recv pairs do not match, so NCCL can never complete them in order: rank 1's Recv #1 from rank 0 has no matching Send: rank 0 made 0 Sends to rank 1 [rank 0: 0 Sends to rank 1; rank 1: 1 Recv (the last: count 16 int32) from rank 0]",
    );
}

#[test]
fn alltoallv_splits_with_no_collective_after_are_named() {
    every_rank_told_unmatched(
        "splits",
        "Send/Recv pairs do not match, so NCCL can never complete them in order: the Sends of rank 0 to rank 2 and the Recvs of rank 2 from rank 0 differ in count or datatype [rank 0: 1 Send (the last: count 3 int32) to rank 2; rank 2: 1 Recv (the last: count 5 int32) from rank 0]",
    );
}
