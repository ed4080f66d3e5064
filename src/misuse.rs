//! The misuse catalogue: programs that break a collective contract the way
//! real programs do, what NCCL does with each (from CONTRACTS.md and NCCL's
//! documented behaviour), and what rankwise must do instead: return the
//! expected error kind on every rank, fast, without touching memory outside
//! the call's legal outputs (every buffer sits between guard regions).

use crate::core::{DataType, Error, ErrorKind, RedOp};
use crate::launch::{self, EngineKind, LaunchOptions};
use crate::trace::Tracer;
use crate::{Comm, NULL, Result};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Bytes of guard before and after every buffer.
const GUARD: usize = 64;
const GUARD_BYTE: u8 = 0xCC;
/// Every rank must have its error within this time.
pub const DEADLINE: Duration = Duration::from_secs(2);
/// The wait timeout for scenarios where a rank never arrives.
const SHORT_TIMEOUT: Duration = Duration::from_millis(300);

/// Buffers with guard regions, and a snapshot to compare against.
#[derive(Default)]
pub struct Guards {
    regions: Vec<Region>,
}

struct Region {
    base: usize,
    len: usize,
    /// the interior may be written by the call (an output)
    writable: bool,
    snapshot: Vec<u8>,
}

impl Guards {
    /// A buffer of `bytes` between two guards, filled with a rank-specific
    /// pattern; returns the interior address.
    pub fn buffer(&mut self, c: &mut Comm, bytes: usize, writable: bool) -> Result<usize> {
        let base = c.alloc(bytes + 2 * GUARD)?;
        let mut fill = vec![GUARD_BYTE; bytes + 2 * GUARD];
        for (i, b) in fill[GUARD..GUARD + bytes].iter_mut().enumerate() {
            *b = (i * 7 + c.rank() * 31 + 1) as u8;
        }
        c.write(base, &fill)?;
        self.regions.push(Region {
            base,
            len: bytes,
            writable,
            snapshot: fill,
        });
        Ok(base + GUARD)
    }
    /// An input buffer (never written by the call).
    pub fn input(&mut self, c: &mut Comm, bytes: usize) -> Result<usize> {
        self.buffer(c, bytes, false)
    }
    /// An output buffer (its interior may be written).
    pub fn output(&mut self, c: &mut Comm, bytes: usize) -> Result<usize> {
        self.buffer(c, bytes, true)
    }
    /// Bytes changed where nothing may change: guards, inputs.
    pub fn violations(&self, c: &Comm) -> usize {
        let mut bad = 0;
        for r in &self.regions {
            let now: Vec<u8> = c.read(r.base, r.len + 2 * GUARD).unwrap_or_default();
            for (i, (a, b)) in now.iter().zip(&r.snapshot).enumerate() {
                let interior = (GUARD..GUARD + r.len).contains(&i);
                if a != b && !(interior && r.writable) {
                    bad += 1;
                }
            }
        }
        bad
    }
}

type Program = fn(&mut Comm, &mut Guards) -> Result<()>;

/// One misuse scenario.
pub struct Scenario {
    pub name: &'static str,
    pub what: &'static str,
    /// What NCCL does with it.
    pub nccl: &'static str,
    pub ranks: usize,
    /// The error kind each rank must return (None: the rank succeeds).
    pub expect: fn(usize) -> Option<ErrorKind>,
    pub short_timeout: bool,
    pub program: Program,
}

/// What one rank did.
#[derive(Debug, Clone)]
pub struct RankOutcome {
    pub error: Option<Error>,
    pub elapsed: Duration,
    pub violations: usize,
}

/// What a scenario did on every rank, and whether that passes.
#[derive(Debug, Clone)]
pub struct Outcome {
    pub name: &'static str,
    pub ranks: Vec<RankOutcome>,
    pub expected: Vec<Option<ErrorKind>>,
    pub passed: bool,
}

impl Outcome {
    pub fn slowest(&self) -> Duration {
        self.ranks
            .iter()
            .map(|r| r.elapsed)
            .max()
            .unwrap_or_default()
    }
    /// `Mismatch on all 4 ranks`, or `OutOfBounds on 1; RemoteError on 0,2,3`.
    pub fn summary(&self) -> String {
        let kind = |r: &RankOutcome| {
            r.error
                .as_ref()
                .map(|e| format!("{:?}", e.kind))
                .unwrap_or_else(|| "ok".into())
        };
        let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
        for (r, o) in self.ranks.iter().enumerate() {
            let k = kind(o);
            match groups.iter_mut().find(|(g, _)| *g == k) {
                Some((_, rs)) => rs.push(r),
                None => groups.push((k, vec![r])),
            }
        }
        if groups.len() == 1 {
            return format!("{} on all {} ranks", groups[0].0, self.ranks.len());
        }
        groups.sort_by_key(|(_, rs)| rs.len());
        groups
            .iter()
            .map(|(k, rs)| {
                format!(
                    "{k} on {}",
                    rs.iter()
                        .map(|r| r.to_string())
                        .collect::<Vec<_>>()
                        .join(",")
                )
            })
            .collect::<Vec<_>>()
            .join("; ")
    }
    /// Why it failed, for the report.
    pub fn problems(&self) -> Vec<String> {
        let mut out = Vec::new();
        for (r, (o, want)) in self.ranks.iter().zip(&self.expected).enumerate() {
            match (&o.error, want) {
                (None, Some(w)) => out.push(format!("rank {r}: no error, expected {w:?}")),
                (Some(e), Some(w)) if e.kind != *w => {
                    out.push(format!("rank {r}: {e} (expected {w:?})"))
                }
                (Some(e), None) => out.push(format!("rank {r}: {e} (expected success)")),
                _ => {}
            }
            if o.elapsed > DEADLINE {
                out.push(format!(
                    "rank {r}: took {:?} (limit {DEADLINE:?})",
                    o.elapsed
                ));
            }
            if o.violations > 0 {
                out.push(format!(
                    "rank {r}: {} bytes changed outside the call's legal outputs",
                    o.violations
                ));
            }
        }
        out
    }
}

/// Runs one scenario on `engine`.
pub fn run(engine: EngineKind, s: &Scenario) -> Outcome {
    let timeout = if s.short_timeout {
        SHORT_TIMEOUT
    } else {
        Duration::from_secs(30)
    };
    let opts = LaunchOptions::default()
        .with_timeout(timeout)
        .with_tracer(Tracer::off());
    let extra: Mutex<Vec<(Duration, usize)>> = Mutex::new(vec![(Duration::ZERO, 0); s.ranks]);
    let start = Instant::now();
    let results = launch::launch_each(engine, opts, s.ranks, |c| {
        let mut g = Guards::default();
        let r = (s.program)(c, &mut g);
        let v = g.violations(c);
        extra.lock().unwrap_or_else(|p| p.into_inner())[c.rank()] = (start.elapsed(), v);
        r
    });
    let extra = extra.into_inner().unwrap_or_else(|p| p.into_inner());
    let expected: Vec<Option<ErrorKind>> = (0..s.ranks).map(s.expect).collect();
    let ranks: Vec<RankOutcome> = match results {
        Ok(rs) => rs
            .into_iter()
            .zip(extra)
            .map(|(r, (t, v))| RankOutcome {
                error: r.err(),
                // a rank that panicked recorded nothing: its time is the launch's
                elapsed: if t.is_zero() { start.elapsed() } else { t },
                violations: v,
            })
            .collect(),
        Err(e) => vec![
            RankOutcome {
                error: Some(e),
                elapsed: start.elapsed(),
                violations: 0
            };
            s.ranks
        ],
    };
    let passed = ranks.iter().zip(&expected).all(|(o, want)| {
        o.error.as_ref().map(|e| e.kind) == *want && o.elapsed <= DEADLINE && o.violations == 0
    });
    Outcome {
        name: s.name,
        ranks,
        expected,
        passed,
    }
}

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
            nccl: "hang or silent corruption",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            program: |c, g| {
                let count = if c.rank() == 2 { 1000 } else { 1024 };
                all_reduce(c, g, count, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "datatype-mismatch",
            what: "AllReduce where rank 1 passes float32 and the others int32",
            nccl: "silent corruption",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "silent corruption",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "silent corruption",
            ranks: 3,
            expect: all::<MISMATCH>,
            short_timeout: false,
            program: |c, g| {
                let s = if c.rank() == 0 { 2.0 } else { 0.5 };
                all_reduce(c, g, 16, DataType::Float32, RedOp::PreMulSum(s))
            },
        },
        Scenario {
            name: "root-mismatch",
            what: "Broadcast where rank 2 passes root 1 and the others root 0",
            nccl: "hang or silent corruption",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
            program: |c, g| {
                let b = g.output(c, 256)?;
                let root = if c.rank() == 2 { 1 } else { 0 };
                c.nccl_broadcast(b, b, 64, I32, root)
            },
        },
        Scenario {
            name: "op-kind-mismatch",
            what: "rank 1 calls AllGather where the others call AllReduce",
            nccl: "hang",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "hang",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            what: "rank 3 is busy past the timeout (300 ms here) before its AllReduce",
            nccl: "hang (no timeout of its own)",
            ranks: 4,
            expect: all::<TIMEOUT>,
            short_timeout: true,
            program: |c, g| {
                if c.rank() == 3 {
                    std::thread::sleep(Duration::from_millis(600));
                }
                all_reduce(c, g, 16, I32, RedOp::Sum)
            },
        },
        Scenario {
            name: "rank-finishes-early",
            what: "rank 3 ends its program without the AllReduce the others enter",
            nccl: "hang",
            ranks: 4,
            expect: |r| (r != 3).then_some(ErrorKind::Deadlock),
            short_timeout: false,
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
            nccl: "hang once messages exceed NCCL's buffers",
            ranks: 4,
            expect: all::<DEADLOCK>,
            short_timeout: false,
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
            nccl: "hang",
            ranks: 4,
            expect: all::<UNMATCHED>,
            short_timeout: false,
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
            nccl: "hang (count-0 Send/Recv are queued and matched, never skipped)",
            ranks: 4,
            expect: all::<UNMATCHED>,
            short_timeout: false,
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
            nccl: "hang or truncation",
            ranks: 2,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "silent corruption",
            ranks: 2,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "hang or silent corruption",
            ranks: 4,
            expect: all::<MISMATCH>,
            short_timeout: false,
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
            nccl: "error (ncclInvalidArgument), with a message that reads as if 4 were legal",
            ranks: 4,
            expect: all::<INVALID_ROOT>,
            short_timeout: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                c.nccl_broadcast(b, b, 16, I32, 4)
            },
        },
        Scenario {
            name: "null-root-recvbuff",
            what: "Reduce to root 2 whose recvbuff is NULL",
            nccl: "crash or illegal memory access (pointers are not checked by default)",
            ranks: 4,
            expect: |r| {
                Some(if r == 2 {
                    ErrorKind::NullPointer
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
            program: |c, g| {
                let s = g.input(c, 64)?;
                c.nccl_reduce(s, NULL, 16, I32, RedOp::Sum, 2)
            },
        },
        Scenario {
            name: "out-of-bounds-extent",
            what: "AllGather whose recvbuff on rank 1 is one element short",
            nccl: "silent corruption past the allocation, or illegal address",
            ranks: 4,
            expect: |r| {
                Some(if r == 1 {
                    ErrorKind::OutOfBounds
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
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
            nccl: "silent corruption (ranks 1-3 send slice 0 as their own)",
            ranks: 4,
            expect: |r| {
                Some(if r == 0 {
                    ErrorKind::RemoteError
                } else {
                    ErrorKind::IllegalOverlap
                })
            },
            short_timeout: false,
            program: |c, g| {
                let b = g.output(c, 4 * 16 * 4)?;
                c.nccl_all_gather(b, b, 16, I32)
            },
        },
        Scenario {
            name: "group-end-without-start",
            what: "ncclGroupEnd with no open group",
            nccl: "error (ncclInvalidUsage)",
            ranks: 2,
            expect: all::<INVALID_USAGE>,
            short_timeout: false,
            program: |c, _| c.nccl_group_end(),
        },
        Scenario {
            name: "send-to-self-without-recv",
            what: "a group with a Send to self and no Recv from self",
            nccl: "error (ncclInvalidUsage)",
            ranks: 2,
            expect: all::<INVALID_USAGE>,
            short_timeout: false,
            program: |c, g| {
                let s = g.input(c, 64)?;
                let me = c.rank() as i32;
                c.group(|c| c.nccl_send(s, 16, I32, me))
            },
        },
        Scenario {
            name: "rank-panics-mid-collective",
            what: "rank 1 panics while the others are in an AllReduce",
            nccl: "hang",
            ranks: 4,
            expect: |r| {
                Some(if r == 1 {
                    ErrorKind::Panic
                } else {
                    ErrorKind::RemoteError
                })
            },
            short_timeout: false,
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
            nccl: "hang",
            ranks: 4,
            expect: all::<DEADLOCK>,
            short_timeout: false,
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
            nccl: "error: the communicator keeps its asynchronous error",
            ranks: 3,
            expect: all::<COMM_FAILED>,
            short_timeout: false,
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
            nccl: "error (ncclInvalidArgument)",
            ranks: 2,
            expect: all::<INVALID_DATATYPE>,
            short_timeout: false,
            program: |c, g| {
                let b = g.output(c, 64)?;
                c.nccl_all_reduce(b, b, 16, 12, RedOp::Sum)
            },
        },
        Scenario {
            name: "bad-op-code",
            what: "AllReduce with reduction op code 9 (no such PreMulSum)",
            nccl: "error (ncclInvalidArgument)",
            ranks: 2,
            expect: all::<INVALID_OP>,
            short_timeout: false,
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

    #[test]
    fn guards_catch_a_stray_write() {
        let out = crate::local::launch(1, |c| {
            let mut g = Guards::default();
            let inp = g.input(c, 16)?;
            let out = g.output(c, 16)?;
            c.write(out, &[1u8; 16])?;
            let clean = g.violations(c);
            c.write(out + 16, &[9u8])?; // one byte into the guard after the output
            c.write(inp, &[0u8])?; // and one into the input
            Ok((clean, g.violations(c)))
        })
        .unwrap();
        assert_eq!(out, vec![(0, 2)]);
    }
}
