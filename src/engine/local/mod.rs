//! The local engine: ranks are threads of this process sharing one address
//! space. Every rank posts its call in its mailbox (`post`). A small call
//! carries a copy of its send buffer there, and each rank computes its own
//! results from the copies (`families::own`). A larger one needs no staging
//! copies: after every rank has posted, each rank moves its share of the
//! data directly between the other ranks' buffers (`families`).
//! Point-to-point calls meet in per-pair queues (`exec`). Every wait is
//! bounded (`world`).

mod agree;
pub(crate) mod exec;
mod families;
pub use families::last_level_cache;
pub mod memory;
mod post;
pub mod reduce;
pub(crate) mod world;

use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use crate::settings::{SettingError, Settings};
use crate::trace::Tracer;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::sync::Arc;
use std::time::Duration;
use world::World;

/// How ranks are launched.
#[derive(Clone)]
pub struct LaunchOptions {
    /// Longest any wait may last before it fails with `Timeout` (default
    /// 300 s, or `RANKWISE_TIMEOUT` seconds: see [`crate::settings`]).
    pub timeout: Duration,
    pub tracer: Tracer,
    /// Poison mode (default off, or `RANKWISE_POISON=1`): after each call,
    /// buffers the contract leaves undefined on a rank — a non-root Reduce's
    /// recvbuff, a non-root Gather's recvbuff, when passed — are filled with
    /// a signalling NaN (floats) or 0xA5 bytes (integers), so code that reads
    /// them fails loudly and deterministically. Applies to registry memory
    /// (the raw face); the typed face hands non-roots no such buffer at all.
    pub poison: bool,
    /// Cross-rank agreement before data moves; on unless turned off with the
    /// unsafe [`LaunchOptions::without_agreement_checks`].
    check_agreement: bool,
    /// Pin rank r's thread to core r when there are at least as many cores
    /// as ranks (what `mpirun` does by default; the benchmark uses it so a
    /// run does not depend on where the scheduler first puts the threads).
    /// Off by default: a library should not move its caller's threads.
    pub pin_threads: bool,
}

/// The options `RANKWISE_TIMEOUT`, `RANKWISE_POISON` and the trace
/// variables ask for. A bad variable cannot make this fail or panic: its
/// default is used instead and the first such call says so on stderr
/// ([`Settings::from_env_or_defaults`]); [`LaunchOptions::from_env`]
/// refuses bad variables instead.
impl Default for LaunchOptions {
    fn default() -> Self {
        LaunchOptions::from_settings(&Settings::from_env_or_defaults())
    }
}

impl LaunchOptions {
    /// The options the `RANKWISE_*` variables ask for, or every variable
    /// whose value is not one it accepts.
    pub fn from_env() -> std::result::Result<LaunchOptions, Vec<SettingError>> {
        Settings::from_env().map(|s| LaunchOptions::from_settings(&s))
    }
    /// The options `settings` describes, with the cross-rank agreement check
    /// on and threads unpinned.
    pub fn from_settings(settings: &Settings) -> LaunchOptions {
        LaunchOptions {
            timeout: settings.timeout,
            tracer: Tracer::from_settings(settings),
            poison: settings.poison,
            check_agreement: true,
            pin_threads: false,
        }
    }
    pub fn with_timeout(mut self, t: Duration) -> Self {
        self.timeout = t;
        self
    }
    pub fn with_tracer(mut self, t: Tracer) -> Self {
        self.tracer = t;
        self
    }
    /// Skips the cross-rank agreement check, for measuring what it costs.
    ///
    /// # Safety
    /// The check is what keeps a mismatched program (one rank passing a
    /// larger count than another) from reading and writing past other ranks'
    /// buffers. Without it, every rank must make exactly matching calls.
    pub unsafe fn without_agreement_checks(mut self) -> Self {
        self.check_agreement = false;
        self
    }
    pub fn with_pinned_threads(mut self, pin: bool) -> Self {
        self.pin_threads = pin;
        self
    }
    pub fn with_poison(mut self, on: bool) -> Self {
        self.poison = on;
        self
    }
}

/// Runs `program` on `nranks` ranks (threads) of one communicator and returns
/// every rank's value, or the first rank's error that is not merely a
/// consequence of another rank's failure.
pub fn launch<T, F>(nranks: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    launch_with(LaunchOptions::default(), nranks, program)
}

pub fn launch_with<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    let results = launch_each(opts, nranks, program)?;
    if results.iter().all(|r| r.is_ok()) {
        return Ok(results.into_iter().filter_map(|r| r.ok()).collect());
    }
    let errors: Vec<Error> = results.into_iter().filter_map(|r| r.err()).collect();
    let root_cause = errors
        .iter()
        .find(|e| e.kind != ErrorKind::RemoteError)
        .unwrap_or(&errors[0]);
    Err(root_cause.clone())
}

/// Like [`launch`], but returns each rank's own result, errors included.
pub fn launch_each<T, F>(opts: LaunchOptions, nranks: usize, program: F) -> Result<Vec<Result<T>>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    if nranks == 0 {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            "a communicator needs at least 1 rank, 0 given",
        ));
    }
    if nranks > u32::MAX as usize / 2 {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            format!("{nranks} ranks is more than the local engine supports"),
        ));
    }
    static NEXT_ID: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1);
    let id = NEXT_ID.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
        ^ ((std::process::id() as u64) << 32);
    let program = &program;
    let cores = if opts.pin_threads {
        core_affinity::get_core_ids().unwrap_or_default()
    } else {
        Vec::new()
    };
    let world = World::new(
        nranks,
        opts.timeout,
        id,
        world::Threads::new(
            nranks,
            opts.poison,
            opts.check_agreement,
            nranks <= cores.len(),
        ),
    );
    let pin = |rank: usize| {
        if nranks <= cores.len() {
            // best effort: a refused request leaves the thread where it is
            core_affinity::set_for_current(cores[rank]);
        }
    };
    let pin = &pin;
    std::thread::scope(|scope| {
        let handles: Vec<_> = (0..nranks)
            .map(|rank| {
                let world = world.clone();
                let tracer = opts.tracer.for_rank(rank);
                std::thread::Builder::new()
                    .name(format!("rank{rank}"))
                    .spawn_scoped(scope, move || {
                        pin(rank);
                        run_rank(world, rank, tracer, program)
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

fn run_rank<T, F>(
    world: Arc<World>,
    rank: usize,
    tracer: crate::trace::RankTracer,
    program: &F,
) -> Result<T>
where
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    let mut comm = Comm::new(world.clone(), rank, tracer);
    let out = catch_unwind(AssertUnwindSafe(|| program(&mut comm)));
    let out = match out {
        Ok(r) => r,
        Err(panic) => {
            let msg = panic
                .downcast_ref::<&str>()
                .map(|s| s.to_string())
                .or_else(|| panic.downcast_ref::<String>().cloned())
                .unwrap_or_else(|| "unknown panic".into());
            Err(Error::new(ErrorKind::Panic, format!("rank {rank} panicked: {msg}")).on_rank(rank))
        }
    };
    if let Err(e) = &out
        && e.kind != ErrorKind::RemoteError
    {
        world.threads.fail_all(Error::new(
            ErrorKind::RemoteError,
            format!("rank {rank} failed: {e}"),
        ));
    }
    world.threads.finish(rank);
    drop(comm);
    out
}
