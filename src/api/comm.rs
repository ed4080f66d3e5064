//! The communicator handle one rank holds, and the path every call takes.

use crate::core::{
    AddressSpace, Call, Error, ErrorKind, Func, RawCall, Result, check_buffers, check_call,
};
use crate::engine::local::exec::{Launch, Scratch, execute};
use crate::engine::local::memory::Registry;
use crate::engine::local::world::{World, lock};
use crate::trace::RankTracer;
use std::sync::Arc;

/// One rank's handle on a communicator (≈ `ncclComm_t`).
pub struct Comm {
    world: Arc<World>,
    rank: usize,
    pub(super) registry: Registry,
    op_count: u64,
    depth: u32,
    queued: Launch,
    group_error: Option<Error>,
    /// PreMulSum ops created on this communicator: code 5 + index
    premul: Vec<Option<f64>>,
    scratch: Scratch,
    tracer: RankTracer,
    /// communicators duplicated from this one so far
    dups: u64,
    /// this rank has been told the communicator failed
    saw_failure: bool,
}

impl Comm {
    pub(crate) fn new(world: Arc<World>, rank: usize, tracer: RankTracer) -> Comm {
        let comm = Comm {
            rank,
            registry: Registry::default(),
            op_count: 0,
            depth: 0,
            queued: Launch::default(),
            group_error: None,
            premul: Vec::new(),
            scratch: Scratch::default(),
            tracer,
            world,
            dups: 0,
            saw_failure: false,
        };
        comm.tracer
            .init(comm.handle(), comm.world.n, comm.world.comm_id);
        comm
    }

    pub fn rank(&self) -> usize {
        self.rank
    }
    /// Number of ranks (torch's world size, NCCL's `nranks`).
    pub fn size(&self) -> usize {
        self.world.n
    }
    /// Launches so far: what the next traced call prints as opCount.
    pub fn op_count(&self) -> u64 {
        self.op_count
    }
    /// The address printed as `comm` in the trace: distinct per rank.
    pub fn handle(&self) -> usize {
        &self.world.entered[self.rank] as *const _ as usize
    }
    /// The communicator id shared by all its ranks (printed as `commId`).
    pub fn comm_id(&self) -> u64 {
        self.world.comm_id
    }
    pub(super) fn in_group(&self) -> bool {
        self.depth > 0
    }

    /// A new communicator over the same ranks (≈ `ncclCommSplit` with one
    /// color). Every rank calls it in the same order: the k-th `dup` of a
    /// communicator is the same new communicator on every rank. Waits in any
    /// communicator of a launch see ranks blocked in the others, so using two
    /// communicators in opposite orders is diagnosed, not hung.
    pub fn dup(&mut self) -> Comm {
        self.dups += 1;
        let key = (self.world.comm_id, self.dups);
        let child = {
            let threads = &self.world.threads;
            let mut dups = lock(&threads.dups);
            dups.entry(key)
                .or_insert_with(|| {
                    let id = self.world.comm_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.dups;
                    World::new(self.world.n, self.world.timeout, id, threads.clone())
                })
                .clone()
        };
        let tracer = self.tracer.config().for_rank(self.rank);
        Comm::new(child, self.rank, tracer)
    }

    /// Creates a PreMulSum op (`ncclRedOpCreatePreMulSum`) and returns its code.
    /// The code of a live PreMulSum op with this scalar, created on first
    /// use: calls that pass `RedOp::PreMulSum` directly reuse one code per
    /// scalar instead of creating an op per call.
    pub(super) fn pre_mul_sum_code(&mut self, scalar: f64) -> i32 {
        match self
            .premul
            .iter()
            .position(|s| s.is_some_and(|s| s.to_bits() == scalar.to_bits()))
        {
            Some(i) => crate::core::redop::NUM_BUILTIN_OPS + i as i32,
            None => self.create_pre_mul_sum(scalar),
        }
    }

    pub fn create_pre_mul_sum(&mut self, scalar: f64) -> i32 {
        self.premul.push(Some(scalar));
        crate::core::redop::NUM_BUILTIN_OPS + self.premul.len() as i32 - 1
    }
    /// Destroys a PreMulSum op (`ncclRedOpDestroy`).
    pub fn destroy_op(&mut self, code: i32) -> Result<()> {
        let slot = (code - crate::core::redop::NUM_BUILTIN_OPS) as usize;
        match self.premul.get_mut(slot) {
            Some(s @ Some(_)) if code >= crate::core::redop::NUM_BUILTIN_OPS => {
                *s = None;
                Ok(())
            }
            _ => Err(Error::new(
                ErrorKind::InvalidOp,
                format!(
                    "ncclRedOpDestroy: op {code} is not a live PreMulSum op of this communicator"
                ),
            )
            .on_rank(self.rank)),
        }
    }
    fn premul_scalar(&self, code: i32) -> Option<f64> {
        let slot = usize::try_from(code - crate::core::redop::NUM_BUILTIN_OPS).ok()?;
        self.premul.get(slot).copied().flatten()
    }

    /// The error for a call on a failed communicator: the failure itself the
    /// first time this rank meets it, NCCL's use-after-error afterwards.
    fn failed_comm(&mut self, what: &str) -> Error {
        let why = self.world.failure(self.rank);
        // the first call to meet the failure reports the failure itself
        if !std::mem::replace(&mut self.saw_failure, true) {
            return why;
        }
        Error::new(
            ErrorKind::CommFailed,
            format!("{what}: this communicator failed earlier ({why}); create a new one"),
        )
    }

    fn reject(&mut self, err: Error) -> Error {
        let err = err.on_rank(self.rank);
        self.tracer.warn(&err.message);
        if self.in_group() && self.group_error.is_none() {
            self.group_error = Some(err.clone());
        }
        err
    }

    /// The path of every call: checks (root, datatype, op, buffers), trace,
    /// zero-count discard, group queueing or launch.
    /// `space` resolves the call's pointers; None means this rank's
    /// allocation registry (the raw face).
    pub(super) fn submit(&mut self, raw: RawCall, space: Option<&dyn AddressSpace>) -> Result<()> {
        self.submit_traced(raw, space, true)
    }

    /// As [`Comm::submit`]; `traced: false` is for calls rankwise adds on its
    /// own (the zero-count pairs that let AlltoAllv check every split).
    pub(super) fn submit_traced(
        &mut self,
        raw: RawCall,
        space: Option<&dyn AddressSpace>,
        traced: bool,
    ) -> Result<()> {
        let call = match check_call(&raw, self.world.n, &|c| self.premul_scalar(c)) {
            Ok(c) => c,
            Err(e) => return Err(self.reject(e)),
        };
        let checked = check_buffers(
            &call,
            self.world.n,
            self.rank,
            space.unwrap_or(&self.registry),
        );
        if let Err(e) = checked {
            return Err(self.reject(e));
        }

        if traced {
            self.tracer
                .coll(&raw, self.op_count, self.handle(), self.world.n);
        }
        if call.count == 0 && !call.func.is_p2p() {
            // NCCL discards empty collectives after logging them
            return Ok(());
        }
        self.queue(call);
        if self.in_group() {
            Ok(())
        } else {
            self.flush()
        }
    }

    fn queue(&mut self, call: Call) {
        if call.func.is_p2p() {
            self.queued.p2p.push(call);
        } else {
            self.queued.colls.push(call);
        }
    }

    /// Launches what is queued as one operation.
    fn flush(&mut self) -> Result<()> {
        let mut launch = std::mem::take(&mut self.queued);
        if launch.colls.is_empty() && launch.p2p.is_empty() {
            return Ok(());
        }
        // checked at launch, after this rank's own argument errors (the most
        // specific) had their say, and after a group collected its calls
        let result = if self.world.has_failed() {
            let what = launch
                .colls
                .first()
                .or(launch.p2p.first())
                .map(|c| c.func.name())
                .unwrap_or("group");
            Err(self.failed_comm(what))
        } else {
            launch.op_count = self.op_count;
            self.op_count += 1;
            execute(&self.world, self.rank, &launch, &mut self.scratch)
        };
        if result.is_ok() && self.world.threads.poison {
            self.poison_undefined(&launch.colls);
        }
        // keep the allocations for the next launch
        launch.colls.clear();
        launch.p2p.clear();
        self.queued = launch;
        result.map_err(|e| {
            self.saw_failure |= self.world.has_failed();
            let e = e.on_rank(self.rank);
            self.tracer.warn(&e.message);
            e
        })
    }

    /// Poison mode: fills what the finished calls left undefined on this rank.
    fn poison_undefined(&self, calls: &[Call]) {
        for c in calls {
            let elems =
                crate::core::undefined_recv_elems(c.func, self.world.n, self.rank, c.root, c.count);
            if elems > 0 && c.recvbuff != 0 {
                let pattern = crate::core::poison_pattern(c.datatype);
                self.registry
                    .fill_pattern(c.recvbuff, elems * c.datatype.size(), &pattern);
            }
        }
    }

    /// `ncclGroupStart`: nests; work launches at the outermost end.
    pub fn group_start(&mut self) -> Result<()> {
        self.depth += 1;
        Ok(())
    }

    /// `ncclGroupEnd`: at the outermost level, launches the queued calls as
    /// one operation, or returns the first error raised inside the group.
    pub fn group_end(&mut self) -> Result<()> {
        if self.depth == 0 {
            return Err(self.reject(Error::new(
                ErrorKind::InvalidUsage,
                "ncclGroupEnd: no group is open (ncclGroupEnd without a matching ncclGroupStart)",
            )));
        }
        self.depth -= 1;
        if self.depth > 0 {
            return Ok(());
        }
        if let Some(e) = self.group_error.take() {
            self.queued.colls.clear();
            self.queued.p2p.clear();
            return Err(e);
        }
        let to_self = |f: Func| {
            self.queued
                .p2p
                .iter()
                .filter(|c| c.func == f && c.root == self.rank)
                .count()
        };
        let (sends, recvs) = (to_self(Func::Send), to_self(Func::Recv));
        if sends != recvs {
            self.queued.colls.clear();
            self.queued.p2p.clear();
            return Err(self.reject(Error::new(
                ErrorKind::InvalidUsage,
                format!("ncclGroupEnd: {sends} Send(s) to self but {recvs} Recv(s) from self in this group: a send to self needs a matching recv from self in the same group"),
            )));
        }
        self.flush()
    }

    /// Runs `body` inside one group (start, body, end), ending the group even
    /// when the body fails.
    pub fn group<R>(&mut self, body: impl FnOnce(&mut Comm) -> Result<R>) -> Result<R> {
        self.group_start()?;
        let r = body(self);
        let end = self.group_end();
        let r = r?;
        end.map(|()| r)
    }
}

impl Drop for Comm {
    fn drop(&mut self) {
        // an open group with queued work would be lost silently: say so
        if self.depth > 0 && !(self.queued.colls.is_empty() && self.queued.p2p.is_empty()) {
            self.tracer
                .warn("communicator dropped with an open group: its queued calls never launched");
        }
    }
}
