//! A rank's connection to the [`Hub`](super::Hub): one request at a time,
//! each written whole and answered whole.

use super::codec::*;
use super::state::misused;
use super::{Item, Missing, Share, SideChannel};
use crate::core::{Error, ErrorKind, Result};
use std::io::{BufReader, BufWriter, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// A rank's connection to the [`Hub`](super::Hub).
pub struct Client {
    conn: Mutex<(BufReader<TcpStream>, BufWriter<TcpStream>)>,
    addr: SocketAddr,
}

impl Client {
    /// Connects to the hub at `addr`, retrying until `deadline` (the parent
    /// may still be starting).
    pub fn connect(addr: SocketAddr, deadline: Instant) -> Result<Client> {
        loop {
            match TcpStream::connect_timeout(&addr, Duration::from_secs(1)) {
                Ok(s) => {
                    let _ = s.set_nodelay(true);
                    let r = s.try_clone().map_err(|e| lost(addr, e))?;
                    return Ok(Client {
                        conn: Mutex::new((BufReader::new(r), BufWriter::new(s))),
                        addr,
                    });
                }
                Err(e) if Instant::now() >= deadline => return Err(lost(addr, e)),
                Err(_) => std::thread::sleep(Duration::from_millis(20)),
            }
        }
    }
    fn request<T>(
        &self,
        send: impl FnOnce(&mut BufWriter<TcpStream>) -> std::io::Result<()>,
        recv: impl FnOnce(&mut BufReader<TcpStream>) -> std::io::Result<T>,
    ) -> Result<T> {
        let mut conn = self.conn.lock().unwrap_or_else(|p| p.into_inner());
        let (r, w) = &mut *conn;
        send(w)
            .and_then(|()| w.flush())
            .and_then(|()| recv(r))
            .map_err(|e| lost(self.addr, e))
    }
}

fn lost(addr: SocketAddr, e: std::io::Error) -> Error {
    Error::new(
        ErrorKind::RemoteError,
        format!(
            "the ranks' side channel at {addr} is gone ({e}): the process that served it ended (the launcher, or under the interposer the process that made the ncclUniqueId)"
        ),
    )
}

fn expect_ok(r: &mut impl std::io::Read) -> std::io::Result<()> {
    match get_u8(r)? {
        OK => Ok(()),
        x => Err(unexpected(x)),
    }
}

impl SideChannel for Client {
    fn set(&self, key: &str, value: &[u8]) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[SET])?;
                put_bytes(w, key.as_bytes())?;
                put_bytes(w, value)
            },
            expect_ok,
        )
    }
    fn get(
        &self,
        key: &str,
        owner: usize,
        deadline: Instant,
    ) -> Result<std::result::Result<Vec<u8>, Missing>> {
        self.request(
            |w| {
                w.write_all(&[GET])?;
                put_bytes(w, key.as_bytes())?;
                put_u32(w, owner)?;
                w.write_all(&millis_until(deadline).to_le_bytes())
            },
            get_share,
        )
    }
    fn finish(&self, rank: usize, error: Option<&str>) -> Result<()> {
        self.request(
            |w| {
                w.write_all(&[FINISH])?;
                put_u32(w, rank)?;
                w.write_all(&[u8::from(error.is_some())])?;
                put_bytes(w, error.unwrap_or_default().as_bytes())
            },
            expect_ok,
        )
    }
    fn exchange(
        &self,
        items: &[Item<'_>],
        note: Option<(usize, &[u8])>,
        deadline: Instant,
    ) -> Result<Vec<Vec<Share>>> {
        let answer = self.request(
            |w| {
                w.write_all(&[EXCHANGE])?;
                w.write_all(&millis_until(deadline).to_le_bytes())?;
                match note {
                    None => w.write_all(&[0])?,
                    Some((owner, b)) => {
                        w.write_all(&[1])?;
                        put_u32(w, owner)?;
                        put_bytes(w, b)?;
                    }
                }
                put_u32(w, items.len())?;
                for it in items {
                    put_bytes(w, it.key.as_bytes())?;
                    put_u32(w, it.owners.len())?;
                    for o in it.owners {
                        put_u32(w, *o)?;
                    }
                    put_u32(w, it.me)?;
                    match it.value {
                        None => w.write_all(&[0])?,
                        Some(v) => {
                            w.write_all(&[1])?;
                            put_bytes(w, v)?;
                        }
                    }
                    w.write_all(&[read_code(it.read)])?;
                }
                Ok(())
            },
            |r| match get_u8(r)? {
                OK => {
                    let mut answers = Vec::with_capacity(items.len());
                    for _ in items {
                        let n = get_count(r)?;
                        answers.push(
                            (0..n)
                                .map(|_| get_share(r))
                                .collect::<std::io::Result<_>>()?,
                        );
                    }
                    Ok(Ok(answers))
                }
                ERROR => Ok(Err(get_string(r)?)),
                x => Err(unexpected(x)),
            },
        )?;
        answer.map_err(misused)
    }
    fn last_note(&self, owner: usize) -> Result<Option<Vec<u8>>> {
        self.request(
            |w| {
                w.write_all(&[LAST_NOTE])?;
                put_u32(w, owner)
            },
            |r| match get_u8(r)? {
                VALUE => Ok(Some(get_bytes(r)?)),
                NONE => Ok(None),
                x => Err(unexpected(x)),
            },
        )
    }
}
