//! Every collective and Send/Recv: the call's arguments to `hooks::call`,
//! then NCCL's function, or the code the checks chose.

use super::{raw, submit};
use crate::real::{Comm, Res, Stream};
use rankwise::core::Func;
use std::ffi::{c_int, c_void};

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AllReduce,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        op,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
#[allow(clippy::too_many_arguments)]
pub extern "C" fn ncclReduce(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    op: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Reduce,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        op,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclBroadcast(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Broadcast,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

/// The legacy in-place broadcast: `ncclBroadcast(buff, buff, ...)`.
#[unsafe(no_mangle)]
pub extern "C" fn ncclBcast(
    buff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Broadcast,
        buff as usize,
        buff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAllGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    sendcount: usize,
    datatype: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AllGather,
        sendbuff as usize,
        recvbuff as usize,
        sendcount,
        datatype,
        0,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclReduceScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    recvcount: usize,
    datatype: c_int,
    op: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::ReduceScatter,
        sendbuff as usize,
        recvbuff as usize,
        recvcount,
        datatype,
        op,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclAlltoAll(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::AlltoAll,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        0,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclGather(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Gather,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclScatter(
    sendbuff: *const c_void,
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    root: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(
        Func::Scatter,
        sendbuff as usize,
        recvbuff as usize,
        count,
        datatype,
        0,
        root,
    );
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclSend(
    sendbuff: *const c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(Func::Send, sendbuff as usize, 0, count, datatype, 0, peer);
    submit(comm, c, stream)
}

#[unsafe(no_mangle)]
pub extern "C" fn ncclRecv(
    recvbuff: *mut c_void,
    count: usize,
    datatype: c_int,
    peer: c_int,
    comm: Comm,
    stream: Stream,
) -> Res {
    let c = raw(Func::Recv, 0, recvbuff as usize, count, datatype, 0, peer);
    submit(comm, c, stream)
}
