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

#[cfg(test)]
mod tests {
    use super::*;
    use redb::StorageBackend;

    #[test]
    fn writes_stay_in_memory_and_reads_see_them() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let original: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        std::fs::write(&path, &original).unwrap();
        let b = ReadOnlyFile::new(File::open(&path).unwrap()).unwrap();
        assert_eq!(b.len().unwrap(), 10_000);

        // A write across two blocks, read back with the bytes around it.
        b.write(4090, &[7u8; 20]).unwrap();
        let mut out = vec![0u8; 40];
        b.read(4080, &mut out).unwrap();
        assert_eq!(&out[..10], &original[4080..4090]);
        assert_eq!(&out[10..30], &[7u8; 20]);
        assert_eq!(&out[30..], &original[4110..4120]);

        // Shrink, then grow: the bytes past the cut read as zeros.
        b.set_len(4095).unwrap();
        b.set_len(9000).unwrap();
        let mut tail = vec![1u8; 10];
        b.read(4090, &mut tail).unwrap();
        assert_eq!(&tail[..5], &[7u8; 5]);
        assert_eq!(&tail[5..], &[0u8; 5]);
        let mut beyond = [1u8; 4];
        assert!(b.read(8998, &mut beyond).is_err(), "past the end");

        // A write past the end grows the storage.
        b.write(20_000, b"end").unwrap();
        assert_eq!(b.len().unwrap(), 20_003);
        let mut end = [0u8; 3];
        b.read(20_000, &mut end).unwrap();
        assert_eq!(&end, b"end");

        assert!(
            std::fs::read(&path).unwrap() == original,
            "the file changed"
        );
    }
}
