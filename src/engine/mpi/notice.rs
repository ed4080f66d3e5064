//! What a rank tells the others when its program ends, and how a waiting
//! rank uses it. MPI reports neither a rank that finished without entering
//! a call nor one that failed: the others would wait forever. So each rank,
//! when its program ends, sends every other rank a notice (on a
//! communicator of its own): "finished, having completed k collective
//! launches on each communicator", or "failed: why". Every wait polls for
//! notices, so a missing or failed rank turns into an error naming it.
//!
//! A process can run several programs one after another (the test
//! harness's launches): notices carry the program's id, and a wait heeds
//! only those of its own program.

use super::ffi;
use crate::core::{Error, ErrorKind, Result};
use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::time::{Duration, Instant};

const TAG: i32 = 0x7277;
/// How long a wait on a peer that has finished keeps going before it gives
/// up: the peer's last messages may still be in flight when its notice arrives.
const GRACE: Duration = Duration::from_millis(300);

/// What a rank waits for, to judge whether a notice ends the wait.
#[derive(Debug, Clone)]
pub enum Waiting {
    /// the collective launch after `done` completed ones on this communicator
    Collective { done: u64 },
    /// a message from or to this peer
    Peer(usize),
}

/// A program: the id of the communicator it started with.
pub type Program = u64;

enum Notice {
    Finished {
        done: HashMap<u64, u64>,
        at: Instant,
    },
    /// why, and the kind a waiting rank reports: the failure's own kind
    /// when it is the communicator's (see [`carried`]), else RemoteError
    Failed(String, ErrorKind),
    /// stopped because another rank failed: the waiters hear of that
    /// failure from the rank that failed, so this says nothing more (it is
    /// not "finished without entering the call", which would be a deadlock)
    Stopped,
}

/// The kinds of failure that belong to the communicator rather than to one
/// rank's program: a waiting rank reports them as they are, as every rank
/// of a local communicator does (a timeout, a mismatch, a deadlock, an
/// unmatched call); any other failure reaches the others as RemoteError.
fn carried(kind: ErrorKind) -> Option<&'static str> {
    match kind {
        ErrorKind::Timeout => Some("Timeout"),
        ErrorKind::Mismatch => Some("Mismatch"),
        ErrorKind::Deadlock => Some("Deadlock"),
        ErrorKind::Unmatched => Some("Unmatched"),
        _ => None,
    }
}

fn carried_kind(word: Option<&str>) -> ErrorKind {
    match word {
        Some("Timeout") => ErrorKind::Timeout,
        Some("Mismatch") => ErrorKind::Mismatch,
        Some("Deadlock") => ErrorKind::Deadlock,
        Some("Unmatched") => ErrorKind::Unmatched,
        _ => ErrorKind::RemoteError,
    }
}

#[derive(Default)]
struct State {
    /// per program, per rank: what its notice said
    notices: HashMap<Program, Vec<Option<Notice>>>,
    size: usize,
    /// collective launches this rank completed, per communicator id
    done: HashMap<u64, u64>,
    /// programs this rank has finished
    finished: Vec<Program>,
}

impl State {
    fn of(&mut self, program: Program) -> &mut Vec<Option<Notice>> {
        let size = self.size;
        self.notices
            .entry(program)
            .or_insert_with(|| (0..size).map(|_| None).collect())
    }
}

/// The notices of one process.
pub struct Notices {
    comm: ffi::Comm,
    rank: usize,
    state: RefCell<State>,
}

thread_local! {
    static PROCESS: RefCell<Option<Rc<Notices>>> = const { RefCell::new(None) };
}

impl Notices {
    /// The process's notices, set up on first use (collective over the job).
    pub fn for_process() -> Result<Rc<Notices>> {
        if let Some(n) = PROCESS.with(|p| p.borrow().clone()) {
            return Ok(n);
        }
        let comm = ffi::dup(ffi::world())?;
        let (rank, size) = ffi::rank_and_size(comm)?;
        let n = Rc::new(Notices {
            comm,
            rank,
            state: RefCell::new(State {
                size,
                ..State::default()
            }),
        });
        PROCESS.with(|p| *p.borrow_mut() = Some(n.clone()));
        Ok(n)
    }

    pub fn register(&self, id: u64) {
        self.state.borrow_mut().done.entry(id).or_insert(0);
    }

    pub fn completed(&self, id: u64, done: u64) {
        self.state.borrow_mut().done.insert(id, done);
    }

    /// Receives every notice waiting.
    fn poll(&self) -> Result<()> {
        while let Some((src, len)) = ffi::iprobe(self.comm, TAG)? {
            let mut buf = vec![0u8; len];
            ffi::recv_probed(self.comm, src, TAG, &mut buf)?;
            let text = String::from_utf8_lossy(&buf);
            let (first, body) = text.split_once('\n').unwrap_or((&text, ""));
            let mut words = first.split(' ');
            let kind = words.next().unwrap_or("");
            let Some(Ok(program)) = words.next().map(str::parse::<Program>) else {
                continue;
            };
            let notice = match kind {
                "failed" => Notice::Failed(body.to_string(), carried_kind(words.next())),
                "stopped" => Notice::Stopped,
                _ => Notice::Finished {
                    done: text
                        .lines()
                        .skip(1)
                        .filter_map(|l| {
                            let (id, k) = l.split_once(' ')?;
                            Some((id.parse().ok()?, k.parse().ok()?))
                        })
                        .collect(),
                    at: Instant::now(),
                },
            };
            if let Some(slot) = self.state.borrow_mut().of(program).get_mut(src) {
                *slot = Some(notice);
            }
        }
        Ok(())
    }

    /// The error that ends a wait `on` (in communicator `id`), if a notice
    /// says the wait can never end.
    pub fn blocking(
        &self,
        program: Program,
        id: u64,
        on: &Waiting,
        what: &dyn Fn() -> String,
    ) -> Result<Option<Error>> {
        self.poll()?;
        let mut state = self.state.borrow_mut();
        let ranks = state.of(program);
        let me = self.rank;
        match *on {
            Waiting::Collective { done } => {
                for (r, n) in ranks.iter().enumerate() {
                    if let Some(Notice::Finished { done: d, .. }) = n {
                        let theirs = d.get(&id).copied().unwrap_or(0);
                        if theirs <= done {
                            return Ok(Some(Error::new(
                                ErrorKind::Deadlock,
                                format!(
                                    "deadlock: rank {r} finished its program without entering {}, which rank {me} waits in (rank {r} completed {theirs} collective launch(es) on this communicator, rank {me} has completed {done})",
                                    what()
                                ),
                            )));
                        }
                    }
                }
            }
            Waiting::Peer(p) => {
                if let Some(Some(Notice::Finished { at, .. })) = ranks.get(p)
                    && at.elapsed() > GRACE
                {
                    return Ok(Some(Error::new(
                        ErrorKind::Unmatched,
                        format!(
                            "rank {me} waits in {} but rank {p} finished its program without the matching call",
                            what()
                        ),
                    )));
                }
            }
        }
        // a failure elsewhere comes second: a rank that never arrived is
        // the cause, and the failures it set off are its consequences
        for (r, n) in ranks.iter().enumerate() {
            if let Some(Notice::Failed(why, kind)) = n {
                return Ok(Some(Error::new(*kind, format!("rank {r} failed: {why}"))));
            }
        }
        Ok(None)
    }

    /// What the other ranks said so far, for a timeout's message.
    pub fn describe(&self, program: Program) -> String {
        let mut state = self.state.borrow_mut();
        let ranks = state.of(program);
        let list = |f: &dyn Fn(&Option<Notice>) -> bool| -> Vec<String> {
            ranks
                .iter()
                .enumerate()
                .filter(|(r, n)| *r != self.rank && f(n))
                .map(|(r, _)| r.to_string())
                .collect()
        };
        let finished = list(&|n| matches!(n, Some(Notice::Finished { .. })));
        let stopped = list(&|n| matches!(n, Some(Notice::Stopped)));
        let running = list(&|n| n.is_none());
        let mut parts = Vec::new();
        if !finished.is_empty() {
            parts.push(format!(
                "rank(s) {} finished their programs",
                finished.join(",")
            ));
        }
        if !stopped.is_empty() {
            parts.push(format!(
                "rank(s) {} stopped after another rank's failure",
                stopped.join(",")
            ));
        }
        if !running.is_empty() {
            parts.push(format!(
                "rank(s) {} still running (in another call, or outside rankwise)",
                running.join(",")
            ));
        }
        parts.join("; ")
    }

    /// Tells every other rank that this rank's program ended (once).
    pub fn finish(&self, me: usize, program: Program, error: Option<&Error>) {
        let text = {
            let mut state = self.state.borrow_mut();
            if state.finished.contains(&program) {
                return;
            }
            state.finished.push(program);
            match error {
                Some(e) if e.kind == ErrorKind::RemoteError => format!("stopped {program}\n"),
                Some(e) => match carried(e.kind) {
                    Some(k) => format!("failed {program} {k}\n{e}"),
                    None => format!("failed {program}\n{e}"),
                },
                None => {
                    let mut t = format!("finished {program}\n");
                    for (id, k) in &state.done {
                        t.push_str(&format!("{id} {k}\n"));
                    }
                    t
                }
            }
        };
        // the messages must outlive this call: MPI sends them on its own
        let buf: &'static [u8] = Box::leak(text.into_bytes().into_boxed_slice());
        let Ok(len) = ffi::int(buf.len(), "notice") else {
            return;
        };
        let size = self.state.borrow().size;
        for r in (0..size).filter(|r| *r != me) {
            // SAFETY: `buf` is leaked, so it outlives the detached send.
            let sent = unsafe { ffi::isend(self.comm, buf.as_ptr() as usize, len, r as i32, TAG) };
            if let Ok(req) = sent {
                req.detach();
            }
        }
    }
}
