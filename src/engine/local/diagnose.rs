//! Deadlock diagnosis: when every live rank waits on a condition no rank
//! can make true, which one is to blame and why — a peer that finished
//! without the matching Send or Recv, a cycle of blocked Send/Recv, ranks in
//! collectives of different communicators, or ranks that never entered the
//! call the others wait in.

use super::sync::lock;
use super::world::{Threads, Wait, WaitFor, World};
use crate::core::{Error, ErrorKind};
use std::sync::Arc;
use std::sync::atomic::Ordering::SeqCst;

impl Threads {
    pub(super) fn describe_rank(&self, r: usize) -> String {
        let s = &self.ranks[r];
        if s.finished.load(SeqCst) {
            return format!("rank {r}: finished its program");
        }
        match &*lock(&s.wait) {
            Some(w) if s.blocked.load(SeqCst) => format!(
                "rank {r}: waiting in {} on comm {:#x}",
                w.what, w.world.comm_id
            ),
            _ => format!("rank {r}: running outside rankwise"),
        }
    }

    /// Some(diagnosis, communicators to fail) when every live rank waits on
    /// a condition that no rank can make true.
    pub(super) fn detect_deadlock(&self) -> Option<(Error, Vec<Arc<World>>)> {
        let e0 = self.epoch.load(SeqCst);
        let mut waits: Vec<(usize, Wait)> = Vec::new();
        for (r, s) in self.ranks.iter().enumerate() {
            if s.finished.load(SeqCst) {
                continue;
            }
            if !s.blocked.load(SeqCst) {
                return None;
            }
            let w = lock(&s.wait).clone()?;
            if w.ready() {
                return None;
            }
            waits.push((r, w));
        }
        if waits.is_empty() || self.epoch.load(SeqCst) != e0 {
            return None;
        }
        let mut worlds: Vec<Arc<World>> = Vec::new();
        for (_, w) in &waits {
            if !worlds.iter().any(|x| Arc::ptr_eq(x, &w.world)) {
                worlds.push(w.world.clone());
            }
        }
        Some((self.diagnose(&waits, worlds.len() > 1), worlds))
    }

    fn diagnose(&self, waits: &[(usize, Wait)], several_comms: bool) -> Error {
        let n = self.ranks.len();
        let finished = |r: usize| self.ranks[r].finished.load(SeqCst);
        let wait_of = |r: usize| waits.iter().find(|(w, _)| *w == r).map(|(_, w)| w);
        let states: Vec<String> = (0..n).map(|r| self.describe_rank(r)).collect();
        // the rank each waiter depends on, for point-to-point waits
        let peer_of = |w: &Wait| match w.on {
            WaitFor::Posted { src, .. } => Some(src),
            WaitFor::Completed { dst, .. } => Some(dst),
            WaitFor::Arrival { .. } | WaitFor::AllPosted { .. } => None,
        };
        for (r, w) in waits {
            let Some(peer) = peer_of(w) else { continue };
            let needs = if matches!(w.on, WaitFor::Posted { .. }) {
                "Send"
            } else {
                "Recv"
            };
            if finished(peer) {
                return Error::new(
                    ErrorKind::Unmatched,
                    format!(
                        "rank {r} waits in {} but rank {peer} finished its program without the matching {needs}; {}",
                        w.what,
                        states.join("; ")
                    ),
                );
            }
            if let Some(pw) = wait_of(peer)
                && peer_of(pw).is_none()
            {
                return Error::new(
                    ErrorKind::Unmatched,
                    format!(
                        "rank {r} waits in {} but rank {peer} waits in {} and will never post the matching {needs}; {}",
                        w.what,
                        pw.what,
                        states.join("; ")
                    ),
                );
            }
        }
        // a cycle of point-to-point waits: the classic ungrouped ring
        if let Some((start, _)) = waits.iter().find(|(_, w)| peer_of(w).is_some()) {
            let mut path = vec![*start];
            let mut cur = *start;
            while let Some(next) = wait_of(cur).and_then(peer_of) {
                if let Some(pos) = path.iter().position(|r| *r == next) {
                    let cycle: Vec<String> = path[pos..]
                        .iter()
                        .chain([&next])
                        .map(|r| r.to_string())
                        .collect();
                    return Error::new(
                        ErrorKind::Deadlock,
                        format!(
                            "deadlock: {}: each rank blocks in a Send/Recv that waits on the next; wrap these Send/Recv calls in one group; {}",
                            cycle.join(" -> "),
                            states.join("; ")
                        ),
                    );
                }
                path.push(next);
                cur = next;
            }
        }
        let gone: Vec<String> = (0..n)
            .filter(|r| finished(*r))
            .map(|r| r.to_string())
            .collect();
        let why = if several_comms {
            "ranks wait in collectives of different communicators: every rank must use its communicators in the same order".to_string()
        } else if gone.is_empty() {
            "ranks wait in calls that can never match".to_string()
        } else {
            format!(
                "rank{} {} finished without entering the call the others wait in",
                if gone.len() > 1 { "s" } else { "" },
                gone.join(",")
            )
        };
        Error::new(
            ErrorKind::Deadlock,
            format!("deadlock: {why}; {}", states.join("; ")),
        )
    }
}
