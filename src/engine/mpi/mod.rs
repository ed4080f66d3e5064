//! The mpi engine: each rank is a process of an MPI job (OpenMPI under
//! `mpirun`), on one machine or many. Memory is host memory (the same
//! allocation registry as the local engine). Before a launch's collectives
//! run, every rank's post travels in an allgather and `core::agree`
//! compares them; a launch's Send/Recv pairs first exchange their
//! signatures with each peer. Every wait for another rank (the agreement,
//! Isend/Irecv in `p2p`) is non-blocking, with a deadline, and hears when
//! another rank's program ended or failed (`notice`): a missing or failed
//! rank is an error, never a hang. Once a launch's collectives agree, their
//! data moves through MPI's blocking collectives (`collectives`), or, for
//! a single small call, rode in the posts already (`eager`).
//!
//! When every rank of a communicator is a process of one host, the
//! agreement's posts go through shared memory instead of MPI messages
//! (`transport::lane`, set up over MPI when the communicator is made): a post
//! is a few stores and the read a few loads, where an exchange of MPI
//! messages costs a microsecond or more per round. `RANKWISE_SHM=0` keeps
//! the agreement on MPI messages.
//!
//! A program started by `mpirun -n N` gets its rank's communicator from
//! the launcher, `rankwise::mpi::init` (`launch::mpi`), which builds on
//! [`connect_world`] and [`connect_first`].

mod collectives;
mod eager;
mod ffi;
mod notice;
mod ops;
mod p2p;

use crate::agreement;
use crate::core::{Call, Error, ErrorKind, Launch, Posted, Result, agree, wire};
use crate::engine::host_memory::Registry;
use crate::engine::{Capabilities, Engine, Memory};
use crate::transport::lane::{self, Lane};
use notice::{Notices, Program, Waiting};
use std::rc::Rc;
use std::time::{Duration, Instant};

/// Whether this process was started by an MPI launcher (OpenMPI's mpirun,
/// or a PMI-based one).
pub fn under_mpirun() -> bool {
    ["OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK"]
        .iter()
        .any(|v| std::env::var_os(v).is_some())
}

/// How many processes the MPI job has (the most ranks a launch can have),
/// or an error saying why it cannot be known.
pub fn job_size() -> Result<usize> {
    init_once()?;
    Ok(ffi::rank_and_size(ffi::world())?.1)
}

/// Initialises MPI once per process and finalises it when the process exits.
fn init_once() -> Result<()> {
    ffi::init()?;
    static FINALIZE: std::sync::Once = std::sync::Once::new();
    FINALIZE.call_once(|| ffi::at_exit(finalize_at_exit));
    Ok(())
}

/// This process's end of a communicator over every rank of the MPI job
/// (a duplicate of `MPI_COMM_WORLD`), whose waits last at most `timeout`.
/// Dropping it ends this rank's program. MPI is initialised on the first
/// call and finalised when the process exits.
pub fn connect_world(timeout: Duration) -> Result<MpiEngine> {
    init_once()?;
    let notices = Notices::for_process()?;
    let comm = ffi::dup(ffi::world())?;
    let (rank, size) = ffi::rank_and_size(comm)?;
    let mut id = launch_id(rank);
    ffi::bcast_u64(comm, &mut id)?;
    let mut engine = MpiEngine::new(notices, comm, rank, size, id, id, timeout);
    engine.top = true;
    Ok(engine)
}

/// This process's end of a communicator over the first `nranks` processes
/// of the MPI job, or None on the others (which take no part). Every
/// process of the job must call it; the job needs at least `nranks`
/// processes.
pub fn connect_first(nranks: usize, timeout: Duration) -> Result<Option<MpiEngine>> {
    init_once()?;
    let notices = Notices::for_process()?;
    let world = ffi::world();
    let (me, jobs) = ffi::rank_and_size(world)?;
    if nranks == 0 || nranks > jobs {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            format!(
                "{nranks} rank(s) on the mpi engine need that many MPI processes (at least 1); this job has {jobs} (mpirun -n {nranks})"
            ),
        ));
    }
    let Some(comm) = ffi::split_below(world, nranks)? else {
        return Ok(None);
    };
    let mut id = launch_id(me);
    ffi::bcast_u64(comm, &mut id)?;
    Ok(Some(MpiEngine::new(
        notices, comm, me, nranks, id, id, timeout,
    )))
}

/// This process's rank in the MPI job and the job's size (MPI is
/// initialised on the first call and finalised when the process exits).
pub fn world() -> Result<(usize, usize)> {
    init_once()?;
    ffi::rank_and_size(ffi::world())
}

/// `timeout` from now; a timeout past what the clock can count (a test of
/// "wait for ever") waits a few decades instead of overflowing.
fn deadline_after(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(1 << 30))
}

/// Every process's `mine`, in rank order, on every process of the job: how
/// the command line's processes agree on a run directory, gather trace
/// lines and share an exit code. Every process must call it; it waits at
/// most `timeout` for the others.
pub fn share(mine: &[u8], timeout: Duration) -> Result<Vec<Vec<u8>>> {
    world()?;
    ffi::allgather_bytes(ffi::world(), mine, deadline_after(timeout))
}

/// A communicator id, from the clock and the process, made by rank 0.
fn launch_id(rank: usize) -> u64 {
    if rank != 0 {
        return 0;
    }
    let t = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos() as u64)
        .unwrap_or(0);
    t ^ ((std::process::id() as u64) << 32)
}

/// How long a wait whose peer failed still lets its own request finish.
const NOTICE_GRACE: Duration = Duration::from_millis(50);

/// Tags of the agreement's rounds (`allgather_words`), one per round,
/// apart from the Send/Recv tags of `p2p`.
const EXCHANGE_TAG: i32 = 0x4100;

/// Words per rank in the agreement exchange: the post's head, then room
/// for a small collective's input (`eager`).
const SLOT_WORDS: usize = wire::HEAD_WORDS + eager::WORDS;

/// The longest post on the shared-memory lane: a head and the input of a
/// root-sent call (`eager::ROOT_BYTES`).
const POST_BYTES: usize = wire::HEAD_WORDS * 8 + eager::ROOT_BYTES;

extern "C" fn finalize_at_exit() {
    ffi::finalize();
}

/// One rank's end of an MPI communicator.
pub struct MpiEngine {
    comm: ffi::Comm,
    rank: usize,
    size: usize,
    id: u64,
    registry: Registry,
    notices: Rc<Notices>,
    /// collective launches completed on this communicator
    colls_done: u64,
    /// communicators duplicated from this one so far
    dups: u64,
    failure: Option<Error>,
    /// the longest any wait of this communicator may last
    timeout: Duration,
    /// a distinct address per rank and communicator, for the trace's `comm`
    handle: Box<u8>,
    /// the communicator [`connect_world`] made: dropping it ends the rank's program
    top: bool,
    /// the program this communicator belongs to (see `notice`)
    program: Program,
    /// the agreement's lane through shared memory, when every rank is on
    /// this host, and the rounds made on it
    ring: Option<Lane>,
    ring_rounds: u64,
    /// this rank's post on the ring, and what it reads of a root's: kept
    /// between launches, so a launch allocates neither
    post: Vec<u64>,
    got: Vec<u64>,
}

impl MpiEngine {
    pub const CAPABILITIES: Capabilities = Capabilities {
        name: "mpi",
        diagnoses_deadlock: false,
        needs_staging: false,
    };

    fn new(
        notices: Rc<Notices>,
        comm: ffi::Comm,
        rank: usize,
        size: usize,
        id: u64,
        program: Program,
        timeout: Duration,
    ) -> MpiEngine {
        notices.register(id);
        // every rank of `comm` makes its engine at the same point (init,
        // a launch, a dup), so this collective set-up meets on every rank
        let deadline = deadline_after(timeout.min(Duration::from_secs(30)));
        let ring = lane::join_with(&lane::segment_dir(), rank, size, lane::wanted(), |mine| {
            ffi::allgather_bytes(comm, mine, deadline).ok()
        });
        MpiEngine {
            comm,
            rank,
            size,
            id,
            registry: Registry::default(),
            notices,
            colls_done: 0,
            dups: 0,
            failure: None,
            timeout,
            handle: Box::new(0),
            top: false,
            program,
            ring,
            ring_rounds: 0,
            post: Vec::new(),
            got: Vec::new(),
        }
    }

    /// The trace's INIT line saying how this communicator agrees.
    pub fn say_lane(&self, tracer: &crate::trace::RankTracer) {
        if self.size > 1 {
            let lane = match self.ring {
                Some(_) => "shared memory (every rank is on this host)",
                None => "MPI messages",
            };
            tracer.init_info(&format!(
                "rankwise: mpi engine rank {} of {} agrees with its peers through {lane}",
                self.rank, self.size
            ));
        }
    }

    fn timed_out(&self, what: &dyn Fn() -> String) -> Error {
        Error::new(
            ErrorKind::Timeout,
            format!(
                "{} timed out after {:?} on rank {} (mpi engine); {}",
                what(),
                self.timeout,
                self.rank,
                self.notices.describe(self.program)
            ),
        )
    }

    /// Waits for `req`, watching the deadline and other ranks' notices.
    /// The request is tested on every turn; notices and the clock, which
    /// cost more than a test, every 64th turn, so a wait of a microsecond
    /// stays one. After about a thousand checks the wait yields the core,
    /// after twenty thousand it sleeps between checks.
    fn wait(
        &mut self,
        mut req: ffi::Request,
        on: Waiting,
        what: &dyn Fn() -> String,
    ) -> Result<()> {
        let start = Instant::now();
        let mut turn = 0u32;
        loop {
            if req.test()? {
                return Ok(());
            }
            turn = turn.wrapping_add(1);
            if !turn.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            if let Some(e) = self.notices.blocking(self.program, self.id, &on, what)? {
                // a peer failed, perhaps over this very exchange (a mismatch
                // it saw first): when this rank's own messages are in
                // flight too, it finishes the exchange and finds the same
                // error first-hand, as every rank does on the other engines
                let grace = Instant::now() + NOTICE_GRACE;
                while Instant::now() < grace {
                    if req.test()? {
                        return Ok(());
                    }
                    std::hint::spin_loop();
                }
                return Err(e);
            }
            if start.elapsed() >= self.timeout {
                return Err(self.timed_out(what));
            }
            if turn > 64 * 20_000 {
                std::thread::sleep(Duration::from_micros(200));
            } else if turn > 64 * 1000 {
                std::thread::yield_now();
            }
        }
    }

    /// Every rank's `mine` (the same length on every rank), in rank order:
    /// the agreement's allgather, in ⌈log₂ N⌉ rounds of Isend/Irecv
    /// (Bruck's algorithm: in round k each rank passes the blocks it holds
    /// to the rank 2^k below it). Point-to-point messages cost about half
    /// of what MPI's non-blocking allgather costs on small blocks (its
    /// schedule is built per call), and every wait keeps its deadline and
    /// hears other ranks' notices. Each source sends this rank at most one
    /// message per exchange, on its round's tag, so consecutive exchanges
    /// cannot take each other's messages.
    fn allgather_words(
        &mut self,
        mine: &[u64],
        on: Waiting,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u64>> {
        let (n, me, w) = (self.size, self.rank, mine.len());
        // buf[j] holds the block of rank (me + j) mod n
        let mut buf = vec![0u64; n * w];
        buf[..w].copy_from_slice(mine);
        let mut held = 1;
        let mut round = 0;
        while held < n {
            let m = held.min(n - held);
            let to = (me + n - held) % n;
            let from = (me + held) % n;
            let bytes = ffi::int(m * w * 8, "exchange")?;
            let tag = EXCHANGE_TAG + round;
            let at = buf.as_mut_ptr() as usize;
            // SAFETY: `buf` holds n blocks of w words; the receive fills the
            // m blocks after the `held` ones, the send reads the first m;
            // both lie in `buf`, which outlives the requests (forgotten
            // below when a wait gives up on them).
            let recv =
                unsafe { ffi::irecv(self.comm, at + held * w * 8, bytes, from as i32, tag)? };
            // SAFETY: as above.
            let send = unsafe { ffi::isend(self.comm, at, bytes, to as i32, tag)? };
            let done = self
                .wait(recv, on.clone(), what)
                .and_then(|()| self.wait(send, on.clone(), what));
            if let Err(e) = done {
                // a rank that arrives late still completes these requests:
                // MPI may then read and write the buffer, so it must outlive
                // the abandoned exchange
                std::mem::forget(buf);
                return Err(e);
            }
            held += m;
            round += 1;
        }
        // rotate into rank order
        let mut all = vec![0u64; n * w];
        for j in 0..n {
            let r = (me + j) % n;
            all[r * w..(r + 1) * w].copy_from_slice(&buf[j * w..(j + 1) * w]);
        }
        Ok(all)
    }

    /// Every rank's `mine` (at most [`SLOT_WORDS`], zero-padded to it), in
    /// rank order, through the communicator's ring (a round of
    /// `agreement::lane`): this rank's words posted, every rank's read, the
    /// wait hearing other ranks' notices every 10 ms once it has lasted
    /// 2 ms.
    fn ring_words(
        &mut self,
        mine: &[u64],
        on: &Waiting,
        what: &dyn Fn() -> String,
    ) -> Result<Vec<u64>> {
        let seq = self.ring_rounds;
        self.ring_rounds += 1;
        let Some(ring) = &self.ring else {
            return Err(Error::new(ErrorKind::Internal, "no ring to post on"));
        };
        let deadline = deadline_after(self.timeout);
        let heard = |_: &[usize]| match self.notices.blocking(self.program, self.id, on, what) {
            Ok(None) => None,
            Ok(Some(e)) | Err(e) => Some(e),
        };
        let mut all = vec![0u64; self.size * SLOT_WORDS];
        let mut lens = vec![0usize; self.size];
        let me = self.rank;
        match agreement::lane::words(ring, me, seq, mine, deadline, heard, &mut all, &mut lens) {
            // a root's post may be longer than the slot read here (its
            // input to a root-sent call, read later where it lies)
            Ok(()) => match lens.iter().position(|l| *l > POST_BYTES) {
                None => Ok(all),
                Some(r) => Err(Error::new(
                    ErrorKind::Internal,
                    format!("rank {r}'s post on the shared-memory lane is garbled"),
                )),
            },
            Err(stopped) => {
                if let Some(e) = stopped.by {
                    return Err(e);
                }
                let late: Vec<String> = (0..self.size)
                    .filter(|r| !stopped.posted[*r])
                    .map(|r| r.to_string())
                    .collect();
                let mut e = self.timed_out(what);
                e.message
                    .push_str(&format!("; rank(s) {} had not entered it", late.join(",")));
                Err(e)
            }
        }
    }

    fn run(&mut self, launch: &Launch) -> Result<()> {
        if !launch.colls.is_empty() {
            let (n, me) = (self.size, self.rank);
            let carried = match launch.colls.as_slice() {
                [c] => eager::payload(c, n, me, self.ring.is_some()),
                _ => None,
            };
            let slots = self.exchange_slots(launch.op_count, &launch.colls, carried)?;
            // one same collective everywhere, the common case, is seen in
            // the words; anything else is decoded and compared in full
            if !wire::one_same_call(&slots, SLOT_WORDS) {
                let all = self.decode(&slots, &launch.colls)?;
                agree::collectives(&all)?;
            }
            match launch.colls.as_slice() {
                // every rank agreed on this call, so every rank carried its input
                [c] if carried.is_some() && eager::from_root(c, n) => self.receive_from_root(c)?,
                [c] if carried.is_some() => {
                    let at = slots.as_ptr() as usize + wire::HEAD_WORDS * 8;
                    // SAFETY: `c` passed `core::check_buffers` on this rank
                    // and every rank agreed on it; `slots` holds every
                    // rank's slot, each carrying that rank's whole input
                    // (`carried`), and is this function's own.
                    unsafe { eager::finish(c, n, me, at, SLOT_WORDS * 8) };
                }
                colls => {
                    for c in colls {
                        // SAFETY: every call of a launch passed
                        // `core::check_buffers` on this rank before it was
                        // posted, and every rank agreed on it just above;
                        // the program is blocked in this launch meanwhile.
                        unsafe { collectives::run(self, c)? };
                    }
                }
            }
            self.colls_done += 1;
            self.notices.completed(self.id, self.colls_done);
        }
        if !launch.p2p.is_empty() {
            p2p::run(self, launch)?;
        }
        Ok(())
    }

    /// This rank's output of a root-sent call whose input rode in the root's
    /// post of the launch's ring round (`eager::from_root`): the root
    /// copies its own, every other rank loads its part of the post. The
    /// root cannot reuse that slot before every rank has posted its next
    /// launch, so the post is still there.
    fn receive_from_root(&mut self, c: &Call) -> Result<()> {
        let (from, bytes) = eager::received(c, self.rank);
        if self.rank == c.root {
            // SAFETY: `c` passed `core::check_buffers` here: its sendbuff
            // holds the root's input, of which [from, from + bytes) is this
            // rank's output, and its recvbuff holds `bytes` bytes.
            unsafe { ffi::copy(c.sendbuff + from, c.recvbuff, bytes) };
            return Ok(());
        }
        let ring = self
            .ring
            .as_ref()
            .ok_or_else(|| Error::new(ErrorKind::Internal, "a root-sent input without a ring"))?;
        let seq = self.ring_rounds - 1;
        let (first, end) = (from / 8, (from + bytes).div_ceil(8));
        self.got.resize(end - first, 0);
        let len = ring.read_words_from(c.root, seq, wire::HEAD_WORDS + first, &mut self.got);
        if len.is_none_or(|l| l < wire::HEAD_WORDS * 8 + from + bytes) {
            return Err(Error::new(
                ErrorKind::Internal,
                format!(
                    "rank {}'s post on the shared-memory lane is {} where {} bytes of its input were agreed",
                    c.root,
                    len.map_or("gone".to_string(), |l| format!("{l} bytes long")),
                    from + bytes
                ),
            ));
        }
        // SAFETY: `got` holds the words covering [from, from + bytes) of the
        // root's input (its length was checked just above), and `c`'s
        // recvbuff, checked on this rank, holds `bytes` bytes.
        unsafe { ffi::copy(self.got.as_ptr() as usize + from % 8, c.recvbuff, bytes) };
        Ok(())
    }

    /// What [`Self::exchange_slots`] and [`Self::decode`] say about this
    /// launch's wait, for its errors.
    fn describe(calls: &[Call], op_count: u64) -> impl Fn() -> String + '_ {
        move || {
            let first = calls.first().map_or("a group", |c| c.func.name());
            format!("{first} (opCount {op_count:x}) on the mpi engine")
        }
    }

    /// Every rank's head (launch number, call count, first call) and, when
    /// `carried` names one, its input to a small collective: a slot of
    /// [`SLOT_WORDS`] per rank in rank order, each the head and then the
    /// input.
    fn exchange_slots(
        &mut self,
        op_count: u64,
        calls: &[Call],
        carried: Option<(usize, usize)>,
    ) -> Result<Vec<u64>> {
        let what = Self::describe(calls, op_count);
        let on = Waiting::Collective {
            done: self.colls_done,
        };
        let head = wire::head(op_count, calls);
        if self.ring.is_some() {
            // only what this rank filled travels: a reader's cache lines
            // are most of a small launch's agreement
            let mut post = std::mem::take(&mut self.post);
            post.clear();
            post.extend_from_slice(&head);
            if let Some((addr, bytes)) = carried {
                post.resize(wire::HEAD_WORDS + bytes.div_ceil(8), 0);
                // SAFETY: `carried` is a checked call's input (`eager::payload`),
                // and `post` was just sized to hold it after the head.
                unsafe { ffi::copy(addr, post[wire::HEAD_WORDS..].as_mut_ptr() as usize, bytes) };
            }
            let all = self.ring_words(&post, &on, &what);
            self.post = post;
            all
        } else {
            // (without shared memory every carried input fits a slot)
            let mut slot = [0u64; SLOT_WORDS];
            slot[..wire::HEAD_WORDS].copy_from_slice(&head);
            if let Some((addr, bytes)) = carried {
                // SAFETY: `carried` is a checked call's input of at most
                // `eager::WORDS` words, the room after the head in `slot`.
                unsafe { ffi::copy(addr, slot[wire::HEAD_WORDS..].as_mut_ptr() as usize, bytes) };
            }
            self.allgather_words(&slot, on, &what)
        }
    }

    /// Every rank's post from the exchanged `slots`: the heads' calls, and
    /// for groups of several collectives the rest of every rank's calls,
    /// which follow in an allgatherv (every rank sees the same heads, so
    /// every rank makes it or none does).
    fn decode(&mut self, slots: &[u64], calls: &[Call]) -> Result<Vec<Posted>> {
        let mut all: Vec<(Posted, usize)> = slots
            .chunks(SLOT_WORDS)
            .map(|s| wire::read_head(&s[..wire::HEAD_WORDS]))
            .collect::<Result<_>>()?;
        let extra: Vec<usize> = all
            .iter()
            .map(|(_, total)| wire::rest_calls(*total))
            .collect();
        if extra.iter().any(|&k| k > 0) {
            let op_count = all[self.rank].0.op_count;
            let what = Self::describe(calls, op_count);
            let on = Waiting::Collective {
                done: self.colls_done,
            };
            let rest = wire::rest(calls);
            let counts: Vec<i32> = extra
                .iter()
                .map(|k| ffi::int(k * wire::CALL_WORDS * 8, "exchange"))
                .collect::<Result<_>>()?;
            let mut displs = Vec::with_capacity(self.size);
            let mut at = 0i32;
            for c in &counts {
                displs.push(at);
                at = at.checked_add(*c).ok_or_else(|| {
                    Error::new(
                        ErrorKind::InvalidUsage,
                        "a group too large to exchange over MPI",
                    )
                })?;
            }
            let mut words = vec![0u64; at as usize / 8];
            let rest_len = ffi::int(rest.len() * 8, "exchange")?;
            // SAFETY: `rest` and `words` are owned here, `words` sized by
            // the counts every rank's head announced, and both outlive the
            // request (forgotten below when the wait gives up on it).
            let req = unsafe {
                ffi::iallgatherv(
                    self.comm,
                    rest.as_ptr() as usize,
                    rest_len,
                    words.as_mut_ptr() as usize,
                    &counts,
                    &displs,
                )?
            };
            if let Err(e) = self.wait(req, on, &what) {
                // as above: the abandoned request may still complete
                std::mem::forget(rest);
                std::mem::forget(words);
                return Err(e);
            }
            for (r, (p, _)) in all.iter_mut().enumerate() {
                let from = displs[r] as usize / 8;
                wire::read_rest(p, &words[from..from + extra[r] * wire::CALL_WORDS])?;
            }
        }
        Ok(all.into_iter().map(|(p, _)| p).collect())
    }
}

impl Drop for MpiEngine {
    fn drop(&mut self) {
        // a program that drops its communicator without saying how it
        // ended has finished: the others must not wait for it
        if self.top {
            self.notices.finish(self.rank, self.program, None);
        }
    }
}

impl Engine for MpiEngine {
    fn capabilities(&self) -> Capabilities {
        MpiEngine::CAPABILITIES
    }
    fn rank(&self) -> usize {
        self.rank
    }
    fn size(&self) -> usize {
        self.size
    }
    fn handle(&self) -> usize {
        &*self.handle as *const u8 as usize
    }
    fn comm_id(&self) -> u64 {
        self.id
    }
    fn memory(&self) -> &dyn Memory {
        &self.registry
    }
    fn memory_mut(&mut self) -> &mut dyn Memory {
        &mut self.registry
    }

    /// Every rank's launch number, call count and first call in fixed-size
    /// records (`allgather_words`), then, for a group of several calls, the
    /// rest of every rank's calls in an allgatherv.
    fn exchange(&mut self, mine: &Posted) -> Result<Vec<Posted>> {
        let slots = self.exchange_slots(mine.op_count, &mine.calls, None)?;
        self.decode(&slots, &mine.calls)
    }

    fn execute(&mut self, launch: &Launch) -> Result<()> {
        self.launch(launch)
    }

    fn launch(&mut self, launch: &Launch) -> Result<()> {
        let result = self.run(launch);
        if let Err(e) = &result {
            self.failure.get_or_insert_with(|| e.clone());
        }
        result
    }

    fn failure(&self) -> Option<Error> {
        self.failure.clone().map(|mut e| {
            e.rank = Some(self.rank);
            e
        })
    }

    fn dup(&mut self) -> Result<Box<dyn Engine>> {
        self.dups += 1;
        let comm = ffi::dup(self.comm)?;
        let id = self.id.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ self.dups;
        Ok(Box::new(MpiEngine::new(
            self.notices.clone(),
            comm,
            self.rank,
            self.size,
            id,
            self.program,
            self.timeout,
        )))
    }

    fn synchronize(&mut self) -> Result<()> {
        // every launch returns complete
        Ok(())
    }

    fn finish(&mut self, error: Option<&Error>) {
        self.notices.finish(self.rank, self.program, error);
    }
}
