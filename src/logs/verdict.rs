//! The verdict: the one sentence the report opens with. The headline is
//! the error that best explains the rest: a rank that skipped, added,
//! reordered or mismatched a call; else a cause NCCL named in a WARN line
//! (an argument NCCL refused first; a network failure is said as one,
//! never as a mismatch); else a rank
//! that stopped (unless it was itself left waiting in a Send/Recv).
//! Without errors: what was checked, how the logs end, and the first
//! warning.

use super::findings::{CommReport, Finding, FindingKind, Severity};
use super::model::Collected;

pub(crate) fn verdict(c: &Collected, comms: &[CommReport], findings: &[Finding]) -> String {
    let errors: Vec<&Finding> = findings
        .iter()
        .filter(|f| f.severity == Severity::Error)
        .collect();
    let structural = errors.iter().copied().find(|f| {
        matches!(
            f.kind,
            FindingKind::Skipped
                | FindingKind::Extra
                | FindingKind::Reordered
                | FindingKind::OpMismatch
                | FindingKind::CountMismatch
                | FindingKind::DatatypeMismatch
                | FindingKind::RedopMismatch
                | FindingKind::RootMismatch
                | FindingKind::WatchdogMismatch
                | FindingKind::PeerSizeMismatch
        )
    });
    // An argument NCCL refused is the cause on the rank that made the call;
    // a closed connection elsewhere is more often its consequence. Where a
    // rank stopped, the stop is the headline and says which refusal.
    let stopped = errors.iter().any(|f| f.kind == FindingKind::Stopped);
    let refused = errors.iter().copied().filter(|_| !stopped).find(|f| {
        matches!(
            f.kind,
            FindingKind::InvalidRoot
                | FindingKind::InvalidType
                | FindingKind::InvalidOp
                | FindingKind::InvalidPeer
        )
    });
    let named_cause = refused.or_else(|| {
        errors.iter().copied().find(|f| {
            matches!(
                f.kind,
                FindingKind::NetworkError
                    | FindingKind::DuplicateGpu
                    | FindingKind::CudaError
                    | FindingKind::OutOfMemory
                    | FindingKind::ConnectionFailed
                    | FindingKind::VersionMismatch
            )
        })
    });
    if let Some(first) = structural
        .or(named_cause)
        .or_else(|| pick_headline(&errors))
    {
        let more = if errors.len() > 1 {
            format!(
                " ({} more problem{} below)",
                errors.len() - 1,
                if errors.len() == 2 { "" } else { "s" }
            )
        } else {
            String::new()
        };
        let mut text = first.brief.clone();
        // A stopped rank that logged an argcheck WARN: say why it stopped.
        if first.kind == FindingKind::Stopped
            && let Some(w) = findings.iter().find(|w| {
                matches!(
                    w.kind,
                    FindingKind::InvalidRoot | FindingKind::InvalidType | FindingKind::InvalidOp
                ) && w.comm == first.comm
                    && w.ranks.iter().any(|r| first.ranks.contains(r))
            })
        {
            text += &format!(
                "; rank {} logged WARN {}",
                w.ranks[0],
                w.warn_text.as_deref().unwrap_or_default()
            );
        }
        return format!("{text}{more}");
    }
    let ranks: usize = comms.iter().map(|cm| cm.ranks_seen.len()).sum();
    if comms.is_empty() && findings.is_empty() {
        return format!(
            "no NCCL calls found in {} lines{}",
            c.counts.lines,
            if c.counts.nccl_lines == 0 {
                " (was NCCL_DEBUG=INFO with NCCL_DEBUG_SUBSYS including COLL set?)"
            } else {
                ""
            }
        );
    }
    let mut v = if comms.is_empty() {
        format!("no NCCL calls found in {} lines", c.counts.lines)
    } else {
        format!(
            "no divergence: {} communicator{}, {} rank stream{}, {} calls agree",
            comms.len(),
            if comms.len() == 1 { "" } else { "s" },
            ranks,
            if ranks == 1 { "" } else { "s" },
            c.counts.calls
        )
    };
    if let Some(end) = findings
        .iter()
        .find(|f| f.kind == FindingKind::LogsEndApart)
    {
        v += &format!("; {}", end.brief);
    }
    if let Some(w) = findings.iter().find(|f| f.severity == Severity::Warning) {
        let n = findings
            .iter()
            .filter(|f| f.severity == Severity::Warning)
            .count();
        v += &format!(
            "; {n} warning{}, first: {}",
            if n == 1 { "" } else { "s" },
            w.message
        );
    }
    v
}

/// The error that best explains the rest: a collective divergence, unless
/// the stopped rank's own last call is an unmatched Recv/Send (then the
/// point-to-point finding is the cause).
fn pick_headline<'a>(errors: &[&'a Finding]) -> Option<&'a Finding> {
    let first = *errors.first()?;
    let div = errors.iter().find(|f| {
        !matches!(
            f.kind,
            FindingKind::UnmatchedSend
                | FindingKind::UnmatchedRecv
                | FindingKind::P2pMismatch
                | FindingKind::InvalidPeer
                | FindingKind::InvalidRoot
                | FindingKind::InvalidType
                | FindingKind::InvalidOp
        )
    });
    if let Some(d) = div {
        if d.kind == FindingKind::Stopped
            && let Some(p) = errors.iter().find(|p| {
                matches!(
                    p.kind,
                    FindingKind::UnmatchedRecv | FindingKind::UnmatchedSend
                ) && p.comm == d.comm
                    && p.ranks.iter().any(|r| d.ranks.contains(r))
                    && p.call_index.is_some()
                    && d.call_index
                        .is_some_and(|len| p.call_index == Some(len.saturating_sub(1)))
            })
        {
            return Some(p);
        }
        return Some(d);
    }
    Some(
        errors
            .iter()
            .find(|f| {
                matches!(
                    f.kind,
                    FindingKind::UnmatchedSend
                        | FindingKind::UnmatchedRecv
                        | FindingKind::P2pMismatch
                )
            })
            .copied()
            .unwrap_or(first),
    )
}
