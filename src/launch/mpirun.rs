//! The mpi engine from the command line: one rank per process of an MPI
//! job. Under `mpirun -n N`, every process runs the command and the
//! processes meet through MPI (`rankwise::mpi::share`): rank 0 makes the
//! run directory and says what happened, every rank writes its own rows.
//! Outside mpirun, `--engine mpi` starts `mpirun` itself with this same
//! command line ([`relaunch`]), so one command is enough.
//!
//! A self-started job's processes end with status 0 and rank 0 leaves the
//! command's exit code in a file the launcher names (`ENV_STATUS`), so
//! mpirun's own report of a process that "exited with non-zero status"
//! never buries the command's output; the launcher exits with that code.

use super::EngineKind;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitCode, Stdio};

/// Where a self-started job's rank 0 writes the command's exit code.
pub const ENV_STATUS: &str = "RANKWISE_MPI_STATUS";

/// The extra arguments `mpirun` needs here to start `n` processes: more
/// processes than cores need `--oversubscribe` (OpenMPI refuses them
/// otherwise), and running as root needs `--allow-run-as-root`.
pub fn mpirun_flags(n: usize, cores: usize, root: bool) -> Vec<&'static str> {
    let mut v = Vec::new();
    if n > cores {
        v.push("--oversubscribe");
    }
    if root {
        v.push("--allow-run-as-root");
    }
    v
}

/// Whether this process runs as root (mpirun refuses root without a flag).
pub fn running_as_root() -> bool {
    // the effective uid, from /proc (libc's geteuid would need `unsafe`)
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("Uid:"))
                .and_then(|l| l.split_whitespace().nth(2).map(|u| u == "0"))
        })
        .unwrap_or(false)
}

/// When `engine` is mpi, this build has it, and this process was not
/// started by mpirun: runs this same command line under `mpirun -n
/// nranks` and returns its exit code. None otherwise (the command runs
/// here: under mpirun as one rank, or on another engine, or to say that
/// this build has no mpi engine).
pub fn relaunch(cmd: &str, engine: EngineKind, nranks: usize) -> Option<ExitCode> {
    if engine != EngineKind::Mpi || !cfg!(feature = "mpi") || under_mpirun() {
        return None;
    }
    Some(start(cmd, nranks, std::env::args_os().skip(1).collect()))
}

fn under_mpirun() -> bool {
    #[cfg(feature = "mpi")]
    {
        crate::engine::mpi::under_mpirun()
    }
    #[cfg(not(feature = "mpi"))]
    {
        false
    }
}

/// A file name for the status of a job started now by this process.
fn status_file() -> PathBuf {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "rankwise-mpirun-{}-{nanos}.status",
        std::process::id()
    ))
}

fn start(cmd: &str, nranks: usize, args: Vec<OsString>) -> ExitCode {
    let fail = |msg: String| crate::exit::fail(cmd, msg);
    if nranks == 0 {
        return fail("--ranks must be at least 1: a communicator has at least one rank".into());
    }
    let exe = match std::env::current_exe() {
        Ok(e) => e,
        Err(e) => return fail(format!("cannot find rankwise's own executable: {e}")),
    };
    let cores = std::thread::available_parallelism()
        .map(|n| n.get())
        .unwrap_or(1);
    let status = status_file();
    let mut c = Command::new("mpirun");
    c.args(mpirun_flags(nranks, cores, running_as_root()))
        .arg("-n")
        .arg(nranks.to_string())
        .arg(&exe)
        .args(&args)
        .env(ENV_STATUS, &status)
        .stdin(Stdio::null());
    let ran = c.status();
    let code = read_status(&status);
    let _ = std::fs::remove_file(&status);
    match (ran, code) {
        (Err(e), _) if e.kind() == std::io::ErrorKind::NotFound => fail(format!(
            "--engine mpi needs mpirun to start {nranks} rank process(es), and there is none on PATH (install OpenMPI: apt-get install openmpi-bin)"
        )),
        (Err(e), _) => fail(format!("cannot start mpirun: {e}")),
        (Ok(_), Some(code)) => ExitCode::from(code),
        (Ok(st), None) => fail(format!(
            "mpirun -n {nranks} {} ended ({st}) without rank 0 reporting an exit code (the processes' messages above say why)",
            exe.display()
        )),
    }
}

fn read_status(path: &Path) -> Option<u8> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The exit code a rank process ends with: rank 0 of a self-started job
/// writes `code` for the launcher and every process ends with 0; under a
/// user's own mpirun every process ends with `code` (mpirun reports it).
pub fn finish(rank: usize, code: u8) -> ExitCode {
    match std::env::var_os(ENV_STATUS) {
        Some(path) => {
            if rank == 0
                && let Err(e) = std::fs::write(&path, format!("{code}\n"))
            {
                eprintln!(
                    "rankwise: cannot write the exit code to {}: {e}",
                    Path::new(&path).display()
                );
                return ExitCode::from(code);
            }
            ExitCode::SUCCESS
        }
        None => ExitCode::from(code),
    }
}

/// This process's place in the MPI job when the command runs as one of
/// its ranks: `Some((rank, size))` under mpirun with the mpi engine.
pub fn rank_of_job(engine: EngineKind) -> Option<std::result::Result<(usize, usize), String>> {
    if engine != EngineKind::Mpi || !under_mpirun() {
        return None;
    }
    #[cfg(feature = "mpi")]
    {
        Some(crate::engine::mpi::world().map_err(|e| e.to_string()))
    }
    #[cfg(not(feature = "mpi"))]
    {
        None
    }
}

/// Every process's bytes, on every process of the job (see
/// `rankwise::mpi::share`), waiting at most the launch timeout.
pub fn share(mine: &[u8]) -> std::result::Result<Vec<Vec<u8>>, String> {
    #[cfg(feature = "mpi")]
    {
        crate::engine::mpi::share(mine, super::LaunchOptions::default().timeout)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "mpi"))]
    {
        let _ = mine;
        Err("this build has no mpi engine".into())
    }
}

/// Ends a rank process with rank 0's exit code, which every process
/// learns (so under a user's mpirun they all end alike): see [`finish`].
pub fn end_with_rank0(rank: usize, code: u8) -> ExitCode {
    let code = match share(&[code]) {
        Ok(all) => all.first().and_then(|b| b.first()).copied().unwrap_or(code),
        Err(e) => {
            eprintln!("rankwise rank {rank}: {e}");
            code.max(crate::exit::FAILED)
        }
    };
    finish(rank, code)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_cores_and_user() {
        assert!(mpirun_flags(2, 2, false).is_empty());
        assert_eq!(mpirun_flags(4, 2, false), vec!["--oversubscribe"]);
        assert_eq!(
            mpirun_flags(4, 2, true),
            vec!["--oversubscribe", "--allow-run-as-root"]
        );
        assert_eq!(mpirun_flags(1, 8, true), vec!["--allow-run-as-root"]);
    }

    #[test]
    fn other_engines_run_here() {
        assert!(relaunch("verify", EngineKind::Local, 4).is_none());
    }
}
