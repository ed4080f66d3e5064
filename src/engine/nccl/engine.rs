//! One rank's end of an NCCL communicator: the [`Engine`] a [`crate::Comm`]
//! holds. Before each launch the ranks agree ([`crate::agreement`]: the
//! collectives compared, every Send/Recv pair met, and the peers' verdicts
//! heard, through the side channel or, when every rank is on this host,
//! the shared-memory lane), so a mismatched program is an error that names
//! the ranks, never an NCCL hang. Then the calls go to NCCL as one group on a
//! non-blocking communicator; every wait polls `ncclCommGetAsyncError` and
//! the stream under the launch's deadline, and a deadline that passes ends
//! in `ncclCommAbort` and a Timeout error, never in an endless wait.

use super::cuda::{Device, Stream};
use super::ffi::{self, IN_PROGRESS, SUCCESS, ncclComm_t, ncclUniqueId};
use super::library::{self, Nccl};
use super::memory::{Gpu, Table};
use crate::agreement::{self, Link, Peers, keys, missing::missing_error};
use crate::core::{Call, DataType, Error, ErrorKind, Func, Launch, Posted, RedOp, Result, wire};
use crate::engine::{Capabilities, Engine, Memory};
use crate::transport::lane;
use crate::transport::store::SideChannel;
use std::collections::HashMap;
use std::ffi::{c_int, c_void};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How a rank's engine behaves.
#[derive(Debug, Clone, Copy)]
pub struct Options {
    /// Longest any wait (side channel or NCCL) may last.
    pub timeout: Duration,
    /// Compare posts across ranks before NCCL is called.
    pub check_agreement: bool,
}

pub struct NcclEngine {
    nccl: &'static Nccl,
    comm: ncclComm_t,
    /// the communicator's address, kept for the trace after an abort
    handle: usize,
    rank: usize,
    size: usize,
    /// this communicator's name in the side channel
    key: String,
    chan: Arc<dyn SideChannel>,
    /// the agreement with the other ranks, whose owner ids in the side
    /// channel are their ranks
    peers: Peers,
    opts: Options,
    comm_id: u64,
    /// PreMulSum ops made on this communicator, by (scalar bits, datatype)
    premul: HashMap<(u64, i32), c_int>,
    failed: Option<Error>,
    dups: u64,
    memory: Table<Gpu>,
    stream: Stream,
    device: Rc<Device>,
}

/// The error NCCL reported, with its last-error text.
fn nccl_error(nccl: &Nccl, comm: ncclComm_t, what: &str, code: c_int) -> Error {
    let last = if comm.is_null() {
        String::new()
    } else {
        // SAFETY: ncclGetLastError returns a NUL-terminated string owned by
        // NCCL (or NULL), valid until the next NCCL call on this thread.
        let p = unsafe { (nccl.api.get_last_error)(comm) };
        if p.is_null() {
            String::new()
        } else {
            // SAFETY: non-NULL, NUL-terminated (above).
            unsafe { std::ffi::CStr::from_ptr(p) }
                .to_string_lossy()
                .into_owned()
        }
    };
    let kind = match code {
        1 | 2 => ErrorKind::System,
        5 => ErrorKind::InvalidUsage,
        6 => ErrorKind::RemoteError,
        8 => ErrorKind::Timeout,
        _ => ErrorKind::Internal,
    };
    let detail = if last.is_empty() {
        String::new()
    } else {
        format!(": {last}")
    };
    Error::new(
        kind,
        format!("{what} returned {}{detail}", ffi::result_name(code)),
    )
}

/// Polls until a non-blocking communicator's pending work is issued: Ok
/// when `ncclCommGetAsyncError` says ncclSuccess, Err(None) at the
/// deadline, Err(Some) on an NCCL error.
fn wait_ready(
    nccl: &Nccl,
    comm: ncclComm_t,
    deadline: Instant,
    what: &str,
) -> std::result::Result<(), Option<Error>> {
    let mut spins = 0u32;
    loop {
        let mut st: c_int = IN_PROGRESS;
        // SAFETY: comm is a live communicator; st is a valid out-pointer.
        let rc = unsafe { (nccl.api.comm_get_async_error)(comm, &mut st) };
        if rc != SUCCESS {
            return Err(Some(nccl_error(nccl, comm, "ncclCommGetAsyncError", rc)));
        }
        match st {
            SUCCESS => return Ok(()),
            IN_PROGRESS => {}
            e => return Err(Some(nccl_error(nccl, comm, what, e))),
        }
        if Instant::now() >= deadline {
            return Err(None);
        }
        spins += 1;
        if spins < 1000 {
            std::thread::yield_now();
        } else {
            std::thread::sleep(Duration::from_micros(100));
        }
    }
}

impl NcclEngine {
    pub const CAPABILITIES: Capabilities = Capabilities {
        name: "nccl",
        diagnoses_deadlock: false,
        needs_staging: true,
    };

    /// Rank `rank` of `size` on GPU `device`: makes the device current on
    /// this thread, takes the ncclUniqueId from rank 0 through `chan`, and
    /// initialises a non-blocking communicator, all within `opts.timeout`.
    pub fn connect(
        rank: usize,
        size: usize,
        device: usize,
        chan: Arc<dyn SideChannel>,
        opts: Options,
    ) -> Result<NcclEngine> {
        let nccl = library::nccl().map_err(|e| Error::new(ErrorKind::System, e.to_string()))?;
        let dev = Rc::new(Device::open(device)?);
        let deadline = Instant::now() + opts.timeout;
        let key = "c0".to_string();
        let id_key = keys::unique_id(&key);
        let mut id = ncclUniqueId { internal: [0; 128] };
        if rank == 0 {
            // SAFETY: writes one ncclUniqueId through the pointer.
            let rc = unsafe { (nccl.api.get_unique_id)(&mut id) };
            if rc != SUCCESS {
                return Err(nccl_error(
                    nccl,
                    std::ptr::null_mut(),
                    "ncclGetUniqueId",
                    rc,
                ));
            }
            let bytes: Vec<u8> = id.internal.iter().map(|c| *c as u8).collect();
            chan.set(&id_key, &bytes)?;
        } else {
            let bytes = match chan.get(&id_key, 0, deadline)? {
                Ok(b) => b,
                Err(m) => {
                    return Err(missing_error(
                        &[(0, m)],
                        "the ncclUniqueId (ncclCommInitRank)",
                        opts.timeout,
                    )
                    .on_rank(rank));
                }
            };
            if bytes.len() != 128 {
                return Err(Error::new(ErrorKind::Internal, "garbled ncclUniqueId"));
            }
            for (d, s) in id.internal.iter_mut().zip(&bytes) {
                *d = *s as std::ffi::c_char;
            }
        }
        let comm_id = wire::fnv1a(&id.internal.iter().map(|c| *c as u8).collect::<Vec<_>>());
        let mut config = ffi::config(false);
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: comm and config are valid pointers; id is passed by value.
        let rc = unsafe {
            (nccl.api.comm_init_rank_config)(
                &mut comm,
                size as c_int,
                id,
                rank as c_int,
                &mut config,
            )
        };
        if rc != SUCCESS && rc != IN_PROGRESS {
            return Err(nccl_error(nccl, comm, "ncclCommInitRankConfig", rc).on_rank(rank));
        }
        Self::ready(nccl, comm, deadline, "ncclCommInitRankConfig", opts.timeout)
            .map_err(|e| e.on_rank(rank))?;
        let stream = Stream::new()?;
        let peers = Self::peers(&chan, &key, rank, size, opts, deadline);
        Ok(NcclEngine {
            nccl,
            comm,
            handle: comm as usize,
            rank,
            size,
            key,
            chan,
            peers,
            opts,
            comm_id,
            premul: HashMap::new(),
            failed: None,
            dups: 0,
            memory: Table::new(Gpu),
            stream,
            device: dev,
        })
    }

    /// The agreement of rank `rank` of `size` on the communicator named
    /// `key`: on the shared-memory lane when every rank is on this host
    /// (set up here, a step every rank makes at the same point), else
    /// through `chan`.
    fn peers(
        chan: &Arc<dyn SideChannel>,
        key: &str,
        rank: usize,
        size: usize,
        opts: Options,
        deadline: Instant,
    ) -> Peers {
        let mut link = Link::new(chan.clone(), key.to_string(), (0..size).collect());
        if opts.check_agreement {
            link.join_lane(rank, lane::wanted(), deadline);
        }
        Peers::new(rank, size, Some(link))
    }

    /// Waits for a freshly made communicator; aborts it at the deadline.
    fn ready(
        nccl: &Nccl,
        comm: ncclComm_t,
        deadline: Instant,
        what: &str,
        timeout: Duration,
    ) -> Result<()> {
        match wait_ready(nccl, comm, deadline, what) {
            Ok(()) => Ok(()),
            Err(e) => {
                // SAFETY: comm is the communicator being made; abort frees it.
                unsafe { (nccl.api.comm_abort)(comm) };
                Err(e.unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Timeout,
                        format!("{what} did not complete within {timeout:?}: ncclCommAbort called"),
                    )
                }))
            }
        }
    }

    /// The NCCL version and library this engine runs on.
    pub fn library(&self) -> &'static Nccl {
        self.nccl
    }

    /// The GPU this rank uses.
    pub fn device(&self) -> (usize, &str) {
        (self.device.ordinal, &self.device.bus_id)
    }

    fn fail(&mut self, e: Error) -> Error {
        let e = e.on_rank(self.rank);
        if self.failed.is_none() {
            self.failed = Some(e.clone());
            // ranks polling NCCL for this communicator look here
            let _ = self
                .chan
                .set(&keys::failed(&self.key), e.to_string().as_bytes());
        }
        e
    }

    /// Aborts the communicator (NCCL's way out of a stuck call).
    fn abort(&mut self) {
        if !self.comm.is_null() {
            // SAFETY: comm is live; after abort it is never used again.
            unsafe { (self.nccl.api.comm_abort)(self.comm) };
            self.comm = std::ptr::null_mut();
        }
    }

    /// The NCCL op for a call's reduction, creating PreMulSum ops on first use.
    fn op_code(&mut self, c: &Call) -> Result<c_int> {
        let RedOp::PreMulSum(s) = c.op else {
            return Ok(c.op.builtin_code().unwrap_or(0));
        };
        let key = (s.to_bits(), c.datatype.code());
        if let Some(op) = self.premul.get(&key) {
            return Ok(*op);
        }
        let mut scalar = scalar_bytes(c.datatype, s);
        let mut op: c_int = 0;
        // SAFETY: scalar holds one element of the datatype; NCCL copies it
        // (host-immediate residence) before returning.
        let rc = unsafe {
            (self.nccl.api.red_op_create_pre_mul_sum)(
                &mut op,
                scalar.as_mut_ptr() as *mut c_void,
                c.datatype.code(),
                ffi::SCALAR_HOST_IMMEDIATE,
                self.comm,
            )
        };
        if rc != SUCCESS {
            return Err(nccl_error(
                self.nccl,
                self.comm,
                "ncclRedOpCreatePreMulSum",
                rc,
            ));
        }
        self.premul.insert(key, op);
        Ok(op)
    }

    /// Issues one call into the open group.
    fn issue(&self, c: &Call, op: c_int) -> c_int {
        let api = &self.nccl.api;
        let (s, r) = (c.sendbuff as *const c_void, c.recvbuff as *mut c_void);
        let (dt, root) = (c.datatype.code(), c.root as c_int);
        let (comm, st) = (self.comm, self.stream.0 as ffi::cudaStream_t);
        // SAFETY: every pointer passed its extent check against this rank's
        // device allocations (or is NULL where the contract allows it), and
        // every rank agreed on count, datatype, op and root before this
        // call, so NCCL reads and writes only inside them.
        unsafe {
            match c.func {
                Func::AllReduce => (api.all_reduce)(s, r, c.count, dt, op, comm, st),
                Func::Reduce => (api.reduce)(s, r, c.count, dt, op, root, comm, st),
                Func::Broadcast => (api.broadcast)(s, r, c.count, dt, root, comm, st),
                Func::AllGather => (api.all_gather)(s, r, c.count, dt, comm, st),
                Func::ReduceScatter => (api.reduce_scatter)(s, r, c.count, dt, op, comm, st),
                Func::AlltoAll => (api.all_to_all)(s, r, c.count, dt, comm, st),
                Func::Gather => (api.gather)(s, r, c.count, dt, root, comm, st),
                Func::Scatter => (api.scatter)(s, r, c.count, dt, root, comm, st),
                Func::Send => (api.send)(s, c.count, dt, root, comm, st),
                Func::Recv => (api.recv)(r, c.count, dt, root, comm, st),
            }
        }
    }

    /// Waits for the launch's work on the stream, polling NCCL's async
    /// error, and (after the first second) whether another rank failed.
    fn wait_stream(&mut self, deadline: Instant, what: &str) -> Result<()> {
        let start = Instant::now();
        let mut next_look = start + Duration::from_secs(1);
        let mut spins = 0u32;
        loop {
            if self.stream.query()? {
                return Ok(());
            }
            let mut st: c_int = SUCCESS;
            // SAFETY: comm is live; st is a valid out-pointer.
            unsafe { (self.nccl.api.comm_get_async_error)(self.comm, &mut st) };
            if st != SUCCESS && st != IN_PROGRESS {
                let e = nccl_error(self.nccl, self.comm, what, st);
                self.abort();
                return Err(e);
            }
            let now = Instant::now();
            if now >= deadline {
                self.abort();
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{what} did not complete within {:?} on rank {}: ncclCommAbort called",
                        self.opts.timeout, self.rank
                    ),
                ));
            }
            if now >= next_look {
                next_look = now + Duration::from_millis(250);
                let k = keys::failed(&self.key);
                if let Ok(Ok(why)) = self.chan.get(&k, self.rank, now) {
                    self.abort();
                    return Err(Error::new(
                        ErrorKind::RemoteError,
                        format!(
                            "{what}: another rank failed ({}): ncclCommAbort called",
                            String::from_utf8_lossy(&why)
                        ),
                    ));
                }
            }
            spins += 1;
            if spins < 2000 {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }

    fn run(&mut self, launch: &Launch) -> Result<()> {
        let what = launch.describe();
        if self.comm.is_null() {
            return Err(Error::new(
                ErrorKind::CommFailed,
                format!("{what}: the NCCL communicator was aborted"),
            ));
        }
        let mut ops = Vec::with_capacity(launch.colls.len());
        for c in &launch.colls {
            ops.push(self.op_code(c)?);
        }
        let deadline = Instant::now() + self.opts.timeout;
        let api = &self.nccl.api;
        // SAFETY: no arguments; opens a group on this thread.
        unsafe { (api.group_start)() };
        let mut first: Option<(Func, c_int)> = None;
        for (c, op) in launch
            .colls
            .iter()
            .zip(ops)
            .chain(launch.p2p.iter().map(|c| (c, 0)))
        {
            let rc = self.issue(c, op);
            if rc != SUCCESS && rc != IN_PROGRESS && first.is_none() {
                first = Some((c.func, rc));
            }
        }
        // SAFETY: closes the group opened above.
        let rc = unsafe { (api.group_end)() };
        if let Some((func, code)) = first {
            return Err(nccl_error(self.nccl, self.comm, func.c_name(), code));
        }
        if rc != SUCCESS && rc != IN_PROGRESS {
            return Err(nccl_error(self.nccl, self.comm, "ncclGroupEnd", rc));
        }
        match wait_ready(self.nccl, self.comm, deadline, "ncclGroupEnd") {
            Ok(()) => {}
            Err(Some(e)) => {
                self.abort();
                return Err(e);
            }
            Err(None) => {
                self.abort();
                return Err(Error::new(
                    ErrorKind::Timeout,
                    format!(
                        "{what}: NCCL did not issue the group within {:?} on rank {}: ncclCommAbort called",
                        self.opts.timeout, self.rank
                    ),
                ));
            }
        }
        self.wait_stream(deadline, &what)
    }
}

/// One element of `dt` holding `s` (a PreMulSum scalar as NCCL takes it).
fn scalar_bytes(dt: DataType, s: f64) -> Vec<u8> {
    use crate::core::{Element, F8E4M3, F8E5M2, Scalar};
    use half::{bf16, f16};
    fn one<T: Element>(s: f64) -> Vec<u8> {
        let x = T::from_scalar(Scalar::from_f64(T::DTYPE, s));
        crate::core::bytes::of(std::slice::from_ref(&x)).to_vec()
    }
    match dt {
        DataType::Int8 => one::<i8>(s),
        DataType::Uint8 => one::<u8>(s),
        DataType::Int32 => one::<i32>(s),
        DataType::Uint32 => one::<u32>(s),
        DataType::Int64 => one::<i64>(s),
        DataType::Uint64 => one::<u64>(s),
        DataType::Float16 => one::<f16>(s),
        DataType::Float32 => one::<f32>(s),
        DataType::Float64 => one::<f64>(s),
        DataType::Bfloat16 => one::<bf16>(s),
        DataType::Float8e4m3 => one::<F8E4M3>(s),
        DataType::Float8e5m2 => one::<F8E5M2>(s),
    }
}

impl Engine for NcclEngine {
    fn capabilities(&self) -> Capabilities {
        NcclEngine::CAPABILITIES
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn handle(&self) -> usize {
        self.handle
    }
    fn comm_id(&self) -> u64 {
        self.comm_id
    }
    fn memory(&self) -> &dyn Memory {
        &self.memory
    }
    fn memory_mut(&mut self) -> &mut dyn Memory {
        &mut self.memory
    }

    fn exchange(&mut self, mine: &Posted) -> Result<Vec<Posted>> {
        self.peers.exchange(mine, self.opts.timeout)
    }

    fn execute(&mut self, launch: &Launch) -> Result<()> {
        self.run(launch).map_err(|e| self.fail(e))
    }

    fn discard(&mut self, call: &Call) -> Result<()> {
        if self.failed.is_some() || self.comm.is_null() {
            return Ok(());
        }
        // NCCL logs it and returns: no group, nothing to wait for
        let op = self.op_code(call)?;
        match self.issue(call, op) {
            SUCCESS | IN_PROGRESS => Ok(()),
            rc => Err(self.fail(nccl_error(self.nccl, self.comm, call.func.c_name(), rc))),
        }
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        if self.opts.check_agreement {
            // a single rank agrees with itself: only its own Send/Recv
            // pairs are checked, and nothing is exchanged
            let agreed = agreement::agree(&mut [(&mut self.peers, launch)], self.opts.timeout);
            agreed.map_err(|f| self.fail(f.error))?;
        }
        self.execute(launch)
    }

    fn failure(&self) -> Option<Error> {
        self.failed.clone()
    }

    fn dup(&mut self) -> Result<Box<dyn Engine>> {
        if let Some(e) = &self.failed {
            return Err(e.clone());
        }
        self.dups += 1;
        self.device.make_current()?;
        let mut config = ffi::config(false);
        let mut comm: ncclComm_t = std::ptr::null_mut();
        // SAFETY: self.comm is live; comm and config are valid pointers.
        let rc = unsafe {
            (self.nccl.api.comm_split)(self.comm, 0, self.rank as c_int, &mut comm, &mut config)
        };
        if rc != SUCCESS && rc != IN_PROGRESS {
            return Err(nccl_error(self.nccl, self.comm, "ncclCommSplit", rc));
        }
        let deadline = Instant::now() + self.opts.timeout;
        // the parent communicator carries the split's progress
        match wait_ready(self.nccl, self.comm, deadline, "ncclCommSplit") {
            Ok(()) => {}
            Err(e) => {
                return Err(e.unwrap_or_else(|| {
                    Error::new(
                        ErrorKind::Timeout,
                        format!(
                            "ncclCommSplit did not complete within {:?}",
                            self.opts.timeout
                        ),
                    )
                }));
            }
        }
        Self::ready(
            self.nccl,
            comm,
            deadline,
            "ncclCommSplit",
            self.opts.timeout,
        )?;
        let key = format!("{}.{}", self.key, self.dups);
        let peers = Self::peers(&self.chan, &key, self.rank, self.size, self.opts, deadline);
        Ok(Box::new(NcclEngine {
            nccl: self.nccl,
            comm,
            handle: comm as usize,
            rank: self.rank,
            size: self.size,
            key,
            chan: self.chan.clone(),
            peers,
            opts: self.opts,
            comm_id: wire::fnv1a(&[self.comm_id.to_le_bytes(), self.dups.to_le_bytes()].concat()),
            premul: HashMap::new(),
            failed: None,
            dups: 0,
            memory: Table::new(Gpu),
            stream: Stream::new()?,
            device: self.device.clone(),
        }))
    }

    fn synchronize(&mut self) -> Result<()> {
        // every launch returns complete
        Ok(())
    }

    fn finish(&mut self, error: Option<&Error>) {
        let why = error.map(|e| e.to_string());
        let _ = self.peers.leave(why.as_deref());
    }
}

impl Drop for NcclEngine {
    fn drop(&mut self) {
        let _ = self.device.make_current();
        if self.comm.is_null() {
            return;
        }
        let api = &self.nccl.api;
        for op in self.premul.values() {
            // SAFETY: op was created on this live communicator.
            unsafe { (api.red_op_destroy)(*op, self.comm) };
        }
        if self.failed.is_some() {
            self.abort();
            return;
        }
        // finalize flushes the communicator's work; bounded, then destroy
        let deadline = Instant::now() + self.opts.timeout.min(Duration::from_secs(30));
        // SAFETY: comm is live and no call is in flight on it.
        let rc = unsafe { (api.comm_finalize)(self.comm) };
        let done = (rc == SUCCESS || rc == IN_PROGRESS)
            && wait_ready(self.nccl, self.comm, deadline, "ncclCommFinalize").is_ok();
        if done {
            // SAFETY: finalized; destroy frees it, and it is not used again.
            unsafe { (api.comm_destroy)(self.comm) };
            self.comm = std::ptr::null_mut();
        } else {
            self.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn premul_scalars_are_one_element_of_the_type() {
        assert_eq!(scalar_bytes(DataType::Float32, 0.25), 0.25f32.to_le_bytes());
        assert_eq!(scalar_bytes(DataType::Float64, 0.1), 0.1f64.to_le_bytes());
        assert_eq!(scalar_bytes(DataType::Int32, 3.0), 3i32.to_le_bytes());
        assert_eq!(
            scalar_bytes(DataType::Float16, 0.5),
            half::f16::from_f64(0.5).to_le_bytes()
        );
        assert_eq!(scalar_bytes(DataType::Float8e4m3, 1.0).len(), 1);
    }
}
