//! The store's decoders fed what a peer could send: arbitrary bytes, and
//! valid frames mutated (bytes flipped, cut, inserted, a length field set
//! to anything). Whatever comes, a decoder answers a value or an error,
//! never panics, and holds at most a small multiple of the bytes it was
//! given (counted by the test binary's allocator); what it encodes it
//! decodes back unchanged.

use super::codec::{self, MAX_FRAME, OwnedItem, Request};
use super::{Item, Missing, Read, Share, Wait};
use crate::core::allocations::peak_of;
use proptest::collection::vec;
use proptest::prelude::*;
use std::time::{Duration, Instant};

/// The most a decoder may hold for `n` bytes of input: each byte of an
/// item, a party or a share becomes at most 8 bytes of its decoded form,
/// plus a constant for the first allocations of each vector.
fn bound(n: usize) -> usize {
    8 * n + 4096
}

fn key() -> impl Strategy<Value = String> {
    "[a-z0-9/.>]{0,12}"
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    vec(any::<u8>(), 0..max)
}

fn read() -> impl Strategy<Value = Read> {
    prop_oneof![Just(Read::Now), Just(Read::Later), Just(Read::Never)]
}

fn item() -> impl Strategy<Value = OwnedItem> {
    (
        key(),
        vec(any::<u32>(), 0..5),
        any::<u32>(),
        proptest::option::of(bytes(24)),
        read(),
    )
        .prop_map(|(key, owners, me, value, read)| OwnedItem {
            key,
            owners: owners.into_iter().map(|o| o as usize).collect(),
            me: me as usize,
            value,
            read,
        })
}

fn request() -> impl Strategy<Value = Request> {
    prop_oneof![
        (key(), bytes(40)).prop_map(|(key, value)| Request::Set { key, value }),
        (key(), any::<u32>(), any::<u64>()).prop_map(|(key, owner, wait_ms)| Request::Get {
            key,
            owner: owner as usize,
            wait_ms
        }),
        (any::<u32>(), proptest::option::of("[ -~]{0,20}")).prop_map(|(owner, reason)| {
            Request::Finish {
                owner: owner as usize,
                reason,
            }
        }),
        (
            any::<u64>(),
            proptest::option::of((any::<u32>(), bytes(20))),
            vec(item(), 0..4)
        )
            .prop_map(|(wait_ms, note, items)| Request::Exchange {
                wait_ms,
                note: note.map(|(o, b)| (o as usize, b)),
                items,
            }),
        any::<u32>().prop_map(|owner| Request::LastNote {
            owner: owner as usize
        }),
    ]
}

/// `r`'s body as a client writes it (the writers take a deadline: the
/// wait is then set to `r`'s own).
fn body_of(r: &Request) -> Vec<u8> {
    let mut out = Vec::new();
    let later = Instant::now() + Duration::from_secs(1);
    match r {
        Request::Set { key, value } => codec::put_set(&mut out, key, value),
        Request::Get {
            key,
            owner,
            wait_ms,
        } => {
            codec::put_get(&mut out, key, *owner, later);
            let at = out.len() - 8;
            out[at..].copy_from_slice(&wait_ms.to_le_bytes());
        }
        Request::Finish { owner, reason } => codec::put_finish(&mut out, *owner, reason.as_deref()),
        Request::Exchange {
            wait_ms,
            note,
            items,
        } => {
            let views: Vec<Item<'_>> = items.iter().map(OwnedItem::view).collect();
            let note = note.as_ref().map(|(o, b)| (*o, b.as_slice()));
            codec::put_exchange(&mut out, &views, note, later);
            out[1..9].copy_from_slice(&wait_ms.to_le_bytes());
        }
        Request::LastNote { owner } => codec::put_last_note(&mut out, *owner),
    }
    out
}

/// What a hostile peer does to a frame on its way.
#[derive(Debug, Clone)]
enum Mutation {
    Flip {
        at: usize,
        bits: u8,
    },
    Cut {
        at: usize,
    },
    Insert {
        at: usize,
        bytes: Vec<u8>,
    },
    /// a u32 (a length or a count, when it lands on one) set to `value`
    Word {
        at: usize,
        value: u32,
    },
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let huge = prop_oneof![
        Just(u32::MAX),
        Just(1u32 << 31),
        Just(MAX_FRAME as u32 + 1),
        Just(1 << 20),
        0u32..64,
        any::<u32>()
    ];
    prop_oneof![
        (any::<usize>(), 1u8..).prop_map(|(at, bits)| Mutation::Flip { at, bits }),
        any::<usize>().prop_map(|at| Mutation::Cut { at }),
        (any::<usize>(), bytes(16)).prop_map(|(at, bytes)| Mutation::Insert { at, bytes }),
        (any::<usize>(), huge).prop_map(|(at, value)| Mutation::Word { at, value }),
    ]
}

fn mutate(b: &mut Vec<u8>, m: &Mutation) {
    let n = b.len();
    match m {
        Mutation::Flip { at, bits } if n > 0 => b[at % n] ^= bits,
        Mutation::Cut { at } => b.truncate(at % (n + 1)),
        Mutation::Insert { at, bytes } => {
            let at = at % (n + 1);
            b.splice(at..at, bytes.iter().copied());
        }
        Mutation::Word { at, value } if n >= 4 => {
            let at = at % (n - 3);
            b[at..at + 4].copy_from_slice(&value.to_le_bytes());
        }
        _ => {}
    }
}

/// Every answer decoder on `body`, for a request of `items`: each returns,
/// within the bound.
fn read_every_answer(body: &[u8], items: &[Item<'_>]) -> Result<(), TestCaseError> {
    let ((), peak) = peak_of(|| {
        let _ = codec::read_ok(body);
        let _ = codec::read_share(body);
        let _ = codec::read_note(body);
        let _ = codec::read_shares(body, items);
    });
    prop_assert!(peak <= bound(body.len()), "{peak} bytes for {}", body.len());
    Ok(())
}

fn share() -> impl Strategy<Value = Share> {
    prop_oneof![
        bytes(24).prop_map(Ok),
        Just(Err(Missing::Timeout)),
        proptest::option::of("[ -~]{0,16}").prop_map(|reason| Err(Missing::Finished { reason })),
        vec(
            (
                "[ -~]{0,12}",
                0usize..9,
                0usize..9,
                proptest::option::of(bytes(20))
            ),
            0..4
        )
        .prop_map(|steps| Err(Missing::Cycle(
            steps
                .into_iter()
                .map(|(key, party, awaits, note)| Wait {
                    key,
                    party,
                    awaits,
                    note
                })
                .collect()
        ))),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 300, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_a_request_or_an_error_within_the_bound(body in bytes(600)) {
        let (_, peak) = peak_of(|| codec::decode_request(&body));
        prop_assert!(peak <= bound(body.len()), "{peak} bytes for {}", body.len());
        if body.len() >= 4 {
            let _ = codec::frame_len(&body, MAX_FRAME);
        }
        let it = Item { key: "k", owners: &[0, 1, 2], me: 0, value: None, read: Read::Now };
        read_every_answer(&body, &[it, Item { read: Read::Later, ..it }])?;
    }

    #[test]
    fn requests_decode_as_sent_and_mutated_ones_are_refused_or_bounded(
        r in request(),
        ms in vec(mutation(), 1..4),
    ) {
        let body = body_of(&r);
        prop_assert_eq!(codec::decode_request(&body), Ok(r));
        let mut bad = body;
        for m in &ms {
            mutate(&mut bad, m);
        }
        let (_, peak) = peak_of(|| codec::decode_request(&bad));
        prop_assert!(peak <= bound(bad.len()), "{peak} bytes for {}", bad.len());
    }

    #[test]
    fn answers_decode_as_sent_and_mutated_ones_are_refused_or_bounded(
        items in vec(item(), 0..4),
        shares in vec(share(), 0..20),
        ms in vec(mutation(), 1..4),
    ) {
        // one share per party of each item read now
        let mut next = shares.into_iter().cycle();
        let answers: Vec<Vec<Share>> = items
            .iter()
            .map(|it| match it.read {
                Read::Now => it.owners.iter().filter_map(|_| next.next()).collect(),
                _ => Vec::new(),
            })
            .collect();
        let complete = answers.iter().zip(&items).all(|(a, it)| it.read != Read::Now || a.len() == it.owners.len());
        prop_assume!(complete);
        let views: Vec<Item<'_>> = items.iter().map(OwnedItem::view).collect();
        let mut body = Vec::new();
        codec::put_shares(&mut body, &answers);
        prop_assert_eq!(body.len(), 1 + codec::shares_len(&answers));
        prop_assert_eq!(codec::read_shares(&body, &views), Ok(answers));
        for m in &ms {
            mutate(&mut body, m);
        }
        read_every_answer(&body, &views)?;
    }
}

#[test]
fn an_answer_with_more_shares_than_the_request_reads_is_garbled() {
    let it = Item {
        key: "k",
        owners: &[0, 1],
        me: 0,
        value: None,
        read: Read::Now,
    };
    let three = vec![vec![Err(Missing::Timeout); 3]];
    let mut body = Vec::new();
    codec::put_shares(&mut body, &three);
    let e = codec::read_shares(&body, &[it]).unwrap_err();
    assert_eq!(
        e,
        codec::Bad::Garbled("3 shares of exchange k, which has 2 to read".into())
    );
    // a million one-byte shares claimed where two are read: refused
    // before anything is allocated for them
    let mut body = vec![codec::OK];
    body.extend_from_slice(&1_000_000u32.to_le_bytes());
    body.extend(std::iter::repeat_n(codec::TIMEOUT, 1_000_000));
    let (r, peak) = peak_of(|| codec::read_shares(&body, &[it]));
    assert!(r.is_err());
    assert!(peak < 4096, "{peak}");
}
