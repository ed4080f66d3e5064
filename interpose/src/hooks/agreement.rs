//! The cross-rank agreement of a launch, as a client of
//! `rankwise::agreement`: every rank's collectives compared, every
//! Send/Recv paired with its peer's, and the peers' verdicts heard, before
//! NCCL is called. No communicator's lock is held while it waits: each
//! one's agreement is taken out of its state for the wait and put back
//! after, so an abort from another thread ends the wait at once (its
//! stop) instead of waiting for it. A failure found across ranks fails the
//! communicator.

use super::comms::{Agreement, Comm, CommState, Shared, lock};
use super::settings::settings;
use super::{leaving, setup};
use crate::side;
use rankwise::agreement::{self, Failure, Peers};
use rankwise::core::{Error, ErrorKind, Launch};
use std::sync::MutexGuard;
use std::time::Duration;

/// Agrees `launches` (one per communicator) with the peers, or, when this
/// rank refused them (`refused`: why), posts that notice in their place
/// (`rankwise::agreement::refuse`). Called with no lock held.
pub fn agree(launches: &[(&Shared, &Launch)], refused: Option<&str>) -> Result<(), Failure> {
    let taken: Vec<Agreement> = launches
        .iter()
        .map(|(c, _)| std::mem::replace(&mut lock(c).agreement, Agreement::Out))
        .collect();
    let mut ready: Vec<Peers> = Vec::with_capacity(taken.len());
    let mut first_error = None;
    for ((c, _), a) in launches.iter().zip(taken) {
        match setup::ready(c, a) {
            Ok((p, line)) => {
                if let Some(line) = line {
                    lock(c).tracer.init_info(&line);
                }
                ready.push(p);
            }
            Err(e) => {
                first_error.get_or_insert(e);
                // its set-up is abandoned: the local checks only, from now on
                ready.push(Peers::new(c.rank, c.nranks, None));
            }
        }
    }
    let result = match first_error {
        Some(e) => Err(e.into()),
        None => {
            let mut pairs: Vec<(&mut Peers, &Launch)> = ready
                .iter_mut()
                .zip(launches)
                .map(|(p, (_, l))| (p, *l))
                .collect();
            match refused {
                None => agreement::agree(&mut pairs, settings().timeout),
                Some(why) => agreement::refuse(&mut pairs, why, settings().timeout),
            }
        }
    };
    for ((c, _), p) in launches.iter().zip(ready) {
        lock(c).agreement = Agreement::Ready(p);
    }
    match launches.first() {
        Some((_, l)) => result.map_err(|f| named(f, l)),
        None => result,
    }
}

/// The agreement of one communicator's launch `l`: under its lock when it
/// has no side channel (it waits for nobody then), else out of it (as
/// [`agree`]). The lock's guard comes back with the result.
pub fn agree_one<'a>(
    c: &'a Comm,
    mut s: MutexGuard<'a, CommState>,
    l: &Launch,
    refused: Option<&str>,
) -> (MutexGuard<'a, CommState>, Result<(), Failure>) {
    if let Agreement::Ready(p) = &mut s.agreement
        && p.link().is_none()
    {
        let r = settle(p, l, refused);
        return (s, r);
    }
    let a = std::mem::replace(&mut s.agreement, Agreement::Out);
    drop(s);
    let (r, p, line) = match setup::ready(c, a) {
        Ok((mut p, line)) => (settle(&mut p, l, refused), p, line),
        Err(e) => (Err(e.into()), Peers::new(c.rank, c.nranks, None), None),
    };
    let mut s = lock(c);
    if let Some(line) = line {
        s.tracer.init_info(&line);
    }
    s.agreement = Agreement::Ready(p);
    (s, r.map_err(|f| named(f, l)))
}

fn settle(p: &mut Peers, l: &Launch, refused: Option<&str>) -> Result<(), Failure> {
    match refused {
        None => agreement::agree(&mut [(p, l)], settings().timeout),
        Some(why) => agreement::refuse(&mut [(p, l)], why, settings().timeout),
    }
}

/// A wait ended from outside names the launch it ended.
fn named(mut f: Failure, l: &Launch) -> Failure {
    if f.error.kind == ErrorKind::CommFailed {
        f.error.message = format!("{}: {}", l.describe(), f.error.message);
    }
    f
}

/// A failure found across ranks fails the communicator, as NCCL's async
/// errors do: later calls on it are refused, and ranks waiting for this
/// one's posts stop waiting.
pub fn fail(c: &Comm, s: &mut CommState, e: Error) -> Error {
    let e = e.on_rank(c.rank);
    if s.failed.is_none() {
        s.failed = Some(e.clone());
        let why = super::errors::words(&e);
        let _ = leaving::leave(c, Some(&why), &format!("this communicator failed: {why}"));
        // this process may hold the store and end at once (a program
        // that exits on the error): give waiting ranks time to hear it
        if c.exit.get().is_some() && side::serves() {
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    e
}
