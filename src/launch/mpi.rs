//! Ranks of the mpi engine: this process is one rank of an MPI job
//! (`mpirun -n N`), and its communicator is over the job's processes.
//! `rankwise::mpi` is this module.

pub use super::LaunchOptions;
pub use crate::engine::mpi::{job_size, share, under_mpirun, world};

use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use crate::engine::Engine;
use crate::engine::mpi::{connect_first, connect_world};
use serde::{Serialize, de::DeserializeOwned};
use std::panic::{AssertUnwindSafe, catch_unwind};

/// This process's communicator over every rank of the MPI job
/// (`MPI_COMM_WORLD`), with the options the `RANKWISE_*` variables ask for.
/// MPI is initialised on the first call and finalised when the process exits.
pub fn init() -> Result<Comm> {
    init_with(LaunchOptions::default())
}

/// [`init`] with explicit options (timeout, trace, poison).
pub fn init_with(opts: LaunchOptions) -> Result<Comm> {
    let engine = connect_world(opts.timeout)?;
    let tracer = opts.tracer.for_rank(engine.rank());
    engine.say_lane(&tracer);
    Ok(Comm::new(Box::new(engine), tracer, opts.poison))
}

/// Runs `program` on the first `nranks` processes of the MPI job (the
/// others take no part) and returns every rank's result on every process:
/// each result crosses processes serialised, so every process can check
/// all of them, as a test on the local engine does. Every process of the
/// job must call it, in the same order; the job needs at least `nranks`
/// processes.
pub fn launch_each<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<Result<T>>>
where
    T: Serialize + DeserializeOwned,
    F: Fn(&mut Comm) -> Result<T>,
{
    let mine: Option<Result<T>> = match connect_first(nranks, opts.timeout)? {
        None => None,
        Some(engine) => {
            let me = engine.rank();
            let tracer = opts.tracer.for_rank(me);
            engine.say_lane(&tracer);
            let mut comm = Comm::new(Box::new(engine), tracer, opts.poison);
            let out = catch_unwind(AssertUnwindSafe(|| program(&mut comm))).unwrap_or_else(|_| {
                Err(Error::new(ErrorKind::Panic, format!("rank {me} panicked")).on_rank(me))
            });
            comm.finish(out.as_ref().err());
            Some(out)
        }
    };
    let (me, _) = world()?;
    let bytes = serde_json::to_vec(&mine).map_err(|e| {
        Error::new(
            ErrorKind::Internal,
            format!("rank {me}'s result cannot be serialised: {e}"),
        )
    })?;
    // the program's own waits may be short (a test of a timeout), but a
    // rank may still be busy in its program: the results wait as long as
    // any wait of this process may
    let patience = opts.timeout.max(LaunchOptions::default().timeout);
    let all = share(&bytes, patience)?;
    all.into_iter()
        .take(nranks)
        .enumerate()
        .map(|(r, b)| {
            let got: Option<Result<T>> = serde_json::from_slice(&b).map_err(|e| {
                Error::new(
                    ErrorKind::Internal,
                    format!("rank {r}'s result cannot be read back: {e}"),
                )
            })?;
            got.ok_or_else(|| Error::new(ErrorKind::Internal, format!("rank {r} sent no result")))
        })
        .collect()
}
