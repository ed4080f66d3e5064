//! The seed's four log facts (从 NCCL INFO 日志反证调用链), read back from
//! the trace the framework layer printed while it ran, in NCCL's format:
//!
//! 1. the zero-count AllReduce is logged, and the next call shows the same
//!    opCount (the empty collective was discarded, not launched);
//! 2. an equal-split AlltoAllv is N Send/Recv pairs under one opCount;
//! 3. an uneven AlltoAllv's per-peer counts equal the input splits;
//! 4. the invalid root is rejected at the argument check on every rank
//!    (a WARN line, and no COLL line for that call).
//!
//! Each case's opCount on each rank was recorded as the case started, so
//! every fact is located by the case that produced it, never by guessing.

use super::cases::framework::Kind;
use super::cases::{Body, LayerPlan};
use super::reference::uneven_split;
use serde::Serialize;

/// One fact, checked.
#[derive(Debug, Clone, Serialize)]
pub struct Fact {
    pub claim: String,
    pub pass: bool,
    /// What the trace shows (or what it lacks).
    pub details: Vec<String>,
}

/// One parsed trace line.
#[derive(Debug, Clone)]
struct Line<'a> {
    rank: usize,
    warn: bool,
    /// The text after `NCCL INFO ` / `NCCL WARN `.
    body: &'a str,
    /// The line from `[rank]` on (without host:pid:tid).
    short: &'a str,
}

#[derive(Debug, Clone, PartialEq)]
struct Coll {
    func: String,
    op_count: u64,
    count: usize,
    root: i64,
}

fn parse(line: &str) -> Option<Line<'_>> {
    let open = line.find(" [")?;
    let short = &line[open + 1..];
    let close = short.find(']')?;
    let rank = short[1..close].parse().ok()?;
    let (warn, at) = if let Some(i) = short.find("NCCL INFO ") {
        (false, i + "NCCL INFO ".len())
    } else {
        (true, short.find("NCCL WARN ")? + "NCCL WARN ".len())
    };
    Some(Line {
        rank,
        warn,
        body: &short[at..],
        short,
    })
}

fn coll(body: &str) -> Option<Coll> {
    let (func, rest) = body.split_once(": opCount ")?;
    let mut words = rest.split_whitespace();
    let op_count = u64::from_str_radix(words.next()?, 16).ok()?;
    let mut count = None;
    let mut root = None;
    while let Some(w) = words.next() {
        match w {
            "count" => count = words.next()?.parse().ok(),
            "root" => root = words.next()?.parse().ok(),
            _ => {}
        }
    }
    Some(Coll {
        func: func.to_string(),
        op_count,
        count: count?,
        root: root?,
    })
}

struct Trace<'a> {
    lines: Vec<Line<'a>>,
}

impl<'a> Trace<'a> {
    fn new(lines: &'a [String]) -> Trace<'a> {
        Trace {
            lines: lines.iter().filter_map(|l| parse(l)).collect(),
        }
    }
    /// COLL lines of `rank` at `op_count`, in print order.
    fn at(&self, rank: usize, op_count: u64) -> Vec<(Coll, &'a str)> {
        self.lines
            .iter()
            .filter(|l| l.rank == rank && !l.warn)
            .filter_map(|l| coll(l.body).map(|c| (c, l.short)))
            .filter(|(c, _)| c.op_count == op_count)
            .collect()
    }
    fn warns(&self, rank: usize) -> Vec<&Line<'a>> {
        self.lines
            .iter()
            .filter(|l| l.rank == rank && l.warn)
            .collect()
    }
}

fn index_of(plan: &LayerPlan, want: impl Fn(&Kind) -> bool) -> Option<usize> {
    plan.cases
        .iter()
        .position(|c| matches!(&c.body, Body::Framework(k) if want(k)))
}

/// A check of one rank's trace given its opCounts per case.
type RankCheck<'a> = dyn Fn(usize, &[u64]) -> Result<(), String> + 'a;

/// Checks the four facts on the framework layer's trace. `op_counts[r]`
/// holds rank r's opCount before each case (None where the rank failed).
pub fn seed_facts(
    plan: &LayerPlan,
    n: usize,
    op_counts: &[Option<Vec<u64>>],
    trace: &[String],
) -> Vec<Fact> {
    let cx = Facts {
        plan,
        n,
        op_counts,
        trace: Trace::new(trace),
    };
    vec![
        zero_count(&cx),
        equal_split_alltoallv(&cx),
        uneven_alltoallv(&cx),
        invalid_root(&cx),
    ]
}

/// What every fact is checked against: the layer's plan and every rank's
/// opCounts and trace.
struct Facts<'a> {
    plan: &'a LayerPlan,
    n: usize,
    op_counts: &'a [Option<Vec<u64>>],
    trace: Trace<'a>,
}

impl Facts<'_> {
    /// Each rank's failure of `check` on its opCounts (or of its program).
    fn ranks_ok(&self, check: &RankCheck) -> Vec<String> {
        (0..self.n)
            .filter_map(|r| match &self.op_counts[r] {
                None => Some(format!(
                    "rank {r}: its program failed before the end of the layer"
                )),
                Some(v) => check(r, v).err().map(|e| format!("rank {r}: {e}")),
            })
            .collect()
    }
}

/// Fact 1: the zero-count AllReduce is logged and keeps the opCount.
fn zero_count(cx: &Facts<'_>) -> Fact {
    let (n, op_counts, t) = (cx.n, cx.op_counts, &cx.trace);
    let claim =
        "the zero-count AllReduce is logged, and the next call shows the same opCount".to_string();
    let Some(i) = index_of(cx.plan, |k| *k == Kind::AllReduceZero) else {
        return missing(claim);
    };
    let bad = cx.ranks_ok(&|r, ops| {
        let x = *ops.get(i).ok_or("no opCount recorded")?;
        let lines = t.at(r, x);
        match lines.as_slice() {
            [(a, _), (b, _)] if a.func == "AllReduce" && a.count == 0 && b.func != "AllReduce" => {}
            _ => return Err(format!("expected the count-0 AllReduce and the next call at opCount {x:x}, found {} line(s)", lines.len())),
        }
        match ops.get(i + 1) {
            Some(next) if *next == x => Ok(()),
            _ => Err("the communicator's opCount advanced past the empty call".into()),
        }
    });
    let mut details: Vec<String> = match op_counts
        .first()
        .and_then(|o| o.as_ref())
        .and_then(|o| o.get(i))
    {
        Some(x) => t.at(0, *x).iter().map(|(_, s)| s.to_string()).collect(),
        None => Vec::new(),
    };
    details.push(if bad.is_empty() {
        format!("the same on all {n} rank(s)")
    } else {
        bad.join("; ")
    });
    Fact {
        claim,
        pass: bad.is_empty(),
        details,
    }
}

/// Fact 2: an equal-split AlltoAllv is N Send/Recv pairs under one opCount.
fn equal_split_alltoallv(cx: &Facts<'_>) -> Fact {
    let (n, op_counts, t) = (cx.n, cx.op_counts, &cx.trace);
    let claim = format!("an equal-split AlltoAllv is {n} Send/Recv pair(s) under one opCount");
    let Some(i) = index_of(cx.plan, |k| *k == Kind::AlltoAllEqualSplits) else {
        return missing(claim);
    };
    let bad = cx.ranks_ok(&|r, ops| {
        let y = *ops.get(i).ok_or("no opCount recorded")?;
        let lines = t.at(r, y);
        let want: Vec<(String, i64)> = (0..n as i64)
            .flat_map(|p| [("Send".to_string(), p), ("Recv".to_string(), p)])
            .collect();
        let got: Vec<(String, i64)> = lines
            .iter()
            .map(|(c, _)| (c.func.clone(), c.root))
            .collect();
        if got != want {
            return Err(format!(
                "opCount {y:x} holds {got:?}, expected a Send and a Recv per peer in peer order"
            ));
        }
        if lines.iter().any(|(c, _)| c.count != 2) {
            return Err("the pairs do not all carry count 2".into());
        }
        match ops.get(i + 1) {
            Some(next) if *next == y + 1 => Ok(()),
            _ => Err("the group did not launch as exactly one operation".into()),
        }
    });
    let mut details = Vec::new();
    if let Some(y) = op_counts
        .first()
        .and_then(|o| o.as_ref())
        .and_then(|o| o.get(i))
    {
        let lines = t.at(0, *y);
        details.push(format!(
            "rank 0, opCount {y:x}: {}",
            lines
                .iter()
                .map(|(c, _)| format!("{} peer {} count {}", c.func, c.root, c.count))
                .collect::<Vec<_>>()
                .join(", ")
        ));
        if n <= 4 {
            details.extend(lines.iter().map(|(_, s)| s.to_string()));
        }
    }
    details.push(if bad.is_empty() {
        format!(
            "{} Send/Recv lines under one opCount on each of the {n} rank(s)",
            2 * n
        )
    } else {
        bad.join("; ")
    });
    Fact {
        claim,
        pass: bad.is_empty(),
        details,
    }
}

/// Fact 3: an uneven AlltoAllv's per-peer counts are its splits.
fn uneven_alltoallv(cx: &Facts<'_>) -> Fact {
    let (n, op_counts, t) = (cx.n, cx.op_counts, &cx.trace);
    let claim = "an uneven AlltoAllv's per-peer counts equal the input splits".to_string();
    let Some(i) = index_of(cx.plan, |k| *k == Kind::AlltoAllUneven) else {
        return missing(claim);
    };
    let mut shown = Vec::new();
    let bad = cx.ranks_ok(&|r, ops| {
        let z = *ops.get(i).ok_or("no opCount recorded")?;
        let lines = t.at(r, z);
        let by = |f: &str| -> Vec<(i64, usize)> {
            lines
                .iter()
                .filter(|(c, _)| c.func == f)
                .map(|(c, _)| (c.root, c.count))
                .collect()
        };
        let sends: Vec<(i64, usize)> = (0..n).map(|d| (d as i64, uneven_split(r, d))).collect();
        let recvs: Vec<(i64, usize)> = (0..n).map(|s| (s as i64, uneven_split(s, r))).collect();
        if by("Send") != sends {
            return Err(format!(
                "Send (peer, count) {:?} but input splits give {sends:?}",
                by("Send")
            ));
        }
        if by("Recv") != recvs {
            return Err(format!(
                "Recv (peer, count) {:?} but output splits give {recvs:?}",
                by("Recv")
            ));
        }
        Ok(())
    });
    for (r, ops) in op_counts.iter().enumerate().take(4) {
        if let Some(z) = ops.as_ref().and_then(|o| o.get(i)) {
            let counts = |f: &str| -> Vec<usize> {
                t.at(r, *z)
                    .iter()
                    .filter(|(c, _)| c.func == f)
                    .map(|(c, _)| c.count)
                    .collect()
            };
            let splits: Vec<usize> = (0..n).map(|d| uneven_split(r, d)).collect();
            let back: Vec<usize> = (0..n).map(|s| uneven_split(s, r)).collect();
            shown.push(format!(
                "rank {r}, opCount {z:x}: Send counts {:?} = input splits {splits:?}, Recv counts {:?} = output splits {back:?}",
                counts("Send"),
                counts("Recv")
            ));
        }
    }
    if n > 4 {
        shown.push(format!("… and likewise on ranks 4..{}", n - 1));
    }
    if !bad.is_empty() {
        shown.push(bad.join("; "));
    }
    Fact {
        claim,
        pass: bad.is_empty(),
        details: shown,
    }
}

/// Fact 4: the invalid root is rejected at the argument check.
fn invalid_root(cx: &Facts<'_>) -> Fact {
    let (n, t) = (cx.n, &cx.trace);
    let claim = format!("the invalid root {n} is rejected at the argument check on every rank");
    let Some(i) = index_of(cx.plan, |k| *k == Kind::InvalidRoot) else {
        return missing(claim);
    };
    let needle = format!("Broadcast: root {n} is out of range");
    let bad = cx.ranks_ok(&|r, ops| {
        let warns = t
            .warns(r)
            .iter()
            .filter(|l| l.body.contains(&needle))
            .count();
        if warns != 1 {
            return Err(format!(
                "{warns} WARN line(s) saying `{needle}`, expected 1"
            ));
        }
        let x = *ops.get(i).ok_or("no opCount recorded")?;
        if t.at(r, x)
            .iter()
            .any(|(c, _)| c.func == "Broadcast" && c.root == n as i64)
        {
            return Err("a COLL line was printed for the rejected call".into());
        }
        Ok(())
    });
    let mut details: Vec<String> = t
        .warns(0)
        .iter()
        .filter(|l| l.body.contains(&needle))
        .map(|l| l.short.to_string())
        .collect();
    details.push(if bad.is_empty() {
        format!("one WARN line and no COLL line for the call on each of the {n} rank(s)")
    } else {
        bad.join("; ")
    });
    Fact {
        claim,
        pass: bad.is_empty(),
        details,
    }
}

fn missing(claim: String) -> Fact {
    Fact {
        claim,
        pass: false,
        details: vec!["the suite has no case that produces this evidence".into()],
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_nccl_lines() {
        let l = "vm:590:590 [2] NCCL INFO Send: opCount 1a sendbuff (nil) recvbuff 0x10 count 3 datatype 4 op 0 root 1 comm 0x22 [nranks=4] stream (nil)";
        let p = parse(l).unwrap();
        assert_eq!(p.rank, 2);
        assert!(!p.warn);
        assert!(p.short.starts_with("[2] NCCL INFO Send"));
        assert_eq!(
            coll(p.body),
            Some(Coll {
                func: "Send".into(),
                op_count: 0x1a,
                count: 3,
                root: 1
            })
        );
        let w = parse("h:1:2 [3] NCCL WARN Broadcast: root 4 is out of range").unwrap();
        assert!(w.warn);
        assert_eq!(w.rank, 3);
        assert!(coll(w.body).is_none());
    }
}
