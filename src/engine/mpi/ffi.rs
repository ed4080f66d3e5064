//! Every call the mpi engine makes into MPI, each wrapped to return a
//! `Result`; all of the engine's `unsafe` is here. The agreement exchange
//! and point-to-point calls are non-blocking, so a wait can watch its
//! deadline and other ranks' notices instead of blocking in MPI forever;
//! a collective's data moves through MPI's blocking call once every rank
//! is known to be in it (see `collectives`).

use crate::core::{Error, ErrorKind, Result};
use mpi::ffi as sys;
use std::os::raw::{c_int, c_void};
use std::time::Instant;

pub use sys::{MPI_Comm as Comm, MPI_Datatype as Datatype, MPI_Op as Op};

/// A pending non-blocking operation.
pub struct Request(sys::MPI_Request);

fn check(rc: c_int, what: &str) -> Result<()> {
    if rc == 0 {
        Ok(())
    } else {
        Err(Error::new(
            ErrorKind::System,
            format!("{what} failed with MPI error code {rc}"),
        ))
    }
}

/// A count as MPI's `int`.
pub fn int(n: usize, what: &str) -> Result<c_int> {
    c_int::try_from(n).map_err(|_| {
        Error::new(
            ErrorKind::InvalidUsage,
            format!(
                "{what}: {n} is more than MPI's int counts hold ({}); split the call",
                c_int::MAX
            ),
        )
    })
}

/// Initialises MPI once per process (thread level: funneled, since every
/// rankwise call of a process comes from the thread that owns its
/// communicators); a no-op when it already is.
pub fn init() -> Result<()> {
    let mut flag: c_int = 0;
    // SAFETY: MPI_Initialized may be called at any time and writes one int.
    let rc = unsafe { sys::MPI_Initialized(&mut flag) };
    check(rc, "MPI_Initialized")?;
    if flag != 0 {
        return Ok(());
    }
    let mut provided: c_int = 0;
    // SAFETY: null argc/argv are allowed by MPI; called once, before any other MPI call.
    let rc = unsafe {
        sys::MPI_Init_thread(
            std::ptr::null_mut(),
            std::ptr::null_mut(),
            sys::RSMPI_THREAD_FUNNELED,
            &mut provided,
        )
    };
    check(rc, "MPI_Init_thread")
}

/// Finalises MPI if it is initialised and not yet finalised.
pub fn finalize() {
    let (mut init, mut fin): (c_int, c_int) = (0, 0);
    // SAFETY: both queries may be called at any time and write one int each.
    unsafe {
        sys::MPI_Initialized(&mut init);
        sys::MPI_Finalized(&mut fin);
    }
    if init != 0 && fin == 0 {
        // SAFETY: MPI is initialised and not finalised; nothing of rankwise
        // runs afterwards (called at process exit).
        unsafe { sys::MPI_Finalize() };
    }
}

/// MPI_COMM_WORLD.
pub fn world() -> Comm {
    // SAFETY: a constant handle exported by the MPI shim, read after init.
    unsafe { sys::RSMPI_COMM_WORLD }
}

pub fn rank_and_size(comm: Comm) -> Result<(usize, usize)> {
    let (mut r, mut n): (c_int, c_int) = (0, 0);
    // SAFETY: a valid communicator; each call writes one int.
    check(unsafe { sys::MPI_Comm_rank(comm, &mut r) }, "MPI_Comm_rank")?;
    // SAFETY: as above.
    check(unsafe { sys::MPI_Comm_size(comm, &mut n) }, "MPI_Comm_size")?;
    Ok((r as usize, n as usize))
}

/// A duplicate of `comm` whose errors come back as codes instead of
/// aborting the job (MPI_ERRORS_RETURN). Collective over `comm`.
pub fn dup(comm: Comm) -> Result<Comm> {
    let mut out = std::mem::MaybeUninit::<Comm>::uninit();
    // SAFETY: a valid communicator; MPI writes the new handle.
    let rc = unsafe { sys::MPI_Comm_dup(comm, out.as_mut_ptr()) };
    check(rc, "MPI_Comm_dup")?;
    // SAFETY: MPI_Comm_dup succeeded, so it wrote the handle.
    let out = unsafe { out.assume_init() };
    // SAFETY: a valid communicator and a predefined error handler.
    let rc = unsafe { sys::MPI_Comm_set_errhandler(out, sys::RSMPI_ERRORS_RETURN) };
    check(rc, "MPI_Comm_set_errhandler")?;
    Ok(out)
}

/// The communicator of the ranks below `n` (in rank order), or None on
/// the others. Collective over `comm`.
pub fn split_below(comm: Comm, n: usize) -> Result<Option<Comm>> {
    let (rank, _) = rank_and_size(comm)?;
    // SAFETY: a constant exported by the MPI shim, read after init.
    let undefined = unsafe { sys::RSMPI_UNDEFINED };
    let color = if rank < n { 0 } else { undefined };
    let mut out = std::mem::MaybeUninit::<Comm>::uninit();
    // SAFETY: a valid communicator; MPI writes the new handle.
    let rc = unsafe { sys::MPI_Comm_split(comm, color, rank as c_int, out.as_mut_ptr()) };
    check(rc, "MPI_Comm_split")?;
    if rank >= n {
        return Ok(None);
    }
    // SAFETY: MPI_Comm_split succeeded, so it wrote the handle.
    let sub = unsafe { out.assume_init() };
    let dup = dup(sub)?;
    Ok(Some(dup))
}

/// Every rank's `mine`, concatenated in rank order (blocking, until
/// `deadline`: a rank that never calls it is a Timeout, not a hang).
pub fn allgather_bytes(comm: Comm, mine: &[u8], deadline: Instant) -> Result<Vec<Vec<u8>>> {
    let (_, n) = rank_and_size(comm)?;
    let len = Box::new([mine.len() as u64]);
    let mut lens = vec![0u64; n];
    let req = iallgather(comm, len.as_ptr() as usize, lens.as_mut_ptr() as usize, 8)?;
    if let Err(e) = wait_until(req, deadline) {
        // the request may still complete into these buffers: keep them
        std::mem::forget(len);
        std::mem::forget(lens);
        return Err(e);
    }
    let counts: Vec<c_int> = lens
        .iter()
        .map(|l| int(*l as usize, "result exchange"))
        .collect::<Result<_>>()?;
    let mut displs = Vec::with_capacity(n);
    let mut at = 0usize;
    for c in &counts {
        displs.push(int(at, "result exchange")?);
        at += *c as usize;
    }
    let mut all = vec![0u8; at.max(1)];
    let sent = mine.to_vec();
    let req = iallgatherv(
        comm,
        sent.as_ptr() as usize,
        int(sent.len(), "result exchange")?,
        all.as_mut_ptr() as usize,
        &counts,
        &displs,
    )?;
    if let Err(e) = wait_until(req, deadline) {
        std::mem::forget(sent);
        std::mem::forget(all);
        return Err(e);
    }
    Ok((0..n)
        .map(|r| all[displs[r] as usize..displs[r] as usize + counts[r] as usize].to_vec())
        .collect())
}

/// Waits for `req` until `deadline`.
fn wait_until(mut req: Request, deadline: Instant) -> Result<()> {
    let mut round = 0u32;
    while !req.test()? {
        if Instant::now() >= deadline {
            return Err(Error::new(
                ErrorKind::Timeout,
                "an exchange between the MPI job's processes timed out: a process never joined it (RANKWISE_TIMEOUT sets the limit)",
            ));
        }
        round += 1;
        if round > 1000 {
            std::thread::sleep(std::time::Duration::from_micros(200));
        } else {
            std::thread::yield_now();
        }
    }
    Ok(())
}

/// Broadcasts one u64 from rank 0 (blocking; used once per communicator).
pub fn bcast_u64(comm: Comm, v: &mut u64) -> Result<()> {
    // SAFETY: `v` is one valid u64; every rank passes one.
    let rc = unsafe { sys::MPI_Bcast((v as *mut u64).cast(), 1, sys::RSMPI_UINT64_T, 0, comm) };
    check(rc, "MPI_Bcast")
}

/// The container MPI moves elements of `size` bytes in.
pub fn container(size: usize) -> Datatype {
    // SAFETY: constant handles exported by the MPI shim, read after init.
    unsafe {
        match size {
            1 => sys::RSMPI_UINT8_T,
            2 => sys::RSMPI_UINT16_T,
            4 => sys::RSMPI_UINT32_T,
            _ => sys::RSMPI_UINT64_T,
        }
    }
}

/// MPI's own datatype for `dt`, where MPI has one (no 16- or 8-bit floats).
pub fn typed(dt: crate::core::DataType) -> Option<Datatype> {
    use crate::core::DataType as D;
    // SAFETY: constant handles exported by the MPI shim, read after init.
    unsafe {
        Some(match dt {
            D::Int8 => sys::RSMPI_INT8_T,
            D::Uint8 => sys::RSMPI_UINT8_T,
            D::Int32 => sys::RSMPI_INT32_T,
            D::Uint32 => sys::RSMPI_UINT32_T,
            D::Int64 => sys::RSMPI_INT64_T,
            D::Uint64 => sys::RSMPI_UINT64_T,
            D::Float32 => sys::RSMPI_FLOAT,
            D::Float64 => sys::RSMPI_DOUBLE,
            _ => return None,
        })
    }
}

/// MPI's built-in Sum, Prod, Max and Min.
pub fn sum() -> Op {
    // SAFETY: a constant handle exported by the MPI shim, read after init.
    unsafe { sys::RSMPI_SUM }
}
pub fn prod() -> Op {
    // SAFETY: as above.
    unsafe { sys::RSMPI_PROD }
}
pub fn max() -> Op {
    // SAFETY: as above.
    unsafe { sys::RSMPI_MAX }
}
pub fn min() -> Op {
    // SAFETY: as above.
    unsafe { sys::RSMPI_MIN }
}

pub fn bytes() -> Datatype {
    container(1)
}

/// Creates a commutative reduction op from `f`.
pub fn op_create(f: sys::MPI_User_function) -> Result<Op> {
    let mut op = std::mem::MaybeUninit::<Op>::uninit();
    // SAFETY: `f` is a valid user function; MPI writes the op handle.
    let rc = unsafe { sys::MPI_Op_create(f, 1, op.as_mut_ptr()) };
    check(rc, "MPI_Op_create")?;
    // SAFETY: MPI_Op_create succeeded, so it wrote the handle.
    Ok(unsafe { op.assume_init() })
}

/// The slices a user op receives: `len` elements of `T` at each pointer.
///
/// # Safety
/// Call only from an `MPI_User_function` with its own arguments, for an op
/// used only with `T`'s container datatype.
pub unsafe fn op_args<'a, T>(
    invec: *mut c_void,
    inout: *mut c_void,
    len: *mut c_int,
) -> (&'a [T], &'a mut [T]) {
    // SAFETY: by the caller's contract MPI hands two distinct buffers of
    // `*len` elements of the op's datatype, which is T's container.
    unsafe {
        let n = *len as usize;
        (
            std::slice::from_raw_parts(invec as *const T, n),
            std::slice::from_raw_parts_mut(inout as *mut T, n),
        )
    }
}

/// What a started operation reads and writes: host addresses checked by
/// the communicator against this rank's memory before the call, with
/// extents agreed across ranks.
macro_rules! start {
    ($what:literal, $f:ident($($arg:expr),*)) => {{
        let mut req = std::mem::MaybeUninit::<sys::MPI_Request>::uninit();
        // SAFETY: every buffer argument is an address inside an extent
        // that `core::check_buffers` accepted on this rank, with the counts
        // every rank agreed on (or a buffer of the engine's own of that
        // size); it stays untouched by this rank until the request
        // completes, since the caller waits for it before returning.
        let rc = unsafe { sys::$f($($arg,)* req.as_mut_ptr()) };
        check(rc, $what)?;
        // SAFETY: the call succeeded, so it wrote the request.
        Ok(Request(unsafe { req.assume_init() }))
    }};
}

fn cp(addr: usize) -> *const c_void {
    addr as *const c_void
}
fn mp(addr: usize) -> *mut c_void {
    addr as *mut c_void
}

/// What a blocking collective reads and writes: host addresses checked by
/// the communicator against this rank's memory before the call, with
/// extents every rank agreed on (or a buffer of the engine's own of that
/// size), which nothing else touches until the call returns.
macro_rules! run {
    ($what:literal, $f:ident($($arg:expr),*)) => {{
        // SAFETY: every buffer argument is an address inside an extent
        // that `core::check_buffers` accepted on this rank, with the counts
        // every rank agreed on, or the engine's own scratch of that size;
        // the call returns only when MPI is done with them.
        let rc = unsafe { sys::$f($($arg),*) };
        check(rc, $what)
    }};
}

pub fn allreduce(
    comm: Comm,
    send: usize,
    recv: usize,
    n: c_int,
    dt: Datatype,
    op: Op,
) -> Result<()> {
    run!(
        "MPI_Allreduce",
        MPI_Allreduce(cp(send), mp(recv), n, dt, op, comm)
    )
}
#[allow(clippy::too_many_arguments)]
pub fn reduce(
    comm: Comm,
    send: usize,
    recv: usize,
    n: c_int,
    dt: Datatype,
    op: Op,
    root: c_int,
) -> Result<()> {
    run!(
        "MPI_Reduce",
        MPI_Reduce(cp(send), mp(recv), n, dt, op, root, comm)
    )
}
pub fn reduce_scatter_block(
    comm: Comm,
    send: usize,
    recv: usize,
    n: c_int,
    dt: Datatype,
    op: Op,
) -> Result<()> {
    run!(
        "MPI_Reduce_scatter_block",
        MPI_Reduce_scatter_block(cp(send), mp(recv), n, dt, op, comm)
    )
}
pub fn bcast(comm: Comm, buf: usize, bytes: c_int, root: c_int) -> Result<()> {
    run!(
        "MPI_Bcast",
        MPI_Bcast(mp(buf), bytes, self::bytes(), root, comm)
    )
}
pub fn allgather(comm: Comm, send: usize, recv: usize, bytes: c_int) -> Result<()> {
    let b = self::bytes();
    run!(
        "MPI_Allgather",
        MPI_Allgather(cp(send), bytes, b, mp(recv), bytes, b, comm)
    )
}
pub fn alltoall(comm: Comm, send: usize, recv: usize, bytes: c_int) -> Result<()> {
    let b = self::bytes();
    run!(
        "MPI_Alltoall",
        MPI_Alltoall(cp(send), bytes, b, mp(recv), bytes, b, comm)
    )
}
pub fn gather(comm: Comm, send: usize, recv: usize, bytes: c_int, root: c_int) -> Result<()> {
    let b = self::bytes();
    run!(
        "MPI_Gather",
        MPI_Gather(cp(send), bytes, b, mp(recv), bytes, b, root, comm)
    )
}
pub fn scatter(comm: Comm, send: usize, recv: usize, bytes: c_int, root: c_int) -> Result<()> {
    let b = self::bytes();
    run!(
        "MPI_Scatter",
        MPI_Scatter(cp(send), bytes, b, mp(recv), bytes, b, root, comm)
    )
}

pub fn iallgather(comm: Comm, send: usize, recv: usize, bytes: c_int) -> Result<Request> {
    start!(
        "MPI_Iallgather",
        MPI_Iallgather(
            cp(send),
            bytes,
            self::bytes(),
            mp(recv),
            bytes,
            self::bytes(),
            comm
        )
    )
}
pub fn iallgatherv(
    comm: Comm,
    send: usize,
    bytes: c_int,
    recv: usize,
    counts: &[c_int],
    displs: &[c_int],
) -> Result<Request> {
    start!(
        "MPI_Iallgatherv",
        MPI_Iallgatherv(
            cp(send),
            bytes,
            self::bytes(),
            mp(recv),
            counts.as_ptr(),
            displs.as_ptr(),
            self::bytes(),
            comm
        )
    )
}
pub fn isend(comm: Comm, buf: usize, bytes: c_int, peer: c_int, tag: c_int) -> Result<Request> {
    start!(
        "MPI_Isend",
        MPI_Isend(cp(buf), bytes, self::bytes(), peer, tag, comm)
    )
}
pub fn irecv(comm: Comm, buf: usize, bytes: c_int, peer: c_int, tag: c_int) -> Result<Request> {
    start!(
        "MPI_Irecv",
        MPI_Irecv(mp(buf), bytes, self::bytes(), peer, tag, comm)
    )
}

impl Request {
    /// Whether the operation completed (the request is then spent).
    pub fn test(&mut self) -> Result<bool> {
        let mut flag: c_int = 0;
        // SAFETY: a request from a started operation; the status is ignored.
        let rc = unsafe { sys::MPI_Test(&mut self.0, &mut flag, sys::RSMPI_STATUS_IGNORE) };
        check(rc, "MPI_Test")?;
        Ok(flag != 0)
    }

    /// Lets MPI complete a send on its own (its buffer must stay valid:
    /// only used for messages held in `'static` or leaked storage).
    pub fn detach(mut self) {
        // SAFETY: a started send request; MPI completes it in the background.
        unsafe { sys::MPI_Request_free(&mut self.0) };
    }
}

/// The size in bytes of a message waiting from any rank with `tag`, and
/// its source, if one is waiting.
pub fn iprobe(comm: Comm, tag: c_int) -> Result<Option<(usize, usize)>> {
    let mut flag: c_int = 0;
    let mut status = std::mem::MaybeUninit::<sys::MPI_Status>::uninit();
    // SAFETY: a valid communicator; MPI writes the flag and the status.
    let rc = unsafe {
        sys::MPI_Iprobe(
            sys::RSMPI_ANY_SOURCE,
            tag,
            comm,
            &mut flag,
            status.as_mut_ptr(),
        )
    };
    check(rc, "MPI_Iprobe")?;
    if flag == 0 {
        return Ok(None);
    }
    // SAFETY: a message was found, so MPI filled the status.
    let status = unsafe { status.assume_init() };
    let mut count: c_int = 0;
    // SAFETY: a filled status, counted in bytes.
    let rc = unsafe { sys::MPI_Get_count(&status, bytes(), &mut count) };
    check(rc, "MPI_Get_count")?;
    Ok(Some((status.MPI_SOURCE as usize, count.max(0) as usize)))
}

/// Receives the waiting message from `src` with `tag` into `buf` (blocking:
/// called only after [`iprobe`] found it).
pub fn recv_probed(comm: Comm, src: usize, tag: c_int, buf: &mut [u8]) -> Result<()> {
    let len = int(buf.len(), "notice")?;
    // SAFETY: `buf` is a valid byte buffer of `len` bytes; the message is
    // already waiting, so this returns at once.
    let rc = unsafe {
        sys::MPI_Recv(
            buf.as_mut_ptr().cast(),
            len,
            bytes(),
            src as c_int,
            tag,
            comm,
            sys::RSMPI_STATUS_IGNORE,
        )
    };
    check(rc, "MPI_Recv")
}

/// Calls `f` when the process exits (MPI_Finalize at exit).
pub fn at_exit(f: extern "C" fn()) {
    // SAFETY: registers a plain function with the C runtime; it runs once
    // at exit, on the exiting thread.
    unsafe { libc::atexit(f) };
}

/// Copies `bytes` bytes from `src` to `dst` (regions of a checked call, or
/// the engine's own scratch; they may overlap).
pub fn copy(src: usize, dst: usize, bytes: usize) {
    if bytes > 0 && src != dst {
        // SAFETY: both regions lie inside extents that `core::check_buffers`
        // accepted for the call being run (or the engine's own scratch of
        // at least `bytes` bytes); `copy` allows overlap.
        unsafe { std::ptr::copy(src as *const u8, dst as *mut u8, bytes) };
    }
}

/// Applies `f` to each of the `n` elements of `T` at `addr`, in place.
pub fn map_elems<T: crate::core::Element>(addr: usize, n: usize, f: impl Fn(T) -> T) {
    if n == 0 {
        return;
    }
    debug_assert!(addr.is_multiple_of(std::mem::align_of::<T>()));
    // SAFETY: `addr` holds `n` elements of T inside an extent checked for
    // the call being run (or the engine's own scratch), aligned for T, and
    // nothing else touches it while the call runs on this rank.
    let xs = unsafe { std::slice::from_raw_parts_mut(addr as *mut T, n) };
    for x in xs {
        *x = f(*x);
    }
}

/// Folds `n` blocks of `q` elements of `T` (block s from rank s, at
/// `from + s * stride` bytes) in rank order with `op`, exactly as the local
/// engine reduces, into the `q` elements at `to`.
pub fn fold_ranks<T: crate::kernels::Arith>(
    op: crate::core::RedOp,
    n: usize,
    from: usize,
    stride: usize,
    q: usize,
    to: usize,
) {
    if q == 0 || n == 0 {
        return;
    }
    debug_assert!(from.is_multiple_of(std::mem::align_of::<T>()));
    debug_assert!(stride.is_multiple_of(std::mem::align_of::<T>()));
    debug_assert!(stride >= q * std::mem::size_of::<T>());
    debug_assert!(to.is_multiple_of(std::mem::align_of::<T>()));
    let block = |s: usize| -> &[T] {
        // SAFETY: `from` is the engine's own scratch holding n blocks of q
        // elements of T, `stride` bytes apart, aligned for T, that MPI has
        // finished writing; nothing writes it now.
        unsafe { std::slice::from_raw_parts((from + s * stride) as *const T, q) }
    };
    // SAFETY: `to` holds q elements of T inside an extent checked for the
    // call being run, aligned for T; it does not overlap the scratch, and
    // nothing else touches it while the call runs on this rank.
    let acc = unsafe { std::slice::from_raw_parts_mut(to as *mut T, q) };
    crate::kernels::reduce_into(acc, op, n, block);
}
