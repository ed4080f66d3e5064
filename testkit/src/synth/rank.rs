//! One rank's lines, produced one at a time.

use super::*;

/// Produces one rank's lines, one at a time.
pub(super) struct RankGen<'a> {
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
    pub(super) op_count: u64,
    sent: Vec<u64>,
    received: Vec<u64>,
    queue: VecDeque<Vec<u8>>,
    started: bool,
    done: bool,
    noise: Rng,
    lines: u64,
}

impl<'a> RankGen<'a> {
    pub(super) fn new(spec: &'a Spec, fault: Fault, rank: u32) -> Self {
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

    pub(super) fn prefix(&self, out: &mut Vec<u8>) {
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

    pub(super) fn head(&self, out: &mut Vec<u8>) {
        self.prefix(out);
        let _ = write!(
            out,
            "{}:{}:{} [{}] ",
            self.host, self.pid, self.tid, self.dev
        );
    }

    pub(super) fn push_info(&mut self, msg: std::fmt::Arguments<'_>) {
        let mut l = Vec::with_capacity(200);
        self.head(&mut l);
        l.extend_from_slice(b"NCCL INFO ");
        let _ = l.write_fmt(msg);
        l.push(b'\n');
        self.queue.push_back(l);
    }

    /// The COLL line of `call`, as NCCL (and rankwise's trace) prints it.
    pub(super) fn push_call(&mut self, call: RawCall) {
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

    pub(super) fn push_noise(&mut self) {
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

    pub(super) fn start(&mut self) {
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

    pub(super) fn finish(&mut self) {
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
    pub(super) fn advance(&mut self) -> bool {
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
    pub(super) fn next_line(&mut self, out: &mut Vec<u8>) -> bool {
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
