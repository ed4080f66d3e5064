//! Which `librankwise_nccl.so` `rankwise check` preloads, and the proof,
//! before anything starts, that it loads here.
//!
//! The library is embedded in the binary (`build.rs`) and written, once per
//! run, into the journal directory as `.librankwise_nccl.so`: the one place
//! every rank must reach anyway (each writes its journal there), so a job
//! spread over several hosts finds the library wherever it finds the
//! journal directory, and the run keeps beside its journals the exact
//! library that checked it. `RANKWISE_PRELOAD` names another file instead.
//!
//! Either way the file is checked before the command starts: a regular
//! file, a 64-bit ELF shared object for this machine's architecture, and
//! loadable by the dynamic loader here (a missing dependency, a libc too
//! old, a directory mounted `noexec`), each said in one line. The loader
//! itself only warns and goes on when an `LD_PRELOAD` entry does not load,
//! which would be a run checked by nothing.

use std::path::{Path, PathBuf};

/// The variable naming a library to preload instead of the embedded one.
pub const PRELOAD_VAR: &str = "RANKWISE_PRELOAD";

/// The embedded library's file name in the journal directory (hidden, so
/// `rankwise logs analyze DIR` reads only the journals).
pub const FILE_NAME: &str = ".librankwise_nccl.so";

/// The library built with this binary.
static EMBEDDED: &[u8] = include_bytes!(env!("RANKWISE_CHECKER_PATH"));

/// Where the library comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Source {
    /// `RANKWISE_PRELOAD`
    Named(PathBuf),
    /// The embedded library, to be written into the journal directory.
    Embedded,
}

impl Source {
    /// `RANKWISE_PRELOAD` when set and not empty, else the embedded library.
    pub fn from_env() -> Source {
        match std::env::var_os(PRELOAD_VAR) {
            Some(p) if !p.is_empty() => Source::Named(PathBuf::from(p)),
            _ => Source::Embedded,
        }
    }
}

/// The absolute path of a library ready to preload: `RANKWISE_PRELOAD`'s
/// file, or the embedded library written into `journal`; checked.
pub fn prepare(source: &Source, journal: &Path) -> Result<PathBuf, String> {
    let path = match source {
        Source::Named(p) => {
            std::path::absolute(p).map_err(|e| format!("{PRELOAD_VAR}={}: {e}", p.display()))?
        }
        Source::Embedded => write_embedded(journal)?,
    };
    let shown = match source {
        Source::Named(_) => format!("{PRELOAD_VAR}={}", path.display()),
        Source::Embedded => format!("the checker library {}", path.display()),
    };
    check_file(&path).map_err(|why| format!("{shown}: {why}"))?;
    loads(&path).map_err(|why| format!("{shown} does not load here: {why}"))?;
    Ok(path)
}

fn write_embedded(journal: &Path) -> Result<PathBuf, String> {
    let path = journal.join(FILE_NAME);
    let write = || -> std::io::Result<()> {
        use std::os::unix::fs::PermissionsExt;
        std::fs::write(&path, EMBEDDED)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755))
    };
    write().map_err(|e| {
        format!(
            "cannot write the checker library to {}: {e}",
            path.display()
        )
    })?;
    Ok(path)
}

/// What is wrong with `path` as a library to preload on this machine.
pub fn check_file(path: &Path) -> Result<(), String> {
    let meta = std::fs::metadata(path).map_err(|e| format!("cannot be read: {e}"))?;
    if !meta.is_file() {
        return Err("is not a regular file".into());
    }
    let mut head = [0u8; 20];
    use std::io::Read;
    let n = std::fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .map_err(|e| format!("cannot be read: {e}"))?;
    elf_fits_here(&head[..n], std::env::consts::ARCH)
}

/// ELF e_machine of each architecture rankwise builds for.
const MACHINES: [(&str, u16); 5] = [
    ("x86_64", 62),
    ("aarch64", 183),
    ("powerpc64", 21),
    ("riscv64", 243),
    ("s390x", 22),
];

/// Whether the first bytes of a file are those of a 64-bit little- or
/// big-endian ELF shared object for `arch` (Rust's name of an architecture,
/// `std::env::consts::ARCH`).
pub fn elf_fits_here(head: &[u8], arch: &str) -> Result<(), String> {
    if head.len() < 20 || &head[..4] != b"\x7fELF" {
        return Err("is not an ELF file, so not a shared library".into());
    }
    if head[4] != 2 {
        return Err(format!(
            "is a {}-bit ELF file; this machine runs 64-bit programs",
            if head[4] == 1 { 32 } else { 0 }
        ));
    }
    let little = head[5] == 1;
    let u16_at = |i: usize| {
        let b = [head[i], head[i + 1]];
        if little {
            u16::from_le_bytes(b)
        } else {
            u16::from_be_bytes(b)
        }
    };
    let (kind, machine) = (u16_at(16), u16_at(18));
    let name_of = |m: u16| {
        MACHINES
            .iter()
            .find(|(_, code)| *code == m)
            .map_or_else(|| format!("ELF machine {m}"), |(name, _)| name.to_string())
    };
    match MACHINES.iter().find(|(name, _)| *name == arch) {
        Some((_, want)) if *want != machine => {
            return Err(format!(
                "is built for {}, and this machine is {arch}",
                name_of(machine)
            ));
        }
        _ => {}
    }
    if (little != cfg!(target_endian = "little")) && arch == std::env::consts::ARCH {
        return Err("is built for the other byte order than this machine's".into());
    }
    if kind != 3 {
        return Err(format!(
            "is an ELF {}, not a shared library",
            match kind {
                1 => "object file",
                2 => "executable",
                4 => "core dump",
                _ => "file of another kind",
            }
        ));
    }
    Ok(())
}

/// Whether the dynamic loader loads `path` into this process, with every
/// symbol bound now; its words when it does not. The handle is kept: the
/// library is a few megabytes, and unloading a Rust library that may have
/// registered thread-local destructors is not safe.
fn loads(path: &Path) -> Result<(), String> {
    use std::os::unix::ffi::OsStrExt;
    let c = std::ffi::CString::new(path.as_os_str().as_bytes())
        .map_err(|_| "its path holds a NUL byte".to_string())?;
    // SAFETY: `c` is a NUL-terminated path that outlives the calls. Loading
    // runs the library's initialisers: librankwise_nccl.so has none besides
    // Rust's standard library's, and its exported NCCL entry points stay
    // local to the handle (RTLD_LOCAL), so nothing in this process binds to
    // them. dlerror's string is read before any other dl call can replace it.
    unsafe {
        let h = libc::dlopen(c.as_ptr(), libc::RTLD_NOW | libc::RTLD_LOCAL);
        if h.is_null() {
            let e = libc::dlerror();
            return Err(if e.is_null() {
                "the dynamic loader refused it".into()
            } else {
                std::ffi::CStr::from_ptr(e).to_string_lossy().into_owned()
            });
        }
    }
    Ok(())
}

/// `LD_PRELOAD` for the command: the library first, then what was there.
pub fn preload_value(lib: &Path, existing: Option<&std::ffi::OsStr>) -> std::ffi::OsString {
    let mut v = lib.as_os_str().to_os_string();
    if let Some(old) = existing.filter(|o| !o.is_empty()) {
        v.push(":");
        v.push(old);
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(class: u8, data: u8, kind: u16, machine: u16) -> Vec<u8> {
        let mut h = vec![0x7f, b'E', b'L', b'F', class, data, 1, 0];
        h.extend([0; 8]);
        let (k, m) = if data == 1 {
            (kind.to_le_bytes(), machine.to_le_bytes())
        } else {
            (kind.to_be_bytes(), machine.to_be_bytes())
        };
        h.extend(k);
        h.extend(m);
        h
    }

    #[test]
    fn an_elf_header_is_read_field_by_field() {
        assert_eq!(elf_fits_here(&header(2, 1, 3, 62), "x86_64"), Ok(()));
        assert_eq!(elf_fits_here(&header(2, 1, 3, 183), "aarch64"), Ok(()));
        assert_eq!(
            elf_fits_here(&header(2, 1, 3, 183), "x86_64").unwrap_err(),
            "is built for aarch64, and this machine is x86_64"
        );
        assert_eq!(
            elf_fits_here(&header(2, 1, 3, 62), "aarch64").unwrap_err(),
            "is built for x86_64, and this machine is aarch64"
        );
        assert_eq!(
            elf_fits_here(&header(2, 1, 3, 999), "x86_64").unwrap_err(),
            "is built for ELF machine 999, and this machine is x86_64"
        );
        assert_eq!(
            elf_fits_here(&header(1, 1, 3, 3), "x86_64").unwrap_err(),
            "is a 32-bit ELF file; this machine runs 64-bit programs"
        );
        assert_eq!(
            elf_fits_here(&header(2, 1, 2, 62), "x86_64").unwrap_err(),
            "is an ELF executable, not a shared library"
        );
        assert_eq!(
            elf_fits_here(b"#!/bin/sh\necho not a library\n", "x86_64").unwrap_err(),
            "is not an ELF file, so not a shared library"
        );
        assert!(elf_fits_here(&header(2, 1, 3, 62)[..10], "x86_64").is_err());
    }

    #[test]
    fn the_embedded_library_is_one_for_this_machine() {
        assert_eq!(elf_fits_here(EMBEDDED, std::env::consts::ARCH), Ok(()));
    }

    #[test]
    fn our_library_goes_first_and_the_rest_is_kept() {
        let lib = Path::new("/j/.librankwise_nccl.so");
        assert_eq!(preload_value(lib, None), "/j/.librankwise_nccl.so");
        assert_eq!(
            preload_value(lib, Some("".as_ref())),
            "/j/.librankwise_nccl.so"
        );
        assert_eq!(
            preload_value(lib, Some("/a/libx.so /b/liby.so".as_ref())),
            "/j/.librankwise_nccl.so:/a/libx.so /b/liby.so"
        );
    }
}
