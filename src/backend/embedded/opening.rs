//! The open-in-progress marker `NAME-opening` beside a queue file `NAME`
//! (SPEC 6, Verification).
//!
//! On the trusting path an open does not read the whole file, and redb
//! catches no damage it does not meet. Most damage it meets is a panic the
//! writer catches (`Corrupt`), but a panic inside redb that panics again
//! while unwinding (in a destructor) aborts the process: nothing can catch
//! that. Left alone, the restarted program would trust the file again and
//! abort again, a crash loop until the next verification a day later. So
//! a writable open leaves this empty file while it runs and removes it
//! when the open succeeds: an open that finds it (the last one did not
//! finish: an abort, a kill, a power cut while it ran) verifies the whole
//! file first, which repairs the damage or reports it as `Corrupt`.

use std::path::{Path, PathBuf};

use crate::error::Error;

/// The marker of one queue file.
pub(super) struct OpeningMarker {
    path: PathBuf,
    /// A read-only open neither creates nor removes it (the mount may be
    /// read-only); it only reads whether it is there.
    writable: bool,
    /// This open made the marker (it was not there before).
    created: bool,
}

impl OpeningMarker {
    /// The marker of the queue file `queue_file`: `queue_file` with
    /// `-opening` appended.
    pub(super) fn of(queue_file: &Path, writable: bool) -> Self {
        OpeningMarker {
            path: super::create::companion(queue_file, "-opening"),
            writable,
            created: false,
        }
    }

    /// Whether an earlier open of the file did not finish (the marker is
    /// there); a writable open then makes it if it is not. A marker that
    /// cannot be made is logged and the open goes on without it.
    pub(super) fn begin(&mut self) -> bool {
        let found = std::fs::symlink_metadata(&self.path).is_ok();
        if found {
            tracing::warn!(
                marker = %self.path.display(),
                "an earlier open of this queue file did not finish: verifying the whole file"
            );
        } else if self.writable {
            use std::os::unix::fs::OpenOptionsExt;
            match std::fs::OpenOptions::new()
                .write(true)
                .create_new(true)
                .mode(0o600)
                .open(&self.path)
            {
                Ok(_) => self.created = true,
                Err(e) => tracing::warn!(
                    marker = %self.path.display(),
                    error = %e,
                    "cannot make the open-in-progress marker; opening without it"
                ),
            }
        }
        found
    }

    /// After the open: a successful one removes the marker. A failed one
    /// leaves it, so that the next open verifies, unless the file was
    /// `Locked` by another handle (whose marker, if any, is its own) and
    /// this open made the marker.
    pub(super) fn end(&self, outcome: Result<(), &Error>) {
        if !self.writable {
            return;
        }
        let remove = match outcome {
            Ok(()) => true,
            Err(Error::Locked { .. }) => self.created,
            Err(_) => false,
        };
        if remove
            && let Err(e) = std::fs::remove_file(&self.path)
            && e.kind() != std::io::ErrorKind::NotFound
        {
            tracing::warn!(
                marker = %self.path.display(),
                error = %e,
                "cannot remove the open-in-progress marker; the next open verifies the whole file"
            );
        }
    }
}
