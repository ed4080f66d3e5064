//! A launch's post as the words the agreement allgather carries: a head of
//! fixed size (launch number, call count, first call) and, for groups of
//! several collectives, the remaining calls. Decoding refuses codes this
//! build does not know instead of guessing.

use crate::core::{Call, DataType, Error, ErrorKind, Func, Posted, RedOp, Result};

/// Words per call: func, datatype, op kind, op scalar, count, root, op code.
pub const CALL_WORDS: usize = 7;
/// Words of the head: launch number, call count, first call.
pub const HEAD_WORDS: usize = 2 + CALL_WORDS;

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

fn call_words(c: &Call) -> [u64; CALL_WORDS] {
    let (kind, scalar) = op_parts(c.op);
    [
        c.func.index() as u64,
        c.datatype.code() as u64,
        kind,
        scalar,
        c.count as u64,
        c.root as u64,
        c.op_code as u32 as u64,
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
    let func = *Func::ALL
        .get(w[0] as usize)
        .ok_or_else(|| bad("function index", w[0]))?;
    let datatype = i32::try_from(w[1])
        .ok()
        .and_then(DataType::from_code)
        .ok_or_else(|| bad("datatype code", w[1]))?;
    let op = match w[2] {
        0 => RedOp::Sum,
        1 => RedOp::Prod,
        2 => RedOp::Max,
        3 => RedOp::Min,
        4 => RedOp::Avg,
        5 => RedOp::PreMulSum(f64::from_bits(w[3])),
        k => return Err(bad("op kind", k)),
    };
    Ok(Call {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: w[4] as usize,
        datatype,
        op,
        op_code: w[6] as u32 as i32,
        root: w[5] as usize,
    })
}

/// The head of `p`.
pub fn head(p: &Posted) -> [u64; HEAD_WORDS] {
    let mut h = [0u64; HEAD_WORDS];
    h[0] = p.op_count;
    h[1] = p.calls.len() as u64;
    if let Some(c) = p.calls.first() {
        h[2..].copy_from_slice(&call_words(c));
    }
    h
}

/// A post with the calls its head holds; [`rest_calls`] says how many more
/// follow.
pub fn read_head(h: &[u64]) -> Result<(Posted, usize)> {
    let mut p = Posted {
        op_count: h[0],
        calls: Vec::new(),
    };
    let n = h[1] as usize;
    if n > 0 {
        p.calls.push(read_call(&h[2..])?);
    }
    Ok((p, n))
}

/// Calls of a post beyond its head's.
pub fn rest_calls(total: usize) -> usize {
    total.saturating_sub(1)
}

/// The calls of `p` beyond its head's, as words.
pub fn rest(p: &Posted) -> Vec<u64> {
    p.calls.iter().skip(1).flat_map(call_words).collect()
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
        let (mut got, total) = read_head(&head(&p)).unwrap();
        assert_eq!(total, 3);
        read_rest(&mut got, &rest(&p)).unwrap();
        assert_eq!(got, p);
        let empty = Posted::default();
        assert_eq!(read_head(&head(&empty)).unwrap(), (empty, 0));
    }

    #[test]
    fn unknown_codes_are_refused_not_guessed() {
        let mut h = head(&Posted {
            op_count: 1,
            calls: vec![call(Func::AllReduce, RedOp::Sum, 0)],
        });
        h[3] = 77; // datatype code
        let e = read_head(&h).unwrap_err();
        assert!(e.message.contains("datatype code 77"), "{e}");
    }
}
