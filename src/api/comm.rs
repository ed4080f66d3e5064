//! The communicator handle one rank holds, and the path every call takes.

use crate::core::{
    AddressSpace, Call, Error, ErrorKind, Func, RawCall, Result, check_buffers, check_call,
};
use crate::engine::local::exec::{Launch, Scratch, execute};
use crate::engine::local::memory::Registry;
use crate::engine::local::world::World;
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
        &self.world.ranks[self.rank] as *const _ as usize
    }
    /// The communicator id shared by all its ranks (printed as `commId`).
    pub fn comm_id(&self) -> u64 {
        self.world.comm_id
    }
    pub(super) fn in_group(&self) -> bool {
        self.depth > 0
    }

    /// Creates a PreMulSum op (`ncclRedOpCreatePreMulSum`) and returns its code.
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
    pub(super) fn submit(&mut self, raw: RawCall, space: &dyn AddressSpace) -> Result<()> {
        if self.world.has_failed() {
            let why = self.world.failure(self.rank);
            return Err(self.reject(Error::new(
                ErrorKind::CommFailed,
                format!(
                    "{}: this communicator failed earlier ({why}); create a new one",
                    raw.func
                ),
            )));
        }
        let call = match check_call(&raw, self.world.n, &|c| self.premul_scalar(c)) {
            Ok(c) => c,
            Err(e) => return Err(self.reject(e)),
        };
        if let Err(e) = check_buffers(&call, self.world.n, self.rank, space) {
            return Err(self.reject(e));
        }
        self.tracer
            .coll(&raw, self.op_count, self.handle(), self.world.n);
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
        launch.op_count = self.op_count;
        self.op_count += 1;
        let result = execute(&self.world, self.rank, &launch, &mut self.scratch);
        // keep the allocations for the next launch
        launch.colls.clear();
        launch.p2p.clear();
        self.queued = launch;
        result.map_err(|e| {
            let e = e.on_rank(self.rank);
            self.tracer.warn(&e.message);
            e
        })
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
