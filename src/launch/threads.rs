//! Ranks as threads of this process: one scoped thread per rank, each
//! running the program on the communicator its engine makes for it. A rank
//! that panics becomes an error, and its engine learns that the rank's
//! program ended, so nobody waits for it.

use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};

/// Runs `program` on `n` threads; rank r's communicator comes from
/// `make(r)`, on its own thread. With `pin`, rank r's thread runs on core r
/// when there are at least as many cores as ranks. Returns each rank's result.
pub fn run<T, F, M>(n: usize, pin: bool, make: M, program: &F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
    M: Fn(usize) -> Result<Comm> + Sync,
{
    let cores = if pin {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let make = &make;
    let cores = &cores;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..n)
            .map(|rank| {
                std::thread::Builder::new()
                    .name(format!("rank{rank}"))
                    .spawn_scoped(scope, move || {
                        if n <= cores.len() {
                            // best effort: a refused request leaves the thread where it is
                            core_affinity::set_for_current(cores[rank]);
                        }
                        run_rank(rank, make, program)
                    })
                    .map_err(|e| {
                        Error::new(
                            ErrorKind::System,
                            format!("cannot start rank {rank}'s thread: {e}"),
                        )
                    })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| {
                let h = h?;
                Ok(h.join()
                    .unwrap_or_else(|_| Err(Error::new(ErrorKind::Internal, "rank thread died"))))
            })
            .collect()
    })
}

fn run_rank<T, F, M>(rank: usize, make: &M, program: &F) -> Result<T>
where
    F: Fn(&mut Comm) -> Result<T> + Sync,
    M: Fn(usize) -> Result<Comm> + Sync,
{
    let mut comm = make(rank)?;
    let out = super::run_catching(rank, || program(&mut comm));
    comm.finish(out.as_ref().err());
    drop(comm);
    out
}
