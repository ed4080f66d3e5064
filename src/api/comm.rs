//! The communicator handle one rank holds, and the path every call takes on
//! any engine: checks, trace, zero-count discard, group queueing (all from
//! `core`), then the engine.

use super::staging::{Region, Staging};
use crate::core::{
    AddressSpace, Call, Error, ErrorKind, Group, Queued, RawCall, Result, check_buffers, check_call,
};
use crate::engine::{Capabilities, Engine};
use crate::trace::RankTracer;

/// One rank's handle on a communicator (≈ `ncclComm_t`), on any engine.
///
/// A communicator belongs to the thread of the rank that made it: it is
/// neither `Send` nor `Sync`, so a rank's communicators cannot end up on
/// another thread, where the engine would mistake whose wait is whose.
///
/// ```compile_fail
/// fn needs_send<T: Send>() {}
/// needs_send::<rankwise::Comm>();
/// ```
pub struct Comm {
    engine: Box<dyn Engine>,
    group: Group,
    /// PreMulSum ops created on this communicator: code 5 + index
    premul: Vec<Option<f64>>,
    tracer: RankTracer,
    /// fill what the contract leaves undefined after each call
    poison: bool,
    /// this rank has been told the communicator failed
    saw_failure: bool,
    /// the typed call in progress's host regions in engine memory, on
    /// engines that need staging
    staging: Staging,
}

impl Comm {
    /// A communicator over `engine`, tracing to `tracer`; `poison` as in
    /// [`crate::local::LaunchOptions::poison`].
    pub fn new(engine: Box<dyn Engine>, tracer: RankTracer, poison: bool) -> Comm {
        tracer.init(engine.handle(), engine.size(), engine.comm_id());
        Comm {
            engine,
            group: Group::default(),
            premul: Vec::new(),
            tracer,
            poison,
            saw_failure: false,
            staging: Staging::default(),
        }
    }

    pub fn rank(&self) -> usize {
        self.engine.rank()
    }
    /// Number of ranks (torch's world size, NCCL's `nranks`).
    pub fn size(&self) -> usize {
        self.engine.size()
    }
    /// Launches so far: what the next traced call prints as opCount.
    pub fn op_count(&self) -> u64 {
        self.group.op_count()
    }
    /// The address printed as `comm` in the trace: distinct per rank.
    pub fn handle(&self) -> usize {
        self.engine.handle()
    }
    /// The communicator id shared by all its ranks (printed as `commId`).
    pub fn comm_id(&self) -> u64 {
        self.engine.comm_id()
    }
    /// What the engine under this communicator can do.
    pub fn capabilities(&self) -> Capabilities {
        self.engine.capabilities()
    }
    pub(super) fn in_group(&self) -> bool {
        self.group.in_group()
    }
    pub(super) fn engine(&self) -> &dyn Engine {
        &*self.engine
    }
    pub(super) fn engine_mut(&mut self) -> &mut dyn Engine {
        &mut *self.engine
    }

    /// A new communicator over the same ranks (≈ `ncclCommSplit` with one
    /// color). Every rank calls it in the same order: the k-th `dup` of a
    /// communicator is the same new communicator on every rank. On the
    /// local engine, waits in any communicator of a launch see ranks
    /// blocked in the others, so using two communicators in opposite orders
    /// is diagnosed, not hung.
    pub fn dup(&mut self) -> Result<Comm> {
        let rank = self.rank();
        let engine = self.engine.dup().map_err(|e| e.on_rank(rank))?;
        let tracer = self.tracer.config().for_rank(rank);
        Ok(Comm::new(engine, tracer, self.poison))
    }

    /// Waits until this rank's launched work is done (≈ `cudaStreamSynchronize`
    /// on the communicator's stream); calls on the local engine return done.
    pub fn synchronize(&mut self) -> Result<()> {
        let rank = self.rank();
        self.engine.synchronize().map_err(|e| e.on_rank(rank))
    }

    /// This rank's program ended (with `error` when it failed): the engine
    /// tells ranks still waiting for it. Launchers call it once per rank.
    pub fn finish(&mut self, error: Option<&Error>) {
        self.engine.finish(error);
    }

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
            .on_rank(self.rank())),
        }
    }
    fn premul_scalar(&self, code: i32) -> Option<f64> {
        let slot = usize::try_from(code - crate::core::redop::NUM_BUILTIN_OPS).ok()?;
        self.premul.get(slot).copied().flatten()
    }

    /// The error for a call on a failed communicator: the failure itself the
    /// first time this rank meets it, NCCL's use-after-error afterwards.
    fn failed_comm(&mut self, why: Error, what: &str) -> Error {
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
        let err = err.on_rank(self.rank());
        self.tracer.warn(&err.message);
        self.group.note_error(&err);
        err
    }

    /// The path of every call: checks (root, datatype, op, buffers), trace,
    /// zero-count discard, group queueing or launch.
    /// `space` resolves the call's pointers; None means the engine's memory
    /// (the raw face).
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
        let (n, me) = (self.size(), self.rank());
        let call = match check_call(&raw, n, &|c| self.premul_scalar(c)) {
            Ok(c) => c,
            Err(e) => return Err(self.reject(e)),
        };
        let space: &dyn AddressSpace = match space {
            Some(s) => s,
            None => self.engine.memory(),
        };
        if let Err(e) = check_buffers(&call, n, me, space) {
            return Err(self.reject(e));
        }
        if traced {
            self.tracer
                .coll(&raw, self.group.op_count(), self.handle(), n);
        }
        match self.group.queue(call) {
            Queued::Waiting => Ok(()),
            Queued::Discarded => self.engine.discard(&call).map_err(|e| self.reject(e)),
            Queued::LaunchNow => self.flush(),
        }
    }

    /// A typed call on an engine that needs staging: the regions are copied
    /// into engine memory and the call's pointers translated, then it takes
    /// the path of every call (checks against the copies' extents, which are
    /// the slices' own).
    pub(super) fn submit_staged(
        &mut self,
        raw: RawCall,
        regions: &[Region],
        traced: bool,
    ) -> Result<()> {
        let rank = self.rank();
        // SAFETY: the typed face passes regions of live slices (writable ones
        // exclusively borrowed) that stay borrowed until its call returns,
        // which is after `finish_typed`.
        unsafe { self.staging.stage(self.engine.memory_mut(), regions) }
            .map_err(|e| e.on_rank(rank))?;
        let raw = RawCall {
            sendbuff: self.staging.translate(raw.sendbuff),
            recvbuff: self.staging.translate(raw.recvbuff),
            ..raw
        };
        self.submit_traced(raw, None, traced)
    }

    /// The end of a typed call: staged regions are copied back (when the
    /// call succeeded) and freed.
    pub(super) fn finish_typed<R>(&mut self, r: Result<R>) -> Result<R> {
        if self.staging.is_empty() {
            return r;
        }
        let rank = self.rank();
        // SAFETY: as in `submit_staged`: the typed call that staged these
        // regions has not returned yet.
        let done = unsafe { self.staging.finish(self.engine.memory_mut(), r.is_ok()) };
        let v = r?;
        done.map_err(|e| e.on_rank(rank))?;
        Ok(v)
    }

    /// Launches what is queued as one operation.
    fn flush(&mut self) -> Result<()> {
        let Some(mut launch) = self.group.take() else {
            return Ok(());
        };
        // checked at launch, after this rank's own argument errors (the most
        // specific) had their say, and after a group collected its calls
        let result = match self.engine.failure() {
            Some(why) => Err(self.failed_comm(why, launch.first_name())),
            None => {
                self.group.number(&mut launch);
                self.engine.launch(&launch)
            }
        };
        if result.is_ok() && self.poison {
            self.poison_undefined(&launch.colls);
        }
        self.group.recycle(launch);
        result.map_err(|e| {
            self.saw_failure |= self.engine.failure().is_some();
            let e = e.on_rank(self.rank());
            self.tracer.warn(&e.message);
            e
        })
    }

    /// Poison mode: fills what the finished calls left undefined on this rank.
    fn poison_undefined(&mut self, calls: &[Call]) {
        let (n, me) = (self.size(), self.rank());
        for c in calls {
            let elems = crate::core::undefined_recv_elems(c.func, n, me, c.root, c.count);
            if elems > 0 && c.recvbuff != 0 {
                let pattern = crate::core::poison_pattern(c.datatype);
                self.engine.memory_mut().fill_pattern(
                    c.recvbuff,
                    elems * c.datatype.size(),
                    &pattern,
                );
            }
        }
    }

    /// `ncclGroupStart`: nests; work launches at the outermost end.
    pub fn group_start(&mut self) -> Result<()> {
        self.group.start();
        Ok(())
    }

    /// `ncclGroupEnd`: at the outermost level, launches the queued calls as
    /// one operation, or returns the first error raised inside the group.
    pub fn group_end(&mut self) -> Result<()> {
        let me = self.rank();
        match self.group.end(me) {
            Ok(true) => self.flush(),
            Ok(false) => Ok(()),
            // the group's own first error was traced when it was raised
            Err(e) if e.rank.is_some() => Err(e),
            Err(e) => Err(self.reject(e)),
        }
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
        if self.group.in_group() && self.group.has_queued() {
            self.tracer
                .warn("communicator dropped with an open group: its queued calls never launched");
        }
    }
}
