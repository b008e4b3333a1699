//! A simulated disk for fault injection under the embedded backend
//! (feature `testing`): power loss that keeps only part of the unsynced
//! writes, and writes or fsyncs that fail with `EIO` or `ENOSPC`.
//!
//! [`SimDisk`] holds two images of one file: what reads see (the page
//! cache) and what is durable (as of the last successful `sync_data`), plus
//! the log of writes and length changes since that sync. Hand
//! [`SimDisk::backend`] to
//! [`EmbeddedQueue::open_on_backend`](crate::EmbeddedQueue::open_on_backend);
//! the test keeps the `SimDisk` to arm faults and to take the bytes a power
//! cut would leave ([`SimDisk::after_power_loss`]).
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

#[derive(Debug, Default)]
struct State {
    /// What reads see.
    current: Vec<u8>,
    /// What survives any power cut: the image as of the last sync.
    durable: Vec<u8>,
    /// Writes and length changes since the last sync, in order.
    log: Vec<Event>,
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

/// The redb storage backend over a [`SimDisk`].
#[derive(Debug)]
pub struct SimBackend {
    disk: SimDisk,
}

/// The splitmix64 generator that picks what a power cut keeps.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
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

    /// A disk whose file holds `image`, all of it durable.
    pub fn from_image(image: Vec<u8>) -> Self {
        let disk = Self::default();
        {
            let mut s = disk.lock();
            s.durable = image.clone();
            s.current = image;
        }
        disk
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// A storage backend on this disk, for
    /// [`EmbeddedQueue::open_on_backend`](crate::EmbeddedQueue::open_on_backend).
    pub fn backend(&self) -> SimBackend {
        SimBackend { disk: self.clone() }
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
    pub fn image(&self) -> Vec<u8> {
        self.lock().current.clone()
    }

    /// The bytes a power cut now leaves, as chosen by `seed`: the durable
    /// image plus a random part of the writes since the last sync, some
    /// torn at sector boundaries (see the module doc).
    pub fn after_power_loss(&self, seed: u64) -> (Vec<u8>, CutSummary) {
        let s = self.lock();
        let mut rng = Rng(seed);
        let sector = if rng.below(2) == 0 { 512 } else { 4096 };
        // How likely each write is to be kept whole, lost, or torn: varied
        // per cut so that "nothing kept" and "all kept" both come up.
        let keep = rng.below(5);
        let tear = rng.below(5 - keep);
        let mut lengths = vec![s.durable.len() as u64];
        let mut image = s.durable.clone();
        let mut summary = CutSummary {
            sector_bytes: sector,
            ..CutSummary::default()
        };
        for event in &s.log {
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
        (image, summary)
    }

    fn fail(errno: i32) -> io::Error {
        io::Error::from_raw_os_error(errno)
    }

    /// Count one event (a write when `hit` is [`Hit::Write`]), or refuse
    /// it if the power is (now) off or an armed fault meets it.
    fn admit(s: &mut State, hit: Hit) -> io::Result<()> {
        if s.dead {
            return Err(Self::fail(EIO));
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

impl redb::StorageBackend for SimBackend {
    fn len(&self) -> io::Result<u64> {
        Ok(self.disk.lock().current.len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let s = self.disk.lock();
        let start = usize::try_from(offset).map_err(|_| SimDisk::fail(EIO))?;
        let src = s
            .current
            .get(start..start + out.len())
            .ok_or_else(|| io::Error::new(io::ErrorKind::UnexpectedEof, "read past the end"))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut s = self.disk.lock();
        if s.dead {
            return Err(SimDisk::fail(EIO));
        }
        if let Some(errno) = s.fail_writes {
            return Err(SimDisk::fail(errno));
        }
        let new_len = usize::try_from(len).map_err(|_| SimDisk::fail(ENOSPC))?;
        s.current.resize(new_len, 0);
        s.log.push(Event::SetLen(len));
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        let mut s = self.disk.lock();
        if let Some(errno) = s.fail_syncs {
            return Err(SimDisk::fail(errno));
        }
        SimDisk::admit(&mut s, Hit::Sync)?;
        // Replay the writes since the last sync onto the durable image: it
        // then equals `current`, at the cost of the bytes written rather
        // than of a copy of the whole file per sync.
        let state = &mut *s;
        for event in state.log.drain(..) {
            match event {
                Event::SetLen(len) => {
                    let len = usize::try_from(len).map_err(|_| SimDisk::fail(ENOSPC))?;
                    state.durable.resize(len, 0);
                }
                Event::Write { offset, data } => {
                    let start = usize::try_from(offset).map_err(|_| SimDisk::fail(ENOSPC))?;
                    put(&mut state.durable, start, &data);
                }
            }
        }
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut s = self.disk.lock();
        if let Some(errno) = s.fail_writes {
            return Err(SimDisk::fail(errno));
        }
        SimDisk::admit(&mut s, Hit::Write)?;
        let start = usize::try_from(offset).map_err(|_| SimDisk::fail(ENOSPC))?;
        put(&mut s.current, start, data);
        s.log.push(Event::Write {
            offset,
            data: data.to_vec(),
        });
        Ok(())
    }
}
