//! Lowering AlltoAllv (torch's `all_to_all_single` with split sizes) to
//! what NCCL runs for it: one group of Send/Recv pairs in peer order. Any
//! engine receives the pairs; none needs an AlltoAllv of its own.

use super::{Error, ErrorKind, Func, Result};

/// One Send or Recv of a lowered AlltoAllv.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PeerCall {
    pub func: Func,
    pub peer: usize,
    /// Byte offset of the call's block in the input (Send) or output (Recv).
    pub offset: usize,
    pub count: usize,
    /// False for a zero-count pair: it is not traced (PyTorch sends no
    /// empty block) but still runs, so every split is checked against its
    /// partner's.
    pub traced: bool,
}

/// The split sizes of one side of an AlltoAll(v) with `len` elements on
/// `n` ranks: `splits` as given, or `n` equal blocks when None.
pub fn splits(n: usize, what: &str, len: usize, splits: Option<&[usize]>) -> Result<Vec<usize>> {
    let Some(s) = splits else {
        if len.is_multiple_of(n) {
            return Ok(vec![len / n; n]);
        }
        return Err(Error::new(
            ErrorKind::BadLength,
            format!(
                "AlltoAll: {what} has {len} elements, expected a multiple of {n} ranks when no split sizes are given"
            ),
        ));
    };
    if s.len() != n {
        return Err(Error::new(
            ErrorKind::BadLength,
            format!(
                "AlltoAll: {what} split sizes have {} entries, expected one per rank ({n})",
                s.len()
            ),
        ));
    }
    let sum = s.iter().try_fold(0usize, |a, x| a.checked_add(*x));
    if sum != Some(len) {
        let sum = sum.map_or("more than the address space".to_string(), |s| s.to_string());
        return Err(Error::new(
            ErrorKind::BadLength,
            format!(
                "AlltoAll: {what} has {len} elements, expected the sum of its split sizes {s:?} = {sum}"
            ),
        ));
    }
    Ok(s.to_vec())
}

/// The Send/Recv pairs of an AlltoAllv whose elements are `elem_size`
/// bytes: for each peer in order, the Send of `input_splits[peer]`
/// elements from their offset in the input, then the Recv of
/// `output_splits[peer]` elements at their offset in the output.
pub fn all_to_all_v(
    elem_size: usize,
    input_splits: &[usize],
    output_splits: &[usize],
) -> Vec<PeerCall> {
    let offsets = |splits: &[usize]| -> Vec<usize> {
        splits
            .iter()
            .scan(0, |acc, x| {
                let at = *acc;
                *acc += x;
                Some(at * elem_size)
            })
            .collect()
    };
    let (in_off, out_off) = (offsets(input_splits), offsets(output_splits));
    let mut calls = Vec::with_capacity(2 * input_splits.len());
    for peer in 0..input_splits.len() {
        for (func, count, offset) in [
            (Func::Send, input_splits[peer], in_off[peer]),
            (Func::Recv, output_splits[peer], out_off[peer]),
        ] {
            calls.push(PeerCall {
                func,
                peer,
                offset,
                count,
                traced: count != 0,
            });
        }
    }
    calls
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pairs_go_in_peer_order_at_prefix_sum_offsets() {
        let calls = all_to_all_v(4, &[2, 0, 3], &[1, 5, 0]);
        let got: Vec<(Func, usize, usize, usize, bool)> = calls
            .iter()
            .map(|c| (c.func, c.peer, c.offset, c.count, c.traced))
            .collect();
        assert_eq!(
            got,
            vec![
                (Func::Send, 0, 0, 2, true),
                (Func::Recv, 0, 0, 1, true),
                (Func::Send, 1, 8, 0, false),
                (Func::Recv, 1, 4, 5, true),
                (Func::Send, 2, 8, 3, true),
                (Func::Recv, 2, 24, 0, false),
            ]
        );
    }

    #[test]
    fn splits_default_to_equal_blocks_and_must_cover_the_buffer() {
        assert_eq!(splits(3, "input", 6, None).unwrap(), vec![2, 2, 2]);
        let e = splits(3, "input", 7, None).unwrap_err();
        assert!(
            e.message.contains("7 elements, expected a multiple of 3"),
            "{e}"
        );
        let e = splits(2, "output", 5, Some(&[1, 2])).unwrap_err();
        assert!(e.message.contains("[1, 2] = 3"), "{e}");
        let e = splits(2, "output", 5, Some(&[5])).unwrap_err();
        assert!(
            e.message.contains("1 entries, expected one per rank (2)"),
            "{e}"
        );
        let e = splits(2, "input", 5, Some(&[usize::MAX, 2])).unwrap_err();
        assert!(e.message.contains("more than the address space"), "{e}");
    }
}
