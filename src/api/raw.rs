//! The raw face: NCCL's C API over addresses of the engine's memory (the
//! rank's allocation registry on the local engine). Pointers are plain addresses (`usize`, [`NULL`] is 0) that can
//! be offset by whole elements; the checks refuse a buffer that is not
//! aligned to its datatype's element size (a `float*` at an odd address is a
//! user error in C too), and every extent and overlap, before the engine
//! touches memory. [`Comm::read`], [`Comm::write`] and [`Comm::fill`] copy
//! bytes (as `cudaMemcpy` does) and take any address.

use super::Comm;
use crate::core::{DataType, Element, Error, ErrorKind, Func, RawCall, RedOp, Result, bytes};

/// The NULL pointer.
pub const NULL: usize = 0;

/// A datatype argument: a [`DataType`] or any raw `i32` code (invalid ones
/// are rejected by the checks, as NCCL does).
pub trait DtypeArg {
    fn code(self) -> i32;
}
impl DtypeArg for DataType {
    fn code(self) -> i32 {
        DataType::code(self)
    }
}
impl DtypeArg for i32 {
    fn code(self) -> i32 {
        self
    }
}

/// A reduction-op argument: a built-in [`RedOp`] or a raw `i32` code
/// (a PreMulSum code from [`Comm::create_pre_mul_sum`], or an invalid one).
pub trait OpArg {
    fn resolve(self, comm: &mut Comm) -> i32;
}
impl OpArg for i32 {
    fn resolve(self, _: &mut Comm) -> i32 {
        self
    }
}
impl OpArg for RedOp {
    fn resolve(self, comm: &mut Comm) -> i32 {
        match self {
            RedOp::PreMulSum(s) => comm.pre_mul_sum_code(s),
            op => op.builtin_code().expect("built-in op has a code"),
        }
    }
}

impl Comm {
    /// Allocates `bytes` zeroed bytes of the engine's memory (≈ `cudaMalloc`):
    /// host memory on the local engine, device memory on a GPU engine.
    pub fn alloc(&mut self, bytes: usize) -> Result<usize> {
        let rank = self.rank();
        self.engine_mut()
            .memory_mut()
            .alloc(bytes)
            .map_err(|e| e.on_rank(rank))
    }
    /// Allocates room for `count` elements of `dt`.
    pub fn alloc_elems(&mut self, count: usize, dt: DataType) -> Result<usize> {
        let bytes = count.checked_mul(dt.size()).ok_or_else(|| {
            Error::new(
                ErrorKind::BadLength,
                format!("alloc: {count} elements of {dt} do not fit in the address space"),
            )
            .on_rank(self.rank())
        })?;
        self.alloc(bytes)
    }
    /// Frees an allocation by its base address (≈ `cudaFree`).
    pub fn free(&mut self, ptr: usize) -> Result<()> {
        let rank = self.rank();
        self.engine_mut()
            .memory_mut()
            .free(ptr)
            .map_err(|e| e.on_rank(rank))
    }
    /// Copies host elements to `ptr` (≈ `cudaMemcpy` host to device), bounds-checked.
    pub fn write<T: Element>(&mut self, ptr: usize, data: &[T]) -> Result<()> {
        let rank = self.rank();
        self.engine_mut()
            .memory_mut()
            .write(ptr, bytes::of(data))
            .map_err(|e| e.on_rank(rank))
    }
    /// Copies `count` elements from `ptr` to the host, bounds-checked.
    pub fn read<T: Element>(&self, ptr: usize, count: usize) -> Result<Vec<T>> {
        let mut out = vec![T::default(); count];
        self.engine()
            .memory()
            .read(ptr, bytes::of_mut(&mut out))
            .map_err(|e| e.on_rank(self.rank()))?;
        Ok(out)
    }
    /// Fills `bytes` bytes at `ptr` with `byte`.
    pub fn fill(&mut self, ptr: usize, bytes: usize, byte: u8) -> Result<()> {
        let rank = self.rank();
        self.engine_mut()
            .memory_mut()
            .fill(ptr, bytes, byte)
            .map_err(|e| e.on_rank(rank))
    }

    #[allow(clippy::too_many_arguments)]
    fn raw_call(
        &mut self,
        func: Func,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: i32,
        op: i32,
        root: i32,
    ) -> Result<()> {
        let raw = RawCall {
            func,
            sendbuff,
            recvbuff,
            count,
            datatype,
            op,
            root,
        };
        self.submit(raw, None)
    }

    /// `ncclAllReduce`
    pub fn nccl_all_reduce(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        op: impl OpArg,
    ) -> Result<()> {
        let op = op.resolve(self);
        self.raw_call(
            Func::AllReduce,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            op,
            0,
        )
    }
    /// `ncclReduce`: `recvbuff` may be NULL except on the root.
    #[allow(clippy::too_many_arguments)]
    pub fn nccl_reduce(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        op: impl OpArg,
        root: i32,
    ) -> Result<()> {
        let op = op.resolve(self);
        self.raw_call(
            Func::Reduce,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            op,
            root,
        )
    }
    /// `ncclBroadcast`: `sendbuff` is ignored except on the root.
    pub fn nccl_broadcast(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        root: i32,
    ) -> Result<()> {
        self.raw_call(
            Func::Broadcast,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            0,
            root,
        )
    }
    /// `ncclAllGather`: `sendcount` elements in, `nranks * sendcount` out.
    /// In place when `sendbuff == recvbuff + rank*sendcount`.
    pub fn nccl_all_gather(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        sendcount: usize,
        datatype: impl DtypeArg,
    ) -> Result<()> {
        self.raw_call(
            Func::AllGather,
            sendbuff,
            recvbuff,
            sendcount,
            datatype.code(),
            0,
            0,
        )
    }
    /// `ncclReduceScatter`: `nranks * recvcount` in, `recvcount` out.
    /// In place when `recvbuff == sendbuff + rank*recvcount`.
    pub fn nccl_reduce_scatter(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        recvcount: usize,
        datatype: impl DtypeArg,
        op: impl OpArg,
    ) -> Result<()> {
        let op = op.resolve(self);
        self.raw_call(
            Func::ReduceScatter,
            sendbuff,
            recvbuff,
            recvcount,
            datatype.code(),
            op,
            0,
        )
    }
    /// `ncclAlltoAll`: `count` elements to and from every peer; no in-place form.
    pub fn nccl_all_to_all(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
    ) -> Result<()> {
        self.raw_call(
            Func::AlltoAll,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            0,
            0,
        )
    }
    /// `ncclGather`: `recvbuff` (nranks*count) is used on the root only.
    pub fn nccl_gather(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        root: i32,
    ) -> Result<()> {
        self.raw_call(
            Func::Gather,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            0,
            root,
        )
    }
    /// `ncclScatter`: `sendbuff` (nranks*count) is used on the root only.
    pub fn nccl_scatter(
        &mut self,
        sendbuff: usize,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        root: i32,
    ) -> Result<()> {
        self.raw_call(
            Func::Scatter,
            sendbuff,
            recvbuff,
            count,
            datatype.code(),
            0,
            root,
        )
    }
    /// `ncclSend`: blocks until the peer's matching `ncclRecv` unless inside a group.
    pub fn nccl_send(
        &mut self,
        sendbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        peer: i32,
    ) -> Result<()> {
        self.raw_call(Func::Send, sendbuff, 0, count, datatype.code(), 0, peer)
    }
    /// `ncclRecv`
    pub fn nccl_recv(
        &mut self,
        recvbuff: usize,
        count: usize,
        datatype: impl DtypeArg,
        peer: i32,
    ) -> Result<()> {
        self.raw_call(Func::Recv, 0, recvbuff, count, datatype.code(), 0, peer)
    }
    /// `ncclGroupStart`
    pub fn nccl_group_start(&mut self) -> Result<()> {
        self.group_start()
    }
    /// `ncclGroupEnd`
    pub fn nccl_group_end(&mut self) -> Result<()> {
        self.group_end()
    }
}
