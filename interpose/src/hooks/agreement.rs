//! The cross-rank agreement of a launch, as a client of
//! `rankwise::agreement`: every rank's collectives compared, every
//! Send/Recv paired with its peer's, and the peers' verdicts heard, before
//! NCCL is called. A failure found across ranks fails the communicator.

use super::comms::CommState;
use super::settings::settings;
use crate::side;
use rankwise::agreement::{self, Failure, Peers};
use rankwise::core::{Error, Launch};
use std::time::Duration;

/// The agreement of a launch on one communicator (a call outside a group).
pub fn agree_one(s: &mut CommState, launch: &Launch) -> Result<(), Failure> {
    agreement::agree(&mut [(&mut s.peers, launch)], settings().timeout)
}

/// The agreement of one launch per communicator (the outermost group
/// end's calls on each communicator it touched).
pub fn agree(launches: &mut [(&mut CommState, &Launch)]) -> Result<(), Failure> {
    let mut peers: Vec<(&mut Peers, &Launch)> = launches
        .iter_mut()
        .map(|(s, l)| (&mut s.peers, *l))
        .collect();
    agreement::agree(&mut peers, settings().timeout)
}

/// A failure found across ranks fails the communicator, as NCCL's async
/// errors do: later calls on it are refused, and ranks waiting for this
/// one's posts stop waiting.
pub fn fail(s: &mut CommState, e: Error) -> Error {
    let e = e.on_rank(s.rank);
    if s.failed.is_none() {
        s.failed = Some(e.clone());
        if s.peers.link().is_some() {
            let _ = s.peers.leave(Some(&e.to_string()));
            // this process may hold the store and end at once (a program
            // that exits on the error): give waiting ranks time to hear it
            if side::serves() {
                std::thread::sleep(Duration::from_millis(100));
            }
        }
    }
    e
}
