//! `rankwise explain` prints the contract's sizes, equations, roles, roots,
//! C call and bandwidth factor, and explains impossible calls.

mod common;
use common::rankwise;

fn explain(args: &[&str]) -> String {
    let mut all = vec!["explain"];
    all.extend_from_slice(args);
    rankwise(&all).expect(0).stdout
}

fn has(text: &str, needle: &str) {
    assert!(text.contains(needle), "missing `{needle}` in:\n{text}");
}

#[test]
fn all_gather_sizes_and_in_place_offset() {
    let t = explain(&[
        "all_gather",
        "--ranks",
        "4",
        "--count",
        "3",
        "--in-place",
        "--rank",
        "2",
    ]);
    has(
        &t,
        "sendcount = 3: the elements each rank contributes; every recvbuff holds N × sendcount = 12 elements (48 bytes).",
    );
    has(
        &t,
        "0     3 elements (12 bytes), read  12 elements (48 bytes), written",
    );
    has(&t, "sendbuff == recvbuff + rank*sendcount");
    has(&t, "rank 2: sendbuff = recvbuff + 6 elements (24 bytes)");
    has(
        &t,
        "so on rank 2 sendbuff is block 2 of recvbuff's 4 blocks",
    );
    has(&t, "recvbuff [0→2 | 1→2 | 2→2 | 3→2]");
    has(
        &t,
        "ncclAllGather(recvbuff + 6, recvbuff, 3, ncclInt32, comm, stream);",
    );
    has(&t, "size = 48 bytes per call");
    has(&t, "busbw = algbw × 0.75 at N=4");
}

#[test]
fn reduce_scatter_in_double() {
    let t = explain(&[
        "reduce_scatter",
        "-n",
        "8",
        "-c",
        "5",
        "--dtype",
        "double",
        "--in-place",
        "--rank",
        "3",
    ]);
    has(
        &t,
        "every sendbuff holds N × recvcount = 40 elements (320 bytes)",
    );
    has(&t, "recvbuff == sendbuff + rank*recvcount");
    has(&t, "rank 3: recvbuff = sendbuff + 15 elements (120 bytes)");
    has(
        &t,
        "ncclReduceScatter(sendbuff, sendbuff + 15, 5, ncclFloat64, ncclSum, comm, stream);",
    );
    has(&t, "busbw = algbw × 0.875 at N=8");
}

#[test]
fn rooted_ops_show_roles_per_rank() {
    let t = explain(&[
        "gather", "-n", "4", "-c", "3", "--dtype", "float", "--root", "2",
    ]);
    has(
        &t,
        "2 (root)  3 elements (12 bytes), read  12 elements (48 bytes), written",
    );
    has(
        &t,
        "1         3 elements (12 bytes), read  unused (may be NULL)",
    );
    has(&t, "recvbuff unused (may be NULL): rank(s) 0-1,3");
    has(&t, "valid roots: 0-3");
    has(
        &t,
        "ncclGather(sendbuff, NULL, 3, ncclFloat32, 2, comm, stream);",
    );
    let t = explain(&["reduce", "-n", "4", "-c", "2", "--root", "3", "--op", "max"]);
    has(
        &t,
        "recvbuff undefined after the call (may be NULL): rank(s) 0-2",
    );
    has(
        &t,
        "ncclReduce(sendbuff, NULL, 2, ncclInt32, ncclMax, 3, comm, stream);",
    );
    let t = explain(&["all_reduce", "-n", "4", "-c", "1000", "--dtype", "bf16"]);
    has(
        &t,
        "count = 1000: the elements of every rank's sendbuff and recvbuff (1000 elements (2000 bytes))",
    );
    has(&t, "busbw = algbw × 1.5 at N=4");
}

#[test]
fn impossible_calls_are_explained_not_crashed_on() {
    let t = explain(&["broadcast", "-n", "4", "-c", "3", "--root", "4"]);
    has(
        &t,
        "REJECTED on every rank at the argument check (ncclInvalidArgument):",
    );
    has(
        &t,
        "Broadcast: root 4 is out of range: valid roots are 0..=3 for a communicator of 4 ranks",
    );
    let t = explain(&["all_to_all", "-n", "4", "-c", "3", "--in-place"]);
    has(&t, "AlltoAll has no in-place form in the API");
    has(&t, "rankwise rejects the call (ncclInvalidArgument)");
    let t = explain(&[
        "scatter",
        "-n",
        "4",
        "-c",
        "3",
        "--root",
        "1",
        "--in-place",
        "--rank",
        "2",
    ]);
    has(
        &t,
        "Scatter has an in-place form on the root only (rank 1: recvbuff == sendbuff + root*count).",
    );
}

#[test]
fn bad_input_is_refused_clearly() {
    let e = rankwise(&["explain", "all_reduce", "-n", "4", "-c", "3", "--rank", "9"]).expect(1);
    assert!(
        e.stderr
            .contains("--rank 9 is not a rank of a 4-rank communicator (ranks are 0..=3)"),
        "{}",
        e.stderr
    );
    let e = rankwise(&["explain", "all_reduce", "-n", "0", "-c", "3"]).expect(1);
    assert!(e.stderr.contains("--ranks must be at least 1"));
    let e = rankwise(&[
        "explain",
        "all_gather",
        "-n",
        "4096",
        "-c",
        "18446744073709551615",
    ])
    .expect(1);
    assert!(e.stderr.contains("too large"), "{}", e.stderr);
    let e = rankwise(&[
        "explain",
        "all_reduce",
        "-n",
        "4",
        "-c",
        "3",
        "--dtype",
        "complex",
    ])
    .expect(2);
    assert!(e.stderr.contains("invalid value 'complex'"));
}
