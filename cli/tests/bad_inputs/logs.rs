//! Bad inputs: `rankwise logs analyze|summary`.
//!
//! The logs are built from the lines of a real NCCL 2.28.9 capture
//! (tests/fixtures/nccl-2.28.9-1rank-init-coll.log), moved to other ranks,
//! processes and comm pointers, or with one number changed.

use super::{Bad, bad};
use std::path::Path;

const FIXTURE: &str = include_str!("../../../tests/fixtures/nccl-2.28.9-1rank-init-coll.log");

/// The fixture's first line that contains `needle`.
fn line(needle: &str) -> &'static str {
    FIXTURE
        .lines()
        .find(|l| l.contains(needle))
        .unwrap_or_else(|| panic!("no {needle:?} line in the fixture"))
}

/// Its `ncclCommInitRankConfig … - Init COMPLETE` line (rank 0 of 1).
fn init_line() -> &'static str {
    line("- Init COMPLETE")
}

/// Its COLL lines (four calls on one comm, `[nranks=1]`).
fn coll_lines() -> Vec<&'static str> {
    FIXTURE
        .lines()
        .filter(|l| l.contains(": opCount "))
        .collect()
}

/// A fixture line as rank `r` of an `n`-rank communicator: its own process,
/// device and comm pointer, and `n` wherever the line states nranks.
fn as_rank(l: &str, r: u32, n: &str) -> String {
    l.replace(
        "vm:473:473 [0]",
        &format!("vm:{}:{} [{r}]", 473 + r, 473 + r),
    )
    .replace(
        "comm 0x209db0f0",
        &format!("comm 0x{:x}", 0x209db0f0 + 0x10_0000 * r),
    )
    .replace("rank 0 nranks 1", &format!("rank {r} nranks {n}"))
    .replace("rank 0 nRanks 1", &format!("rank {r} nRanks {n}"))
    .replace("[nranks=1]", &format!("[nranks={n}]"))
}

fn write(dir: &Path, name: &str, lines: &[String]) {
    let mut text = lines.join("\n");
    text.push('\n');
    std::fs::write(dir.join(name), text).unwrap();
}

/// A 4-rank run: each rank's init line states `init_nranks[r]`, its COLL
/// lines `[nranks=4]`.
fn four_ranks(dir: &Path, name: &str, init_nranks: [&str; 4]) {
    let mut lines: Vec<String> = (0..4)
        .map(|r| as_rank(init_line(), r, init_nranks[r as usize]))
        .collect();
    for l in coll_lines() {
        for r in 0..4 {
            lines.push(as_rank(l, r, "4"));
        }
    }
    write(dir, name, &lines);
}

/// The 118-byte topology line with nranks 4294967295, then the fixture's calls.
fn nranks_u32_max(dir: &Path) {
    let mut lines = vec![as_rank(line("nRanks 1 nNodes"), 0, "4294967295")];
    lines.extend(coll_lines().iter().map(|l| l.to_string()));
    write(dir, "huge.log", &lines);
}

/// nranks 4294967295 in every COLL line and no init line.
fn coll_nranks_u32_max(dir: &Path) {
    let lines: Vec<String> = coll_lines()
        .iter()
        .map(|l| as_rank(l, 0, "4294967295"))
        .collect();
    write(dir, "huge.log", &lines);
}

/// rank 4294967294 of 4294967295 in the init line.
fn rank_u32_max(dir: &Path) {
    let mut lines =
        vec![init_line().replace("rank 0 nranks 1", "rank 4294967294 nranks 4294967295")];
    lines.extend(coll_lines().iter().map(|l| l.to_string()));
    write(dir, "huge.log", &lines);
}

fn nranks_0_and_1(dir: &Path) {
    four_ranks(dir, "job.log", ["4", "0", "1", "4"]);
}

fn every_init_nranks_1(dir: &Path) {
    four_ranks(dir, "job.log", ["1", "1", "1", "1"]);
}

/// Ranks 0, 1, 2 and one stating rank 7 of 4.
fn rank_7_of_4(dir: &Path) {
    let mut lines: Vec<String> = (0..4).map(|r| as_rank(init_line(), r, "4")).collect();
    lines[3] = lines[3].replace("rank 3 nranks 4", "rank 7 nranks 4");
    for l in coll_lines() {
        for r in 0..4 {
            lines.push(as_rank(l, r, "4"));
        }
    }
    write(dir, "job.log", &lines);
}

/// The 4-rank run with every COLL line's count unreadable (`count x3`).
fn every_call_malformed(dir: &Path) {
    four_ranks(dir, "job.log", ["4", "4", "4", "4"]);
    let text = std::fs::read_to_string(dir.join("job.log")).unwrap();
    std::fs::write(dir.join("job.log"), text.replace(" count ", " count x")).unwrap();
}

/// The whole fixture (its WARN line too) with every COLL line missing its comm.
fn every_call_without_comm(dir: &Path) {
    let lines: Vec<String> = FIXTURE
        .lines()
        .map(|l| l.replace(" comm 0x209db0f0 [nranks", " [nranks"))
        .collect();
    write(dir, "fixture.log", &lines);
}

/// Init lines only (NCCL_DEBUG_SUBSYS=INIT).
fn init_lines_only(dir: &Path) {
    let lines: Vec<String> = (0..4).map(|r| as_rank(init_line(), r, "4")).collect();
    write(dir, "init.log", &lines);
}

/// The fixture as `rank0.log`, and the same text again as `console.log`.
fn fixture_and_copy(dir: &Path) {
    std::fs::write(dir.join("rank0.log"), FIXTURE).unwrap();
    std::fs::write(dir.join("console.log"), FIXTURE).unwrap();
}

/// The fixture with its first call's count 3 made 2^64 - 1.
fn count_u64_max(dir: &Path) {
    let first = coll_lines()[0];
    let text = FIXTURE.replacen(
        first,
        &first.replace(" count 3 ", " count 18446744073709551615 "),
        1,
    );
    std::fs::write(dir.join("count.log"), text).unwrap();
}

/// A 5 GiB first line (a sparse run of NUL bytes, so it costs no disk),
/// then the fixture.
fn five_gib_line_then_fixture(dir: &Path) {
    use std::io::Write;
    let mut f = std::fs::File::create(dir.join("big.log")).unwrap();
    f.set_len(5 << 30).unwrap();
    std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(5 << 30)).unwrap();
    f.write_all(b"\n").unwrap();
    f.write_all(FIXTURE.as_bytes()).unwrap();
}

/// One 3 GiB line and nothing else (sparse).
fn three_gib_line(dir: &Path) {
    let f = std::fs::File::create(dir.join("one.log")).unwrap();
    f.set_len(3 << 30).unwrap();
}

pub const ROWS: &[Bad] = &[
    Bad {
        args: &["logs", "analyze", "{dir}/huge.log"],
        env: &[],
        setup: nranks_u32_max,
        code: 0,
        says: &[
            "the lines of comm 0x209db0f0 disagree on nranks: nranks 1 in rank 0's COLL lines (",
            "huge.log:2); nranks 4294967295 (more than the 16777216 accepted) in rank 0's init line (",
            "huge.log:1); using 1",
        ],
    },
    Bad {
        args: &["logs", "summary", "{dir}/huge.log"],
        env: &[],
        setup: nranks_u32_max,
        code: 0,
        says: &["(nranks 1)", "AllReduce"],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/huge.log"],
        env: &[],
        setup: coll_nranks_u32_max,
        code: 0,
        says: &[
            "nranks 4294967295 (more than the 16777216 accepted) in comm 0x209db0f0 on vm:473's COLL lines (",
            "huge.log:1)",
            "using 1, the number of streams found",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/huge.log"],
        env: &[],
        setup: rank_u32_max,
        code: 0,
        says: &[
            "nranks 4294967295 (more than the 16777216 accepted) in comm 0x209db0f0 on vm:473's init line (",
            "comm 0x209db0f0 on vm:473 states rank 4294967294 (",
            "huge.log:1), outside 0..=0 of commId 0x67c0057cd53cedc1 (nranks 1); it is left out",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/job.log"],
        env: &[],
        setup: nranks_0_and_1,
        code: 0,
        says: &[
            "ranks seen 0-3",
            "the lines of commId 0x67c0057cd53cedc1 disagree on nranks: ",
            "nranks 0 (no communicator has 0 ranks) in rank 1's init line (",
            "job.log:2); nranks 1 in rank 2's init line (",
            "job.log:3); nranks 4 in rank 0's init line (",
            "using 4",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/job.log"],
        env: &[],
        setup: every_init_nranks_1,
        code: 0,
        says: &[
            "ranks seen 0-3",
            "nranks 1 in rank 0's init line (",
            "nranks 4 in rank 0's COLL lines (",
            "using 4, stated most often among the values that hold ranks 0..=3",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/job.log"],
        env: &[],
        setup: rank_7_of_4,
        code: 0,
        says: &[
            "ranks seen 0-2, missing 3",
            "comm 0x20cdb0f0 on vm:476 states rank 7 (",
            "job.log:4), outside 0..=3 of commId 0x67c0057cd53cedc1 (nranks 4); it is left out",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/job.log"],
        env: &[],
        setup: every_call_malformed,
        code: 1,
        says: &[
            "rankwise logs: no call could be read: all 16 COLL lines in 1 file are malformed (16 malformed NCCL lines in all); the first is ",
            "job.log:5, where count is 'x3', expected an unsigned 64-bit integer: vm:473:473 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7f908ee00000 recvbuff 0x7f908ee00000 count x3 datatype 4",
        ],
    },
    Bad {
        args: &["logs", "summary", "{dir}/job.log"],
        env: &[],
        setup: every_call_malformed,
        code: 1,
        says: &[
            "no call could be read: all 16 COLL lines",
            "job.log:5, where count is 'x3'",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/fixture.log"],
        env: &[],
        setup: every_call_without_comm,
        code: 1,
        says: &[
            "no call could be read: all 4 COLL lines in 1 file are malformed",
            "fixture.log:91, where comm is missing, expected a pointer (0x… or (nil)): vm:473:473 [0] NCCL INFO AllReduce: opCount 0 ",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/init.log"],
        env: &[],
        setup: init_lines_only,
        code: 1,
        says: &[
            "rankwise logs: no call in the 4 NCCL lines of 1 file: no COLL line (were the logs written with NCCL_DEBUG_SUBSYS including COLL?)",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/rank0.log", "{dir}/rank0.log"],
        env: &[],
        setup: fixture_and_copy,
        code: 1,
        says: &[
            "input: 1 file, 102 lines",
            "rank0.log: also given as ",
            "rank0.log, the same file; read once",
        ],
    },
    Bad {
        args: &["logs", "summary", "{dir}", "{dir}/console.log"],
        env: &[],
        setup: fixture_and_copy,
        code: 0,
        says: &[
            "console.log: also given as ",
            "console.log, the same file; read once",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/rank0.log", "{dir}/console.log"],
        env: &[],
        setup: fixture_and_copy,
        code: 1,
        says: &[
            "console.log repeats the 4 calls of vm:473 comm 0x209db0f0 already read from ",
            "rank0.log; skipped, with that process's WARN lines there",
        ],
    },
    Bad {
        args: &["logs", "summary", "{dir}/count.log"],
        env: &[],
        setup: count_u64_max,
        code: 0,
        says: &[
            "(1 call with an implausible count not in the bytes: no machine holds a buffer over 256.0 TiB; the first: AllReduce count 18446744073709551615 int64 at ",
            "count.log:91 (over 2^64 bytes))",
            "total                     4                80 B (80)",
        ],
    },
    Bad {
        args: &["logs", "analyze", "{dir}/big.log"],
        env: &[],
        setup: five_gib_line_then_fixture,
        code: 1,
        says: &[
            "input: 1 file, 103 lines: 4 calls",
            "big.log: line 1 is 5368709120 bytes long, over the 1048576-byte bound on a line; skipped",
            "[",
            "big.log:97]",
        ],
    },
    Bad {
        args: &["logs", "summary", "{dir}/one.log"],
        env: &[],
        setup: three_gib_line,
        code: 1,
        says: &[
            "rankwise logs: no NCCL lines in the 1 lines read from 1 file",
            "one.log: line 1 is 3221225472 bytes long, over the 1048576-byte bound on a line; skipped",
        ],
    },
    bad(
        &["logs", "analyze", "{dir}/no-such.log"],
        1,
        &["rankwise logs: cannot read '", "no-such.log'"],
    ),
    bad(&["logs", "analyze"], 2, &["FILE|DIR"]),
];
