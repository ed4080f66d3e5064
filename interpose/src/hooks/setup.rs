//! A communicator's agreement, set up on a thread of its own: the side
//! channel reached, each rank's owner id in the store, the shared-memory
//! lane joined when every rank is on this host. The init call returns at
//! once, so a program that initialises several ranks from one thread (in a
//! group, or with `ncclCommInitAll`) or a non-blocking communicator never
//! waits for it; the communicator's first launch does, without its lock and
//! for as long as its stop allows.

use super::comms::{Agreement, Comm, Shared, connect};
use super::settings::{say, settings};
use crate::side;
use rankwise::agreement::{Link, Peers};
use rankwise::core::{Error, ErrorKind};
use rankwise::transport::store::{SideChannel, Store};
use std::sync::Arc;
use std::sync::atomic::{Ordering, fence};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

/// Where a communicator's ranks agree.
#[derive(Clone)]
pub enum Channel {
    /// the store its `ncclUniqueId` named: its address and key
    Tcp(side::StoreAt),
    /// a store of this process's own, for ranks that are all its threads
    /// (`ncclCommInitAll`)
    Here(Arc<Store>),
}

impl Channel {
    /// The channel itself, as store owner `owner`: this process's store,
    /// or a connection.
    pub fn open(&self, owner: usize) -> Result<Arc<dyn SideChannel>, String> {
        match self {
            Channel::Tcp(at) => connect(at, owner),
            Channel::Here(store) => Ok(store.clone()),
        }
    }

    fn describe(&self) -> String {
        match self {
            Channel::Tcp(at) => format!("the store at {}", at.addr),
            Channel::Here(_) => "a store of this process (its ranks are its threads)".into(),
        }
    }
}

/// What a rank needs to tell its peers it left, whoever holds its
/// agreement: the channel, its owner id there, and where to open another
/// connection when a request in flight holds this one.
pub struct Exit {
    pub chan: Arc<dyn SideChannel>,
    pub owner: usize,
    pub channel: Channel,
}

/// A set-up under way: its link (None: this communicator gets the local
/// checks only) and the journal's line about it, once done.
pub struct Pending(Receiver<Made>);

/// Starts setting up rank `comm.rank`'s agreement on `channel` under the
/// name `key`.
pub fn start(comm: &Shared, channel: Channel, key: String) -> Pending {
    let (tx, rx) = mpsc::channel::<Made>();
    let c = comm.clone();
    let spawned = std::thread::Builder::new()
        .name("rankwise-setup".into())
        .spawn(move || {
            let _ = tx.send(set_up(&c, channel, key));
        });
    if spawned.is_err() {
        say(&format!(
            "rankwise: rank {} of comm {:#x}: no thread to set up its side channel: this communicator gets the local checks only",
            comm.rank, comm.handle
        ));
    }
    Pending(rx)
}

type Made = (Option<Link>, Option<String>);

/// The store's owner id of each rank of the communicator named `key`:
/// communicators share a store, and the store marks ranks finished by
/// owner id, so each communicator's ranks get ids of their own.
pub fn owners(key: &str, nranks: usize) -> Vec<usize> {
    let base = side::hash(key.as_bytes()) as u32;
    (0..nranks)
        .map(|r| base.wrapping_add(r as u32) as usize)
        .collect()
}

fn set_up(comm: &Comm, channel: Channel, key: String) -> Made {
    let (me, n, handle) = (comm.rank, comm.nranks, comm.handle);
    let owners = owners(&key, n);
    let chan = match channel.open(owners[me]) {
        Ok(c) => c,
        Err(e) => {
            say(&format!(
                "rankwise: rank {me} of comm {handle:#x}: cannot reach the side channel ({e}): this communicator gets the local checks only"
            ));
            return (None, None);
        }
    };
    let _ = comm.exit.set(Exit {
        chan: chan.clone(),
        owner: owners[me],
        channel: channel.clone(),
    });
    // pairs with the fence of a rank that leaves meanwhile: either it sees
    // the exit, or this sees its stop
    fence(Ordering::SeqCst);
    if let Some(why) = comm.stop.raised() {
        let _ = chan.finish(owners[me], Some(why));
        return (None, None);
    }
    let mut link = Link::new(chan, key, owners).with_stop(comm.stop.clone());
    let deadline = Instant::now() + settings().timeout.min(Duration::from_secs(30));
    link.join_lane(me, settings().shm, deadline);
    let through = match (&link.lane, &link.tier) {
        (Some(_), _) => "shared memory (every rank is on this host)".to_string(),
        (None, Some(t)) => format!(
            "shared memory on each of its {} hosts, and {} between their leaders",
            t.hosts().len(),
            channel.describe()
        ),
        (None, None) => channel.describe(),
    };
    let line =
        format!("rankwise: comm {handle:#x} rank {me} agrees with its peers through {through}");
    (Some(link), Some(line))
}

/// A launch's agreement, out of its communicator's state: at once when it
/// is ready, else once its set-up is done (waited for without the lock,
/// as long as the communicator's stop allows). The journal's line about
/// the set-up comes with it the first time.
pub fn ready(comm: &Comm, a: Agreement) -> Result<(Peers, Option<String>), Error> {
    let pending = match a {
        Agreement::Ready(p) => return Ok((p, None)),
        Agreement::Setting(pending) => pending,
        Agreement::Out => {
            return Err(Error::new(
                ErrorKind::InvalidUsage,
                "another thread's call on this communicator is waiting for its peers: NCCL does not allow concurrent calls on one communicator",
            ));
        }
    };
    let watch = comm.stop.watch();
    loop {
        match pending.0.recv_timeout(Duration::from_millis(2)) {
            Ok((link, line)) => return Ok((Peers::new(comm.rank, comm.nranks, link), line)),
            Err(RecvTimeoutError::Disconnected) => {
                return Ok((Peers::new(comm.rank, comm.nranks, None), None));
            }
            Err(RecvTimeoutError::Timeout) => {
                if let Some(e) = watch.stopped() {
                    return Err(e);
                }
            }
        }
    }
}
