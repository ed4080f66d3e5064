//! `rankwise run <op> --json` for every op, checked against closed-form
//! values written here from the encoding `source*10000 + block*100 + offset`.

mod common;
use common::rankwise;
use serde_json::{Value, json};

const N: i64 = 4;
const Q: i64 = 3;

fn run_json(args: &[&str]) -> Value {
    let mut all = vec!["run"];
    all.extend_from_slice(args);
    all.push("--json");
    rankwise(&all).expect(0).json()
}

fn ints(v: impl IntoIterator<Item = i64>) -> Value {
    Value::Array(v.into_iter().map(|x| json!(x)).collect())
}

/// The encoded input of rank s: one block of q, or N blocks by destination.
fn enc(s: i64, block: i64, o: i64) -> i64 {
    s * 10000 + block * 100 + o
}

#[test]
fn all_reduce_sums_every_rank() {
    let v = run_json(&[
        "all_reduce",
        "--ranks",
        "4",
        "--count",
        "3",
        "--dtype",
        "int64",
    ]);
    assert_eq!(v["op"], "all_reduce");
    assert_eq!(v["ranks"], 4);
    assert_eq!(v["count"], 3);
    assert_eq!(v["dtype"], "int64");
    assert_eq!(v["redop"], "sum");
    assert_eq!(v["root"], Value::Null);
    assert_eq!(v["in_place"], false);
    assert_eq!(v["error"], Value::Null);
    for s in 0..N {
        assert_eq!(v["inputs"][s as usize], ints((0..Q).map(|o| enc(s, 0, o))));
    }
    // Σ_s (s*10000 + j) = 10000·N(N-1)/2 + N·j
    let want = ints((0..Q).map(|j| 10000 * N * (N - 1) / 2 + N * j));
    for r in 0..N as usize {
        assert_eq!(v["outputs"][r], want);
    }
    // the other reductions, in place
    let max = run_json(&[
        "all_reduce",
        "-n",
        "4",
        "-c",
        "3",
        "--op",
        "max",
        "--in-place",
    ]);
    assert_eq!(max["outputs"][2], ints((0..Q).map(|j| enc(N - 1, 0, j))));
    let min = run_json(&["all_reduce", "-n", "4", "-c", "3", "--op", "min"]);
    assert_eq!(min["outputs"][1], ints((0..Q).map(|j| enc(0, 0, j))));
    let avg = run_json(&["all_reduce", "-n", "4", "-c", "3", "--op", "avg"]);
    assert_eq!(
        avg["outputs"][0],
        ints((0..Q).map(|j| (10000 * N * (N - 1) / 2 + N * j) / N))
    );
    let prod = run_json(&[
        "all_reduce",
        "-n",
        "2",
        "-c",
        "2",
        "--op",
        "prod",
        "--dtype",
        "int64",
    ]);
    // (0 + j)·(10000 + j)
    assert_eq!(prod["outputs"][1], ints((0..2).map(|j| j * (10000 + j))));
}

#[test]
fn reduce_defines_the_root_only() {
    let v = run_json(&["reduce", "-n", "4", "-c", "3", "--root", "2"]);
    assert_eq!(v["root"], 2);
    for r in 0..4 {
        if r == 2 {
            assert_eq!(v["outputs"][r], ints((0..Q).map(|j| 60000 + N * j)));
        } else {
            assert_eq!(
                v["outputs"][r],
                Value::Null,
                "rank {r} has no output contract"
            );
        }
    }
}

#[test]
fn broadcast_copies_the_root() {
    let v = run_json(&[
        "broadcast",
        "-n",
        "4",
        "-c",
        "3",
        "--root",
        "1",
        "--in-place",
    ]);
    for r in 0..4 {
        assert_eq!(v["outputs"][r], ints((0..Q).map(|j| enc(1, 0, j))));
        if r != 1 {
            assert_eq!(
                v["inputs"][r],
                json!([]),
                "off the root the send buffer is ignored"
            );
        }
    }
}

#[test]
fn all_gather_is_source_rank_major_in_and_out_of_place() {
    let want = ints((0..N).flat_map(|s| (0..Q).map(move |o| enc(s, 0, o))));
    for extra in [None, Some("--in-place")] {
        let mut args = vec!["all_gather", "-n", "4", "-c", "3"];
        args.extend(extra);
        let v = run_json(&args);
        for r in 0..4 {
            assert_eq!(v["outputs"][r], want, "{extra:?} rank {r}");
        }
    }
}

#[test]
fn reduce_scatter_gives_rank_r_block_r() {
    for extra in [None, Some("--in-place")] {
        let mut args = vec!["reduce_scatter", "-n", "4", "-c", "3"];
        args.extend(extra);
        let v = run_json(&args);
        for r in 0..N {
            // Σ_s (s*10000 + r*100 + j)
            let want = ints((0..Q).map(|j| 10000 * N * (N - 1) / 2 + N * (r * 100 + j)));
            assert_eq!(v["outputs"][r as usize], want, "{extra:?} rank {r}");
            assert_eq!(
                v["inputs"][r as usize].as_array().unwrap().len(),
                (N * Q) as usize
            );
        }
    }
}

#[test]
fn all_to_all_transposes_blocks() {
    let v = run_json(&["all_to_all", "-n", "4", "-c", "3"]);
    for d in 0..N {
        let want = ints((0..N).flat_map(|s| (0..Q).map(move |o| enc(s, d, o))));
        assert_eq!(v["outputs"][d as usize], want);
    }
}

#[test]
fn gather_and_scatter() {
    let v = run_json(&["gather", "-n", "4", "-c", "3", "--root", "3"]);
    for r in 0..4 {
        let want = if r == 3 {
            ints((0..N).flat_map(|s| (0..Q).map(move |o| enc(s, 0, o))))
        } else {
            Value::Null
        };
        assert_eq!(v["outputs"][r], want);
    }
    for extra in [None, Some("--in-place")] {
        let mut args = vec!["scatter", "-n", "4", "-c", "3", "--root", "2"];
        args.extend(extra);
        let v = run_json(&args);
        for r in 0..N {
            assert_eq!(
                v["outputs"][r as usize],
                ints((0..Q).map(|o| enc(2, r, o))),
                "{extra:?}"
            );
        }
    }
}

#[test]
fn inputs_iota_random_and_file() {
    let v = run_json(&["all_gather", "-n", "2", "-c", "2", "--inputs", "iota"]);
    assert_eq!(v["inputs"], json!([[0, 1], [2, 3]]));
    assert_eq!(v["outputs"][1], json!([0, 1, 2, 3]));
    let a = run_json(&[
        "all_reduce",
        "-n",
        "3",
        "-c",
        "4",
        "--inputs",
        "random",
        "--seed",
        "7",
    ]);
    let b = run_json(&[
        "all_reduce",
        "-n",
        "3",
        "-c",
        "4",
        "--inputs",
        "random",
        "--seed",
        "7",
    ]);
    assert_eq!(a["inputs"], b["inputs"]);
    for j in 0..4 {
        let sum: i64 = (0..3).map(|s| a["inputs"][s][j].as_i64().unwrap()).sum();
        assert_eq!(a["outputs"][0][j].as_i64().unwrap(), sum);
    }
    let tmp = tempfile::tempdir().unwrap();
    let file = tmp.path().join("in.json");
    std::fs::write(&file, r#"{"inputs": [[1.5, 2], [0.25, -1]]}"#).unwrap();
    let v = run_json(&[
        "all_reduce",
        "-n",
        "2",
        "-c",
        "2",
        "--dtype",
        "float",
        "--inputs",
        file.to_str().unwrap(),
    ]);
    assert_eq!(v["outputs"][0], json!([1.75, 1.0]));
}

#[test]
fn rejected_calls_exit_2_with_the_nccl_result() {
    let e = rankwise(&[
        "run",
        "broadcast",
        "-n",
        "4",
        "-c",
        "3",
        "--root",
        "4",
        "--json",
    ])
    .expect(2);
    let v = e.json();
    assert_eq!(v["error"]["code"], 4);
    assert_eq!(v["error"]["name"], "ncclInvalidArgument");
    assert_eq!(v["error"]["rank"], 0);
    assert!(
        v["error"]["message"]
            .as_str()
            .unwrap()
            .contains("root 4 is out of range: valid roots are 0..=3")
    );
    assert_eq!(v["outputs"], json!([null, null, null, null]));
    let e = rankwise(&["run", "all_to_all", "-n", "2", "-c", "2", "--in-place"]).expect(2);
    assert!(
        e.stdout
            .contains("rejected: ncclInvalidArgument on rank 0: AlltoAll:"),
        "{}",
        e.stdout
    );
    assert!(e.stdout.contains("AlltoAll has no in-place form"));
    let e = rankwise(&["run", "reduce", "-n", "2", "-c", "2", "--root", "-1"]).expect(2);
    assert!(e.stdout.contains("root -1 is out of range"), "{}", e.stdout);
}

#[test]
fn text_output_shows_every_rank() {
    let out = rankwise(&["run", "all_gather", "-n", "4", "-c", "3", "--in-place"]).expect(0);
    assert!(
        out.stdout
            .contains("ncclAllGather on 4 rank(s): count 3, ncclInt32, in place"),
        "{}",
        out.stdout
    );
    assert!(
        out.stdout.contains("+ 24 bytes (6 elements)"),
        "{}",
        out.stdout
    );
    assert!(out.stdout.contains("[20000, 20001, 20002]  [0, 1, 2, 10000, 10001, 10002, 20000, 20001, 20002, 30000, 30001, 30002]"));
}
