//! The communicators this process made through the interposer, by handle:
//! each one's group state, its agreement with its peers
//! (`rankwise::agreement::Peers`, over the store its `ncclUniqueId` named,
//! set up on a thread of its own: `setup`), its PreMulSum ops, its trace,
//! and how it failed. Init and split come through here (the other ways a
//! communicator is made are in `children`; how one ends, in `leaving`).
//!
//! Each communicator's state has a lock, taken for moments only: a launch
//! takes its agreement out of the state and waits for its peers without
//! the lock, so `ncclCommAbort` from another thread never waits for it.

use super::settings::{Checks, say, settings};
use super::setup::{self, Channel, Exit};
use crate::side;
use rankwise::agreement::Peers;
use rankwise::agreement::stop::Stop;
use rankwise::core::{Error, Group, RawCall};
use rankwise::trace::{RankTracer, Tracer};
use rankwise::transport::store::{Client, SideChannel};
use rustc_hash::FxHashMap;
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

/// A communicator's agreement with its peers, where it is now.
pub enum Agreement {
    /// being set up on a thread of its own (`setup`)
    Setting(setup::Pending),
    Ready(Peers),
    /// a launch holds it while it waits for the peers
    Out,
}

pub struct CommState {
    pub comm_id: u64,
    /// its name in the store ([`rankwise::agreement::keys`])
    pub key: String,
    /// the store its ranks agree through (None: the local checks only)
    pub channel: Option<Channel>,
    pub agreement: Agreement,
    pub group: Group,
    /// the calls of the queued launch, as made, in order: what NCCL gets
    pub pending: Vec<(RawCall, usize)>,
    pub premul: HashMap<i32, f64>,
    /// PreMulSum ops the program destroyed while held calls use them: NCCL
    /// destroys them once those calls reached it
    pub doomed: Vec<i32>,
    pub splits: u64,
    pub shrinks: u64,
    /// this communicator's Group was started for the thread's open group
    pub grouped: bool,
    /// a call of the open group was refused (and said so) already
    pub refused_in_group: bool,
    pub failed: Option<Error>,
    pub tracer: RankTracer,
    /// a call on it was recorded into a CUDA graph, and the journal said so
    pub captured: bool,
    /// watch mode's record and rounds (None in the other modes)
    pub watch: Option<Box<super::watch::Watching>>,
}

/// One communicator: what never changes, what ends its waits, what tells
/// its peers it left, and its state.
pub struct Comm {
    pub handle: usize,
    pub rank: usize,
    pub nranks: usize,
    pub stop: Stop,
    /// set once its side channel is reached
    pub exit: OnceLock<Exit>,
    pub state: Mutex<CommState>,
}

pub type Shared = Arc<Comm>;

/// The communicators by handle. The handles are NCCL's pointers, not
/// input from outside the process: a fast hash, looked up on every call.
fn comms() -> MutexGuard<'static, FxHashMap<usize, Shared>> {
    static C: OnceLock<Mutex<FxHashMap<usize, Shared>>> = OnceLock::new();
    C.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub fn comm(handle: usize) -> Option<Shared> {
    comms().get(&handle).cloned()
}

/// Takes `handle` out of the registry (it is being destroyed or aborted).
pub fn unregister(handle: usize) -> Option<Shared> {
    comms().remove(&handle)
}

/// Every communicator registered now.
pub fn registered() -> Vec<Shared> {
    comms().values().cloned().collect()
}

/// Every communicator, taken out of the registry (the process is ending).
pub fn unregister_all() -> Vec<Shared> {
    comms().drain().map(|(_, s)| s).collect()
}

pub fn lock(s: &Comm) -> MutexGuard<'_, CommState> {
    s.state.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store at `at`, as owner `owner`: this process's own store, or a
/// connection that proved the store's key and speaks for that owner only.
pub fn connect(at: &side::StoreAt, owner: usize) -> Result<Arc<dyn SideChannel>, String> {
    if let Some(store) = side::served_here(at) {
        return Ok(store);
    }
    let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
    Client::connect(at.addr, &at.key, owner, deadline)
        .map(|c| Arc::new(c) as Arc<dyn SideChannel>)
        .map_err(|e| e.message)
}

/// Registers rank `rank` of `nranks` of the communicator `handle`, named
/// `key` in the store of `channel`; its agreement is set up on a thread
/// of its own, so that inits that do not block (several ranks from one
/// thread in a group, non-blocking communicators) never wait for it.
pub fn register(
    handle: usize,
    (rank, nranks): (usize, usize),
    comm_id: u64,
    key: String,
    channel: Option<Channel>,
) {
    let tracer = Tracer::from_env().for_rank(rank);
    tracer.init(handle, nranks, comm_id);
    let comm = Arc::new(Comm {
        handle,
        rank,
        nranks,
        stop: Stop::new(),
        exit: OnceLock::new(),
        state: Mutex::new(CommState {
            comm_id,
            key: key.clone(),
            channel: channel.clone(),
            agreement: Agreement::Ready(Peers::new(rank, nranks, None)),
            group: Group::default(),
            pending: Vec::new(),
            premul: HashMap::new(),
            doomed: Vec::new(),
            splits: 0,
            shrinks: 0,
            grouped: false,
            refused_in_group: false,
            failed: None,
            tracer,
            captured: false,
            watch: None,
        }),
    });
    if let Some(channel) = channel {
        let watch = super::watch::new(rank, nranks, settings().checks, &key);
        lock(&comm).agreement = Agreement::Setting(setup::start(&comm, channel, key));
        super::leaving::watch_process();
        if let Some(w) = watch {
            lock(&comm).watch = Some(w);
            super::watch::start(&comm);
        }
    }
    comms().insert(handle, comm);
}

/// After the real `ncclGetUniqueId`: the side channel's address goes into
/// the id.
pub fn unique_id_made(id: &mut [u8; 128]) {
    if !settings().checks.across_ranks() {
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
pub fn init_id(id: &mut [u8; 128]) -> Option<side::StoreAt> {
    match settings().checks {
        Checks::Off => None,
        Checks::Local => {
            side::unstamp(id);
            None
        }
        Checks::Watch | Checks::Full => side::unstamp(id),
    }
}

/// After a real `ncclCommInitRank*` that made `handle` (or began to: a
/// non-blocking init, or one inside a group).
pub fn initialised(
    handle: usize,
    rank: i32,
    nranks: i32,
    nccl_id: &[u8; 128],
    at: Option<side::StoreAt>,
) {
    let checks = settings().checks;
    if checks == Checks::Off || handle == 0 || rank < 0 || nranks <= 0 || rank >= nranks {
        return;
    }
    let comm_id = side::hash(nccl_id);
    if at.is_none() && nranks > 1 && checks.across_ranks() {
        say(&format!(
            "rankwise: rank {rank} of comm {handle:#x} (commId {comm_id:#x}): its ncclUniqueId was not made through the interposer, so it names no side channel: this communicator gets the local checks only"
        ));
    }
    register(
        handle,
        (rank as usize, nranks as usize),
        comm_id,
        format!("{comm_id:016x}"),
        at.map(Channel::Tcp),
    );
}

/// After a real `ncclCommSplit` of `parent` (every rank of the parent
/// calls it, so the parent's split count names the split on every rank).
/// `child` is 0 for `NCCL_SPLIT_NOCOLOR`; `rank_count` is the child's rank
/// and size as NCCL says, when it could say (a split that has not
/// finished yet is registered when it has: `children`).
pub fn split(parent: usize, color: i32, child: usize, rank_count: Option<(i32, i32)>) {
    let Some(p) = comm(parent) else { return };
    let (key, channel, comm_id) = {
        let mut s = lock(&p);
        s.splits += 1;
        let key = format!("{}.s{}c{color}", s.key, s.splits);
        let id = side::hash(&[s.comm_id.to_le_bytes(), s.splits.to_le_bytes()].concat());
        (key, s.channel.clone(), id ^ color as u64)
    };
    if child == 0 {
        return;
    }
    super::children::made(child, rank_count, comm_id, key, channel);
}

/// `ncclRedOpCreatePreMulSum` made `op` on `handle` with `scalar` (0 when
/// the scalar lives on the device, where the interposer cannot read it).
pub fn premul_made(handle: usize, op: i32, scalar: f64) {
    if let Some(s) = comm(handle) {
        lock(&s).premul.insert(op, scalar);
    }
}

/// `ncclRedOpDestroy(op)` on `handle`: true when NCCL must not destroy it
/// yet, because calls held in the open group use it (it is destroyed once
/// they reached NCCL, at the group's end).
pub fn premul_destroyed(handle: usize, op: i32) -> bool {
    let Some(s) = comm(handle) else {
        return false;
    };
    let mut s = lock(&s);
    s.premul.remove(&op);
    let held = s.pending.iter().any(|(raw, _)| raw.op == op);
    if held {
        s.doomed.push(op);
    }
    held
}

/// What `ncclCommGetAsyncError` adds for `handle`: the code of the error
/// the interposer failed it with, if it did (a framework that polls it,
/// as PyTorch's watchdog does, learns of the failure there).
pub fn async_error(handle: usize) -> Option<i32> {
    let c = comm(handle)?;
    let s = lock(&c);
    s.failed.as_ref().map(super::errors::code_of)
}
