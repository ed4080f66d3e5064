//! Per-rank listings that stay a few lines long at any N: which ranks are
//! shown, how the others are counted, and the ranks that hold a property,
//! found without visiting them.

use rankwise::core::{DataType, Func, Role, layout};

/// One line of a per-rank listing: a rank, or how many ranks were left out.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shown {
    Rank(usize),
    Elided(usize),
}

/// Ranks shown in per-rank listings: all up to 16, else the first three,
/// the last, the chosen rank and the root, with each gap counted; never a
/// list as long as N.
pub fn shown(n: usize, rank: usize, root: Option<usize>) -> Vec<Shown> {
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
pub fn elided(k: usize) -> String {
    format!("({k} rank{} not shown)", if k == 1 { "" } else { "s" })
}

/// `0-3`, `5`: the ranks `a..=b`.
pub fn span(a: usize, b: usize) -> String {
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
pub fn ranks_where(n: usize, root: usize, holds: impl Fn(usize) -> bool) -> Option<String> {
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
pub fn has_role(
    func: Func,
    n: usize,
    r: usize,
    root: usize,
    q: usize,
    send: bool,
    role: Role,
) -> bool {
    let l = layout(func, n, r, root, q);
    let (elems, rl) = if send {
        (l.send_elems, l.send_role)
    } else {
        (l.recv_elems, l.recv_role)
    };
    rl == role && (elems > 0 || !matches!(role, Role::Read | Role::Written) || q == 0)
}

pub fn size_text(elems: usize, dt: DataType) -> String {
    format!("{elems} elements ({} bytes)", elems * dt.size())
}

pub fn number(x: f64) -> String {
    let s = format!("{x:.6}");
    s.trim_end_matches('0').trim_end_matches('.').to_string()
}

/// A buffer's cell in the "Buffers" table: its size and role, or the role.
pub fn buffer_cell(elems: usize, role: Role, dt: DataType) -> String {
    match role {
        Role::Read | Role::Written => format!("{}, {}", size_text(elems, dt), role.describe()),
        _ => role.describe().to_string(),
    }
}
