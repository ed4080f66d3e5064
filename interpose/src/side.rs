//! The side channel across a communicator's ranks: rankwise's key-value
//! store ([`rankwise::transport::store`]), served over TCP by the process that
//! made the communicator's `ncclUniqueId`, and found by every rank from the
//! id itself.
//!
//! Why the id: every NCCL program already carries the id from the rank that
//! made it to every rank of the communicator (over MPI, a TCPStore, a file,
//! JAX's coordinator), on any number of hosts, and the interposer sees it at
//! both ends (`ncclGetUniqueId` and `ncclCommInitRank*`). So nothing else
//! has to be configured or launched. NCCL's id holds its bootstrap handle
//! (a magic number and the root's socket address) in its first bytes and
//! zeros after; `ncclGetUniqueId` here starts a store on the address NCCL's
//! bootstrap listens on (an ephemeral port) and writes that address into
//! the id's last 32 bytes and the store's key (32 random bytes drawn by
//! this process) into the 32 before them, and `ncclCommInitRank*` reads
//! both and restores the zeros before NCCL sees the id, so NCCL gets
//! exactly the id it made. Only holders of the id, the job's ranks, hold
//! the key, and the store serves no one else. A communicator split from
//! another (`ncclCommSplit`) uses its parent's store and key under a name
//! of its own. An id whose tail is not zero, or one made
//! without the interposer, carries no address: that communicator gets the
//! local checks only, and a line on stderr says so.

use rankwise::transport::store::{Hub, Key, Store};
use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::{Mutex, OnceLock};

const MARK: &[u8; 4] = b"rkw1";
/// Where the store's address goes in the id.
const AT: usize = 96;
/// From here on NCCL's id is zeros (its handle is 36 bytes or so); the
/// store's key goes here.
const FREE: usize = 64;

/// A store a communicator's id names: where it listens, and its key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StoreAt {
    pub addr: SocketAddr,
    pub key: Key,
}

/// A store this process serves, and its key.
struct Served {
    hub: Hub,
    key: Key,
}

/// The stores this process serves, one per address.
fn hubs() -> &'static Mutex<HashMap<IpAddr, Served>> {
    static H: OnceLock<Mutex<HashMap<IpAddr, Served>>> = OnceLock::new();
    H.get_or_init(Default::default)
}

/// At exit, a process that serves a store waits (30 s at most) until the
/// ranks of other processes have closed their connections, so a rank 0
/// that finishes first does not take the others' side channel with it.
extern "C" fn linger() {
    crate::hooks::forget_all();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let open: usize = hubs()
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|s| s.hub.open_connections())
            .sum();
        if open == 0 || std::time::Instant::now() >= deadline {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
}

/// The store at `at` when this process serves it: its own ranks use it
/// directly rather than through a socket to themselves.
pub fn served_here(at: &StoreAt) -> Option<std::sync::Arc<Store>> {
    let hubs = hubs().lock().unwrap_or_else(|p| p.into_inner());
    let s = hubs
        .get(&at.addr.ip())
        .filter(|s| s.hub.addr() == at.addr && s.key == at.key)?;
    Some(s.hub.store().clone())
}

/// Whether this process serves a store (it made a unique id).
pub fn serves() -> bool {
    !hubs().lock().unwrap_or_else(|p| p.into_inner()).is_empty()
}

/// The address NCCL's bootstrap handle names (`sockaddr_in` or
/// `sockaddr_in6` after the 8-byte magic), when it is a specific one.
pub fn nccl_address(id: &[u8; 128]) -> Option<IpAddr> {
    let family = u16::from_le_bytes([id[8], id[9]]);
    let ip = match family as i32 {
        libc::AF_INET => IpAddr::V4(Ipv4Addr::new(id[12], id[13], id[14], id[15])),
        libc::AF_INET6 => {
            let b: [u8; 16] = id[16..32].try_into().ok()?;
            IpAddr::V6(Ipv6Addr::from(b))
        }
        _ => return None,
    };
    (!ip.is_unspecified()).then_some(ip)
}

/// Starts (or reuses) this process's store and writes its key and address
/// into `id`; the address, or why the id cannot carry one.
pub fn stamp(id: &mut [u8; 128]) -> Result<SocketAddr, String> {
    if id[FREE..].iter().any(|b| *b != 0) {
        return Err(
            "its last 64 bytes are not zero, so they cannot carry the side channel's address"
                .into(),
        );
    }
    let ip = nccl_address(id).unwrap_or(IpAddr::V4(Ipv4Addr::LOCALHOST));
    let mut hubs = hubs().lock().unwrap_or_else(|p| p.into_inner());
    let (addr, key) = match hubs.get(&ip) {
        Some(s) => (s.hub.addr(), s.key.clone()),
        None => {
            let key = Key::random().map_err(|e| e.message)?;
            let hub = Hub::start_on(ip, key.clone()).map_err(|e| e.message)?;
            let a = hub.addr();
            hubs.insert(
                ip,
                Served {
                    hub,
                    key: key.clone(),
                },
            );
            crate::real::at_exit(linger);
            (a, key)
        }
    };
    id[FREE..AT].copy_from_slice(key.as_bytes());
    id[AT..AT + 4].copy_from_slice(MARK);
    let (family, octets): (u8, [u8; 16]) = match addr.ip() {
        IpAddr::V4(v4) => {
            let mut o = [0; 16];
            o[..4].copy_from_slice(&v4.octets());
            (4, o)
        }
        IpAddr::V6(v6) => (6, v6.octets()),
    };
    id[AT + 4] = family;
    id[AT + 6..AT + 8].copy_from_slice(&addr.port().to_le_bytes());
    id[AT + 8..AT + 24].copy_from_slice(&octets);
    Ok(addr)
}

/// The store `stamp` wrote (address and key), if any; the id is restored
/// to NCCL's own bytes either way.
pub fn unstamp(id: &mut [u8; 128]) -> Option<StoreAt> {
    if &id[AT..AT + 4] != MARK {
        return None;
    }
    let port = u16::from_le_bytes([id[AT + 6], id[AT + 7]]);
    let o: [u8; 16] = id[AT + 8..AT + 24].try_into().ok()?;
    let key: [u8; 32] = id[FREE..AT].try_into().ok()?;
    let ip = match id[AT + 4] {
        4 => IpAddr::V4(Ipv4Addr::new(o[0], o[1], o[2], o[3])),
        6 => IpAddr::V6(Ipv6Addr::from(o)),
        _ => return None,
    };
    id[FREE..].fill(0);
    Some(StoreAt {
        addr: SocketAddr::new(ip, port),
        key: Key::from_bytes(key),
    })
}

/// Communicator ids as rankwise's trace prints them (FNV-1a).
pub use rankwise::core::wire::fnv1a as hash;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_stamped_id_gives_back_nccls_bytes_and_the_address() {
        let mut id = [0u8; 128];
        id[..8].copy_from_slice(&0x1234_5678_9abc_def0u64.to_le_bytes());
        id[8..10].copy_from_slice(&(libc::AF_INET as u16).to_le_bytes());
        id[10..12].copy_from_slice(&[0x9c, 0x40]);
        id[12..16].copy_from_slice(&[127, 0, 0, 1]);
        let nccls = id;
        assert_eq!(nccl_address(&id), Some(IpAddr::V4(Ipv4Addr::LOCALHOST)));
        let addr = stamp(&mut id).unwrap();
        assert_ne!(id, nccls);
        assert!(id[FREE..AT].iter().any(|b| *b != 0), "the key is in the id");
        let at = unstamp(&mut id).unwrap();
        assert_eq!(at.addr, addr);
        assert_eq!(id, nccls, "NCCL gets its own id back");
        assert_eq!(unstamp(&mut id), None);
        // the key is the store's: this process's ranks use the store
        // itself, and a wrong key finds nothing
        assert!(served_here(&at).is_some());
        let wrong = StoreAt {
            key: Key::from_bytes([0; 32]),
            ..at.clone()
        };
        assert!(served_here(&wrong).is_none());
        // a second id of this process names the same store and key
        let mut again = nccls;
        assert_eq!(stamp(&mut again).unwrap(), addr);
        assert_eq!(unstamp(&mut again), Some(at));
        let mut used = nccls;
        used[100] = 1;
        assert!(stamp(&mut used).is_err());
    }
}
