//! WARN lines → findings, each with what its cause usually means and what
//! to check. A WARN line carries no comm pointer: it is attributed to the
//! communicator its process (and device) used last before it, and to that
//! rank. A file that repeats a process's calls repeats its WARN lines too:
//! those are skipped.

use super::findings::{Finding, FindingKind, LIST_LIMIT, loc_str};
use super::model::{Collected, Loc, Stream, WarnRec};
use super::parse::{WarnKind, ib_status, ib_status_name};
use super::resolve::CommGroup;
use crate::core::Func;
use std::collections::HashMap;

/// How many of the stream's calls were logged before `loc`.
fn calls_before(s: &Stream, loc: Loc) -> usize {
    let (mut lo, mut hi) = (0, s.calls.len());
    while lo < hi {
        let mid = lo + (hi - lo) / 2;
        if s.loc(mid) <= loc {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    lo
}

/// `(host, pid)` → the `(group, rank, stream)` of every member stream in that process.
type ByProcess = HashMap<(u32, u32), Vec<(usize, u32, usize)>>;

fn by_process(c: &Collected, groups: &[CommGroup]) -> ByProcess {
    let mut m: ByProcess = HashMap::new();
    for (gi, g) in groups.iter().enumerate() {
        for &(rank, si, _) in &g.members {
            let s = &c.streams[si];
            m.entry((s.host, s.pid)).or_default().push((gi, rank, si));
        }
    }
    m
}

/// Which communicator and rank a WARN line belongs to: the communicator its
/// process used last before the line (not one already destroyed).
fn attribute(c: &Collected, procs: &ByProcess, w: &WarnRec) -> Option<(usize, u32)> {
    let members = procs.get(&(w.host, w.pid))?;
    // Several ranks in one process (one thread per GPU, or rankwise's trace):
    // the `[dev]` number tells them apart.
    let same_dev = w.dev.is_some() && members.iter().any(|&(_, _, si)| c.streams[si].dev == w.dev);
    let candidates = members
        .iter()
        .filter(|&&(_, _, si)| !same_dev || c.streams[si].dev == w.dev);
    let mut best: Option<(Loc, usize, u32)> = None;
    for &(gi, rank, si) in candidates.clone() {
        let s = &c.streams[si];
        if s.first > w.loc || s.ended.is_some_and(|(_, l)| l < w.loc) {
            continue;
        }
        let before = calls_before(s, w.loc);
        let last = if before > 0 {
            s.loc(before - 1)
        } else {
            s.first
        };
        if best.is_none_or(|(l, _, _)| last > l) {
            best = Some((last, gi, rank));
        }
    }
    match best {
        Some((_, gi, rank)) => Some((gi, rank)),
        // A WARN before the process's first logged call: the communicator it used next.
        None => candidates
            .min_by_key(|&&(_, _, si)| c.streams[si].first)
            .map(|&(gi, rank, _)| (gi, rank)),
    }
}

/// A finding for every WARN line (at most [`LIST_LIMIT`] of each kind),
/// with the index in `groups` of the communicator it is attributed to;
/// and how many were not listed.
pub(crate) fn findings(
    c: &Collected,
    groups: &[CommGroup],
) -> (Vec<(Option<usize>, Finding)>, u64) {
    let mut out = Vec::new();
    let mut omitted = 0u64;
    let procs = by_process(c, groups);
    let mut listed: HashMap<FindingKind, usize> = HashMap::new();
    // A file that repeats a process's calls repeats its WARN lines too.
    let repeated: std::collections::HashSet<(u32, u32, u32)> = c
        .repeated_procs
        .iter()
        .chain(groups.iter().flat_map(|g| &g.repeated))
        .copied()
        .collect();
    for w in &c.warnings {
        if repeated.contains(&(w.loc.file, w.host, w.pid)) {
            continue;
        }
        let (kind, what) = match w.kind {
            WarnKind::InvalidRoot(_) => (FindingKind::InvalidRoot, "invalid root"),
            WarnKind::InvalidType(_) => (FindingKind::InvalidType, "invalid datatype"),
            WarnKind::InvalidOp(_) => (FindingKind::InvalidOp, "invalid reduction op"),
            other => (cause_kind(other), "warning"),
        };
        let n = listed.entry(kind).or_default();
        if *n >= LIST_LIMIT {
            omitted += 1;
            continue;
        }
        *n += 1;
        let host = &c.hosts[w.host as usize];
        let target = attribute(c, &procs, w);
        let comm = target.map(|(gi, _)| groups[gi].name.as_str());
        let rank = target.map(|t| t.1);
        let who = match rank {
            Some(r) => format!("rank {r} ({host}:{})", w.pid),
            None => format!("{host}:{}", w.pid),
        };
        // The WARN line names no communicator: say whose it is taken to be.
        let on = comm.map_or(String::new(), |n| format!(" on {n}"));
        let guess = if comm.is_some() {
            " (the communicator this process used last)"
        } else {
            ""
        };
        // NCCL's "root should be in the 0..N range" reads as if N were legal.
        let what = match (w.kind, target) {
            (WarnKind::InvalidRoot(v), Some((gi, _))) => format!(
                "root {v} is out of range: valid roots are 0..={}",
                groups[gi].nranks.saturating_sub(1)
            ),
            _ => what.to_string(),
        };
        let op = w.op.map_or("call", Func::name);
        let msg = if let Some(advice) = advice(w) {
            format!("{who} logged NCCL WARN {}{on}: {advice}", w.text)
        } else if kind == FindingKind::NcclWarning {
            format!("{who} logged NCCL WARN {}{on}", w.text)
        } else {
            format!(
                "{who}: {op} rejected by NCCL ({what}){on}{guess}; this call was never issued; WARN {}",
                w.text
            )
        };
        let mut f = Finding::new(kind, comm, msg);
        f.brief = if let Some(head) = headline(kind) {
            format!("{head}: {who} logged WARN {}", w.text)
        } else if kind == FindingKind::NcclWarning {
            format!("WARN {}", w.text)
        } else {
            format!(
                "invalid argument: {who}: {op} rejected by NCCL ({what}){on}; WARN {}",
                w.text
            )
        };
        f.warn_text = Some(w.text.clone());
        f.ranks = rank.into_iter().collect();
        f.op = w.op;
        f.location = Some(loc_str(c, w.loc));
        out.push((target.map(|t| t.0), f));
    }
    (out, omitted)
}

/// The finding kind of a WARN line's cause (argument checks aside).
fn cause_kind(k: WarnKind) -> FindingKind {
    match k {
        WarnKind::Network => FindingKind::NetworkError,
        WarnKind::PeerSizeMismatch => FindingKind::PeerSizeMismatch,
        WarnKind::DuplicateGpu => FindingKind::DuplicateGpu,
        WarnKind::OutOfMemory => FindingKind::OutOfMemory,
        WarnKind::Cuda => FindingKind::CudaError,
        WarnKind::Connection => FindingKind::ConnectionFailed,
        WarnKind::VersionMismatch => FindingKind::VersionMismatch,
        WarnKind::Timeout => FindingKind::NcclTimeout,
        WarnKind::Checker => FindingKind::CheckerError,
        _ => FindingKind::NcclWarning,
    }
}

/// How the verdict names a WARN line's cause.
fn headline(kind: FindingKind) -> Option<&'static str> {
    Some(match kind {
        FindingKind::NetworkError => "network error (not an application mismatch)",
        FindingKind::PeerSizeMismatch => "contract mismatch seen by NCCL between peers",
        FindingKind::DuplicateGpu => "two ranks on one GPU",
        FindingKind::OutOfMemory => "out of memory inside NCCL",
        FindingKind::CudaError => "CUDA error inside NCCL",
        FindingKind::ConnectionFailed => "connection failure",
        FindingKind::VersionMismatch => "NCCL version mismatch",
        FindingKind::NcclTimeout => "NCCL timeout",
        FindingKind::CheckerError => "found by rankwise's checker",
        _ => return None,
    })
}

/// What a WARN line's cause usually means, and what to check.
fn advice(w: &WarnRec) -> Option<String> {
    Some(match w.kind {
        WarnKind::Network => {
            let status = ib_status(w.text.as_bytes())
                .map(|s| match ib_status_name(s) {
                    Some(name) => format!("completion status {s} is {name}; "),
                    None => format!("completion status {s}; "),
                })
                .unwrap_or_default();
            format!(
                "the network transport failed; {status}this is a link, NIC, switch or peer-process problem, not a mismatch between the ranks' calls: check the port state and error counters on both hosts named, and whether the peer process was still alive at that time"
            )
        }
        WarnKind::PeerSizeMismatch => "NCCL found that two peers posted different sizes for one transfer: the ranks called a collective or Send/Recv with different counts or datatypes (an application mismatch); compare the calls both ranks made at this point".to_string(),
        WarnKind::DuplicateGpu => "two ranks of one communicator were given the same GPU: check CUDA_VISIBLE_DEVICES and that each process selects its device from its local rank before creating the communicator".to_string(),
        WarnKind::OutOfMemory => "an allocation inside NCCL failed: the GPU (or host) was out of memory when NCCL needed its buffers; free memory before creating communicators, use fewer communicators, or lower NCCL_BUFFSIZE".to_string(),
        WarnKind::Cuda => "a CUDA call failed inside NCCL; this is often the echo of an earlier error on that GPU (an illegal memory access in another kernel) or a device fault: find the first failing kernel (CUDA_LAUNCH_BLOCKING=1, compute-sanitizer) and check the device's health".to_string(),
        WarnKind::Connection => "a rank could not reach a peer or the bootstrap: a firewall, the wrong network interface (NCCL_SOCKET_IFNAME), a peer that exited or never started, or a wrong rendezvous address; check that every host reaches the address named, on that port".to_string(),
        WarnKind::VersionMismatch => "the ranks load different NCCL versions: every process of a job must load the same one; compare the 'NCCL version' INFO line of each rank".to_string(),
        WarnKind::Timeout => "NCCL gave up waiting or aborted: the job hung or was stopped here".to_string(),
        WarnKind::Checker => "rankwise's checker returned this error to the program (the call refused, or the communicator failed): the line says what differs and on which ranks".to_string(),
        _ => return None,
    })
}
