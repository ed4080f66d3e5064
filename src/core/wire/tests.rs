use super::*;
use proptest::prelude::*;

fn call(func: Func, op: RedOp, root: usize) -> Call {
    Call {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: 1 << 40,
        datatype: DataType::Bfloat16,
        op,
        op_code: 7,
        root,
    }
}

#[test]
fn every_func_datatype_and_op_crosses_as_itself() {
    for func in Func::ALL {
        for datatype in DataType::ALL {
            for op in RedOp::BUILTIN
                .into_iter()
                .chain([RedOp::PreMulSum(-3.5), RedOp::PreMulSum(f64::MAX)])
            {
                let c = Call {
                    func,
                    sendbuff: 0,
                    recvbuff: 0,
                    count: usize::MAX,
                    datatype,
                    op,
                    op_code: i32::MIN,
                    root: u32::MAX as usize,
                };
                assert_eq!(read_call(&call_words(&c)).unwrap(), c);
                assert_eq!(decode_call(&encode_call(9, &c)).unwrap(), (9, c));
            }
        }
    }
}

#[test]
fn a_group_travels_whole_as_words_and_as_bytes() {
    let p = Posted {
        op_count: 0x1234,
        calls: vec![
            call(Func::Reduce, RedOp::PreMulSum(-0.375), 3),
            call(Func::AllGather, RedOp::Sum, 0),
            call(Func::Scatter, RedOp::Max, 2),
        ],
    };
    let (mut got, total) = read_head(&head(p.op_count, &p.calls)).unwrap();
    assert_eq!(total, 3);
    read_rest(&mut got, &rest(&p.calls)).unwrap();
    assert_eq!(got, p);
    let bytes = encode(&p);
    assert_eq!(bytes.len(), 8 * (HEAD_WORDS + 2 * CALL_WORDS));
    assert_eq!(decode(&bytes).unwrap(), p);
    let empty = Posted::default();
    assert_eq!(read_head(&head(0, &[])).unwrap(), (empty.clone(), 0));
    assert_eq!(decode(&encode(&empty)).unwrap(), empty);
    assert_eq!(encode(&empty).len(), 8 * HEAD_WORDS);
}

#[test]
fn unknown_codes_are_refused_not_guessed() {
    let c = call(Func::AllReduce, RedOp::Sum, 0);
    let at = |byte: u32, v: u64| {
        let mut w = call_words(&c);
        w[0] = w[0] & !(0xff << (8 * byte)) | v << (8 * byte);
        read_call(&w).unwrap_err().message
    };
    assert!(at(0, 10).contains("function index 10"), "{}", at(0, 10));
    assert!(at(1, 12).contains("datatype code 12"), "{}", at(1, 12));
    assert!(at(2, 6).contains("op kind 6"), "{}", at(2, 6));
    let e = read_call(&[0; 3]).unwrap_err();
    assert_eq!(e.kind, ErrorKind::Internal);
    assert!(e.message.contains("a call of 3 words"), "{e}");
}

#[test]
fn lengths_that_are_no_whole_post_are_refused() {
    let p = Posted {
        op_count: 1,
        calls: vec![call(Func::AllReduce, RedOp::Sum, 0); 2],
    };
    let bytes = encode(&p);
    for cut in [0, 1, 8, 39, bytes.len() - 8, bytes.len() - 1] {
        assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut long = bytes.clone();
    long.extend_from_slice(&[0; 32]);
    let e = decode(&long).unwrap_err();
    assert!(
        e.message
            .contains("its head counts 2 calls, its 104 bytes hold 3"),
        "{e}"
    );
    // a head that claims four billion calls in 40 bytes
    let mut huge = encode(&Posted {
        op_count: 1,
        calls: vec![call(Func::AllReduce, RedOp::Sum, 0)],
    });
    huge[12..16].copy_from_slice(&u32::MAX.to_le_bytes());
    assert!(decode(&huge).is_err());
    assert!(decode_call(&bytes).unwrap_err().message.contains("2 calls"));
    assert!(read_head(&[1, 2]).is_err());
    assert!(read_rest(&mut Posted::default(), &[0; 5]).is_err());
}

#[test]
fn fnv1a_is_the_published_function() {
    // the FNV-1a test vectors: the empty input is the offset basis
    assert_eq!(fnv1a(b""), 0xcbf2_9ce4_8422_2325);
    assert_eq!(fnv1a(b"a"), 0xaf63_dc4c_8601_ec8c);
    assert_eq!(fnv1a(b"foobar"), 0x8594_4171_f739_67e8);
}

proptest! {
    /// Any bytes at all: a post or an error, never a panic nor more held
    /// than a small multiple of the bytes; and a post that decodes encodes
    /// back to the same bytes.
    #[test]
    fn any_bytes_decode_to_a_post_or_an_error(b in proptest::collection::vec(any::<u8>(), 0..200)) {
        let (decoded, peak) = crate::core::allocations::peak_of(|| decode(&b));
        prop_assert!(peak <= 8 * b.len() + 1024, "{peak} bytes for {}", b.len());
        if let Ok(p) = decoded {
            // only the buffer addresses are not carried, and they decode as 0;
            // bits no field uses (above a datatype, an op kind) are dropped
            let again = encode(&p);
            prop_assert_eq!(encode(&decode(&again).unwrap()), again);
        }
        let _ = decode_call(&b);
    }

    /// Valid posts, then bytes flipped, cut, inserted or a word set to
    /// anything (the call count included): decoded as sent before, and
    /// after a post or an error, never more held than a small multiple of
    /// the bytes given.
    #[test]
    fn mutated_posts_decode_or_are_refused_within_a_bound(
        op_count in any::<u64>(),
        calls in proptest::collection::vec((0..Func::ALL.len(), 0..DataType::ALL.len(), any::<u32>(), any::<u64>()), 1..6),
        cuts in proptest::collection::vec((any::<usize>(), any::<u64>(), 0u8..3), 1..4),
    ) {
        let calls: Vec<Call> = calls
            .into_iter()
            .map(|(f, d, root, count)| Call {
                func: Func::ALL[f],
                datatype: DataType::ALL[d],
                count: count as usize,
                ..call(Func::ALL[f], RedOp::PreMulSum(count as f64), root as usize)
            })
            .collect();
        let post = Posted { op_count, calls };
        let mut b = encode(&post);
        prop_assert_eq!(decode(&b).unwrap(), post);
        for (at, value, how) in cuts {
            let n = b.len();
            match how {
                0 if n > 0 => b[at % n] ^= value as u8 | 1,
                1 => b.truncate(at % (n + 1)),
                _ if n >= 8 => {
                    let at = at % (n - 7);
                    b[at..at + 8].copy_from_slice(&value.to_le_bytes());
                }
                _ => {}
            }
        }
        let (_, peak) = crate::core::allocations::peak_of(|| decode(&b));
        prop_assert!(peak <= 8 * b.len() + 1024, "{peak} bytes for {}", b.len());
    }

    /// Whole posts with any words in them: decoding never panics.
    #[test]
    fn any_words_in_a_whole_post_decode_or_are_refused(
        words in proptest::collection::vec(any::<u64>(), HEAD_WORDS..HEAD_WORDS + 12),
        calls in 0u64..4,
    ) {
        let mut w = words;
        w[1] = w[1] & LOW | calls << 32;
        let b: Vec<u8> = w.iter().flat_map(|x| x.to_le_bytes()).collect();
        let _ = decode(&b);
        let _ = one_same_call(&w, HEAD_WORDS);
    }
}

/// The words' shortcut must never pass posts the agreement refuses,
/// and must pass every single call posted alike on every rank.
#[test]
fn the_shortcut_passes_exactly_what_agreement_passes() {
    use crate::core::agree;
    let ops = [
        RedOp::Sum,
        RedOp::Max,
        RedOp::Avg,
        RedOp::PreMulSum(0.5),
        RedOp::PreMulSum(-0.0),
        RedOp::PreMulSum(0.0),
        RedOp::PreMulSum(f64::NAN),
    ];
    // a base call, and per rank a change of at most one of its fields
    // (or a second call), so near-misses are common
    let base = (0..Func::ALL.len(), 0..3usize, 0..ops.len(), 0..2usize);
    let changes = proptest::collection::vec((0..9usize, 0..ops.len(), 0..2u64), 1..4);
    let posts = (base, changes).prop_map(move |((f, count, op, root), changes)| {
        let call = Call {
            func: Func::ALL[f],
            sendbuff: 0,
            recvbuff: 0,
            count,
            datatype: DataType::ALL[0],
            op: ops[op],
            op_code: 0,
            root,
        };
        changes
            .into_iter()
            .map(|(what, other_op, op_count)| {
                let mut c = call;
                match what {
                    1 => c.count += 1,
                    2 => c.datatype = DataType::ALL[1],
                    3 => c.op = ops[other_op],
                    4 => c.root += 1,
                    5 => c.op_code = 9,
                    6 => c.func = Func::ALL[(f + 1) % Func::ALL.len()],
                    // the same op kind with another scalar
                    8 => c.op = RedOp::PreMulSum(0.25),
                    _ => {}
                }
                let calls = if what == 7 { vec![c, c] } else { vec![c] };
                (calls, op_count)
            })
            .collect::<Vec<_>>()
    });
    proptest!(|(posts in posts)| {
        let stride = HEAD_WORDS + 3;
        let mut slots = Vec::new();
        let mut all = Vec::new();
        for (calls, op_count) in &posts {
            slots.extend(head(*op_count, calls));
            slots.extend([0xfeed; 3]);
            all.push(Posted { op_count: *op_count, calls: calls.clone() });
        }
        let agreed = agree::collectives(&all).is_ok();
        if one_same_call(&slots, stride) {
            prop_assert!(agreed, "{all:?}");
        }
        let first = &posts[0].0;
        let alike = first.len() == 1
            && !matches!(first[0].op, RedOp::PreMulSum(s) if s.is_nan() || s == 0.0)
            && posts.iter().all(|(c, _)| c.len() == 1 && c[0].signature() == first[0].signature());
        if alike {
            prop_assert!(one_same_call(&slots, stride), "{all:?}");
        }
    });
}

#[test]
fn a_notice_carries_its_reason_and_is_never_a_post() {
    let why =
        "its call was refused there (ncclInvalidArgument on rank 2: AllReduce: recvbuff is NULL)";
    let b = encode_notice(why);
    assert_eq!(notice(&b).as_deref(), Some(why));
    assert!(decode(&b).is_err(), "a notice decodes as no post");
    let post = encode_calls(3, &[call(Func::AllReduce, RedOp::Sum, 0)]);
    assert_eq!(notice(&post), None);
    assert_eq!(notice(b"rkw"), None, "too short to be one");
    // a long reason is cut on a character boundary, never beyond the bound
    let long = "é".repeat(NOTICE_BYTES);
    let cut = notice(&encode_notice(&long)).unwrap();
    assert_eq!(cut.len(), NOTICE_BYTES);
    assert!(long.starts_with(&cut));
}
