//! The segment's file: its name, and how it is made and opened. A
//! segment holds what ranks post (their calls, notes and, on the mpi
//! engine, small collectives' inputs), so it is private to the job's user
//! and never found by a path a peer chose:
//!
//! - rank 0 makes it with `O_CREAT | O_EXCL | O_NOFOLLOW`, mode 0600 (set
//!   again on the open file, whatever the umask), in its own directory,
//!   under a name of its own making: `rankwise-<pid>-<16 hex digits>`;
//! - the other ranks get that name from rank 0, check that it is one
//!   ([`valid_name`]: no `/`, no `..`, nothing else), join it to their own
//!   directory and open it with `O_NOFOLLOW`, so a symbolic link in its
//!   place is refused;
//! - either end refuses a file that is not a regular file or that its
//!   group or others may read or write.
//!
//! Pure path and mode handling: mapping it is `Lane`'s job.

use std::fs::{File, OpenOptions, Permissions};
use std::io::{Error, ErrorKind};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

const PREFIX: &str = "rankwise-";
/// Hex digits of the name's random part.
const TAG_DIGITS: usize = 16;
/// The only mode a segment has: its owner reads and writes it.
pub(super) const MODE: u32 = 0o600;

/// The name of a segment made by process `pid` with the random `tag`.
pub(super) fn name(pid: u32, tag: u64) -> String {
    format!("{PREFIX}{pid}-{tag:0w$x}", w = TAG_DIGITS)
}

/// `bytes` as a segment's name, when they are one as [`name`] makes them:
/// `rankwise-`, a process id (decimal, at most 10 digits), `-` and 16
/// lower-case hex digits. Anything else, a `/` or `..` included, is not.
pub fn valid_name(bytes: &[u8]) -> Option<&str> {
    let text = std::str::from_utf8(bytes).ok()?;
    let (pid, tag) = text.strip_prefix(PREFIX)?.split_once('-')?;
    let pid_ok = (1..=10).contains(&pid.len()) && pid.bytes().all(|b| b.is_ascii_digit());
    let tag_ok = tag.len() == TAG_DIGITS
        && tag
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    (pid_ok && tag_ok).then_some(text)
}

fn refused(why: String) -> Error {
    Error::new(ErrorKind::InvalidData, why)
}

/// The file at `path` is a regular file that only its owner may read or
/// write, or why it is not used.
fn check_private(file: &File, path: &Path) -> std::io::Result<()> {
    let meta = file.metadata()?;
    if !meta.file_type().is_file() {
        return Err(refused(format!(
            "{} is not a regular file: not a segment",
            path.display()
        )));
    }
    if meta.mode() & 0o077 != 0 {
        return Err(refused(format!(
            "{} has mode {:o}: a segment is readable and writable by its owner only ({MODE:o})",
            path.display(),
            meta.mode() & 0o777
        )));
    }
    Ok(())
}

/// Makes the file of a segment of `bytes` bytes in `dir`, named by `tag`:
/// the file, open for reading and writing, and its path. Refused when
/// anything (a symbolic link included) already has that name.
pub(super) fn create(dir: &Path, tag: u64, bytes: u64) -> std::io::Result<(File, PathBuf)> {
    let path = dir.join(name(std::process::id(), tag));
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .mode(MODE)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    let sized = file
        .set_permissions(Permissions::from_mode(MODE))
        .and_then(|()| check_private(&file, &path))
        .and_then(|()| file.set_len(bytes));
    match sized {
        Ok(()) => Ok((file, path)),
        Err(e) => {
            let _ = std::fs::remove_file(&path);
            Err(e)
        }
    }
}

/// Opens the segment file named `name` (a name a peer sent) in this
/// rank's own `dir`, for reading and writing, without following a
/// symbolic link.
pub(super) fn open(dir: &Path, name: &[u8]) -> std::io::Result<(File, PathBuf)> {
    let Some(name) = valid_name(name) else {
        return Err(refused(format!(
            "{:?} is not a segment's name (rankwise-<pid>-<16 hex digits>)",
            String::from_utf8_lossy(&name[..name.len().min(64)])
        )));
    };
    let path = dir.join(name);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(&path)?;
    check_private(&file, &path)?;
    Ok((file, path))
}
