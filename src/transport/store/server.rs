//! The store served over TCP: one thread accepts, one thread serves each
//! connection, answering its requests in order until it closes.

use super::Item;
use super::codec::*;
use super::state::Store;
use crate::core::{Error, ErrorKind, Result};
use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

/// The store served over TCP (127.0.0.1 unless [`Hub::start_on`] says
/// otherwise), one thread per connection. It lives as long as the process
/// that started it (the launcher's parent, or the interposed process that
/// made a communicator's ncclUniqueId).
pub struct Hub {
    addr: SocketAddr,
    store: Arc<Store>,
    /// connections being served now
    open: Arc<std::sync::atomic::AtomicUsize>,
}

impl Hub {
    /// Listens on an ephemeral port of 127.0.0.1.
    pub fn start() -> Result<Hub> {
        Hub::start_on(std::net::Ipv4Addr::LOCALHOST.into())
    }

    /// Listens on an ephemeral port of `ip` (the interposer serves ranks on
    /// other hosts from the address NCCL's own bootstrap listens on).
    pub fn start_on(ip: std::net::IpAddr) -> Result<Hub> {
        let listener = TcpListener::bind((ip, 0)).map_err(|e| {
            Error::new(
                ErrorKind::System,
                format!("cannot listen on {ip} for the ranks' side channel: {e}"),
            )
        })?;
        let addr = listener
            .local_addr()
            .map_err(|e| Error::new(ErrorKind::System, format!("side channel address: {e}")))?;
        let store = Store::new();
        let served = store.clone();
        let open = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = open.clone();
        std::thread::Builder::new()
            .name("rankwise-hub".into())
            .spawn(move || {
                use std::sync::atomic::Ordering::SeqCst;
                for conn in listener.incoming() {
                    let Ok(conn) = conn else { continue };
                    let store = served.clone();
                    let open = counted.clone();
                    open.fetch_add(1, SeqCst);
                    // a connection that cannot get a thread is dropped: its rank
                    // sees the closed connection as an error
                    let gone = open.clone();
                    let spawned = std::thread::Builder::new()
                        .name("rankwise-hub-conn".into())
                        .spawn(move || {
                            serve(conn, &store);
                            gone.fetch_sub(1, SeqCst);
                        });
                    if spawned.is_err() {
                        open.fetch_sub(1, SeqCst);
                    }
                }
            })
            .map_err(|e| {
                Error::new(
                    ErrorKind::System,
                    format!("cannot start the side channel's thread: {e}"),
                )
            })?;
        Ok(Hub { addr, store, open })
    }
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }
    /// Connections being served now: a process that serves ranks of other
    /// processes waits for this to reach 0 before it exits.
    pub fn open_connections(&self) -> usize {
        self.open.load(std::sync::atomic::Ordering::SeqCst)
    }
    pub fn store(&self) -> &Arc<Store> {
        &self.store
    }
}

/// Answers one connection's requests until it closes.
fn serve(conn: TcpStream, store: &Store) {
    let _ = conn.set_nodelay(true);
    let Ok(read_half) = conn.try_clone() else {
        return;
    };
    let mut r = BufReader::new(read_half);
    let mut w = BufWriter::new(conn);
    let answer =
        |r: &mut BufReader<TcpStream>, w: &mut BufWriter<TcpStream>| -> std::io::Result<()> {
            match get_u8(r)? {
                SET => {
                    let key = get_string(r)?;
                    let value = get_bytes(r)?;
                    store.set_value(&key, &value);
                    w.write_all(&[OK])?;
                }
                GET => {
                    let key = get_string(r)?;
                    let owner = get_u32(r)? as usize;
                    let deadline = deadline_in(get_u64(r)?);
                    put_share(w, &store.wait(&key, owner, deadline))?;
                }
                FINISH => {
                    let rank = get_u32(r)? as usize;
                    let failed = get_u8(r)? != 0;
                    let reason = get_string(r)?;
                    store.mark_finished(rank, failed.then_some(reason.as_str()));
                    w.write_all(&[OK])?;
                }
                EXCHANGE => {
                    let deadline = deadline_in(get_u64(r)?);
                    let note = match get_u8(r)? {
                        0 => None,
                        _ => Some((get_u32(r)? as usize, get_bytes(r)?)),
                    };
                    let n = get_count(r)?;
                    let owned = (0..n)
                        .map(|_| get_item(r))
                        .collect::<std::io::Result<Vec<_>>>()?;
                    let items: Vec<Item<'_>> = owned
                        .iter()
                        .map(|o| Item {
                            key: &o.key,
                            owners: &o.owners,
                            me: o.me,
                            value: o.value.as_deref(),
                            read: o.read,
                        })
                        .collect();
                    let note = note.as_ref().map(|(o, b)| (*o, b.as_slice()));
                    match store.run_exchange(&items, note, deadline) {
                        Ok(answers) => {
                            w.write_all(&[OK])?;
                            for shares in &answers {
                                put_u32(w, shares.len())?;
                                for s in shares {
                                    put_share(w, s)?;
                                }
                            }
                        }
                        Err(why) => {
                            w.write_all(&[ERROR])?;
                            put_bytes(w, why.as_bytes())?;
                        }
                    }
                }
                LAST_NOTE => {
                    let owner = get_u32(r)? as usize;
                    match store.note_of(owner) {
                        Some(b) => {
                            w.write_all(&[VALUE])?;
                            put_bytes(w, &b)?;
                        }
                        None => w.write_all(&[NONE])?,
                    }
                }
                op => return Err(std::io::Error::other(format!("unknown request {op}"))),
            }
            w.flush()
        };
    while answer(&mut r, &mut w).is_ok() {}
}
