//! The communicators this process made through the interposer, by handle:
//! each one's group state, its agreement with its peers
//! (`rankwise::agreement::Peers`, over the store its `ncclUniqueId` named),
//! its PreMulSum ops, its trace, and how it failed. Init, split, destroy
//! and abort come through here.

use super::settings::{Checks, say, settings};
use crate::side;
use rankwise::agreement::{Link, Peers};
use rankwise::core::{Error, Group, RawCall};
use rankwise::trace::{RankTracer, Tracer};
use rankwise::transport::store::{Client, SideChannel};
use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

pub struct CommState {
    pub handle: usize,
    pub rank: usize,
    pub nranks: usize,
    pub comm_id: u64,
    /// the store its ranks agree through, and its key (None: the local
    /// checks only); a split's children use them too
    pub store: Option<side::StoreAt>,
    pub peers: Peers,
    pub group: Group,
    /// the calls of the queued launch, as made, in order: what NCCL gets
    pub pending: Vec<(RawCall, usize)>,
    pub premul: HashMap<i32, f64>,
    pub splits: u64,
    /// this communicator's Group was started for the thread's open group
    pub grouped: bool,
    /// a call of the open group was refused (and said so) already
    pub refused_in_group: bool,
    pub failed: Option<Error>,
    pub tracer: RankTracer,
    /// what `ncclGetLastError` says after the interposer refused a call
    pub last_error: Option<std::ffi::CString>,
}

pub type Shared = Arc<Mutex<CommState>>;

fn comms() -> MutexGuard<'static, HashMap<usize, Shared>> {
    static C: OnceLock<Mutex<HashMap<usize, Shared>>> = OnceLock::new();
    C.get_or_init(Default::default)
        .lock()
        .unwrap_or_else(|p| p.into_inner())
}

pub fn comm(handle: usize) -> Option<Shared> {
    comms().get(&handle).cloned()
}

pub fn lock(s: &Shared) -> MutexGuard<'_, CommState> {
    s.lock().unwrap_or_else(|p| p.into_inner())
}

/// The store at `at`, as owner `owner`: itself when this process serves
/// it, else a connection that proved its key.
fn connect(at: &side::StoreAt, owner: usize) -> Result<Arc<dyn SideChannel>, String> {
    if let Some(store) = side::served_here(at) {
        return Ok(store);
    }
    let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
    Client::connect(at.addr, &at.key, owner, deadline)
        .map(|c| Arc::new(c) as Arc<dyn SideChannel>)
        .map_err(|e| e.message)
}

/// The store owners of the ranks of the communicator named `key`: the
/// store marks ranks finished by owner number, and communicators share a
/// store, so each communicator's ranks get numbers of their own. A
/// connection proves one of them and speaks for it only.
fn owners(key: &str, nranks: usize) -> Vec<usize> {
    let base = side::hash(key.as_bytes()) as u32;
    (0..nranks)
        .map(|r| base.wrapping_add(r as u32) as usize)
        .collect()
}

/// The link of rank `me` of the communicator named `key` through `chan`;
/// the lane is set up here when every rank is on this host.
fn link(chan: Arc<dyn SideChannel>, key: String, me: usize, nranks: usize) -> Link {
    let owners = owners(&key, nranks);
    let mut link = Link::new(chan, key, owners);
    let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
    link.join_lane(me, settings().shm, deadline);
    link
}

fn register(
    handle: usize,
    rank: usize,
    nranks: usize,
    comm_id: u64,
    key: String,
    at: Option<side::StoreAt>,
) {
    let link = at.as_ref().and_then(|at| {
        match connect(at, owners(&key, nranks)[rank]) {
            Ok(chan) => Some(link(chan, key, rank, nranks)),
            Err(e) => {
                say(&format!(
                    "rankwise: rank {rank} of comm {handle:#x}: cannot reach the side channel at {} ({e}): this communicator gets the local checks only",
                    at.addr
                ));
                None
            }
        }
    });
    let store = link.as_ref().and(at);
    let tracer = Tracer::from_env().for_rank(rank);
    tracer.init(handle, nranks, comm_id);
    if let (Some(l), Some(at)) = (&link, &store) {
        let through = match l.lane {
            Some(_) => "shared memory (every rank is on this host)".to_string(),
            None => format!("the store at {}", at.addr),
        };
        tracer.init_info(&format!(
            "rankwise: comm {handle:#x} rank {rank} agrees with its peers through {through}"
        ));
    }
    let state = CommState {
        handle,
        rank,
        nranks,
        comm_id,
        store,
        peers: Peers::new(rank, nranks, link),
        group: Group::default(),
        pending: Vec::new(),
        premul: HashMap::new(),
        splits: 0,
        grouped: false,
        refused_in_group: false,
        failed: None,
        tracer,
        last_error: None,
    };
    comms().insert(handle, Arc::new(Mutex::new(state)));
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
pub fn init_id(id: &mut [u8; 128]) -> Option<side::StoreAt> {
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
    at: Option<side::StoreAt>,
) {
    let checks = settings().checks;
    if checks == Checks::Off || handle == 0 || rank < 0 || nranks <= 0 || rank >= nranks {
        return;
    }
    let comm_id = side::hash(nccl_id);
    if at.is_none() && nranks > 1 && checks == Checks::Full {
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
        at,
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
            .peers
            .link()
            .map(|l| format!("{}.s{}c{color}", l.key, p.splits));
        let id = side::hash(&[p.comm_id.to_le_bytes(), p.splits.to_le_bytes()].concat());
        (key, p.store.clone(), id ^ color as u64)
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
    let why = s
        .failed
        .as_ref()
        .map(|e| e.to_string())
        .or_else(|| abort.then(|| format!("rank {} called ncclCommAbort", s.rank)));
    let _ = s.peers.leave(why.as_deref());
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
