//! `logs summary`: calls and bytes per communicator, rank and op, bytes by
//! the nccl-tests convention (docs/reference/contracts.md §6). A call whose count would
//! make it move more than [`MAX_CALL_BYTES`] is named as implausible and
//! left out of the bytes.

use super::findings::{datatype_name, datatype_size, loc_str, malformed_calls_note};
use super::model::{Collected, Counts, FileInfo, Sig};
use super::resolve::resolve;
use crate::core::Func;
use serde::Serialize;
use std::collections::{BTreeMap, HashMap};

/// Calls and bytes per communicator, rank and op.
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub counts: Counts,
    pub files: Vec<FileInfo>,
    pub communicators: Vec<CommSummary>,
    /// COLL lines that could not be read (and so are not counted): how
    /// many, and the first one.
    pub malformed_calls: Option<String>,
}

#[derive(Clone, Debug, Serialize)]
pub struct CommSummary {
    pub name: String,
    pub nranks: u32,
    pub ranks: Vec<RankSummary>,
}

#[derive(Clone, Debug, Serialize)]
pub struct RankSummary {
    pub rank: u32,
    pub rank_inferred: bool,
    pub host: String,
    pub pid: u32,
    pub calls: u64,
    /// The sum over `ops`: exact (each call counted is under
    /// [`MAX_CALL_BYTES`], so no sum of them overflows 128 bits).
    pub bytes: u128,
    pub ops: Vec<OpSummary>,
    /// Calls whose datatype code has no known size (their bytes are not counted).
    pub unknown_datatype_calls: u64,
    /// Calls whose count makes them move more than [`MAX_CALL_BYTES`] (or
    /// more than 64 bits count): not real calls, and not in the bytes.
    pub implausible_count_calls: u64,
    /// The first of them.
    pub first_implausible: Option<ImplausibleCall>,
}

/// A call whose count is implausible, as the summary names it.
#[derive(Clone, Debug, Serialize, PartialEq, Eq)]
pub struct ImplausibleCall {
    pub op: Func,
    pub count: u64,
    pub datatype: String,
    pub location: String,
    /// Its bytes by the convention; `None` past 64 bits.
    pub bytes: Option<u64>,
}

#[derive(Clone, Debug, Serialize)]
pub struct OpSummary {
    pub op: Func,
    pub calls: u64,
    /// Bytes by the nccl-tests convention (docs/reference/contracts.md §6).
    pub bytes: u128,
}

/// The most bytes one call can move by the nccl-tests convention, which is
/// also the size of its largest buffer on one rank: 256 TiB, more memory
/// than any one machine holds. A larger count is a corrupted line.
pub const MAX_CALL_BYTES: u64 = 1 << 48;

/// What one call counts for in the summary.
enum CallBytes {
    Known(u64),
    UnknownDatatype,
    /// Over [`MAX_CALL_BYTES`]: the size, or `None` beyond 64 bits.
    Implausible(Option<u64>),
}

fn call_bytes(sig: &Sig, nranks: u32) -> CallBytes {
    let Some(size) = datatype_size(sig.datatype) else {
        return CallBytes::UnknownDatatype;
    };
    match sig.op.alg_bytes_checked(u64::from(nranks), sig.count, size) {
        Some(b) if b <= MAX_CALL_BYTES => CallBytes::Known(b),
        b => CallBytes::Implausible(b),
    }
}

pub fn summarize(c: &Collected) -> Summary {
    let groups = resolve(c);
    let communicators = groups
        .iter()
        .map(|g| CommSummary {
            name: g.name.clone(),
            nranks: g.nranks,
            ranks: g
                .members
                .iter()
                .map(|&(rank, si, inferred)| {
                    let s = &c.streams[si];
                    // count per signature first: far fewer than calls
                    let mut per_sig: HashMap<u32, u64> = HashMap::new();
                    for rec in &s.calls {
                        *per_sig.entry(rec.sig).or_default() += 1;
                    }
                    // ops in the order of `Func::ALL` (AllReduce first)
                    let mut ops: BTreeMap<usize, (u64, u128)> = BTreeMap::new();
                    let (mut unknown, mut implausible) = (0, 0);
                    for (sig, n) in per_sig {
                        let sig = c.sigs[sig as usize];
                        let e = ops.entry(sig.op.index()).or_default();
                        e.0 += n;
                        match call_bytes(&sig, g.nranks) {
                            // ≤ 2^48 · 2^64: exact in 128 bits
                            CallBytes::Known(b) => e.1 += u128::from(b) * u128::from(n),
                            CallBytes::UnknownDatatype => unknown += n,
                            CallBytes::Implausible(_) => implausible += n,
                        }
                    }
                    // The first implausible call, looked for only when there is one.
                    let first_implausible = (implausible > 0)
                        .then(|| {
                            s.calls.iter().enumerate().find_map(|(i, rec)| {
                                let sig = c.sigs[rec.sig as usize];
                                match call_bytes(&sig, g.nranks) {
                                    CallBytes::Implausible(bytes) => Some(ImplausibleCall {
                                        op: sig.op,
                                        count: sig.count,
                                        datatype: datatype_name(sig.datatype),
                                        location: loc_str(c, s.loc(i)),
                                        bytes,
                                    }),
                                    _ => None,
                                }
                            })
                        })
                        .flatten();
                    let ops: Vec<OpSummary> = ops
                        .into_iter()
                        .map(|(op, (calls, bytes))| OpSummary {
                            op: Func::ALL[op],
                            calls,
                            bytes,
                        })
                        .collect();
                    RankSummary {
                        rank,
                        rank_inferred: inferred,
                        host: c.hosts[s.host as usize].clone(),
                        pid: s.pid,
                        calls: s.calls.len() as u64,
                        bytes: ops.iter().map(|o| o.bytes).sum(),
                        ops,
                        unknown_datatype_calls: unknown,
                        implausible_count_calls: implausible,
                        first_implausible,
                    }
                })
                .collect(),
        })
        .collect();
    Summary {
        counts: c.counts,
        files: c.files.clone(),
        communicators,
        malformed_calls: malformed_calls_note(c, "such a call is not counted").map(|f| f.message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::logs::ingest::collect_bytes;
    use crate::logs::testlog::{call, init};

    #[test]
    fn summary_counts_bytes_by_convention() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x11);
            call(&mut t, r, 2, "AllReduce", 0, 10, 7, 0, 0); // 40 B
            call(&mut t, r, 2, "AllGather", 1, 10, 9, 0, 0); // 2·10·2 = 40 B
            call(&mut t, r, 2, "AllGather", 2, 1, 99, 0, 0); // unknown datatype
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.calls, 3);
        assert_eq!(r0.bytes, 80);
        assert_eq!(r0.unknown_datatype_calls, 1);
        let ag = r0.ops.iter().find(|o| o.op == Func::AllGather).unwrap();
        assert_eq!((ag.calls, ag.bytes), (2, 40));
    }

    #[test]
    fn summary_leaves_implausible_counts_out_of_the_bytes_and_names_them() {
        let mut t = String::new();
        for r in 0..2 {
            init(&mut t, r, 2, 0x11); // lines 1, 2
        }
        for r in 0..2 {
            call(&mut t, r, 2, "AllReduce", 0, 10, 7, 0, 0); // 40 B
            call(&mut t, r, 2, "AllReduce", 1, u64::MAX, 7, 0, 0); // over 2^64 B
            call(&mut t, r, 2, "AllGather", 2, 1 << 46, 0, 0, 0); // 2·2^46 B = 2^47 B
            call(&mut t, r, 2, "AllGather", 3, 1 << 48, 0, 0, 0); // 2^49 B
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.calls, 4);
        assert_eq!(r0.implausible_count_calls, 2);
        assert_eq!(r0.bytes, 40 + (1u128 << 47));
        let per_op: Vec<(Func, u64, u128)> =
            r0.ops.iter().map(|o| (o.op, o.calls, o.bytes)).collect();
        assert_eq!(
            per_op,
            [(Func::AllReduce, 2, 40), (Func::AllGather, 2, 1 << 47)]
        );
        assert_eq!(
            r0.first_implausible,
            Some(ImplausibleCall {
                op: Func::AllReduce,
                count: u64::MAX,
                datatype: "float32".into(),
                location: "x:4".into(),
                bytes: None
            })
        );
        let r1 = &s.communicators[0].ranks[1];
        assert_eq!(r1.implausible_count_calls, 2);
        let text = crate::logs::report::summary_text(&s);
        assert!(
            text.contains("         (2 calls with an implausible count not in the bytes: no machine holds a buffer over 256.0 TiB; the first: AllReduce count 18446744073709551615 float32 at x:4 (over 2^64 bytes))"),
            "{text}"
        );
        assert!(!text.contains("PiB") && !text.contains("EiB"), "{text}");

        // count 2^48 int8 on an AllReduce is 256 TiB: still counted
        let mut t = String::new();
        init(&mut t, 0, 1, 0x12);
        call(&mut t, 0, 1, "AllReduce", 0, 1 << 48, 0, 0, 0);
        call(&mut t, 0, 1, "AllReduce", 1, (1 << 48) + 1, 0, 0, 0);
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!((r0.bytes, r0.implausible_count_calls), (1 << 48, 1));
        assert_eq!(
            r0.first_implausible
                .as_ref()
                .map(|f| (&*f.location, f.bytes)),
            Some(("x:3", Some((1 << 48) + 1)))
        );
        let text = crate::logs::report::summary_text(&s);
        assert!(
            text.contains("the first: AllReduce count 281474976710657 int8 at x:3 (256.0 TiB))"),
            "{text}"
        );
    }

    #[test]
    fn summary_bytes_past_64_bits_are_exact() {
        // 70000 AllReduce calls of 2^46 float32 (2^48 B each): 70000·2^48 B > 2^64
        let mut t = String::new();
        init(&mut t, 0, 1, 0x13);
        for k in 0..70_000 {
            call(&mut t, 0, 1, "AllReduce", k, 1 << 46, 7, 0, 0);
        }
        let s = summarize(&collect_bytes("x", t.as_bytes()));
        let r0 = &s.communicators[0].ranks[0];
        assert_eq!(r0.ops[0].bytes, 70_000u128 << 48);
        assert_eq!(r0.bytes, 70_000u128 << 48);
        assert_eq!(r0.implausible_count_calls, 0);
        // JSON carries the exact integer (`logs summary --json` writes text)
        let j = serde_json::to_string(&s).unwrap();
        assert!(
            j.contains(&format!("\"bytes\":{}", 70_000u128 << 48)),
            "{j}"
        );
        let text = crate::logs::report::summary_text(&s);
        assert!(text.contains("17.1 EiB (19703248369745920000)"), "{text}"); // 70000/4 PiB
    }
}
