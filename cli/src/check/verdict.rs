//! The end of a `rankwise check` run in a few lines: the journals read
//! through the log analyzer (`rankwise::logs`, the words of `rankwise logs
//! analyze`), and what they say.

use rankwise::logs::{Analysis, InputError, Options, Severity, analyze, collect, expand_paths};
use std::collections::BTreeSet;
use std::path::Path;

/// Findings listed under a violation's headline; the rest are counted.
const LISTED: usize = 5;

/// What the journals say.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Calls were checked and nothing is wrong.
    Clean { lines: Vec<String> },
    /// The analyzer found a problem (a contract violation).
    Violation { lines: Vec<String> },
    /// No journal holds an NCCL call.
    NoCalls { lines: Vec<String> },
    /// The journals could not be read.
    Unreadable { lines: Vec<String> },
}

impl Verdict {
    pub fn lines(&self) -> &[String] {
        match self {
            Verdict::Clean { lines }
            | Verdict::Violation { lines }
            | Verdict::NoCalls { lines }
            | Verdict::Unreadable { lines } => lines,
        }
    }
}

fn plural(n: u64, word: &str) -> String {
    format!("{n} {word}{}", if n == 1 { "" } else { "s" })
}

/// Reads every journal under `journal` (`command` names the program in the
/// words of a run that made no NCCL call).
pub fn judge(journal: &Path, command: &str) -> Verdict {
    let shown = journal.display();
    let no_calls = || Verdict::NoCalls {
        lines: vec![format!(
            "{command} made no NCCL call that the checker saw: was NCCL loaded with dlopen and called through its handle, or linked into the program statically? Either bypasses LD_PRELOAD, so nothing was checked"
        )],
    };
    let files = match expand_paths(&[journal.to_path_buf()]) {
        Ok(f) => f,
        Err(InputError::NoFiles(_)) => return no_calls(),
        Err(e) => {
            return Verdict::Unreadable {
                lines: vec![format!("cannot read the journals in {shown}: {e}")],
            };
        }
    };
    let collected = match collect(&files, Options::default()) {
        Ok(c) => c,
        Err(e) => {
            return Verdict::Unreadable {
                lines: vec![format!("cannot read the journals in {shown}: {e}")],
            };
        }
    };
    if collected.counts.calls == 0 && collected.counts.warn_lines == 0 {
        return no_calls();
    }
    let a = analyze(&collected);
    let report = format!("the whole report: rankwise logs analyze {shown}");
    if a.problems > 0 {
        let mut lines = vec![format!("contract violation: {}", a.verdict)];
        lines.extend(
            listed(&a, Severity::Error)
                .into_iter()
                .map(|m| format!("  - {m}")),
        );
        lines.push(format!("journals: {shown}; {report}"));
        return Verdict::Violation { lines };
    }
    let mut lines = vec![format!(
        "{} on {} across {}: no contract violation",
        plural(a.counts.calls, "call"),
        plural(a.communicators.len() as u64, "communicator"),
        plural(processes(&a), "rank"),
    )];
    lines.extend(
        listed(&a, Severity::Warning)
            .into_iter()
            .map(|m| format!("  note: {m}")),
    );
    lines.push(format!("journals: {shown}"));
    Verdict::Clean { lines }
}

/// The messages of the findings of `severity`, at most [`LISTED`] of them
/// and a line counting the rest.
fn listed(a: &Analysis, severity: Severity) -> Vec<String> {
    let all: Vec<&str> = a
        .findings
        .iter()
        .filter(|f| f.severity == severity)
        .map(|f| f.message.as_str())
        .collect();
    let mut out: Vec<String> = all.iter().take(LISTED).map(|m| m.to_string()).collect();
    if all.len() > LISTED {
        out.push(format!("… and {} more", all.len() - LISTED));
    }
    out
}

/// The processes whose journals hold calls on some communicator.
fn processes(a: &Analysis) -> u64 {
    let seen: BTreeSet<(&str, u32)> = a
        .communicators
        .iter()
        .flat_map(|c| c.members.iter().map(|m| (m.host.as_str(), m.pid)))
        .collect();
    seen.len() as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The journals of `rankwise check` on PyTorch's isend before an
    /// all_reduce, on an H200: the checker named a deadlock on every rank,
    /// and the verdict must say so (it once called this run clean).
    #[test]
    fn the_checkers_own_errors_are_a_violation() {
        let dir = Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../tests/fixtures/nccl-2.28.9-h200/interpose/check-isend");
        let v = judge(&dir, "torchrun");
        let Verdict::Violation { lines } = &v else {
            panic!("{v:?}");
        };
        assert!(
            lines[0].starts_with("contract violation: found by rankwise's checker"),
            "{lines:?}"
        );
        assert!(
            lines
                .iter()
                .any(|l| l.contains("deadlock: rank 1 waits in AllReduce (opCount 1) for rank 0")),
            "{lines:?}"
        );
    }
}
