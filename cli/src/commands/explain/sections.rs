//! The sections of an explanation, each from `core`'s answers for the
//! call: what count means, the reduction, the buffers, the in-place form,
//! who reads and writes what, the roots, the layout, the C call and the
//! bandwidth accounting. Each returns its text with the blank line that
//! ends it.

use super::Call;
use super::listing::{
    Shown, buffer_cell, elided, has_role, number, ranks_where, shown, size_text, span,
};
use rankwise::core::{
    AddressSpace, DataType, Func, Layout, RawCall, RedOp, Role, check_buffers, check_call,
    in_place, layout,
};
use std::fmt::Write;

/// Why every rank refuses the call at the argument check, what it logs and
/// returns, and its C call.
pub fn rejected(c: &Call, e: &rankwise::Error) -> String {
    let mut o = String::new();
    let _ = writeln!(
        o,
        "REJECTED on every rank at the argument check ({}):\n  {}\n",
        e.code().nccl_name(),
        e.message
    );
    let _ = writeln!(o, "{}", roots_section(c.func, c.n));
    let _ = writeln!(
        o,
        "Nothing is queued and no COLL trace line is printed: each rank logs a WARN and the call returns {}.",
        e.code().nccl_name()
    );
    let _ = writeln!(o, "\nC call (rank {})\n  {}", c.me, c.c_call());
    o
}

/// What `count` means for this op, and the element rule.
pub fn count_meaning(c: &Call) -> String {
    let (q, dt) = (c.q, c.dt);
    let l_me = c.layout(c.me);
    let l_root = c.layout(c.root());
    let meaning = match c.func {
        Func::AllReduce => format!(
            "count = {q}: the elements of every rank's sendbuff and recvbuff ({}).",
            size_text(l_me.recv_elems, dt)
        ),
        Func::Reduce => format!(
            "count = {q}: the elements every rank contributes; only the root's recvbuff receives the result ({}).",
            size_text(l_root.recv_elems, dt)
        ),
        Func::Broadcast => format!(
            "count = {q}: the elements the root sends and every rank receives ({}).",
            size_text(l_me.recv_elems, dt)
        ),
        Func::AllGather => format!(
            "sendcount = {q}: the elements each rank contributes; every recvbuff holds N × sendcount = {}.",
            size_text(l_me.recv_elems, dt)
        ),
        Func::ReduceScatter => format!(
            "recvcount = {q}: the elements each rank receives; every sendbuff holds N × recvcount = {}.",
            size_text(l_me.send_elems, dt)
        ),
        Func::AlltoAll => format!(
            "count = {q}: the elements each rank sends to each peer and receives from each; both buffers hold N × count = {}.",
            size_text(l_me.send_elems, dt)
        ),
        Func::Gather => format!(
            "count = {q}: the elements each rank sends; the root's recvbuff holds N × count = {}.",
            size_text(l_root.recv_elems, dt)
        ),
        Func::Scatter => format!(
            "count = {q}: the elements each rank receives; the root's sendbuff holds N × count = {}.",
            size_text(l_root.send_elems, dt)
        ),
        Func::Send | Func::Recv => unreachable!("explain takes collectives only"),
    };
    let align = if dt.size() > 1 {
        format!(
            "\n  Pointers are aligned to the element: sendbuff and recvbuff must be multiples of {} bytes (a misaligned one is refused, ncclInvalidArgument).",
            dt.size()
        )
    } else {
        String::new()
    };
    format!(
        "What count means\n  {meaning}\n  Counts are elements of {} ({} bytes each), never bytes.{align}\n\n",
        dt.name(),
        dt.size()
    )
}

/// The reduction's semantics, for ops that reduce.
pub fn reduction(c: &Call) -> String {
    if !c.func.reduces() {
        return String::new();
    }
    format!(
        "Reduction ({})\n  {}\n\n",
        c.op.nccl_name(),
        c.op.semantics(c.dt, c.n)
    )
}

/// Every shown rank's buffers: size and role, from the contract's layout.
pub fn buffers(c: &Call) -> String {
    let mut o = String::from("Buffers (from the contract's layout)\n");
    let root = c.root();
    let mut rows = Vec::new();
    for r in shown(c.n, c.me, c.rooted()) {
        match r {
            Shown::Elided(k) => rows.push(vec!["…".into(), elided(k), String::new()]),
            Shown::Rank(r) => {
                let l = c.layout(r);
                let mark = if c.func.is_rooted() && r == root {
                    " (root)"
                } else {
                    ""
                };
                rows.push(vec![
                    format!("{r}{mark}"),
                    buffer_cell(l.send_elems, l.send_role, c.dt),
                    buffer_cell(l.recv_elems, l.recv_role, c.dt),
                ]);
            }
        }
    }
    for line in
        crate::verify::summary::render_table(&["rank", "sendbuff", "recvbuff"], &rows).lines()
    {
        let _ = writeln!(o, "  {line}");
    }
    o.push('\n');
    o
}

/// The in-place form of this rank's call.
pub fn in_place_form(c: &Call) -> String {
    format!(
        "In place\n{}\n",
        in_place_section(c.func, c.n, c.me, c.root(), c.q, c.dt, c.in_place)
    )
}

/// Which ranks read, write, ignore or leave undefined each buffer.
pub fn reads_and_writes(c: &Call) -> String {
    let (func, n, root, q) = (c.func, c.n, c.root(), c.q);
    let mut o = String::from("Reads and writes\n");
    for (buf, pick) in [("sendbuff", true), ("recvbuff", false)] {
        for role in [
            Role::Read,
            Role::Written,
            Role::Ignored,
            Role::Unused,
            Role::Undefined,
        ] {
            if let Some(ranks) = ranks_where(n, root, |r| has_role(func, n, r, root, q, pick, role))
            {
                let _ = writeln!(o, "  {buf} {}: rank(s) {ranks}", role.describe());
            }
        }
    }
    if q == 0 {
        let _ = writeln!(
            o,
            "  count 0: the call passes its checks, is logged, and is then discarded (no data moves; opCount does not advance)"
        );
    }
    o.push('\n');
    o
}

/// Every shown rank's buffers as blocks: who sends what where.
pub fn layout_diagram(c: &Call) -> String {
    let legend = if c.func.reduces() {
        format!("; ⊕: {} over all ranks", c.op.name())
    } else {
        String::new()
    };
    let mut o = format!(
        "Layout (rank-major blocks of {}; s→d: from rank s to rank d{legend})\n",
        size_text(c.q, c.dt)
    );
    for r in shown(c.n, c.me, c.rooted()) {
        match r {
            Shown::Elided(k) => {
                let _ = writeln!(o, "  … {}", elided(k));
            }
            Shown::Rank(r) => {
                let (s, v) = diagram(c.func, c.n, r, c.root(), c.layout(r));
                let _ = writeln!(o, "  rank {r:<3} sendbuff {s}");
                let _ = writeln!(o, "           recvbuff {v}");
            }
        }
    }
    o.push('\n');
    o
}

/// This rank's call as C.
pub fn c_call_section(c: &Call) -> String {
    format!("C call (rank {})\n  {}\n\n", c.me, c.c_call())
}

/// The bytes nccl-tests divides by and the bus factor at this N.
pub fn bandwidth(c: &Call) -> String {
    let bytes = c.func.alg_bytes(c.n, c.q, c.dt.size());
    let factor = c.func.bus_factor(c.n);
    format!(
        "Bandwidth (nccl-tests)\n  size = {bytes} bytes per call (what algbw = size / time divides); busbw = algbw × {} at N={}\n",
        number(factor),
        c.n
    )
}

/// A space with one allocation, to ask `check_buffers` about example addresses.
struct OneAllocation(usize, usize);
impl AddressSpace for OneAllocation {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        (addr >= self.0 && addr < self.0 + self.1.max(1)).then_some((self.0, self.1))
    }
}

/// The argument check of a one-element call of `func` with this root.
pub fn check_root(func: Func, n: usize, root: i32) -> Result<(), rankwise::Error> {
    let raw = RawCall {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: 1,
        datatype: 0,
        op: 0,
        root,
    };
    check_call(&raw, n, &|_| None).map(|_| ())
}

pub fn roots_section(func: Func, n: usize) -> String {
    if !func.is_rooted() {
        return format!("Roots\n  {} takes no root.\n", func.name());
    }
    // check_call accepts exactly the roots 0..N (`roots_match_check_call`
    // holds it to that for small N); listing them costs nothing per rank
    let mut s = format!(
        "Roots\n  valid roots: {} (communicator ranks, not device ids)\n",
        span(0, n - 1)
    );
    if let Err(e) = check_root(func, n, n as i32) {
        let _ = writeln!(s, "  root {n}: {}", e.message);
    }
    s
}

pub fn in_place_section(
    func: Func,
    n: usize,
    me: usize,
    root: usize,
    q: usize,
    dt: DataType,
    asked: bool,
) -> String {
    let mut s = String::new();
    let size = dt.size();
    match in_place(func, me, root, q) {
        Some(ip) => {
            let d = ip.send_minus_recv;
            let (lhs, rhs) = if d >= 0 {
                ("sendbuff", "recvbuff")
            } else {
                ("recvbuff", "sendbuff")
            };
            let k = d.unsigned_abs();
            let _ = writeln!(
                s,
                "  {}{}",
                ip.equation,
                if asked {
                    ""
                } else {
                    "   (the form --in-place uses)"
                }
            );
            let _ = writeln!(
                s,
                "  rank {me}: {lhs} = {rhs} + {k} elements ({} bytes)",
                k * size
            );
            let others: Vec<String> = (0..n.min(8))
                .filter_map(|r| {
                    in_place(func, r, root, q)
                        .map(|ip| format!("rank {r}: {:+}", ip.send_minus_recv))
                })
                .collect();
            if !others.is_empty() && matches!(func, Func::AllGather | Func::ReduceScatter) {
                let _ = writeln!(
                    s,
                    "  sendbuff - recvbuff in elements, per rank: {}{}",
                    others.join(", "),
                    if n > 8 { ", …" } else { "" }
                );
            }
            if k > 0 && q > 0 {
                let _ = writeln!(
                    s,
                    "  so on rank {me} {lhs} is block {} of {rhs}'s {n} blocks",
                    k / q
                );
            }
            if d == 0 && !matches!(func, Func::AllReduce | Func::Reduce | Func::Broadcast) {
                let _ = writeln!(
                    s,
                    "  (on rank {me} the offset is 0, so sendbuff == recvbuff; on other ranks it is not)"
                );
            }
        }
        None if func == Func::AlltoAll => {
            let _ = writeln!(
                s,
                "  AlltoAll has no in-place form in the API: sendbuff and recvbuff must not overlap."
            );
            if asked {
                let l = layout(func, n, me, root, q);
                let base = 0x10000;
                let space = OneAllocation(base, l.send_elems.max(l.recv_elems) * size);
                let call = check_call(
                    &RawCall {
                        func,
                        sendbuff: base,
                        recvbuff: base,
                        count: q,
                        datatype: dt.code(),
                        op: 0,
                        root: 0,
                    },
                    n,
                    &|_| None,
                );
                match call.and_then(|c| check_buffers(&c, n, me, &space)) {
                    Err(e) => {
                        let _ = writeln!(
                            s,
                            "  with sendbuff == recvbuff (example address {base:#x}) rankwise rejects the call ({}):\n    {}",
                            e.code().nccl_name(),
                            e.message
                        );
                    }
                    Ok(()) => {
                        let _ = writeln!(
                            s,
                            "  with count 0 no memory is touched, so even sendbuff == recvbuff passes."
                        );
                    }
                }
                let _ = writeln!(
                    s,
                    "  (NCCL does not detect overlap: it would silently corrupt the data.)"
                );
            }
        }
        None => {
            let l = layout(func, n, me, root, q);
            let _ = writeln!(
                s,
                "  {} has an in-place form on the root only (rank {root}: {}).",
                func.name(),
                in_place(func, root, root, q)
                    .map(|ip| ip.equation)
                    .unwrap_or("")
            );
            let _ = writeln!(
                s,
                "  rank {me} is not the root: sendbuff {}, recvbuff {}.",
                buffer_cell(l.send_elems, l.send_role, dt),
                buffer_cell(l.recv_elems, l.recv_role, dt)
            );
        }
    }
    s
}

fn blocks(labels: Vec<String>) -> String {
    format!("[{}]", labels.join(" | "))
}

/// The blocks `label(0) | … | label(n-1)`; past 8, only the first three
/// and the last, made without the N-1 others.
fn blocks_of(n: usize, label: &dyn Fn(usize) -> String) -> String {
    if n > 8 {
        blocks(vec![label(0), label(1), label(2), "…".into(), label(n - 1)])
    } else {
        blocks((0..n).map(label).collect())
    }
}

/// The send and recv buffers of rank `r` as labelled blocks.
pub fn diagram(func: Func, n: usize, r: usize, root: usize, l: Layout) -> (String, String) {
    let text = |role: Role| format!("— {}", role.describe());
    let all = |f: &dyn Fn(usize) -> String| blocks_of(n, f);
    let send = match (l.send_role, func) {
        (Role::Read, Func::ReduceScatter | Func::AlltoAll | Func::Scatter) => {
            all(&|d| format!("{r}→{d}"))
        }
        (Role::Read, Func::Gather) => blocks(vec![format!("{r}→{root}")]),
        (Role::Read, Func::Broadcast) => blocks(vec![format!("{r}→*")]),
        (Role::Read, Func::AllGather) => blocks(vec![format!("{r}→*")]),
        (Role::Read, _) => blocks(vec![format!("{r}")]),
        (role, _) => text(role),
    };
    let recv = match (l.recv_role, func) {
        (Role::Written, Func::AllReduce | Func::Reduce) => blocks(vec!["⊕ 0..N-1".into()]),
        (Role::Written, Func::ReduceScatter) => blocks(vec![format!("⊕ *→{r}")]),
        (Role::Written, Func::Broadcast | Func::Scatter) => blocks(vec![format!("{root}→{r}")]),
        (Role::Written, Func::AllGather | Func::AlltoAll | Func::Gather) => {
            all(&|s| format!("{s}→{r}"))
        }
        (Role::Written, _) => blocks(vec!["?".into()]),
        (role, _) => text(role),
    };
    (send, recv)
}

#[allow(clippy::too_many_arguments)]
pub fn c_call(
    func: Func,
    n: usize,
    me: usize,
    root: i64,
    q: usize,
    dt: DataType,
    op: RedOp,
    in_place_form: bool,
) -> String {
    let r = usize::try_from(root).unwrap_or(usize::MAX);
    let l = layout(func, n, me, r, q);
    let null = |role: Role| matches!(role, Role::Undefined | Role::Unused);
    let (send, recv) = match (in_place_form, in_place(func, me, r, q)) {
        (true, Some(ip)) if ip.send_minus_recv > 0 => (
            format!("recvbuff + {}", ip.send_minus_recv),
            "recvbuff".to_string(),
        ),
        (true, Some(ip)) if ip.send_minus_recv < 0 => (
            "sendbuff".to_string(),
            format!("sendbuff + {}", -ip.send_minus_recv),
        ),
        (true, Some(_)) => ("buff".to_string(), "buff".to_string()),
        (true, None) if func == Func::AlltoAll => (
            "buff".to_string(),
            "buff /* rejected: no in-place form */".to_string(),
        ),
        _ => (
            if null(l.send_role) {
                "NULL".into()
            } else {
                "sendbuff".into()
            },
            if null(l.recv_role) {
                "NULL".into()
            } else {
                "recvbuff".into()
            },
        ),
    };
    let c = func.c_name();
    let t = dt.nccl_name();
    let o = op.nccl_name();
    match func {
        Func::AllReduce | Func::ReduceScatter => {
            format!("{c}({send}, {recv}, {q}, {t}, {o}, comm, stream);")
        }
        Func::Reduce => format!("{c}({send}, {recv}, {q}, {t}, {o}, {root}, comm, stream);"),
        Func::Broadcast | Func::Gather | Func::Scatter => {
            format!("{c}({send}, {recv}, {q}, {t}, {root}, comm, stream);")
        }
        _ => format!("{c}({send}, {recv}, {q}, {t}, comm, stream);"),
    }
}
