//! A launch's post as the words the agreement exchange carries: a head of
//! fixed size (launch number, call count, first call) and, for groups of
//! several collectives, the remaining calls. Decoding refuses codes this
//! build does not know instead of guessing.
//!
//! A call packs into four words (function, datatype and op kind; count;
//! root and op code; the op's scalar) and the head into five, so a head
//! with a small input behind it fits the 64-byte line a reader on the
//! shared-memory lane fetches.

use crate::core::{Call, DataType, Error, ErrorKind, Func, Posted, RedOp, Result};

/// Words per call: function, datatype and op kind in one; count; root and
/// op code in one; the op's scalar.
pub const CALL_WORDS: usize = 4;
/// Words of the head: launch number, then the first call with the call
/// count beside its kinds.
pub const HEAD_WORDS: usize = 1 + CALL_WORDS;

fn op_parts(op: RedOp) -> (u64, u64) {
    match op {
        RedOp::Sum => (0, 0),
        RedOp::Prod => (1, 0),
        RedOp::Max => (2, 0),
        RedOp::Min => (3, 0),
        RedOp::Avg => (4, 0),
        RedOp::PreMulSum(s) => (5, s.to_bits()),
    }
}

/// The op kind of PreMulSum, whose scalar compares as a float.
const PREMUL: u64 = 5;

fn call_words(c: &Call) -> [u64; CALL_WORDS] {
    let (kind, scalar) = op_parts(c.op);
    // a root is below the rank count (checked before any call is posted)
    // and a datatype code below 256, so neither loses bits
    [
        c.func.index() as u64 | (c.datatype.code() as u64 & 0xff) << 8 | kind << 16,
        c.count as u64,
        c.root as u32 as u64 | (c.op_code as u32 as u64) << 32,
        scalar,
    ]
}

fn bad(what: &str, v: u64) -> Error {
    Error::new(
        ErrorKind::Internal,
        format!(
            "agreement exchange: a peer sent {what} {v}, which this build does not know (are all ranks the same rankwise?)"
        ),
    )
}

fn read_call(w: &[u64]) -> Result<Call> {
    let (f, dt, kind) = (w[0] & 0xff, (w[0] >> 8) & 0xff, (w[0] >> 16) & 0xff);
    let func = *Func::ALL
        .get(f as usize)
        .ok_or_else(|| bad("function index", f))?;
    let datatype = DataType::from_code(dt as i32).ok_or_else(|| bad("datatype code", dt))?;
    let op = match kind {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        PREMUL => RedOp::PreMulSum(f64::from_bits(w[3])),
        k => return Err(bad("op kind", k)),
    };
    Ok(Call {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: w[1] as usize,
        datatype,
        op,
        op_code: (w[2] >> 32) as u32 as i32,
        root: w[2] as u32 as usize,
    })
}

/// The head of a launch numbered `op_count` of `calls`.
pub fn head(op_count: u64, calls: &[Call]) -> [u64; HEAD_WORDS] {
    let mut h = [0u64; HEAD_WORDS];
    h[0] = op_count;
    if let Some(c) = calls.first() {
        h[1..].copy_from_slice(&call_words(c));
    }
    h[1] |= (calls.len() as u64) << 32;
    h
}

/// Whether the heads in `slots` (one per rank, `stride` words apart) all
/// post one and the same collective, as [`crate::core::agree`] sees it:
/// equal function, datatype and count, and equal op (when it reduces) and
/// root (when it is rooted). True only when the agreement would find no
/// mismatch, so the posts need not be decoded; false says nothing more.
pub fn one_same_call(slots: &[u64], stride: usize) -> bool {
    // head words: 1 call count and kinds, 2 count, 3 root and op code, 4
    // op scalar
    let h0 = &slots[..HEAD_WORDS];
    let Some(func) = Func::ALL.get((h0[1] & 0xff) as usize) else {
        return false;
    };
    let kind = (h0[1] >> 16) & 0xff;
    // one call, and a PreMulSum scalar compares as a float: NaN equals nothing
    if h0[1] >> 32 != 1 || (kind == PREMUL && f64::from_bits(h0[4]).is_nan()) {
        return false;
    }
    // the op kind counts only when the call reduces, the root only when rooted
    let kinds: u64 = if func.reduces() { !0 } else { !(0xff << 16) };
    let (scalar, root): (u64, u64) = (
        if func.reduces() { !0 } else { 0 },
        if func.is_rooted() { 0xffff_ffff } else { 0 },
    );
    slots.chunks(stride).all(|h| {
        (h[1] ^ h0[1]) & kinds == 0
            && h[2] == h0[2]
            && (h[3] ^ h0[3]) & root == 0
            && (h[4] ^ h0[4]) & scalar == 0
    })
}

/// A post with the calls its head holds; [`rest_calls`] says how many more
/// follow.
pub fn read_head(h: &[u64]) -> Result<(Posted, usize)> {
    let mut p = Posted {
        op_count: h[0],
        calls: Vec::new(),
    };
    let n = (h[1] >> 32) as usize;
    if n > 0 {
        p.calls.push(read_call(&h[1..])?);
    }
    Ok((p, n))
}

/// Calls of a post beyond its head's.
pub fn rest_calls(total: usize) -> usize {
    total.saturating_sub(1)
}

/// The calls beyond the head's, as words.
pub fn rest(calls: &[Call]) -> Vec<u64> {
    calls.iter().skip(1).flat_map(call_words).collect()
}

/// Appends the calls in `words` to `p`.
pub fn read_rest(p: &mut Posted, words: &[u64]) -> Result<()> {
    for w in words.chunks(CALL_WORDS) {
        p.calls.push(read_call(w)?);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn a_group_travels_whole() {
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
        let empty = Posted::default();
        assert_eq!(read_head(&head(0, &[])).unwrap(), (empty, 0));
    }

    #[test]
    fn unknown_codes_are_refused_not_guessed() {
        let mut h = head(1, &[call(Func::AllReduce, RedOp::Sum, 0)]);
        h[1] = h[1] & !(0xff << 8) | 77 << 8; // datatype code
        let e = read_head(&h).unwrap_err();
        assert!(e.message.contains("datatype code 77"), "{e}");
    }

    /// The words' shortcut must never pass posts the agreement refuses,
    /// and must pass every single call posted alike on every rank.
    #[test]
    fn the_shortcut_passes_exactly_what_agreement_passes() {
        use crate::core::agree;
        use proptest::prelude::*;
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
}
