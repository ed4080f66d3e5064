//! Ranks of the nccl engine: a rank's communicator over a side channel
//! (what a rank process of `launch::process` makes), or every rank as a
//! thread of this process with a GPU each.

use super::LaunchOptions;
use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use crate::engine::nccl::{NcclEngine, Options, available, device_count};
use crate::transport::store::{SideChannel, Store};
use std::sync::Arc;

/// The engine options a launch's options ask for.
pub fn options(opts: &LaunchOptions) -> Options {
    Options {
        timeout: opts.timeout,
        check_agreement: opts.check_agreement,
    }
}

/// Rank `rank`'s communicator on GPU `device`, over `chan`.
pub fn comm(
    rank: usize,
    size: usize,
    device: usize,
    chan: Arc<dyn SideChannel>,
    opts: &LaunchOptions,
) -> Result<Comm> {
    let engine = NcclEngine::connect(rank, size, device, chan, options(opts))?;
    Ok(Comm::new(
        Box::new(engine),
        opts.tracer.for_rank(rank),
        opts.poison,
    ))
}

/// Runs `program` on `nranks` ranks as threads of this process, rank r on
/// GPU r. NCCL refuses two ranks of one communicator on one GPU in one
/// process, so this needs a GPU per rank; several ranks on one GPU run as
/// processes (`rankwise <command> --engine nccl`, `launch::process`).
pub fn launch_each<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    available().map_err(|e| Error::new(ErrorKind::System, e))?;
    let gpus = device_count();
    if nranks > gpus {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            format!(
                "{nranks} NCCL ranks as threads of one process need {nranks} GPUs, this machine has {gpus}: NCCL refuses two ranks of one communicator on one GPU in one process; run the ranks as processes instead (rankwise verify --engine nccl --ranks {nranks})"
            ),
        ));
    }
    let store: Arc<dyn SideChannel> = Store::new();
    super::threads::run(
        nranks,
        opts.pin_threads,
        |rank| comm(rank, nranks, rank, store.clone(), &opts),
        &program,
    )
}
