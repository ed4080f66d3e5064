//! Ways to get communicators, above the API: each launcher starts the ranks
//! of one engine and hands each rank's program its [`Comm`]: as threads of
//! this process (`threads`), or one process per rank (`process`, which
//! re-executes rankwise and serves the ranks a side channel, `store`).
//!
//! [`EngineKind`] names an engine; [`launch_each`] runs a program on N
//! ranks of any of them, which is how the CLI's `--engine` and the
//! integration tests' engine list reach every engine through one door.

pub mod local;
#[cfg(feature = "mpi")]
pub mod mpi;
pub mod mpirun;
#[cfg(feature = "nccl")]
pub mod nccl;
pub mod process;
pub mod threads;

use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use crate::settings::{SettingError, Settings};
use crate::trace::Tracer;
use std::time::Duration;

#[cfg(not(feature = "mpi"))]
const NO_MPI: &str = "this build has no mpi engine (build with `--features mpi`; it needs OpenMPI)";
#[cfg(not(feature = "nccl"))]
const NO_NCCL: &str = "this build has no NCCL engine (built without the `nccl` feature)";

/// An engine rankwise can run ranks on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum EngineKind {
    /// Ranks are threads of this process sharing its memory (no GPU, no setup).
    Local,
    /// Every call on real NCCL, one GPU process per rank (several may share
    /// one GPU); NCCL and the CUDA driver are found at run time.
    Nccl,
    /// Ranks are the processes of an MPI job (`mpirun`), one rank each
    /// (feature `mpi`).
    Mpi,
}

impl EngineKind {
    /// Every engine this build of rankwise has.
    pub const ALL: &'static [EngineKind] = &[
        EngineKind::Local,
        #[cfg(feature = "nccl")]
        EngineKind::Nccl,
        #[cfg(feature = "mpi")]
        EngineKind::Mpi,
    ];

    /// Every engine rankwise knows, whether or not this build has it (a
    /// build without one says so when it is asked for).
    pub const KNOWN: [EngineKind; 3] = [EngineKind::Local, EngineKind::Nccl, EngineKind::Mpi];

    /// What the engine is, in one line (the help of `--engine`).
    pub fn summary(self) -> &'static str {
        match self {
            EngineKind::Local => {
                "Ranks are threads of this process sharing its memory (no GPU, no setup)"
            }
            EngineKind::Nccl => {
                "Every call on real NCCL, one GPU process per rank (several may share one GPU); NCCL and the CUDA driver are found at run time"
            }
            EngineKind::Mpi => {
                "Ranks are the processes of an MPI job (`mpirun`), one rank each (feature `mpi`)"
            }
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Local => "local",
            EngineKind::Nccl => "nccl",
            EngineKind::Mpi => "mpi",
        }
    }

    /// What the engine can do beyond the shared contract.
    pub fn capabilities(self) -> crate::engine::Capabilities {
        match self {
            EngineKind::Local => crate::engine::local::LocalEngine::CAPABILITIES,
            #[cfg(feature = "mpi")]
            EngineKind::Mpi => crate::engine::mpi::MpiEngine::CAPABILITIES,
            #[cfg(not(feature = "mpi"))]
            EngineKind::Mpi => crate::engine::Capabilities {
                name: "mpi",
                diagnoses_deadlock: false,
                needs_staging: false,
            },
            EngineKind::Nccl => crate::engine::Capabilities {
                name: "nccl",
                diagnoses_deadlock: false,
                needs_staging: true,
            },
        }
    }

    /// Ok when this engine can run ranks on this machine; otherwise what it
    /// needs and did not find.
    pub fn available(self) -> std::result::Result<(), String> {
        match self {
            EngineKind::Local => Ok(()),
            #[cfg(feature = "mpi")]
            EngineKind::Mpi => crate::engine::mpi::under_mpirun()
                .then_some(())
                .ok_or_else(|| {
                    "this process was not started by mpirun (mpirun -n N …)".to_string()
                }),
            #[cfg(not(feature = "mpi"))]
            EngineKind::Mpi => Err(NO_MPI.into()),
            #[cfg(feature = "nccl")]
            EngineKind::Nccl => crate::engine::nccl::available(),
            #[cfg(not(feature = "nccl"))]
            EngineKind::Nccl => Err(NO_NCCL.into()),
        }
    }

    /// What the engine runs on, for every output that names it: `local`, or
    /// `nccl (NCCL 2.28.9, /path/libnccl.so.2, found via …)`.
    pub fn describe(self) -> String {
        match self {
            EngineKind::Local => "local".into(),
            #[cfg(feature = "nccl")]
            EngineKind::Nccl => format!("nccl ({})", crate::engine::nccl::describe()),
            #[cfg(not(feature = "nccl"))]
            EngineKind::Nccl => "nccl (not in this build)".into(),
            #[cfg(feature = "mpi")]
            EngineKind::Mpi => "mpi (OpenMPI, one rank per process)".into(),
            #[cfg(not(feature = "mpi"))]
            EngineKind::Mpi => "mpi (not in this build)".into(),
        }
    }

    /// Whether the CLI runs this engine's ranks as processes (one per rank,
    /// `process`) rather than threads of this process.
    pub fn uses_processes(self) -> bool {
        matches!(self, EngineKind::Nccl)
    }
}

impl std::fmt::Display for EngineKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

impl std::str::FromStr for EngineKind {
    type Err = Error;
    fn from_str(s: &str) -> Result<EngineKind> {
        EngineKind::ALL
            .iter()
            .copied()
            .find(|e| e.name() == s)
            .ok_or_else(|| {
                let known: Vec<&str> = EngineKind::ALL.iter().map(|e| e.name()).collect();
                Error::new(
                    ErrorKind::InvalidUsage,
                    format!("unknown engine {s:?}: this build has {}", known.join(", ")),
                )
            })
    }
}

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
    /// them fails loudly and deterministically. Applies to engine memory
    /// (the raw face); the typed face hands non-roots no such buffer at all.
    pub poison: bool,
    /// Cross-rank agreement before data moves; on unless turned off with the
    /// unsafe [`LaunchOptions::without_agreement_checks`].
    pub(crate) check_agreement: bool,
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
    /// Skips the cross-rank agreement check, for measuring what it costs
    /// (the local engine honours it; engines that need the check to stay
    /// memory-safe ignore it).
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

/// Runs one rank's `program`, turning a panic in it into this rank's
/// `Panic` error (with the panic's message), as every launcher reports it.
pub fn run_catching<T>(rank: usize, program: impl FnOnce() -> Result<T>) -> Result<T> {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(program)).unwrap_or_else(|panic| {
        let msg = panic
            .downcast_ref::<&str>()
            .map(|s| s.to_string())
            .or_else(|| panic.downcast_ref::<String>().cloned())
            .unwrap_or_else(|| "unknown panic".into());
        Err(Error::new(ErrorKind::Panic, format!("rank {rank} panicked: {msg}")).on_rank(rank))
    })
}

/// Runs `program` on `nranks` ranks of `engine` and returns each rank's own
/// result, errors included.
pub fn launch_each<T, F>(
    engine: EngineKind,
    opts: LaunchOptions,
    nranks: usize,
    program: F,
) -> Result<Vec<Result<T>>>
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
    match engine {
        EngineKind::Local => local::launch_each(opts, nranks, program),
        // results must cross processes: rankwise::mpi::launch_each
        // serialises them; this entry point takes any result type
        #[cfg(feature = "mpi")]
        EngineKind::Mpi => Err(Error::new(
            ErrorKind::InvalidUsage,
            "the mpi engine runs one rank per process: use rankwise::mpi::init() in a program started by mpirun, or rankwise::mpi::launch_each",
        )),
        #[cfg(not(feature = "mpi"))]
        EngineKind::Mpi => Err(Error::new(ErrorKind::InvalidUsage, NO_MPI)),
        #[cfg(feature = "nccl")]
        EngineKind::Nccl => nccl::launch_each(opts, nranks, program),
        #[cfg(not(feature = "nccl"))]
        EngineKind::Nccl => Err(Error::new(ErrorKind::InvalidUsage, NO_NCCL)),
    }
}

/// Runs `program` on `nranks` ranks of `engine` and returns every rank's
/// value, or the error that caused the others (see [`root_cause`]).
pub fn launch_with<T, F>(
    engine: EngineKind,
    opts: LaunchOptions,
    nranks: usize,
    program: F,
) -> Result<Vec<T>>
where
    T: Send,
    F: Fn(&mut Comm) -> Result<T> + Sync,
{
    all_ok(launch_each(engine, opts, nranks, program)?)
}

/// Every rank's value, or the first error that is not merely a consequence
/// of another rank's failure.
pub fn all_ok<T>(results: Vec<Result<T>>) -> Result<Vec<T>> {
    if results.iter().all(|r| r.is_ok()) {
        return Ok(results.into_iter().filter_map(|r| r.ok()).collect());
    }
    let errors: Vec<Error> = results.into_iter().filter_map(|r| r.err()).collect();
    Err(root_cause(&errors).clone())
}

/// The error that caused the others: the first that is not a rank learning
/// of another's failure.
pub fn root_cause(errors: &[Error]) -> &Error {
    errors
        .iter()
        .find(|e| e.kind != ErrorKind::RemoteError)
        .unwrap_or(&errors[0])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn engines_parse_by_name_and_unknown_ones_list_the_known() {
        for e in EngineKind::ALL {
            assert_eq!(e.name().parse::<EngineKind>().unwrap(), *e);
        }
        let err = "gloo".parse::<EngineKind>().unwrap_err();
        assert!(
            err.message
                .contains("unknown engine \"gloo\": this build has local"),
            "{err}"
        );
    }

    #[test]
    fn zero_ranks_is_refused_on_every_engine() {
        for e in EngineKind::ALL {
            let err = launch_each(*e, LaunchOptions::default(), 0, |_| Ok(())).unwrap_err();
            assert!(
                err.message.contains("at least 1 rank, 0 given"),
                "{e}: {err}"
            );
        }
    }
}
