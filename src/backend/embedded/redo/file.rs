//! Where the redo log's bytes live: the companion file `NAME-redo` of a
//! queue file, or memory (a caller-supplied redb backend, a read-only open
//! without a log); a test's simulated disk implements [`LogFile`] too.

use std::fmt::Debug;
use std::io;
use std::sync::{Arc, Mutex};

/// Where the log's bytes live: a file, or a test's simulated disk.
pub(crate) trait LogFile: Debug + Send + Sync + 'static {
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Read exactly `out.len()` bytes at `offset`.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;
    /// Write all of `data` at `offset`, growing the file if needed.
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Make every write so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
    /// Whether every write is refused: the log of a queue opened
    /// read-only (SPEC section 9), which nothing may be appended to.
    fn read_only(&self) -> bool {
        false
    }
    /// Cut the file to `len` bytes: `compact` gives back the room of a
    /// log that has nothing left to replay. Storage that cannot shrink
    /// keeps its length (the records past the next ones are of an older
    /// generation, never replayed).
    fn truncate(&self, len: u64) -> io::Result<()> {
        let _ = len;
        Ok(())
    }
}

/// The log as a file on disk.
#[derive(Debug)]
pub(in crate::backend::embedded) struct FileLog {
    file: std::fs::File,
    writable: bool,
}

impl FileLog {
    /// Open (and with `writable`, create) the log of the queue file `path`.
    /// A read-only open of a missing log gives `None`: there is nothing to
    /// replay.
    pub(in crate::backend::embedded) fn open(
        path: &std::path::Path,
        writable: bool,
    ) -> io::Result<Option<Self>> {
        let log = crate::backend::embedded::create::companion(path, "-redo");
        if !writable {
            return match std::fs::File::open(&log) {
                Ok(file) => Ok(Some(FileLog { file, writable })),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            };
        }
        let existed = log.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&log)?;
        if !existed {
            // The new name must survive a power cut before a record in it
            // is relied on.
            file.sync_all()?;
            if let Some(dir) = log.parent() {
                #[cfg(unix)]
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(Some(FileLog { file, writable }))
    }
}

impl LogFile for FileLog {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(out, offset)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the redo log was opened read-only",
            ));
        }
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn read_only(&self) -> bool {
        !self.writable
    }

    fn truncate(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }
}

/// A log in memory: for a caller-supplied redb backend (tests) and for a
/// read-only open without a log file. Clones share the bytes.
#[derive(Debug, Default, Clone)]
pub(in crate::backend::embedded) struct MemLog {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl LogFile for MemLog {
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = start
            .checked_add(out.len())
            .and_then(|end| b.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + data.len();
        if b.len() < end {
            b.resize(end, 0);
        }
        b[start..end].copy_from_slice(data);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
}
