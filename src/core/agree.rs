//! Cross-rank agreement: before any data moves, every rank's posted calls
//! must describe the same operation. Besides catching the mismatches NCCL
//! turns into hangs or silent corruption, this is what makes the data phase
//! memory-safe: extents were checked per rank against that rank's own count.
//!
//! Engines only exchange what each rank posted (the local engine through
//! its mailboxes, others through their own channel); comparing the posts
//! and wording the error is this module's, so every engine reports a
//! mismatch in the same words.

use super::Posted;
use super::{Error, ErrorKind};
use std::collections::BTreeMap;

/// `ranks 0,1,3 pass 1024, rank 2 passes 1000`
fn split_by<V: Ord + std::fmt::Display>(values: &[V], verb: &str) -> String {
    let mut groups: BTreeMap<&V, Vec<usize>> = BTreeMap::new();
    for (r, v) in values.iter().enumerate() {
        groups.entry(v).or_default().push(r);
    }
    let mut parts: Vec<(Vec<usize>, &V)> = groups.into_iter().map(|(v, rs)| (rs, v)).collect();
    parts.sort_by_key(|(rs, _)| (std::cmp::Reverse(rs.len()), rs[0]));
    parts
        .iter()
        .map(|(rs, v)| {
            let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
            if rs.len() == 1 {
                let third = if verb.ends_with('s') || verb.ends_with("ch") {
                    "es"
                } else {
                    "s"
                };
                format!("rank {} {verb}{third} {v}", list[0])
            } else {
                format!("ranks {} {verb} {v}", list.join(","))
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn differs<V: PartialEq>(values: &[V]) -> bool {
    values.windows(2).any(|w| w[0] != w[1])
}

/// When most ranks agree on an operation and the others are already past it
/// (a later opCount), those skipped it: `rank 2 skipped Broadcast #12: it is
/// waiting in AllReduce #13`.
fn skipped(all: &[Posted], i: usize) -> Option<String> {
    let key = |p: &Posted| (p.calls[i].func, p.op_count);
    let mut counts: BTreeMap<_, usize> = BTreeMap::new();
    for p in all {
        *counts.entry(key(p)).or_default() += 1;
    }
    let (&(func, k), &most) = counts.iter().max_by_key(|(_, c)| **c)?;
    if most * 2 <= all.len() {
        return None;
    }
    let mut parts = Vec::new();
    for (r, p) in all.iter().enumerate() {
        if key(p) == (func, k) {
            continue;
        }
        if p.op_count <= k {
            return None;
        }
        parts.push(format!(
            "rank {r} skipped {func} #{k}: it is waiting in {} #{}",
            p.calls[i].func, p.op_count
        ));
    }
    Some(parts.join("; "))
}

/// `: rank 2 skipped a call or makes its calls in another order`, naming
/// the ranks outside the largest group.
fn order_hint(all: &[Posted], i: usize) -> String {
    let mut counts: BTreeMap<crate::core::Func, usize> = BTreeMap::new();
    for p in all {
        *counts.entry(p.calls[i].func).or_default() += 1;
    }
    let Some((&func, &most)) = counts.iter().max_by_key(|(_, c)| **c) else {
        return String::new();
    };
    if most * 2 <= all.len() {
        return String::new();
    }
    let odd: Vec<String> = (0..all.len())
        .filter(|r| all[*r].calls[i].func != func)
        .map(|r| r.to_string())
        .collect();
    let who = if odd.len() == 1 {
        format!("rank {}", odd[0])
    } else {
        format!("ranks {}", odd.join(","))
    };
    format!("; {who} skipped a call or makes its calls in another order")
}

/// Every rank's posted calls, grouped by what they are, so an error line
/// can show both sides in full: `ranks 0,1,3: AllReduce count 4 int32 sum;
/// rank 2: AllReduce count 5 int32 sum`.
pub fn sides(all: &[Posted]) -> String {
    let describe = |p: &Posted| -> String {
        let calls: Vec<String> = p
            .calls
            .iter()
            .map(|c| {
                let mut d = format!("{} count {} {}", c.func, c.count, c.datatype);
                if c.func.reduces() {
                    d += &format!(" {}", c.op);
                }
                if c.func.is_rooted() {
                    d += &format!(" root {}", c.root);
                }
                d
            })
            .collect();
        if calls.is_empty() {
            "no collective".to_string()
        } else {
            calls.join(" + ")
        }
    };
    let mut groups: Vec<(String, Vec<usize>)> = Vec::new();
    for (r, p) in all.iter().enumerate() {
        let d = describe(p);
        match groups.iter_mut().find(|(g, _)| *g == d) {
            Some((_, rs)) => rs.push(r),
            None => groups.push((d, vec![r])),
        }
    }
    groups.sort_by_key(|(_, rs)| (std::cmp::Reverse(rs.len()), rs[0]));
    groups
        .iter()
        .map(|(d, rs)| {
            let list: Vec<String> = rs.iter().map(|r| r.to_string()).collect();
            let who = if rs.len() == 1 { "rank" } else { "ranks" };
            format!("{who} {}: {d}", list.join(","))
        })
        .collect::<Vec<_>>()
        .join("; ")
}

/// A launch on which some ranks gave notice instead of posting their calls
/// (`notices`: each one's rank and reason; a rank's call was refused
/// there, or it gave up on the launch): Ok when all `nranks` did, so nobody
/// enters NCCL with it; otherwise the error of the ranks that made the
/// call, which NCCL would have left waiting for the others.
pub fn notices(what: &str, notices: &[(usize, String)], nranks: usize) -> Result<(), Error> {
    if notices.is_empty() || notices.len() == nranks {
        return Ok(());
    }
    let said: Vec<String> = notices
        .iter()
        .map(|(r, why)| format!("rank {r} will not make {what}: {why}"))
        .collect();
    Err(Error::new(ErrorKind::RemoteError, said.join("; ")))
}

/// The error of a rank whose call was refused here while ranks `made`
/// made it: they fail with it, and so does this communicator.
pub fn made_anyway(what: &str, made: &[usize]) -> Error {
    let who = match made {
        [r] => format!("rank {r} made"),
        _ => format!(
            "ranks {} made",
            made.iter()
                .map(|r| r.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    };
    Error::new(
        ErrorKind::RemoteError,
        format!("{who} {what}, which this rank refused: the communicator fails on every rank"),
    )
}

/// Ok when all ranks posted the same calls; otherwise the Mismatch every rank returns.
pub fn collectives(all: &[Posted]) -> Result<(), Error> {
    // the common case allocates nothing: compare signatures, explain only on a difference
    let first = &all[0];
    let same = |p: &Posted| {
        p.calls.len() == first.calls.len()
            && p.calls
                .iter()
                .zip(&first.calls)
                .all(|(a, b)| a.signature() == b.signature())
    };
    if all.iter().all(same) {
        return Ok(());
    }
    explain(all)
}

/// The Mismatch error for posts that differ.
fn explain(all: &[Posted]) -> Result<(), Error> {
    let first = &all[0];
    let name = first
        .calls
        .first()
        .map(|c| c.func.name())
        .unwrap_or("group");
    let head = format!("{name} #{}", first.op_count);
    let mismatch = |what: String| Err(Error::new(ErrorKind::Mismatch, format!("{head}: {what}")));
    let lens: Vec<usize> = all.iter().map(|p| p.calls.len()).collect();
    if differs(&lens) {
        return mismatch(format!(
            "number of fused collectives differs: {}",
            split_by(&lens, "launch")
        ));
    }
    for i in 0..first.calls.len() {
        let at = if first.calls.len() > 1 {
            format!(" (call {i} of the group)")
        } else {
            String::new()
        };
        let funcs: Vec<String> = all
            .iter()
            .map(|p| format!("{} #{}", p.calls[i].func, p.op_count))
            .collect();
        if differs(&all.iter().map(|p| p.calls[i].func).collect::<Vec<_>>()) {
            if let Some(msg) = skipped(all, i) {
                return Err(Error::new(ErrorKind::Mismatch, msg));
            }
            return mismatch(format!(
                "ranks are in different operations{at}: {}{}",
                split_by(&funcs, "call"),
                order_hint(all, i)
            ));
        }
        let c0 = &first.calls[i];
        let counts: Vec<usize> = all.iter().map(|p| p.calls[i].count).collect();
        if differs(&counts) {
            return mismatch(format!("count differs{at}: {}", split_by(&counts, "pass")));
        }
        let types: Vec<&str> = all
            .iter()
            .map(|p| p.calls[i].datatype.nccl_name())
            .collect();
        if differs(&types) {
            return mismatch(format!(
                "datatype differs{at}: {}",
                split_by(&types, "pass")
            ));
        }
        if c0.func.reduces() {
            let ops: Vec<String> = all.iter().map(|p| p.calls[i].op.to_string()).collect();
            if differs(&ops) {
                return mismatch(format!(
                    "reduction op differs{at}: {}",
                    split_by(&ops, "pass")
                ));
            }
        }
        if c0.func.is_rooted() {
            let roots: Vec<usize> = all.iter().map(|p| p.calls[i].root).collect();
            if differs(&roots) {
                return mismatch(format!("root differs{at}: {}", split_by(&roots, "pass")));
            }
        }
    }
    // signatures differ only in a field not compared above (a PreMulSum
    // scalar, say): report it plainly
    mismatch("the calls differ".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::core::{Call, DataType, Func, RedOp};

    fn post(op_count: u64, func: Func, count: usize) -> Posted {
        let call = Call {
            func,
            sendbuff: 0,
            recvbuff: 0,
            count,
            datatype: DataType::Float32,
            op: RedOp::Sum,
            op_code: 0,
            root: 0,
        };
        Posted {
            op_count,
            calls: vec![call],
        }
    }

    #[test]
    fn sides_show_every_group_of_ranks_in_full() {
        let all = vec![
            post(7, Func::AllReduce, 4),
            post(7, Func::AllReduce, 4),
            post(7, Func::AllReduce, 5),
            post(7, Func::AllReduce, 4),
        ];
        assert_eq!(
            sides(&all),
            "ranks 0,1,3: AllReduce count 4 float sum; rank 2: AllReduce count 5 float sum"
        );
    }

    #[test]
    fn count_mismatch_names_every_rank() {
        let all = vec![
            post(7, Func::AllReduce, 1024),
            post(7, Func::AllReduce, 1024),
            post(7, Func::AllReduce, 1000),
            post(7, Func::AllReduce, 1024),
        ];
        let e = collectives(&all).unwrap_err();
        assert_eq!(e.kind, ErrorKind::Mismatch);
        assert_eq!(
            e.message,
            "AllReduce #7: count differs: ranks 0,1,3 pass 1024, rank 2 passes 1000"
        );
    }

    #[test]
    fn a_skipped_call_is_named() {
        let all = vec![
            post(12, Func::Broadcast, 4),
            post(12, Func::Broadcast, 4),
            post(13, Func::AllReduce, 4),
            post(12, Func::Broadcast, 4),
        ];
        let e = collectives(&all).unwrap_err();
        assert_eq!(
            e.message,
            "rank 2 skipped Broadcast #12: it is waiting in AllReduce #13"
        );
    }

    #[test]
    fn a_skipped_call_shows_as_different_operations() {
        let all = vec![post(12, Func::Broadcast, 4), post(13, Func::AllReduce, 4)];
        let e = collectives(&all).unwrap_err();
        assert!(
            e.message
                .contains("rank 0 calls Broadcast #12, rank 1 calls AllReduce #13"),
            "{}",
            e.message
        );
        assert!(collectives(&[post(1, Func::AllGather, 3), post(1, Func::AllGather, 3)]).is_ok());
    }

    #[test]
    fn notices_fail_the_ranks_that_made_the_call_unless_every_rank_gave_one() {
        let said = vec![(2, "its call was refused there (x)".to_string())];
        let e = notices("AllReduce #1", &said, 4).unwrap_err();
        assert_eq!(e.kind, ErrorKind::RemoteError);
        assert_eq!(
            e.message,
            "rank 2 will not make AllReduce #1: its call was refused there (x)"
        );
        let all: Vec<(usize, String)> = (0..3).map(|r| (r, "x".to_string())).collect();
        assert!(notices("AllReduce #1", &all, 3).is_ok());
        assert!(notices("AllReduce #1", &[], 3).is_ok());
        let e = made_anyway("AllReduce #1", &[0, 1, 3]);
        assert_eq!(
            e.message,
            "ranks 0,1,3 made AllReduce #1, which this rank refused: the communicator fails on every rank"
        );
        assert!(
            made_anyway("Send #0 to rank 1 (count 1, int8, opCount 0)", &[1])
                .message
                .starts_with("rank 1 made Send #0")
        );
    }
}
