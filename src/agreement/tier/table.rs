//! The table a host's leader sends up the tier, and rank 0 sends down:
//! every listed rank's share of a round, each distinct value once. Its
//! bytes come from other processes through the store, so decoding checks
//! every length against what is left and the number of entries against
//! what the reader expects.

use crate::core::{Error, ErrorKind, Result};
use crate::transport::store::{Missing, Share};

/// Every listed rank's share of a round, and the note of each that did not
/// come (where it was last), in the order of the ranks it is for.
#[derive(Debug, Clone, PartialEq)]
pub struct Table {
    pub shares: Vec<Share>,
    pub notes: Vec<Option<Vec<u8>>>,
}

pub(super) const TABLE: u64 = 0x7274_6965_7201;
/// Every entry is the one value: no entries follow.
const ALL_ALIKE: u8 = 0;
const EACH: u8 = 1;
const VALUE: u8 = 0;
const TIMEOUT: u8 = 1;
const LEFT: u8 = 2;
const FAILED: u8 = 3;

fn garbled(why: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("a host leader's table is garbled: {why}"),
    )
}

fn put(out: &mut Vec<u8>, b: &[u8]) {
    out.extend_from_slice(&(b.len() as u32).to_le_bytes());
    out.extend_from_slice(b);
}

/// Reads from a table's bytes, never past them.
struct Reader<'a>(&'a [u8]);

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8]> {
        if n > self.0.len() {
            return Err(garbled("cut short"));
        }
        let (a, b) = self.0.split_at(n);
        self.0 = b;
        Ok(a)
    }
    fn byte(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<usize> {
        let b = self.take(4)?;
        Ok(u32::from_le_bytes(b.try_into().expect("4 bytes")) as usize)
    }
    fn bytes(&mut self) -> Result<&'a [u8]> {
        let n = self.u32()?;
        self.take(n)
    }
}

impl Table {
    /// The table of `shares` without notes.
    pub fn of(shares: Vec<Share>) -> Table {
        let notes = vec![None; shares.len()];
        Table { shares, notes }
    }

    /// Whether every entry is the same value.
    fn alike(&self) -> Option<&[u8]> {
        let first = self.shares.first()?.as_deref().ok()?;
        self.shares
            .iter()
            .all(|s| s.as_deref().ok() == Some(first))
            .then_some(first)
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut out = TABLE.to_le_bytes().to_vec();
        out.extend_from_slice(&(self.shares.len() as u32).to_le_bytes());
        if let Some(v) = self.alike() {
            out.push(ALL_ALIKE);
            put(&mut out, v);
            return out;
        }
        out.push(EACH);
        // each distinct value once, entries by index
        let mut values: Vec<&[u8]> = Vec::new();
        let mut entries = Vec::new();
        for (s, note) in self.shares.iter().zip(&self.notes) {
            match s {
                Ok(v) => {
                    let i = match values.iter().position(|w| w == v) {
                        Some(i) => i,
                        None => {
                            values.push(v);
                            values.len() - 1
                        }
                    };
                    entries.push(VALUE);
                    entries.extend_from_slice(&(i as u32).to_le_bytes());
                }
                Err(Missing::Timeout) => {
                    entries.push(TIMEOUT);
                    put(&mut entries, note.as_deref().unwrap_or_default());
                }
                Err(Missing::Finished { reason: None }) => entries.push(LEFT),
                Err(Missing::Finished { reason: Some(why) }) => {
                    entries.push(FAILED);
                    put(&mut entries, why.as_bytes());
                }
                Err(Missing::Cycle(steps)) => {
                    entries.push(FAILED);
                    let why = super::super::cycle::waits_in_cycle(steps).message;
                    put(&mut entries, why.as_bytes());
                }
            }
        }
        out.extend_from_slice(&(values.len() as u32).to_le_bytes());
        for v in values {
            put(&mut out, v);
        }
        out.extend_from_slice(&entries);
        out
    }

    /// The table in `b`, which must have `n` entries. Nothing is allocated
    /// beyond what the bytes hold, but the `n` entries asked for.
    pub fn decode(b: &[u8], n: usize) -> Result<Table> {
        let mut r = Reader(b);
        let version = u64::from_le_bytes(r.take(8)?.try_into().expect("8 bytes"));
        if version != TABLE {
            return Err(garbled("not a table of this build"));
        }
        if r.u32()? != n {
            return Err(garbled(&format!("its entries are not the {n} expected")));
        }
        let mut t = Table {
            shares: Vec::with_capacity(n),
            notes: vec![None; n],
        };
        match r.byte()? {
            ALL_ALIKE => {
                let v = r.bytes()?;
                t.shares.resize(n, Ok(v.to_vec()));
            }
            EACH => {
                let k = r.u32()?;
                if k > n {
                    return Err(garbled("more values than entries"));
                }
                let mut values = Vec::with_capacity(k);
                for _ in 0..k {
                    values.push(r.bytes()?);
                }
                for note in t.notes.iter_mut() {
                    let s = match r.byte()? {
                        VALUE => {
                            let v = values
                                .get(r.u32()?)
                                .ok_or_else(|| garbled("no such value"))?;
                            Ok(v.to_vec())
                        }
                        TIMEOUT => {
                            let b = r.bytes()?;
                            *note = (!b.is_empty()).then(|| b.to_vec());
                            Err(Missing::Timeout)
                        }
                        LEFT => Err(Missing::Finished { reason: None }),
                        FAILED => Err(Missing::Finished {
                            reason: Some(String::from_utf8_lossy(r.bytes()?).into_owned()),
                        }),
                        _ => return Err(garbled("an entry of no known kind")),
                    };
                    t.shares.push(s);
                }
            }
            _ => return Err(garbled("of no known form")),
        }
        if !r.0.is_empty() {
            return Err(garbled("bytes past its end"));
        }
        Ok(t)
    }
}
