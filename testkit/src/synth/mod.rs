//! Synthetic multi-rank NCCL logs with one injected fault: test support for
//! the integration tests, the examples and the speed measurement.
//!
//! A workload is a deterministic function of a seed: step `i` is either a
//! collective (op, count, datatype, reduction op, root all drawn from the
//! seed) or a group of Send/Recv (ring, pipeline, pairwise exchange or an
//! all-to-all with uneven counts) whose counts change from step to step.
//! Each rank's lines are produced lazily, so a gigabyte of log needs no
//! gigabyte of memory. opCount follows NCCL: one per launch, shared by the
//! calls of a group, not advanced by a zero-count collective. COLL lines
//! come from core's trace formatter ([`coll_line`]), the one rankwise's
//! tracer prints.
//!
//! A [`Fault`] changes one rank's behaviour at one position (a collective
//! ordinal `#k`, or the ordinal of a call within a Send→Recv pair), and
//! [`Expected`] says what a correct analyzer must report about it.

use rankwise::core::trace::{LinePrefix, coll_line};
use rankwise::core::{Func, RawCall};
use rankwise::logs::FindingKind;
use std::collections::VecDeque;
use std::io::Write;

/// SplitMix64: small, fast, good enough to draw a workload from.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed)
    }
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }
    /// Uniform in `0..n` (n > 0).
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }
}

/// The kinds of fault the generator can inject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum FaultKind {
    None,
    /// A rank stops before collective #k; the others go on.
    Stop,
    OpKind,
    Count,
    Datatype,
    Redop,
    Root,
    /// A receiver skips one Recv: the sender's Send is unmatched.
    UnmatchedSend,
    /// A sender skips one Send: the receiver's Recv is unmatched.
    UnmatchedRecv,
    /// One Send's count differs from its Recv's.
    P2pCount,
    /// A rank's rooted collective fails argcheck (WARN invalid root); it stops there.
    InvalidRoot,
    /// Every rank issues collective #k with count 0 (not a fault: a note).
    ZeroCount,
    /// A rank leaves out collective #k and goes on with the rest.
    Skip,
    /// A rank leaves out 2 to 5 collectives in a row and goes on.
    SkipSeveral,
    /// A rank makes one collective the others do not, then goes on.
    Extra,
    /// A rank makes collectives #k and #k+1 in the other order.
    Swap,
}

impl FaultKind {
    pub const ALL: [FaultKind; 16] = [
        FaultKind::None,
        FaultKind::Stop,
        FaultKind::OpKind,
        FaultKind::Count,
        FaultKind::Datatype,
        FaultKind::Redop,
        FaultKind::Root,
        FaultKind::UnmatchedSend,
        FaultKind::UnmatchedRecv,
        FaultKind::P2pCount,
        FaultKind::InvalidRoot,
        FaultKind::ZeroCount,
        FaultKind::Skip,
        FaultKind::SkipSeveral,
        FaultKind::Extra,
        FaultKind::Swap,
    ];
}

/// A fault placed at a concrete position.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fault {
    None,
    Stop {
        rank: u32,
        at: u64,
    },
    Mismatch {
        kind: FaultKind,
        rank: u32,
        at: u64,
    },
    /// `kind` is UnmatchedSend, UnmatchedRecv or P2pCount; `nth` counts the
    /// Send→Recv pair's calls from 0.
    P2p {
        kind: FaultKind,
        src: u32,
        dst: u32,
        nth: u64,
    },
    InvalidRoot {
        rank: u32,
        at: u64,
    },
    ZeroCount {
        at: u64,
    },
    /// `rank` leaves out collectives `#at .. #at + calls` and goes on.
    Skip {
        rank: u32,
        at: u64,
        calls: u64,
    },
    /// `rank` makes [`EXTRA_CALL`] before collective `#at`.
    Extra {
        rank: u32,
        at: u64,
    },
    /// `rank` makes collective `#at + 1` before `#at`.
    Swap {
        rank: u32,
        at: u64,
    },
}

/// The call an [`Fault::Extra`] rank adds: an AllReduce whose count no
/// workload draws (`(op, count, datatype, redop, root)`).
pub const EXTRA_CALL: (Func, u64, i32, i32, i32) = (Func::AllReduce, 123_456_789, 7, 0, 0);

/// What the analyzer must report for the injected fault.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Expected {
    /// The headline finding (`None` when the logs are consistent).
    pub kind: Option<FindingKind>,
    pub ranks: Vec<u32>,
    pub peer: Option<u32>,
    pub position: Option<u64>,
    /// Launches per rank (NCCL's opCount at the end), faults included.
    pub launches: Vec<u64>,
    /// For a fault in the collective order: the call the headline names, as
    /// `Op #k` (the first skipped call; the extra call; the first call of
    /// the pair made in the other order; otherwise the call the other
    /// ranks made at the fault's position).
    pub call: Option<String>,
}

/// How the log text looks.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Prefix {
    None,
    Timestamp,
    Torchrun,
    Mpirun,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// One file per rank.
    PerRank,
    /// One file, ranks interleaved at random (each rank's order kept).
    Interleaved,
}

#[derive(Clone, Copy, Debug)]
pub struct Style {
    pub layout: Layout,
    pub prefix: Prefix,
    /// Print ncclCommInitRank / topology / Destroy lines.
    pub init_lines: bool,
    /// rankwise's own trace: one process, the rank in `[..]`, no init lines.
    pub rankwise_trace: bool,
    /// Unrelated lines (NCCL topology chatter, application output) per call, in percent.
    pub noise_percent: u32,
}

impl Default for Style {
    fn default() -> Self {
        Style {
            layout: Layout::PerRank,
            prefix: Prefix::None,
            init_lines: true,
            rankwise_trace: false,
            noise_percent: 30,
        }
    }
}

#[derive(Clone, Debug)]
pub struct Spec {
    pub nranks: u32,
    pub steps: u64,
    pub seed: u64,
    /// Percent of steps that are Send/Recv groups.
    pub p2p_percent: u32,
    /// Repeat the workload every this many steps, as a training loop does
    /// (`None`: every step is drawn afresh).
    pub period: Option<u64>,
    pub style: Style,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pattern {
    Ring,
    Pipeline,
    Pairwise,
    AllToAllv,
}

#[derive(Clone, Copy, Debug)]
enum Step {
    Coll {
        op: Func,
        count: u64,
        datatype: i32,
        redop: i32,
        root: i32,
    },
    P2p {
        pattern: Pattern,
        datatype: i32,
        base: u64,
    },
}

const COLL_OPS: [Func; 8] = [
    Func::AllReduce,
    Func::AllReduce,
    Func::AllReduce,
    Func::Broadcast,
    Func::Reduce,
    Func::AllGather,
    Func::ReduceScatter,
    Func::AlltoAll,
];
const ROOTED_EXTRA: [Func; 2] = [Func::Gather, Func::Scatter];
const COUNTS: [u64; 8] = [1, 7, 1024, 4096, 65536, 1 << 20, 3 << 18, 25_000_000];

mod rank;
use rank::RankGen;
mod spec;
#[cfg(test)]
mod tests;
