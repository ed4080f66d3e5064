//! The store's wire format after the handshake ([`super::auth`]), as pure
//! functions over byte slices: nothing here touches a socket, so every
//! decoder can be fed arbitrary bytes.
//!
//! Every message is a frame: its length (u32, little endian) and that many
//! bytes. A request is one op byte and its fields; integers are little
//! endian, strings and byte strings a u32 length and the bytes, an owner a
//! u32. SET: key, value. GET: key, the owner whose end ends the wait, the
//! wait in ms (u64). FINISH: owner, a flag byte, the reason. EXCHANGE: the
//! wait in ms, the note (a flag byte, then owner and bytes), the item
//! count (u32), then per item its key, its owners (a count, then each),
//! its party (u32), its value (a flag byte, then the bytes) and its read
//! (0 now, 1 later, 2 never). LAST_NOTE: owner.
//!
//! Answers: OK; a share (VALUE and bytes, TIMEOUT, or FINISHED, a flag and
//! the reason); an exchange's, OK and per item a share count and the
//! shares; a note, VALUE and bytes or NONE; and to any request ERROR and
//! why it was refused.
//!
//! Bounds: a request frame is at most [`MAX_FRAME`] bytes, an answer
//! [`MAX_ANSWER`]; keys, notes and reasons have bounds of their own; a
//! count is checked against its bound and against the bytes left before
//! anything is allocated for it, so what a decoder allocates is at most a
//! small multiple of the bytes it was given.

use super::{Item, Missing, Read, Share, Wait};
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
pub(super) const CYCLE: u8 = 6;

/// Longest request the store reads (a launch's posts are a few KiB).
pub const MAX_FRAME: usize = 16 << 20;
/// Longest answer the store writes and a client reads.
pub const MAX_ANSWER: usize = 64 << 20;
/// Longest key.
pub const MAX_KEY: usize = 4 << 10;
/// Longest note, and longest reason a finished owner gives.
pub const MAX_NOTE: usize = 64 << 10;
/// Most items in one exchange request.
pub const MAX_ITEMS: usize = 1 << 16;
/// Most parties of one exchange.
pub const MAX_PARTIES: usize = 1 << 20;
/// Steps of a wait-for cycle in an answer.
pub const MAX_CYCLE: usize = 1 << 12;
/// Bytes of a frame's length.
pub(super) const HEAD: usize = 4;

/// A request as the store serves it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Request {
    Set {
        key: String,
        value: Vec<u8>,
    },
    Get {
        key: String,
        owner: usize,
        wait_ms: u64,
    },
    Finish {
        owner: usize,
        reason: Option<String>,
    },
    Exchange {
        wait_ms: u64,
        note: Option<(usize, Vec<u8>)>,
        items: Vec<OwnedItem>,
    },
    LastNote {
        owner: usize,
    },
}

/// An exchange item as it arrives at the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct OwnedItem {
    pub(super) key: String,
    pub(super) owners: Vec<usize>,
    pub(super) me: usize,
    pub(super) value: Option<Vec<u8>>,
    pub(super) read: Read,
}

impl OwnedItem {
    pub(super) fn view(&self) -> Item<'_> {
        Item {
            key: &self.key,
            owners: &self.owners,
            me: self.me,
            value: self.value.as_deref(),
            read: self.read,
        }
    }
}

/// The body length a frame's head announces, when it is at most `max`.
pub(super) fn frame_len(head: &[u8], max: usize) -> Result<usize, String> {
    let n = u32::from_le_bytes(head[..HEAD].try_into().expect("a head of 4 bytes")) as usize;
    if n > max {
        return Err(format!("a frame of {n} bytes, more than the {max} allowed"));
    }
    Ok(n)
}

/// Reads fields off a frame's body, every length checked first.
struct Cursor<'a> {
    b: &'a [u8],
}

impl<'a> Cursor<'a> {
    fn take(&mut self, n: usize, what: &str) -> Result<&'a [u8], String> {
        if n > self.b.len() {
            return Err(format!(
                "{what}: {n} bytes announced, {} left in the frame",
                self.b.len()
            ));
        }
        let (head, rest) = self.b.split_at(n);
        self.b = rest;
        Ok(head)
    }
    fn u8(&mut self, what: &str) -> Result<u8, String> {
        Ok(self.take(1, what)?[0])
    }
    fn u32(&mut self, what: &str) -> Result<u32, String> {
        Ok(u32::from_le_bytes(
            self.take(4, what)?.try_into().expect("4"),
        ))
    }
    fn u64(&mut self, what: &str) -> Result<u64, String> {
        Ok(u64::from_le_bytes(
            self.take(8, what)?.try_into().expect("8"),
        ))
    }
    fn bytes(&mut self, max: usize, what: &str) -> Result<&'a [u8], String> {
        let n = self.u32(what)? as usize;
        if n > max {
            return Err(format!("{what} of {n} bytes, more than the {max} allowed"));
        }
        self.take(n, what)
    }
    fn string(&mut self, max: usize, what: &str) -> Result<String, String> {
        let b = self.bytes(max, what)?;
        std::str::from_utf8(b)
            .map(str::to_string)
            .map_err(|_| format!("{what} is not UTF-8"))
    }
    /// A count of things at least `each` bytes long, at most `max` and no
    /// more than the bytes left can hold.
    fn count(&mut self, max: usize, each: usize, what: &str) -> Result<usize, String> {
        let n = self.u32(what)? as usize;
        if n > max || n.saturating_mul(each) > self.b.len() {
            return Err(format!(
                "{n} {what}: at most {max}, and {} bytes left hold at most {}",
                self.b.len(),
                self.b.len() / each.max(1)
            ));
        }
        Ok(n)
    }
    fn end(&self) -> Result<(), String> {
        match self.b.len() {
            0 => Ok(()),
            n => Err(format!("{n} bytes after the request's last field")),
        }
    }
}

/// A request from its frame's body, or what is wrong with it.
pub(super) fn decode_request(body: &[u8]) -> Result<Request, String> {
    let mut c = Cursor { b: body };
    let r = match c.u8("the op")? {
        SET => Request::Set {
            key: c.string(MAX_KEY, "a key")?,
            value: c.bytes(MAX_FRAME, "a value")?.to_vec(),
        },
        GET => Request::Get {
            key: c.string(MAX_KEY, "a key")?,
            owner: c.u32("an owner")? as usize,
            wait_ms: c.u64("a wait")?,
        },
        FINISH => {
            let owner = c.u32("an owner")? as usize;
            let failed = c.u8("a flag")? != 0;
            let reason = c.string(MAX_NOTE, "a reason")?;
            Request::Finish {
                owner,
                reason: failed.then_some(reason),
            }
        }
        EXCHANGE => {
            let wait_ms = c.u64("a wait")?;
            let note = match c.u8("a flag")? {
                0 => None,
                _ => Some((
                    c.u32("an owner")? as usize,
                    c.bytes(MAX_NOTE, "a note")?.to_vec(),
                )),
            };
            // an item is at least a key's length, a count, a party, a
            // flag and a read: 14 bytes
            let n = c.count(MAX_ITEMS, 14, "items")?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                items.push(decode_item(&mut c)?);
            }
            Request::Exchange {
                wait_ms,
                note,
                items,
            }
        }
        LAST_NOTE => Request::LastNote {
            owner: c.u32("an owner")? as usize,
        },
        op => return Err(format!("unknown request {op}")),
    };
    c.end()?;
    Ok(r)
}

fn decode_item(c: &mut Cursor<'_>) -> Result<OwnedItem, String> {
    let key = c.string(MAX_KEY, "a key")?;
    let n = c.count(MAX_PARTIES, 4, "parties")?;
    let mut owners = Vec::with_capacity(n);
    for _ in 0..n {
        owners.push(c.u32("an owner")? as usize);
    }
    let me = c.u32("a party")? as usize;
    let value = match c.u8("a flag")? {
        0 => None,
        _ => Some(c.bytes(MAX_FRAME, "a value")?.to_vec()),
    };
    let read = match c.u8("a read")? {
        0 => Read::Now,
        1 => Read::Later,
        2 => Read::Never,
        x => return Err(format!("unknown read {x}")),
    };
    Ok(OwnedItem {
        key,
        owners,
        me,
        value,
        read,
    })
}

// ---------------------------------------------------------------- writing

/// Starts a frame in `out` (cleared): its head, filled in by [`seal`].
pub(super) fn begin(out: &mut Vec<u8>) {
    out.clear();
    out.extend_from_slice(&[0; HEAD]);
}

/// Writes the frame's length into its head; an error when it is more
/// than `max`.
pub(super) fn seal(out: &mut [u8], max: usize) -> Result<(), String> {
    let n = out.len() - HEAD;
    if n > max {
        return Err(format!(
            "a message of {n} bytes, more than the side channel takes ({max})"
        ));
    }
    out[..HEAD].copy_from_slice(&(n as u32).to_le_bytes());
    Ok(())
}

pub(super) fn put_u32(out: &mut Vec<u8>, x: usize) {
    out.extend_from_slice(&(x as u32).to_le_bytes());
}
pub(super) fn put_bytes(out: &mut Vec<u8>, b: &[u8]) {
    put_u32(out, b.len());
    out.extend_from_slice(b);
}

pub(super) fn put_set(out: &mut Vec<u8>, key: &str, value: &[u8]) {
    out.push(SET);
    put_bytes(out, key.as_bytes());
    put_bytes(out, value);
}
pub(super) fn put_get(out: &mut Vec<u8>, key: &str, owner: usize, deadline: Instant) {
    out.push(GET);
    put_bytes(out, key.as_bytes());
    put_u32(out, owner);
    out.extend_from_slice(&millis_until(deadline).to_le_bytes());
}
pub(super) fn put_finish(out: &mut Vec<u8>, owner: usize, reason: Option<&str>) {
    out.push(FINISH);
    put_u32(out, owner);
    out.push(u8::from(reason.is_some()));
    put_bytes(out, reason.unwrap_or_default().as_bytes());
}
pub(super) fn put_exchange(
    out: &mut Vec<u8>,
    items: &[Item<'_>],
    note: Option<(usize, &[u8])>,
    deadline: Instant,
) {
    out.push(EXCHANGE);
    out.extend_from_slice(&millis_until(deadline).to_le_bytes());
    match note {
        None => out.push(0),
        Some((owner, b)) => {
            out.push(1);
            put_u32(out, owner);
            put_bytes(out, b);
        }
    }
    put_u32(out, items.len());
    for it in items {
        put_bytes(out, it.key.as_bytes());
        put_u32(out, it.owners.len());
        for o in it.owners {
            put_u32(out, *o);
        }
        put_u32(out, it.me);
        match it.value {
            None => out.push(0),
            Some(v) => {
                out.push(1);
                put_bytes(out, v);
            }
        }
        out.push(match it.read {
            Read::Now => 0,
            Read::Later => 1,
            Read::Never => 2,
        });
    }
}
pub(super) fn put_last_note(out: &mut Vec<u8>, owner: usize) {
    out.push(LAST_NOTE);
    put_u32(out, owner);
}

pub(super) fn put_share(out: &mut Vec<u8>, s: &Share) {
    match s {
        Ok(v) => {
            out.push(VALUE);
            put_bytes(out, v);
        }
        Err(Missing::Timeout) => out.push(TIMEOUT),
        Err(Missing::Finished { reason }) => {
            out.push(FINISHED);
            out.push(u8::from(reason.is_some()));
            put_bytes(out, reason.as_deref().unwrap_or_default().as_bytes());
        }
        Err(Missing::Cycle(steps)) => {
            out.push(CYCLE);
            put_u32(out, steps.len());
            for w in steps {
                put_bytes(out, w.key.as_bytes());
                put_u32(out, w.party);
                put_u32(out, w.awaits);
                out.push(u8::from(w.note.is_some()));
                put_bytes(out, w.note.as_deref().unwrap_or_default());
            }
        }
    }
}

/// The bytes an exchange's answer takes (after OK).
pub(super) fn shares_len(answers: &[Vec<Share>]) -> usize {
    answers
        .iter()
        .flatten()
        .map(|s| match s {
            Ok(v) => 5 + v.len(),
            Err(Missing::Timeout) => 1,
            Err(Missing::Finished { reason }) => 6 + reason.as_ref().map_or(0, String::len),
            Err(Missing::Cycle(steps)) => {
                5 + steps
                    .iter()
                    .map(|w| 17 + w.key.len() + w.note.as_ref().map_or(0, Vec::len))
                    .sum::<usize>()
            }
        })
        .sum::<usize>()
        + 4 * answers.len()
}

pub(super) fn put_shares(out: &mut Vec<u8>, answers: &[Vec<Share>]) {
    out.push(OK);
    for shares in answers {
        put_u32(out, shares.len());
        for s in shares {
            put_share(out, s);
        }
    }
}

pub(super) fn put_error(out: &mut Vec<u8>, why: &str) {
    out.push(ERROR);
    put_bytes(out, why.as_bytes());
}

pub(super) fn put_note(out: &mut Vec<u8>, note: Option<&[u8]>) {
    match note {
        Some(b) => {
            out.push(VALUE);
            put_bytes(out, b);
        }
        None => out.push(NONE),
    }
}

// ---------------------------------------------------------------- answers

/// What is wrong with an answer: the store refused the request (its
/// words), or the bytes are not an answer at all.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Bad {
    Refused(String),
    Garbled(String),
}

impl From<String> for Bad {
    fn from(s: String) -> Bad {
        Bad::Garbled(s)
    }
}

fn refused(c: &mut Cursor<'_>) -> Bad {
    match c.string(MAX_ANSWER, "a refusal") {
        Ok(why) => Bad::Refused(why),
        Err(e) => Bad::Garbled(e),
    }
}

fn share(c: &mut Cursor<'_>) -> Result<Share, Bad> {
    match c.u8("an answer")? {
        VALUE => Ok(Ok(c.bytes(MAX_ANSWER, "a value")?.to_vec())),
        TIMEOUT => Ok(Err(Missing::Timeout)),
        FINISHED => {
            let failed = c.u8("a flag")? != 0;
            let reason = c.string(MAX_ANSWER, "a reason")?;
            Ok(Err(Missing::Finished {
                reason: failed.then_some(reason),
            }))
        }
        CYCLE => {
            // each step is at least 17 bytes: a key's and a note's lengths,
            // two parties and a flag
            let n = c.count(MAX_CYCLE, 17, "a cycle's steps")?;
            let mut steps = Vec::with_capacity(n);
            for _ in 0..n {
                let key = c.string(MAX_KEY, "a cycle's key")?;
                let party = c.u32("a party")? as usize;
                let awaits = c.u32("a party")? as usize;
                let has = c.u8("a flag")? != 0;
                let note = c.bytes(MAX_NOTE, "a note")?.to_vec();
                steps.push(Wait {
                    key,
                    party,
                    awaits,
                    note: has.then_some(note),
                });
            }
            Ok(Err(Missing::Cycle(steps)))
        }
        ERROR => Err(refused(c)),
        x => Err(Bad::Garbled(format!("unexpected answer {x}"))),
    }
}

fn ended<T>(c: Cursor<'_>, t: T) -> Result<T, Bad> {
    c.end()?;
    Ok(t)
}

pub(super) fn read_ok(body: &[u8]) -> Result<(), Bad> {
    let mut c = Cursor { b: body };
    match c.u8("an answer")? {
        OK => ended(c, ()),
        ERROR => Err(refused(&mut c)),
        x => Err(Bad::Garbled(format!("unexpected answer {x}"))),
    }
}

pub(super) fn read_share(body: &[u8]) -> Result<Share, Bad> {
    let mut c = Cursor { b: body };
    let s = share(&mut c)?;
    ended(c, s)
}

/// An exchange's answer to a request of `items`: per item, a share per
/// party of those it reads now, none for the others (any other count is
/// refused, so what is allocated follows the request, not the answer).
pub(super) fn read_shares(body: &[u8], items: &[Item<'_>]) -> Result<Vec<Vec<Share>>, Bad> {
    let mut c = Cursor { b: body };
    match c.u8("an answer")? {
        OK => {}
        ERROR => return Err(refused(&mut c)),
        x => return Err(Bad::Garbled(format!("unexpected answer {x}"))),
    }
    let mut answers = Vec::with_capacity(items.len());
    for it in items {
        let want = if it.read == Read::Now {
            it.owners.len()
        } else {
            0
        };
        let n = c.count(MAX_PARTIES, 1, "shares")?;
        if n != want {
            return Err(Bad::Garbled(format!(
                "{n} shares of exchange {}, which has {want} to read",
                it.key
            )));
        }
        let mut shares = Vec::with_capacity(n);
        for _ in 0..n {
            shares.push(share(&mut c)?);
        }
        answers.push(shares);
    }
    ended(c, answers)
}

pub(super) fn read_note(body: &[u8]) -> Result<Option<Vec<u8>>, Bad> {
    let mut c = Cursor { b: body };
    let note = match c.u8("an answer")? {
        VALUE => Some(c.bytes(MAX_ANSWER, "a note")?.to_vec()),
        NONE => None,
        ERROR => return Err(refused(&mut c)),
        x => return Err(Bad::Garbled(format!("unexpected answer {x}"))),
    };
    ended(c, note)
}

/// A deadline `ms` from now, capped at a year.
pub(super) fn deadline_in(ms: u64) -> Instant {
    Instant::now()
        .checked_add(Duration::from_millis(ms.min(86_400_000 * 365)))
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400))
}
pub(super) fn millis_until(deadline: Instant) -> u64 {
    deadline
        .saturating_duration_since(Instant::now())
        .as_millis()
        .min(u64::MAX as u128) as u64
}
