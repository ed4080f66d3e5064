//! `rankwise explain <op>`: the contract of one call, with every number
//! taken from `core` — buffer sizes and roles from `layout`, the in-place
//! offset from `in_place`, valid roots and rejections from `check_call` and
//! `check_buffers`, bandwidth from `Func::alg_bytes`/`bus_factor`.
//! Impossible calls (root out of range, in-place AlltoAll) are explained.
//!
//! Any N a communicator can have (up to `i32::MAX`, NCCL's `int nranks`)
//! is explained in the same few kilobytes: past 16 ranks the listings show
//! the first three, the last, the chosen rank and the root, and count the
//! ranks left out; nothing is computed or kept per rank.

use super::fail;
use rankwise::core::{
    AddressSpace, DataType, Func, Layout, RawCall, RedOp, Role, check_buffers, check_call,
    in_place, layout,
};
use std::fmt::Write;
use std::process::ExitCode;

#[derive(clap::Args, Debug)]
pub struct Args {
    #[command(flatten)]
    pub call: super::CallArgs,
    /// The rank whose pointers and C call to show [default: 0]
    #[arg(long)]
    pub rank: Option<usize>,
}

/// One line of a per-rank listing: a rank, or how many ranks were left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Shown {
    Rank(usize),
    Elided(usize),
}

/// Ranks shown in per-rank listings: all up to 16, else the first three,
/// the last, the chosen rank and the root, with each gap counted; never a
/// list as long as N.
fn shown(n: usize, rank: usize, root: Option<usize>) -> Vec<Shown> {
    if n <= 16 {
        return (0..n).map(Shown::Rank).collect();
    }
    let mut v: Vec<usize> = vec![0, 1, 2, rank, n - 1];
    v.extend(root);
    v.sort();
    v.dedup();
    let mut out = Vec::new();
    for (i, r) in v.iter().enumerate() {
        if i > 0 && *r != v[i - 1] + 1 {
            out.push(Shown::Elided(r - v[i - 1] - 1));
        }
        out.push(Shown::Rank(*r));
    }
    out
}

/// `(4 ranks not shown)`
fn elided(k: usize) -> String {
    format!("({k} rank{} not shown)", if k == 1 { "" } else { "s" })
}

/// `0-3`, `5`: the ranks `a..=b`.
fn span(a: usize, b: usize) -> String {
    if a == b {
        a.to_string()
    } else {
        format!("{a}-{b}")
    }
}

/// The ranks `r` of an N-rank call for which `holds(r)`, as `fmt_ranks`
/// writes them. A rank's layout depends only on whether it is the root
/// (`core::layout`), so asking the root and one other rank answers for all
/// N without visiting them (`ranks_where_matches_every_rank` checks this).
/// Unrooted ops pass any rank as `root`: every rank then answers alike.
fn ranks_where(n: usize, root: usize, holds: impl Fn(usize) -> bool) -> Option<String> {
    let on_root = holds(root);
    let on_others = n > 1 && holds((root + 1) % n);
    let last = n - 1;
    match (on_root, on_others) {
        (false, false) => None,
        (true, false) => Some(root.to_string()),
        (true, true) => Some(span(0, last)),
        (false, true) => {
            let mut parts = Vec::new();
            if root > 0 {
                parts.push(span(0, root - 1));
            }
            if root < last {
                parts.push(span(root + 1, last));
            }
            Some(parts.join(","))
        }
    }
}

/// Whether rank `r`'s send (or recv) buffer has `role` and is worth a line
/// under "Reads and writes" (a read or written buffer of 0 elements is not,
/// unless the call's count is 0).
fn has_role(func: Func, n: usize, r: usize, root: usize, q: usize, send: bool, role: Role) -> bool {
    let l = layout(func, n, r, root, q);
    let (elems, rl) = if send {
        (l.send_elems, l.send_role)
    } else {
        (l.recv_elems, l.recv_role)
    };
    rl == role && (elems > 0 || !matches!(role, Role::Read | Role::Written) || q == 0)
}

fn size_text(elems: usize, dt: DataType) -> String {
    format!("{elems} elements ({} bytes)", elems * dt.size())
}

fn number(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A space with one allocation, to ask `check_buffers` about example addresses.
struct OneAllocation(usize, usize);
impl AddressSpace for OneAllocation {
    fn allocation_of(&self, addr: usize) -> Option<(usize, usize)> {
        (addr >= self.0 && addr < self.0 + self.1.max(1)).then_some((self.0, self.1))
    }
}

pub fn run(args: Args) -> ExitCode {
    match explain(&args) {
        Ok(text) => {
            out!("{text}");
            ExitCode::SUCCESS
        }
        Err(e) => fail("explain", e),
    }
}

/// The explanation as text, or why the arguments are not a call at all.
pub fn explain(args: &Args) -> Result<String, String> {
    let func = args.call.collective;
    let (n, q, dt) = (args.call.ranks, args.call.count, args.call.dtype);
    super::check_size(n, q, dt, None)?;
    if n > i32::MAX as usize {
        return Err(format!(
            "--ranks {n} is more ranks than a communicator has: NCCL's nranks is a C int, at most {}",
            i32::MAX
        ));
    }
    let me = args.rank.unwrap_or(0);
    if me >= n {
        return Err(format!(
            "--rank {me} is not a rank of a {n}-rank communicator (ranks are 0..={})",
            n - 1
        ));
    }
    let op = args.call.redop.unwrap_or(RedOp::Sum);
    let root_arg = args.call.root.unwrap_or(0);
    let root_i32 = i32::try_from(root_arg)
        .map_err(|_| format!("--root {root_arg} does not fit the C API's int"))?;
    let mut o = String::new();
    let mut head = format!(
        "{} on {n} rank(s), count {q}, {}",
        func.c_name(),
        dt.nccl_name()
    );
    if func.reduces() {
        head.push_str(&format!(", {}", op.nccl_name()));
    }
    if func.is_rooted() {
        head.push_str(&format!(", root {root_arg}"));
    }
    if args.call.in_place {
        head.push_str(", in place");
    }
    let _ = writeln!(o, "{head}\n");
    if args.call.root.is_some() && !func.is_rooted() {
        let _ = writeln!(
            o,
            "note: {} takes no root; --root is not part of this call\n",
            func.name()
        );
    }
    if args.call.redop.is_some() && !func.reduces() {
        let _ = writeln!(
            o,
            "note: {} reduces nothing; --op is not part of this call\n",
            func.name()
        );
    }

    // the argument check, exactly as every rank runs it
    let raw = RawCall {
        func,
        sendbuff: 0,
        recvbuff: 0,
        count: q,
        datatype: dt.code(),
        op: op.builtin_code().unwrap_or(0),
        root: root_i32,
    };
    if let Err(e) = check_call(&raw, n, &|_| None) {
        let _ = writeln!(
            o,
            "REJECTED on every rank at the argument check ({}):\n  {}\n",
            e.code().nccl_name(),
            e.message
        );
        let _ = writeln!(o, "{}", roots_section(func, n));
        let _ = writeln!(
            o,
            "Nothing is queued and no COLL trace line is printed: each rank logs a WARN and the call returns {}.",
            e.code().nccl_name()
        );
        let _ = writeln!(
            o,
            "\nC call (rank {me})\n  {}",
            c_call(func, n, me, root_arg, q, dt, op, args.call.in_place)
        );
        return Ok(o);
    }
    let root = root_arg as usize;
    let lay = |r: usize| layout(func, n, r, root, q);

    // what count means
    let l_me = lay(me);
    let l_root = lay(root);
    let meaning = match func {
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
    let _ = writeln!(
        o,
        "What count means\n  {meaning}\n  Counts are elements of {} ({} bytes each), never bytes.{align}\n",
        dt.name(),
        dt.size()
    );

    if func.reduces() {
        let _ = writeln!(
            o,
            "Reduction ({})\n  {}\n",
            op.nccl_name(),
            op.semantics(dt, n)
        );
    }

    // buffers per rank
    let _ = writeln!(o, "Buffers (from the contract's layout)");
    let mut rows = Vec::new();
    let rooted = func.is_rooted().then_some(root);
    for r in shown(n, me, rooted) {
        match r {
            Shown::Elided(k) => rows.push(vec!["…".into(), elided(k), String::new()]),
            Shown::Rank(r) => {
                let l = lay(r);
                rows.push(vec![
                    format!(
                        "{r}{}",
                        if func.is_rooted() && r == root {
                            " (root)"
                        } else {
                            ""
                        }
                    ),
                    buffer_cell(l.send_elems, l.send_role, dt),
                    buffer_cell(l.recv_elems, l.recv_role, dt),
                ]);
            }
        }
    }
    for line in
        crate::verify::summary::render_table(&["rank", "sendbuff", "recvbuff"], &rows).lines()
    {
        let _ = writeln!(o, "  {line}");
    }
    let _ = writeln!(o);

    // in place
    let _ = writeln!(o, "In place");
    let _ = write!(
        o,
        "{}",
        in_place_section(func, n, me, root, q, dt, args.call.in_place)
    );
    let _ = writeln!(o);

    // reads and writes
    let _ = writeln!(o, "Reads and writes");
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
    let _ = writeln!(o);

    let _ = writeln!(o, "{}", roots_section(func, n));

    // diagram
    let legend = if func.reduces() {
        format!("; ⊕: {} over all ranks", op.name())
    } else {
        String::new()
    };
    let _ = writeln!(
        o,
        "Layout (rank-major blocks of {}; s→d: from rank s to rank d{legend})",
        size_text(q, dt)
    );
    for r in shown(n, me, rooted) {
        match r {
            Shown::Elided(k) => {
                let _ = writeln!(o, "  … {}", elided(k));
            }
            Shown::Rank(r) => {
                let (s, v) = diagram(func, n, r, root, lay(r));
                let _ = writeln!(o, "  rank {r:<3} sendbuff {s}");
                let _ = writeln!(o, "           recvbuff {v}");
            }
        }
    }
    let _ = writeln!(o);

    let _ = writeln!(
        o,
        "C call (rank {me})\n  {}\n",
        c_call(func, n, me, root_arg, q, dt, op, args.call.in_place)
    );

    let bytes = func.alg_bytes(n, q, dt.size());
    let factor = func.bus_factor(n);
    let _ = writeln!(
        o,
        "Bandwidth (nccl-tests)\n  size = {bytes} bytes per call (what algbw = size / time divides); busbw = algbw × {} at N={n}",
        number(factor)
    );
    Ok(o)
}

fn buffer_cell(elems: usize, role: Role, dt: DataType) -> String {
    match role {
        Role::Read | Role::Written => format!("{}, {}", size_text(elems, dt), role.describe()),
        _ => role.describe().to_string(),
    }
}

/// The argument check of a one-element call of `func` with this root.
fn check_root(func: Func, n: usize, root: i32) -> Result<(), rankwise::Error> {
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

fn roots_section(func: Func, n: usize) -> String {
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

fn in_place_section(
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
fn diagram(func: Func, n: usize, r: usize, root: usize, l: Layout) -> (String, String) {
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
fn c_call(
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::verify::summary::fmt_ranks;
    use proptest::prelude::*;

    const ROLES: [Role; 5] = [
        Role::Read,
        Role::Written,
        Role::Ignored,
        Role::Unused,
        Role::Undefined,
    ];

    #[test]
    fn ranks_where_matches_every_rank() {
        for func in Func::COLLECTIVES {
            for n in 1..=10 {
                for root in 0..n {
                    for q in [0, 2] {
                        for send in [true, false] {
                            for role in ROLES {
                                let holds = |r| has_role(func, n, r, root, q, send, role);
                                let every: Vec<usize> = (0..n).filter(|r| holds(*r)).collect();
                                let want = (!every.is_empty()).then(|| fmt_ranks(&every));
                                assert_eq!(
                                    ranks_where(n, root, holds),
                                    want,
                                    "{func:?} N={n} root {root} q={q} send={send} {role:?}"
                                );
                            }
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn roots_match_check_call() {
        for func in Func::COLLECTIVES.into_iter().filter(|f| f.is_rooted()) {
            for n in 1..=10usize {
                let valid: Vec<usize> = (0..=n + 1)
                    .filter(|r| check_root(func, n, *r as i32).is_ok())
                    .collect();
                let section = roots_section(func, n);
                assert!(
                    section.contains(&format!("valid roots: {} (", fmt_ranks(&valid))),
                    "{section}"
                );
            }
        }
    }

    proptest! {
        /// Any N a communicator can have: the explanation is a few
        /// kilobytes, its sizes are the closed forms, and every rank is
        /// either listed or counted among the ranks not shown.
        #[test]
        fn any_n_is_explained_compactly(
            n in prop_oneof![1usize..40, 1usize..=i32::MAX as usize],
            q in 0usize..100_000,
            func in proptest::sample::select(Func::COLLECTIVES.to_vec()),
            me_frac in 0.0f64..1.0,
            root_frac in 0.0f64..1.0,
        ) {
            let pick = |f: f64| ((n as f64 * f) as usize).min(n - 1);
            let mut a = args(func, n, q);
            a.rank = Some(pick(me_frac));
            a.call.root = Some(pick(root_frac) as i64);
            let t = explain(&a).unwrap();
            prop_assert!(t.len() < 8000, "{} bytes", t.len());
            // nccl-tests' size: N·q elements for the ops that move N blocks, else q
            let per_call = match func {
                Func::AllGather | Func::ReduceScatter | Func::AlltoAll | Func::Gather | Func::Scatter => n * q * 4,
                _ => q * 4,
            };
            let line = format!("size = {per_call} bytes per call");
            prop_assert!(t.contains(&line), "{}", t);
            if func == Func::AllGather {
                let line = format!("every recvbuff holds N × sendcount = {} elements ({} bytes)", n * q, n * q * 4);
                prop_assert!(t.contains(&line), "{}", t);
            }
            let table = t.split("Buffers (from the contract's layout)\n").nth(1).unwrap();
            let table = table.split("\n\n").next().unwrap();
            let mut covered = 0;
            for row in table.lines().skip(1) {
                match row.split("(").nth(1).and_then(|r| r.strip_suffix(" ranks not shown)").or(r.strip_suffix(" rank not shown)"))) {
                    Some(k) if row.trim_start().starts_with('…') => covered += k.parse::<usize>().unwrap(),
                    _ => covered += 1,
                }
            }
            prop_assert_eq!(covered, n, "{}", table);
        }
    }

    fn args(func: Func, n: usize, q: usize) -> Args {
        Args {
            call: crate::commands::CallArgs {
                collective: func,
                ranks: n,
                count: q,
                dtype: DataType::Int32,
                root: None,
                in_place: false,
                redop: None,
            },
            rank: None,
        }
    }

    #[test]
    fn all_gather_sizes_and_offset() {
        let mut a = args(Func::AllGather, 4, 3);
        a.call.in_place = true;
        a.rank = Some(2);
        let t = explain(&a).unwrap();
        assert!(
            t.contains("every recvbuff holds N × sendcount = 12 elements (48 bytes)"),
            "{t}"
        );
        assert!(
            t.contains("rank 2: sendbuff = recvbuff + 6 elements (24 bytes)"),
            "{t}"
        );
        assert!(
            t.contains("ncclAllGather(recvbuff + 6, recvbuff, 3, ncclInt32, comm, stream);"),
            "{t}"
        );
        assert!(t.contains("busbw = algbw × 0.75"), "{t}");
    }

    #[test]
    fn impossible_calls_are_explained() {
        let mut a = args(Func::Broadcast, 4, 3);
        a.call.root = Some(4);
        let t = explain(&a).unwrap();
        assert!(t.contains("REJECTED"), "{t}");
        assert!(
            t.contains("root 4 is out of range: valid roots are 0..=3"),
            "{t}"
        );
        let mut a = args(Func::AlltoAll, 4, 3);
        a.call.in_place = true;
        let t = explain(&a).unwrap();
        assert!(t.contains("AlltoAll has no in-place form"), "{t}");
        assert!(t.contains("ncclInvalidArgument"), "{t}");
        let mut a = args(Func::AllReduce, 4, 3);
        a.rank = Some(4);
        assert!(explain(&a).unwrap_err().contains("--rank 4 is not a rank"));
    }
}
