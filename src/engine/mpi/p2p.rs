//! A launch's Send/Recv on the mpi engine. Before any data moves, each
//! pair of ranks that talk in the launch swaps its signatures (the count
//! and datatype of every Send and Recv between them, in order), so a
//! count or datatype that differs, or a Send without its Recv, is the same
//! error on both ranks instead of a truncated message or a hang. Then every
//! Recv and Send is started at once (a group's calls progress in any order)
//! and waited for. Messages between a pair keep their order, as NCCL's do.

use super::notice::Waiting;
use super::{MpiEngine, ffi};
use crate::core::{Call, DataType, Error, ErrorKind, Func, Launch, Result};
use std::collections::BTreeSet;
use std::mem::ManuallyDrop;

const SIG_HEAD: i32 = 0x5301;
const SIG_BODY: i32 = 0x5302;
const DATA: i32 = 0x5303;

/// (count, datatype code) of each call of `func` with `peer`, in order.
fn sigs(launch: &Launch, func: Func, peer: usize) -> Vec<u64> {
    launch
        .p2p
        .iter()
        .filter(|c| c.func == func && c.root == peer)
        .flat_map(|c| [c.count as u64, c.datatype.code() as u64])
        .collect()
}

fn describe(func: Func, k: usize, me: usize, peer: usize, count: u64, dt: u64) -> String {
    let dt = i32::try_from(dt)
        .ok()
        .and_then(DataType::from_code)
        .map_or(format!("datatype {dt}"), |d| d.to_string());
    let dir = if func == Func::Send { "to" } else { "from" };
    format!("rank {me}'s {func} #{k} {dir} rank {peer} (count {count}, {dt})")
}

/// Sends and receives of `sender`→`receiver` compared: both ranks compute
/// the same verdict from the same lists.
fn compare(
    sender: usize,
    sends: &[u64],
    receiver: usize,
    recvs: &[u64],
    op_count: u64,
) -> Result<()> {
    let (ns, nr) = (sends.len() / 2, recvs.len() / 2);
    for k in 0..ns.min(nr) {
        let (s, r) = (&sends[2 * k..2 * k + 2], &recvs[2 * k..2 * k + 2]);
        if s != r {
            return Err(Error::new(
                ErrorKind::Mismatch,
                format!(
                    "Send/Recv mismatch: {} meets {} (opCount {op_count:x}): both sides must pass the same count and datatype",
                    describe(Func::Send, k, sender, receiver, s[0], s[1]),
                    describe(Func::Recv, k, receiver, sender, r[0], r[1]),
                ),
            ));
        }
    }
    if ns != nr {
        return Err(Error::new(
            ErrorKind::Unmatched,
            format!(
                "unmatched Send/Recv: rank {sender} has {ns} Send(s) to rank {receiver} in this launch but rank {receiver} has {nr} Recv(s) from rank {sender} in its launch (opCount {op_count:x})"
            ),
        ));
    }
    Ok(())
}

/// The buffers of the signature swap. MPI reads and writes them until each
/// request completes; a wait that gives up leaves its request behind, so
/// they are held in [`ManuallyDrop`] and freed only once every request of
/// the swap has completed: on any error they are leaked (a few words per
/// peer, once per failure).
#[derive(Default)]
struct Signatures {
    /// per peer: the counts of its Sends and Recvs with this rank
    heads: Vec<(usize, [u64; 2])>,
    /// per peer: this rank's head and signatures (Sends, then Recvs)
    mine: Vec<(usize, [u64; 2], Vec<u64>)>,
    /// per peer: its signatures, and how many of them are Sends
    bodies: Vec<(usize, Vec<u64>, usize)>,
}

pub fn run(e: &mut MpiEngine, launch: &Launch) -> Result<()> {
    let me = e.rank;
    let peers: BTreeSet<usize> = launch.p2p.iter().map(|c| c.root).collect();
    let comm = e.comm;
    // 1. swap signatures with every peer (self included: it checks itself)
    let mut sig = ManuallyDrop::new(Signatures::default());
    let Signatures {
        heads,
        mine,
        bodies,
    } = &mut *sig;
    heads.extend(peers.iter().map(|p| (*p, [0u64; 2])));
    for &p in &peers {
        let (s, r) = (sigs(launch, Func::Send, p), sigs(launch, Func::Recv, p));
        let head = [s.len() as u64, r.len() as u64];
        let body: Vec<u64> = s.into_iter().chain(r).collect();
        mine.push((p, head, body));
    }
    let mut sends = Vec::new();
    let mut recvs = Vec::new();
    for (p, h) in heads.iter_mut() {
        // SAFETY: `h` is 16 bytes of `sig`, which outlives the request.
        let req = unsafe { ffi::irecv(comm, h.as_mut_ptr() as usize, 16, *p as i32, SIG_HEAD)? };
        recvs.push((*p, req));
    }
    for (p, head, body) in mine.iter() {
        // SAFETY: `head` is 16 bytes of `sig`, which outlives the request.
        let req = unsafe { ffi::isend(comm, head.as_ptr() as usize, 16, *p as i32, SIG_HEAD)? };
        sends.push((*p, req));
        let bytes = ffi::int(body.len() * 8, "Send/Recv signatures")?;
        // SAFETY: `body` is `bytes` bytes of `sig`, which outlives the request.
        let req = unsafe { ffi::isend(comm, body.as_ptr() as usize, bytes, *p as i32, SIG_BODY)? };
        sends.push((*p, req));
    }
    let what_sig = |p: usize| {
        move || {
            format!(
                "the Send/Recv signature exchange with rank {p} (opCount {:x})",
                launch.op_count
            )
        }
    };
    for (p, req) in recvs {
        e.wait(req, Waiting::Peer(p), &what_sig(p))?;
    }
    let mut body_reqs = Vec::new();
    for (p, h) in heads.iter() {
        let (ns, nr) = (h[0] as usize, h[1] as usize);
        bodies.push((*p, vec![0u64; ns + nr], ns));
    }
    for (p, body, _) in bodies.iter_mut() {
        let bytes = ffi::int(body.len() * 8, "Send/Recv signatures")?;
        // SAFETY: `body` is `bytes` bytes of `sig`, sized by the peer's head,
        // and `sig` outlives the request.
        let req =
            unsafe { ffi::irecv(comm, body.as_mut_ptr() as usize, bytes, *p as i32, SIG_BODY)? };
        body_reqs.push((*p, req));
    }
    for (p, req) in body_reqs {
        e.wait(req, Waiting::Peer(p), &what_sig(p))?;
    }
    for (p, req) in sends {
        e.wait(req, Waiting::Peer(p), &what_sig(p))?;
    }
    // every request of the swap completed: its buffers are free again
    let Signatures {
        heads: _,
        mine,
        bodies,
    } = ManuallyDrop::into_inner(sig);
    for ((p, theirs, their_ns), (_, head, body)) in bodies.iter().zip(&mine) {
        let my_ns = head[0] as usize;
        let (my_sends, my_recvs) = body.split_at(my_ns);
        let (their_sends, their_recvs) = theirs.split_at(*their_ns);
        // the lower rank's sends first, so both ranks report the same error
        let (a, b) = if me <= *p {
            (
                compare(me, my_sends, *p, their_recvs, launch.op_count),
                compare(*p, their_sends, me, my_recvs, launch.op_count),
            )
        } else {
            (
                compare(*p, their_sends, me, my_recvs, launch.op_count),
                compare(me, my_sends, *p, their_recvs, launch.op_count),
            )
        };
        a?;
        b?;
    }
    // 2. the data: every Recv, then every Send, all at once
    let mut reqs: Vec<(usize, &Call, ffi::Request)> = Vec::new();
    // The calls' own buffers passed `core::check_buffers` on this rank and
    // the peer agreed on each count and datatype above; the program is
    // blocked in this launch until every request completes. A wait that
    // gives up (a peer that failed, the timeout) leaves its transfer
    // pending on the call's buffer: docs/design/unsafe.md says what a
    // program must then not do.
    for c in launch.p2p.iter().filter(|c| c.func == Func::Recv) {
        let bytes = ffi::int(c.count * c.datatype.size(), "Recv")?;
        // SAFETY: the recvbuff holds `bytes` bytes (checked, agreed), as above.
        let req = unsafe { ffi::irecv(comm, c.recvbuff, bytes, c.root as i32, DATA)? };
        reqs.push((c.root, c, req));
    }
    for c in launch.p2p.iter().filter(|c| c.func == Func::Send) {
        let bytes = ffi::int(c.count * c.datatype.size(), "Send")?;
        // SAFETY: the sendbuff holds `bytes` bytes (checked, agreed), as above.
        let req = unsafe { ffi::isend(comm, c.sendbuff, bytes, c.root as i32, DATA)? };
        reqs.push((c.root, c, req));
    }
    for (p, c, req) in reqs {
        let what = || {
            format!(
                "{} {} rank {p} (count {}, {}, opCount {:x})",
                c.func,
                if c.func == Func::Send { "to" } else { "from" },
                c.count,
                c.datatype,
                launch.op_count
            )
        };
        e.wait(req, Waiting::Peer(p), &what)?;
    }
    Ok(())
}
