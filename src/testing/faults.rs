//! A simulated disk for fault injection under the embedded backend
//! (feature `testing`): power loss that keeps only part of the unsynced
//! writes, and writes or fsyncs that fail with `EIO` or `ENOSPC`.
//!
//! [`SimDisk`] holds two files, the queue file and its redo log, and of
//! each two images: what reads see (the page cache) and what is durable (as
//! of that file's last successful `sync_data`), plus the writes and length
//! changes since that sync. Both files share one power supply and one event
//! counter, so a power cut or a fault armed after `n` events can land
//! between any two writes or syncs of either file: between a log append and
//! its sync, between the sync and redb's commit, inside a checkpoint, or
//! just after it when the log is written from its start again. Hand
//! [`SimDisk::backend`] to
//! [`EmbeddedQueue::open_on_backend`](crate::EmbeddedQueue::open_on_backend)
//! (the queue finds the log file on the same disk); the test keeps the
//! `SimDisk` to arm faults and to take the bytes a power cut would leave
//! ([`SimDisk::after_power_loss`]).
//!
//! # What a power cut leaves
//!
//! Everything synced survives. Of the writes since the last sync, each is
//! kept whole, lost, or torn: only some of its sectors (512 B or 4 KiB, as
//! chosen per cut) reach the platter, in any combination. The file length
//! is one of the lengths it had since the last sync. This is what a disk
//! with a volatile write cache and no ordering between flushes may do;
//! sector writes themselves are atomic, as on real drives.

use std::io;

use super::Rng;
use std::sync::{Arc, Mutex, MutexGuard};

/// Linux `EIO`: the device failed the request.
pub const EIO: i32 = 5;
/// Linux `ENOSPC`: no space left on the device.
pub const ENOSPC: i32 = 28;

#[derive(Debug, Clone)]
enum Event {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

/// One file of the disk.
#[derive(Debug, Default)]
struct FileState {
    /// What reads see.
    current: Vec<u8>,
    /// What survives any power cut: the image as of the last sync.
    durable: Vec<u8>,
    /// Writes and length changes since the last sync, in order.
    log: Vec<Event>,
}

/// The files of a [`SimDisk`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SimFile {
    /// The queue (redb) file.
    Queue,
    /// Its redo log.
    Log,
}

impl SimFile {
    fn index(self) -> usize {
        match self {
            SimFile::Queue => 0,
            SimFile::Log => 1,
        }
    }
}

/// The bytes of both files of a [`SimDisk`]: what a crash or a power cut
/// leaves, and what [`SimDisk::from_image`] starts from.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DiskImage {
    /// The queue file.
    pub queue: Vec<u8>,
    /// The redo log.
    pub log: Vec<u8>,
}

impl From<Vec<u8>> for DiskImage {
    /// A queue file without a redo log.
    fn from(queue: Vec<u8>) -> Self {
        DiskImage {
            queue,
            log: Vec::new(),
        }
    }
}

#[derive(Debug, Default)]
struct State {
    files: [FileState; 2],
    /// Faults (not power cuts) hit only this file; both when `None`.
    target: Option<SimFile>,
    /// Successful writes and syncs so far.
    events: u64,
    /// Fail every write with this OS error while set.
    fail_writes: Option<i32>,
    /// Fail every sync with this OS error while set.
    fail_syncs: Option<i32>,
    /// The armed fault: after this many more writes and syncs succeed, the
    /// next one meets it.
    armed: Option<(u64, Armed)>,
    /// The power is off.
    dead: bool,
    /// What the last one-off fault hit.
    last_hit: Option<Hit>,
}

#[derive(Debug, Clone, Copy)]
enum Armed {
    PowerCut,
    Once(i32),
}

/// What a one-off fault armed by [`SimDisk::fail_once_after`] hit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Hit {
    /// A write, which then wrote nothing.
    Write,
    /// A `sync_data`, which then made nothing durable; the writes before
    /// it stay in the page cache, where reads (and a reopen) see them.
    Sync,
}

/// A file in memory that can lose power or fail its writes and syncs.
/// Clones share one disk.
#[derive(Debug, Clone, Default)]
pub struct SimDisk {
    state: Arc<Mutex<State>>,
}

/// The redb storage backend over one file of a [`SimDisk`]; also the
/// storage of the queue's redo log.
#[derive(Debug)]
pub struct SimBackend {
    disk: SimDisk,
    file: SimFile,
}

impl SimBackend {
    /// The backend of the other file of the same disk: the redo log of a
    /// queue file's backend.
    pub(crate) fn log_file(&self) -> SimBackend {
        SimBackend {
            disk: self.disk.clone(),
            file: SimFile::Log,
        }
    }
}

fn put(image: &mut Vec<u8>, offset: usize, data: &[u8]) {
    let end = offset + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[offset..end].copy_from_slice(data);
}

/// What a power cut did to the writes since the last sync.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CutSummary {
    /// Writes since the last sync.
    pub writes: usize,
    /// Of those, kept whole.
    pub kept: usize,
    /// Of those, torn (some sectors kept).
    pub torn: usize,
    /// The sector size used for tearing, in bytes (512 or 4096).
    pub sector_bytes: usize,
}

impl SimDisk {
    /// An empty disk (a file of length 0).
    pub fn new() -> Self {
        Self::default()
    }

    /// A disk whose files hold `image` (a [`DiskImage`], or the bytes of a
    /// queue file alone), all of it durable.
    pub fn from_image(image: impl Into<DiskImage>) -> Self {
        let image = image.into();
        let disk = Self::default();
        {
            let mut s = disk.lock();
            s.files[0].durable = image.queue.clone();
            s.files[0].current = image.queue;
            s.files[1].durable = image.log.clone();
            s.files[1].current = image.log;
        }
        disk
    }

    /// Aim the faults of [`SimDisk::fail_writes`], [`SimDisk::fail_syncs`]
    /// and [`SimDisk::fail_once_after`] at one file only (`None`: both, the
    /// default). An armed fault counts only that file's events. Power cuts
    /// always hit both.
    pub fn target(&self, file: Option<SimFile>) {
        self.lock().target = file;
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A storage backend on this disk, for
    /// [`EmbeddedQueue::open_on_backend`](crate::EmbeddedQueue::open_on_backend).
    pub fn backend(&self) -> SimBackend {
        SimBackend {
            disk: self.clone(),
            file: SimFile::Queue,
        }
    }

    /// Fail every write with OS error `errno` (for example [`ENOSPC`]) from
    /// now on; `None` makes writes work again.
    pub fn fail_writes(&self, errno: Option<i32>) {
        self.lock().fail_writes = errno;
    }

    /// Fail every `sync_data` with OS error `errno` (for example [`EIO`])
    /// from now on; `None` makes syncs work again. A failed sync makes
    /// nothing durable.
    pub fn fail_syncs(&self, errno: Option<i32>) {
        self.lock().fail_syncs = errno;
    }

    /// Cut the power once `events` more writes and syncs have succeeded: the
    /// next write or sync, and every one after it, fails with `EIO`.
    pub fn cut_power_after(&self, events: u64) {
        self.lock().armed = Some((events, Armed::PowerCut));
    }

    /// Once `events` more writes and syncs have succeeded, fail the next
    /// one with OS error `errno`; the disk works again after it.
    pub fn fail_once_after(&self, events: u64, errno: i32) {
        let mut s = self.lock();
        s.armed = Some((events, Armed::Once(errno)));
        s.last_hit = None;
    }

    /// What the one-off fault of [`SimDisk::fail_once_after`] hit, once it
    /// has; `None` while it is still armed.
    pub fn last_hit(&self) -> Option<Hit> {
        self.lock().last_hit
    }

    /// Disarm a fault that has not hit yet.
    pub fn disarm(&self) {
        self.lock().armed = None;
    }

    /// Whether the power has been cut.
    pub fn is_dead(&self) -> bool {
        self.lock().dead
    }

    /// Successful writes and syncs so far.
    pub fn events(&self) -> u64 {
        self.lock().events
    }

    /// The bytes reads see now: what a process crash (not a power cut)
    /// leaves behind, since the operating system keeps its page cache.
    pub fn image(&self) -> DiskImage {
        let s = self.lock();
        DiskImage {
            queue: s.files[0].current.clone(),
            log: s.files[1].current.clone(),
        }
    }

    /// Change the bytes reads see of `file` at `offset` (test support: a
    /// bit flip, a torn record), as if the disk had returned them so; the
    /// change is durable.
    pub fn damage(&self, file: SimFile, offset: usize, bytes: &[u8]) {
        let mut s = self.lock();
        let f = &mut s.files[file.index()];
        put(&mut f.current, offset, bytes);
        put(&mut f.durable, offset, bytes);
    }

    /// The bytes a power cut now leaves, as chosen by `seed`: of each file
    /// the durable image plus a random part of the writes since its last
    /// sync, some torn at sector boundaries (see the module doc).
    pub fn after_power_loss(&self, seed: u64) -> (DiskImage, CutSummary) {
        let s = self.lock();
        let mut rng = Rng(seed);
        let sector = if rng.below(2) == 0 { 512 } else { 4096 };
        // How likely each write is to be kept whole, lost, or torn: varied
        // per cut so that "nothing kept" and "all kept" both come up.
        let keep = rng.below(5);
        let tear = rng.below(5 - keep);
        let mut summary = CutSummary {
            sector_bytes: sector,
            ..CutSummary::default()
        };
        let mut images = Vec::with_capacity(2);
        for file in &s.files {
            let mut lengths = vec![file.durable.len() as u64];
            let mut image = file.durable.clone();
            for event in &file.log {
                match event {
                    Event::SetLen(len) => lengths.push(*len),
                    Event::Write { offset, data } => {
                        summary.writes += 1;
                        let offset = *offset as usize;
                        let roll = rng.below(4);
                        if roll < keep {
                            summary.kept += 1;
                            put(&mut image, offset, data);
                        } else if roll < keep + tear {
                            summary.torn += 1;
                            // Sectors are aligned to the file, not to the write.
                            let mut at = offset;
                            while at < offset + data.len() {
                                let end = ((at / sector + 1) * sector).min(offset + data.len());
                                if rng.below(2) == 0 {
                                    put(&mut image, at, &data[at - offset..end - offset]);
                                }
                                at = end;
                            }
                        }
                    }
                }
            }
            let len = lengths[rng.below(lengths.len() as u64) as usize] as usize;
            image.resize(len, 0);
            images.push(image);
        }
        let log = images.pop().unwrap_or_default();
        let queue = images.pop().unwrap_or_default();
        (DiskImage { queue, log }, summary)
    }

    fn fail(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    /// Whether the faults aim at `file`.
    fn aimed(s: &State, file: SimFile) -> bool {
        s.target.is_none_or(|t| t == file)
    }

    /// Count one event on `file` (a write when `hit` is [`Hit::Write`]), or
    /// refuse it if the power is (now) off or an armed fault meets it.
    fn admit(s: &mut State, file: SimFile, hit: Hit) -> io::Result<()> {
        if s.dead {
            return Err(Self::fail(EIO));
        }
        if !Self::aimed(s, file) && matches!(s.armed, Some((_, Armed::Once(_)))) {
            s.events += 1;
            return Ok(());
        }
        match s.armed {
            Some((0, Armed::PowerCut)) => {
                s.dead = true;
                s.armed = None;
                return Err(Self::fail(EIO));
            }
            Some((0, Armed::Once(errno))) => {
                s.armed = None;
                s.last_hit = Some(hit);
                return Err(Self::fail(errno));
            }
            Some((left, fault)) => s.armed = Some((left - 1, fault)),
            None => {}
        }
        s.events += 1;
        Ok(())
    }
}

impl SimBackend {
    fn file_len(&self) -> u64 {
        self.disk.lock().files[self.file.index()].current.len() as u64
    }

    fn read_at(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let s = self.disk.lock();
        let start = usize::try_from(offset).map_err(|_| SimDisk::fail(EIO))?;
        let src = s.files[self.file.index()]
            .current
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_file_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        if s.dead {
            return Err(SimDisk::fail(EIO));
        }
        if let Some(errno) = s.fail_writes.filter(|_| SimDisk::aimed(&s, self.file)) {
            return Err(SimDisk::fail(errno));
        }
        let new_len = usize::try_from(len).map_err(|_| SimDisk::fail(ENOSPC))?;
        let f = &mut s.files[self.file.index()];
        f.current.resize(new_len, 0);
        f.log.push(Event::SetLen(len));
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        if let Some(errno) = s.fail_syncs.filter(|_| SimDisk::aimed(&s, self.file)) {
            return Err(SimDisk::fail(errno));
        }
        SimDisk::admit(&mut s, self.file, Hit::Sync)?;
        // Replay the writes since the last sync onto the durable image: it
        // then equals `current`, at the cost of the bytes written rather
        // than of a copy of the whole file per sync.
        let f = &mut s.files[self.file.index()];
        for event in f.log.drain(..) {
            match event {
                Event::SetLen(len) => {
                    let len = usize::try_from(len).map_err(|_| SimDisk::fail(ENOSPC))?;
                    f.durable.resize(len, 0);
                }
                Event::Write { offset, data } => {
                    let start = usize::try_from(offset).map_err(|_| SimDisk::fail(ENOSPC))?;
                    put(&mut f.durable, start, &data);
                }
            }
        }
        Ok(())
    }

    fn write_at(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.disk.lock();
        if let Some(errno) = s.fail_writes.filter(|_| SimDisk::aimed(&s, self.file)) {
            return Err(SimDisk::fail(errno));
        }
        SimDisk::admit(&mut s, self.file, Hit::Write)?;
        let start = usize::try_from(offset).map_err(|_| SimDisk::fail(ENOSPC))?;
        let f = &mut s.files[self.file.index()];
        put(&mut f.current, start, data);
        f.log.push(Event::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }
}

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file_len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.read_at(offset, out)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.set_file_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_at(offset, data)
    }
}

impl crate::backend::embedded::LogFile for SimBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file_len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        self.read_at(offset, out)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        self.write_at(offset, data)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.sync()
    }
}
