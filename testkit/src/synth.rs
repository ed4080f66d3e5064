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

impl Spec {
    fn step(&self, i: u64) -> Step {
        let i = self.period.map_or(i, |p| i % p.max(1));
        let mut r = Rng::new(self.seed ^ i.wrapping_mul(0x2545_f491_4f6c_dd1d));
        let p2p = self.nranks >= 2 && r.below(100) < u64::from(self.p2p_percent);
        if p2p {
            let pattern = match r.below(4) {
                0 => Pattern::Ring,
                1 => Pattern::Pipeline,
                2 => Pattern::Pairwise,
                _ => Pattern::AllToAllv,
            };
            Step::P2p {
                pattern,
                datatype: [7, 9, 6][r.below(3) as usize],
                // counts change from step to step, so a skipped call shows
                base: 1000 + 17 * i,
            }
        } else {
            let op = if r.below(5) == 0 {
                ROOTED_EXTRA[r.below(2) as usize]
            } else {
                COLL_OPS[r.below(COLL_OPS.len() as u64) as usize]
            };
            let count = if r.below(2) == 0 {
                COUNTS[r.below(COUNTS.len() as u64) as usize]
            } else {
                1 + r.below(1 << 22)
            };
            Step::Coll {
                op,
                count,
                datatype: r.below(12) as i32,
                redop: if op.reduces() { r.below(5) as i32 } else { 0 },
                root: if op.is_rooted() {
                    r.below(u64::from(self.nranks)) as i32
                } else {
                    0
                },
            }
        }
    }

    /// The Send/Recv calls of a group step on `rank`: (is_send, peer, count).
    fn p2p_calls(&self, pattern: Pattern, base: u64, rank: u32) -> Vec<(bool, u32, u64)> {
        let n = self.nranks;
        let cnt = |s: u32, d: u32| base + 3 * u64::from(s) + u64::from(d);
        let mut v = Vec::new();
        match pattern {
            Pattern::Ring => {
                let next = (rank + 1) % n;
                let prev = (rank + n - 1) % n;
                v.push((true, next, cnt(rank, next)));
                v.push((false, prev, cnt(prev, rank)));
            }
            Pattern::Pipeline => {
                if rank + 1 < n {
                    v.push((true, rank + 1, cnt(rank, rank + 1)));
                }
                if rank > 0 {
                    v.push((false, rank - 1, cnt(rank - 1, rank)));
                }
            }
            Pattern::Pairwise => {
                let peer = rank ^ 1;
                if peer < n {
                    v.push((true, peer, cnt(rank, peer)));
                    v.push((false, peer, cnt(peer, rank)));
                }
            }
            Pattern::AllToAllv => {
                for p in 0..n {
                    v.push((true, p, cnt(rank, p)));
                    v.push((false, p, cnt(p, rank)));
                }
            }
        }
        v
    }

    /// Collective ordinals and the steps they are at, with a filter.
    fn collectives(&self, keep: impl Fn(&Step) -> bool) -> Vec<u64> {
        let mut k = 0;
        let mut out = Vec::new();
        for i in 0..self.steps {
            let s = self.step(i);
            if let Step::Coll { .. } = s {
                if keep(&s) {
                    out.push(k);
                }
                k += 1;
            }
        }
        out
    }

    /// Every collective's contract, in order: `(op, count, datatype, redop
    /// if it reduces, root if it has one)`.
    fn collective_keys(&self) -> Vec<(Func, u64, i32, i32, i32)> {
        (0..self.steps)
            .filter_map(|i| match self.step(i) {
                Step::Coll {
                    op,
                    count,
                    datatype,
                    redop,
                    root,
                } => Some((
                    op,
                    count,
                    datatype,
                    if op.reduces() { redop } else { 0 },
                    if op.is_rooted() { root } else { 0 },
                )),
                Step::P2p { .. } => None,
            })
            .collect()
    }

    /// The step of collective `#k`.
    fn collective_step(&self, k: u64) -> Option<Step> {
        (0..self.steps)
            .map(|i| self.step(i))
            .filter(|s| matches!(s, Step::Coll { .. }))
            .nth(k as usize)
    }

    /// Number of calls in each Send→Recv pair over the whole workload.
    fn pair_counts(&self) -> Vec<((u32, u32), u64)> {
        let mut m = std::collections::BTreeMap::new();
        for i in 0..self.steps {
            if let Step::P2p { pattern, base, .. } = self.step(i) {
                for r in 0..self.nranks {
                    for (send, peer, _) in self.p2p_calls(pattern, base, r) {
                        if send {
                            *m.entry((r, peer)).or_insert(0u64) += 1;
                        }
                    }
                }
            }
        }
        m.into_iter().collect()
    }

    /// Place a fault of `kind` at a random eligible position (drawn from
    /// `rng`). `None` when the workload has no eligible position.
    pub fn place(&self, kind: FaultKind, rng: &mut Rng) -> Option<Fault> {
        let n = self.nranks;
        let pick = |v: &[u64], rng: &mut Rng| -> Option<u64> {
            (!v.is_empty()).then(|| v[rng.below(v.len() as u64) as usize])
        };
        let rank = rng.below(u64::from(n)) as u32;
        Some(match kind {
            FaultKind::None => Fault::None,
            FaultKind::Stop => Fault::Stop {
                rank,
                at: pick(&self.collectives(|_| true), rng)?,
            },
            FaultKind::OpKind | FaultKind::Count | FaultKind::Datatype => Fault::Mismatch {
                kind,
                rank,
                at: pick(
                    &self.collectives(|s| matches!(s, Step::Coll { count, .. } if *count > 0)),
                    rng,
                )?,
            },
            FaultKind::Redop => Fault::Mismatch {
                kind,
                rank,
                at: pick(
                    &self.collectives(|s| matches!(s, Step::Coll { op, .. } if op.reduces())),
                    rng,
                )?,
            },
            FaultKind::Root => {
                if n < 2 {
                    return None;
                }
                Fault::Mismatch {
                    kind,
                    rank,
                    at: pick(
                        &self.collectives(|s| matches!(s, Step::Coll { op, .. } if op.is_rooted())),
                        rng,
                    )?,
                }
            }
            FaultKind::InvalidRoot => Fault::InvalidRoot {
                rank,
                at: pick(
                    &self.collectives(|s| matches!(s, Step::Coll { op, .. } if op.is_rooted())),
                    rng,
                )?,
            },
            FaultKind::ZeroCount => Fault::ZeroCount {
                at: pick(&self.collectives(|_| true), rng)?,
            },
            FaultKind::Skip | FaultKind::SkipSeveral => {
                let calls = if kind == FaultKind::Skip {
                    1
                } else {
                    2 + rng.below(4)
                };
                // at least two calls after the skipped ones, so the rest
                // of the rank's stream can be seen to line up
                let len = self.collectives(|_| true).len() as u64;
                let last = len.checked_sub(calls + 2)?;
                Fault::Skip {
                    rank,
                    at: rng.below(last + 1),
                    calls,
                }
            }
            FaultKind::Extra => {
                let len = self.collectives(|_| true).len() as u64;
                Fault::Extra {
                    rank,
                    at: pick(&(0..len).collect::<Vec<_>>(), rng)?,
                }
            }
            FaultKind::Swap => {
                // a pair of different calls, so the order shows, with a
                // call after them, so the streams can be seen to line up
                let keys = self.collective_keys();
                let pairs: Vec<u64> = (0..keys.len().saturating_sub(2))
                    .filter(|&j| keys[j] != keys[j + 1])
                    .map(|j| j as u64)
                    .collect();
                Fault::Swap {
                    rank,
                    at: pick(&pairs, rng)?,
                }
            }
            FaultKind::UnmatchedSend | FaultKind::UnmatchedRecv | FaultKind::P2pCount => {
                let pairs = self.pair_counts();
                if pairs.is_empty() {
                    return None;
                }
                let ((src, dst), len) = pairs[rng.below(pairs.len() as u64) as usize];
                Fault::P2p {
                    kind,
                    src,
                    dst,
                    nth: rng.below(len),
                }
            }
        })
    }

    /// What the analyzer must say about `fault` in this workload.
    pub fn expected(&self, fault: Fault) -> Expected {
        let launches = (0..self.nranks)
            .map(|r| {
                let mut g = RankGen::new(self, fault, r);
                let mut sink = Vec::new();
                while g.next_line(&mut sink) {
                    sink.clear();
                }
                g.op_count
            })
            .collect();
        let (kind, ranks, peer, position) = match fault {
            Fault::None => (None, vec![], None, None),
            Fault::Stop { rank, at } | Fault::InvalidRoot { rank, at } => {
                (Some(FindingKind::Stopped), vec![rank], None, Some(at))
            }
            Fault::Mismatch { kind, rank, at } => {
                let k = match kind {
                    FaultKind::OpKind => FindingKind::OpMismatch,
                    FaultKind::Count => FindingKind::CountMismatch,
                    FaultKind::Datatype => FindingKind::DatatypeMismatch,
                    FaultKind::Redop => FindingKind::RedopMismatch,
                    _ => FindingKind::RootMismatch,
                };
                (Some(k), vec![rank], None, Some(at))
            }
            Fault::P2p {
                kind,
                src,
                dst,
                nth,
            } => match kind {
                FaultKind::UnmatchedSend => (
                    Some(FindingKind::UnmatchedSend),
                    vec![src],
                    Some(dst),
                    Some(nth),
                ),
                FaultKind::UnmatchedRecv => (
                    Some(FindingKind::UnmatchedRecv),
                    vec![dst],
                    Some(src),
                    Some(nth),
                ),
                _ => (
                    Some(FindingKind::P2pMismatch),
                    vec![src],
                    Some(dst),
                    Some(nth),
                ),
            },
            Fault::ZeroCount { at } => (None, vec![], None, Some(at)),
            Fault::Skip { rank, at, calls } => {
                let (p, lines_up) = self.skip_shows_at(at, calls);
                if lines_up {
                    let (kind, ranks) = self.skipped_or_extra(rank, false);
                    (Some(kind), ranks, None, Some(p))
                } else {
                    (Some(FindingKind::Stopped), vec![rank], None, Some(p))
                }
            }
            Fault::Extra { rank, at } => {
                let (kind, ranks) = self.skipped_or_extra(rank, true);
                (Some(kind), ranks, None, Some(at))
            }
            Fault::Swap { rank, at } => (Some(FindingKind::Reordered), vec![rank], None, Some(at)),
        };
        let call = match fault {
            Fault::Skip { at, calls, .. } => {
                let p = self.skip_shows_at(at, calls).0;
                self.collective_keys()
                    .get(p as usize)
                    .map(|k| format!("{} #{p}", k.0.name()))
            }
            Fault::Extra { at, .. } => Some(format!("{} #{at}", EXTRA_CALL.0.name())),
            Fault::Swap { at, .. }
            | Fault::Stop { at, .. }
            | Fault::InvalidRoot { at, .. }
            | Fault::Mismatch { at, .. } => self
                .collective_keys()
                .get(at as usize)
                .map(|k| format!("{} #{at}", k.0.name())),
            Fault::None | Fault::P2p { .. } | Fault::ZeroCount { .. } => None,
        };
        Expected {
            kind,
            ranks,
            peer,
            position,
            launches,
            call,
        }
    }

    /// Where a rank that leaves out collectives `#at .. #at + calls` first
    /// differs from the others, and whether its stream goes on past there.
    /// Calls equal to the ones after them cannot be told apart: the
    /// difference shows at the end of such a run.
    fn skip_shows_at(&self, at: u64, calls: u64) -> (u64, bool) {
        let keys = self.collective_keys();
        let (d, mut p) = (calls as usize, at as usize);
        while p + d < keys.len() && keys[p] == keys[p + d] {
            p += 1;
        }
        (p as u64, p + d < keys.len())
    }

    /// Who the headline blames for a rank's skipped (`extra` false) or
    /// extra call. With two ranks neither outnumbers the other, and a call
    /// one rank lacks is told as skipped by that rank (the commoner fault):
    /// an extra call on `rank` is a skipped call on the other rank.
    fn skipped_or_extra(&self, rank: u32, extra: bool) -> (FindingKind, Vec<u32>) {
        match (extra, self.nranks) {
            (false, _) => (FindingKind::Skipped, vec![rank]),
            (true, 2) => (FindingKind::Skipped, vec![1 - rank]),
            (true, _) => (FindingKind::Extra, vec![rank]),
        }
    }

    fn host(&self, rank: u32) -> String {
        if self.style.rankwise_trace {
            "localhost".into()
        } else {
            format!("node{:02}", rank / 4)
        }
    }

    fn pid(&self, rank: u32) -> u32 {
        if self.style.rankwise_trace {
            4242
        } else {
            31000 + rank * 7
        }
    }

    fn comm_ptr(&self, rank: u32) -> u64 {
        0x55d1_c2a0_0000 + u64::from(rank) * 0x13_4000 + (self.seed & 0xff) * 0x100
    }

    fn comm_id(&self) -> u64 {
        Rng::new(self.seed).next_u64()
    }

    /// Render all files: `(name, bytes)`.
    pub fn render(&self, fault: Fault) -> Vec<(String, Vec<u8>)> {
        let mut files: Vec<(String, Vec<u8>)> = Vec::new();
        self.render_to(fault, |name, bytes| {
            match files.iter_mut().find(|f| f.0 == name) {
                Some(f) => f.1.extend_from_slice(bytes),
                None => files.push((name.to_string(), bytes.to_vec())),
            }
        });
        files
    }

    /// Render in chunks: `write(file name, bytes)`, each file's chunks in order.
    pub fn render_to(&self, fault: Fault, mut write: impl FnMut(&str, &[u8])) {
        let mut gens: Vec<RankGen<'_>> = (0..self.nranks)
            .map(|r| RankGen::new(self, fault, r))
            .collect();
        let mut line = Vec::with_capacity(512);
        match self.style.layout {
            Layout::PerRank => {
                for (r, g) in gens.iter_mut().enumerate() {
                    let h = format!("rank{r:03}.log");
                    let h = h.as_str();
                    let mut chunk = Vec::with_capacity(1 << 16);
                    while g.next_line(&mut line) {
                        chunk.extend_from_slice(&line);
                        line.clear();
                        if chunk.len() >= 1 << 16 {
                            write(h, &chunk);
                            chunk.clear();
                        }
                    }
                    write(h, &chunk);
                }
            }
            Layout::Interleaved => {
                let h = "all-ranks.log";
                let mut rng = Rng::new(self.seed ^ 0x1234);
                let mut live: Vec<usize> = (0..gens.len()).collect();
                let mut chunk = Vec::with_capacity(1 << 16);
                while !live.is_empty() {
                    let j = rng.below(live.len() as u64) as usize;
                    let burst = 1 + rng.below(4);
                    for _ in 0..burst {
                        if gens[live[j]].next_line(&mut line) {
                            chunk.extend_from_slice(&line);
                            line.clear();
                        } else {
                            live.swap_remove(j);
                            break;
                        }
                    }
                    if chunk.len() >= 1 << 16 {
                        write(h, &chunk);
                        chunk.clear();
                    }
                }
                write(h, &chunk);
            }
        }
    }
}

/// Produces one rank's lines, one at a time.
struct RankGen<'a> {
    spec: &'a Spec,
    fault: Fault,
    rank: u32,
    host: String,
    pid: u32,
    tid: u32,
    dev: u32,
    comm: u64,
    step: u64,
    coll_k: u64,
    op_count: u64,
    sent: Vec<u64>,
    received: Vec<u64>,
    queue: VecDeque<Vec<u8>>,
    started: bool,
    done: bool,
    noise: Rng,
    lines: u64,
}

impl<'a> RankGen<'a> {
    fn new(spec: &'a Spec, fault: Fault, rank: u32) -> Self {
        let n = spec.nranks as usize;
        RankGen {
            spec,
            fault,
            rank,
            host: spec.host(rank),
            pid: spec.pid(rank),
            tid: if spec.style.rankwise_trace {
                spec.pid(rank) + 1 + rank
            } else {
                spec.pid(rank)
            },
            dev: if spec.style.rankwise_trace {
                rank
            } else {
                rank % 4
            },
            comm: spec.comm_ptr(rank),
            step: 0,
            coll_k: 0,
            op_count: 0,
            sent: vec![0; n],
            received: vec![0; n],
            queue: VecDeque::new(),
            started: false,
            done: false,
            noise: Rng::new(spec.seed ^ (u64::from(rank) << 32) ^ 0xabcdef),
            lines: 0,
        }
    }

    fn prefix(&self, out: &mut Vec<u8>) {
        match self.spec.style.prefix {
            Prefix::None => {}
            Prefix::Timestamp => {
                let t = 9 * 3600 + self.lines / 50;
                let _ = write!(
                    out,
                    "[2026-12-02 {:02}:{:02}:{:02}] ",
                    (t / 3600) % 24,
                    (t / 60) % 60,
                    t % 60
                );
            }
            Prefix::Torchrun => {
                let _ = write!(out, "[rank{}]:", self.rank);
            }
            Prefix::Mpirun => {
                let _ = write!(out, "[1,{}]<stdout>:", self.rank);
            }
        }
    }

    fn head(&self, out: &mut Vec<u8>) {
        self.prefix(out);
        let _ = write!(
            out,
            "{}:{}:{} [{}] ",
            self.host, self.pid, self.tid, self.dev
        );
    }

    fn push_info(&mut self, msg: std::fmt::Arguments<'_>) {
        let mut l = Vec::with_capacity(200);
        self.head(&mut l);
        l.extend_from_slice(b"NCCL INFO ");
        let _ = l.write_fmt(msg);
        l.push(b'\n');
        self.queue.push_back(l);
    }

    /// The COLL line of `call`, as NCCL (and rankwise's trace) prints it.
    fn push_call(&mut self, call: RawCall) {
        let mut l = Vec::with_capacity(200);
        self.prefix(&mut l);
        let pre = LinePrefix {
            host: &self.host,
            pid: self.pid,
            tid: self.tid,
            dev: self.dev as usize,
        };
        let line = coll_line(
            &pre,
            &call,
            self.op_count,
            self.comm as usize,
            self.spec.nranks as usize,
        );
        l.extend_from_slice(line.as_bytes());
        l.push(b'\n');
        self.queue.push_back(l);
    }

    fn push_noise(&mut self) {
        if self.spec.style.noise_percent == 0 {
            return;
        }
        let mut budget = u64::from(self.spec.style.noise_percent);
        while budget > 0 {
            let chance = budget.min(100);
            budget -= chance;
            if self.noise.below(100) >= chance {
                continue;
            }
            let mut l = Vec::with_capacity(64);
            match self.noise.below(3) {
                0 => {
                    self.head(&mut l);
                    let _ = write!(
                        l,
                        "NCCL INFO Channel {:02}/32 : 0 1 2 3",
                        self.noise.below(32)
                    );
                }
                1 => {
                    self.prefix(&mut l);
                    let _ = write!(
                        l,
                        "step {} loss {:.3}",
                        self.step,
                        (self.noise.below(5000) as f64) / 1000.0
                    );
                }
                _ => self.prefix(&mut l), // a blank line, launcher prefix only
            }
            l.push(b'\n');
            self.queue.push_back(l);
        }
    }

    fn start(&mut self) {
        self.started = true;
        let st = self.spec.style;
        if st.init_lines && !st.rankwise_trace {
            let (comm, r, n, d, id) = (
                self.comm,
                self.rank,
                self.spec.nranks,
                self.dev,
                self.spec.comm_id(),
            );
            self.push_info(format_args!("NCCL version 2.28.9+cuda13.0"));
            self.push_info(format_args!(
                "ncclCommInitRank comm 0x{comm:x} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId {:x}000 commId 0x{id:x} - Init START",
                0x18 + d
            ));
            self.push_info(format_args!(
                "comm 0x{comm:x} rank {r} nRanks {n} nNodes {} localRanks {} localRank {d} MNNVL 0",
                n.div_ceil(4),
                n.min(4)
            ));
            self.push_info(format_args!(
                "ncclCommInitRank comm 0x{comm:x} rank {r} nranks {n} cudaDev {d} nvmlDev {d} busId {:x}000 commId 0x{id:x} - Init COMPLETE",
                0x18 + d
            ));
        }
    }

    fn finish(&mut self) {
        let st = self.spec.style;
        if st.init_lines && !st.rankwise_trace {
            let (comm, r, n, d) = (self.comm, self.rank, self.spec.nranks, self.dev);
            self.push_info(format_args!(
                "comm 0x{comm:x} rank {r} nranks {n} cudaDev {d} busId {:x}000 - Destroy COMPLETE",
                0x18 + d
            ));
        }
    }

    /// Queue the lines of the next step; false when the rank has no more.
    fn advance(&mut self) -> bool {
        if self.done {
            return false;
        }
        if !self.started {
            self.start();
            return true;
        }
        if self.step >= self.spec.steps {
            self.finish();
            self.done = true;
            return true;
        }
        let i = self.step;
        self.step += 1;
        let base_ptr = 0x7f00_0000_0000 + (u64::from(self.rank) << 32);
        match self.spec.step(i) {
            Step::Coll {
                mut op,
                mut count,
                mut datatype,
                mut redop,
                mut root,
            } => {
                let k = self.coll_k;
                self.coll_k += 1;
                if let Fault::Swap { rank, at } = self.fault
                    && rank == self.rank
                    && (k == at || k == at + 1)
                {
                    // this rank makes #at+1 in #at's place and #at in #at+1's
                    let other = if k == at { at + 1 } else { at };
                    if let Some(Step::Coll {
                        op: o,
                        count: q,
                        datatype: t,
                        redop: x,
                        root: r,
                    }) = self.spec.collective_step(other)
                    {
                        (op, count, datatype, redop, root) = (o, q, t, x, r);
                    }
                }
                match self.fault {
                    Fault::Skip { rank, at, calls }
                        if rank == self.rank && (at..at + calls).contains(&k) =>
                    {
                        self.push_noise();
                        return true;
                    }
                    Fault::Extra { rank, at } if rank == self.rank && at == k => {
                        let (op, count, datatype, redop, root) = EXTRA_CALL;
                        self.push_call(RawCall {
                            func: op,
                            sendbuff: (base_ptr + 0x3000_0000) as usize,
                            recvbuff: (base_ptr + 0x3000_0000) as usize,
                            count: count as usize,
                            datatype,
                            op: redop,
                            root,
                        });
                        self.op_count += 1;
                    }
                    Fault::Stop { rank, at } if rank == self.rank && at == k => {
                        self.done = true;
                        return true;
                    }
                    Fault::InvalidRoot { rank, at } if rank == self.rank && at == k => {
                        let n = self.spec.nranks;
                        let mut l = Vec::new();
                        self.prefix(&mut l);
                        let t = 9 * 3600 + self.lines / 50;
                        let _ = writeln!(
                            l,
                            "[2026-12-02 {:02}:{:02}:{:02}] {}:{}:{} [{}] misc/argcheck.cc:48 NCCL WARN {} : invalid root {} (root should be in the 0..{n} range)",
                            (t / 3600) % 24,
                            (t / 60) % 60,
                            t % 60,
                            self.host,
                            self.pid,
                            self.tid,
                            self.dev,
                            op.name(),
                            n + self.rank
                        );
                        self.queue.push_back(l);
                        self.push_info(format_args!("enqueue.cc:2643 -> 4"));
                        self.done = true;
                        return true;
                    }
                    Fault::ZeroCount { at } if at == k => count = 0,
                    Fault::Mismatch { kind, rank, at } if rank == self.rank && at == k => {
                        match kind {
                            FaultKind::OpKind => {
                                op = if op == Func::AllReduce {
                                    Func::AllGather
                                } else {
                                    Func::AllReduce
                                };
                            }
                            FaultKind::Count => count = count * 2 + 1,
                            FaultKind::Datatype => datatype = (datatype + 1) % 12,
                            FaultKind::Redop => redop = (redop + 1) % 5,
                            _ => root = (root + 1) % self.spec.nranks as i32,
                        }
                    }
                    _ => {}
                }
                let (s, r) = if count == 0 {
                    (0, 0)
                } else {
                    (base_ptr + (k % 64) * 0x20_0000, base_ptr + 0x4000_0000)
                };
                self.push_call(RawCall {
                    func: op,
                    sendbuff: s as usize,
                    recvbuff: r as usize,
                    count: count as usize,
                    datatype,
                    op: if op.reduces() { redop } else { 0 },
                    root,
                });
                if count > 0 {
                    self.op_count += 1;
                }
            }
            Step::P2p {
                pattern,
                datatype,
                base,
            } => {
                let calls = self.spec.p2p_calls(pattern, base, self.rank);
                let mut any = false;
                for (send, peer, mut count) in calls {
                    let p = peer as usize;
                    let nth = if send { self.sent[p] } else { self.received[p] };
                    if send {
                        self.sent[p] += 1;
                    } else {
                        self.received[p] += 1;
                    }
                    if let Fault::P2p {
                        kind,
                        src,
                        dst,
                        nth: fnth,
                    } = self.fault
                    {
                        let (me, other) = if send {
                            (self.rank, peer)
                        } else {
                            (peer, self.rank)
                        };
                        if me == src && other == dst && nth == fnth {
                            match kind {
                                FaultKind::UnmatchedSend if !send => continue,
                                FaultKind::UnmatchedRecv if send => continue,
                                FaultKind::P2pCount if send => count = count * 3 + 1,
                                _ => {}
                            }
                        }
                    }
                    any = true;
                    let buf = base_ptr + 0x6000_0000 + u64::from(peer) * 0x10_0000;
                    // Send's buffer is its sendbuff, Recv's its recvbuff
                    let (func, sendbuff, recvbuff) = if send {
                        (Func::Send, buf, 0)
                    } else {
                        (Func::Recv, 0, buf)
                    };
                    self.push_call(RawCall {
                        func,
                        sendbuff: sendbuff as usize,
                        recvbuff: recvbuff as usize,
                        count: count as usize,
                        datatype,
                        op: 0,
                        root: peer as i32,
                    });
                }
                if any {
                    self.op_count += 1;
                }
            }
        }
        self.push_noise();
        true
    }

    /// Append the next line (with its `\n`) to `out`; false at the end.
    fn next_line(&mut self, out: &mut Vec<u8>) -> bool {
        while self.queue.is_empty() {
            if !self.advance() {
                return false;
            }
        }
        match self.queue.pop_front() {
            Some(l) => {
                out.extend_from_slice(&l);
                self.lines += 1;
                true
            }
            None => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(seed: u64) -> Spec {
        Spec {
            nranks: 4,
            steps: 60,
            seed,
            p2p_percent: 30,
            period: None,
            style: Style::default(),
        }
    }

    #[test]
    fn generation_is_deterministic() {
        let s = spec(7);
        assert_eq!(s.render(Fault::None), s.render(Fault::None));
        assert_ne!(s.render(Fault::None), spec(8).render(Fault::None));
    }

    #[test]
    fn interleaving_keeps_each_ranks_order() {
        let mut s = spec(3);
        let per_rank = s.render(Fault::None);
        s.style.layout = Layout::Interleaved;
        let all = s.render(Fault::None);
        assert_eq!(all.len(), 1);
        let text = String::from_utf8(all[0].1.clone()).unwrap();
        for (r, (_, bytes)) in per_rank.iter().enumerate() {
            let mine = String::from_utf8(bytes.clone()).unwrap();
            let tag = format!(":{}:", s.pid(r as u32));
            let from_all: Vec<&str> = text.lines().filter(|l| l.contains(&tag)).collect();
            let from_own: Vec<&str> = mine.lines().filter(|l| l.contains(&tag)).collect();
            assert_eq!(from_all, from_own);
        }
    }

    #[test]
    fn faults_change_exactly_one_rank() {
        let s = spec(11);
        let clean = s.render(Fault::None);
        let mut rng = Rng::new(5);
        for kind in [
            FaultKind::Count,
            FaultKind::Datatype,
            FaultKind::OpKind,
            FaultKind::Skip,
            FaultKind::SkipSeveral,
            FaultKind::Extra,
            FaultKind::Swap,
        ] {
            let f = s.place(kind, &mut rng).unwrap();
            let bad = s.render(f);
            let differing: Vec<usize> = (0..4).filter(|&r| clean[r].1 != bad[r].1).collect();
            assert_eq!(differing.len(), 1, "{kind:?}");
        }
    }

    #[test]
    fn a_skip_shows_where_the_next_call_first_differs() {
        let s = spec(11);
        let keys = s.collective_keys();
        // a skip of one call at #j shows at the first #p >= j whose call
        // differs from #p+1's; where neighbours differ, at #j itself
        for j in 0..keys.len() as u64 - 2 {
            let (p, lines_up) = s.skip_shows_at(j, 1);
            let mut q = j as usize;
            while keys[q] == keys[q + 1] {
                q += 1;
            }
            assert_eq!((p, lines_up), (q as u64, true), "#{j}");
        }
        // skipping the last two calls: nothing after them, a stop
        let last = keys.len() as u64 - 2;
        assert!(!s.skip_shows_at(last, 2).1);
    }

    #[test]
    fn skip_extra_and_swap_change_the_rank_s_collectives_as_said() {
        let s = spec(12);
        let colls = |f: Fault, rank: usize| -> Vec<String> {
            let text = String::from_utf8(s.render(f)[rank].1.clone()).unwrap();
            text.lines()
                .filter(|l| {
                    l.contains(": opCount ") && !l.contains(" Send: ") && !l.contains(" Recv: ")
                })
                .map(|l| {
                    let msg = &l[l.find("NCCL INFO ").unwrap() + 10..];
                    // the op and its contract fields, without opCount and pointers
                    let op = msg.split(':').next().unwrap().to_string();
                    let field = |k: &str| {
                        let i = msg.find(&format!(" {k} ")).unwrap() + k.len() + 2;
                        msg[i..].split(' ').next().unwrap().to_string()
                    };
                    format!(
                        "{op} {} {} {} {}",
                        field("count"),
                        field("datatype"),
                        field("op"),
                        field("root")
                    )
                })
                .collect()
        };
        let clean = colls(Fault::None, 2);
        let skip = colls(
            Fault::Skip {
                rank: 2,
                at: 5,
                calls: 3,
            },
            2,
        );
        assert_eq!(skip, [&clean[..5], &clean[8..]].concat());
        let extra = colls(Fault::Extra { rank: 2, at: 5 }, 2);
        assert_eq!(extra[5], "AllReduce 123456789 7 0 0");
        assert_eq!([&extra[..5], &extra[6..]].concat(), clean);
        let swap = colls(Fault::Swap { rank: 2, at: 5 }, 2);
        let mut swapped = clean.clone();
        swapped.swap(5, 6);
        assert_eq!(swap, swapped);
        // the other ranks are untouched
        assert_eq!(
            colls(
                Fault::Skip {
                    rank: 2,
                    at: 5,
                    calls: 3
                },
                1
            ),
            colls(Fault::None, 1)
        );
    }
}
