//! Buffer sizes per rank and the in-place pointer equation of every op
//! (docs/reference/contracts.md §1–§2). The one answer to "how big is recvbuff" that the
//! engines, the checks, `explain` and `verify` all use.

use super::{DataType, Func};

/// What the contract does with one buffer on one rank.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub enum Role {
    /// Read by the call.
    Read,
    /// Written by the call; its contents afterwards are defined.
    Written,
    /// Passed but ignored (non-root Broadcast's sendbuff).
    Ignored,
    /// Not used on this rank and may be NULL (Gather's recvbuff and
    /// Scatter's sendbuff off the root).
    Unused,
    /// May be NULL; if given, its contents afterwards are undefined
    /// (non-root Reduce's recvbuff).
    Undefined,
}

impl Role {
    pub fn describe(self) -> &'static str {
        match self {
            Role::Read => "read",
            Role::Written => "written",
            Role::Ignored => "ignored",
            Role::Unused => "unused (may be NULL)",
            Role::Undefined => "undefined after the call (may be NULL)",
        }
    }
}

/// The two buffers of one call on one rank, in elements.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Layout {
    pub send_elems: usize,
    pub send_role: Role,
    pub recv_elems: usize,
    pub recv_role: Role,
}

/// Buffer sizes and roles of `func` with API count `count` on `rank` of `nranks`.
/// For Send the buffer is the send buffer; for Recv the recv buffer.
pub fn layout(func: Func, nranks: usize, rank: usize, root: usize, count: usize) -> Layout {
    let q = count;
    let nq = nranks * count;
    let on_root = rank == root;
    let (send_elems, send_role, recv_elems, recv_role) = match func {
        Func::AllReduce => (q, Role::Read, q, Role::Written),
        Func::Reduce if on_root => (q, Role::Read, q, Role::Written),
        Func::Reduce => (q, Role::Read, 0, Role::Undefined),
        Func::Broadcast if on_root => (q, Role::Read, q, Role::Written),
        Func::Broadcast => (0, Role::Ignored, q, Role::Written),
        Func::AllGather => (q, Role::Read, nq, Role::Written),
        Func::ReduceScatter => (nq, Role::Read, q, Role::Written),
        Func::AlltoAll => (nq, Role::Read, nq, Role::Written),
        Func::Gather if on_root => (q, Role::Read, nq, Role::Written),
        Func::Gather => (q, Role::Read, 0, Role::Unused),
        Func::Scatter if on_root => (nq, Role::Read, q, Role::Written),
        Func::Scatter => (0, Role::Unused, q, Role::Written),
        Func::Send => (q, Role::Read, 0, Role::Unused),
        Func::Recv => (0, Role::Unused, q, Role::Written),
    };
    Layout {
        send_elems,
        send_role,
        recv_elems,
        recv_role,
    }
}

/// The in-place form of an op on one rank: `sendbuff - recvbuff` must equal
/// `offset_elems` elements exactly.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct InPlace {
    /// `sendbuff - recvbuff`, in elements (negative: recv lies after send).
    pub send_minus_recv: isize,
    /// The equation as the NCCL header states it.
    pub equation: &'static str,
}

/// The in-place equation of `func` on `rank`, or None where the op has no
/// in-place form on that rank (AlltoAll, Send/Recv, Gather/Scatter off the root).
pub fn in_place(func: Func, rank: usize, root: usize, count: usize) -> Option<InPlace> {
    let off = |k: usize| (k * count) as isize;
    let (send_minus_recv, equation) = match func {
        Func::AllReduce | Func::Reduce | Func::Broadcast => (0, "sendbuff == recvbuff"),
        Func::AllGather => (off(rank), "sendbuff == recvbuff + rank*sendcount"),
        Func::ReduceScatter => (-off(rank), "recvbuff == sendbuff + rank*recvcount"),
        Func::Gather if rank == root => (off(root), "sendbuff == recvbuff + root*count"),
        Func::Scatter if rank == root => (-off(root), "recvbuff == sendbuff + root*count"),
        _ => return None,
    };
    Some(InPlace {
        send_minus_recv,
        equation,
    })
}

/// True when the addresses satisfy the op's in-place equation on this rank.
pub fn is_in_place(
    func: Func,
    rank: usize,
    root: usize,
    count: usize,
    elem_size: usize,
    sendbuff: usize,
    recvbuff: usize,
) -> bool {
    in_place(func, rank, root, count).is_some_and(|ip| {
        sendbuff as i128 - recvbuff as i128 == ip.send_minus_recv as i128 * elem_size as i128
    })
}

/// The recv buffer elements a call leaves undefined on `rank` when a buffer
/// is passed at all: non-root Reduce's recvbuff (count elements, contents
/// unspecified afterwards) and non-root Gather's (unused; a caller reading
/// it expects the gathered data, which only the root gets). Inputs are never
/// listed: the contract does not write them.
pub fn undefined_recv_elems(
    func: Func,
    nranks: usize,
    rank: usize,
    root: usize,
    count: usize,
) -> usize {
    match func {
        Func::Reduce if rank != root => count,
        Func::Gather if rank != root => nranks * count,
        _ => 0,
    }
}

/// The element bytes poison mode writes into undefined buffers: a signalling
/// NaN for floating types (the only NaN for e4m3), 0xA5 bytes for integers.
pub fn poison_pattern(dt: DataType) -> Vec<u8> {
    match dt {
        DataType::Float32 => 0x7FA0_0000u32.to_le_bytes().to_vec(),
        DataType::Float64 => 0x7FF4_0000_0000_0000u64.to_le_bytes().to_vec(),
        DataType::Float16 => 0x7D00u16.to_le_bytes().to_vec(),
        DataType::Bfloat16 => 0x7FA0u16.to_le_bytes().to_vec(),
        DataType::Float8e4m3 => vec![0x7F],
        DataType::Float8e5m2 => vec![0x7D],
        int => vec![0xA5; int.size()],
    }
}

/// Elements of every rank's send and recv buffers together, counted apart
/// even where a placement makes them overlap: how much memory one call
/// spans, which decides whether it can stay in cache.
pub fn footprint_elems(func: Func, nranks: usize, root: usize, count: usize) -> usize {
    (0..nranks)
        .map(|r| {
            let l = layout(func, nranks, r, root, count);
            l.send_elems + l.recv_elems
        })
        .sum()
}

/// Splits `total` items among `parts` workers as evenly as possible; worker
/// `i` gets the returned range. Ranges are contiguous and in order.
pub fn share(total: usize, parts: usize, i: usize) -> std::ops::Range<usize> {
    let base = total / parts;
    let extra = total % parts;
    let start = i * base + i.min(extra);
    start..start + base + usize::from(i < extra)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn footprint_sums_both_buffers_of_every_rank() {
        // ReduceScatter: N·q in and q out on each of N ranks
        assert_eq!(footprint_elems(Func::ReduceScatter, 4, 0, 3), 4 * (12 + 3));
        // Reduce: only the root has a recv buffer
        assert_eq!(footprint_elems(Func::Reduce, 4, 2, 3), 4 * 3 + 3);
        // Broadcast: only the root has a send buffer
        assert_eq!(footprint_elems(Func::Broadcast, 3, 0, 5), 5 + 3 * 5);
    }

    #[test]
    fn sizes_follow_the_contract_table() {
        let (n, q) = (4, 3);
        let l = layout(Func::AllGather, n, 1, 0, q);
        assert_eq!((l.send_elems, l.recv_elems), (3, 12));
        let l = layout(Func::ReduceScatter, n, 1, 0, q);
        assert_eq!((l.send_elems, l.recv_elems), (12, 3));
        let l = layout(Func::AlltoAll, n, 2, 0, q);
        assert_eq!((l.send_elems, l.recv_elems), (12, 12));
        let l = layout(Func::Reduce, n, 1, 3, q);
        assert_eq!(
            (l.send_elems, l.recv_elems, l.recv_role),
            (3, 0, Role::Undefined)
        );
        let l = layout(Func::Reduce, n, 3, 3, q);
        assert_eq!((l.recv_elems, l.recv_role), (3, Role::Written));
        let l = layout(Func::Broadcast, n, 0, 2, q);
        assert_eq!((l.send_role, l.recv_elems), (Role::Ignored, 3));
        let l = layout(Func::Gather, n, 2, 2, q);
        assert_eq!((l.send_elems, l.recv_elems), (3, 12));
        let l = layout(Func::Gather, n, 1, 2, q);
        assert_eq!((l.recv_elems, l.recv_role), (0, Role::Unused));
        let l = layout(Func::Scatter, n, 2, 2, q);
        assert_eq!((l.send_elems, l.recv_elems), (12, 3));
        let l = layout(Func::Scatter, n, 0, 2, q);
        assert_eq!((l.send_elems, l.send_role), (0, Role::Unused));
        let l = layout(Func::AllReduce, n, 0, 0, 0);
        assert_eq!((l.send_elems, l.recv_elems), (0, 0));
    }

    #[test]
    fn in_place_equations_are_rank_offsets() {
        // AllGather on rank 2 of 4, sendcount 3, int32: sendbuff == recvbuff + 2*3 elements
        assert!(is_in_place(Func::AllGather, 2, 0, 3, 4, 1000 + 24, 1000));
        assert!(
            !is_in_place(Func::AllGather, 2, 0, 3, 4, 1000, 1000),
            "send == recv is not in-place on rank 2"
        );
        assert!(
            is_in_place(Func::AllGather, 0, 0, 3, 4, 1000, 1000),
            "rank 0's offset is 0"
        );
        // ReduceScatter: recvbuff == sendbuff + rank*recvcount
        assert!(is_in_place(
            Func::ReduceScatter,
            3,
            0,
            3,
            4,
            1000,
            1000 + 36
        ));
        assert!(!is_in_place(
            Func::ReduceScatter,
            3,
            0,
            3,
            4,
            1000 + 36,
            1000
        ));
        assert!(is_in_place(Func::AllReduce, 1, 0, 5, 8, 64, 64));
        assert!(is_in_place(Func::Gather, 1, 1, 2, 4, 1008, 1000));
        assert!(
            !is_in_place(Func::Gather, 0, 1, 2, 4, 1008, 1000),
            "only the root has an in-place form"
        );
        assert!(is_in_place(Func::Scatter, 1, 1, 2, 4, 1000, 1008));
        assert!(in_place(Func::AlltoAll, 0, 0, 4).is_none());
        assert!(in_place(Func::Send, 0, 0, 4).is_none());
        assert_eq!(
            in_place(Func::ReduceScatter, 2, 0, 5)
                .unwrap()
                .send_minus_recv,
            -10
        );
    }

    #[test]
    fn undefined_outputs_and_their_poison() {
        assert_eq!(undefined_recv_elems(Func::Reduce, 4, 1, 3, 5), 5);
        assert_eq!(undefined_recv_elems(Func::Reduce, 4, 3, 3, 5), 0);
        assert_eq!(undefined_recv_elems(Func::Gather, 4, 0, 2, 5), 20);
        assert_eq!(undefined_recv_elems(Func::AllReduce, 4, 0, 0, 5), 0);
        let f = f32::from_le_bytes(poison_pattern(DataType::Float32).try_into().unwrap());
        assert!(
            f.is_nan() && f.to_bits() & 0x0040_0000 == 0,
            "signalling: quiet bit clear"
        );
        let d = f64::from_le_bytes(poison_pattern(DataType::Float64).try_into().unwrap());
        assert!(d.is_nan() && d.to_bits() & (1 << 51) == 0);
        assert!(half::f16::from_bits(0x7D00).is_nan());
        assert!(half::bf16::from_bits(0x7FA0).is_nan());
        assert!(crate::core::F8E4M3(0x7F).to_f32().is_nan());
        assert!(crate::core::F8E5M2(0x7D).to_f32().is_nan());
        for dt in DataType::ALL {
            assert_eq!(poison_pattern(dt).len(), dt.size());
        }
        assert_eq!(poison_pattern(DataType::Int32), vec![0xA5; 4]);
    }

    #[test]
    fn share_covers_everything_once() {
        for total in [0, 1, 5, 64, 1001] {
            for parts in 1..=9 {
                let mut next = 0;
                for i in 0..parts {
                    let r = share(total, parts, i);
                    assert_eq!(r.start, next);
                    assert!(r.len() <= total / parts + 1);
                    next = r.end;
                }
                assert_eq!(next, total);
            }
        }
    }
}
