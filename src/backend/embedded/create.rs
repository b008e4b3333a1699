//! Where a queue file may be and how a new one is made: one claim per
//! file whatever its spelling, no device or FIFO taken for a queue, and no
//! crash that leaves a half-made file behind (SPEC section 6, Creating a
//! file).

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};

/// The companion file of the queue file `path`: `path` with `suffix`
/// appended (`NAME-redo`, the redo log; `NAME-opening`, the open marker).
pub(super) fn companion(path: &Path, suffix: &str) -> PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push(suffix);
    PathBuf::from(name)
}

pub(super) fn claim_path(path: &Path) -> Result<PathBuf> {
    // Canonicalise the directory (the file may not exist yet) so that two
    // spellings of one path are one claim.
    let file = path
        .file_name()
        .ok_or_else(|| Error::invalid(format!("{} names no file", path.display())))?;
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.to_path_buf(),
        _ => PathBuf::from("."),
    };
    let dir = dir.canonicalize().map_err(|source| Error::Io {
        context: format!("open {}", path.display()),
        source,
    })?;
    Ok(dir.join(file))
}

/// A queue file is a regular file (or does not exist yet). A device, FIFO
/// or socket at `path` is refused before anything touches it: a length of 0
/// would otherwise read as "no file yet", so the new queue would be renamed
/// over it (`/dev/null` replaced by a regular file), and opening a FIFO
/// blocks until a writer comes (SPEC section 6, Creating a file).
/// Directories are left to the open, which names them.
pub(super) fn refuse_special_file(path: &Path) -> Result<()> {
    match std::fs::metadata(path) {
        Ok(m) if !m.is_file() && !m.is_dir() => Err(Error::Io {
            context: format!("open {}", path.display()),
            source: std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "not a regular file (a device, FIFO or socket); a queue file must be one",
            ),
        }),
        _ => Ok(()),
    }
}

/// Make a new, empty queue file at `path` (if there is none, or only an
/// empty one) without a moment where a crash leaves a half-made file there.
/// redb initialises a file in place and writes its magic number last, so a
/// process killed in between left a file that no open accepts. The file is
/// built under a temporary name (`.NAME.creating.PID`, which a crash may
/// leave behind and which is safe to delete) and then linked into place.
///
/// `refuse_links` (test support) makes the hard link fail as on a file
/// system without links.
pub(super) fn create_fresh(path: &Path, refuse_links: bool) -> std::io::Result<()> {
    let exists = match std::fs::metadata(path) {
        Ok(m) if m.len() > 0 => return Ok(()),
        Ok(_) => true,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
        Err(e) => return Err(e),
    };
    let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
        return Ok(());
    };
    let tmp = dir.join(format!(
        ".{}.creating.{}",
        name.to_string_lossy(),
        std::process::id()
    ));
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    // redb syncs the new file before `create` returns.
    drop(redb::Builder::new().create(&tmp).map_err(|e| match e {
        // Keep the kind (permission denied, read-only file system),
        // so that `open` reports `Io`, not `Corrupt`.
        redb::DatabaseError::Storage(redb::StorageError::Io(io)) => io,
        other => std::io::Error::other(other),
    })?);
    let placed = if exists {
        std::fs::rename(&tmp, path)
    } else {
        place_new(&tmp, path, refuse_links)
    };
    placed?;
    #[cfg(unix)]
    std::fs::File::open(dir)?.sync_all()?;
    Ok(())
}

/// Put the finished new file `tmp` at `path`, unless a file appeared there
/// in the meantime (another process created the queue first: keep theirs).
///
/// A hard link, unlike a rename, never replaces a file. FAT/exFAT SD cards
/// and some FUSE mounts refuse hard links; there the name is claimed with
/// an empty file first (`create_new` fails if another process got there
/// first) and the finished file renamed over it. A crash in between leaves
/// an empty file, which the next open treats as no file, so the promise
/// holds: no crash leaves a half-made queue file at `path`.
fn place_new(tmp: &Path, path: &Path, refuse_links: bool) -> std::io::Result<()> {
    use std::io::ErrorKind;
    let linked = if refuse_links {
        Err(std::io::Error::new(
            ErrorKind::Unsupported,
            "hard links refused (test hook)",
        ))
    } else {
        std::fs::hard_link(tmp, path)
    };
    let placed = match linked {
        Err(e)
            if matches!(
                e.kind(),
                ErrorKind::PermissionDenied | ErrorKind::Unsupported
            ) =>
        {
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .open(path)
            {
                Ok(_) => return std::fs::rename(tmp, path),
                Err(e) => Err(e),
            }
        }
        other => other,
    };
    let _ = std::fs::remove_file(tmp);
    match placed {
        Err(e) if e.kind() == ErrorKind::AlreadyExists => Ok(()),
        other => other,
    }
}
