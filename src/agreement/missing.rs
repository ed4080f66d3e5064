//! Why a wait for other ranks ended without their posts, in words that
//! name each rank: who never came (and where it was last), who finished
//! its program, who failed and why.

use super::Link;
use crate::core::{Error, ErrorKind};
use crate::transport::store::Missing;
use std::time::Duration;

/// Why a wait for other ranks' posts ended without them, naming each rank:
/// `rank 3 finished its program without entering AllReduce #4`.
pub fn missing_error(missing: &[(usize, Missing)], what: &str, timeout: Duration) -> Error {
    let mut timed_out = Vec::new();
    let mut parts = Vec::new();
    let mut kind = ErrorKind::Timeout;
    if let Some(e) = missing
        .iter()
        .find_map(|(_, m)| super::cycle::of_missing(m))
    {
        return e;
    }
    for (r, m) in missing {
        match m {
            Missing::Cycle(_) => unreachable!("returned above"),
            Missing::Timeout => timed_out.push(r.to_string()),
            Missing::Finished { reason: None } => {
                if kind == ErrorKind::Timeout {
                    kind = ErrorKind::Deadlock;
                }
                parts.push(format!(
                    "rank {r} finished its program without entering {what}"
                ));
            }
            Missing::Finished { reason: Some(why) } => {
                kind = ErrorKind::RemoteError;
                parts.push(format!("rank {r} failed: {why}"));
            }
        }
    }
    if !timed_out.is_empty() {
        let who = if timed_out.len() == 1 {
            format!("rank {}", timed_out[0])
        } else {
            format!("ranks {}", timed_out.join(","))
        };
        // a rank that finished or failed ends the wait at once: the others
        // had not come yet, which is no timeout
        let late = match parts.is_empty() {
            true => format!("{who} did not enter {what} within {timeout:?}"),
            false => format!("{who} had not entered {what} yet"),
        };
        parts.insert(0, late);
    }
    Error::new(kind, parts.join("; "))
}

/// Where the ranks that did not come were last: `rank 3 was last in
/// Broadcast (opCount 2)`, from the note the lane (or else the store)
/// keeps of each rank's latest exchange.
pub fn whereabouts(link: &Link, missing: &[usize]) -> String {
    missing
        .iter()
        .map(|r| {
            let note = match (&link.lane, &link.tier) {
                (Some(lane), _) => lane.note(*r),
                (None, Some(tier)) => tier.note(*r),
                (None, None) => link.last_note(link.owners[*r]).ok().flatten(),
            };
            match note {
                Some(b) => format!("rank {r} was last in {}", super::cycle::text(&b)),
                // by host, a rank's note reaches the others through its
                // leader: a host that did not answer said nothing of it
                None if link.tier.is_some() => {
                    format!("where rank {r} was last is not known: its host did not say")
                }
                None => format!("rank {r} has made no call on this communicator"),
            }
        })
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn waits_that_end_without_a_post_say_who_and_why() {
        let e = missing_error(
            &[(3, Missing::Timeout)],
            "AllReduce #4",
            Duration::from_secs(2),
        );
        assert_eq!(e.kind, ErrorKind::Timeout);
        assert_eq!(e.message, "rank 3 did not enter AllReduce #4 within 2s");
        let e = missing_error(
            &[
                (1, Missing::Timeout),
                (2, Missing::Timeout),
                (3, Missing::Finished { reason: None }),
            ],
            "Broadcast #0",
            Duration::from_secs(30),
        );
        assert_eq!(e.kind, ErrorKind::Deadlock);
        assert_eq!(
            e.message,
            "ranks 1,2 had not entered Broadcast #0 yet; rank 3 finished its program without entering Broadcast #0"
        );
        let e = missing_error(
            &[(
                0,
                Missing::Finished {
                    reason: Some("ncclInvalidArgument on rank 0: x".into()),
                },
            )],
            "AllGather #1",
            Duration::from_secs(1),
        );
        assert_eq!(e.kind, ErrorKind::RemoteError);
        assert!(
            e.message.starts_with("rank 0 failed: ncclInvalidArgument"),
            "{e}"
        );
    }
}
