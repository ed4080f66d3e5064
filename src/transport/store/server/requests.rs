//! What the hub's loop does with a proven connection's request: serves
//! it at once, or parks it in the store until a post or a finish settles
//! it or its deadline passes, then writes the answer into the
//! connection's output (the loop sends it). Every answer is built under
//! the store's lock; nothing here touches a socket.

use super::super::Item;
use super::super::codec::{self, MAX_ANSWER, Request};
use super::Server;
use std::time::Instant;

/// A GET or EXCHANGE waiting for its keys.
pub(super) struct Waiting {
    request: Request,
    deadline: Instant,
}

impl Waiting {
    pub(super) fn keys(&self) -> Vec<&str> {
        match &self.request {
            Request::Get { key, .. } => vec![key.as_str()],
            Request::Exchange { items, .. } => items
                .iter()
                .filter(|i| i.read == super::super::Read::Now)
                .map(|i| i.key.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }
}

impl Server {
    /// Writes an answer into `t`'s output (the loop sends it).
    pub(super) fn answer(&mut self, t: usize, put: impl FnOnce(&mut Vec<u8>)) {
        if let Some(c) = self.conns.get_mut(&t) {
            codec::begin(&mut c.output);
            put(&mut c.output);
            if let Err(why) = codec::seal(&mut c.output, MAX_ANSWER) {
                codec::begin(&mut c.output);
                codec::put_error(&mut c.output, &why);
                let _ = codec::seal(&mut c.output, MAX_ANSWER);
            }
            c.sent = 0;
        }
    }

    /// One request of owner `owner` on connection `t`.
    pub(super) fn serve(&mut self, t: usize, owner: usize, request: Request) {
        let store = self.store.clone();
        match request {
            Request::Set { key, value } => {
                let r = store.with(|s| s.set(Some(owner), &key, &value));
                self.answer(t, |out| match r {
                    Ok(()) => out.push(codec::OK),
                    Err(why) => codec::put_error(out, &why),
                });
            }
            Request::Finish { owner: o, reason } => {
                if o != owner {
                    let why = format!(
                        "FINISH for owner {o} on a connection of owner {owner}: a rank can only say it finished itself"
                    );
                    return self.answer(t, |out| codec::put_error(out, &why));
                }
                store.with(|s| s.finish(owner, reason.as_deref()));
                self.answer(t, |out| out.push(codec::OK));
            }
            Request::LastNote { owner: o } => {
                let note = store.with(|s| s.note_of(o));
                self.answer(t, |out| codec::put_note(out, note.as_deref()));
            }
            Request::Get { .. } | Request::Exchange { .. } => {
                let deadline = match &request {
                    Request::Get { wait_ms, .. } | Request::Exchange { wait_ms, .. } => {
                        codec::deadline_in(*wait_ms)
                    }
                    _ => unreachable!("matched above"),
                };
                let w = Waiting { request, deadline };
                if let Request::Exchange { items, note, .. } = &w.request {
                    let views: Vec<Item<'_>> = items.iter().map(|i| i.view()).collect();
                    let note = note.as_ref().map(|(o, b)| (*o, b.as_slice()));
                    if let Err(why) = store.with(|s| s.post(&views, note, Some(owner))) {
                        return self.answer(t, |out| codec::put_error(out, &why));
                    }
                }
                let keys = w.keys();
                let parked = store.with(|s| {
                    if settled(s, &w.request) || Instant::now() >= w.deadline {
                        false
                    } else {
                        s.park(t, &keys);
                        true
                    }
                });
                drop(keys);
                if parked {
                    self.set_timer(t, Some(w.deadline));
                    if let Some(c) = self.conns.get_mut(&t) {
                        c.waiting = Some(w);
                    }
                } else {
                    self.finish_wait(t, w);
                }
            }
        }
    }

    /// Answers a wait now, settled or not (its deadline passed).
    fn finish_wait(&mut self, t: usize, w: Waiting) {
        match w.request {
            Request::Get { key, owner, .. } => {
                let share = self
                    .store
                    .with(|s| s.lookup(&key, owner))
                    .unwrap_or(Err(super::super::Missing::Timeout));
                self.answer(t, |out| codec::put_share(out, &share));
            }
            Request::Exchange { items, .. } => {
                let views: Vec<Item<'_>> = items.iter().map(|i| i.view()).collect();
                let answers = self.store.with(|s| s.answers(&views));
                let n = 1 + codec::shares_len(&answers);
                self.answer(t, |out| {
                    if n > MAX_ANSWER {
                        let why = format!(
                            "an answer of {n} bytes, more than the side channel sends ({MAX_ANSWER})"
                        );
                        codec::put_error(out, &why);
                    } else {
                        codec::put_shares(out, &answers);
                    }
                });
            }
            _ => {}
        }
    }

    /// Looks at `t`'s parked request: answers it when it is settled, or
    /// when `expired`.
    pub(super) fn look(&mut self, t: usize, expired: bool) {
        let Some(c) = self.conns.get_mut(&t) else {
            return;
        };
        let Some(w) = &c.waiting else { return };
        let keys = w.keys();
        let done = self.store.with(|s| {
            let done = expired || settled(s, &w.request);
            if done {
                s.unpark(t, &keys);
            }
            done
        });
        drop(keys);
        if !done {
            return;
        }
        let w = c.waiting.take().expect("looked at above");
        self.set_timer(t, None);
        self.finish_wait(t, w);
        self.turn(t);
    }

    /// Looks at the parked requests a change may have settled.
    pub(super) fn wake_ready(&mut self) {
        loop {
            let (ready, everyone) = self.store.with(|s| s.take_ready());
            if ready.is_empty() && !everyone {
                return;
            }
            let mut tokens: Vec<usize> = if everyone {
                self.conns
                    .iter()
                    .filter(|(_, c)| c.waiting.is_some())
                    .map(|(t, _)| *t)
                    .collect()
            } else {
                ready
            };
            tokens.sort_unstable();
            tokens.dedup();
            for t in tokens {
                self.look(t, false);
            }
        }
    }
}

/// Whether a GET or EXCHANGE can be answered now.
fn settled(s: &super::super::state::State, request: &Request) -> bool {
    match request {
        Request::Get { key, owner, .. } => s.can_get(key, *owner),
        Request::Exchange { items, .. } => {
            let views: Vec<Item<'_>> = items.iter().map(|i| i.view()).collect();
            s.all_settled(&views)
        }
        _ => true,
    }
}
