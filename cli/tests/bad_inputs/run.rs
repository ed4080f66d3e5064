//! Bad inputs: run. Most rows give `--inputs {dir}/in.json`, written by the
//! row's `setup`; a value's row says the rank, the index and the value back.

use super::{Bad, bad, nothing};
use std::path::Path;

fn inputs(dir: &Path, json: &str) {
    std::fs::write(dir.join("in.json"), json).unwrap();
}

/// `rankwise run all_reduce -n 2 -c 2 --dtype <dt> --inputs {dir}/in.json`
macro_rules! all_reduce {
    ($dt:literal) => {
        &[
            "run",
            "all_reduce",
            "-n",
            "2",
            "-c",
            "2",
            "--dtype",
            $dt,
            "--inputs",
            "{dir}/in.json",
        ]
    };
}

/// A row for one inputs file given to `all_reduce!(dt)`.
macro_rules! file_row {
    ($dt:literal, $json:literal, [$($says:literal),* $(,)?]) => {
        Bad {
            args: all_reduce!($dt),
            env: &[],
            setup: |d| inputs(d, $json),
            code: 1,
            says: &[$($says),*],
        }
    };
}

pub const ROWS: &[Bad] = &[
    // integers: out of range, negative for unsigned, not integral
    file_row!(
        "uint64",
        r#"{"inputs": [[18446744073709551615, 18446744073709551616], [0, 0]]}"#,
        [
            "rank 0 element 1: 18446744073709551616 is out of range",
            "uint64 holds only the integers 0..=18446744073709551615",
        ]
    ),
    file_row!(
        "uint64",
        r#"{"inputs": [[0, 0], [-1, 0]]}"#,
        ["rank 1 element 0: -1 is out of range"]
    ),
    file_row!(
        "int32",
        r#"{"inputs": [[1, 2], [3, 1.5]]}"#,
        [
            "rank 1 element 1: 1.5 is not an integer",
            "int32 holds only the integers -2147483648..=2147483647",
        ]
    ),
    file_row!(
        "int8",
        r#"{"inputs": [[127, 128], [0, 0]]}"#,
        [
            "rank 0 element 1: 128 is out of range",
            "int8 holds only the integers -128..=127",
        ]
    ),
    file_row!(
        "int64",
        r#"{"inputs": [[-9223372036854775808, -9223372036854775809], [0, 0]]}"#,
        ["rank 0 element 1: -9223372036854775809 is out of range"]
    ),
    // an f64 would round this to an integer; the text is not one
    file_row!(
        "int64",
        r#"{"inputs": [[9007199254740993.5, 0], [0, 0]]}"#,
        ["rank 0 element 0: 9007199254740993.5 is not an integer"]
    ),
    file_row!(
        "int64",
        r#"{"inputs": [[1e19, 0], [0, 0]]}"#,
        ["rank 0 element 0: 1e19 is out of range"]
    ),
    file_row!(
        "int32",
        r#"{"inputs": [[0, 0], [0, "inf"]]}"#,
        ["rank 1 element 1: inf is not an integer"]
    ),
    // floats: not exactly representable, out of range, no infinity
    file_row!(
        "float",
        r#"{"inputs": [[0.5, 0.1], [0, 0]]}"#,
        [
            "rank 0 element 1: 0.1 is not exactly representable as float (the nearest float is 0.10000000149011612)"
        ]
    ),
    file_row!(
        "half",
        r#"{"inputs": [[65504, 65520], [0, 0]]}"#,
        ["rank 0 element 1: 65520 is out of range: half holds magnitudes up to 65504"]
    ),
    file_row!(
        "bfloat16",
        r#"{"inputs": [[0, 0], [257, 0]]}"#,
        [
            "rank 1 element 0: 257 is not exactly representable as bfloat16 (the nearest bfloat16 is 256)"
        ]
    ),
    file_row!(
        "double",
        r#"{"inputs": [[1e308, 1e309], [0, 0]]}"#,
        [
            "rank 0 element 1: 1e309 is out of range: double holds magnitudes up to 1.7976931348623157e308"
        ]
    ),
    file_row!(
        "f8e4m3",
        r#"{"inputs": [["-inf", 0], [0, 0]]}"#,
        [
            "rank 0 element 0: -inf is not a value of f8e4m3: f8e4m3 has no infinities (its largest magnitude is 448)"
        ]
    ),
    file_row!(
        "f8e5m2",
        r#"{"inputs": [[0, 0], [0, 1.125]]}"#,
        [
            "rank 1 element 1: 1.125 is not exactly representable as f8e5m2 (the nearest f8e5m2 is 1)"
        ]
    ),
    // not numbers
    file_row!(
        "int32",
        r#"{"inputs": [["abc", 0], [0, 0]]}"#,
        ["rank 0 element 0: abc is not a number: int32 takes an integer such as -12"]
    ),
    file_row!(
        "float",
        r#"{"inputs": [[0, null], [0, 0]]}"#,
        [
            "rank 0 element 1: null is not a number",
            "\"inf\", \"-inf\", \"nan\""
        ]
    ),
    file_row!(
        "int32",
        r#"{"inputs": [[0, 0], [true, [1]]]}"#,
        ["rank 1 element 0: true is not a number"]
    ),
    file_row!(
        "float",
        r#"{"inputs": [[0, "0x10"], [0, 0]]}"#,
        ["rank 0 element 1: 0x10 is not a number"]
    ),
    // a long number is quoted back shortened, with its length
    Bad {
        args: all_reduce!("int64"),
        env: &[],
        setup: |d| {
            inputs(
                d,
                &format!(r#"{{"inputs": [[{}, 0], [0, 0]]}}"#, "7".repeat(100_000)),
            )
        },
        code: 1,
        says: &[
            "rank 0 element 0: 7777777777",
            "(100000 characters) is out of range",
        ],
    },
    // the shape of the file
    file_row!(
        "int32",
        r#"{"inputs": [[1, 2], [3]]}"#,
        ["rank 1's input has 1 elements, but AllReduce with count 2 reads 2 on rank 1"]
    ),
    file_row!(
        "int32",
        r#"{"inputs": [[1, 2], [3, 4], [5, 6]]}"#,
        ["3 input lists for 2 rank(s): give one per rank"]
    ),
    file_row!(
        "int32",
        r#"{"inputs": [1, [2, 3]]}"#,
        ["rank 0's input is not a list"]
    ),
    file_row!(
        "int32",
        r#"[[1, 2], [3, 4]]"#,
        ["expected an object {\"inputs\": [[...] per rank]}"]
    ),
    file_row!(
        "int32",
        r#"{"input": [[1, 2], [3, 4]]}"#,
        ["expected an object {\"inputs\": [[...] per rank]}"]
    ),
    file_row!("int32", r#"{"inputs": [[1, 2], [3, 4]"#, ["is not JSON"]),
    Bad {
        args: all_reduce!("int32"),
        env: &[],
        setup: |d| std::fs::write(d.join("in.json"), b"{\"inputs\": [[1, 2], [3, \xff]]}").unwrap(),
        code: 1,
        says: &["in.json: stream did not contain valid UTF-8"],
    },
    // a file past the size bound is refused before it is read (sparse: no disk used)
    Bad {
        args: all_reduce!("int32"),
        env: &[],
        setup: |d| {
            let f = std::fs::File::create(d.join("in.json")).unwrap();
            f.set_len((1 << 28) + 1).unwrap();
        },
        code: 1,
        says: &["is larger than run reads (256 MiB"],
    },
    bad(
        &[
            "run",
            "all_reduce",
            "-n",
            "2",
            "-c",
            "1",
            "--inputs",
            "{dir}/none.json",
        ],
        1,
        &["--inputs takes encoded, iota, random or a JSON file"],
    ),
    bad(
        &[
            "run",
            "all_gather",
            "-n",
            "2",
            "-c",
            "200",
            "--dtype",
            "int8",
            "--inputs",
            "iota",
        ],
        1,
        &["iota: rank 0 element 128 = 128 is not exactly representable as int8"],
    ),
    Bad {
        args: &[
            "run",
            "all_reduce",
            "-n",
            "1",
            "-c",
            "1",
            "--inputs",
            "{dir}",
        ],
        env: &[],
        setup: nothing,
        code: 1,
        says: &["Is a directory"],
    },
    // the call's own arguments
    bad(
        &["run", "broadcast", "-n", "2", "-c", "1", "--op", "max"],
        1,
        &["broadcast takes no reduction op"],
    ),
    bad(
        &["run", "all_reduce", "-n", "2", "-c", "1", "--root", "1"],
        1,
        &["all_reduce takes no root"],
    ),
    bad(
        &["run", "all_reduce", "-n", "0", "-c", "1"],
        1,
        &["--ranks must be at least 1"],
    ),
    bad(
        &["run", "all_reduce", "-n", "4", "-c", "18446744073709551615"],
        1,
        &["--count 18446744073709551615 is too large"],
    ),
    bad(
        &["run", "all_to_all", "-n", "256", "-c", "10000"],
        1,
        &["more than run shows"],
    ),
    bad(
        &["run", "send", "-n", "2", "-c", "2"],
        2,
        &["send is point-to-point, not a collective"],
    ),
];
