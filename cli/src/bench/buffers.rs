//! One rank's buffers in a row: where each placement's send and receive
//! buffers lie (nccl-tests' in-place forms), what is written into them
//! before the calls (the verifiable pattern of [`super::data`], or random
//! values for `--fill random`), and the element-wise check after.

use super::data::{Converter, POISON, Pattern, count_clobbered, count_wrong, random_value};
use super::run::{CHECK_CHUNK, GUARD_ELEMS, Plan};
use rankwise::api::Comm;
use rankwise::core::{Element, Func, Result};

/// Where one placement's buffers are, in elements from the allocation base.
pub(super) struct Bufs {
    pub(super) send: usize,
    pub(super) recv: usize,
    /// the allocation the output lies in, and the element the guard starts at
    pub(super) out_base: usize,
    pub(super) guard_at: usize,
}

pub(super) fn bufs(
    p: &Plan,
    pat: &Pattern,
    rank: usize,
    a: usize,
    b: usize,
    in_place: bool,
) -> Bufs {
    let es = p.dtype.size();
    let (q, n) = (p.q, pat.nranks);
    if !in_place {
        return Bufs {
            send: a,
            recv: b,
            out_base: b,
            guard_at: pat.recv_len(q),
        };
    }
    // nccl-tests' in-place forms, on every rank (docs/reference/contracts.md §2)
    let (send_off, recv_off, region) = match p.func {
        Func::AllGather | Func::Gather => (rank * q, 0, n * q),
        Func::ReduceScatter | Func::Scatter => (0, rank * q, n * q),
        _ => (0, 0, q),
    };
    Bufs {
        send: a + send_off * es,
        recv: a + recv_off * es,
        out_base: a,
        guard_at: region,
    }
}

/// The ranges of [`CHECK_CHUNK`] elements that cover `0..len`.
fn chunks(len: usize) -> impl Iterator<Item = std::ops::Range<usize>> {
    (0..len)
        .step_by(CHECK_CHUNK)
        .map(move |lo| lo..len.min(lo + CHECK_CHUNK))
}

/// Poisons the output and its guard, then writes this rank's inputs.
pub(super) fn prepare<T: Element>(
    c: &mut Comm,
    p: &Plan,
    pat: &Pattern,
    conv: &mut Converter<T>,
    bf: &Bufs,
    rank: usize,
) -> Result<()> {
    c.fill(
        bf.out_base,
        (bf.guard_at + GUARD_ELEMS) * p.dtype.size(),
        POISON,
    )?;
    write_inputs(c, p, pat, bf, |part| pat.inputs_in(conv, rank, part))
}

/// Writes this rank's inputs as [`random_value`]s (`--fill random`).
pub(super) fn fill_random<T: Element>(
    c: &mut Comm,
    p: &Plan,
    pat: &Pattern,
    bf: &Bufs,
    rank: usize,
) -> Result<()> {
    write_inputs(c, p, pat, bf, |part| {
        part.map(|i| T::from_f64(random_value(rank, i))).collect()
    })
}

/// Writes the send extent chunk by chunk, `values` giving each chunk's.
fn write_inputs<T: Element>(
    c: &mut Comm,
    p: &Plan,
    pat: &Pattern,
    bf: &Bufs,
    mut values: impl FnMut(std::ops::Range<usize>) -> Vec<T>,
) -> Result<()> {
    let es = p.dtype.size();
    for part in chunks(pat.send_len(p.q)) {
        c.write(bf.send + part.start * es, &values(part))?;
    }
    Ok(())
}

/// Wrong elements on this rank: output mismatches, guard elements written,
/// and (out of place) input elements changed.
#[allow(clippy::too_many_arguments)]
pub(super) fn check<T: Element>(
    c: &mut Comm,
    p: &Plan,
    pat: &Pattern,
    conv: &mut Converter<T>,
    bf: &Bufs,
    rank: usize,
    in_place: bool,
) -> Result<u64> {
    let es = p.dtype.size();
    let mut wrong = 0;
    if pat.has_output(rank) {
        for part in chunks(pat.recv_len(p.q)) {
            let got = c.read::<T>(bf.recv + part.start * es, part.len())?;
            let expected: Vec<T> = part
                .map(|j| conv.expect(pat.expected(rank, p.q, j)))
                .collect();
            wrong += count_wrong(&got, &expected);
        }
        let guard = c.read::<u8>(bf.out_base + bf.guard_at * es, GUARD_ELEMS * es)?;
        wrong += guard.chunks(es).filter(|e| count_clobbered(e) > 0).count() as u64;
    }
    if !in_place {
        for part in chunks(pat.send_len(p.q)) {
            let got = c.read::<T>(bf.send + part.start * es, part.len())?;
            wrong += count_wrong(&got, &pat.inputs_in(conv, rank, part));
        }
    }
    Ok(wrong)
}

#[cfg(test)]
mod tests {
    use super::super::run::{buffer_elems, call};
    use super::*;
    use rankwise::core::{DataType, RedOp};

    #[test]
    fn chunks_cover_every_element_once() {
        for len in [0, 1, CHECK_CHUNK - 1, CHECK_CHUNK, 3 * CHECK_CHUNK + 7] {
            let parts: Vec<_> = chunks(len).collect();
            assert_eq!(parts.len(), len.div_ceil(CHECK_CHUNK), "{len}");
            let mut next = 0;
            for p in parts {
                assert_eq!(p.start, next);
                assert!(!p.is_empty() && p.len() <= CHECK_CHUNK);
                next = p.end;
            }
            assert_eq!(next, len);
        }
    }

    #[test]
    fn the_random_fill_writes_each_ranks_values_over_its_whole_input() {
        // 3 ranks, ReduceScatter (inputs N·q long) of bfloat16, in place:
        // every element of the send extent, on every rank, is the
        // generator's value rounded to the type
        let q = CHECK_CHUNK + 3;
        let p = Plan {
            func: Func::ReduceScatter,
            dtype: DataType::Bfloat16,
            op: Some(RedOp::Sum),
            root: None,
            q,
        };
        let wrong = rankwise::local::launch(3, |c| {
            let pat = Pattern::new(p.func, p.dtype, RedOp::Sum, 3, 0, 0);
            let (ea, eb) = buffer_elems([&p], 3).unwrap();
            let (a, b) = (c.alloc_elems(ea, p.dtype)?, c.alloc_elems(eb, p.dtype)?);
            let bf = bufs(&p, &pat, c.rank(), a, b, true);
            fill_random::<half::bf16>(c, &p, &pat, &bf, c.rank())?;
            let got = c.read::<half::bf16>(bf.send, 3 * q)?;
            let r = c.rank();
            Ok((0..3 * q)
                .filter(|&i| got[i] != half::bf16::from_f64(random_value(r, i)))
                .count())
        })
        .unwrap();
        assert_eq!(wrong, vec![0, 0, 0]);
    }

    #[test]
    fn the_checker_finds_one_wrong_element_in_any_chunk() {
        // 2 ranks, AllGather of 3 chunks and a bit per rank, out of place
        let q = 3 * CHECK_CHUNK + 5;
        let p = Plan {
            func: Func::AllGather,
            dtype: DataType::Int32,
            op: None,
            root: None,
            q,
        };
        let got = rankwise::local::launch(2, |c| {
            let pat = Pattern::new(p.func, p.dtype, RedOp::Sum, 2, 0, 9);
            let mut conv = Converter::<i32>::new(2, RedOp::Sum);
            let (ea, eb) = buffer_elems([&p], 2).unwrap();
            let (a, b) = (c.alloc_elems(ea, p.dtype)?, c.alloc_elems(eb, p.dtype)?);
            let bf = bufs(&p, &pat, c.rank(), a, b, false);
            prepare(c, &p, &pat, &mut conv, &bf, c.rank())?;
            call(c, &p, &bf)?;
            let right = check(c, &p, &pat, &mut conv, &bf, c.rank(), false)?;
            // rank 1 breaks an output element in the last chunk of the
            // second block and an input element in the second chunk
            if c.rank() == 1 {
                let j = q + 3 * CHECK_CHUNK + 1;
                let v = c.read::<i32>(bf.recv + 4 * j, 1)?[0];
                c.write(bf.recv + 4 * j, &[v + 1])?;
                let i = CHECK_CHUNK + 2;
                let v = c.read::<i32>(bf.send + 4 * i, 1)?[0];
                c.write(bf.send + 4 * i, &[v ^ 1])?;
            }
            let wrong = check(c, &p, &pat, &mut conv, &bf, c.rank(), false)?;
            Ok((right, wrong))
        })
        .unwrap();
        assert_eq!(got, vec![(0, 0), (0, 2)]);
    }
}
