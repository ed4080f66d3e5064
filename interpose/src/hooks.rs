//! What the interposer does around each NCCL call, in safe code: the
//! exports (`exports.rs`) hand it the call's arguments as integers and
//! forward or refuse as it says.
//!
//! Per communicator it keeps rankwise's group state (`core::Group`: group
//! nesting, opCount, the zero-count rule, sends to self), the trace, and the
//! side channel. Per call: `core::check_call` and `core::check_buffers`
//! (against the allocations `ncclMemAlloc` and the CUDA driver know), the
//! trace line, then at launch (the call itself, or the outermost
//! `ncclGroupEnd`) the cross-rank agreement: every rank's collectives are
//! compared by `core::agree`, every Send is paired with its peer's Recv by
//! `engine::nccl::posts`, and a rank whose pairs matched still waits for its
//! peers' verdicts, so a mismatch between two other ranks of an AlltoAllv
//! is an error here too instead of an NCCL hang. Only then is NCCL called.
//! A launch is one request to the side channel's store (its collectives'
//! exchange and every Send/Recv pair's), plus one for the verdicts when it
//! has Sends or Recvs; on a communicator whose ranks share a host, its
//! collectives' exchange goes through shared memory instead
//! (`rankwise::transport::lane`), and
//! a launch of collectives alone asks nothing of the store.

use crate::side;
use rankwise::core::group::Queued;
use rankwise::core::{
    AddressSpace, Error, ErrorKind, Group, Launch, RawCall, agree, check_buffers, check_call,
};
use rankwise::engine::nccl::posts::{self, PairCounts, Side};
use rankwise::trace::{RankTracer, Tracer};
use rankwise::transport::lane::{self, Lane, Part, Waited};
use rankwise::transport::store::{Client, Item, Missing, Read, Share, SideChannel, gathered};
use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// `ncclResult_t` codes the interposer returns itself.
pub const SUCCESS: i32 = 0;
pub const IN_PROGRESS: i32 = 7;

/// How much the interposer checks (`RANKWISE_CHECK`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Checks {
    /// `0`: every call is forwarded untouched.
    Off,
    /// `local`: each call's own checks (arguments, datatype, op, NULL,
    /// alignment, overlap, extent); no side channel, nothing compared
    /// across ranks.
    Local,
    /// The default (or `1`, `full`): the local checks, and every launch
    /// agreed across ranks before NCCL is called.
    Full,
}

/// The interposer's switches, read once.
pub struct Settings {
    pub checks: Checks,
    /// `RANKWISE_ABORT=1`: abort the process after printing an error.
    pub abort: bool,
    /// `RANKWISE_TIMEOUT`: the longest wait for other ranks.
    pub timeout: Duration,
    /// `RANKWISE_SHM=0` makes communicators whose ranks share a host agree
    /// through the store too, instead of shared memory (`transport::lane`).
    pub shm: bool,
}

pub fn settings() -> &'static Settings {
    static S: OnceLock<Settings> = OnceLock::new();
    S.get_or_init(|| {
        let var = |k: &str| std::env::var(k).ok().filter(|v| !v.is_empty());
        let timeout = match var(rankwise::settings::TIMEOUT) {
            None => rankwise::settings::Settings::default().timeout,
            Some(v) => rankwise::settings::parse_timeout(&v).unwrap_or_else(|e| {
                say(&format!(
                    "rankwise: RANKWISE_TIMEOUT={v}: {e}; using the default"
                ));
                rankwise::settings::Settings::default().timeout
            }),
        };
        let checks = match var("RANKWISE_CHECK").map(|v| v.to_ascii_lowercase()) {
            None => Checks::Full,
            Some(v) => match v.as_str() {
                "0" => Checks::Off,
                "local" => Checks::Local,
                "1" | "full" => Checks::Full,
                _ => {
                    say(&format!(
                        "rankwise: RANKWISE_CHECK={v}: not 0, local, 1 or full; checking in full"
                    ));
                    Checks::Full
                }
            },
        };
        Settings {
            checks,
            abort: var("RANKWISE_ABORT").as_deref() == Some("1"),
            timeout,
            shm: lane::wanted(),
        }
    })
}

/// One line on stderr, written whole; a closed stderr loses it.
pub fn say(line: &str) {
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

/// The side channel of one communicator.
struct Channel {
    chan: Arc<dyn SideChannel>,
    addr: SocketAddr,
    /// the communicator's name in the store
    key: String,
    /// each rank's owner id in the store, in rank order: the store marks
    /// ranks finished by number, and communicators share a store, so each
    /// communicator's ranks get numbers of their own
    owners: Vec<usize>,
    /// this rank of the communicator
    me: usize,
    /// the lane through shared memory, when every rank is on this host:
    /// a launch's collectives agree there instead of in the store
    ring: Option<Lane>,
}

impl Channel {
    fn new(
        chan: Arc<dyn SideChannel>,
        addr: SocketAddr,
        key: String,
        me: usize,
        nranks: usize,
    ) -> Channel {
        let base = side::hash(key.as_bytes()) as u32;
        let owners = (0..nranks)
            .map(|r| base.wrapping_add(r as u32) as usize)
            .collect();
        Channel {
            chan,
            addr,
            key,
            owners,
            me,
            ring: None,
        }
    }
    fn owner(&self, rank: usize) -> usize {
        self.owners[rank]
    }
}

struct CommState {
    handle: usize,
    rank: usize,
    nranks: usize,
    comm_id: u64,
    channel: Option<Channel>,
    group: Group,
    /// the calls of the queued launch, as made, in order: what NCCL gets
    pending: Vec<(RawCall, usize)>,
    premul: HashMap<i32, f64>,
    exchanges: u64,
    pairs: PairCounts,
    splits: u64,
    /// this communicator's Group was started for the thread's open group
    grouped: bool,
    /// a call of the open group was refused (and said so) already
    refused_in_group: bool,
    failed: Option<Error>,
    tracer: RankTracer,
    /// what `ncclGetLastError` says after the interposer refused a call
    last_error: Option<std::ffi::CString>,
}

type Shared = Arc<Mutex<CommState>>;

fn comms() -> MutexGuard<'static, HashMap<usize, Shared>> {
    static C: OnceLock<Mutex<HashMap<usize, Shared>>> = OnceLock::new();
    C.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

fn comm(handle: usize) -> Option<Shared> {
    comms().get(&handle).cloned()
}

fn lock(s: &Shared) -> MutexGuard<'_, CommState> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The thread's `ncclGroupStart` nesting (NCCL's groups are per thread and
/// span communicators) and the communicators that queued calls in it.
#[derive(Default)]
struct ThreadGroup {
    depth: u32,
    touched: Vec<Shared>,
}

thread_local! {
    static GROUP: RefCell<ThreadGroup> = RefCell::new(ThreadGroup::default());
}

// ---------------------------------------------------------------- memory

fn allocations() -> MutexGuard<'static, BTreeMap<usize, usize>> {
    static A: OnceLock<Mutex<BTreeMap<usize, usize>>> = OnceLock::new();
    A.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

/// `ncclMemAlloc` returned `addr` of `bytes`.
pub fn allocated(addr: usize, bytes: usize) {
    if addr != 0 {
        allocations().insert(addr, bytes);
    }
}

/// `ncclMemFree(addr)`.
pub fn freed(addr: usize) {
    allocations().remove(&addr);
}

/// Where pointers live, as far as this process can tell: allocations made
/// with `ncclMemAlloc` (exact extents), then what the CUDA driver knows
/// (`cuMemGetAddressRange`: the whole `cudaMalloc` block, so a caching
/// allocator's sub-buffer is checked against its block). An address neither
/// knows is given an unbounded extent: its NULL, alignment and overlap
/// rules are checked, its extent is not.
struct Space;

impl AddressSpace for Space {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        if let Some((&base, &len)) = allocations().range(..=addr).next_back()
            && addr < base.saturating_add(len.max(1))
        {
            return Some((base, len));
        }
        if rankwise::engine::nccl::library::cuda_driver().is_ok()
            && let Some(r) = rankwise::engine::nccl::cuda::address_range(addr)
        {
            return Some(r);
        }
        Some((addr, usize::MAX - addr))
    }
}

// ---------------------------------------------------------------- communicators

fn connect(addr: SocketAddr) -> Result<Arc<dyn SideChannel>, String> {
    if let Some(store) = side::served_here(addr) {
        return Ok(store);
    }
    let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
    Client::connect(addr, deadline)
        .map(|c| Arc::new(c) as Arc<dyn SideChannel>)
        .map_err(|e| e.message)
}

fn register(
    handle: usize,
    rank: usize,
    nranks: usize,
    comm_id: u64,
    key: String,
    addr: Option<SocketAddr>,
) {
    let channel = match addr {
        None => None,
        Some(addr) => match connect(addr) {
            Ok(chan) => {
                let mut c = Channel::new(chan, addr, key, rank, nranks);
                let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
                c.ring = lane::join(
                    &lane::segment_dir(),
                    &*c.chan,
                    &c.key,
                    c.me,
                    &c.owners,
                    settings().shm,
                    deadline,
                );
                Some(c)
            }
            Err(e) => {
                say(&format!(
                    "rankwise: rank {rank} of comm {handle:#x}: cannot reach the side channel at {addr} ({e}): this communicator gets the local checks only"
                ));
                None
            }
        },
    };
    let state = CommState::new(handle, rank, nranks, comm_id, channel);
    if let Some(c) = &state.channel {
        let lane = match c.ring {
            Some(_) => "shared memory (every rank is on this host)".to_string(),
            None => format!("the store at {}", c.addr),
        };
        state.tracer.init_info(&format!(
            "rankwise: comm {handle:#x} rank {rank} agrees with its peers through {lane}"
        ));
    }
    comms().insert(handle, Arc::new(Mutex::new(state)));
}

impl CommState {
    fn new(
        handle: usize,
        rank: usize,
        nranks: usize,
        comm_id: u64,
        channel: Option<Channel>,
    ) -> CommState {
        let tracer = Tracer::from_env().for_rank(rank);
        tracer.init(handle, nranks, comm_id);
        CommState {
            handle,
            rank,
            nranks,
            comm_id,
            channel,
            group: Group::default(),
            pending: Vec::new(),
            premul: HashMap::new(),
            exchanges: 0,
            pairs: PairCounts::new(nranks),
            splits: 0,
            grouped: false,
            refused_in_group: false,
            failed: None,
            tracer,
            last_error: None,
        }
    }
}

/// After the real `ncclGetUniqueId`: the side channel's address goes into
/// the id.
pub fn unique_id_made(id: &mut [u8; 128]) {
    if settings().checks != Checks::Full {
        return;
    }
    if let Err(why) = side::stamp(id) {
        say(&format!(
            "rankwise: ncclGetUniqueId: the id cannot carry the side channel's address ({why}): its communicator gets the local checks only"
        ));
    }
}

/// Before the real `ncclCommInitRank*`: NCCL's own id back, and the store
/// the id named (none when only the local checks are made).
pub fn init_id(id: &mut [u8; 128]) -> Option<SocketAddr> {
    match settings().checks {
        Checks::Off => None,
        Checks::Local => {
            side::unstamp(id);
            None
        }
        Checks::Full => side::unstamp(id),
    }
}

/// After a real `ncclCommInitRank*` that made `handle`.
pub fn initialised(
    handle: usize,
    rank: i32,
    nranks: i32,
    nccl_id: &[u8; 128],
    addr: Option<SocketAddr>,
) {
    let checks = settings().checks;
    if checks == Checks::Off || handle == 0 || rank < 0 || nranks <= 0 || rank >= nranks {
        return;
    }
    let comm_id = side::hash(nccl_id);
    if addr.is_none() && nranks > 1 && checks == Checks::Full {
        say(&format!(
            "rankwise: rank {rank} of comm {handle:#x} (commId {comm_id:#x}): its ncclUniqueId was not made through the interposer, so it names no side channel: this communicator gets the local checks only"
        ));
    }
    register(
        handle,
        rank as usize,
        nranks as usize,
        comm_id,
        format!("{comm_id:016x}"),
        addr,
    );
}

/// After a real `ncclCommSplit` of `parent` (every rank of the parent
/// calls it, so the parent's split count names the split on every rank).
/// `child` is 0 for `NCCL_SPLIT_NOCOLOR`; `rank_count` is the child's rank
/// and size as NCCL says, when it could say.
pub fn split(parent: usize, color: i32, child: usize, rank_count: Option<(i32, i32)>) {
    let Some(p) = comm(parent) else { return };
    let (key, addr, comm_id) = {
        let mut p = lock(&p);
        p.splits += 1;
        let key = p
            .channel
            .as_ref()
            .map(|c| format!("{}.s{}c{color}", c.key, p.splits));
        let id = side::hash(&[p.comm_id.to_le_bytes(), p.splits.to_le_bytes()].concat());
        (key, p.channel.as_ref().map(|c| c.addr), id ^ color as u64)
    };
    let Some((rank, nranks)) = rank_count else {
        return;
    };
    if child == 0 || rank < 0 || nranks <= 0 || rank >= nranks {
        return;
    }
    register(
        child,
        rank as usize,
        nranks as usize,
        comm_id,
        key.unwrap_or_else(|| format!("{comm_id:016x}")),
        addr,
    );
}

/// The process is exiting: every communicator's connection to its side
/// channel closes (the store's process waits for exactly that).
pub fn forget_all() {
    let all: Vec<Shared> = comms().drain().map(|(_, s)| s).collect();
    drop(all);
}

/// `ncclCommDestroy` / `ncclCommAbort`: the rank leaves; ranks waiting for
/// its posts stop waiting and say so.
pub fn gone(handle: usize, abort: bool) {
    let Some(s) = comms().remove(&handle) else {
        return;
    };
    let s = lock(&s);
    if let Some(c) = &s.channel {
        let why = s
            .failed
            .as_ref()
            .map(|e| e.to_string())
            .or_else(|| abort.then(|| format!("rank {} called ncclCommAbort", s.rank)));
        let _ = c.chan.finish(c.owner(s.rank), why.as_deref());
    }
}

/// `ncclRedOpCreatePreMulSum` made `op` on `handle` with `scalar` (0 when
/// the scalar lives on the device, where the interposer cannot read it).
pub fn premul_made(handle: usize, op: i32, scalar: f64) {
    if let Some(s) = comm(handle) {
        lock(&s).premul.insert(op, scalar);
    }
}

pub fn premul_destroyed(handle: usize, op: i32) {
    if let Some(s) = comm(handle) {
        lock(&s).premul.remove(&op);
    }
}

/// What `ncclGetLastError` says for `handle` when the interposer refused
/// its last failed call.
pub fn last_error(handle: usize) -> Option<*const std::ffi::c_char> {
    let s = comm(handle)?;
    let s = lock(&s);
    s.last_error.as_ref().map(|c| c.as_ptr())
}

// ---------------------------------------------------------------- calls

/// What the export does with a call.
pub enum Action {
    /// Call NCCL with the arguments as made.
    Forward,
    /// Return this code without calling NCCL.
    Return(i32),
}

/// A PreMulSum scalar from its bytes (one element of datatype `dt`, as
/// `ncclScalarHostImmediate` passes it); 0 for a code that is no datatype.
pub fn scalar_of(dt: i32, b: &[u8]) -> f64 {
    use rankwise::core::{DataType, F8E4M3, F8E5M2};
    let Some(t) = DataType::from_code(dt) else {
        return 0.0;
    };
    let mut w = [0u8; 8];
    let n = t.size().min(b.len()).min(8);
    w[..n].copy_from_slice(&b[..n]);
    match t {
        DataType::Int8 => w[0] as i8 as f64,
        DataType::Uint8 => w[0] as f64,
        DataType::Int32 => i32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Uint32 => u32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Int64 => i64::from_le_bytes(w) as f64,
        DataType::Uint64 => u64::from_le_bytes(w) as f64,
        DataType::Float16 => half::f16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::Bfloat16 => half::bf16::from_le_bytes([w[0], w[1]]).to_f64(),
        DataType::Float32 => f32::from_le_bytes([w[0], w[1], w[2], w[3]]) as f64,
        DataType::Float64 => f64::from_le_bytes(w),
        DataType::Float8e4m3 => F8E4M3(w[0]).to_f32() as f64,
        DataType::Float8e5m2 => F8E5M2(w[0]).to_f32() as f64,
    }
}

/// Bytes of one element of datatype code `dt` (0 for no datatype).
pub fn element_size(dt: i32) -> usize {
    rankwise::core::DataType::from_code(dt).map_or(0, |t| t.size())
}

/// Reports `e` as this rank's: one line on stderr, a WARN line in the trace,
/// `ncclGetLastError`'s text; the process aborts when asked to.
fn report(s: &mut CommState, e: &Error, detail: Option<&str>) -> i32 {
    let e = e.clone().on_rank(s.rank);
    let line = match detail {
        Some(d) => format!("{e} [{d}]"),
        None => e.to_string(),
    };
    say(&format!("rankwise: {line} (comm {:#x})", s.handle));
    s.tracer.warn(&line);
    s.last_error = std::ffi::CString::new(line).ok();
    if settings().abort {
        say("rankwise: RANKWISE_ABORT=1: aborting");
        std::process::abort();
    }
    e.code().code()
}

/// A failure found across ranks fails the communicator, as NCCL's async
/// errors do: later calls on it are refused, and ranks waiting for this
/// one's posts stop waiting.
fn fail(s: &mut CommState, e: Error) -> Error {
    let e = e.on_rank(s.rank);
    if s.failed.is_none() {
        s.failed = Some(e.clone());
        if let Some(c) = &s.channel {
            let _ = c.chan.finish(c.owner(s.rank), Some(&e.to_string()));
            // this process may hold the store and end at once (a program
            // that exits on the error): give waiting ranks time to hear it
            if side::serves() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    e
}

/// A collective or Send/Recv on `handle`, with its stream.
pub fn call(handle: usize, raw: RawCall, stream: usize) -> Action {
    if settings().checks == Checks::Off {
        return Action::Forward;
    }
    let Some(shared) = comm(handle) else {
        // a communicator made without the interposer: nothing to check against
        return Action::Forward;
    };
    let in_group = GROUP.with(|g| g.borrow().depth > 0);
    let mut s = lock(&shared);
    if let Some(why) = s.failed.clone() {
        let e = Error::new(
            ErrorKind::CommFailed,
            format!(
                "{}: this communicator failed earlier ({}); NCCL refuses calls on a failed communicator too",
                raw.func.name(),
                why.message
            ),
        );
        return Action::Return(report(&mut s, &e, None));
    }
    if in_group && !s.grouped {
        s.grouped = true;
        s.group.start();
        GROUP.with(|g| g.borrow_mut().touched.push(shared.clone()));
    }
    let (n, me) = (s.nranks, s.rank);
    let checked = check_call(&raw, n, &|c| s.premul.get(&c).copied())
        .and_then(|c| check_buffers(&c, n, me, &Space).map(|()| c));
    let call = match checked {
        Ok(c) => c,
        Err(e) => {
            s.group.note_error(&e);
            s.refused_in_group |= in_group;
            return Action::Return(report(&mut s, &e, None));
        }
    };
    let op_count = s.group.op_count();
    s.tracer.coll(&raw, op_count, handle, n);
    match s.group.queue(call) {
        Queued::Discarded => Action::Forward,
        Queued::Waiting => {
            s.pending.push((raw, stream));
            Action::Return(SUCCESS)
        }
        Queued::LaunchNow => {
            let Some(mut launch) = s.group.take() else {
                return Action::Forward;
            };
            s.group.number(&mut launch);
            let r = agree_launches(&mut [(&mut *s, &launch)]);
            s.group.recycle(launch);
            match r {
                Ok(()) => Action::Forward,
                Err((e, detail)) => {
                    let e = fail(&mut s, e);
                    Action::Return(report(&mut s, &e, detail.as_deref()))
                }
            }
        }
    }
}

/// One call to hand NCCL at a group's end: the call, its stream, its
/// communicator.
pub type Issue = (RawCall, usize, usize);

/// `ncclGroupStart` (before the real one).
pub fn group_start() {
    if settings().checks != Checks::Off {
        GROUP.with(|g| g.borrow_mut().depth += 1);
    }
}

/// `ncclGroupEnd`: `None` for an inner end or nothing to check (call the
/// real one as is); otherwise the outermost end's verdict: the calls to
/// issue into NCCL's group before its end, or the error to return after
/// closing NCCL's (empty) group.
pub fn group_end() -> Option<Result<Vec<Issue>, i32>> {
    if settings().checks == Checks::Off {
        return None;
    }
    let touched = GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return None;
        }
        g.depth -= 1;
        (g.depth == 0).then(|| std::mem::take(&mut g.touched))
    })?;
    if touched.is_empty() {
        return None;
    }
    let mut guards: Vec<MutexGuard<'_, CommState>> = touched.iter().map(|s| lock(s)).collect();
    let mut first_error: Option<i32> = None;
    let mut launches: Vec<(usize, Launch)> = Vec::new();
    for (i, s) in guards.iter_mut().enumerate() {
        s.grouped = false;
        let said = std::mem::take(&mut s.refused_in_group);
        let me = s.rank;
        match s.group.end(me) {
            Ok(true) => {
                if let Some(mut l) = s.group.take() {
                    s.group.number(&mut l);
                    launches.push((i, l));
                } else {
                    s.pending.clear();
                }
            }
            Ok(false) => {}
            Err(e) => {
                s.pending.clear();
                // the group's first refused call was said when it was made
                let code = if said {
                    e.code().code()
                } else {
                    report(s, &e, None)
                };
                first_error.get_or_insert(code);
            }
        }
    }
    if let Some(code) = first_error {
        for (i, l) in launches {
            guards[i].pending.clear();
            guards[i].group.recycle(l);
        }
        return Some(Err(code));
    }
    let result = {
        let mut pairs: Vec<(&mut CommState, &Launch)> = Vec::new();
        let mut rest: Vec<Option<&mut MutexGuard<'_, CommState>>> =
            guards.iter_mut().map(Some).collect();
        for (i, l) in &launches {
            if let Some(g) = rest[*i].take() {
                pairs.push((&mut **g, l));
            }
        }
        agree_launches(&mut pairs)
    };
    let mut out = Vec::new();
    let mut code = None;
    for (i, l) in launches {
        let s = &mut guards[i];
        let pending = std::mem::take(&mut s.pending);
        match &result {
            Ok(()) => out.extend(pending.into_iter().map(|(r, st)| (r, st, s.handle))),
            Err((e, detail)) => {
                let e = fail(s, e.clone());
                let c = report(s, &e, detail.as_deref());
                code.get_or_insert(c);
            }
        }
        s.group.recycle(l);
    }
    Some(match code {
        Some(c) => Err(c),
        None => Ok(out),
    })
}

// ---------------------------------------------------------------- agreement

/// The store owners of an exchange's parties.
enum Parties {
    /// every rank of the communicator (a launch's collectives)
    All,
    /// a sender and a receiver (a Send/Recv pair, or two ranks' verdicts)
    Two([usize; 2]),
}

/// One exchange this rank takes part in, held until its request is made.
struct Posting {
    key: String,
    parties: Parties,
    party: usize,
    value: Vec<u8>,
    /// the round on the channel's ring that carries it instead of the store
    ring: Option<u64>,
}

impl Posting {
    fn item<'a>(&'a self, c: &'a Channel, read: Read) -> Item<'a> {
        Item {
            key: &self.key,
            owners: match &self.parties {
                Parties::All => &c.owners,
                Parties::Two(o) => o,
            },
            me: self.party,
            value: Some(&self.value),
            read,
        }
    }
}

/// One communicator's exchanges of one round.
struct Round<'a> {
    chan: &'a Channel,
    postings: &'a [Posting],
    /// false: this rank only posts (it failed already)
    reads: bool,
    /// where this rank is, kept (by the ring or the store) for ranks that
    /// wait on it
    note: Option<&'a [u8]>,
}

/// Makes one round of exchanges on every communicator of a launch: every
/// party's share of each posting that is read, per communicator. Postings
/// on a ring go there first (a few stores, no waiting); the others make
/// one request per communicator to its store. A group across
/// communicators posts on every one of them before it reads any, so ranks
/// that list them in different orders (or whose communicators use
/// different stores) do not wait on each other.
fn exchange(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>, Error> {
    for r in rounds {
        post_on_ring(r)?;
    }
    let mut stored = store_exchange(rounds, deadline)?.into_iter();
    Ok(rounds
        .iter()
        .map(|r| {
            let mut from_store = stored.next().unwrap_or_default().into_iter();
            r.postings
                .iter()
                .map(|p| match (p.ring, &r.chan.ring) {
                    (Some(seq), Some(ring)) if r.reads => read_ring(r.chan, ring, seq, deadline),
                    (Some(_), _) => Vec::new(),
                    (None, _) => from_store.next().unwrap_or_default(),
                })
                .collect()
        })
        .collect())
}

/// Posts a round's ring postings and leaves its note on the ring. A value
/// too large for a slot goes to the store first.
fn post_on_ring(r: &Round<'_>) -> Result<(), Error> {
    let Some(ring) = &r.chan.ring else {
        return Ok(());
    };
    let me = r.chan.me;
    if let Some(note) = r.note {
        ring.set_note(me, note);
    }
    for p in r.postings {
        let Some(seq) = p.ring else { continue };
        if p.value.len() > lane::SLOT_BYTES {
            let key = lane::overflow_key(&r.chan.key, seq, me);
            r.chan.chan.set(&key, &p.value)?;
        }
        ring.post(me, seq, &p.value);
    }
    Ok(())
}

/// Every rank's share of ring round `seq`, in rank order. A rank that has
/// not posted is `Missing::Finished` once the store says it left (asked
/// every 10 ms of the wait), else `Missing::Timeout` at the deadline.
fn read_ring(c: &Channel, ring: &Lane, seq: u64, deadline: Instant) -> Vec<Share> {
    let gone =
        |rank: usize| match c
            .chan
            .get(&format!("{}/gone", c.key), c.owner(rank), Instant::now())
        {
            Ok(Err(m @ Missing::Finished { .. })) => Some((rank, m)),
            _ => None,
        };
    let parts: Vec<Result<Part, Missing>> = match ring.wait(seq, deadline, |missing| {
        let left: Vec<(usize, Missing)> = missing.iter().filter_map(|&r| gone(r)).collect();
        (!left.is_empty()).then_some(left)
    }) {
        Waited::All(parts) => parts.into_iter().map(Ok).collect(),
        Waited::Stopped { by, parts } => {
            // this rank fails the launch: a rank that comes later must not
            // find it there and go on into NCCL alone
            ring.withdraw(c.me, seq);
            let left = by.unwrap_or_default();
            parts
                .into_iter()
                .enumerate()
                .map(|(r, p)| {
                    p.ok_or_else(|| {
                        left.iter()
                            .find(|(q, _)| *q == r)
                            .map_or(Missing::Timeout, |(_, m)| m.clone())
                    })
                })
                .collect()
        }
    };
    parts
        .into_iter()
        .enumerate()
        .map(|(rank, part)| match part {
            Ok(Part::Value(v)) => Ok(v),
            Ok(Part::InStore) => {
                let key = lane::overflow_key(&c.key, seq, rank);
                c.chan
                    .get(&key, c.owner(rank), deadline)
                    .unwrap_or(Err(Missing::Timeout))
            }
            Err(m) => Err(m),
        })
        .collect()
}

/// The store's part of [`exchange`]: per round, the shares of its postings
/// that are not on a ring, in order. A launch on one communicator is one
/// request.
fn store_exchange(rounds: &[Round<'_>], deadline: Instant) -> Result<Vec<Vec<Vec<Share>>>, Error> {
    fn items<'a>(r: &Round<'a>, read: Read) -> Vec<Item<'a>> {
        r.postings
            .iter()
            .filter(|p| p.ring.is_none())
            .map(|p| p.item(r.chan, read))
            .collect()
    }
    let busy: Vec<usize> = (0..rounds.len())
        .filter(|&i| rounds[i].postings.iter().any(|p| p.ring.is_none()))
        .collect();
    fn note<'a>(r: &Round<'a>) -> Option<(usize, &'a [u8])> {
        r.note.map(|n| (r.chan.owner(r.chan.me), n))
    }
    let mut out = vec![Vec::new(); rounds.len()];
    if let [i] = busy[..] {
        let r = &rounds[i];
        let read = if r.reads { Read::Now } else { Read::Never };
        out[i] = r.chan.chan.exchange(&items(r, read), note(r), deadline)?;
        return Ok(out);
    }
    for &i in &busy {
        let r = &rounds[i];
        let read = if r.reads { Read::Later } else { Read::Never };
        r.chan.chan.exchange(&items(r, read), note(r), deadline)?;
    }
    for &i in &busy {
        let r = &rounds[i];
        let reads: Vec<Item<'_>> = items(r, Read::Now)
            .into_iter()
            .map(|it| Item { value: None, ..it })
            .collect();
        out[i] = if r.reads {
            r.chan.chan.exchange(&reads, None, deadline)?
        } else {
            vec![Vec::new(); reads.len()]
        };
    }
    Ok(out)
}

/// One communicator's share of a launch in flight through the side channel.
struct InFlight {
    /// its collectives' exchange (first in `postings`), when it has one
    colls: bool,
    /// its Sends and Recvs to other ranks with their pair numbers, each
    /// with its posting after the collectives'
    sides: Vec<(Side, u64)>,
    postings: Vec<Posting>,
    /// `AllReduce (opCount 3)`: where this rank is
    note: String,
}

type Failure = (Error, Option<String>);

/// The cross-rank agreement of one launch per communicator, in at most two
/// round trips per communicator: every collective and every Send/Recv pair
/// of the launch in one request, and, when it has Sends or Recvs, the
/// ranks' verdicts on their pairs in a second one.
fn agree_launches(launches: &mut [(&mut CommState, &Launch)]) -> Result<(), Failure> {
    let deadline = Instant::now() + settings().timeout;
    let mut flights = Vec::with_capacity(launches.len());
    for (s, l) in launches.iter_mut() {
        flights.push(post(s, l).map_err(|e| (e, None))?);
    }
    let answers = {
        let rounds: Vec<Round<'_>> = launches
            .iter()
            .zip(&flights)
            .filter_map(|((s, _), f)| {
                let chan = s.channel.as_ref()?;
                (!f.postings.is_empty()).then(|| Round {
                    chan,
                    postings: &f.postings,
                    reads: true,
                    note: Some(f.note.as_bytes()),
                })
            })
            .collect();
        exchange(&rounds, deadline).map_err(|e| (e, None))?
    };
    let mut answers = answers.into_iter();
    let mut pairings = Vec::with_capacity(launches.len());
    for ((s, l), f) in launches.iter().zip(&flights) {
        pairings.push(if s.channel.is_none() || f.postings.is_empty() {
            None
        } else {
            let shares = answers.next().unwrap_or_default();
            Some(judge(s, l, f, shares)?)
        });
    }
    verdicts(launches, &pairings, deadline)
}

/// Numbers a launch and makes its postings: its collectives, its Sends and
/// Recvs. Sends to self pair with this rank's own Recvs from self here.
fn post(s: &mut CommState, l: &Launch) -> Result<InFlight, Error> {
    let me = s.rank;
    let sides = s.pairs.number(me, l)?;
    let mut f = InFlight {
        colls: false,
        sides: Vec::new(),
        postings: Vec::new(),
        note: String::new(),
    };
    let Some(c) = &s.channel else { return Ok(f) };
    if !l.colls.is_empty() && s.nranks > 1 {
        let seq = s.exchanges;
        s.exchanges += 1;
        f.colls = true;
        f.postings.push(Posting {
            key: format!("{}/x{seq}", c.key),
            parties: Parties::All,
            party: me,
            value: posts::encode_posted(&l.posted()),
            ring: c.ring.is_some().then_some(seq),
        });
    }
    for (sd, seq) in &sides {
        let (src, dst, party) = posts::ends(me, sd);
        f.postings.push(Posting {
            key: posts::pair_key(&c.key, src, dst, *seq),
            parties: Parties::Two([c.owner(src), c.owner(dst)]),
            party,
            value: posts::encode_side(sd),
            ring: None,
        });
    }
    f.sides = sides;
    if !f.postings.is_empty() {
        f.note = l.describe();
    }
    Ok(f)
}

/// Where the ranks that did not come were last: `rank 3 was last in
/// Broadcast (opCount 2)`, from the note the ring (or else the store) keeps
/// of each rank's latest exchange.
fn whereabouts(c: &Channel, missing: &[usize]) -> String {
    missing
        .iter()
        .map(|r| {
            let note = match &c.ring {
                Some(ring) => ring.note(*r),
                None => c.chan.last_note(c.owner(*r)).ok().flatten(),
            };
            (r, note)
        })
        .map(|(r, note)| match note {
            Some(b) => format!("rank {r} was last in {}", String::from_utf8_lossy(&b)),
            _ => format!("rank {r} has made no call on this communicator"),
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// What a rank found of its Send/Recv pairs: the first failure (in call
/// order), and each peer it heard from with the opCount of the peer's
/// launch (whose verdict it reads, and which reads its own).
struct Pairing {
    verdict: Result<(), Failure>,
    peers: std::collections::BTreeSet<(usize, u64)>,
}

/// Compares a launch's collectives with every rank's and pairs its Sends
/// and Recvs with their peers', from the first round's answers.
fn judge(
    s: &CommState,
    l: &Launch,
    f: &InFlight,
    shares: Vec<Vec<Share>>,
) -> Result<Pairing, Failure> {
    let Some(c) = &s.channel else {
        return Ok(Pairing {
            verdict: Ok(()),
            peers: Default::default(),
        });
    };
    let me = s.rank;
    let timeout = settings().timeout;
    let plain = |e: Error| -> Failure { (e, None) };
    let mut shares = shares.into_iter();
    if f.colls {
        let all = gathered(shares.next().unwrap_or_default());
        match all {
            Ok(all) => {
                let all = all
                    .iter()
                    .map(|b| posts::decode_posted(b))
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(plain)?;
                if let Err(e) = agree::collectives(&all) {
                    return Err((e, Some(agree::sides(&all))));
                }
            }
            Err(missing) => {
                let what = l
                    .colls
                    .first()
                    .map(|x| format!("{} #{}", x.func, l.op_count))
                    .unwrap_or_else(|| "a group".into());
                let e = posts::missing_error(&missing, &what, timeout);
                let late: Vec<usize> = missing
                    .iter()
                    .filter(|(_, m)| *m == Missing::Timeout)
                    .map(|(r, _)| *r)
                    .collect();
                let detail = (!late.is_empty()).then(|| whereabouts(c, &late));
                return Err((e, detail));
            }
        }
    }
    let mut pairing = Pairing {
        verdict: Ok(()),
        peers: Default::default(),
    };
    for ((sd, seq), posting) in f.sides.iter().zip(&f.postings[usize::from(f.colls)..]) {
        let peer = sd.call.root;
        let theirs = shares
            .next()
            .and_then(|sh| sh.into_iter().nth(1 - posting.party))
            .unwrap_or(Err(Missing::Timeout));
        let late = theirs == Err(Missing::Timeout);
        if let Ok(b) = &theirs
            && let Ok(t) = posts::decode_side(b)
        {
            pairing.peers.insert((peer, t.op_count));
        }
        if pairing.verdict.is_ok()
            && let Err(e) = posts::meet(me, sd, *seq, theirs, timeout)
        {
            let detail = late.then(|| whereabouts(c, &[peer]));
            pairing.verdict = Err((e, detail));
        }
    }
    Ok(pairing)
}

/// The second round, for launches with Sends or Recvs: each rank tells
/// every peer it heard from what it found, and a rank whose own pairs
/// matched reads its peers' findings, so a pair that failed between two
/// other ranks of the group stops this one too.
fn verdicts(
    launches: &[(&mut CommState, &Launch)],
    pairings: &[Option<Pairing>],
    deadline: Instant,
) -> Result<(), Failure> {
    let mut work = Vec::new();
    for ((s, l), p) in launches.iter().zip(pairings) {
        let (Some(c), Some(p)) = (&s.channel, p) else {
            continue;
        };
        if p.peers.is_empty() && p.verdict.is_ok() {
            continue;
        }
        let me = s.rank;
        let mine = match &p.verdict {
            Ok(()) => Vec::new(),
            Err((e, _)) => e.message.clone().into_bytes(),
        };
        let postings: Vec<Posting> = p
            .peers
            .iter()
            .map(|&(peer, their_op)| {
                let (lo, hi) = ((me, l.op_count), (peer, their_op));
                let (lo, hi) = if lo.0 < hi.0 { (lo, hi) } else { (hi, lo) };
                Posting {
                    key: format!("{}/v{}.{:x}>{}.{:x}", c.key, lo.0, lo.1, hi.0, hi.1),
                    parties: Parties::Two([c.owner(lo.0), c.owner(hi.0)]),
                    party: usize::from(me == hi.0),
                    value: mine.clone(),
                    ring: None,
                }
            })
            .collect();
        work.push((c, p, postings));
    }
    let rounds: Vec<Round<'_>> = work
        .iter()
        .filter(|(_, _, postings)| !postings.is_empty())
        .map(|(c, p, postings)| Round {
            chan: c,
            postings,
            reads: p.verdict.is_ok(),
            note: None,
        })
        .collect();
    let answers = exchange(&rounds, deadline).map_err(|e| (e, None))?;
    // this rank's own findings first, then what its peers found
    if let Some((_, p, _)) = work.iter().find(|(_, p, _)| p.verdict.is_err()) {
        return p.verdict.clone();
    }
    let timeout = settings().timeout;
    for ((_, p, postings), shares) in work
        .iter()
        .filter(|(_, _, postings)| !postings.is_empty())
        .zip(answers)
    {
        for ((&(peer, their_op), posting), sh) in p.peers.iter().zip(postings).zip(shares) {
            let theirs = sh
                .into_iter()
                .nth(1 - posting.party)
                .unwrap_or(Err(Missing::Timeout));
            match theirs {
                Ok(b) if b.is_empty() => {}
                Ok(b) => {
                    return Err((
                        Error::new(
                            ErrorKind::Mismatch,
                            format!(
                                "rank {peer}, a peer of this group, found: {}",
                                String::from_utf8_lossy(&b)
                            ),
                        ),
                        None,
                    ));
                }
                Err(m) => {
                    let e = posts::missing_error(
                        &[(peer, m)],
                        &format!("the Send/Recv launch (opCount {their_op:x}) it pairs with"),
                        timeout,
                    );
                    return Err((e, None));
                }
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use rankwise::core::{Call, DataType, Func, RedOp};
    use rankwise::transport::store::Store;

    fn call(func: Func, count: usize, root: usize) -> Call {
        Call {
            func,
            sendbuff: 0x1000,
            recvbuff: 0x2000,
            count,
            datatype: DataType::Int32,
            op: RedOp::Sum,
            op_code: 0,
            root,
        }
    }

    /// Rank `rank` of `n` of the communicator named `key` on `store`.
    fn rank(store: &Arc<Store>, key: &str, rank: usize, n: usize) -> CommState {
        let chan = Channel::new(
            store.clone() as Arc<dyn SideChannel>,
            "127.0.0.1:1".parse().unwrap(),
            key.into(),
            rank,
            n,
        );
        CommState::new(0x100 + rank, rank, n, 7, Some(chan))
    }

    /// The `n` ranks of a communicator whose collectives agree on a ring
    /// (its segment in `dir`), the rest on `store`.
    fn ranks_on_ring(store: &Arc<Store>, dir: &std::path::Path, n: usize) -> Vec<CommState> {
        let (first, path) = Lane::create(dir, n).unwrap();
        let nonce = first.nonce();
        let mut first = Some(first);
        (0..n)
            .map(|r| {
                let mut s = rank(store, "c", r, n);
                let ring = first
                    .take()
                    .unwrap_or_else(|| Lane::open(&path, nonce, n).unwrap());
                s.channel.as_mut().unwrap().ring = Some(ring);
                s
            })
            .collect()
    }

    fn launch(s: &mut CommState, colls: Vec<Call>, p2p: Vec<Call>) -> Launch {
        let mut l = Launch {
            op_count: 0,
            colls,
            p2p,
        };
        s.group.number(&mut l);
        l
    }

    /// `launches` launches of a training loop on `s`: two AllReduces (of a
    /// growing count) for every Send/Recv ring; each must agree.
    fn train(s: &mut CommState, launches: usize) {
        let (r, n) = (s.rank, s.nranks);
        for i in 0..launches {
            let l = match i % 3 {
                0 | 1 => launch(s, vec![call(Func::AllReduce, 2 + i, 0)], vec![]),
                _ => launch(
                    s,
                    vec![],
                    vec![
                        call(Func::Send, 3, (r + 1) % n),
                        call(Func::Recv, 3, (r + n - 1) % n),
                    ],
                ),
            };
            if let Err((e, d)) = agree_launches(&mut [(&mut *s, &l)]) {
                panic!("launch {i} on rank {r}: {e} {d:?}");
            }
        }
    }

    /// AllReduces and Send/Recv rings, as a training loop makes them: every
    /// launch agrees, and the store is left holding nothing.
    #[test]
    fn launches_agree_and_leave_the_store_empty() {
        let store = Store::new();
        let n = 4;
        std::thread::scope(|sc| {
            for r in 0..n {
                let store = &store;
                sc.spawn(move || {
                    let mut s = rank(store, "c", r, n);
                    train(&mut s, 1500);
                });
            }
        });
        assert_eq!(store.key_count(), 0, "every exchange was spent");
    }

    /// The same training loop with the collectives on a ring: they agree
    /// there, the Send/Recv rings in the store, and a count that differs on
    /// one rank is the same error on every rank.
    #[test]
    fn collectives_agree_on_the_ring_and_a_mismatch_there_fails_every_rank() {
        let store = Store::new();
        let dir = tempfile::tempdir().unwrap();
        let n = 3;
        let states = ranks_on_ring(&store, dir.path(), n);
        let got: Vec<Result<(), Failure>> = std::thread::scope(|sc| {
            let hs: Vec<_> = states
                .into_iter()
                .enumerate()
                .map(|(r, mut s)| {
                    sc.spawn(move || {
                        train(&mut s, 900);
                        assert_eq!(s.exchanges, 600, "600 launches had collectives");
                        let count = if r == 1 { 5 } else { 4 };
                        let l = launch(&mut s, vec![call(Func::AllReduce, count, 0)], vec![]);
                        let got = agree_launches(&mut [(&mut s, &l)]);
                        let ring = s.channel.as_ref().and_then(|c| c.ring.as_ref()).unwrap();
                        assert!(
                            ring.read((r + 1) % n, 600).is_some(),
                            "round 600 was the ring's"
                        );
                        got
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        for (r, g) in got.iter().enumerate() {
            let (e, _) = g.as_ref().unwrap_err();
            assert_eq!(e.kind, ErrorKind::Mismatch, "rank {r}: {e}");
            assert!(e.message.contains("count"), "rank {r}: {e}");
        }
        assert_eq!(store.key_count(), 0, "the store held only the pairs");
    }

    /// A group across two communicators, which rank 0 lists in one order and
    /// rank 1 in the other: both agree, without waiting on each other.
    #[test]
    fn a_group_across_communicators_agrees_in_any_order() {
        let store = Store::new();
        let t = Instant::now();
        std::thread::scope(|sc| {
            for r in 0..2 {
                let store = &store;
                sc.spawn(move || {
                    let mut a = rank(store, "a", r, 2);
                    let mut b = rank(store, "b", r, 2);
                    let la = launch(&mut a, vec![call(Func::AllReduce, 4, 0)], vec![]);
                    let lb = launch(
                        &mut b,
                        vec![],
                        vec![call(Func::Send, 5, 1 - r), call(Func::Recv, 5, 1 - r)],
                    );
                    let got = if r == 0 {
                        agree_launches(&mut [(&mut a, &la), (&mut b, &lb)])
                    } else {
                        agree_launches(&mut [(&mut b, &lb), (&mut a, &la)])
                    };
                    if let Err((e, d)) = got {
                        panic!("rank {r}: {e} {d:?}");
                    }
                });
            }
        });
        assert!(t.elapsed() < Duration::from_secs(10), "{:?}", t.elapsed());
        assert_eq!(store.key_count(), 0);
    }

    /// A Send/Recv pair that disagrees between ranks 1 and 2 of a group
    /// stops rank 0, whose own pairs with both matched, with their finding.
    #[test]
    fn a_pair_that_fails_between_two_peers_stops_the_third() {
        let store = Store::new();
        let n = 3;
        let got: Vec<Result<(), Failure>> = std::thread::scope(|sc| {
            let hs: Vec<_> = (0..n)
                .map(|r| {
                    let store = &store;
                    sc.spawn(move || {
                        let mut s = rank(store, "c", r, n);
                        // every rank sends 2 to each other and receives 2,
                        // except that rank 2 expects 3 from rank 1
                        let mut p2p = Vec::new();
                        for p in (0..n).filter(|p| *p != r) {
                            p2p.push(call(Func::Send, 2, p));
                            p2p.push(call(Func::Recv, if (r, p) == (2, 1) { 3 } else { 2 }, p));
                        }
                        let l = launch(&mut s, vec![], p2p);
                        agree_launches(&mut [(&mut s, &l)])
                    })
                })
                .collect();
            hs.into_iter().map(|h| h.join().unwrap()).collect()
        });
        let pair = "Send/Recv mismatch: rank 1's Send #0 to rank 2 (count 2, int32, opCount 0) meets rank 2's Recv #0 from rank 1 (count 3, int32, opCount 0)";
        for (r, g) in got.iter().enumerate() {
            let (e, _) = g.as_ref().unwrap_err();
            assert!(e.message.contains(pair), "rank {r}: {e}");
            assert_eq!(
                e.message.starts_with("rank "),
                r == 0,
                "only rank 0 hears it from a peer: {e}"
            );
        }
        assert_eq!(store.key_count(), 0, "failed pairs are spent too");
    }
}
