//! The store's wire format. A request is one op byte and its fields;
//! integers are little endian, strings and byte strings a u32 length and
//! the bytes, an owner a u32. EXCHANGE: the wait in ms (u64), the note (a
//! flag byte, then owner and bytes), the item count (u32), then per item
//! its key, its owners (a count, then each), its party (u32), its value (a
//! flag byte, then the bytes) and its read (0 now, 1 later, 2 never). Its
//! answer: OK and per item a share count (u32) and the shares, or ERROR and
//! why. Every length and count a peer sends is bounded before anything is
//! allocated for it.

use super::{Missing, Read, Share};
use std::io::Write;
use std::time::{Duration, Instant};

pub(super) const SET: u8 = 1;
pub(super) const GET: u8 = 2;
pub(super) const FINISH: u8 = 3;
pub(super) const EXCHANGE: u8 = 4;
pub(super) const LAST_NOTE: u8 = 5;
pub(super) const OK: u8 = 0;
pub(super) const VALUE: u8 = 1;
pub(super) const TIMEOUT: u8 = 2;
pub(super) const FINISHED: u8 = 3;
pub(super) const NONE: u8 = 4;
pub(super) const ERROR: u8 = 5;
/// Longest key or value the hub accepts (a launch's posts are a few KiB).
pub(super) const MAX_FIELD: usize = 64 << 20;
/// Most items or parties in one request the hub accepts.
pub(super) const MAX_COUNT: usize = 1 << 20;

pub(super) fn put_bytes(w: &mut impl Write, b: &[u8]) -> std::io::Result<()> {
    let len = u32::try_from(b.len()).map_err(|_| std::io::Error::other("field too long"))?;
    w.write_all(&len.to_le_bytes())?;
    w.write_all(b)
}
pub(super) fn put_u32(w: &mut impl Write, x: usize) -> std::io::Result<()> {
    w.write_all(&(x as u32).to_le_bytes())
}
pub(super) fn get_u32(r: &mut impl std::io::Read) -> std::io::Result<u32> {
    let mut b = [0u8; 4];
    r.read_exact(&mut b)?;
    Ok(u32::from_le_bytes(b))
}
pub(super) fn get_count(r: &mut impl std::io::Read) -> std::io::Result<usize> {
    let n = get_u32(r)? as usize;
    if n > MAX_COUNT {
        return Err(std::io::Error::other(format!(
            "a count of {n} is more than the hub accepts ({MAX_COUNT})"
        )));
    }
    Ok(n)
}
pub(super) fn get_u64(r: &mut impl std::io::Read) -> std::io::Result<u64> {
    let mut b = [0u8; 8];
    r.read_exact(&mut b)?;
    Ok(u64::from_le_bytes(b))
}
pub(super) fn get_u8(r: &mut impl std::io::Read) -> std::io::Result<u8> {
    let mut b = [0u8; 1];
    r.read_exact(&mut b)?;
    Ok(b[0])
}
pub(super) fn get_bytes(r: &mut impl std::io::Read) -> std::io::Result<Vec<u8>> {
    let len = get_u32(r)? as usize;
    if len > MAX_FIELD {
        return Err(std::io::Error::other(format!(
            "a field of {len} bytes is longer than the hub accepts ({MAX_FIELD})"
        )));
    }
    let mut v = vec![0u8; len];
    r.read_exact(&mut v)?;
    Ok(v)
}
pub(super) fn get_string(r: &mut impl std::io::Read) -> std::io::Result<String> {
    String::from_utf8(get_bytes(r)?).map_err(std::io::Error::other)
}
pub(super) fn put_share(w: &mut impl Write, s: &Share) -> std::io::Result<()> {
    match s {
        Ok(v) => {
            w.write_all(&[VALUE])?;
            put_bytes(w, v)
        }
        Err(Missing::Timeout) => w.write_all(&[TIMEOUT]),
        Err(Missing::Finished { reason }) => {
            w.write_all(&[FINISHED, u8::from(reason.is_some())])?;
            put_bytes(w, reason.as_deref().unwrap_or_default().as_bytes())
        }
    }
}
pub(super) fn get_share(r: &mut impl std::io::Read) -> std::io::Result<Share> {
    match get_u8(r)? {
        VALUE => Ok(Ok(get_bytes(r)?)),
        TIMEOUT => Ok(Err(Missing::Timeout)),
        FINISHED => {
            let failed = get_u8(r)? != 0;
            let reason = get_string(r)?;
            Ok(Err(Missing::Finished {
                reason: failed.then_some(reason),
            }))
        }
        x => Err(unexpected(x)),
    }
}
pub(super) fn unexpected(x: u8) -> std::io::Error {
    std::io::Error::other(format!("unexpected answer {x}"))
}
pub(super) fn read_code(r: Read) -> u8 {
    match r {
        Read::Now => 0,
        Read::Later => 1,
        Read::Never => 2,
    }
}
pub(super) fn read_of(code: u8) -> std::io::Result<Read> {
    match code {
        0 => Ok(Read::Now),
        1 => Ok(Read::Later),
        2 => Ok(Read::Never),
        x => Err(std::io::Error::other(format!("unknown read {x}"))),
    }
}
/// A deadline `ms` from now, capped at a year.
pub(super) fn deadline_in(ms: u64) -> Instant {
    Instant::now()
        .checked_add(Duration::from_millis(ms))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365))
}
pub(super) fn millis_until(deadline: Instant) -> u64 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u64::MAX as u128) as u64
}

/// An exchange item as it arrives at the hub.
pub(super) struct OwnedItem {
    pub(super) key: String,
    pub(super) owners: Vec<usize>,
    pub(super) me: usize,
    pub(super) value: Option<Vec<u8>>,
    pub(super) read: Read,
}

pub(super) fn get_item(r: &mut impl std::io::Read) -> std::io::Result<OwnedItem> {
    let key = get_string(r)?;
    let n = get_count(r)?;
    let owners = (0..n)
        .map(|_| get_u32(r).map(|o| o as usize))
        .collect::<std::io::Result<Vec<_>>>()?;
    let me = get_u32(r)? as usize;
    let value = match get_u8(r)? {
        0 => None,
        _ => Some(get_bytes(r)?),
    };
    let read = read_of(get_u8(r)?)?;
    Ok(OwnedItem {
        key,
        owners,
        me,
        value,
        read,
    })
}
