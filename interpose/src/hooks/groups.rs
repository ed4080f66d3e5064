//! NCCL's groups as the interposer keeps them: per thread, spanning
//! communicators. Calls made inside a group are held back; at the
//! outermost `ncclGroupEnd` each communicator's launch is agreed (without
//! any lock: `agreement`) and only then are the held calls issued into
//! NCCL's group. A group one of whose calls was refused launches nothing,
//! and on every communicator it touched a notice takes the launch's place,
//! so the peers fail at once instead of waiting for calls that never come.
//!
//! `ncclGroupSimulateEnd` closes a group as `ncclGroupEnd` does (NCCL
//! simulates the calls and launches none): the held calls are issued into
//! NCCL's group for it to simulate, and nothing is agreed or numbered.
//!
//! A PreMulSum op the program destroyed while calls of the open group use
//! it is destroyed after those calls reached NCCL ([`Ended::doomed`]).
//!
//! In watch mode nothing is held: calls reach NCCL as they are made, and
//! the outermost end folds each communicator's launch into its track.

use super::agreement::{agree, fail};
use super::calls::{failed_launch, refusal};
use super::comms::{CommState, Shared, lock};
use super::errors::report;
use super::settings::{Checks, settings};
use crate::process;
use rankwise::core::{Error, Launch, RawCall};
use std::cell::RefCell;

/// The thread's `ncclGroupStart` nesting and the communicators that
/// queued calls in it.
#[derive(Default)]
struct ThreadGroup {
    depth: u32,
    touched: Vec<Shared>,
}

thread_local! {
    static GROUP: RefCell<ThreadGroup> = RefCell::new(ThreadGroup::default());
}

/// One call to hand NCCL at a group's end: the call, its stream, its
/// communicator.
pub type Issue = (RawCall, usize, usize);

/// The outermost end of a group, as the export carries it out.
pub struct Ended {
    /// the calls to issue into NCCL's group before its end
    pub issue: Vec<Issue>,
    /// the code to return after closing NCCL's group (None: NCCL's)
    pub code: Option<i32>,
    /// PreMulSum ops (op, communicator) to destroy once NCCL's group closed
    pub doomed: Vec<(i32, usize)>,
}

/// Whether this thread has a group open.
pub fn in_group() -> bool {
    GROUP.with(|g| g.borrow().depth > 0)
}

/// `c` queues its first call in this thread's open group.
pub fn join_group(c: &Shared, s: &mut CommState) {
    s.grouped = true;
    s.group.start();
    GROUP.with(|g| g.borrow_mut().touched.push(c.clone()));
}

/// `ncclGroupStart` (before the real one).
pub fn group_start() {
    if settings().checks != Checks::Off && !process::forked() {
        GROUP.with(|g| g.borrow_mut().depth += 1);
    }
}

/// Closes one level of this thread's group: the communicators it touched
/// when that was the outermost, else None.
fn close() -> Option<Vec<Shared>> {
    if settings().checks == Checks::Off || process::forked() {
        return None;
    }
    GROUP.with(|g| {
        let mut g = g.borrow_mut();
        if g.depth == 0 {
            return None;
        }
        g.depth -= 1;
        (g.depth == 0).then(|| std::mem::take(&mut g.touched))
    })
}

/// Each communicator's share of a group at its outermost end.
struct Closing {
    launches: Vec<(Shared, Launch)>,
    /// the first refused call's error and code, if one was refused
    refused: Option<(Error, i32)>,
    doomed: Vec<(i32, usize)>,
}

/// Ends `touched`'s groups: each one's launch (numbered when `number`),
/// and whether the group was refused.
fn closing(touched: Vec<Shared>, number: bool) -> Closing {
    let mut out = Closing {
        launches: Vec::new(),
        refused: None,
        doomed: Vec::new(),
    };
    for c in touched {
        let mut s = lock(&c);
        s.grouped = false;
        let said = std::mem::take(&mut s.refused_in_group);
        let ended = s.group.end_keeping(c.rank);
        if let Err(e) = &ended {
            s.pending.clear();
            // the group's first refused call was said when it was made
            let code = match said {
                true => super::errors::code_of(e),
                false => report(&c, &mut s, e, None),
            };
            out.refused.get_or_insert((e.clone().on_rank(c.rank), code));
        }
        if ended.is_ok_and(|outermost| !outermost) {
            continue;
        }
        out.doomed.extend(
            std::mem::take(&mut s.doomed)
                .into_iter()
                .map(|op| (op, c.handle)),
        );
        if let Some(mut l) = s.group.take() {
            if number {
                s.group.number(&mut l);
            }
            drop(s);
            out.launches.push((c, l));
        } else {
            s.pending.clear();
        }
    }
    out
}

/// `ncclGroupEnd`: None for an inner end or nothing to check (call the
/// real one as is); otherwise the outermost end, agreed.
pub fn group_end() -> Option<Ended> {
    let touched = close()?;
    if touched.is_empty() {
        return None;
    }
    let Closing {
        launches,
        refused,
        doomed,
    } = closing(touched, true);
    if settings().checks == Checks::Watch {
        return watched(launches, refused, doomed);
    }
    let views: Vec<(&Shared, &Launch)> = launches.iter().map(|(c, l)| (c, l)).collect();
    if let Some((e, code)) = refused {
        // nothing of a refused group reaches NCCL: every communicator it
        // touched says so where its launch would be
        let why = refusal(&e);
        let agreed = agree(&views, Some(&why));
        for (c, l) in launches {
            let mut s = lock(&c);
            s.pending.clear();
            super::watch::grouped_call_refused(&mut s);
            if let Err(f) = &agreed {
                fail(&c, &mut s, f.error.clone());
            }
            s.group.recycle(l);
        }
        return Some(Ended {
            issue: Vec::new(),
            code: Some(code),
            doomed,
        });
    }
    let agreed = agree(&views, None);
    let mut issue = Vec::new();
    let mut code = None;
    for (c, l) in launches {
        let mut s = lock(&c);
        let pending = std::mem::take(&mut s.pending);
        match (&agreed, c.stop.raised()) {
            (Ok(()), None) => {
                super::watch::fold_in_group(&c, &mut s, &l);
                issue.extend(pending.into_iter().map(|(r, st)| (r, st, c.handle)));
            }
            (Ok(()), Some(why)) => {
                super::watch::grouped_call_refused(&mut s);
                let e = Error::new(rankwise::core::ErrorKind::CommFailed, why.to_string());
                code.get_or_insert(report(&c, &mut s, &e, None));
            }
            (Err(f), _) => {
                super::watch::grouped_call_refused(&mut s);
                code.get_or_insert(failed_launch(&c, &mut s, f.clone()));
            }
        }
        s.group.recycle(l);
    }
    Some(Ended {
        issue,
        code,
        doomed,
    })
}

/// Watch mode's group end: its calls went to NCCL as they were made; each
/// communicator's launch is folded into its track, unless the group was
/// refused (its code returned after NCCL's group closed).
fn watched(
    launches: Vec<(Shared, Launch)>,
    refused: Option<(Error, i32)>,
    doomed: Vec<(i32, usize)>,
) -> Option<Ended> {
    for (c, l) in launches {
        let mut s = lock(&c);
        match refused {
            None => super::watch::fold_in_group(&c, &mut s, &l),
            Some(_) => super::watch::grouped_call_refused(&mut s),
        }
        s.group.recycle(l);
    }
    refused.map(|(_, code)| Ended {
        issue: Vec::new(),
        code: Some(code),
        doomed,
    })
}

/// `ncclGroupSimulateEnd`: the group closes as at `ncclGroupEnd`; at the
/// outermost, the held calls go to NCCL to simulate, unnumbered and
/// unagreed (nothing launches).
pub fn group_simulate_end() -> Option<Ended> {
    let touched = close()?;
    if touched.is_empty() {
        return None;
    }
    let Closing {
        launches,
        refused,
        doomed,
    } = closing(touched, false);
    let mut issue = Vec::new();
    for (c, l) in launches {
        let mut s = lock(&c);
        let pending = std::mem::take(&mut s.pending);
        if refused.is_none() {
            issue.extend(pending.into_iter().map(|(r, st)| (r, st, c.handle)));
        }
        s.group.recycle(l);
    }
    Some(Ended {
        issue,
        code: refused.map(|(_, code)| code),
        doomed,
    })
}
