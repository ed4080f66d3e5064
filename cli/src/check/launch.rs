//! Starting the command `rankwise check` wraps: finding it before anything
//! starts, running it with the checker's environment, passing on the
//! signals sent to `rankwise`, and its end as an exit code.

use std::ffi::{OsStr, OsString};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus};

/// The file `cmd` runs: itself when it names a path (has a `/`), else the
/// first executable file of that name on `path` (`PATH`'s value); what is
/// wrong otherwise, in words.
pub fn find_command(cmd: &OsStr, path: Option<&OsStr>) -> Result<PathBuf, String> {
    let shown = cmd.to_string_lossy();
    if cmd.is_empty() {
        return Err("the command is an empty string".into());
    }
    let executable = |p: &Path| {
        std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
    };
    if cmd.as_encoded_bytes().contains(&b'/') {
        let p = PathBuf::from(cmd);
        return match std::fs::metadata(&p) {
            Err(e) => Err(format!("cannot run {shown}: {e}")),
            Ok(m) if m.is_dir() => Err(format!("cannot run {shown}: it is a directory")),
            Ok(_) if !executable(&p) => Err(format!("cannot run {shown}: it is not executable")),
            Ok(_) => Ok(p),
        };
    }
    let dirs = path.map(std::env::split_paths).into_iter().flatten();
    for dir in dirs {
        // an empty entry is the current directory, as the shell reads it
        let dir = if dir.as_os_str().is_empty() {
            PathBuf::from(".")
        } else {
            dir
        };
        let p = dir.join(cmd);
        if executable(&p) {
            return Ok(p);
        }
    }
    Err(format!(
        "command not found: {shown} (not an executable file on PATH)"
    ))
}

/// How the command ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum End {
    /// It exited with this code.
    Code(i32),
    /// A signal ended it.
    Signal(i32),
}

impl End {
    pub fn of(status: ExitStatus) -> End {
        match (status.code(), status.signal()) {
            (Some(c), _) => End::Code(c),
            (None, Some(s)) => End::Signal(s),
            // neither: not on Unix; say it failed
            (None, None) => End::Code(1),
        }
    }
    /// The shell's code for it: the exit code, or 128 + the signal.
    pub fn code(self) -> u8 {
        match self {
            End::Code(c) => (c & 0xff) as u8,
            End::Signal(s) => (128 + s).clamp(0, 255) as u8,
        }
    }
    pub fn success(self) -> bool {
        self == End::Code(0)
    }
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            End::Code(c) => write!(f, "exited with {c}"),
            End::Signal(s) => write!(f, "was ended by signal {s} ({})", signal_name(*s)),
        }
    }
}

fn signal_name(s: i32) -> &'static str {
    match s {
        libc::SIGHUP => "SIGHUP",
        libc::SIGINT => "SIGINT",
        libc::SIGQUIT => "SIGQUIT",
        libc::SIGILL => "SIGILL",
        libc::SIGABRT => "SIGABRT",
        libc::SIGBUS => "SIGBUS",
        libc::SIGFPE => "SIGFPE",
        libc::SIGKILL => "SIGKILL",
        libc::SIGSEGV => "SIGSEGV",
        libc::SIGPIPE => "SIGPIPE",
        libc::SIGTERM => "SIGTERM",
        libc::SIGUSR1 => "SIGUSR1",
        libc::SIGUSR2 => "SIGUSR2",
        _ => "another signal",
    }
}

/// The signals `rankwise check` passes on to the command.
pub const FORWARDED: [i32; 6] = [
    libc::SIGINT,
    libc::SIGTERM,
    libc::SIGHUP,
    libc::SIGQUIT,
    libc::SIGUSR1,
    libc::SIGUSR2,
];

/// Runs `program args` with `env` added to this process's environment and
/// waits for it. A signal of [`FORWARDED`] sent to this process by another
/// process (`kill`, a scheduler's time limit) is sent on to the command; one
/// the terminal raised (Ctrl-C) is not, since the terminal already sent it
/// to the whole foreground process group, the command included. Either way
/// this process stays to report.
pub fn run(program: &Path, args: &[OsString], env: &[(OsString, OsString)]) -> Result<End, String> {
    use signal_hook::iterator::SignalsInfo;
    use signal_hook::iterator::exfiltrator::WithOrigin;
    use signal_hook::low_level::siginfo::Cause;
    // before the spawn, so a signal sent at once is not lost
    let mut signals = SignalsInfo::<WithOrigin>::new(FORWARDED)
        .map_err(|e| format!("cannot handle signals: {e}"))?;
    let handle = signals.handle();
    let mut child = Command::new(program)
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .spawn()
        .map_err(|e| format!("cannot start {}: {e}", program.display()))?;
    let pid = child.id() as libc::pid_t;
    let forwarder = std::thread::spawn(move || {
        for origin in &mut signals {
            if matches!(origin.cause, Cause::Kernel) {
                continue;
            }
            // SAFETY: kill takes a pid and a signal number and touches no
            // memory of this process. The pid is the child's, not yet
            // reaped: the loop ends (handle.close below) only after wait.
            unsafe {
                libc::kill(pid, origin.signal);
            }
        }
    });
    let status = child.wait();
    handle.close();
    let _ = forwarder.join();
    status
        .map(End::of)
        .map_err(|e| format!("waiting for {}: {e}", program.display()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_are_found_as_a_shell_finds_them() {
        let dir = tempfile::tempdir().unwrap();
        let exe = dir.path().join("tool");
        std::fs::write(&exe, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
        let plain = dir.path().join("plain");
        std::fs::write(&plain, "").unwrap();
        let path =
            std::env::join_paths(["/nonexistent-dir", dir.path().to_str().unwrap()]).unwrap();
        assert_eq!(find_command("tool".as_ref(), Some(&path)), Ok(exe.clone()));
        assert_eq!(
            find_command("plain".as_ref(), Some(&path)).unwrap_err(),
            "command not found: plain (not an executable file on PATH)"
        );
        assert!(find_command("tool".as_ref(), None).is_err());
        assert_eq!(find_command(exe.as_os_str(), None), Ok(exe.clone()));
        assert_eq!(
            find_command(plain.as_os_str(), None).unwrap_err(),
            format!("cannot run {}: it is not executable", plain.display())
        );
        assert_eq!(
            find_command(dir.path().as_os_str(), None).unwrap_err(),
            format!("cannot run {}: it is a directory", dir.path().display())
        );
        assert!(
            find_command("/no/such/file".as_ref(), None)
                .unwrap_err()
                .starts_with("cannot run /no/such/file: No such file")
        );
        assert!(find_command("".as_ref(), Some(&path)).is_err());
    }

    #[test]
    fn an_end_is_the_shells_exit_code() {
        assert_eq!(End::Code(0).code(), 0);
        assert_eq!(End::Code(7).code(), 7);
        assert_eq!(End::Signal(libc::SIGKILL).code(), 137);
        assert_eq!(End::Signal(libc::SIGTERM).code(), 143);
        assert_eq!(
            End::Signal(libc::SIGSEGV).to_string(),
            "was ended by signal 11 (SIGSEGV)"
        );
    }
}
