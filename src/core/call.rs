//! The call record (≈ `ncclInfo`): what one rank asked for, before and after
//! its codes were checked.

use super::{DataType, Func, Layout, RedOp, layout};

/// One API call exactly as made: addresses as integers (0 is NULL), datatype,
/// op and root as the raw C values, so invalid ones can be represented.
/// For Send the buffer is `sendbuff`; for Recv it is `recvbuff`; `root` is the peer.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RawCall {
    pub func: Func,
    pub sendbuff: usize,
    pub recvbuff: usize,
    pub count: usize,
    pub datatype: i32,
    pub op: i32,
    pub root: i32,
}

/// A call whose root, datatype and op passed the checks.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Call {
    pub func: Func,
    pub sendbuff: usize,
    pub recvbuff: usize,
    pub count: usize,
    pub datatype: DataType,
    pub op: RedOp,
    /// The op's code as passed (a PreMulSum's run-time code), for the trace.
    pub op_code: i32,
    /// Root of rooted collectives, peer of Send/Recv, 0 otherwise.
    pub root: usize,
}

impl Call {
    pub fn layout(&self, nranks: usize, rank: usize) -> Layout {
        layout::layout(self.func, nranks, rank, self.root, self.count)
    }
    pub fn raw(&self) -> RawCall {
        RawCall {
            func: self.func,
            sendbuff: self.sendbuff,
            recvbuff: self.recvbuff,
            count: self.count,
            datatype: self.datatype.code(),
            op: self.op_code,
            root: self.root as i32,
        }
    }
    /// Same contract on every rank: what cross-rank agreement compares.
    pub fn signature(&self) -> (Func, usize, DataType, Option<RedOp>, Option<usize>) {
        (
            self.func,
            self.count,
            self.datatype,
            self.func.reduces().then_some(self.op),
            self.func.is_rooted().then_some(self.root),
        )
    }
}
