//! What watch mode's ranks send each other, and its bytes: little-endian
//! words, a version first. Decoding refuses anything this build does not
//! write, and allocates no more than the bytes it was given.

use super::Sums;
use super::flight::Flight;
use crate::core::{Error, ErrorKind, Posted, Result};

const VERSION: u64 = 0x7277_7703;

/// What the judge asks of every rank for the next round.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Ask {
    /// the digest and sums at this cut
    pub digest_at: Option<u64>,
    /// the signatures of these cuts
    pub sigs: Option<(u64, u64)>,
    /// the launches at this cut and the next few (`WINDOW` in all)
    pub post: Option<u64>,
    /// every peer's Send and Recv counts
    pub peers: bool,
    /// each rank's own flight (not its host's longest)
    pub flights: bool,
}

/// A rank's Sends to and Recvs from one peer.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct PeerCount {
    pub peer: usize,
    pub sent: u64,
    pub recvd: u64,
    /// rolling digests of each one's (count, datatype)
    pub sent_digest: u64,
    pub recvd_digest: u64,
    /// the last one's count and datatype code
    pub last_sent: (u64, u64),
    pub last_recvd: (u64, u64),
}

/// The digest and sums at one cut.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct At {
    pub m: u64,
    pub digest: u64,
    pub before: Sums,
    pub after: Sums,
}

/// One rank's post of a round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Summary {
    pub launches: u64,
    /// cuts made (the fewest, for a host's folded summary)
    pub m: u64,
    /// the most cuts made among the ranks it stands for
    pub high: u64,
    /// the oldest cut the rank still holds
    pub lo: u64,
    /// the answer to `Ask::digest_at` (None: out of its ring)
    pub at: Option<At>,
    pub sigs_from: u64,
    pub sigs: Vec<u64>,
    pub posts: Vec<Posted>,
    pub peers: Vec<PeerCount>,
    /// its oldest unfinished launch (a host's: the one out the longest)
    pub flight: Flight,
    /// the Send and Recv sums now (a host's: added up)
    pub now: Sums,
    /// the rank (or one of the host's) has made its last call on the
    /// communicator: its calls are all there will be
    pub closing: bool,
}

/// The judge's word after a round.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Verdict {
    pub round: u64,
    pub ask: Ask,
    /// the contract violation found, and both sides' calls
    pub failure: Option<(String, String)>,
    /// the failure is a hang (`flight::hang`), not a mismatch
    pub hang: bool,
}

/// Longest text a verdict carries.
const MAX_TEXT: usize = 64 << 10;

fn garbled(why: &str) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!("a peer's watch summary is garbled: {why} (are all ranks the same rankwise?)"),
    )
}

struct Reader<'a>(&'a [u8]);

impl Reader<'_> {
    fn word(&mut self) -> Result<u64> {
        let (w, rest) = self
            .0
            .split_first_chunk::<8>()
            .ok_or_else(|| garbled("cut short"))?;
        self.0 = rest;
        Ok(u64::from_le_bytes(*w))
    }
    /// A length of items of `words` words each, refused past what is left.
    fn len(&mut self, words: usize) -> Result<usize> {
        let n = self.word()?;
        match usize::try_from(n) {
            Ok(n) if n.saturating_mul(8 * words) <= self.0.len() => Ok(n),
            _ => Err(garbled(&format!("{n} items in {} bytes", self.0.len()))),
        }
    }
    fn bytes(&mut self, n: usize) -> Result<&[u8]> {
        if n > self.0.len() {
            return Err(garbled("cut short"));
        }
        let (b, rest) = self.0.split_at(n);
        self.0 = rest;
        Ok(b)
    }
    fn end(&self) -> Result<()> {
        match self.0.is_empty() {
            true => Ok(()),
            false => Err(garbled(&format!("{} bytes left over", self.0.len()))),
        }
    }
}

fn put(out: &mut Vec<u8>, w: u64) {
    out.extend_from_slice(&w.to_le_bytes());
}

fn put_opt(out: &mut Vec<u8>, v: Option<u64>) {
    put(out, v.is_some() as u64);
    put(out, v.unwrap_or(0));
}

fn opt(r: &mut Reader<'_>) -> Result<Option<u64>> {
    let (some, v) = (r.word()?, r.word()?);
    match some {
        0 => Ok(None),
        1 => Ok(Some(v)),
        _ => Err(garbled("a flag that is neither 0 nor 1")),
    }
}

fn flag(r: &mut Reader<'_>) -> Result<bool> {
    match r.word()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(garbled("a flag that is neither 0 nor 1")),
    }
}

impl Ask {
    fn put(&self, out: &mut Vec<u8>) {
        put_opt(out, self.digest_at);
        put_opt(out, self.sigs.map(|s| s.0));
        put(out, self.sigs.map_or(0, |s| s.1));
        put_opt(out, self.post);
        put(out, self.peers as u64);
        put(out, self.flights as u64);
    }

    fn read(r: &mut Reader<'_>) -> Result<Ask> {
        let digest_at = opt(r)?;
        let sigs = opt(r)?;
        let to = r.word()?;
        let post = opt(r)?;
        let peers = flag(r)?;
        let flights = flag(r)?;
        Ok(Ask {
            digest_at,
            sigs: sigs.map(|f| (f, to)),
            post,
            peers,
            flights,
        })
    }
}

const PEER_WORDS: usize = 9;

impl Summary {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128 + 8 * self.sigs.len());
        for w in [VERSION, self.launches, self.m, self.high, self.lo] {
            put(&mut out, w);
        }
        for w in self.flight.words() {
            put(&mut out, w);
        }
        for w in [self.now.sent, self.now.recvd, self.closing as u64] {
            put(&mut out, w);
        }
        put(&mut out, self.at.is_some() as u64);
        let at = self.at.unwrap_or_default();
        for w in [
            at.m,
            at.digest,
            at.before.sent,
            at.before.recvd,
            at.after.sent,
            at.after.recvd,
        ] {
            put(&mut out, w);
        }
        put(&mut out, self.sigs_from);
        put(&mut out, self.sigs.len() as u64);
        for s in &self.sigs {
            put(&mut out, *s);
        }
        put(&mut out, self.posts.len() as u64);
        for p in &self.posts {
            let b = crate::core::wire::encode(p);
            put(&mut out, b.len() as u64);
            out.extend_from_slice(&b);
        }
        put(&mut out, self.peers.len() as u64);
        for p in &self.peers {
            for w in [
                p.peer as u64,
                p.sent,
                p.recvd,
                p.sent_digest,
                p.recvd_digest,
                p.last_sent.0,
                p.last_sent.1,
                p.last_recvd.0,
                p.last_recvd.1,
            ] {
                put(&mut out, w);
            }
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Summary> {
        let mut r = Reader(b);
        if r.word()? != VERSION {
            return Err(garbled("another version"));
        }
        let (launches, m, high, lo) = (r.word()?, r.word()?, r.word()?, r.word()?);
        let flight = Flight::from_words([r.word()?, r.word()?, r.word()?])
            .ok_or_else(|| garbled("a flight of no known kind"))?;
        let now = Sums {
            sent: r.word()?,
            recvd: r.word()?,
        };
        let closing = flag(&mut r)?;
        let has_at = r.word()?;
        let mut w = [0u64; 6];
        for x in &mut w {
            *x = r.word()?;
        }
        let at = match has_at {
            0 => None,
            1 => Some(At {
                m: w[0],
                digest: w[1],
                before: Sums {
                    sent: w[2],
                    recvd: w[3],
                },
                after: Sums {
                    sent: w[4],
                    recvd: w[5],
                },
            }),
            _ => return Err(garbled("a flag that is neither 0 nor 1")),
        };
        let sigs_from = r.word()?;
        let n = r.len(1)?;
        let sigs = (0..n).map(|_| r.word()).collect::<Result<_>>()?;
        let n = r.len(1)?;
        let mut posts = Vec::with_capacity(n);
        for _ in 0..n {
            let len = usize::try_from(r.word()?).map_err(|_| garbled("a post's length"))?;
            posts.push(crate::core::wire::decode(r.bytes(len)?)?);
        }
        let n = r.len(PEER_WORDS)?;
        let mut peers = Vec::with_capacity(n);
        for _ in 0..n {
            let mut w = [0u64; PEER_WORDS];
            for x in &mut w {
                *x = r.word()?;
            }
            peers.push(PeerCount {
                peer: usize::try_from(w[0]).map_err(|_| garbled("a peer"))?,
                sent: w[1],
                recvd: w[2],
                sent_digest: w[3],
                recvd_digest: w[4],
                last_sent: (w[5], w[6]),
                last_recvd: (w[7], w[8]),
            });
        }
        r.end()?;
        Ok(Summary {
            launches,
            m,
            high,
            lo,
            at,
            sigs_from,
            sigs,
            posts,
            peers,
            flight,
            now,
            closing,
        })
    }
}

impl Verdict {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(128);
        put(&mut out, VERSION);
        put(&mut out, self.round);
        self.ask.put(&mut out);
        put(&mut out, self.hang as u64);
        match &self.failure {
            None => put(&mut out, 0),
            Some((what, sides)) => {
                put(&mut out, 1);
                for t in [what, sides] {
                    let t = &t.as_bytes()[..t.len().min(MAX_TEXT)];
                    put(&mut out, t.len() as u64);
                    out.extend_from_slice(t);
                }
            }
        }
        out
    }

    pub fn decode(b: &[u8]) -> Result<Verdict> {
        let mut r = Reader(b);
        if r.word()? != VERSION {
            return Err(garbled("another version"));
        }
        let round = r.word()?;
        let ask = Ask::read(&mut r)?;
        let hang = flag(&mut r)?;
        let failure = match r.word()? {
            0 => None,
            1 => {
                let mut text = || -> Result<String> {
                    let n = r.word()?;
                    let n = usize::try_from(n)
                        .ok()
                        .filter(|n| *n <= MAX_TEXT)
                        .ok_or_else(|| garbled("a text too long"))?;
                    Ok(String::from_utf8_lossy(r.bytes(n)?).into_owned())
                };
                Some((text()?, text()?))
            }
            _ => return Err(garbled("a flag that is neither 0 nor 1")),
        };
        r.end()?;
        Ok(Verdict {
            round,
            ask,
            failure,
            hang,
        })
    }
}
