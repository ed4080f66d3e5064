//! Bad inputs: `summarize` (run directories damaged after a real run) and
//! `explain` (sizes that overflow or ranks too many to list).

use super::{Bad, bad};
use std::path::{Path, PathBuf};
use std::process::Command;

const SUMMARIZE: &[&str] = &["summarize", "{dir}/run"];

/// A real 4-rank seed run in `<dir>/run`.
fn run(dir: &Path) -> PathBuf {
    let run = dir.join("run");
    let out = Command::new(env!("CARGO_BIN_EXE_rankwise"))
        .args(["verify", "--ranks", "4", "--out"])
        .arg(&run)
        .env_remove("RANKWISE_DEBUG")
        .output()
        .expect("run rankwise verify");
    assert!(out.status.success(), "{out:?}");
    run
}

/// Replaces `raw/<layer>/rank<r>.csv` by whatever `make` puts at its path.
fn replace_rank_file(dir: &Path, rel: &str, make: impl FnOnce(&Path)) {
    let path = run(dir).join(rel);
    std::fs::remove_file(&path).unwrap();
    make(&path);
}

/// Edits one cell of one line of a rank file (line 1 is the header).
fn edit_cell(dir: &Path, rel: &str, line: usize, column: &str, value: &str) {
    let path = run(dir).join(rel);
    let text = std::fs::read_to_string(&path).unwrap();
    let mut reader = csv::Reader::from_reader(text.as_bytes());
    let header = reader.headers().unwrap().clone();
    let col = header.iter().position(|h| h == column).unwrap();
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(&header).unwrap();
    for (i, rec) in reader.records().enumerate() {
        let rec = rec.unwrap();
        let cells: Vec<&str> = rec
            .iter()
            .enumerate()
            .map(|(c, v)| if i + 2 == line && c == col { value } else { v })
            .collect();
        w.write_record(&cells).unwrap();
    }
    std::fs::write(&path, w.into_inner().unwrap()).unwrap();
}

fn edit_manifest(dir: &Path, from: &str, to: &str) {
    let path = run(dir).join("manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    assert!(text.contains(from), "{text}");
    std::fs::write(&path, text.replace(from, to)).unwrap();
}

fn dtype_edited(dir: &Path) {
    // line 2 of rank 0's native file: AllReduce out-of-place, int32
    edit_cell(dir, "raw/native/rank0.csv", 2, "dtype", "float");
}

fn count_edited(dir: &Path) {
    edit_cell(dir, "raw/framework/rank2.csv", 3, "count", "4");
}

fn rank_file_is_a_directory(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        std::fs::create_dir(p).unwrap()
    });
}

fn rank_file_is_a_symlink_loop(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        std::os::unix::fs::symlink("rank1.csv", p).unwrap()
    });
}

fn rank_file_is_a_dangling_symlink(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        std::os::unix::fs::symlink("gone.csv", p).unwrap()
    });
}

fn rank_file_is_dev_zero(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        std::os::unix::fs::symlink("/dev/zero", p).unwrap()
    });
}

fn rank_file_is_a_fifo(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        let ok = Command::new("mkfifo").arg(p).status().unwrap().success();
        assert!(ok, "mkfifo {}", p.display());
    });
}

/// A file that opens and then fails every read, even for root (for whom
/// permission bits stop nothing): reading /proc/self/mem at offset 0.
fn rank_file_fails_to_read(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        std::os::unix::fs::symlink("/proc/self/mem", p).unwrap()
    });
}

fn rank_file_is_huge(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        // sparse: 100 GiB claimed, nothing stored
        std::fs::File::create(p)
            .unwrap()
            .set_len(100 << 30)
            .unwrap();
    });
}

fn rank_file_has_an_endless_line(dir: &Path) {
    replace_rank_file(dir, "raw/native/rank1.csv", |p| {
        let mut text = b"run_id,layer\n".to_vec();
        text.resize(text.len() + (9 << 20), b'x');
        std::fs::write(p, text).unwrap();
    });
}

fn manifest_claims_65536_ranks(dir: &Path) {
    edit_manifest(dir, "\"ranks\": 4", "\"ranks\": 65536");
}

fn manifest_claims_200_ranks(dir: &Path) {
    edit_manifest(dir, "\"ranks\": 4", "\"ranks\": 200");
}

fn manifest_claims_the_full_suite_at_256_ranks(dir: &Path) {
    edit_manifest(dir, "\"ranks\": 4", "\"ranks\": 256");
    let path = dir.join("run/manifest.json");
    let text = std::fs::read_to_string(&path).unwrap();
    std::fs::write(
        &path,
        text.replace("\"suite\": \"seed\"", "\"suite\": \"full\""),
    )
    .unwrap();
}

fn manifest_is_dev_zero(dir: &Path) {
    let path = run(dir).join("manifest.json");
    std::fs::remove_file(&path).unwrap();
    std::os::unix::fs::symlink("/dev/zero", &path).unwrap();
}

fn manifest_is_huge(dir: &Path) {
    let path = run(dir).join("manifest.json");
    std::fs::File::create(&path)
        .unwrap()
        .set_len(10 << 30)
        .unwrap();
}

fn many_unexpected_files(dir: &Path) {
    let raw = run(dir).join("raw/native");
    for k in 0..3000 {
        std::fs::write(raw.join(format!("stray{k}.csv")), "").unwrap();
    }
}

const fn summarize(setup: fn(&Path), says: &'static [&'static str]) -> Bad {
    Bad {
        args: SUMMARIZE,
        env: &[],
        setup,
        code: 1,
        says,
    }
}

pub const ROWS: &[Bad] = &[
    // columns that say what a record is must be the case's
    summarize(
        dtype_edited,
        &[
            "raw/native/rank0.csv line 2: AllReduce / out-of-place: dtype column says float, the case's dtype is int32",
        ],
    ),
    summarize(
        count_edited,
        &[
            "raw/framework/rank2.csv line 3: AllReduce / MAX/float32: count column says 4, the case's count on rank 2 is",
        ],
    ),
    // a rank file that is not one: say what it is
    summarize(
        rank_file_is_a_directory,
        &["raw/native/rank1.csv is a directory, not a rank file"],
    ),
    summarize(
        rank_file_is_a_symlink_loop,
        &["raw/native/rank1.csv is a symlink loop"],
    ),
    summarize(
        rank_file_is_a_dangling_symlink,
        &["raw/native/rank1.csv is a symlink to gone.csv, which does not exist"],
    ),
    summarize(
        rank_file_is_dev_zero,
        &["raw/native/rank1.csv is a character device, not a regular file"],
    ),
    summarize(
        rank_file_is_a_fifo,
        &["raw/native/rank1.csv is a FIFO, not a regular file"],
    ),
    summarize(
        rank_file_fails_to_read,
        &["cannot read raw/native/rank1.csv: Input/output error"],
    ),
    summarize(
        rank_file_is_huge,
        &["raw/native/rank1.csv is 107374182400 bytes: a rank file is at most 67108864 bytes"],
    ),
    summarize(
        rank_file_has_an_endless_line,
        &["raw/native/rank1.csv line 2 is longer than 8388608 bytes"],
    ),
    // a manifest that claims more ranks than the directory holds
    summarize(
        manifest_claims_65536_ranks,
        &[
            "manifest.json declares 65536 ranks: rankwise verify writes runs of 1 to 256",
            "raw/native holds 4 rank file(s)",
        ],
    ),
    summarize(
        manifest_claims_200_ranks,
        &[
            "missing rank files raw/native/rank4.csv .. rank199.csv (196 files): the run declares 200 rank(s), so each must have written one",
            "raw/native/rank0.csv line 2: AllReduce / out-of-place: world size column says 4, the run has 200",
        ],
    ),
    summarize(
        manifest_claims_the_full_suite_at_256_ranks,
        &["missing rank files raw/native/rank4.csv .. rank255.csv (252 files)"],
    ),
    summarize(
        manifest_is_dev_zero,
        &["manifest.json is a character device, not a regular file"],
    ),
    summarize(
        manifest_is_huge,
        &["manifest.json is 10737418240 bytes: a manifest is at most 1048576 bytes"],
    ),
    summarize(
        many_unexpected_files,
        &[
            "unexpected file raw/native/stray",
            "and 2990 more unexpected files in raw/native",
        ],
    ),
    // explain: sizes say which argument is too large
    bad(
        &[
            "explain",
            "all_reduce",
            "--ranks",
            "18446744073709551615",
            "--count",
            "3",
        ],
        1,
        &[
            "--ranks 18446744073709551615 is too large: 18446744073709551615 ranks × 4 bytes (int32) overflow",
        ],
    ),
    bad(
        &[
            "explain",
            "all_gather",
            "--ranks",
            "4096",
            "--count",
            "18446744073709551615",
        ],
        1,
        &[
            "--count 18446744073709551615 is too large: 18446744073709551615 elements × 4 bytes (int32) overflow",
        ],
    ),
    bad(
        &[
            "explain",
            "all_gather",
            "--ranks",
            "1000000",
            "--count",
            "10000000000000",
        ],
        1,
        &[
            "--ranks 1000000 × --count 10000000000000 is too large: 1000000 × 10000000000000 elements × 4 bytes (int32) overflow",
            "lower --ranks or --count",
        ],
    ),
    bad(
        &[
            "explain",
            "all_reduce",
            "--ranks",
            "3000000000",
            "--count",
            "0",
        ],
        1,
        &[
            "--ranks 3000000000 is more ranks than a communicator has: NCCL's nranks is a C int, at most 2147483647",
        ],
    ),
    // explain: huge N in a compact form, no per-rank allocation
    bad(
        &[
            "explain",
            "all_reduce",
            "--ranks",
            "1000000000",
            "--count",
            "1",
        ],
        0,
        &[
            "ncclAllReduce on 1000000000 rank(s), count 1",
            "999999999",
            "(999999996 ranks not shown)",
            "sendbuff read: rank(s) 0-999999999",
        ],
    ),
    bad(
        &[
            "explain",
            "gather",
            "--ranks",
            "2147483647",
            "--count",
            "1",
            "--root",
            "5",
            "--rank",
            "7",
        ],
        0,
        &[
            "valid roots: 0-2147483646",
            "recvbuff unused (may be NULL): rank(s) 0-4,6-2147483646",
            "[0→5 | 1→5 | 2→5 | … | 2147483646→5]",
        ],
    ),
];
