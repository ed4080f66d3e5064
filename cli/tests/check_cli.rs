//! `rankwise check -- CMD`, end to end: a C program linked against
//! libnccl.so.2 (the stand-in NCCL of interpose/tests/standin, built here),
//! started as 4 processes by a launcher (`tests/check/launch.sh`, as
//! torchrun starts ranks; `mpirun -n 4` when OpenMPI is installed), checked
//! by the preloaded librankwise_nccl.so the binary carries.
//!
//! The binary is cargo's, or the one `RANKWISE_TEST_EXE` names (CI: the
//! `rankwise` a fresh virtual environment got from the wheel). With
//! `RANKWISE_TEST_REQUIRE_MPIRUN=1`, a machine without `mpirun` fails the
//! mpirun test instead of leaving it out.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;

const RANKS: usize = 4;

fn exe() -> PathBuf {
    match std::env::var_os("RANKWISE_TEST_EXE") {
        Some(p) if !p.is_empty() => PathBuf::from(p),
        _ => PathBuf::from(env!("CARGO_BIN_EXE_rankwise")),
    }
}

fn here() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/check")
}

/// The stand-in NCCL and the rank program linked against it, built once.
struct Built {
    _dir: tempfile::TempDir,
    rank: PathBuf,
}

fn built() -> &'static Built {
    static B: OnceLock<Built> = OnceLock::new();
    B.get_or_init(|| {
        let dir = tempfile::tempdir().unwrap();
        let lib = dir.path().join("libnccl.so.2");
        let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../interpose/tests/standin/nccl.rs");
        let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
        let st = Command::new(rustc)
            .args([
                "--edition",
                "2021",
                "--crate-type",
                "cdylib",
                "-O",
                "-A",
                "warnings",
            ])
            .args(["-C", "link-arg=-Wl,-soname,libnccl.so.2", "-o"])
            .arg(&lib)
            .arg(&src)
            .status()
            .expect("rustc runs");
        assert!(st.success(), "building the stand-in NCCL failed");
        let rank = dir.path().join("rank");
        let st = Command::new("cc")
            .args(["-O1", "-o"])
            .arg(&rank)
            .arg(here().join("rank.c"))
            .arg(format!("-L{}", dir.path().display()))
            .arg("-l:libnccl.so.2")
            .arg(format!("-Wl,-rpath,{}", dir.path().display()))
            .status()
            .expect("cc runs");
        assert!(st.success(), "building tests/check/rank.c failed");
        Built { rank, _dir: dir }
    })
}

/// A run: `rankwise check ARGS` in a fresh working directory, with the
/// stand-in's variables and `env`.
struct Run {
    out: Output,
    cwd: tempfile::TempDir,
}

impl Run {
    fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.out.stderr).into_owned()
    }
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.out.stdout).into_owned()
    }
    fn code(&self) -> Option<i32> {
        self.out.status.code()
    }
    fn show(&self) -> String {
        format!(
            "status {}\nstdout:\n{}\nstderr:\n{}",
            self.out.status,
            self.stdout(),
            self.stderr()
        )
    }
    /// `rankwise check:` lines of stderr.
    fn ours(&self) -> Vec<String> {
        self.stderr()
            .lines()
            .filter(|l| l.starts_with("rankwise check: "))
            .map(str::to_string)
            .collect()
    }
    /// The journal directory the run printed at start.
    fn journal(&self) -> PathBuf {
        let line = self
            .ours()
            .into_iter()
            .find(|l| l.contains("journals in "))
            .unwrap_or_else(|| panic!("no journal line\n{}", self.show()));
        PathBuf::from(line.split("journals in ").nth(1).unwrap())
    }
    /// The journal files (not the hidden library), each with its text.
    fn journals(&self) -> Vec<(PathBuf, String)> {
        let mut v: Vec<_> = std::fs::read_dir(self.journal())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
            .map(|p| {
                let t = std::fs::read_to_string(&p).unwrap();
                (p, t)
            })
            .collect();
        v.sort();
        v
    }
}

fn check(args: &[&str], env: &[(&str, &str)]) -> Run {
    built();
    let cwd = tempfile::tempdir().unwrap();
    let mut c = Command::new(exe());
    c.arg("check")
        .args(args)
        .current_dir(cwd.path())
        .env("RANKWISE_STANDIN_DIR", cwd.path())
        .env("RANKWISE_STANDIN_TIMEOUT", "10")
        .env("RANKWISE_TIMEOUT", "20")
        .env_remove("LD_PRELOAD")
        .env_remove("RANKWISE_PRELOAD")
        .env_remove("RANKWISE_CHECK")
        .env_remove("RANKWISE_DEBUG_FILE");
    for (k, v) in env {
        c.env(k, v);
    }
    let out = c.output().expect("rankwise runs");
    Run { out, cwd }
}

fn launch() -> String {
    here().join("launch.sh").display().to_string()
}

fn rank() -> String {
    built().rank.display().to_string()
}

/// A directory for the ranks to meet in (the id file), beside the run's.
fn meet() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

#[test]
fn a_clean_program_passes_with_every_call_counted() {
    let m = meet();
    let calls = 5;
    let r = check(
        &[
            "--",
            &launch(),
            &rank(),
            m.path().to_str().unwrap(),
            "clean",
            &calls.to_string(),
        ],
        &[],
    );
    assert_eq!(r.code(), Some(0), "{}", r.show());
    // each rank checked its own sums, element by element
    for k in 0..RANKS {
        assert!(
            r.stdout()
                .contains(&format!("rank {k}: {calls} AllReduces right")),
            "{}",
            r.show()
        );
    }
    let total = RANKS * calls;
    let verdict = format!(
        "rankwise check: {total} calls on 1 communicator across {RANKS} ranks: no contract violation"
    );
    assert!(r.ours().contains(&verdict), "{}", r.show());
    let journals = r.journals();
    assert_eq!(journals.len(), RANKS, "{}", r.show());
    for (p, text) in &journals {
        let coll = text
            .lines()
            .filter(|l| l.contains("AllReduce: opCount"))
            .count();
        assert_eq!(coll, calls, "{}: {text}", p.display());
    }
    assert!(r.journal().join(".librankwise_nccl.so").is_file());
    assert!(
        r.journal().starts_with(r.cwd.path()),
        "default journal under the working directory"
    );
}

#[test]
fn a_count_mismatch_is_a_violation_with_every_journal_kept() {
    let m = meet();
    let r = check(
        &[
            "--",
            &launch(),
            &rank(),
            m.path().to_str().unwrap(),
            "count",
            "0",
        ],
        &[],
    );
    assert_eq!(r.code(), Some(3), "{}", r.show());
    // the checker refused the call on every rank, so NCCL never hung
    for k in 0..RANKS {
        assert!(
            r.stdout().contains(&format!(
                "rank {k}: AllReduce of count {} returned 5",
                if k == 2 { 5 } else { 4 }
            )),
            "{}",
            r.show()
        );
    }
    let ours = r.ours();
    let headline = ours
        .iter()
        .find(|l| l.starts_with("rankwise check: contract violation: "))
        .unwrap_or_else(|| panic!("{}", r.show()));
    // the analyzer's words, as `rankwise logs analyze` says them
    assert!(
        headline.starts_with(
            "rankwise check: contract violation: contract mismatch: rank 2 has count 5 where ranks 0-1,3 have count 4 at AllReduce #1 on commId 0x"
        ),
        "{headline}"
    );
    let journals = r.journals();
    assert_eq!(journals.len(), RANKS, "{}", r.show());
    for (p, text) in &journals {
        assert!(
            text.contains("Init COMPLETE") || text.contains("nranks 4"),
            "{}: {text}",
            p.display()
        );
    }
    assert!(
        ours.iter().any(|l| l.contains("rankwise logs analyze")),
        "{}",
        r.show()
    );
}

#[test]
fn local_mode_forwards_the_mismatch_and_the_journals_still_convict_it() {
    let m = meet();
    let r = check(
        &[
            "--mode",
            "local",
            "--",
            &launch(),
            &rank(),
            m.path().to_str().unwrap(),
            "count",
            "0",
        ],
        &[("RANKWISE_STANDIN_TIMEOUT", "1")],
    );
    assert_eq!(r.code(), Some(3), "{}", r.show());
    // the checker let the call through to the stand-in, which gave up waiting
    assert!(!r.stderr().contains("ncclInvalidUsage"), "{}", r.show());
    assert!(
        r.ours()
            .iter()
            .any(|l| l.starts_with("rankwise check: contract violation: ") && l.contains("rank 2")),
        "{}",
        r.show()
    );
}

#[test]
fn watch_mode_forwards_the_mismatch_names_it_on_every_rank_and_convicts_it() {
    let m = meet();
    let r = check(
        &[
            "--mode",
            "watch",
            "--",
            &launch(),
            &rank(),
            m.path().to_str().unwrap(),
            "count",
            "0",
        ],
        &[("RANKWISE_STANDIN_TIMEOUT", "2")],
    );
    assert_eq!(r.code(), Some(3), "{}", r.show());
    // the call reached the stand-in, and the ranks' rounds named it meanwhile
    for k in 0..RANKS {
        let line = format!(
            "rankwise: ncclInvalidUsage on rank {k}: watch: collective launch 2 on this communicator differs: AllReduce #1: count differs: ranks 0,1,3 pass 4, rank 2 passes 5"
        );
        assert!(r.stderr().contains(&line), "rank {k}: {}", r.show());
    }
    assert!(
        r.ours()
            .iter()
            .any(|l| l.starts_with("rankwise check: contract violation: ") && l.contains("rank 2")),
        "{}",
        r.show()
    );
}

#[test]
fn the_launchers_own_preload_is_kept_behind_the_checker() {
    let cc = |name: &str, dir: &Path| {
        let src = dir.join(format!("{name}.c"));
        std::fs::write(&src, format!("int {name}_marker(void) {{ return 1; }}\n")).unwrap();
        let so = dir.join(format!("lib{name}.so"));
        let st = Command::new("cc")
            .args(["-shared", "-fPIC", "-o"])
            .arg(&so)
            .arg(&src)
            .status()
            .unwrap();
        assert!(st.success());
        so
    };
    let libs = tempfile::tempdir().unwrap();
    let (outer, inner) = (cc("markouter", libs.path()), cc("markinner", libs.path()));
    let m = meet();
    let r = check(
        &[
            "--",
            &launch(),
            &rank(),
            m.path().to_str().unwrap(),
            "clean",
            "2",
        ],
        &[
            ("LD_PRELOAD", outer.to_str().unwrap()),
            ("LAUNCHER_PRELOAD", inner.to_str().unwrap()),
            ("RANKWISE_TEST_SHOW_PRELOAD", "1"),
        ],
    );
    assert_eq!(r.code(), Some(0), "{}", r.show());
    let ours = r.journal().join(".librankwise_nccl.so");
    let want = format!("{}:{}:{}", ours.display(), outer.display(), inner.display());
    for k in 0..RANKS {
        assert!(
            r.stdout()
                .contains(&format!("rank {k} LD_PRELOAD={want}\n")),
            "{}",
            r.show()
        );
        for lib in [&ours, &outer, &inner] {
            assert!(
                r.stdout()
                    .contains(&format!("rank {k} mapped {}\n", lib.display())),
                "rank {k} did not map {}\n{}",
                lib.display(),
                r.show()
            );
        }
    }
}

#[test]
fn mpirun_ranks_are_checked_too() {
    let Some(mpirun) = which("mpirun") else {
        assert!(
            std::env::var_os("RANKWISE_TEST_REQUIRE_MPIRUN").is_none(),
            "RANKWISE_TEST_REQUIRE_MPIRUN is set and there is no mpirun on PATH"
        );
        eprintln!("no mpirun on PATH: the mpirun case is left out here");
        return;
    };
    let m = meet();
    let mut args = vec![
        mpirun.to_str().unwrap().to_string(),
        "-n".into(),
        "4".into(),
        "--oversubscribe".into(),
    ];
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        args.push("--allow-run-as-root".into());
    }
    args.extend([
        rank(),
        m.path().to_str().unwrap().to_string(),
        "clean".into(),
        "3".into(),
    ]);
    let mut all = vec!["--"];
    all.extend(args.iter().map(String::as_str));
    let r = check(&all, &[("OMPI_MCA_rmaps_base_oversubscribe", "1")]);
    assert_eq!(r.code(), Some(0), "{}", r.show());
    assert!(
        r.ours().contains(&format!(
            "rankwise check: {} calls on 1 communicator across {RANKS} ranks: no contract violation",
            RANKS * 3
        )),
        "{}",
        r.show()
    );
    assert_eq!(r.journals().len(), RANKS, "{}", r.show());
}

fn which(name: &str) -> Option<PathBuf> {
    std::env::split_paths(&std::env::var_os("PATH")?)
        .map(|d| d.join(name))
        .find(|p| {
            std::fs::metadata(p).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
        })
}

#[test]
fn a_program_that_makes_no_nccl_call_is_said_not_passed() {
    let r = check(&["--", "true"], &[]);
    assert_eq!(r.code(), Some(1), "{}", r.show());
    assert!(
        r.ours()
            .iter()
            .any(|l| l.contains("made no NCCL call that the checker saw")),
        "{}",
        r.show()
    );
}

#[test]
fn the_commands_code_and_signals_pass_through() {
    // SIGTERM to rankwise reaches the command, whose exit code comes back
    // (unforwarded, the command ends by itself after 30 s with 9)
    let cwd = tempfile::tempdir().unwrap();
    let ready = cwd.path().join("ready");
    let script = format!(
        "trap 'echo got TERM; exit 7' TERM; touch {}; i=0; while [ $i -lt 600 ]; do sleep 0.05; i=$((i+1)); done; exit 9",
        ready.display()
    );
    let child = Command::new(exe())
        .args(["check", "--", "sh", "-c", &script])
        .current_dir(cwd.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !ready.exists() {
        assert!(t.elapsed().as_secs() < 30, "the command never started");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    // SAFETY: kill with the pid of a child not yet waited for.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGTERM) }, 0);
    let out = child.wait_with_output().unwrap();
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(out.status.code(), Some(7), "{stdout}\n{stderr}");
    assert!(stdout.contains("got TERM"), "{stdout}");
    assert!(
        stderr.contains("rankwise check: sh exited with 7\n"),
        "{stderr}"
    );
}

/// Bad input: one line on stderr, exit 1, and nothing started: no journal
/// directory made, the command never run.
#[test]
fn bad_input_is_one_line_and_nothing_starts() {
    let file = tempfile::NamedTempFile::new().unwrap();
    let under_file = format!("{}/journal", file.path().display());
    let marker_dir = tempfile::tempdir().unwrap();
    let marker = marker_dir.path().join("ran");
    let touch = ["touch", marker.to_str().unwrap()];
    let with = |opts: &[&str]| -> Vec<String> {
        let mut v: Vec<String> = opts.iter().map(|s| s.to_string()).collect();
        v.push("--".into());
        v.extend(touch.iter().map(|s| s.to_string()));
        v
    };
    let cases: Vec<(Vec<String>, &str)> = vec![
        (
            vec![],
            "rankwise check: no command to run: rankwise check [OPTIONS] -- CMD [ARGS]...",
        ),
        (
            vec!["--".into(), "no-such-command-rankwise".into()],
            "rankwise check: command not found: no-such-command-rankwise (not an executable file on PATH)",
        ),
        (
            with(&["--journal", &under_file]),
            "rankwise check: --journal ",
        ),
        (
            with(&["--mode", "fast"]),
            "rankwise check: --mode fast: expected strict, watch, local or off",
        ),
        (
            with(&["--mode", "Watch"]),
            "rankwise check: --mode Watch: expected strict, watch, local or off",
        ),
        (
            with(&["--timeout", "inf"]),
            "rankwise check: --timeout inf: not finite",
        ),
        (with(&["--timeout", "0"]), "rankwise check: --timeout 0: "),
    ];
    for (args, want) in cases {
        let a: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = check(&a, &[]);
        let err = r.stderr();
        assert_eq!(r.code(), Some(1), "{a:?}\n{}", r.show());
        assert_eq!(err.lines().count(), 1, "{a:?}: one line\n{err}");
        assert!(err.starts_with(want), "{a:?}: {err}");
        assert!(!marker.exists(), "{a:?}: the command ran");
        let left: Vec<_> = std::fs::read_dir(r.cwd.path()).unwrap().collect();
        assert!(left.is_empty(), "{a:?}: left {left:?}");
    }
    // a journal directory that is not writable, whatever the user (root writes anywhere, but not under /proc)
    let r = check(
        &with(&["--journal", "/proc/rankwise-journal"])
            .iter()
            .map(String::as_str)
            .collect::<Vec<_>>(),
        &[],
    );
    assert_eq!(r.code(), Some(1), "{}", r.show());
    assert_eq!(r.stderr().lines().count(), 1, "{}", r.show());
    assert!(
        r.stderr().starts_with(
            "rankwise check: --journal /proc/rankwise-journal: cannot make the directory"
        ),
        "{}",
        r.show()
    );
    assert!(!marker.exists());
}

#[test]
fn a_library_that_cannot_be_preloaded_stops_the_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "not a library\n").unwrap();
    // the real library with its ELF machine changed to another architecture's
    let first = check(&["--", "true"], &[]);
    let mut other = std::fs::read(first.journal().join(".librankwise_nccl.so")).unwrap();
    let host = std::env::consts::ARCH;
    let (machine, name) = if host == "aarch64" {
        (62u16, "x86_64")
    } else {
        (183, "aarch64")
    };
    other[18..20].copy_from_slice(&machine.to_le_bytes());
    let foreign = dir.path().join("libforeign.so");
    std::fs::write(&foreign, &other).unwrap();
    let built_for = format!("is built for {name}, and this machine is {host}");
    let cases = [
        (
            dir.path().join("missing.so"),
            "cannot be read: No such file",
        ),
        (text.clone(), "is not an ELF file, so not a shared library"),
        (foreign.clone(), built_for.as_str()),
    ];
    for (lib, why) in cases {
        let r = check(
            &["--", "touch", marker.to_str().unwrap()],
            &[("RANKWISE_PRELOAD", lib.to_str().unwrap())],
        );
        assert_eq!(r.code(), Some(1), "{}", r.show());
        assert_eq!(r.stderr().lines().count(), 1, "{}", r.show());
        assert!(
            r.stderr().starts_with(&format!(
                "rankwise check: RANKWISE_PRELOAD={}: {why}",
                lib.display()
            )),
            "{}",
            r.show()
        );
        assert!(!marker.exists());
        let left: Vec<_> = std::fs::read_dir(r.cwd.path()).unwrap().collect();
        assert!(
            left.is_empty(),
            "the journal directory made for the run is gone: {left:?}"
        );
    }
}
