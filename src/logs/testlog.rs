//! Small hand-written NCCL logs for the analyzer's unit tests: one process
//! per rank (pid 10 + r, comm pointer 0x100 + r), lines as NCCL prints them.
#![allow(clippy::too_many_arguments)]

use super::findings::Finding;
use super::{Analysis, FindingKind};
use std::fmt::Write;

/// The init line of rank `r` of `n` in communicator `id`.
pub(crate) fn init(t: &mut String, r: u32, n: u32, id: u64) {
    writeln!(t, "h:{}:{} [{r}] NCCL INFO ncclCommInitRank comm 0x{:x} rank {r} nranks {n} cudaDev {r} nvmlDev {r} busId 0 commId 0x{id:x} - Init COMPLETE", 10 + r, 10 + r, 0x100 + r).unwrap();
}

/// One COLL line of rank `r` of `n`: `op` (NCCL's name) with opCount `opc`.
pub(crate) fn call(
    t: &mut String,
    r: u32,
    n: u32,
    op: &str,
    opc: u64,
    count: u64,
    dt: i32,
    redop: i32,
    root: i32,
) {
    writeln!(t, "h:{}:{} [{r}] NCCL INFO {op}: opCount {opc:x} sendbuff 0x1 recvbuff 0x1 count {count} datatype {dt} op {redop} root {root} comm 0x{:x} [nranks={n}] stream (nil)", 10 + r, 10 + r, 0x100 + r).unwrap();
}

/// An init line of rank `r` (process 10 + r, comm 0x100 + r) stating `rank` and `nranks`.
pub(crate) fn init_stating(t: &mut String, r: u32, rank: u64, nranks: u64, id: u64) {
    writeln!(t, "h:{}:{} [{r}] NCCL INFO ncclCommInitRank comm 0x{:x} rank {rank} nranks {nranks} cudaDev {r} nvmlDev {r} busId 0 commId 0x{id:x} - Init COMPLETE", 10 + r, 10 + r, 0x100 + r).unwrap();
}

/// One AllReduce of rank `r` whose COLL line states `[nranks=n]`.
pub(crate) fn call_stating(t: &mut String, r: u32, n: u64, k: u64) {
    writeln!(t, "h:{}:{} [{r}] NCCL INFO AllReduce: opCount {k:x} sendbuff 0x1 recvbuff 0x1 count 8 datatype 7 op 0 root 0 comm 0x{:x} [nranks={n}] stream (nil)", 10 + r, 10 + r, 0x100 + r).unwrap();
}

/// The findings of one kind.
pub(crate) fn findings_of(a: &Analysis, kind: FindingKind) -> Vec<&Finding> {
    a.findings.iter().filter(|f| f.kind == kind).collect()
}
