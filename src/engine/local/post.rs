//! What a rank publishes for the collective part of a launch: its mailbox.
//!
//! Each rank owns a [`Mailbox`] of two slots and posts its `k`-th
//! collective launch on a communicator into slot `k % 2`, writing the
//! launch number last. A slot holds one call as plain words (a group's
//! calls go to the lock-protected `World::posted` instead), and for a small
//! call a copy of the rank's send buffer too (the payload), so the other
//! ranks can compute their results without touching this rank's memory.
//!
//! Why two slots suffice: a rank posts launch `k + 1` only after finishing
//! launch `k`, and it finishes launch `k` only after every rank posted `k`,
//! which each does only after finishing launch `k − 1`, the last one that
//! read slot `(k + 1) % 2`. So nobody still reads a slot when its owner
//! overwrites it.
//!
//! The fields are atomics written with relaxed stores and published by the
//! release store of `seq`; a reader that sees the launch number it expects
//! in `seq` (acquire) sees the whole post. Everything a small call needs
//! sits in the slot's first cache line: a two-rank 8-byte AllReduce costs
//! each rank one line transfer from its peer.

use crate::core::{Call, Posted, wire};
use std::sync::atomic::{AtomicU64, Ordering};

/// Bytes of send buffer a slot can carry: calls this small go inline. Two
/// lines of payload; beyond that, copying it through the mailbox costs more
/// than the coordinator path's transfers (256-byte calls at N = 2 took
/// 0.29–0.59 us inline against 0.24–0.45 us through the coordinator).
pub const PAYLOAD_BYTES: usize = 128;
/// [`PAYLOAD_BYTES`] in the words a slot stores it as.
pub const PAYLOAD_WORDS: usize = PAYLOAD_BYTES / 8;
/// Payload words in the first cache line, beside the call.
const FIRST_WORDS: usize = 3;

/// `head` of a slot whose launch is a group: its calls are in `World::posted`.
const GROUP: u64 = u64::MAX;

#[derive(Default)]
#[repr(C, align(128))]
struct Slot {
    // first line: enough to agree on a call and to use a small payload
    /// launch number + 1 of the post in this slot; 0 before any
    seq: AtomicU64,
    /// the call in `core::wire`'s words: kinds (or GROUP), count, root and
    /// op code, PreMulSum's scalar
    head: AtomicU64,
    count: AtomicU64,
    root: AtomicU64,
    scalar: AtomicU64,
    first: [AtomicU64; FIRST_WORDS],
    // second line onwards
    op_count: AtomicU64,
    sendbuff: AtomicU64,
    recvbuff: AtomicU64,
    rest: [AtomicU64; PAYLOAD_WORDS - FIRST_WORDS],
}

impl Slot {
    fn word(&self, i: usize) -> &AtomicU64 {
        if i < FIRST_WORDS {
            &self.first[i]
        } else {
            &self.rest[i - FIRST_WORDS]
        }
    }
}

/// One rank's posts (see the module doc).
#[derive(Default)]
pub struct Mailbox {
    slots: [Slot; 2],
}

// A slot holds a call in `core::wire`'s four words (kinds, count, root
// and op code, scalar). `post` writes only a real call's words, so every
// field has a meaning; a value outside them would mean the slot was not
// written by `post` (a bug in this module), and guessing a datatype or an
// op would then move or reduce the wrong bytes. Decoding stops instead.

impl Mailbox {
    /// Posts launch `seq`: `call` when it is a single call (None: a group,
    /// posted in `World::posted` beforehand), with `payload` (at most
    /// [`PAYLOAD_BYTES`]) for the others to read.
    pub fn post(&self, seq: u64, op_count: u64, call: Option<&Call>, payload: &[u8]) {
        use Ordering::Relaxed;
        let s = &self.slots[(seq % 2) as usize];
        match call {
            None => s.head.store(GROUP, Relaxed),
            Some(c) => {
                let [head, count, root, scalar] = wire::call_words(c);
                s.head.store(head, Relaxed);
                s.count.store(count, Relaxed);
                s.root.store(root, Relaxed);
                s.scalar.store(scalar, Relaxed);
                s.sendbuff.store(c.sendbuff as u64, Relaxed);
                s.recvbuff.store(c.recvbuff as u64, Relaxed);
            }
        }
        s.op_count.store(op_count, Relaxed);
        debug_assert!(payload.len() <= PAYLOAD_BYTES);
        for (i, chunk) in payload.chunks(8).enumerate() {
            let mut w = [0u8; 8];
            w[..chunk.len()].copy_from_slice(chunk);
            s.word(i).store(u64::from_ne_bytes(w), Relaxed);
        }
        // publishes the fields above; sequentially consistent so that a
        // waiter about to park either sees it or is seen by the wake-up
        s.seq.store(seq + 1, Ordering::SeqCst);
    }

    /// Whether launch `seq` is posted here.
    pub fn has(&self, seq: u64) -> bool {
        self.slots[(seq % 2) as usize].seq.load(Ordering::Acquire) == seq + 1
    }

    /// Reads posted launch `seq` into `into`; false when it is a group (its
    /// calls are in `World::posted`; `into.op_count` is set either way).
    /// Call only once [`Mailbox::has`] returned true for `seq`.
    pub fn load(&self, seq: u64, into: &mut Posted) -> bool {
        use Ordering::Relaxed;
        let s = &self.slots[(seq % 2) as usize];
        into.op_count = s.op_count.load(Relaxed);
        let head = s.head.load(Relaxed);
        if head == GROUP {
            return false;
        }
        let words = [
            head,
            s.count.load(Relaxed),
            s.root.load(Relaxed),
            s.scalar.load(Relaxed),
        ];
        let mut call = wire::read_call(&words).unwrap_or_else(|e| {
            unreachable!("mailbox head {head:#x}: {e}: not what `post` writes")
        });
        call.sendbuff = s.sendbuff.load(Relaxed) as usize;
        call.recvbuff = s.recvbuff.load(Relaxed) as usize;
        into.calls.clear();
        into.calls.push(call);
        true
    }

    /// What agreement compares of posted single call `seq`, as raw words:
    /// func, datatype, op kind, count, root, scalar (not the op's code,
    /// which may legitimately differ between ranks, and sits beside the
    /// root in `core::wire`'s words). Equal keys mean equal
    /// signatures; different keys need the full comparison, which ignores
    /// fields the call does not use (a root, an op).
    pub fn key(&self, seq: u64) -> [u64; 4] {
        use Ordering::Relaxed;
        let s = &self.slots[(seq % 2) as usize];
        [
            s.head.load(Relaxed),
            s.count.load(Relaxed),
            s.root.load(Relaxed) & 0xFFFF_FFFF,
            s.scalar.load(Relaxed),
        ]
    }

    /// Copies the payload of posted launch `seq` into `into` (at most
    /// [`PAYLOAD_BYTES`] / 8 words).
    pub fn payload(&self, seq: u64, into: &mut [u64]) {
        let s = &self.slots[(seq % 2) as usize];
        for (i, w) in into.iter_mut().enumerate() {
            *w = s.word(i).load(Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{DataType, Func, RedOp};

    #[test]
    fn a_post_reads_back_whole_and_slots_alternate() {
        let m = Mailbox::default();
        let c = Call {
            func: Func::ReduceScatter,
            sendbuff: 0x1000,
            recvbuff: 0x2000,
            count: 7,
            datatype: DataType::Bfloat16,
            op: RedOp::PreMulSum(0.25),
            op_code: 5,
            root: 0,
        };
        let payload: Vec<u8> = (0..PAYLOAD_BYTES).map(|i| (i * 7 + 1) as u8).collect();
        m.post(0, 11, Some(&c), &payload);
        assert!(m.has(0) && !m.has(1) && !m.has(2));
        m.post(1, 12, None, &[]);
        assert!(
            m.has(0) && m.has(1),
            "launch 1 leaves launch 0's slot alone"
        );
        let mut p = Posted::default();
        assert!(m.load(0, &mut p));
        assert_eq!((p.op_count, p.calls.as_slice()), (11, [c].as_slice()));
        let mut words = vec![0u64; PAYLOAD_WORDS];
        m.payload(0, &mut words);
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
        assert_eq!(bytes, payload, "every payload byte, in order");
        assert!(!m.load(1, &mut p), "a group is read elsewhere");
        assert_eq!(p.op_count, 12);
        m.post(2, 13, Some(&c), &[]);
        assert!(m.has(2) && !m.has(0), "launch 2 reuses launch 0's slot");
    }

    /// Every field of every call `post` can write decodes to itself.
    #[test]
    fn every_datatype_func_and_op_round_trips() {
        let m = Mailbox::default();
        let mut p = Posted::default();
        let mut seq = 0;
        for func in Func::ALL {
            for datatype in DataType::ALL {
                for op in RedOp::BUILTIN.into_iter().chain([RedOp::PreMulSum(-3.5)]) {
                    let c = Call {
                        func,
                        sendbuff: 8,
                        recvbuff: 16,
                        count: 3,
                        datatype,
                        op,
                        op_code: 9,
                        root: 1,
                    };
                    m.post(seq, seq, Some(&c), &[]);
                    assert!(m.load(seq, &mut p));
                    assert_eq!(p.calls, [c]);
                    seq += 1;
                }
            }
        }
    }

    /// Posts a Float32 Sum AllReduce, then overwrites byte `byte` of the
    /// slot's head with `value`, as a bug writing the slot might.
    fn corrupted(byte: u32, value: u64) -> Mailbox {
        let m = Mailbox::default();
        let c = Call {
            func: Func::AllReduce,
            sendbuff: 0x1000,
            recvbuff: 0x1000,
            count: 4,
            datatype: DataType::Float32,
            op: RedOp::Sum,
            op_code: 0,
            root: 0,
        };
        m.post(0, 0, Some(&c), &[]);
        let head = m.slots[0].head.load(Ordering::Relaxed);
        let shift = 8 * byte;
        m.slots[0].head.store(
            (head & !(0xFF << shift)) | value << shift,
            Ordering::Relaxed,
        );
        m
    }

    /// A head whose datatype byte is no datatype is never read as Int8 (or
    /// as anything): decoding stops and says why.
    #[test]
    #[should_panic(expected = "datatype code 12 is no code this build writes")]
    fn an_unknown_datatype_code_is_not_read_as_int8() {
        corrupted(1, 12).load(0, &mut Posted::default());
    }

    #[test]
    #[should_panic(expected = "op kind 6 is no code this build writes")]
    fn an_unknown_reduction_kind_is_not_read_as_premulsum() {
        corrupted(2, 6).load(0, &mut Posted::default());
    }

    #[test]
    #[should_panic(expected = "function index 10 is no code this build writes")]
    fn an_unknown_op_kind_is_not_indexed() {
        corrupted(0, 10).load(0, &mut Posted::default());
    }

    /// One rank posts launch after launch while another reads each one as
    /// soon as `has` sees it, as ranks do: the reader must see every field
    /// and payload byte of the post, never a mix of two (the release store
    /// of `seq` and the acquire load publish them; Miri checks for races).
    /// The writer reuses a slot only after the reader is done with it, the
    /// two-slot rule of the module doc.
    #[test]
    fn a_post_is_read_whole_from_another_thread() {
        use std::sync::atomic::AtomicU64;
        let launches: u64 = if cfg!(miri) { 6 } else { 2000 };
        let call = |k: u64| Call {
            func: Func::ALL[(k % 8) as usize],
            sendbuff: 0x1000 + 8 * k as usize,
            recvbuff: 0x9000 + 8 * k as usize,
            count: k as usize,
            datatype: DataType::ALL[(k % 12) as usize],
            op: if k.is_multiple_of(3) {
                RedOp::PreMulSum(k as f64 + 0.5)
            } else {
                RedOp::BUILTIN[(k % 5) as usize]
            },
            op_code: k as i32,
            root: (k % 7) as usize,
        };
        let payload = |k: u64| -> Vec<u8> {
            (0..PAYLOAD_BYTES)
                .map(|i| (i as u64 * 31 + k) as u8)
                .collect()
        };
        let wait = |done: &dyn Fn() -> bool| {
            while !done() {
                std::hint::spin_loop();
                std::thread::yield_now();
            }
        };
        let m = Mailbox::default();
        // launches the reader has finished reading
        let read = AtomicU64::new(0);
        std::thread::scope(|s| {
            s.spawn(|| {
                for k in 0..launches {
                    // slot k % 2 last held launch k - 2: wait until it was read
                    wait(&|| read.load(Ordering::Acquire) + 2 > k);
                    m.post(k, 100 + k, Some(&call(k)), &payload(k));
                }
            });
            s.spawn(|| {
                let mut p = Posted::default();
                let mut words = vec![0u64; PAYLOAD_WORDS];
                for k in 0..launches {
                    wait(&|| m.has(k));
                    assert!(m.load(k, &mut p));
                    assert_eq!(
                        (p.op_count, p.calls.as_slice()),
                        (100 + k, [call(k)].as_slice())
                    );
                    m.payload(k, &mut words);
                    let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_ne_bytes()).collect();
                    assert_eq!(bytes, payload(k), "launch {k}");
                    read.store(k + 1, Ordering::Release);
                }
            });
        });
    }

    #[test]
    fn the_call_and_a_small_payload_share_the_first_line() {
        assert_eq!(std::mem::offset_of!(Slot, op_count), 64);
        assert_eq!(std::mem::size_of::<Slot>() % 128, 0);
    }
}
