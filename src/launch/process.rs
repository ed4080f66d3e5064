//! One process per rank: rankwise starts itself N times, as mpirun would,
//! each child running one rank of a named job, and serves the children a
//! side channel ([`crate::transport::store::Hub`] on 127.0.0.1) for the NCCL unique id,
//! every launch's posts and the Send/Recv pairing. The hub serves only the
//! holders of a key the parent draws for the job and hands to its children
//! in their environment (readable by the same user only); each child
//! proves it as its rank.
//!
//! A job is a name and JSON arguments; the child looks the name up in the
//! table its `main` passes to [`serve_if_worker`] and runs the handler on
//! its rank's communicator. What it returns (JSON, or the error) and, when
//! asked, its trace lines come back through the side channel. A child that
//! dies is marked finished as soon as its process ends, so the others stop
//! waiting for it at once.
//!
//! Several ranks on one GPU: NCCL refuses two ranks with the same host hash
//! on one GPU ("Duplicate GPU detected"). When there are more ranks than
//! GPUs each child gets its own `NCCL_HOSTID` and `NCCL_SOCKET_IFNAME=lo`,
//! so NCCL treats the ranks as separate hosts and connects them over
//! sockets: correct, and slow. Every child runs with `NCCL_NVLS_ENABLE=0`.

use super::{EngineKind, LaunchOptions};
use crate::api::Comm;
use crate::core::{Error, ErrorKind, Result};
use crate::transport::store::{Client, Hub, Key, SideChannel};
use serde::{Deserialize, Serialize};
use std::process::{Command, ExitCode, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// The variables a child finds its rank in.
pub const ENV_RANK: &str = "RANKWISE_WORKER_RANK";
pub const ENV_SIZE: &str = "RANKWISE_WORKER_SIZE";
pub const ENV_HUB: &str = "RANKWISE_WORKER_HUB";
/// The job's key to the hub, 64 hex digits.
pub const ENV_KEY: &str = "RANKWISE_WORKER_KEY";
pub const ENV_DEVICE: &str = "RANKWISE_WORKER_DEVICE";
pub const ENV_JOB: &str = "RANKWISE_WORKER_JOB";
pub const ENV_ENGINE: &str = "RANKWISE_WORKER_ENGINE";
pub const ENV_CHECKS: &str = "RANKWISE_WORKER_CHECKS";

/// A rank's part of a job: its communicator and the job's arguments.
pub type Handler = fn(&mut Comm, &serde_json::Value) -> Result<serde_json::Value>;

/// What to run on every rank.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    pub name: String,
    pub args: serde_json::Value,
    /// Capture the rank's trace lines (all INFO and WARN) and send them back.
    #[serde(default)]
    pub capture_trace: bool,
}

/// An error as it crosses between processes.
#[derive(Debug, Clone, Serialize, Deserialize)]
struct WireError {
    kind: ErrorKind,
    rank: Option<usize>,
    message: String,
}

impl From<&Error> for WireError {
    fn from(e: &Error) -> WireError {
        WireError {
            kind: e.kind,
            rank: e.rank,
            message: e.message.clone(),
        }
    }
}
impl From<WireError> for Error {
    fn from(w: WireError) -> Error {
        Error {
            kind: w.kind,
            rank: w.rank,
            message: w.message,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct Report {
    value: Option<serde_json::Value>,
    error: Option<WireError>,
    trace: Vec<String>,
}

/// One rank's outcome of a job.
#[derive(Debug)]
pub struct RankReport {
    pub result: Result<serde_json::Value>,
    /// The rank's trace lines when the job asked for them.
    pub trace: Vec<String>,
}

fn result_key(rank: usize) -> String {
    format!("result/{rank}")
}

/// The environment a child runs with, besides what it inherits: rank,
/// side channel and its key, GPU, and NCCL's variables for ranks that
/// share a GPU.
#[allow(clippy::too_many_arguments)]
pub fn child_env(
    rank: usize,
    n: usize,
    gpus: usize,
    hub: &str,
    key: &Key,
    job: &str,
    opts: &LaunchOptions,
    tag: &str,
) -> Vec<(String, String)> {
    let mut env = vec![
        (ENV_RANK.into(), rank.to_string()),
        (ENV_SIZE.into(), n.to_string()),
        (ENV_HUB.into(), hub.to_string()),
        (ENV_KEY.into(), key.to_hex()),
        (ENV_DEVICE.into(), (rank % gpus.max(1)).to_string()),
        (ENV_JOB.into(), job.to_string()),
        (ENV_ENGINE.into(), "nccl".into()),
        (
            ENV_CHECKS.into(),
            if opts.check_agreement { "1" } else { "0" }.into(),
        ),
        (
            "RANKWISE_TIMEOUT".into(),
            format!("{}", opts.timeout.as_secs_f64()),
        ),
        (
            "RANKWISE_POISON".into(),
            if opts.poison { "1" } else { "0" }.into(),
        ),
        // never NVLink multicast: it can take a shared host's GPUs down
        ("NCCL_NVLS_ENABLE".into(), "0".into()),
    ];
    if n > gpus {
        env.push(("NCCL_HOSTID".into(), format!("rankwise-{tag}-rank{rank}")));
        if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
            env.push(("NCCL_SOCKET_IFNAME".into(), "lo".into()));
        }
    }
    env
}

/// Runs `job` on `n` ranks of `engine`, one child process each, and returns
/// every rank's report in rank order. `deadline`, when given, bounds the
/// whole job: children still running then are killed.
pub fn run_job(
    engine: EngineKind,
    opts: &LaunchOptions,
    n: usize,
    job: &Job,
    deadline: Option<Instant>,
) -> Result<Vec<RankReport>> {
    if n == 0 {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            "a communicator needs at least 1 rank, 0 given",
        ));
    }
    if engine != EngineKind::Nccl {
        return Err(Error::new(
            ErrorKind::InvalidUsage,
            format!("the {engine} engine runs its ranks as threads, not processes"),
        ));
    }
    engine.available().map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("the {engine} engine cannot run here: {e}"),
        )
    })?;
    let gpus = gpu_count();
    let exe = std::env::current_exe().map_err(|e| {
        Error::new(
            ErrorKind::System,
            format!("cannot find rankwise's own executable to start the ranks: {e}"),
        )
    })?;
    let key = Key::random()?;
    let hub = Hub::start(key.clone())?;
    let job_text = serde_json::to_string(job)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("job: {e}")))?;
    let tag = format!("{}-{}", std::process::id(), unique());
    let mut children = Vec::with_capacity(n);
    for rank in 0..n {
        let mut cmd = Command::new(&exe);
        cmd.stdin(Stdio::null());
        for (k, v) in child_env(
            rank,
            n,
            gpus,
            &hub.addr().to_string(),
            &key,
            &job_text,
            opts,
            &tag,
        ) {
            cmd.env(k, v);
        }
        match cmd.spawn() {
            Ok(c) => children.push(c),
            Err(e) => {
                for mut c in children {
                    let _ = c.kill();
                    let _ = c.wait();
                }
                return Err(Error::new(
                    ErrorKind::System,
                    format!("cannot start rank {rank}'s process: {e}"),
                ));
            }
        }
    }
    let store = hub.store().clone();
    let statuses: Vec<Option<String>> = std::thread::scope(|s| {
        let handles: Vec<_> = children
            .into_iter()
            .enumerate()
            .map(|(rank, mut child)| {
                let store = store.clone();
                s.spawn(move || {
                    let status = loop {
                        match child.try_wait() {
                            Ok(Some(st)) => break Some(st),
                            Ok(None) => {}
                            Err(_) => break None,
                        }
                        if deadline.is_some_and(|d| Instant::now() >= d) {
                            let _ = child.kill();
                            let _ = child.wait();
                            store.mark_finished(
                                rank,
                                Some(&format!("rank {rank}'s process was killed: the job ran past its deadline")),
                            );
                            return Some("was killed: the job ran past its deadline".to_string());
                        }
                        std::thread::sleep(Duration::from_millis(5));
                    };
                    let how = match status {
                        Some(st) if st.success() => None,
                        Some(st) => Some(format!("exited with {st}")),
                        None => Some("could not be waited for".to_string()),
                    };
                    store.mark_finished(
                        rank,
                        how.as_ref()
                            .map(|h| format!("rank {rank}'s process {h}"))
                            .as_deref(),
                    );
                    how
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().unwrap_or(Some("could not be waited for".into())))
            .collect()
    });
    let mut out = Vec::with_capacity(n);
    for (rank, how) in statuses.into_iter().enumerate() {
        let report = store
            .peek(&result_key(rank))
            .and_then(|b| serde_json::from_slice::<Report>(&b).ok());
        out.push(match report {
            Some(r) => RankReport {
                result: match (r.value, r.error) {
                    (_, Some(e)) => Err(e.into()),
                    (Some(v), None) => Ok(v),
                    (None, None) => Ok(serde_json::Value::Null),
                },
                trace: r.trace,
            },
            None => RankReport {
                result: Err(Error::new(
                    ErrorKind::RemoteError,
                    format!(
                        "rank {rank}'s process {} without reporting a result (its stderr says why)",
                        how.unwrap_or_else(|| "ended".into())
                    ),
                )
                .on_rank(rank)),
                trace: Vec::new(),
            },
        });
    }
    Ok(out)
}

fn unique() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

fn gpu_count() -> usize {
    #[cfg(feature = "nccl")]
    {
        crate::engine::nccl::device_count()
    }
    #[cfg(not(feature = "nccl"))]
    {
        0
    }
}

/// The child's side: when this process was started by [`run_job`], runs
/// its rank of the job with a handler from `jobs`, reports, and returns the
/// exit code `main` should end with; None in any other process.
pub fn serve_if_worker(jobs: &[(&str, Handler)]) -> Option<ExitCode> {
    let rank: usize = std::env::var(ENV_RANK).ok()?.parse().ok()?;
    Some(match serve(rank, jobs) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("rankwise rank {rank}: {e}");
            ExitCode::from(crate::exit::FAILED)
        }
    })
}

fn var(name: &str) -> Result<String> {
    std::env::var(name).map_err(|_| {
        Error::new(
            ErrorKind::InvalidUsage,
            format!("a rank process needs {name} (set by the launcher)"),
        )
    })
}

fn serve(rank: usize, jobs: &[(&str, Handler)]) -> Result<()> {
    let parse = |name: &str| -> Result<usize> {
        var(name)?
            .parse()
            .map_err(|_| Error::new(ErrorKind::InvalidUsage, format!("{name} is not a number")))
    };
    let n = parse(ENV_SIZE)?;
    let device = parse(ENV_DEVICE)?;
    let hub: std::net::SocketAddr = var(ENV_HUB)?.parse().map_err(|_| {
        Error::new(
            ErrorKind::InvalidUsage,
            format!("{ENV_HUB} is not an address"),
        )
    })?;
    let job: Job = serde_json::from_str(&var(ENV_JOB)?)
        .map_err(|e| Error::new(ErrorKind::InvalidUsage, format!("{ENV_JOB}: {e}")))?;
    let key = Key::from_hex(&var(ENV_KEY)?)
        .map_err(|e| Error::new(ErrorKind::InvalidUsage, format!("{ENV_KEY}: {e}")))?;
    let chan: Arc<dyn SideChannel> = Arc::new(Client::connect(
        hub,
        &key,
        rank,
        Instant::now() + Duration::from_secs(60),
    )?);
    let mut opts = LaunchOptions {
        check_agreement: std::env::var(ENV_CHECKS).map(|v| v != "0").unwrap_or(true),
        ..LaunchOptions::default()
    };
    let buffer = if job.capture_trace {
        let (t, b) = crate::trace::Tracer::memory();
        opts.tracer = t;
        Some(b)
    } else {
        None
    };
    let handler = jobs
        .iter()
        .find(|(name, _)| *name == job.name)
        .map(|(_, h)| *h);
    let result = match handler {
        None => Err(Error::new(
            ErrorKind::InvalidUsage,
            format!("this rankwise has no job named {:?}", job.name),
        )),
        Some(h) => run_rank(rank, n, device, chan.clone(), &opts, h, &job.args),
    };
    let trace = buffer
        .map(|b| b.lock().unwrap_or_else(|p| p.into_inner()).clone())
        .unwrap_or_default();
    let report = Report {
        value: result.as_ref().ok().cloned(),
        error: result.as_ref().err().map(WireError::from),
        trace,
    };
    let bytes = serde_json::to_vec(&report)
        .map_err(|e| Error::new(ErrorKind::Internal, format!("report: {e}")))?;
    chan.set(&result_key(rank), &bytes)?;
    chan.finish(
        rank,
        result.as_ref().err().map(|e| e.to_string()).as_deref(),
    )?;
    Ok(())
}

#[cfg(feature = "nccl")]
fn make_comm(
    rank: usize,
    n: usize,
    device: usize,
    chan: Arc<dyn SideChannel>,
    opts: &LaunchOptions,
) -> Result<Comm> {
    super::nccl::comm(rank, n, device, chan, opts)
}

#[cfg(not(feature = "nccl"))]
fn make_comm(
    _rank: usize,
    _n: usize,
    _device: usize,
    _chan: Arc<dyn SideChannel>,
    _opts: &LaunchOptions,
) -> Result<Comm> {
    Err(Error::new(
        ErrorKind::InvalidUsage,
        "this build has no NCCL engine (built without the `nccl` feature)",
    ))
}

fn run_rank(
    rank: usize,
    n: usize,
    device: usize,
    chan: Arc<dyn SideChannel>,
    opts: &LaunchOptions,
    handler: Handler,
    args: &serde_json::Value,
) -> Result<serde_json::Value> {
    let mut comm = match make_comm(rank, n, device, chan.clone(), opts) {
        Ok(c) => c,
        Err(e) => {
            let e = e.on_rank(rank);
            let _ = chan.finish(rank, Some(&e.to_string()));
            return Err(e);
        }
    };
    let out = super::run_catching(rank, || handler(&mut comm, args));
    comm.finish(out.as_ref().err());
    drop(comm);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ranks_sharing_a_gpu_get_their_own_host_id_and_loopback_sockets() {
        let opts = LaunchOptions::default().with_timeout(Duration::from_secs(7));
        let key = Key::from_bytes([3; 32]);
        let env = |rank, n, gpus| child_env(rank, n, gpus, "127.0.0.1:9", &key, "{}", &opts, "t");
        let get = |e: &[(String, String)], k: &str| {
            e.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone())
        };
        let shared = env(2, 4, 1);
        assert_eq!(
            get(&shared, "NCCL_HOSTID").as_deref(),
            Some("rankwise-t-rank2")
        );
        assert_eq!(get(&shared, ENV_DEVICE).as_deref(), Some("0"));
        assert_eq!(get(&shared, "NCCL_NVLS_ENABLE").as_deref(), Some("0"));
        assert_eq!(get(&shared, "RANKWISE_TIMEOUT").as_deref(), Some("7"));
        if std::env::var_os("NCCL_SOCKET_IFNAME").is_none() {
            assert_eq!(get(&shared, "NCCL_SOCKET_IFNAME").as_deref(), Some("lo"));
        }
        let own = env(2, 4, 4);
        assert_eq!(
            get(&own, "NCCL_HOSTID"),
            None,
            "a GPU each: NCCL's own host id"
        );
        assert_eq!(get(&own, ENV_DEVICE).as_deref(), Some("2"));
        assert_eq!(get(&own, "NCCL_NVLS_ENABLE").as_deref(), Some("0"));
        let distinct: std::collections::HashSet<_> =
            (0..4).map(|r| get(&env(r, 4, 1), "NCCL_HOSTID")).collect();
        assert_eq!(distinct.len(), 4);
    }

    #[test]
    fn errors_and_values_cross_intact() {
        let e = Error::new(ErrorKind::Mismatch, "AllReduce #0: count differs").on_rank(2);
        let back: Error = WireError::from(&e).into();
        assert_eq!(back, e);
        let r = Report {
            value: None,
            error: Some(WireError::from(&e)),
            trace: vec!["[2] NCCL WARN x".into()],
        };
        let text = serde_json::to_vec(&r).unwrap();
        let again: Report = serde_json::from_slice(&text).unwrap();
        assert_eq!(Error::from(again.error.unwrap()), e);
        assert_eq!(again.trace, r.trace);
    }

    #[test]
    fn a_process_that_is_no_worker_is_left_alone() {
        if std::env::var_os(ENV_RANK).is_none() {
            assert!(serve_if_worker(&[]).is_none());
        }
    }
}
