//! Argument checks, in NCCL's ArgsCheck order (docs/reference/contracts.md §3): root, then
//! datatype, then op, then buffers. NCCL checks buffers only when asked and
//! never checks overlap; rankwise always checks both.

use super::trace::fmt_ptr;
use super::{Call, DataType, Error, ErrorKind, Func, RawCall, RedOp, Result, Role, layout};

/// Where a pointer lives: the registered allocation that holds an address.
pub trait AddressSpace {
    /// `(base, len_bytes)` of the allocation containing `addr`, if any.
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)>;
}

fn invalid(kind: ErrorKind, func: Func, msg: String) -> Error {
    Error::new(kind, format!("{}: {}", func.name(), msg))
}

/// Checks root (peer), datatype and op, in that order, and returns the typed call.
/// `premul` resolves a PreMulSum op code created on this communicator.
pub fn check_call(
    raw: &RawCall,
    nranks: usize,
    premul: &dyn Fn(i32) -> Option<f64>,
) -> Result<Call> {
    let func = raw.func;
    if (func.is_rooted() || func.is_p2p()) && (raw.root < 0 || raw.root as usize >= nranks) {
        let what = if func.is_p2p() { "peer" } else { "root" };
        let valid = if func.is_p2p() { "peers" } else { "roots" };
        return Err(invalid(
            ErrorKind::InvalidRoot,
            func,
            format!(
                "{what} {} is out of range: valid {valid} are 0..={} for a communicator of {nranks} rank{}",
                raw.root,
                nranks.saturating_sub(1),
                if nranks == 1 { "" } else { "s" }
            ),
        ));
    }
    let datatype = DataType::from_code(raw.datatype).ok_or_else(|| {
        invalid(
            ErrorKind::InvalidDatatype,
            func,
            format!(
                "datatype code {} is invalid: valid codes are 0..=11 (ncclInt8 .. ncclFloat8e5m2)",
                raw.datatype
            ),
        )
    })?;
    let op = if func.reduces() {
        RedOp::from_builtin_code(raw.op)
            .or_else(|| premul(raw.op).map(RedOp::PreMulSum))
            .ok_or_else(|| {
                invalid(
                    ErrorKind::InvalidOp,
                    func,
                    format!(
                        "reduction op code {} is invalid: valid codes are 0..=4 (ncclSum, ncclProd, ncclMax, ncclMin, ncclAvg) or a PreMulSum op created on this communicator",
                        raw.op
                    ),
                )
            })?
    } else {
        // non-reducing ops carry an op field NCCL ignores (it logs ncclSum)
        RedOp::Sum
    };
    let root = if func.is_rooted() || func.is_p2p() {
        raw.root as usize
    } else {
        0
    };
    Ok(Call {
        func,
        sendbuff: raw.sendbuff,
        recvbuff: raw.recvbuff,
        count: raw.count,
        datatype,
        op,
        op_code: raw.op,
        root,
    })
}

/// One buffer of a call as the checks see it.
struct Region {
    name: &'static str,
    addr: usize,
    elems: usize,
}

/// NULL, bounds, alignment and overlap checks on the buffers the call reads
/// or writes on this rank. Count 0 touches no memory and passes. Every
/// buffer must be aligned to its datatype's element size (a `float*` is
/// 4-byte aligned): the engine reads and writes it as elements.
pub fn check_buffers(
    call: &Call,
    nranks: usize,
    rank: usize,
    space: &dyn AddressSpace,
) -> Result<()> {
    let l = call.layout(nranks, rank);
    let size = call.datatype.size();
    let func = call.func;
    let root_note = if func.is_rooted() && rank == call.root {
        " (the root)"
    } else {
        ""
    };
    // at most two regions, kept on the stack: this runs on every call
    let mut regions: [Option<Region>; 2] = [None, None];
    // sendbuff's address and allocation: an in-place call (recvbuff ==
    // sendbuff) asks the address space once, which for device memory is a
    // call into the CUDA driver
    let mut known: Option<(usize, Option<(usize, usize)>)> = None;
    for (i, (name, addr, elems, role)) in [
        ("sendbuff", call.sendbuff, l.send_elems, l.send_role),
        ("recvbuff", call.recvbuff, l.recv_elems, l.recv_role),
    ]
    .into_iter()
    .enumerate()
    {
        if elems == 0 {
            continue;
        }
        match role {
            Role::Read | Role::Written => {
                if addr == 0 {
                    return Err(invalid(
                        ErrorKind::NullPointer,
                        func,
                        format!(
                            "{name} is NULL but rank {rank}{root_note} must {} {elems} elements ({} bytes of {})",
                            if role == Role::Read {
                                "supply"
                            } else {
                                "receive"
                            },
                            elems * size,
                            call.datatype
                        ),
                    ));
                }
            }
            // a non-root Reduce may pass NULL; if it passes a buffer, it must be valid
            Role::Undefined if addr != 0 => {}
            _ => continue,
        }
        let bytes = elems * size;
        let found = match known {
            Some((at, found)) if at == addr => found,
            _ => space.allocation_of(addr),
        };
        known = Some((addr, found));
        match found {
            None => {
                return Err(invalid(
                    ErrorKind::OutOfBounds,
                    func,
                    format!(
                        "{name} {} is not inside any allocation of rank {rank}",
                        fmt_ptr(addr)
                    ),
                ));
            }
            Some((base, len)) if addr + bytes > base + len => {
                return Err(invalid(
                    ErrorKind::OutOfBounds,
                    func,
                    format!(
                        "{name} {} needs {elems} elements ({bytes} bytes of {}) but its allocation {} of {len} bytes ends {} bytes after it: the extent overruns by {} bytes",
                        fmt_ptr(addr),
                        call.datatype,
                        fmt_ptr(base),
                        base + len - addr,
                        addr + bytes - (base + len)
                    ),
                ));
            }
            Some(_) => {}
        }
        // the engine views these bytes as elements of the datatype, so the
        // address must be aligned for it; allocations are 16-byte aligned,
        // so this holds exactly when the offset is a whole number of elements
        if !addr.is_multiple_of(size) {
            return Err(invalid(
                ErrorKind::OutOfBounds,
                func,
                format!(
                    "{name} {} is misaligned: {} elements are {size} bytes, so {name} must be a multiple of {size}, but rank {rank}{root_note} passed an address {} byte{} past one",
                    fmt_ptr(addr),
                    call.datatype,
                    addr % size,
                    if addr % size == 1 { "" } else { "s" }
                ),
            ));
        }
        regions[i] = Some(Region { name, addr, elems });
    }
    if let [Some(s), Some(r)] = &regions {
        let overlap = s.addr < r.addr + r.elems * size && r.addr < s.addr + s.elems * size;
        if overlap && !layout::is_in_place(func, rank, call.root, call.count, size, s.addr, r.addr)
        {
            let msg = match layout::in_place(func, rank, call.root, call.count) {
                Some(ip) => {
                    let want = r.addr as i128 + ip.send_minus_recv as i128 * size as i128;
                    format!(
                        "{} {} ({} elements) overlaps {} {} ({} elements) but is not the in-place form `{}`, which on rank {rank} means sendbuff == {:#x}; any other overlap corrupts data",
                        s.name,
                        fmt_ptr(s.addr),
                        s.elems,
                        r.name,
                        fmt_ptr(r.addr),
                        r.elems,
                        ip.equation,
                        want
                    )
                }
                None => format!(
                    "{} {} ({} elements) overlaps {} {} ({} elements), and {} has no in-place form{}",
                    s.name,
                    fmt_ptr(s.addr),
                    s.elems,
                    r.name,
                    fmt_ptr(r.addr),
                    r.elems,
                    func.name(),
                    if func.is_rooted() {
                        " off the root"
                    } else {
                        ""
                    }
                ),
            };
            return Err(invalid(ErrorKind::IllegalOverlap, func, msg));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Space(Vec<(usize, usize)>);
    impl AddressSpace for Space {
        fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
            self.0
                .iter()
                .copied()
                .find(|(b, l)| addr >= *b && addr < b + l)
        }
    }
    fn no_premul(_: i32) -> Option<f64> {
        None
    }
    fn raw(
        func: Func,
        send: usize,
        recv: usize,
        count: usize,
        dt: i32,
        op: i32,
        root: i32,
    ) -> RawCall {
        RawCall {
            func,
            sendbuff: send,
            recvbuff: recv,
            count,
            datatype: dt,
            op,
            root,
        }
    }

    #[test]
    fn root_is_checked_first_and_the_message_is_unambiguous() {
        // bad root, bad datatype and bad op at once: root is reported (NCCL's order)
        let e = check_call(&raw(Func::Reduce, 8, 8, 4, 99, 99, 4), 4, &no_premul).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidRoot);
        assert_eq!(
            e.message,
            "Reduce: root 4 is out of range: valid roots are 0..=3 for a communicator of 4 ranks"
        );
        let e = check_call(&raw(Func::Broadcast, 8, 8, 0, 7, 0, -1), 4, &no_premul).unwrap_err();
        assert_eq!(
            e.kind,
            ErrorKind::InvalidRoot,
            "count 0 still checks the root"
        );
        let e = check_call(&raw(Func::Send, 8, 0, 1, 7, 0, 2), 2, &no_premul).unwrap_err();
        assert!(
            e.message
                .contains("peer 2 is out of range: valid peers are 0..=1"),
            "{}",
            e.message
        );
        // AllReduce has no root: any value is ignored
        assert!(check_call(&raw(Func::AllReduce, 8, 8, 1, 7, 0, 99), 4, &no_premul).is_ok());
    }

    #[test]
    fn datatype_then_op() {
        let e = check_call(&raw(Func::AllReduce, 8, 8, 4, 12, 99, 0), 4, &no_premul).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidDatatype);
        assert!(e.message.contains("datatype code 12 is invalid"));
        let e = check_call(&raw(Func::AllReduce, 8, 8, 4, 7, 5, 0), 4, &no_premul).unwrap_err();
        assert_eq!(e.kind, ErrorKind::InvalidOp);
        assert!(e.message.contains("op code 5 is invalid"));
        let premul = |c: i32| (c == 5).then_some(0.5);
        let c = check_call(&raw(Func::AllReduce, 8, 8, 4, 7, 5, 0), 4, &premul).unwrap();
        assert_eq!(c.op, RedOp::PreMulSum(0.5));
        // AllGather takes no op: the field is ignored
        assert!(check_call(&raw(Func::AllGather, 8, 64, 4, 7, 42, 0), 4, &no_premul).is_ok());
    }

    fn buffers(
        func: Func,
        send: usize,
        recv: usize,
        count: usize,
        rank: usize,
        root: i32,
        space: &dyn AddressSpace,
    ) -> Result<()> {
        let c = check_call(&raw(func, send, recv, count, 2, 0, root), 4, &no_premul)?;
        check_buffers(&c, 4, rank, space)
    }

    #[test]
    fn null_and_bounds() {
        let space = Space(vec![(0x1000, 48), (0x2000, 16)]);
        // root Reduce must have recvbuff; non-root may pass NULL
        let e = buffers(Func::Reduce, 0x1000, 0, 3, 3, 3, &space).unwrap_err();
        assert_eq!(e.kind, ErrorKind::NullPointer);
        assert!(
            e.message.contains(
                "recvbuff is NULL but rank 3 (the root) must receive 3 elements (12 bytes"
            ),
            "{}",
            e.message
        );
        assert!(buffers(Func::Reduce, 0x1000, 0, 3, 1, 3, &space).is_ok());
        // non-root Broadcast's sendbuff is ignored; Gather's recvbuff unused off the root
        assert!(buffers(Func::Broadcast, 0xdead, 0x2000, 4, 1, 0, &space).is_ok());
        assert!(buffers(Func::Gather, 0x2000, 0, 4, 1, 0, &space).is_ok());
        assert!(buffers(Func::Scatter, 0, 0x2000, 4, 1, 0, &space).is_ok());
        // AllGather recv of 4*4 int32 = 64 bytes in a 48-byte allocation
        let e = buffers(Func::AllGather, 0x2000, 0x1000, 4, 0, 0, &space).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfBounds);
        assert!(e.message.contains("overruns by 16 bytes"), "{}", e.message);
        let e = buffers(Func::AllReduce, 0x5000, 0x1000, 1, 0, 0, &space).unwrap_err();
        assert!(
            e.message
                .contains("sendbuff 0x5000 is not inside any allocation of rank 0")
        );
        // count 0: nothing is touched, NULL is fine
        assert!(buffers(Func::AllReduce, 0, 0, 0, 0, 0, &space).is_ok());
    }

    #[test]
    fn buffers_must_be_aligned_to_their_element_size() {
        let space = Space(vec![(0x1000, 64), (0x2000, 64)]);
        // int32: an address 2 bytes into an allocation is not an int32 pointer
        let e = buffers(Func::AllReduce, 0x1002, 0x2000, 4, 1, 0, &space).unwrap_err();
        assert_eq!(e.kind, ErrorKind::OutOfBounds);
        assert_eq!(e.code(), crate::core::ResultCode::InvalidArgument);
        assert_eq!(
            e.message,
            "AllReduce: sendbuff 0x1002 is misaligned: int32 elements are 4 bytes, so sendbuff must be a multiple of 4, but rank 1 passed an address 2 bytes past one"
        );
        let e = buffers(Func::Reduce, 0x1000, 0x2001, 2, 3, 3, &space).unwrap_err();
        assert!(
            e.message
                .contains("recvbuff 0x2001 is misaligned: int32 elements are 4 bytes, so recvbuff must be a multiple of 4, but rank 3 (the root) passed an address 1 byte past one"),
            "{}",
            e.message
        );
        // whole-element offsets are fine, and so is count 0 at any address
        assert!(buffers(Func::AllReduce, 0x1004, 0x2008, 4, 1, 0, &space).is_ok());
        assert!(buffers(Func::AllReduce, 0x1003, 0x2001, 0, 1, 0, &space).is_ok());
        // a buffer the call ignores is not checked (non-root Broadcast's sendbuff)
        assert!(buffers(Func::Broadcast, 0x1003, 0x2000, 4, 1, 0, &space).is_ok());
        // 1-byte types: every address is aligned
        let c = check_call(
            &raw(Func::AllReduce, 0x1003, 0x2001, 4, 0, 0, 0),
            4,
            &no_premul,
        );
        assert!(check_buffers(&c.unwrap(), 4, 0, &space).is_ok());
        // 8-byte types need 8: 0x1004 is int32-aligned but not float64-aligned
        let c = check_call(&raw(Func::Send, 0x1004, 0, 2, 8, 0, 1), 4, &no_premul);
        let e = check_buffers(&c.unwrap(), 4, 0, &space).unwrap_err();
        assert!(
            e.message
                .contains("sendbuff 0x1004 is misaligned: double elements are 8 bytes"),
            "{}",
            e.message
        );
    }

    #[test]
    fn overlap_must_be_the_exact_equation() {
        let space = Space(vec![(0x1000, 64)]);
        // AllGather in-place on rank 1 with sendcount 2 (int32): send = recv + 8 bytes
        assert!(buffers(Func::AllGather, 0x1008, 0x1000, 2, 1, 0, &space).is_ok());
        let e = buffers(Func::AllGather, 0x1000, 0x1000, 2, 1, 0, &space).unwrap_err();
        assert_eq!(e.kind, ErrorKind::IllegalOverlap);
        assert!(
            e.message.contains("sendbuff == recvbuff + rank*sendcount"),
            "{}",
            e.message
        );
        assert!(e.message.contains("sendbuff == 0x1008"), "{}", e.message);
        // on rank 0 the same call is in-place
        assert!(buffers(Func::AllGather, 0x1000, 0x1000, 2, 0, 0, &space).is_ok());
        // ReduceScatter: recv = send + rank*recvcount
        assert!(buffers(Func::ReduceScatter, 0x1000, 0x1010, 2, 2, 0, &space).is_ok());
        assert!(buffers(Func::ReduceScatter, 0x1000, 0x1008, 2, 2, 0, &space).is_err());
        // AllReduce shifted by one element overlaps illegally
        let e = buffers(Func::AllReduce, 0x1000, 0x1004, 4, 0, 0, &space).unwrap_err();
        assert_eq!(e.kind, ErrorKind::IllegalOverlap);
        // AlltoAll has no in-place form at all
        let e = buffers(Func::AlltoAll, 0x1000, 0x1000, 1, 0, 0, &space).unwrap_err();
        assert!(
            e.message.contains("AlltoAll has no in-place form"),
            "{}",
            e.message
        );
        // adjacent, non-overlapping buffers are fine
        assert!(buffers(Func::AllReduce, 0x1000, 0x1010, 4, 0, 0, &space).is_ok());
    }

    /// An address space that counts its lookups (each one a CUDA driver
    /// call in the interposer).
    struct Counting(Space, std::cell::Cell<usize>);
    impl AddressSpace for Counting {
        fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
            self.1.set(self.1.get() + 1);
            self.0.allocation_of(addr)
        }
    }

    #[test]
    fn an_in_place_call_looks_its_buffer_up_once_and_keeps_every_check() {
        let space = Counting(Space(vec![(0x1000, 64), (0x2000, 16)]), 0.into());
        let lookups = |send, recv, count| {
            space.1.set(0);
            let got = buffers(Func::AllReduce, send, recv, count, 0, 0, &space);
            (got.map_err(|e| e.kind), space.1.get())
        };
        assert_eq!(lookups(0x1000, 0x1000, 16), (Ok(()), 1));
        assert_eq!(
            lookups(0x1000, 0x1000, 17),
            (Err(ErrorKind::OutOfBounds), 1)
        );
        assert_eq!(lookups(0x1000, 0x2000, 4), (Ok(()), 2));
        assert_eq!(lookups(0x1000, 0x2000, 5), (Err(ErrorKind::OutOfBounds), 2));
        assert_eq!(lookups(0x1000, 0x3000, 4), (Err(ErrorKind::OutOfBounds), 2));
    }
}
