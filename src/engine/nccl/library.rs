//! Finding libnccl and the CUDA driver at run time. Nothing is linked at
//! build time: a machine without CUDA builds and runs rankwise, and
//! `--engine nccl` there says what it looked for and where.
//!
//! NCCL is looked for in this order, the first that loads wins:
//! 1. `RANKWISE_NCCL_LIBRARY` (a path; when set, nothing else is tried);
//! 2. `libnccl.so.2` through the dynamic loader's own search
//!    (`LD_LIBRARY_PATH`, the ld.so cache, the system directories);
//! 3. the copy in PyTorch's NCCL wheel, `nvidia/nccl/lib/libnccl.so.2`,
//!    found by asking `python3` where `nvidia.nccl` lives and by looking in
//!    the usual site-packages directories.
//!
//! cudarc's own loader looks for `libnccl.so` and never for the wheel's
//! `libnccl.so.2`, so the NCCL functions are resolved here ([`super::ffi`]);
//! the CUDA driver is cudarc's (`libcuda.so`, `libcuda.so.1`).

use super::ffi::Api;
use std::ffi::{OsStr, c_int};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// The variable that names the NCCL library to load.
pub const LIBRARY_VAR: &str = "RANKWISE_NCCL_LIBRARY";
/// The soname the loader is asked for.
pub const SONAME: &str = "libnccl.so.2";

/// One place NCCL was looked for, and what was found there.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attempt {
    /// Where the candidate came from: `RANKWISE_NCCL_LIBRARY`, `the dynamic
    /// loader's search`, `python3's nvidia.nccl`, `site-packages`.
    pub source: String,
    /// The path or name tried.
    pub candidate: String,
    /// Why it was not used.
    pub outcome: String,
}

/// A loaded NCCL.
pub struct Nccl {
    pub api: Api,
    /// The file loaded.
    pub path: PathBuf,
    /// How it was found (the [`Attempt::source`] that succeeded).
    pub source: String,
    /// `ncclGetVersion`, e.g. 22809.
    pub version: i32,
    _lib: libloading::Library,
}

impl Nccl {
    /// `2.28.9` from 22809 (NCCL_VERSION(X,Y,Z) = X*10000 + Y*100 + Z since 2.9).
    pub fn version_text(&self) -> String {
        version_text(self.version)
    }
    /// `NCCL 2.28.9 (/path/libnccl.so.2, found via …)`
    pub fn describe(&self) -> String {
        format!(
            "NCCL {} ({}, found via {})",
            self.version_text(),
            self.path.display(),
            self.source
        )
    }
}

pub fn version_text(v: i32) -> String {
    if v >= 10000 {
        format!("{}.{}.{}", v / 10000, (v % 10000) / 100, v % 100)
    } else {
        format!("{}.{}.{}", v / 1000, (v % 1000) / 100, v % 100)
    }
}

/// Why NCCL could not be loaded: every place looked at.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NotFound {
    pub attempts: Vec<Attempt>,
}

impl std::fmt::Display for NotFound {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "no usable NCCL library; looked for")?;
        for (i, a) in self.attempts.iter().enumerate() {
            let sep = if i == 0 { " " } else { "; " };
            write!(f, "{sep}{} via {}: {}", a.candidate, a.source, a.outcome)?;
        }
        write!(
            f,
            " (set {LIBRARY_VAR} to the path of libnccl.so.2, or pip install nvidia-nccl-cu13)"
        )
    }
}

/// The candidates, in order, from an environment (`var` is the value of
/// `RANKWISE_NCCL_LIBRARY`; `wheel_dirs` are `nvidia/nccl` directories).
pub fn candidates(var: Option<&OsStr>, wheel_dirs: &[(String, PathBuf)]) -> Vec<(String, PathBuf)> {
    if let Some(v) = var.filter(|v| !v.is_empty()) {
        return vec![(LIBRARY_VAR.to_string(), PathBuf::from(v))];
    }
    let mut out = vec![(
        "the dynamic loader's search".to_string(),
        PathBuf::from(SONAME),
    )];
    for (source, dir) in wheel_dirs {
        let p = dir.join("lib").join(SONAME);
        if !out.iter().any(|(_, q)| *q == p) {
            out.push((source.clone(), p));
        }
    }
    out
}

/// `nvidia/nccl` directories of PyTorch's NCCL wheel: where `python3` says
/// `nvidia.nccl` is, then the usual site-packages directories that hold one.
pub fn wheel_dirs() -> Vec<(String, PathBuf)> {
    let mut out = Vec::new();
    let py = std::process::Command::new("python3")
        .args([
            "-c",
            "import nvidia.nccl as m, os; print(os.path.dirname(m.__file__) if getattr(m, '__file__', None) else list(m.__path__)[0])",
        ])
        .stderr(std::process::Stdio::null())
        .output();
    if let Ok(o) = py
        && o.status.success()
    {
        let dir = String::from_utf8_lossy(&o.stdout).trim().to_string();
        if !dir.is_empty() {
            out.push(("python3's nvidia.nccl".to_string(), PathBuf::from(dir)));
        }
    }
    for root in site_package_roots() {
        let dir = root.join("nvidia").join("nccl");
        if dir.is_dir() && !out.iter().any(|(_, d)| *d == dir) {
            out.push(("site-packages".to_string(), dir));
        }
    }
    out
}

/// `…/lib/python3.*/{site,dist}-packages` under the usual prefixes.
fn site_package_roots() -> Vec<PathBuf> {
    let mut prefixes: Vec<PathBuf> = vec!["/usr".into(), "/usr/local".into()];
    if let Some(home) = std::env::var_os("HOME") {
        prefixes.push(Path::new(&home).join(".local"));
    }
    for var in ["VIRTUAL_ENV", "CONDA_PREFIX"] {
        if let Some(p) = std::env::var_os(var) {
            prefixes.push(p.into());
        }
    }
    // /opt/<name>/.venv and /opt/<name>, where images put their environments
    if let Ok(rd) = std::fs::read_dir("/opt") {
        for e in rd.flatten() {
            prefixes.push(e.path().join(".venv"));
            prefixes.push(e.path());
        }
    }
    let mut out = Vec::new();
    for p in prefixes {
        for lib in ["lib", "lib64"] {
            let Ok(rd) = std::fs::read_dir(p.join(lib)) else {
                continue;
            };
            let mut pys: Vec<PathBuf> = rd
                .flatten()
                .filter(|e| e.file_name().to_string_lossy().starts_with("python3"))
                .map(|e| e.path())
                .collect();
            pys.sort();
            for py in pys {
                for sp in ["site-packages", "dist-packages"] {
                    let d = py.join(sp);
                    if d.is_dir() {
                        out.push(d);
                    }
                }
            }
        }
    }
    out
}

/// Loads the first candidate that opens and has the NCCL API.
pub fn load_from(cands: &[(String, PathBuf)]) -> Result<Nccl, NotFound> {
    let mut attempts = Vec::new();
    for (source, path) in cands {
        let is_name = path.components().count() == 1;
        if !is_name && !path.exists() {
            attempts.push(Attempt {
                source: source.clone(),
                candidate: path.display().to_string(),
                outcome: "no such file".into(),
            });
            continue;
        }
        // SAFETY: loading a shared library runs its initialisers; libnccl's
        // are NCCL's own and touch no state of this process.
        let lib = match unsafe { libloading::Library::new(path.as_os_str()) } {
            Ok(l) => l,
            Err(e) => {
                attempts.push(Attempt {
                    source: source.clone(),
                    candidate: path.display().to_string(),
                    outcome: format!("cannot load it: {}", load_error(&e)),
                });
                continue;
            }
        };
        let api = match Api::load(&lib) {
            Ok(a) => a,
            Err(missing) => {
                attempts.push(Attempt {
                    source: source.clone(),
                    candidate: path.display().to_string(),
                    outcome: format!(
                        "loaded, but it lacks {missing} (rankwise needs NCCL 2.28 or later)"
                    ),
                });
                continue;
            }
        };
        let mut version: c_int = 0;
        // SAFETY: ncclGetVersion writes one int through the pointer it is given.
        let rc = unsafe { (api.get_version)(&mut version) };
        if rc != 0 || version < 22800 {
            attempts.push(Attempt {
                source: source.clone(),
                candidate: path.display().to_string(),
                outcome: format!(
                    "loaded, but it is NCCL {} (rankwise needs 2.28 or later)",
                    version_text(version)
                ),
            });
            continue;
        }
        let resolved = loaded_path(api.get_version as usize).unwrap_or_else(|| path.clone());
        return Ok(Nccl {
            api,
            path: resolved,
            source: source.clone(),
            version,
            _lib: lib,
        });
    }
    Err(NotFound { attempts })
}

/// `dlopen failed: libnccl.so.2: cannot open shared object file: …`
fn load_error(e: &libloading::Error) -> String {
    match std::error::Error::source(e) {
        Some(why) => format!("{e}: {why}"),
        None => e.to_string(),
    }
}

/// The file a loaded function lives in (`dladdr`).
fn loaded_path(addr: usize) -> Option<PathBuf> {
    let mut info = std::mem::MaybeUninit::<libc::Dl_info>::zeroed();
    // SAFETY: dladdr only reads the address and fills the Dl_info it is given.
    let ok = unsafe { libc::dladdr(addr as *const libc::c_void, info.as_mut_ptr()) };
    if ok == 0 {
        return None;
    }
    // SAFETY: dladdr returned non-zero, so it initialised info.
    let info = unsafe { info.assume_init() };
    if info.dli_fname.is_null() {
        return None;
    }
    // SAFETY: dli_fname is a NUL-terminated string owned by the loader,
    // valid while the library stays loaded (we hold it).
    let name = unsafe { std::ffi::CStr::from_ptr(info.dli_fname) };
    let p = PathBuf::from(name.to_string_lossy().into_owned());
    Some(std::fs::canonicalize(&p).unwrap_or(p))
}

/// NCCL, loaded once per process.
pub fn nccl() -> Result<&'static Nccl, NotFound> {
    static LIB: OnceLock<Result<Nccl, NotFound>> = OnceLock::new();
    LIB.get_or_init(|| {
        let var = std::env::var_os(LIBRARY_VAR);
        let wheels = if var.as_deref().is_some_and(|v| !v.is_empty()) {
            Vec::new()
        } else {
            wheel_dirs()
        };
        let cands = candidates(var.as_deref(), &wheels);
        let mut r = load_from(&cands);
        if let Err(nf) = &mut r
            && wheels.is_empty()
            && var.is_none()
        {
            nf.attempts.push(Attempt {
                source: "PyTorch's NCCL wheel".into(),
                candidate: "nvidia/nccl/lib/libnccl.so.2".into(),
                outcome: "python3 has no nvidia.nccl and no site-packages directory holds one"
                    .into(),
            });
        }
        r
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// Whether the CUDA driver library loads (cudarc's loader panics when it
/// does not, so it is asked first); the names it tried when it does not.
pub fn cuda_driver() -> Result<(), String> {
    static OK: OnceLock<Result<(), String>> = OnceLock::new();
    OK.get_or_init(|| {
        // SAFETY: is_culib_present only tries to open the library by name.
        if unsafe { cudarc::driver::sys::is_culib_present() } {
            Ok(())
        } else {
            Err(
                "no CUDA driver: libcuda.so and libcuda.so.1 are not on the dynamic loader's path (a machine with an NVIDIA GPU and its driver has them)"
                    .to_string(),
            )
        }
    })
    .clone()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_variable_alone_decides_when_set() {
        let wheels = vec![("site-packages".to_string(), PathBuf::from("/w/nvidia/nccl"))];
        let c = candidates(Some(OsStr::new("/x/libnccl.so.2")), &wheels);
        assert_eq!(
            c,
            vec![(LIBRARY_VAR.to_string(), PathBuf::from("/x/libnccl.so.2"))]
        );
        // empty counts as unset
        let c = candidates(Some(OsStr::new("")), &wheels);
        assert_eq!(c.len(), 2);
        assert_eq!(c[0].1, PathBuf::from(SONAME));
        assert_eq!(c[1].1, PathBuf::from("/w/nvidia/nccl/lib/libnccl.so.2"));
    }

    #[test]
    fn duplicate_wheel_directories_are_tried_once() {
        let d = PathBuf::from("/w/nvidia/nccl");
        let c = candidates(
            None,
            &[
                ("python3's nvidia.nccl".into(), d.clone()),
                ("site-packages".into(), d),
            ],
        );
        assert_eq!(c.len(), 2, "{c:?}");
    }

    #[test]
    fn a_failed_search_names_every_place_and_why() {
        let tmp = tempfile::tempdir().unwrap();
        let not_lib = tmp.path().join("libnccl.so.2");
        std::fs::write(&not_lib, b"not an ELF file").unwrap();
        let cands = vec![
            (
                LIBRARY_VAR.to_string(),
                PathBuf::from("/nonexistent/libnccl.so.2"),
            ),
            ("site-packages".to_string(), not_lib.clone()),
            (
                "the dynamic loader's search".to_string(),
                PathBuf::from("librankwise-no-such-lib.so.2"),
            ),
        ];
        let nf = load_from(&cands).err().expect("nothing loads");
        assert_eq!(nf.attempts.len(), 3);
        assert_eq!(nf.attempts[0].outcome, "no such file");
        assert!(
            nf.attempts[1].outcome.starts_with("cannot load it"),
            "{:?}",
            nf.attempts[1]
        );
        assert!(
            nf.attempts[2].outcome.starts_with("cannot load it"),
            "{:?}",
            nf.attempts[2]
        );
        let text = nf.to_string();
        assert!(
            text.starts_with("no usable NCCL library; looked for /nonexistent/libnccl.so.2 via RANKWISE_NCCL_LIBRARY: no such file; "),
            "{text}"
        );
        assert!(
            text.contains(&format!(
                "{} via site-packages: cannot load it",
                not_lib.display()
            )),
            "{text}"
        );
        assert!(text.contains("set RANKWISE_NCCL_LIBRARY"), "{text}");
    }

    #[test]
    fn a_library_without_nccl_is_refused_by_what_it_lacks() {
        // libc loads but has no NCCL functions
        let cands = vec![("test".to_string(), PathBuf::from("libc.so.6"))];
        let nf = load_from(&cands).err().expect("libc is not NCCL");
        assert!(
            nf.attempts[0].outcome.contains("lacks ncclGetVersion"),
            "{:?}",
            nf.attempts
        );
    }

    #[test]
    fn versions_print_as_nccl_does() {
        assert_eq!(version_text(22809), "2.28.9");
        assert_eq!(version_text(23001), "2.30.1");
        assert_eq!(version_text(2704), "2.7.4");
    }
}
