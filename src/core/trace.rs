//! NCCL's trace line formats (docs/reference/contracts.md §5), as pure functions. Writing
//! them somewhere is the tracer's job (`crate::trace`).

use super::Func;
use super::RawCall;

/// `%p` as glibc prints it: `0x7fd796e00000`, or `(nil)` for NULL.
pub fn fmt_ptr(addr: usize) -> String {
    if addr == 0 {
        "(nil)".to_string()
    } else {
        format!("{addr:#x}")
    }
}

/// Who prints a line: `host:pid:tid [dev]`.
#[derive(Debug, Clone)]
pub struct LinePrefix<'a> {
    pub host: &'a str,
    pub pid: u32,
    pub tid: u32,
    pub dev: usize,
}

impl std::fmt::Display for LinePrefix<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{} [{}]", self.host, self.pid, self.tid, self.dev)
    }
}

/// The COLL line NCCL prints for every accepted API call. Send/Recv print
/// their buffer under `recvbuff`, `(nil)` as sendbuff, and the peer as root.
pub fn coll_line(
    p: &LinePrefix,
    call: &RawCall,
    op_count: u64,
    comm: usize,
    nranks: usize,
) -> String {
    let (send, recv) = match call.func {
        Func::Send => (0, call.sendbuff),
        _ => (call.sendbuff, call.recvbuff),
    };
    format!(
        "{p} NCCL INFO {}: opCount {op_count:x} sendbuff {} recvbuff {} count {} datatype {} op {} root {} comm {} [nranks={nranks}] stream (nil)",
        call.func.name(),
        fmt_ptr(send),
        fmt_ptr(recv),
        call.count,
        call.datatype,
        call.op,
        call.root,
        fmt_ptr(comm)
    )
}

/// The INIT line that ties a comm pointer to its rank.
pub fn init_line(p: &LinePrefix, comm: usize, rank: usize, nranks: usize, comm_id: u64) -> String {
    format!(
        "{p} NCCL INFO ncclCommInitRank comm {} rank {rank} nranks {nranks} cudaDev {rank} nvmlDev {rank} busId 0 commId {comm_id:#x} - Init COMPLETE",
        fmt_ptr(comm)
    )
}

/// A WARN line; `message` is the error's own text (`Broadcast: root 4 ...`).
pub fn warn_line(p: &LinePrefix, message: &str) -> String {
    format!("{p} NCCL WARN {message}")
}

/// An INFO line of free text, as NCCL prints many (`NET/Socket : ...`).
pub fn info_line(p: &LinePrefix, message: &str) -> String {
    format!("{p} NCCL INFO {message}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn coll_line_matches_nccl_byte_for_byte() {
        let p = LinePrefix {
            host: "vm",
            pid: 590,
            tid: 590,
            dev: 0,
        };
        let call = RawCall {
            func: Func::AllReduce,
            sendbuff: 0x7fd796e00000,
            recvbuff: 0x7fd796e00000,
            count: 3,
            datatype: 4,
            op: 0,
            root: 0,
        };
        assert_eq!(
            coll_line(&p, &call, 0, 0x22c2a4f0, 1),
            "vm:590:590 [0] NCCL INFO AllReduce: opCount 0 sendbuff 0x7fd796e00000 recvbuff 0x7fd796e00000 count 3 datatype 4 op 0 root 0 comm 0x22c2a4f0 [nranks=1] stream (nil)"
        );
        let zero = RawCall {
            func: Func::AllReduce,
            sendbuff: 0,
            recvbuff: 0,
            count: 0,
            datatype: 7,
            op: 0,
            root: 0,
        };
        assert_eq!(
            coll_line(&p, &zero, 0x1a, 0x22c2a4f0, 4),
            "vm:590:590 [0] NCCL INFO AllReduce: opCount 1a sendbuff (nil) recvbuff (nil) count 0 datatype 7 op 0 root 0 comm 0x22c2a4f0 [nranks=4] stream (nil)"
        );
    }

    #[test]
    fn send_prints_its_buffer_as_recvbuff() {
        let p = LinePrefix {
            host: "h",
            pid: 1,
            tid: 2,
            dev: 3,
        };
        let send = RawCall {
            func: Func::Send,
            sendbuff: 0x1000,
            recvbuff: 0,
            count: 2,
            datatype: 4,
            op: 0,
            root: 1,
        };
        let line = coll_line(&p, &send, 9, 0x10, 4);
        assert!(
            line.contains(
                "Send: opCount 9 sendbuff (nil) recvbuff 0x1000 count 2 datatype 4 op 0 root 1"
            ),
            "{line}"
        );
    }
}
