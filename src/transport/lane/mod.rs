//! The agreement's lane through shared memory, for a communicator whose
//! ranks are processes of one host: a launch's posts go into a segment
//! every rank maps, instead of a request to the store over TCP (the NCCL
//! engine and the checker) or rounds of MPI messages (the mpi engine).
//!
//! Why: a loopback TCP round trip costs 20 µs or more on a busy host, an
//! MPI message about a microsecond, and every launch made one or more.
//! Through shared memory a rank's post is a few stores and its read a few
//! loads once the others have posted, so the agreement costs about what
//! the slowest rank's arrival costs anyway.
//!
//! The segment holds, per rank, two slots (rounds alternate between them),
//! the round each slot holds, and the rank's latest note (where it is).
//! Round `k` is the communicator's k-th collective exchange, the same
//! number every rank gives it. A rank posts round `k` into slot `k % 2`
//! and waits until every rank has posted round `k`; it can post round
//! `k + 2` (into the same slot) only after every rank posted `k + 1`,
//! which each did after reading round `k`: so no slot is written while a
//! rank still reads it. Every access to the segment is atomic, so nothing
//! here trusts another process for memory safety: a rank that writes
//! garbage makes a garbled post, which the decoder rejects.
//!
//! Set-up, at communicator init: rank 0 makes the segment (a file in
//! `/dev/shm`, mode 0600, under a name of its own making: [`file`]) and
//! sends its name and a random nonce to the others ([`join_with`], over
//! the store's exchange in `agreement::lane::join` or over MPI in the mpi
//! engine); every rank opens that name in its own directory, never a path
//! a peer gave, without following a symbolic link, maps it and checks the
//! nonce, which only a rank on the same host can read back;
//! the lane is used only when every rank could (otherwise the communicator
//! keeps its other channel, on every rank). The file is unlinked once
//! every rank has mapped it, so nothing is left in `/dev/shm` after the
//! program. `RANKWISE_SHM=0` on any rank ([`wanted`]) keeps the
//! communicator off the lane.
//!
//! A value larger than a slot (a group of more than about two hundred
//! collectives) is marked as such in the slot ([`Part::InStore`]); the
//! agreement then sets it in the store under a key of its own.

mod file;

pub use file::valid_name;

use memmap2::MmapRaw;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

const MAGIC: u64 = u64::from_le_bytes(*b"rkwring2");
const HEADER_WORDS: usize = 8;
/// The largest value a slot holds, in bytes: 227 collectives' posts.
pub const SLOT_BYTES: usize = 16 << 10;
const SLOT_WORDS: usize = SLOT_BYTES / 8;
const NOTE_BYTES: usize = 256;
// a rank's block, in words: the note's sequence (odd while written) and
// length, the note, then the two slots. A slot is the round it holds (+1,
// 0 = none), the value's length, then the value: the round shares its
// cache line with the value's first 48 bytes, so a small post reaches a
// reader as one line. Blocks and slots are whole cache lines (multiples of
// 8 words), so ranks' posts never share one.
const NOTE_SEQ: usize = 0;
const NOTE_LEN: usize = 1;
const NOTE: usize = 8;
const SLOTS: usize = NOTE + NOTE_BYTES / 8;
const ROUND: usize = 0;
const LEN: usize = 1;
const VALUE: usize = 2;
const SLOT_STRIDE: usize = SLOT_WORDS + 8;
const STRIDE: usize = SLOTS + 2 * SLOT_STRIDE;
/// A slot's length when its value is in the store.
const IN_STORE: u64 = u64::MAX;
/// How long a wait spins before it yields its core.
pub const SPIN: Duration = Duration::from_micros(20);

/// One communicator's segment, mapped.
pub struct Lane {
    /// raw, not `MmapMut`: every access is through atomics made from the
    /// mapping's own pointer, never through a `&[u8]` of it
    map: MmapRaw,
    nranks: usize,
    /// how long a wait spins before it yields: [`SPIN`], or nothing when
    /// the ranks outnumber the cores (they take turns on them, and spinning
    /// would keep a rank that is late off its core)
    spin: Duration,
}

/// A party's post of one round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Part {
    Value(Vec<u8>),
    /// too large for a slot: its value is in the store
    InStore,
}

/// How a [`Lane::wait`] ended.
#[derive(Debug, PartialEq, Eq)]
pub enum Waited<T> {
    /// every rank's post, in rank order
    All(Vec<Part>),
    /// not every rank posted: `by` is what stopped the wait (None: the
    /// deadline), `parts` what had come, in rank order
    Stopped {
        by: Option<T>,
        parts: Vec<Option<Part>>,
    },
}

/// How a [`Lane::wait_words`] ended when not every rank posted: `by` is
/// what stopped the wait (None: the deadline), `posted` who had.
#[derive(Debug, PartialEq, Eq)]
pub struct Stopped<T> {
    pub by: Option<T>,
    pub posted: Vec<bool>,
}

/// Whether this process may use the lane: not under `RANKWISE_SHM=0`.
pub fn wanted() -> bool {
    crate::settings::Settings::from_env_or_defaults().shm
}

fn segment_bytes(nranks: usize) -> usize {
    (HEADER_WORDS + nranks * STRIDE) * 8
}

/// Where segments go: `RANKWISE_SHM_DIR` when set, else `/dev/shm`
/// (memory), else the temporary directory. Ranks find rank 0's segment by
/// its name in their own directory, so ranks whose directories differ (on
/// other hosts, or told so) do not share one.
pub fn segment_dir() -> PathBuf {
    if let Some(dir) = crate::settings::Settings::from_env_or_defaults().shm_dir {
        return dir.into();
    }
    let shm = Path::new("/dev/shm");
    if shm.is_dir() {
        shm.into()
    } else {
        std::env::temp_dir()
    }
}

/// A random tag for a segment's name and nonce: from the operating system,
/// else from the clock and the process id hashed under std's random keys.
fn random_u64() -> u64 {
    let mut b = [0u8; 8];
    if getrandom::fill(&mut b).is_ok() {
        return u64::from_le_bytes(b) | 1;
    }
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos()),
    );
    h.write_u32(std::process::id());
    h.finish() | 1
}

fn invalid(why: String) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, why)
}

impl Lane {
    fn map(file: &std::fs::File, nranks: usize) -> std::io::Result<Lane> {
        let map = MmapRaw::map_raw(file)?;
        if map.len() != segment_bytes(nranks) {
            return Err(invalid(format!(
                "the segment is {} bytes, not the {} of {nranks} ranks",
                map.len(),
                segment_bytes(nranks)
            )));
        }
        let spin = if nranks <= crate::machine::cores() {
            SPIN
        } else {
            Duration::ZERO
        };
        Ok(Lane { map, nranks, spin })
    }

    fn words(&self) -> &[AtomicU64] {
        // SAFETY: the mapping is page-aligned (so aligned for AtomicU64),
        // `len / 8` words long, and lives as long as `self`; the pointer is
        // the mapping's own, valid for reads and writes, and every access to
        // the segment, here and in the other processes, is through these
        // atomics (another process changing it concurrently is the point,
        // and atomics make that sound).
        unsafe {
            std::slice::from_raw_parts(
                self.map.as_mut_ptr().cast::<AtomicU64>(),
                self.map.len() / 8,
            )
        }
    }

    /// Makes a segment for `nranks` in `dir` (its file private to this
    /// user: [`file`]): the ring and its file's path.
    pub fn create(dir: &Path, nranks: usize) -> std::io::Result<(Lane, PathBuf)> {
        let nonce = random_u64();
        let (file, path) = file::create(dir, nonce, segment_bytes(nranks) as u64)?;
        let ring = match Lane::map(&file, nranks) {
            Ok(r) => r,
            Err(e) => {
                let _ = std::fs::remove_file(&path);
                return Err(e);
            }
        };
        let w = ring.words();
        w[1].store(nonce, Ordering::Relaxed);
        w[2].store(nranks as u64, Ordering::Relaxed);
        w[3].store(SLOT_WORDS as u64, Ordering::Relaxed);
        w[0].store(MAGIC, Ordering::Release);
        Ok((ring, path))
    }

    /// Maps the segment named `name` (as a peer sent it: refused unless it
    /// is a segment's name) in this rank's own `dir`, which must be the one
    /// with `nonce` made for `nranks`.
    pub fn open(dir: &Path, name: &[u8], nonce: u64, nranks: usize) -> std::io::Result<Lane> {
        let (file, path) = file::open(dir, name)?;
        let ring = Lane::map(&file, nranks)?;
        let w = ring.words();
        let head = [
            w[0].load(Ordering::Acquire),
            w[1].load(Ordering::Relaxed),
            w[2].load(Ordering::Relaxed),
            w[3].load(Ordering::Relaxed),
        ];
        if head != [MAGIC, nonce, nranks as u64, SLOT_WORDS as u64] {
            return Err(invalid(format!(
                "{} is not the segment sent (its header is {head:x?})",
                path.display()
            )));
        }
        Ok(ring)
    }

    pub fn nonce(&self) -> u64 {
        self.words()[1].load(Ordering::Relaxed)
    }

    /// A segment in anonymous memory, for tests of the posts and waits on
    /// one lane shared by threads (Miri runs these: it has no file-backed
    /// mappings).
    #[cfg(test)]
    fn anonymous(nranks: usize) -> Lane {
        let map = memmap2::MmapMut::map_anon(segment_bytes(nranks))
            .expect("anonymous memory")
            .into();
        let lane = Lane {
            map,
            nranks,
            spin: Duration::ZERO,
        };
        let w = lane.words();
        w[1].store(0x5eed, Ordering::Relaxed);
        w[2].store(nranks as u64, Ordering::Relaxed);
        w[3].store(SLOT_WORDS as u64, Ordering::Relaxed);
        w[0].store(MAGIC, Ordering::Release);
        lane
    }

    fn block(&self, rank: usize) -> &[AtomicU64] {
        assert!(rank < self.nranks, "rank {rank} of {}", self.nranks);
        let at = HEADER_WORDS + rank * STRIDE;
        &self.words()[at..at + STRIDE]
    }

    /// `rank`'s slot for round `seq`.
    fn slot(&self, rank: usize, seq: u64) -> &[AtomicU64] {
        let at = SLOTS + (seq % 2) as usize * SLOT_STRIDE;
        &self.block(rank)[at..at + SLOT_STRIDE]
    }

    /// Posts `value` as `rank`'s part of round `seq`. False when it is too
    /// large for a slot: the slot then says so, and the caller must have
    /// set the value in the store first.
    pub fn post(&self, rank: usize, seq: u64, value: &[u8]) -> bool {
        let slot = self.slot(rank, seq);
        let fits = value.len() <= SLOT_BYTES;
        if fits {
            // last to first, as in `post_words`
            for (w, chunk) in slot[VALUE..].iter().zip(value.chunks(8)).rev() {
                let mut word = [0u8; 8];
                word[..chunk.len()].copy_from_slice(chunk);
                w.store(u64::from_le_bytes(word), Ordering::Relaxed);
            }
        }
        let len = if fits { value.len() as u64 } else { IN_STORE };
        Self::publish(slot, seq, len);
        fits
    }

    /// [`Lane::post`] of words (at most a slot's), without a copy to bytes.
    pub fn post_words(&self, rank: usize, seq: u64, words: &[u64]) {
        let slot = self.slot(rank, seq);
        let words = &words[..words.len().min(SLOT_WORDS)];
        // last to first: the first line, which readers watch for the round,
        // is written in one burst at the end, so a reader looking at it
        // while the value is written takes it away once, not once a word
        for (w, v) in slot[VALUE..].iter().zip(words).rev() {
            w.store(*v, Ordering::Relaxed);
        }
        Self::publish(slot, seq, words.len() as u64 * 8);
    }

    fn publish(slot: &[AtomicU64], seq: u64, len: u64) {
        slot[LEN].store(len, Ordering::Relaxed);
        // the release publishes the value and length with the round
        slot[ROUND].store(seq + 1, Ordering::Release);
    }

    /// Takes back `rank`'s post of round `seq`: a rank that gave up on the
    /// round (a timeout, a failure heard of) must not be counted as there
    /// by a rank that arrives later, which then fails too instead of going
    /// on alone.
    pub fn withdraw(&self, rank: usize, seq: u64) {
        let _ = self.slot(rank, seq)[ROUND].compare_exchange(
            seq + 1,
            0,
            Ordering::AcqRel,
            Ordering::Relaxed,
        );
    }

    /// `party`'s slot for round `seq` and the length of the post in it,
    /// once the post is there.
    fn posted(&self, party: usize, seq: u64) -> Option<(&[AtomicU64], u64)> {
        let slot = self.slot(party, seq);
        // the acquire pairs with `publish`'s release: value and length
        // are complete once the round shows
        (slot[ROUND].load(Ordering::Acquire) == seq + 1)
            .then(|| (slot, slot[LEN].load(Ordering::Relaxed)))
    }

    /// `party`'s post of round `seq`, once it is there.
    pub fn read(&self, party: usize, seq: u64) -> Option<Part> {
        let (slot, len) = self.posted(party, seq)?;
        if len == IN_STORE {
            return Some(Part::InStore);
        }
        let len = (len as usize).min(SLOT_BYTES);
        let mut v = Vec::with_capacity(len.next_multiple_of(8));
        for w in &slot[VALUE..][..len.div_ceil(8)] {
            v.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
        }
        v.truncate(len);
        Some(Part::Value(v))
    }

    /// `party`'s post of round `seq` as words into `out`, the rest of `out`
    /// zeroed, once it is there: the post's length in bytes (more than
    /// `out` holds when it was cut; `usize::MAX` when it is in the store).
    pub fn read_words(&self, party: usize, seq: u64, out: &mut [u64]) -> Option<usize> {
        self.read_words_from(party, seq, 0, out)
    }

    /// [`Lane::read_words`] from the post's word `skip` on: a reader that
    /// needs only part of a long post loads only that part.
    pub fn read_words_from(
        &self,
        party: usize,
        seq: u64,
        skip: usize,
        out: &mut [u64],
    ) -> Option<usize> {
        let (slot, len) = self.posted(party, seq)?;
        let words = (len.min(SLOT_BYTES as u64) as usize)
            .div_ceil(8)
            .saturating_sub(skip)
            .min(out.len());
        let value = &slot[VALUE + skip.min(SLOT_WORDS)..];
        for (o, w) in out.iter_mut().zip(&value[..words]) {
            *o = w.load(Ordering::Relaxed);
        }
        out[words..].fill(0);
        Some(usize::try_from(len).unwrap_or(usize::MAX))
    }

    /// Keeps `note` (cut to 256 bytes) as where `rank` is now.
    pub fn set_note(&self, rank: usize, note: &[u8]) {
        let b = self.block(rank);
        let note = &note[..note.len().min(NOTE_BYTES)];
        // a sequence lock: odd while the note changes
        let seq = b[NOTE_SEQ].load(Ordering::Relaxed);
        b[NOTE_SEQ].store(seq + 1, Ordering::Relaxed);
        std::sync::atomic::fence(Ordering::Release);
        for (w, chunk) in b[NOTE..].iter().zip(note.chunks(8)) {
            let mut word = [0u8; 8];
            word[..chunk.len()].copy_from_slice(chunk);
            w.store(u64::from_le_bytes(word), Ordering::Relaxed);
        }
        b[NOTE_LEN].store(note.len() as u64, Ordering::Relaxed);
        b[NOTE_SEQ].store(seq + 2, Ordering::Release);
    }

    /// The note `rank` left last, if it left one.
    pub fn note(&self, rank: usize) -> Option<Vec<u8>> {
        let b = self.block(rank);
        for _ in 0..1000 {
            let before = b[NOTE_SEQ].load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let len = (b[NOTE_LEN].load(Ordering::Relaxed) as usize).min(NOTE_BYTES);
            let mut v = Vec::with_capacity(NOTE_BYTES);
            for w in &b[NOTE..NOTE + len.div_ceil(8)] {
                v.extend_from_slice(&w.load(Ordering::Relaxed).to_le_bytes());
            }
            v.truncate(len);
            std::sync::atomic::fence(Ordering::Acquire);
            if b[NOTE_SEQ].load(Ordering::Relaxed) == before {
                return (before > 0).then_some(v);
            }
        }
        None
    }

    /// Every rank's post of round `seq`, waiting until all have posted or
    /// `deadline`. Once the wait has lasted 2 ms, and every 10 ms after,
    /// and at the deadline, `tick` is asked with the ranks that have not
    /// posted; what it returns stops the wait (a rank that left, a failure
    /// heard of elsewhere).
    pub fn wait<T>(
        &self,
        seq: u64,
        deadline: Instant,
        mut tick: impl FnMut(&[usize]) -> Option<T>,
    ) -> Waited<T> {
        let mut parts: Vec<Option<Part>> = vec![None; self.nranks];
        let take = |r: usize| {
            parts[r] = self.read(r, seq);
            parts[r].is_some()
        };
        match self.until_posted(deadline, &mut tick, take) {
            Ok(()) => Waited::All(parts.into_iter().flatten().collect()),
            Err((by, _)) => Waited::Stopped { by, parts },
        }
    }

    /// [`Lane::wait`] into words: rank r's post goes to
    /// `out[r * stride..][..stride]` (zero-padded, cut to `stride`), and
    /// each post's length in bytes to `lens[r]`. Nothing is allocated on
    /// the way, which is the whole of a small launch's agreement.
    pub fn wait_words<T>(
        &self,
        seq: u64,
        deadline: Instant,
        mut tick: impl FnMut(&[usize]) -> Option<T>,
        out: &mut [u64],
        lens: &mut [usize],
    ) -> Result<(), Stopped<T>> {
        let stride = out.len() / self.nranks.max(1);
        let take = |r: usize| match self.read_words(r, seq, &mut out[r * stride..][..stride]) {
            Some(len) => {
                lens[r] = len;
                true
            }
            None => false,
        };
        self.until_posted(deadline, &mut tick, take)
            .map_err(|(by, posted)| Stopped { by, posted })
    }

    /// Waits until every rank's post has been taken (Ok), or until `tick`
    /// or the deadline stops it (Err with what `tick` said and who had
    /// posted). `take(r)` reads rank r's post where the caller keeps it and
    /// says whether it was there; a post once taken counts as posted even
    /// if its rank takes it back later (it gave up, and fails its launch
    /// itself). A waiting rank spins for the first [`SPIN`] (a rank a
    /// little behind, as the previous call's skew leaves it: a yield is a
    /// system call, slower than the wait it would cover) unless the ranks
    /// outnumber this host's cores, then gives its core away, then sleeps
    /// in 50 µs steps after 1 ms.
    fn until_posted<T>(
        &self,
        deadline: Instant,
        tick: &mut impl FnMut(&[usize]) -> Option<T>,
        mut take: impl FnMut(usize) -> bool,
    ) -> Result<(), (Option<T>, Vec<bool>)> {
        // ranks below `seen` have been taken, in rank order; past the
        // first tick, `taken` also holds those taken out of order
        let mut seen = 0;
        let mut taken: Option<Vec<bool>> = None;
        let mut start: Option<Instant> = None;
        let mut next_tick = None;
        let mut turn = 0u32;
        loop {
            while seen < self.nranks && (taken.as_ref().is_some_and(|t| t[seen]) || take(seen)) {
                seen += 1;
            }
            if seen == self.nranks {
                return Ok(());
            }
            turn = turn.wrapping_add(1);
            // the clock costs more than a look at a slot: every 64th turn
            if !turn.is_multiple_of(64) {
                std::hint::spin_loop();
                continue;
            }
            let now = Instant::now();
            let start = *start.get_or_insert(now);
            if now - start < self.spin {
                continue;
            }
            let over = now >= deadline;
            let next = *next_tick.get_or_insert(start + Duration::from_millis(2));
            if over || now >= next {
                next_tick = Some(now + Duration::from_millis(10));
                let posted = taken.get_or_insert_with(|| vec![false; self.nranks]);
                for (r, p) in posted.iter_mut().enumerate() {
                    *p = *p || r < seen || take(r);
                }
                let missing: Vec<usize> = (0..self.nranks).filter(|r| !posted[*r]).collect();
                if missing.is_empty() {
                    // every rank came since the last look
                    continue;
                }
                let by = tick(&missing);
                if over || by.is_some() {
                    return Err((by, posted.clone()));
                }
            }
            if now - start < Duration::from_millis(1) {
                std::thread::yield_now();
            } else {
                std::thread::sleep(Duration::from_micros(50));
            }
        }
    }
}

/// Sets up the lane over any allgather among the `n` ranks (the store's:
/// `agreement::lane::join`; MPI's: the mpi engine): `allgather(mine)` is
/// every rank's value in rank order, or None when it failed (then no lane).
/// Two rounds: rank 0 sends `[1, nonce, file name]` when it made a segment
/// in `dir` and every other rank `[1]` when it wants the lane (`[0]` is a
/// no); then every rank says whether it mapped the segment of that name
/// (a segment's name, nothing else: [`valid_name`]) in its own `dir` with
/// that nonce.
pub fn join_with(
    dir: &Path,
    rank: usize,
    n: usize,
    wanted: bool,
    mut allgather: impl FnMut(&[u8]) -> Option<Vec<Vec<u8>>>,
) -> Option<Lane> {
    if n < 2 {
        return None;
    }
    let made = (rank == 0 && wanted)
        .then(|| Lane::create(dir, n).ok())
        .flatten();
    let unlink = |made: &Option<(Lane, PathBuf)>| {
        if let Some((_, path)) = made {
            let _ = std::fs::remove_file(path);
        }
    };
    let mine: Vec<u8> = match (&made, rank, wanted) {
        (Some((ring, path)), _, _) => [
            &[1u8][..],
            &ring.nonce().to_le_bytes(),
            path.file_name().unwrap_or_default().as_encoded_bytes(),
        ]
        .concat(),
        (None, 0, _) | (_, _, false) => vec![0],
        _ => vec![1],
    };
    let Some(all) = allgather(&mine) else {
        unlink(&made);
        return None;
    };
    if all.len() != n || all.iter().any(|v| v.first() != Some(&1)) || all[0].len() < 9 {
        unlink(&made);
        return None;
    }
    let ring = match made {
        Some((ring, path)) => Some((ring, Some(path))),
        // no early return from here on: every rank must make round two
        None => {
            // the name is rank 0's bytes: `Lane::open` takes nothing but a
            // segment's name, in this rank's own directory
            let nonce = all[0][1..9].try_into().map(u64::from_le_bytes);
            nonce
                .ok()
                .and_then(|nonce| Lane::open(dir, &all[0][9..], nonce, n).ok())
                .map(|r| (r, None))
        }
    };
    let mapped = allgather(&[u8::from(ring.is_some())]);
    if let Some((_, Some(path))) = &ring {
        let _ = std::fs::remove_file(path);
    }
    let everyone = mapped.is_some_and(|all| all.len() == n && all.iter().all(|v| v == &[1]));
    ring.filter(|_| everyone).map(|(r, _)| r)
}

#[cfg(test)]
mod tests;
