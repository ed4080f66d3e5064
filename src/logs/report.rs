//! Text and JSON renderings of an [`Analysis`] and a [`Summary`].
//!
//! The text report's first line is the verdict, one sentence; the details
//! follow. The JSON form is the same structures serialized (`--json`).

use super::findings::{
    Analysis, CallView, DepartureReport, FindingKind, Severity, fmt_ranges, fmt_ranks,
};
use super::ingest::LineSplitter;
use super::model::FileInfo;
use super::resolve::IdentifiedBy;
use super::summary::{MAX_CALL_BYTES, Summary};
use std::fmt::Write;

fn plural(n: u64, word: &str) -> String {
    if n == 1 {
        format!("{n} {word}")
    } else {
        format!("{n} {word}s")
    }
}

/// A byte count in binary units: `1023 B`, `1.5 KiB`, … `16.0 EiB`, and beyond in YiB.
fn human_bytes(b: u128) -> String {
    const UNITS: [&str; 9] = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"];
    let mut v = b as f64;
    let mut u = 0;
    while v >= 1024.0 && u + 1 < UNITS.len() {
        v /= 1024.0;
        u += 1;
    }
    if u == 0 {
        format!("{b} B")
    } else {
        format!("{v:.1} {}", UNITS[u])
    }
}

/// What happened to each file, beyond its lines being read: one indented
/// line each.
pub fn file_notes(t: &mut String, files: &[FileInfo]) {
    for f in files {
        if !f.also_given_as.is_empty() {
            writeln!(
                t,
                "  {}: also given as {}, the same file; read once",
                f.path,
                f.also_given_as.join(", ")
            )
            .unwrap();
        }
        if let Some((line, len)) = f.first_long_line {
            let bound = LineSplitter::MAX_LINE;
            match f.long_lines {
                1 => writeln!(
                    t,
                    "  {}: line {line} is {len} bytes long, over the {bound}-byte bound on a line; skipped",
                    f.path
                ),
                n => writeln!(
                    t,
                    "  {}: {n} lines over the {bound}-byte bound on a line skipped; the first, line {line}, is {len} bytes long",
                    f.path
                ),
            }
            .unwrap();
        }
        if let Some(n) = &f.note {
            writeln!(t, "  {}: {n}", f.path).unwrap();
        }
    }
}

fn call_text(v: &CallView) -> String {
    let mut t = String::new();
    match v.collective {
        Some(k) => write!(t, "#{k} ").unwrap(),
        None => write!(t, "call {} ", v.index).unwrap(),
    }
    write!(t, "{} count {} {}", v.op.name(), v.count, v.datatype).unwrap();
    if let Some(r) = &v.redop {
        write!(t, " {r}").unwrap();
    }
    if let Some(r) = v.root {
        write!(t, " root {r}").unwrap();
    }
    if let Some(p) = v.peer {
        write!(t, " peer {p}").unwrap();
    }
    if let Some(o) = &v.op_count {
        write!(t, " opCount {o}").unwrap();
    }
    write!(t, " at {}", v.location).unwrap();
    t
}

/// How some ranks part from the others, in a line:
/// `rank 1: skipped 1 call; its #11 on line up with the others' #12 on (32 calls)`.
fn departure_text(d: &DepartureReport) -> String {
    let who = if d.ranks.len() == 1 {
        format!("rank {}", d.ranks[0])
    } else {
        format!("ranks {}", fmt_ranks(&d.ranks))
    };
    let its = if d.ranks.len() == 1 { "its" } else { "their" };
    let what = match d.kind {
        FindingKind::Stopped => return format!("{who}: stopped"),
        FindingKind::Skipped => format!("skipped {}", plural(d.calls, "call")),
        FindingKind::Extra => format!("made {}", plural(d.calls, "extra call")),
        FindingKind::Reordered => format!("made {} in a different order", plural(d.calls, "call")),
        kind => serde_json::to_value(kind)
            .ok()
            .and_then(|v| v.as_str().map(|s| s.replace('_', " ")))
            .unwrap_or_default(),
    };
    match d.realigned {
        Some([mine, theirs]) => {
            // the classifier compares at most WINDOW calls
            let count = if d.lined_up as usize >= crate::logs::align::WINDOW {
                format!("{}+ calls", d.lined_up)
            } else {
                plural(d.lined_up, "call")
            };
            format!(
                "{who}: {what}; {its} #{mine} on line up with the others' #{theirs} on ({count})"
            )
        }
        None => format!("{who}: {what}; nothing after it lines up"),
    }
}

/// The analysis as text: verdict, input, communicators, findings.
pub fn analysis_text(a: &Analysis) -> String {
    let mut t = String::new();
    let c = &a.counts;
    writeln!(t, "{}", a.verdict).unwrap();
    writeln!(t).unwrap();
    writeln!(
        t,
        "input: {} file{}, {} lines: {} calls, {} init, {} warn, {} other NCCL, {} not NCCL, {} malformed",
        a.files.len(),
        if a.files.len() == 1 { "" } else { "s" },
        c.lines,
        c.calls,
        c.init_lines,
        c.warn_lines,
        c.other_nccl_lines,
        c.not_nccl_lines,
        c.malformed_lines
    )
    .unwrap();
    file_notes(&mut t, &a.files);
    for g in &a.flight_groups {
        writeln!(t, "Flight Recorder: {g}").unwrap();
    }
    if let Some(h) = &a.hang_evidence {
        writeln!(t, "hang evidence: {h}").unwrap();
    }
    for cm in &a.communicators {
        writeln!(t).unwrap();
        let missing = if cm.ranks_missing.is_empty() {
            String::new()
        } else {
            format!(", missing {}", fmt_ranges(&cm.ranks_missing))
        };
        writeln!(
            t,
            "{}: nranks {}, ranks seen {}{missing} (grouped by {})",
            cm.name,
            cm.nranks,
            fmt_ranks(&cm.ranks_seen),
            match cm.identified_by {
                IdentifiedBy::CommId => "commId",
                IdentifiedBy::Split => "split parent and color",
                IdentifiedBy::Order => "order of first use; no init lines",
            }
        )
        .unwrap();
        writeln!(
            t,
            "  collectives: {} agree on every rank seen; Send/Recv: {} checked, {} matched; {}",
            plural(cm.agreed_collectives, "position"),
            plural(cm.p2p_pairs, "pair"),
            plural(cm.p2p_matched, "call"),
            plural(cm.zero_count_positions, "zero-count position"),
        )
        .unwrap();
        match &cm.divergence {
            None => writeln!(t, "  first divergence: none").unwrap(),
            Some(d) => {
                writeln!(
                    t,
                    "  first divergence: collective #{} ({})",
                    d.position,
                    serde_json::to_value(d.kind)
                        .ok()
                        .and_then(|v| v.as_str().map(str::to_string))
                        .unwrap_or_default()
                        .replace('_', " ")
                )
                .unwrap();
                for g in &d.groups {
                    let who = format!(
                        "rank{} {}",
                        if g.ranks.len() == 1 { "" } else { "s" },
                        fmt_ranks(&g.ranks)
                    );
                    match &g.call {
                        Some(v) => writeln!(t, "    {who}: {}", call_text(v)).unwrap(),
                        None => writeln!(t, "    {who}: no call").unwrap(),
                    }
                }
                for dep in &d.departures {
                    writeln!(t, "    {}", departure_text(dep)).unwrap();
                }
            }
        }
        for m in &cm.members {
            let inferred = if m.rank_inferred {
                " (rank inferred)"
            } else {
                ""
            };
            let ended = m
                .ended
                .as_deref()
                .map_or(String::new(), |e| format!(", {e}"));
            writeln!(
                t,
                "  rank {}{inferred} {}:{} comm {}: {} ({} collective, {} Send/Recv) in {}, {} zero-count{ended}",
                m.rank,
                m.host,
                m.pid,
                m.comm,
                plural(m.calls, "call"),
                m.collectives,
                m.p2p,
                plural(m.launches, "launch").replace("launchs", "launches"),
                m.zero_count
            )
            .unwrap();
            match &m.last_call {
                Some(v) => writeln!(t, "    last call: {}", call_text(v)).unwrap(),
                None => writeln!(t, "    last call: none").unwrap(),
            }
        }
    }
    for (sev, title) in [
        (Severity::Error, "problems"),
        (Severity::Warning, "warnings"),
        (Severity::Info, "notes"),
    ] {
        let fs: Vec<_> = a.findings.iter().filter(|f| f.severity == sev).collect();
        if fs.is_empty() {
            continue;
        }
        writeln!(t).unwrap();
        writeln!(t, "{title}:").unwrap();
        for f in fs {
            let at = f
                .location
                .as_deref()
                .map_or(String::new(), |l| format!(" [{l}]"));
            writeln!(t, "  - {}{at}", f.message).unwrap();
        }
    }
    if a.findings_omitted > 0 {
        writeln!(t).unwrap();
        writeln!(
            t,
            "({} more findings of kinds already listed are not shown)",
            a.findings_omitted
        )
        .unwrap();
    }
    t
}

/// Calls and bytes per communicator, rank and op, as a table.
pub fn summary_text(s: &Summary) -> String {
    let mut t = String::new();
    writeln!(
        t,
        "{} calls in {} lines; bytes by the nccl-tests convention (N·count·size for AllGather, ReduceScatter, AlltoAll, Gather, Scatter; count·size otherwise)",
        s.counts.calls, s.counts.lines
    )
    .unwrap();
    file_notes(&mut t, &s.files);
    if let Some(m) = &s.malformed_calls {
        writeln!(t, "{m}").unwrap();
    }
    for cm in &s.communicators {
        writeln!(t).unwrap();
        writeln!(t, "{} (nranks {})", cm.name, cm.nranks).unwrap();
        writeln!(
            t,
            "  {:<6} {:<22} {:<14} {:>12} {:>24}",
            "rank", "host:pid", "op", "calls", "bytes"
        )
        .unwrap();
        for r in &cm.ranks {
            let who = format!("{}:{}", r.host, r.pid);
            let rank = format!("{}{}", r.rank, if r.rank_inferred { "?" } else { "" });
            for o in &r.ops {
                writeln!(
                    t,
                    "  {:<6} {:<22} {:<14} {:>12} {:>24}",
                    rank,
                    who,
                    o.op.name(),
                    o.calls,
                    format!("{} ({})", human_bytes(o.bytes), o.bytes)
                )
                .unwrap();
            }
            writeln!(
                t,
                "  {:<6} {:<22} {:<14} {:>12} {:>24}",
                rank,
                who,
                "total",
                r.calls,
                format!("{} ({})", human_bytes(r.bytes), r.bytes)
            )
            .unwrap();
            if r.unknown_datatype_calls > 0 {
                writeln!(
                    t,
                    "         ({} calls with an unknown datatype code are not in the bytes)",
                    r.unknown_datatype_calls
                )
                .unwrap();
            }
            if let Some(f) = &r.first_implausible {
                let size = match f.bytes {
                    Some(b) => human_bytes(u128::from(b)),
                    None => "over 2^64 bytes".to_string(),
                };
                let first = format!(
                    "{} count {} {} at {} ({size})",
                    f.op.name(),
                    f.count,
                    f.datatype,
                    f.location
                );
                writeln!(
                    t,
                    "         ({} with an implausible count not in the bytes: no machine holds a buffer over {}; the first: {first})",
                    if r.implausible_count_calls == 1 {
                        "1 call".to_string()
                    } else {
                        format!("{} calls", r.implausible_count_calls)
                    },
                    human_bytes(u128::from(MAX_CALL_BYTES)),
                )
                .unwrap();
            }
        }
    }
    t
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn file_notes_say_what_happened_to_each_file() {
        let file = |path: &str| FileInfo {
            path: path.into(),
            bytes: 0,
            gzip: false,
            lines: 0,
            note: None,
            also_given_as: Vec::new(),
            long_lines: 0,
            first_long_line: None,
        };
        let mut a = file("a.log");
        a.also_given_as = vec!["./a.log".into(), "d/a.log".into()];
        a.long_lines = 1;
        a.first_long_line = Some((7, 5 << 30));
        let mut b = file("b.log");
        b.long_lines = 3;
        b.first_long_line = Some((2, 2 << 20));
        b.note = Some("truncated gzip stream: lines before the cut were used".into());
        let mut t = String::new();
        file_notes(&mut t, &[a, file("quiet.log"), b]);
        assert_eq!(
            t,
            "  a.log: also given as ./a.log, d/a.log, the same file; read once
  a.log: line 7 is 5368709120 bytes long, over the 1048576-byte bound on a line; skipped
  b.log: 3 lines over the 1048576-byte bound on a line skipped; the first, line 2, is 2097152 bytes long
  b.log: truncated gzip stream: lines before the cut were used
"
        );
    }

    #[test]
    fn departures_in_one_line_each() {
        let dep = |ranks: Vec<u32>, kind, calls, realigned, lined_up| DepartureReport {
            ranks,
            kind,
            calls,
            realigned,
            lined_up,
        };
        let cases = [
            (
                dep(vec![2], FindingKind::Skipped, 1, Some([3, 4]), 12),
                "rank 2: skipped 1 call; its #3 on line up with the others' #4 on (12 calls)",
            ),
            (
                dep(vec![1, 5, 6], FindingKind::Extra, 2, Some([9, 7]), 256),
                "ranks 1,5-6: made 2 extra calls; their #9 on line up with the others' #7 on (256+ calls)",
            ),
            (
                dep(vec![0], FindingKind::Reordered, 3, Some([5, 5]), 1),
                "rank 0: made 3 calls in a different order; its #5 on line up with the others' #5 on (1 call)",
            ),
            (
                dep(vec![3], FindingKind::RootMismatch, 1, None, 0),
                "rank 3: root mismatch; nothing after it lines up",
            ),
            (
                dep(vec![4, 5], FindingKind::Stopped, 0, None, 0),
                "ranks 4-5: stopped",
            ),
        ];
        for (d, text) in cases {
            assert_eq!(departure_text(&d), text);
        }
    }

    #[test]
    fn bytes_are_human() {
        assert_eq!(human_bytes(0), "0 B");
        assert_eq!(human_bytes(1023), "1023 B");
        assert_eq!(human_bytes(1024), "1.0 KiB");
        assert_eq!(human_bytes(3 << 20), "3.0 MiB");
        assert_eq!(human_bytes(u128::from(u64::MAX)), "16.0 EiB");
        assert_eq!(human_bytes(1 << 80), "1.0 YiB");
        assert_eq!(human_bytes(1 << 90), "1024.0 YiB");
    }
}
