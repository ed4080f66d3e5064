//! The catalogue: programs that break a collective contract the way real
//! programs do, with what NCCL did with each and the error kind every
//! rank must get from rankwise instead.
//!
//! The `nccl` texts are observations, not expectations: NCCL 2.28.9 on one
//! H200, each scenario's ranks as processes sharing the GPU over sockets,
//! rankwise's checks off (`nccl_fidelity misuse --checks-off --timeout 3`;
//! "hangs" = no completion within 3 s, then ncclCommAbort). The run is in
//! tests/fixtures/nccl-2.28.9-h200/misuse-unchecked.jsonl, and
//! tests/nccl_fixtures.rs holds each text against it.

use super::guards::Guards;
use super::runner::Scenario;
use rankwise::core::{DataType, ErrorKind, RedOp};
use rankwise::{Comm, NULL, Result};
use std::time::Duration;

fn all<const K: u8>(_: usize) -> Option<ErrorKind> {
    Some(KINDS[K as usize])
}
const KINDS: [ErrorKind; 12] = [
    ErrorKind::Mismatch,
    ErrorKind::Deadlock,
    ErrorKind::Unmatched,
    ErrorKind::InvalidRoot,
    ErrorKind::InvalidUsage,
    ErrorKind::CommFailed,
    ErrorKind::InvalidDatatype,
    ErrorKind::InvalidOp,
    ErrorKind::Timeout,
    ErrorKind::RemoteError,
    ErrorKind::NullPointer,
    ErrorKind::OutOfBounds,
];
const MISMATCH: u8 = 0;
const DEADLOCK: u8 = 1;
const UNMATCHED: u8 = 2;
const INVALID_ROOT: u8 = 3;
const INVALID_USAGE: u8 = 4;
const COMM_FAILED: u8 = 5;
const INVALID_DATATYPE: u8 = 6;
const INVALID_OP: u8 = 7;
const TIMEOUT: u8 = 8;

const I32: DataType = DataType::Int32;

/// An AllReduce of `count` int32 elements between guards.
fn all_reduce(c: &mut Comm, g: &mut Guards, count: usize, dt: DataType, op: RedOp) -> Result<()> {
    let s = g.input(c, count * dt.size())?;
    let r = g.output(c, count * dt.size())?;
    c.nccl_all_reduce(s, r, count, dt, op)
}

/// The catalogue, in the order the table prints it.
pub fn catalogue() -> Vec<Scenario> {
    vec![
        Scenario {
            name: "count-mismatch",
            what: "AllReduce where rank 2 passes count 1000 and the others 1024",
            nccl: "every rank hangs; outputs left partly written, no element the sum",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let count = if c.rank() == 2 { 1000 } else { 1024 };
                all_reduce(c, g, count, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "datatype-mismatch",
            what: "AllReduce where rank 1 passes float32 and the others int32",
            nccl: "returns on every rank, the int32 sum (rank 1's float32 unused)",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let dt = if c.rank() == 1 {
                    DataType::Float32
                } else {
                    I32
                };
                all_reduce(c, g, 64, dt, RedOp::Sum)
            },
        },
        Scenario {
            name: "redop-mismatch",
            what: "AllReduce where rank 3 passes Max and the others Sum",
            nccl: "returns on every rank, the Sum (rank 3's Max unused)",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let op = if c.rank() == 3 {
                    RedOp::Max
                } else {
                    RedOp::Sum
                };
                all_reduce(c, g, 64, I32, op)
            },
        },
        Scenario {
            name: "premulsum-scalar-mismatch",
            what: "AllReduce PreMulSum where rank 0's scalar is 2 and the others' 0.5",
            nccl: "returns one value on every rank: each input times its own rank's scalar",
            ranks: 3,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let s = if c.rank() == 0 { 2.0 } else { 0.5 };
                all_reduce(c, g, 16, DataType::Float32, RedOp::PreMulSum(s))
            },
        },
        Scenario {
            name: "root-mismatch",
            what: "Broadcast where rank 2 passes root 1 and the others root 0",
            nccl: "returns on every rank, root 0's data (rank 2's root 1 unused)",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 256)?;
                let root = if c.rank() == 2 { 1 } else { 0 };
                c.nccl_broadcast(b, b, 64, I32, root)
            },
        },
        Scenario {
            name: "op-kind-mismatch",
            what: "rank 1 calls AllGather where the others call AllReduce",
            nccl: "every rank hangs",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                if c.rank() == 1 {
                    let s = g.input(c, 64 * 4)?;
                    let r = g.output(c, 4 * 64 * 4)?;
                    c.nccl_all_gather(s, r, 64, I32)
                } else {
                    all_reduce(c, g, 64, I32, RedOp::Sum)
                }
            },
        },
        Scenario {
            name: "skipped-collective",
            what: "rank 2 skips a Broadcast and goes on to the next AllReduce",
            nccl: "every rank hangs",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                if c.rank() != 2 {
                    c.nccl_broadcast(b, b, 16, I32, 0)?;
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "rank-never-arrives",
            what: "rank 3 is busy for 1.5 s, five times the timeout (300 ms here), before its AllReduce",
            nccl: "waits, no timeout of its own; correct once the rank arrives",
            ranks: 4,
            expect: all::<TIMEOUT>,
            short_timeout: true,
            needs_diagnosis: false,
            program: |c, g| {
                // far past the others' deadline, so that however late the
                // scheduler of a loaded machine starts their threads, they
                // have given up before rank 3 comes (at twice the timeout, 1
                // run in 4 missed it at a load of 9 on 2 cores)
                if c.rank() == 3 {
                    std::thread::sleep(Duration::from_millis(1500));
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "rank-finishes-early",
            what: "rank 3 ends its program without the AllReduce the others enter",
            nccl: "ranks 0-2 hang",
            ranks: 4,
            expect: |r| (r != 3).then_some(ErrorKind::Deadlock),
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                if c.rank() == 3 {
                    return Ok(());
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "ungrouped-ring",
            what: "each rank Sends to the next, then Receives from the previous, outside a group",
            nccl: "every rank hangs in its 1 MiB Send; nothing received",
            ranks: 4,
            expect: all::<DEADLOCK>,
            short_timeout: false,
            needs_diagnosis: true,
            program: |c, g| {
                let n = c.size() as i32;
                let me = c.rank() as i32;
                let s = g.input(c, 1 << 20)?;
                let r = g.output(c, 1 << 20)?;
                c.nccl_send(s, 1 << 18, I32, (me + 1) % n)?;
                c.nccl_recv(r, 1 << 18, I32, (me + n - 1) % n)
            },
        },
        Scenario {
            name: "unmatched-send",
            what: "rank 0 Sends to rank 1, which enters an AllReduce instead",
            nccl: "every rank hangs",
            ranks: 4,
            expect: all::<UNMATCHED>,
            short_timeout: false,
            needs_diagnosis: true,
            program: |c, g| {
                if c.rank() == 0 {
                    let s = g.input(c, 64)?;
                    c.nccl_send(s, 16, I32, 1)
                } else {
                    all_reduce(c, g, 16, I32, RedOp::Sum)
                }
            },
        },
        Scenario {
            name: "zero-count-send-skipped",
            what: "rank 0 Sends 0 elements to rank 1, which skips the empty Recv",
            nccl: "every rank hangs: the count-0 Send is queued and waits for its Recv",
            ranks: 4,
            expect: all::<UNMATCHED>,
            short_timeout: false,
            needs_diagnosis: true,
            program: |c, g| {
                if c.rank() == 0 {
                    c.nccl_send(NULL, 0, I32, 1)
                } else {
                    all_reduce(c, g, 16, I32, RedOp::Sum)
                }
            },
        },
        Scenario {
            name: "send-recv-count-mismatch",
            what: "rank 0 Sends 64 elements, rank 1 Receives 48",
            nccl: "Send returns; Recv: ncclInvalidUsage, \"message truncated : receiving 256 bytes instead of 192\" (socket transport)",
            ranks: 2,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                if c.rank() == 0 {
                    let s = g.input(c, 256)?;
                    c.nccl_send(s, 64, I32, 1)
                } else {
                    let r = g.output(c, 256)?;
                    c.nccl_recv(r, 48, I32, 0)
                }
            },
        },
        Scenario {
            name: "send-recv-datatype-mismatch",
            what: "rank 0 Sends int32, rank 1 Receives float32",
            nccl: "both return: rank 1's float32 buffer holds rank 0's int32 bits",
            ranks: 2,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                if c.rank() == 0 {
                    let s = g.input(c, 256)?;
                    c.nccl_send(s, 64, I32, 1)
                } else {
                    let r = g.output(c, 256)?;
                    c.nccl_recv(r, 64, DataType::Float32, 0)
                }
            },
        },
        Scenario {
            name: "alltoallv-transposed-splits",
            what: "AlltoAllv where rank 0 sends 2 elements to rank 1 but rank 1 expects 3",
            nccl: "returns on every rank; rank 1 gets rank 0's 2 elements and a 0 in the third slot",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let (n, me) = (c.size(), c.rank());
                let ins: Vec<usize> = (0..n)
                    .map(|d| if me == 0 && d == 1 { 2 } else { 1 })
                    .collect();
                let outs: Vec<usize> = (0..n)
                    .map(|s| if me == 1 && s == 0 { 3 } else { 1 })
                    .collect();
                let s = g.input(c, ins.iter().sum::<usize>() * 4)?;
                let r = g.output(c, outs.iter().sum::<usize>() * 4)?;
                c.group(|c| {
                    let (mut si, mut ri) = (s, r);
                    for peer in 0..n {
                        c.nccl_send(si, ins[peer], I32, peer as i32)?;
                        c.nccl_recv(ri, outs[peer], I32, peer as i32)?;
                        si += ins[peer] * 4;
                        ri += outs[peer] * 4;
                    }
                    Ok(())
                })
            },
        },
        Scenario {
            name: "invalid-root",
            what: "Broadcast with root 4 on a 4-rank communicator",
            nccl: "ncclInvalidArgument on every rank: \"invalid root 4 (root should be in the 0..4 range)\"",
            ranks: 4,
            expect: all::<INVALID_ROOT>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                c.nccl_broadcast(b, b, 16, I32, 4)
            },
        },
        Scenario {
            name: "null-root-recvbuff",
            what: "Reduce to root 2 whose recvbuff is NULL",
            nccl: "accepted (ncclInProgress) on every rank; then the root's work fails with CUDA_ERROR_ILLEGAL_ADDRESS, the other ranks complete",
            ranks: 4,
            expect: |r| {
                Some(if r == 2 {
                    ErrorKind::NullPointer
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let s = g.input(c, 64)?;
                c.nccl_reduce(s, NULL, 16, I32, RedOp::Sum, 2)
            },
        },
        Scenario {
            name: "out-of-bounds-extent",
            what: "AllGather whose recvbuff on rank 1 is one element short",
            nccl: "accepted (ncclInProgress) on every rank; then every rank completes with no error, and rank 1's AllGather writes past the end of its short recvbuff (4 guard bytes after it changed)",
            ranks: 4,
            expect: |r| {
                Some(if r == 1 {
                    ErrorKind::OutOfBounds
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let q = 16;
                let short = usize::from(c.rank() == 1);
                let s = g.input(c, q * 4)?;
                // a separate allocation without guards, so the extent ends exactly at its end
                let r = c.alloc((4 * q - short) * 4)?;
                let _ = g;
                c.nccl_all_gather(s, r, q, I32)
            },
        },
        Scenario {
            name: "illegal-overlap",
            what: "AllGather with sendbuff == recvbuff on every rank (in-place only on rank 0)",
            nccl: "accepted (ncclInProgress) on every rank; then every rank completes with no error (no guard byte changed; what the overlap did to the outputs was not checked)",
            ranks: 4,
            expect: |r| {
                Some(if r == 0 {
                    ErrorKind::RemoteError
                } else {
                    ErrorKind::IllegalOverlap
                })
            },
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 4 * 16 * 4)?;
                c.nccl_all_gather(b, b, 16, I32)
            },
        },
        Scenario {
            name: "group-end-without-start",
            what: "ncclGroupEnd with no open group",
            nccl: "ncclInvalidUsage: \"ncclGroupEnd: not in a group call.\"",
            ranks: 2,
            expect: all::<INVALID_USAGE>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, _| c.nccl_group_end(),
        },
        Scenario {
            name: "send-to-self-without-recv",
            what: "a group with a Send to self and no Recv from self",
            nccl: "the group end is accepted, then the async error ncclInvalidUsage: \"Trying to send to self without a matching recv\"",
            ranks: 2,
            expect: all::<INVALID_USAGE>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let s = g.input(c, 64)?;
                let me = c.rank() as i32;
                c.group(|c| c.nccl_send(s, 16, I32, me))
            },
        },
        Scenario {
            name: "rank-panics-mid-collective",
            what: "rank 1 panics while the others are in an AllReduce",
            nccl: "the other ranks hang",
            ranks: 4,
            expect: |r| {
                Some(if r == 1 {
                    ErrorKind::Panic
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                if c.rank() == 1 {
                    std::thread::sleep(Duration::from_millis(20));
                    panic!("injected panic in rank 1");
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "communicators-in-opposite-order",
            what: "ranks 0-1 use communicator A then B, ranks 2-3 use B then A",
            nccl: "every rank hangs",
            ranks: 4,
            expect: all::<DEADLOCK>,
            short_timeout: false,
            needs_diagnosis: true,
            program: |c, g| {
                let mut a = c.dup()?;
                let mut b = c.dup()?;
                let s = g.input(c, 64)?;
                let r = g.output(c, 64)?;
                let (first, second) = if c.rank() < 2 {
                    (&mut a, &mut b)
                } else {
                    (&mut b, &mut a)
                };
                // the buffers live in the parent's registry: use the typed face on copies
                let mut x = c.read::<i32>(s, 16)?;
                first.all_reduce(&mut x, RedOp::Sum)?;
                second.all_reduce(&mut x, RedOp::Sum)?;
                c.write(r, &x)
            },
        },
        Scenario {
            name: "use-after-error",
            what: "an AllReduce after a count mismatch failed the communicator",
            nccl: "no error to keep: rank 0 (count 8) returns the right sums, then hangs in its next call; ranks 1-2 hang",
            ranks: 3,
            expect: all::<COMM_FAILED>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let count = if c.rank() == 0 { 8 } else { 16 };
                let first = all_reduce(c, g, count, I32, RedOp::Sum);
                if first.as_ref().is_err_and(|e| e.kind != ErrorKind::Mismatch) {
                    return first;
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "bad-datatype-code",
            what: "AllReduce with datatype code 12",
            nccl: "ncclInvalidArgument: \"AllReduce : invalid type 12\"",
            ranks: 2,
            expect: all::<INVALID_DATATYPE>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                c.nccl_all_reduce(b, b, 16, 12, RedOp::Sum)
            },
        },
        Scenario {
            name: "bad-op-code",
            what: "AllReduce with reduction op code 9 (no such PreMulSum)",
            nccl: "ncclInvalidArgument: \"AllReduce : reduction operation 9 unknown to this communicator\"",
            ranks: 2,
            expect: all::<INVALID_OP>,
            short_timeout: false,
            needs_diagnosis: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                c.nccl_all_reduce(b, b, 16, I32, 9)
            },
        },
    ]
}

/// Finds a scenario by name.
pub fn scenario(name: &str) -> Option<Scenario> {
    catalogue().into_iter().find(|s| s.name == name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_unique_and_there_are_at_least_20() {
        let c = catalogue();
        assert!(c.len() >= 20);
        let mut names: Vec<&str> = c.iter().map(|s| s.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), c.len());
    }
}
