//! The typed face: safe calls over Rust slices, with torch.distributed's
//! names. Lengths are checked against the contract (`core::layout`) before
//! anything runs, with messages that say what was expected. In-place
//! variants take the one full buffer and derive the rank's slice.
//! Typed calls cannot be queued in a user-opened group (their borrows end
//! with the call); `batch_isend_irecv` and `all_to_all_single` form their
//! own groups.

use super::Comm;
use super::staging::Region;
use crate::core::{AddressSpace, Element, Error, ErrorKind, Func, RawCall, RedOp, Result, lower};

/// The slices of one typed call: its whole address space.
struct Slices(Vec<Region>);

impl AddressSpace for Slices {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        self.0
            .iter()
            .find(|r| addr >= r.addr && addr < r.addr + r.len.max(1))
            .map(|r| (r.addr, r.len))
    }
}

/// A slice's address and byte length; an empty slice is NULL, as an empty
/// tensor's buffer is, so the trace prints `(nil)` rather than a dangling
/// address.
fn region<T>(s: &[T]) -> Region {
    let (addr, len) = if s.is_empty() {
        (0, 0)
    } else {
        (s.as_ptr() as usize, std::mem::size_of_val(s))
    };
    Region {
        addr,
        len,
        writable: false,
    }
}

/// As [`region`], for a slice the call writes: the address comes from the
/// exclusive borrow, so writes through it (by any rank's thread) are writes
/// through this borrow, which lasts the whole call.
fn region_mut<T>(s: &mut [T]) -> Region {
    let (addr, len) = if s.is_empty() {
        (0, 0)
    } else {
        (s.as_mut_ptr() as usize, std::mem::size_of_val(s))
    };
    Region {
        addr,
        len,
        writable: true,
    }
}

/// One operation of [`Comm::batch_isend_irecv`] (torch's `P2POp`).
pub enum P2POp<'a, T> {
    Isend(&'a [T], usize),
    Irecv(&'a mut [T], usize),
}

impl Comm {
    fn bad_len(&self, func: Func, what: &str, got: usize, want: String) -> Error {
        Error::new(
            ErrorKind::BadLength,
            format!(
                "{}: {what} has {got} elements, expected {want}",
                func.name()
            ),
        )
        .on_rank(self.rank())
    }

    /// Elements of the N-block buffer of `func` (AllGather's output,
    /// ReduceScatter's input, the root's buffer of Gather and Scatter) for
    /// `q` elements per rank, as the contract's layout sizes it.
    fn blocks_len(&self, func: Func, q: usize, root: usize) -> usize {
        let l = crate::core::layout(func, self.size(), root, root, q);
        l.send_elems.max(l.recv_elems)
    }

    fn refuse_in_group(&self, func: Func) -> Result<()> {
        if self.in_group() {
            return Err(Error::new(
                ErrorKind::InvalidUsage,
                format!("{}: typed calls cannot be queued in an open group (their buffers are borrowed for the call only); use the raw face, batch_isend_irecv or all_to_all_single", func.name()),
            )
            .on_rank(self.rank()));
        }
        Ok(())
    }

    /// Submits a typed call whose buffers are exactly `regions`.
    #[allow(clippy::too_many_arguments)]
    fn typed<T: Element>(
        &mut self,
        func: Func,
        send: usize,
        recv: usize,
        count: usize,
        op: RedOp,
        root: usize,
        regions: Vec<Region>,
    ) -> Result<()> {
        self.typed_traced::<T>(func, send, recv, count, op, root, regions, true)
    }

    #[allow(clippy::too_many_arguments)]
    fn typed_traced<T: Element>(
        &mut self,
        func: Func,
        send: usize,
        recv: usize,
        count: usize,
        op: RedOp,
        root: usize,
        regions: Vec<Region>,
        traced: bool,
    ) -> Result<()> {
        let op = match op {
            RedOp::PreMulSum(s) => self.pre_mul_sum_code(s),
            o => o.builtin_code().expect("built-in op has a code"),
        };
        let raw = RawCall {
            func,
            sendbuff: send,
            recvbuff: recv,
            count,
            datatype: T::DTYPE.code(),
            op,
            root: root as i32,
        };
        if !self.capabilities().needs_staging {
            return self.submit_traced(raw, Some(&Slices(regions)), traced);
        }
        let r = self.submit_staged(raw, &regions, traced);
        if self.in_group() {
            // batch_isend_irecv and all_to_all_single copy back after their group
            return r;
        }
        self.finish_typed(r)
    }

    fn root_arg(&self, func: Func, root: usize) -> Result<()> {
        // checked here too so a bad root is reported before any length check
        if root >= self.size() {
            return crate::core::check_call(
                &RawCall {
                    func,
                    sendbuff: 0,
                    recvbuff: 0,
                    count: 0,
                    datatype: 0,
                    op: 0,
                    root: i32::try_from(root).unwrap_or(i32::MAX),
                },
                self.size(),
                &|_| None,
            )
            .map(|_| ())
            .map_err(|e| e.on_rank(self.rank()));
        }
        Ok(())
    }

    /// In-place AllReduce (torch `all_reduce`): every rank's `buf` becomes the reduction.
    pub fn all_reduce<T: Element>(&mut self, buf: &mut [T], op: RedOp) -> Result<()> {
        self.refuse_in_group(Func::AllReduce)?;
        let r = region_mut(buf);
        self.typed::<T>(Func::AllReduce, r.addr, r.addr, buf.len(), op, 0, vec![r])
    }

    /// Out-of-place AllReduce: `output[j] = ⊕_s input_s[j]`.
    pub fn all_reduce_into<T: Element>(
        &mut self,
        input: &[T],
        output: &mut [T],
        op: RedOp,
    ) -> Result<()> {
        self.refuse_in_group(Func::AllReduce)?;
        if output.len() != input.len() {
            return Err(self.bad_len(
                Func::AllReduce,
                "output",
                output.len(),
                format!("{} (the input's length)", input.len()),
            ));
        }
        let (s, r) = (region(input), region_mut(output));
        self.typed::<T>(
            Func::AllReduce,
            s.addr,
            r.addr,
            input.len(),
            op,
            0,
            vec![s, r],
        )
    }

    /// Reduce to `dst`: the root gets `Some(result)`, every other rank `None`
    /// (a non-root has no output to read; it passes NULL, as NCCL allows).
    pub fn reduce<T: Element>(
        &mut self,
        input: &[T],
        dst: usize,
        op: RedOp,
    ) -> Result<Option<Vec<T>>> {
        self.refuse_in_group(Func::Reduce)?;
        self.root_arg(Func::Reduce, dst)?;
        let s = region(input);
        if self.rank() == dst {
            let mut out = vec![T::default(); input.len()];
            let r = region_mut(&mut out);
            self.typed::<T>(
                Func::Reduce,
                s.addr,
                r.addr,
                input.len(),
                op,
                dst,
                vec![s, r],
            )?;
            out.truncate(input.len());
            Ok(Some(out))
        } else {
            self.typed::<T>(Func::Reduce, s.addr, 0, input.len(), op, dst, vec![s])?;
            Ok(None)
        }
    }

    /// In-place Reduce (torch `reduce`): consumes `buf`; the root gets it back
    /// holding the result, other ranks get `None` since their buffer's
    /// contents are undefined afterwards.
    pub fn reduce_in_place<T: Element>(
        &mut self,
        mut buf: Vec<T>,
        dst: usize,
        op: RedOp,
    ) -> Result<Option<Vec<T>>> {
        self.refuse_in_group(Func::Reduce)?;
        let r = region_mut(&mut buf);
        let n = buf.len();
        self.typed::<T>(Func::Reduce, r.addr, r.addr, n, op, dst, vec![r])?;
        buf.truncate(n);
        Ok((self.rank() == dst).then_some(buf))
    }

    /// In-place Broadcast (torch `broadcast`): every rank's `buf` becomes the root's.
    pub fn broadcast<T: Element>(&mut self, buf: &mut [T], src: usize) -> Result<()> {
        self.refuse_in_group(Func::Broadcast)?;
        let r = region_mut(buf);
        self.typed::<T>(
            Func::Broadcast,
            r.addr,
            r.addr,
            buf.len(),
            RedOp::Sum,
            src,
            vec![r],
        )
    }

    /// AllGather into one flat buffer of `size() * input.len()` elements,
    /// source-rank-major (torch `all_gather_into_tensor`).
    pub fn all_gather_into_tensor<T: Element>(
        &mut self,
        output: &mut [T],
        input: &[T],
    ) -> Result<()> {
        self.refuse_in_group(Func::AllGather)?;
        let (n, want) = (
            self.size(),
            self.blocks_len(Func::AllGather, input.len(), 0),
        );
        if output.len() != want {
            return Err(self.bad_len(
                Func::AllGather,
                "output",
                output.len(),
                format!("{n} ranks × {} = {want}", input.len()),
            ));
        }
        let (s, r) = (region(input), region_mut(output));
        self.typed::<T>(
            Func::AllGather,
            s.addr,
            r.addr,
            input.len(),
            RedOp::Sum,
            0,
            vec![s, r],
        )
    }

    /// AllGather to a list: element `s` is rank s's input (torch `all_gather`).
    pub fn all_gather<T: Element>(&mut self, input: &[T]) -> Result<Vec<Vec<T>>> {
        let q = input.len();
        let mut flat = vec![T::default(); self.size() * q];
        self.all_gather_into_tensor(&mut flat, input)?;
        Ok(if q == 0 {
            vec![Vec::new(); self.size()]
        } else {
            flat.chunks(q).map(|c| c.to_vec()).collect()
        })
    }

    /// In-place AllGather: `buf` holds `size() * q` elements and this rank's
    /// input is block `rank` of it (`sendbuff == recvbuff + rank*q`).
    pub fn all_gather_in_place<T: Element>(&mut self, buf: &mut [T]) -> Result<()> {
        self.refuse_in_group(Func::AllGather)?;
        let n = self.size();
        if !buf.len().is_multiple_of(n) {
            return Err(self.bad_len(
                Func::AllGather,
                "buffer",
                buf.len(),
                format!("a multiple of {n} ranks"),
            ));
        }
        let q = buf.len() / n;
        let r = region_mut(buf);
        let send = r.addr + self.rank() * q * std::mem::size_of::<T>();
        self.typed::<T>(Func::AllGather, send, r.addr, q, RedOp::Sum, 0, vec![r])
    }

    /// ReduceScatter (torch `reduce_scatter_tensor`): `input` has `size() * q`
    /// elements, `output` q; rank r gets block r of the reduction.
    pub fn reduce_scatter_tensor<T: Element>(
        &mut self,
        output: &mut [T],
        input: &[T],
        op: RedOp,
    ) -> Result<()> {
        self.refuse_in_group(Func::ReduceScatter)?;
        let (n, want) = (
            self.size(),
            self.blocks_len(Func::ReduceScatter, output.len(), 0),
        );
        if input.len() != want {
            return Err(self.bad_len(
                Func::ReduceScatter,
                "input",
                input.len(),
                format!("{n} ranks × {} = {want}", output.len()),
            ));
        }
        let (s, r) = (region(input), region_mut(output));
        self.typed::<T>(
            Func::ReduceScatter,
            s.addr,
            r.addr,
            output.len(),
            op,
            0,
            vec![s, r],
        )
    }

    /// In-place ReduceScatter: `buf` holds `size() * q` elements; the result
    /// lands in block `rank` (`recvbuff == sendbuff + rank*q`), returned.
    pub fn reduce_scatter_in_place<'b, T: Element>(
        &mut self,
        buf: &'b mut [T],
        op: RedOp,
    ) -> Result<&'b mut [T]> {
        self.refuse_in_group(Func::ReduceScatter)?;
        let n = self.size();
        if !buf.len().is_multiple_of(n) {
            return Err(self.bad_len(
                Func::ReduceScatter,
                "buffer",
                buf.len(),
                format!("a multiple of {n} ranks"),
            ));
        }
        let q = buf.len() / n;
        let r = region_mut(buf);
        let recv = r.addr + self.rank() * q * std::mem::size_of::<T>();
        self.typed::<T>(Func::ReduceScatter, r.addr, recv, q, op, 0, vec![r])?;
        let me = self.rank();
        Ok(&mut buf[me * q..(me + 1) * q])
    }

    /// Gather and Scatter: every rank has a q-element `part` (Gather's input,
    /// Scatter's output); only the root has the `size() * q` `full` buffer
    /// (Gather's output, Scatter's input).
    fn rooted_full<T: Element>(
        &mut self,
        func: Func,
        root: usize,
        part: Region,
        full: Option<Region>,
    ) -> Result<()> {
        self.refuse_in_group(func)?;
        self.root_arg(func, root)?;
        let elem = std::mem::size_of::<T>();
        let (n, q, me) = (self.size(), part.len / elem, self.rank());
        let (full_name, verb) = if func == Func::Gather {
            ("output", "receives")
        } else {
            ("input", "sends")
        };
        let p = part;
        // Gather: part -> full; Scatter: full -> part
        let ends = |f: usize| {
            if func == Func::Gather {
                (p.addr, f)
            } else {
                (f, p.addr)
            }
        };
        let want = self.blocks_len(func, q, root);
        match full {
            Some(f) if me == root => {
                if f.len / elem != want {
                    return Err(self.bad_len(
                        func,
                        full_name,
                        f.len / elem,
                        format!("{n} ranks × {q} = {want}"),
                    ));
                }
                let (send, recv) = ends(f.addr);
                self.typed::<T>(func, send, recv, q, RedOp::Sum, root, vec![p, f])
            }
            None if me != root => {
                let (send, recv) = ends(0);
                self.typed::<T>(func, send, recv, q, RedOp::Sum, root, vec![p])
            }
            Some(_) => Err(Error::new(
                ErrorKind::InvalidUsage,
                format!("{func}: rank {me} is not the root ({root}) and {verb} nothing: pass None"),
            )
            .on_rank(me)),
            None => Err(Error::new(
                ErrorKind::NullPointer,
                format!(
                    "{func}: rank {root} is the root and must pass an {full_name} of {want} elements"
                ),
            )
            .on_rank(me)),
        }
    }

    /// Gather to `dst`: the root passes `Some(output)` of `size() * input.len()`
    /// elements; other ranks pass `None`.
    pub fn gather<T: Element>(
        &mut self,
        input: &[T],
        output: Option<&mut [T]>,
        dst: usize,
    ) -> Result<()> {
        self.rooted_full::<T>(Func::Gather, dst, region(input), output.map(region_mut))
    }

    /// Scatter from `src`: the root passes `Some(input)` of `size() * output.len()`
    /// elements; other ranks pass `None`.
    pub fn scatter<T: Element>(
        &mut self,
        input: Option<&[T]>,
        output: &mut [T],
        src: usize,
    ) -> Result<()> {
        self.rooted_full::<T>(Func::Scatter, src, region_mut(output), input.map(region))
    }

    /// The in-place forms of Gather and Scatter: the root's `buf` has
    /// `size() * q` elements and its own part is block `root` (Gather:
    /// `sendbuff == recvbuff + root*q`; Scatter: `recvbuff == sendbuff +
    /// root*q`); other ranks' `buf` is their q-element part.
    fn rooted_in_place<T: Element>(
        &mut self,
        func: Func,
        root: usize,
        buf: &mut [T],
    ) -> Result<()> {
        self.refuse_in_group(func)?;
        self.root_arg(func, root)?;
        let n = self.size();
        let r = region_mut(buf);
        let gather = func == Func::Gather;
        if self.rank() != root {
            let (send, recv) = if gather { (r.addr, 0) } else { (0, r.addr) };
            return self.typed::<T>(func, send, recv, buf.len(), RedOp::Sum, root, vec![r]);
        }
        if !buf.len().is_multiple_of(n) {
            return Err(self.bad_len(
                func,
                "root buffer",
                buf.len(),
                format!("a multiple of {n} ranks"),
            ));
        }
        let q = buf.len() / n;
        let block = if q == 0 {
            0
        } else {
            r.addr + root * q * std::mem::size_of::<T>()
        };
        let (send, recv) = if gather {
            (block, r.addr)
        } else {
            (r.addr, block)
        };
        self.typed::<T>(func, send, recv, q, RedOp::Sum, root, vec![r])
    }

    /// In-place Gather: the root's `buf` has `size() * q` elements with its own
    /// input in block `root`; other ranks' `buf` is their q-element input.
    pub fn gather_in_place<T: Element>(&mut self, buf: &mut [T], dst: usize) -> Result<()> {
        self.rooted_in_place(Func::Gather, dst, buf)
    }

    /// In-place Scatter: the root's `buf` has `size() * q` elements and keeps
    /// block `root` as its own output; other ranks' `buf` receives q elements.
    pub fn scatter_in_place<T: Element>(&mut self, buf: &mut [T], src: usize) -> Result<()> {
        self.rooted_in_place(Func::Scatter, src, buf)
    }

    /// Blocking Send of `data` to `dst`.
    pub fn send<T: Element>(&mut self, data: &[T], dst: usize) -> Result<()> {
        self.refuse_in_group(Func::Send)?;
        let s = region(data);
        self.typed::<T>(Func::Send, s.addr, 0, data.len(), RedOp::Sum, dst, vec![s])
    }

    /// Blocking Recv into `buf` from `src`; the Send must have the same length.
    pub fn recv<T: Element>(&mut self, buf: &mut [T], src: usize) -> Result<()> {
        self.refuse_in_group(Func::Recv)?;
        let r = region_mut(buf);
        self.typed::<T>(Func::Recv, 0, r.addr, buf.len(), RedOp::Sum, src, vec![r])
    }

    /// Runs the Sends and Recvs as one group (torch `batch_isend_irecv`);
    /// returns when all have completed.
    pub fn batch_isend_irecv<T: Element>(&mut self, ops: &mut [P2POp<'_, T>]) -> Result<()> {
        self.refuse_in_group(Func::Send)?;
        let r = self.group(|c| {
            for op in ops.iter_mut() {
                match op {
                    P2POp::Isend(data, peer) => {
                        let s = region(data);
                        c.typed::<T>(
                            Func::Send,
                            s.addr,
                            0,
                            data.len(),
                            RedOp::Sum,
                            *peer,
                            vec![s],
                        )?;
                    }
                    P2POp::Irecv(buf, peer) => {
                        let r = region_mut(buf);
                        c.typed::<T>(Func::Recv, 0, r.addr, buf.len(), RedOp::Sum, *peer, vec![r])?;
                    }
                }
            }
            Ok(())
        });
        self.finish_typed(r)
    }

    /// torch `all_to_all_single`. Without split sizes the buffers are cut into
    /// `size()` equal blocks and one AlltoAll runs. With split sizes (AlltoAllv)
    /// `input_split_sizes[d]` elements go to rank d and `output_split_sizes[s]`
    /// come from rank s, as one group of Send/Recv pairs in peer order (zero
    /// counts are not sent, as in PyTorch). Each pair's two splits must agree
    /// across ranks: rankwise also pairs the zero splits, untraced, so a split
    /// that is not the transpose of its partner is an error on both ranks
    /// instead of a hang.
    pub fn all_to_all_single<T: Element>(
        &mut self,
        output: &mut [T],
        input: &[T],
        output_split_sizes: Option<&[usize]>,
        input_split_sizes: Option<&[usize]>,
    ) -> Result<()> {
        self.refuse_in_group(Func::AlltoAll)?;
        let (n, me) = (self.size(), self.rank());
        let in_splits =
            lower::splits(n, "input", input.len(), input_split_sizes).map_err(|e| e.on_rank(me))?;
        let out_splits = lower::splits(n, "output", output.len(), output_split_sizes)
            .map_err(|e| e.on_rank(me))?;
        let (s, r) = (region(input), region_mut(output));
        if input_split_sizes.is_none() && output_split_sizes.is_none() {
            return self.typed::<T>(
                Func::AlltoAll,
                s.addr,
                r.addr,
                input.len() / n,
                RedOp::Sum,
                0,
                vec![s, r],
            );
        }
        let pairs = lower::all_to_all_v(std::mem::size_of::<T>(), &in_splits, &out_splits);
        let r = self.group(|c| {
            for p in &pairs {
                let (send, recv, whole) = match p.func {
                    Func::Send => (s.addr + p.offset, 0, s),
                    _ => (0, r.addr + p.offset, r),
                };
                c.typed_traced::<T>(
                    p.func,
                    send,
                    recv,
                    p.count,
                    RedOp::Sum,
                    p.peer,
                    vec![whole],
                    p.traced,
                )?;
            }
            Ok(())
        });
        self.finish_typed(r)
    }
}
