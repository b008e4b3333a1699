//! A redb storage backend over a file opened read-only: reads come from the
//! file, writes (redb's own bookkeeping at open, such as a repair after a
//! crash) stay in memory and are dropped at close, so the file is never
//! written (SPEC section 9, read-only inspection).

use std::collections::HashMap;
use std::fs::File;
use std::os::unix::fs::FileExt;
use std::sync::{Mutex, MutexGuard};

/// The overlay's unit, in bytes.
const BLOCK: u64 = 4096;

/// The file, and what was written over it in memory.
#[derive(Debug)]
pub(super) struct ReadOnlyFile {
    file: File,
    state: Mutex<Overlay>,
}

#[derive(Debug)]
struct Overlay {
    /// The length redb sees, in bytes.
    len: u64,
    /// Bytes of the file from here on read as zeros: the file's length, or
    /// less after redb shortened the storage.
    base_len: u64,
    /// Blocks written in memory, by block number.
    blocks: HashMap<u64, Vec<u8>>,
}

impl ReadOnlyFile {
    /// Wrap `file`, which holds a shared lock: a writer's exclusive lock
    /// and this one exclude each other.
    pub(super) fn new(file: File) -> std::io::Result<Self> {
        let len = file.metadata()?.len();
        Ok(ReadOnlyFile {
            file,
            state: Mutex::new(Overlay {
                len,
                base_len: len,
                blocks: HashMap::new(),
            }),
        })
    }

    fn state(&self) -> std::io::Result<MutexGuard<'_, Overlay>> {
        self.state
            .lock()
            .map_err(|_| std::io::Error::other("read-only overlay poisoned"))
    }

    /// Block `n` as the file and the overlay have it.
    fn load(&self, o: &Overlay, n: u64) -> std::io::Result<Vec<u8>> {
        if let Some(b) = o.blocks.get(&n) {
            return Ok(b.clone());
        }
        let mut block = vec![0u8; BLOCK as usize];
        let start = n * BLOCK;
        if start < o.base_len {
            let from_file = (o.base_len - start).min(BLOCK) as usize;
            self.file.read_exact_at(&mut block[..from_file], start)?;
        }
        Ok(block)
    }
}

impl redb::StorageBackend for ReadOnlyFile {
    fn len(&self) -> std::io::Result<u64> {
        Ok(self.state()?.len)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> std::io::Result<()> {
        let o = self.state()?;
        let end = offset
            .checked_add(out.len() as u64)
            .filter(|end| *end <= o.len)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::UnexpectedEof))?;
        if o.blocks.is_empty() && end <= o.base_len {
            return self.file.read_exact_at(out, offset);
        }
        let mut done = 0usize;
        while done < out.len() {
            let at = offset + done as u64;
            let (n, within) = (at / BLOCK, (at % BLOCK) as usize);
            let take = (BLOCK as usize - within).min(out.len() - done);
            let block = self.load(&o, n)?;
            out[done..done + take].copy_from_slice(&block[within..within + take]);
            done += take;
        }
        Ok(())
    }

    fn set_len(&self, len: u64) -> std::io::Result<()> {
        let mut o = self.state()?;
        if len < o.len {
            // Bytes past the new end read as zeros if it grows again.
            o.base_len = o.base_len.min(len);
            o.blocks.retain(|n, _| n * BLOCK < len);
            let cut = len % BLOCK;
            if let Some(b) = o.blocks.get_mut(&(len / BLOCK)) {
                b[cut as usize..].fill(0);
            }
        }
        o.len = len;
        Ok(())
    }

    fn sync_data(&self) -> std::io::Result<()> {
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> std::io::Result<()> {
        let mut o = self.state()?;
        let end = offset
            .checked_add(data.len() as u64)
            .ok_or_else(|| std::io::Error::from(std::io::ErrorKind::InvalidInput))?;
        let mut done = 0usize;
        while done < data.len() {
            let at = offset + done as u64;
            let (n, within) = (at / BLOCK, (at % BLOCK) as usize);
            let take = (BLOCK as usize - within).min(data.len() - done);
            let mut block = self.load(&o, n)?;
            block[within..within + take].copy_from_slice(&data[done..done + take]);
            o.blocks.insert(n, block);
            done += take;
        }
        o.len = o.len.max(end);
        Ok(())
    }
}
