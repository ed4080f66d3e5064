//! A workload's steps, the faults' effect on them and what an analyzer
//! must report, and the writing of every rank's log.

use super::*;

impl Spec {
    pub(super) fn step(&self, i: u64) -> Step {
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
    pub(super) fn p2p_calls(
        &self,
        pattern: Pattern,
        base: u64,
        rank: u32,
    ) -> Vec<(bool, u32, u64)> {
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
    pub(super) fn collectives(&self, keep: impl Fn(&Step) -> bool) -> Vec<u64> {
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
    pub(super) fn collective_keys(&self) -> Vec<(Func, u64, i32, i32, i32)> {
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
    pub(super) fn collective_step(&self, k: u64) -> Option<Step> {
        (0..self.steps)
            .map(|i| self.step(i))
            .filter(|s| matches!(s, Step::Coll { .. }))
            .nth(k as usize)
    }

    /// Number of calls in each Send→Recv pair over the whole workload.
    pub(super) fn pair_counts(&self) -> Vec<((u32, u32), u64)> {
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
    pub(super) fn skip_shows_at(&self, at: u64, calls: u64) -> (u64, bool) {
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
    pub(super) fn skipped_or_extra(&self, rank: u32, extra: bool) -> (FindingKind, Vec<u32>) {
        match (extra, self.nranks) {
            (false, _) => (FindingKind::Skipped, vec![rank]),
            (true, 2) => (FindingKind::Skipped, vec![1 - rank]),
            (true, _) => (FindingKind::Extra, vec![rank]),
        }
    }

    pub(super) fn host(&self, rank: u32) -> String {
        if self.style.rankwise_trace {
            "localhost".into()
        } else {
            format!("node{:02}", rank / 4)
        }
    }

    pub(super) fn pid(&self, rank: u32) -> u32 {
        if self.style.rankwise_trace {
            4242
        } else {
            31000 + rank * 7
        }
    }

    pub(super) fn comm_ptr(&self, rank: u32) -> u64 {
        0x55d1_c2a0_0000 + u64::from(rank) * 0x13_4000 + (self.seed & 0xff) * 0x100
    }

    pub(super) fn comm_id(&self) -> u64 {
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
