//! The `embedded` backend: one redb file on local disk, crash-safe.
//!
//! # Storage design
//!
//! Each item's metadata (flow, times, deliveries) is one versioned record in
//! `items`, and its payload is stored raw in `payloads`, both once. Every
//! state is an index table of ids: `backlog` and `due` (keyed by a
//! file-wide position counter so that FIFO order survives moves), `delayed`
//! keyed by (`not_before_ms`, id), `pending` (the lease: claim time, lease
//! number, lane) with `pending_by_time` keyed by (`claimed_at_ms`, id) for
//! reclaim, `parked` keyed by (flow, position), `paused`, `done` and `dedup`
//! with expiry indexes, and `dead` with `dead_by_id`. A move between states
//! deletes from one index and inserts into another inside one write
//! transaction, so no crash point has an item in two states or in none.
//!
//! Flow limits (SPEC 3, Flow limits; `tables/limits.rs`): `flow_limits`
//! holds each limited flow's record, `held` its items waiting in their
//! places ((flow, lane, rank, position)), `heads` the first held item of
//! each flow that may run ((lane, rank, position) -> flow) and
//! `limit_timers` when a held flow's back-off or rate window ends. A claim
//! merges the head of `heads` with the head of the shared lane, so it never
//! walks a held flow's items.
//!
//! # Group commit
//!
//! One writer thread owns the database. Operations from concurrent callers
//! queue up while a commit is in flight and the next transaction takes all
//! of them (up to 512), with one fsync for the lot. Each operation checks
//! its receipts and limits before it writes anything, so one caller's bad
//! operation (`LeaseLost`, `Full`, `InvalidInput`) never fails or changes
//! another's; an operation that fails after writing (a storage error, an
//! unreadable record) aborts the transaction and the others run again
//! without it. A transaction that wrote nothing (an empty claim, a reclaim
//! that found nothing) is not committed and wakes no waiting claim, so an
//! idle queue writes nothing to the disk (SPEC 8, Idle).
//!
//! # Durability
//!
//! Every write is on disk when the operation returns `Ok`: each group
//! commit appends one checksummed record of its operations to the redo log
//! `NAME-redo` and syncs it (one sequential write and one `fdatasync`),
//! then commits redb with `Durability::None`. A checkpoint (a redb commit
//! with `Durability::Immediate` and quick repair) every 4 MiB, 8192
//! operations or 2 s, at open and at close makes redb durable by itself and
//! lets the log start over; the open after a crash replays the log's tail
//! through the same transaction code. Module `redo` has the whole design.
//! There is no faster mode.
//!
//! # Crash recovery
//!
//! A file is opened by one handle at a time (`Error::Locked` otherwise), so
//! at open every pending item belongs to a process that is gone: open
//! records them as orphans, and `reclaim_stale` takes them whatever
//! `min_idle`, with `deliveries + 1`.
//!
//! A new file is built under a temporary name (`.NAME.creating.PID`) and
//! linked into place, because redb initialises a file in place and writes
//! its magic number last: a crash during the first open must not leave a
//! file that no later open accepts.
//!
//! # Disk faults
//!
//! After a failed write or fsync (`EIO`, `ENOSPC`) redb refuses all further
//! work on that `Database` (`PreviousIo`). The failing operation returns
//! `Error::Io`; before the next one the writer drops the database and opens
//! the file again, without orphaning this process's claims, so the queue
//! carries on by itself once the fault clears (SPEC section 5).
//!
//! # Read-only inspection
//!
//! [`EmbeddedOptions::read_only`] opens an existing file without ever
//! writing it (a viewer account, a read-only mount): the file is opened
//! read-only under a shared lock (a writer's exclusive lock excludes it, and
//! it the writer), and redb runs over a storage backend whose writes stay in
//! memory, so that redb's own work at open (the repair after a crash, the
//! orphan records) happens there and is dropped at close. Every operation
//! that would change the queue is refused with `InvalidInput`.
//!
//! # Store and forward
//!
//! With the `forward` feature, a [`Forwarder`](crate::forward::Forwarder)
//! reads waiting items (backlog, due, delayed; not pending, parked or dead)
//! of the forwarded flows in id order after a mark kept in `meta`
//! (`forward_mark:{ns}:<origin>`), and once Redis has taken a batch removes
//! its items, from whatever state they reached meanwhile, and raises the
//! mark in one write transaction. `forward_journal` in `meta` is the file's
//! random journal id, which lets Redis tell two files under one origin name
//! apart. Nothing else changes: forwarding adds no table and no state.
//!
//! # Damaged files
//!
//! By default the open verifies every page checksum (redb's integrity
//! check), so a damaged file is `Error::Corrupt` instead of a panic later.
//! Every redb call runs on the writer thread under `catch_unwind`: a panic
//! inside redb becomes `Error::Corrupt` and the process lives on.

pub(crate) mod migrate;
mod read_only;
mod redo;
mod tables;
mod writer;

pub(crate) use redo::LogFile;

#[cfg(feature = "forward")]
pub(crate) use tables::Outgoing;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use crate::clock::{SharedClock, SystemClock};
use crate::config::{Config, ms};
use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::queue::WorkQueue;
use tables::Limits;
use writer::{Msg, Op, PathClaim, Reply, Request};

/// Settings of the embedded backend only (SPEC section 7). Every write that
/// returns `Ok` has been fsynced (in the redo log); there is no weaker
/// mode.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    verify_on_open: bool,
    cache_size_bytes: usize,
    read_only: bool,
    checkpoint: redo::Policy,
    #[cfg(feature = "testing")]
    refuse_hard_links: bool,
    #[cfg(feature = "testing")]
    inline_writer: bool,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            verify_on_open: true,
            cache_size_bytes: 64 * 1024 * 1024,
            read_only: false,
            checkpoint: redo::Policy::default(),
            #[cfg(feature = "testing")]
            refuse_hard_links: false,
            #[cfg(feature = "testing")]
            inline_writer: false,
        }
    }
}

impl EmbeddedOptions {
    /// Fault hook (test support, feature `testing`): creating a new file
    /// acts as on a file system that refuses hard links (FAT/exFAT, some
    /// FUSE mounts), so that tests reach the fallback on any disk.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn refuse_hard_links(mut self, refuse: bool) -> Self {
        self.refuse_hard_links = refuse;
        self
    }

    /// Test support (feature `testing`; only
    /// [`EmbeddedQueue::open_on_backend_with_options`] reads it): run the
    /// writer on the caller's thread instead of its own. Each call is a
    /// batch of one, through the same transactions, redo log and
    /// checkpoints; there is no thread start per open and no thread
    /// hand-off per call, which is most of a fuzz execution's cost. A call
    /// blocks the async runtime while it runs, and concurrent callers do
    /// not share a group commit, so this is for single-task tests (the
    /// fuzz targets). Default: false.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn inline_writer(mut self, inline: bool) -> Self {
        self.inline_writer = inline;
        self
    }

    #[cfg(feature = "testing")]
    fn refuses_hard_links(&self) -> bool {
        self.refuse_hard_links
    }

    #[cfg(not(feature = "testing"))]
    fn refuses_hard_links(&self) -> bool {
        false
    }

    /// Verify every page checksum at open, so a damaged file fails with
    /// `Error::Corrupt` rather than later. Costs one read of the whole file
    /// per open. Default: true.
    pub fn verify_on_open(mut self, verify: bool) -> Self {
        self.verify_on_open = verify;
        self
    }

    /// Checkpoint the redo log once it holds this many bytes (SPEC 6, the
    /// redo log): the log's size bound. At least 1. Default: 4 MiB.
    pub fn checkpoint_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint.bytes = bytes.max(1);
        self
    }

    /// Checkpoint the redo log once it holds this many operations (an add
    /// of n items, an ack or touch of n receipts and a claim of count n
    /// count n each): bounds the replay at an open after a crash, each
    /// costing about as much as the operation did. At least 1. Default:
    /// 8192.
    pub fn checkpoint_ops(mut self, ops: u64) -> Self {
        self.checkpoint.ops = ops.max(1);
        self
    }

    /// Checkpoint the redo log after a write once the last checkpoint is
    /// this old. Default: 2 s.
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint.interval = interval;
        self
    }

    /// redb's page cache, in bytes. Default: 64 MiB.
    pub fn cache_size_bytes(mut self, bytes: usize) -> Self {
        self.cache_size_bytes = bytes;
        self
    }

    /// Open an existing file for looking only, never writing it: it needs
    /// only read permission, works on a read-only mount, and is shared with
    /// other read-only handles but not with a writer (`Locked` either way).
    /// Reads (`stats`, `peek`, `dead_letters`, `paused_flows`, `parked`,
    /// `next_due`, `was_done`, `backlog_by_flow`) see the file as it was at
    /// open; every other operation, `compact` and blocking claims included,
    /// fails with `InvalidInput` (SPEC section 9). A missing file is `Io`
    /// (not found), never created. Default: false.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }
}

#[derive(Debug)]
struct Inner {
    tx: mpsc::UnboundedSender<Msg>,
    clock: SharedClock,
    wake: Arc<Notify>,
    path: PathBuf,
    /// `Config::max_deliveries`, for [`WorkQueue::max_deliveries`].
    max_deliveries: u32,
    /// Set when no handle can use the file any more, so that an open of the
    /// same file in this process waits for the writer to let go of it.
    closing: Arc<AtomicBool>,
    /// Opened with [`EmbeddedOptions::read_only`]: only reads are run.
    read_only: bool,
    /// The writer on the caller's thread
    /// ([`EmbeddedOptions::inline_writer`]); `tx` is then unused.
    #[cfg(feature = "testing")]
    inline: Option<std::sync::Mutex<writer::Inline>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.closing.store(true, Ordering::Release);
    }
}

/// A queue in one redb file (SPEC section 1, `embedded`). Clones share one
/// handle; the file closes when the last clone is dropped or on
/// [`WorkQueue::close`].
///
/// # Examples
///
/// ```
/// use workjournal::{Config, EmbeddedQueue, NewItem, WorkQueue};
/// # let dir = tempfile::tempdir().unwrap();
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default()).await?;
/// queue.add(NewItem::new(b"x".to_vec())).await?;
/// assert!(queue.stats().await?.durable);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct EmbeddedQueue {
    inner: Arc<Inner>,
}

/// Opens the redo log's storage, once per queue open, on the writer thread.
type LogOpen = Box<dyn FnOnce() -> std::io::Result<Box<dyn LogFile>> + Send>;

fn claim_path(path: &Path) -> Result<PathBuf> {
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
/// blocks until a writer comes (SPEC section 8, Creating a file).
/// Directories are left to the open, which names them.
fn refuse_special_file(path: &Path) -> Result<()> {
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
fn create_fresh(path: &Path, refuse_links: bool) -> std::io::Result<()> {
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

impl EmbeddedQueue {
    /// Open the queue file at `path`, creating it if missing, with the
    /// default [`EmbeddedOptions`].
    ///
    /// # Errors
    ///
    /// `Locked` if another process or handle has it open; `Corrupt` if it is
    /// not a queue or is damaged; `Decode` if it was written by a newer
    /// schema; `Io` if it cannot be read or created.
    pub async fn open(path: impl AsRef<Path>, config: Config) -> Result<Self> {
        Self::open_with(path, config, EmbeddedOptions::default()).await
    }

    /// Open with explicit [`EmbeddedOptions`]. Errors as [`EmbeddedQueue::open`].
    pub async fn open_with(
        path: impl AsRef<Path>,
        config: Config,
        options: EmbeddedOptions,
    ) -> Result<Self> {
        let path = claim_path(path.as_ref())?;
        refuse_special_file(&path)?;
        let claim = PathClaim::take(path.clone()).await?;
        let file = path.clone();
        let log_of = path.clone();
        let policy = options.checkpoint;
        if options.read_only {
            return Self::start(
                config,
                path,
                claim,
                Box::new(move || {
                    let f = std::fs::File::open(&file).and_then(|f| {
                        let backend = read_only::ReadOnlyFile::new(f.try_clone()?)?;
                        Ok((f, backend))
                    });
                    let (f, backend) =
                        f.map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?;
                    // Shared with readers; a writer holds it exclusively.
                    match f.try_lock_shared() {
                        Ok(()) => {}
                        Err(std::fs::TryLockError::WouldBlock) => {
                            return Err(redb::DatabaseError::DatabaseAlreadyOpen);
                        }
                        Err(std::fs::TryLockError::Error(e)) => {
                            return Err(redb::DatabaseError::Storage(redb::StorageError::Io(e)));
                        }
                    }
                    let db = redb::Builder::new()
                        .set_check_integrity_on_open(options.verify_on_open)
                        .set_cache_size(options.cache_size_bytes)
                        .create_with_backend(backend);
                    // The lock lasts as long as any descriptor of the open
                    // file: the backend's clone keeps it.
                    drop(f);
                    db
                }),
                Box::new(move || -> std::io::Result<Box<dyn LogFile>> {
                    Ok(match redo::FileLog::open(&log_of, false)? {
                        Some(log) => Box::new(log),
                        None => Box::new(redo::MemLog::default()),
                    })
                }),
                policy,
                true,
            )
            .await;
        }
        Self::start(
            config,
            path,
            claim,
            Box::new(move || {
                create_fresh(&file, options.refuses_hard_links())
                    .map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?;
                redb::Builder::new()
                    .set_check_integrity_on_open(options.verify_on_open)
                    .set_cache_size(options.cache_size_bytes)
                    .create(&file)
            }),
            Box::new(move || -> std::io::Result<Box<dyn LogFile>> {
                match redo::FileLog::open(&log_of, true)? {
                    Some(log) => Ok(Box::new(log)),
                    None => Err(std::io::Error::other("the redo log was not created")),
                }
            }),
            policy,
            false,
        )
        .await
    }

    /// Open a queue on a caller-supplied redb storage backend (fault
    /// injection in tests: a backend that fails or drops writes). `name`
    /// stands for the path in errors and in the in-process lock.
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`].
    #[cfg(feature = "testing")]
    pub async fn open_on_backend(
        name: &str,
        backend: impl redb::StorageBackend,
        config: Config,
        verify_on_open: bool,
    ) -> Result<Self> {
        let mut backend = Some(backend);
        Self::open_on_backend_with(
            name,
            move || {
                backend.take().ok_or_else(|| {
                    std::io::Error::other(
                        "this storage backend cannot be opened twice: open the queue again",
                    )
                })
            },
            config,
            verify_on_open,
        )
        .await
    }

    /// As [`EmbeddedQueue::open_on_backend`], with a function that makes
    /// the backend: called once at open, and again whenever the queue
    /// reopens its database after an I/O error.
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`], or `Io` if `make` fails.
    #[cfg(feature = "testing")]
    pub async fn open_on_backend_with<B: redb::StorageBackend>(
        name: &str,
        make: impl FnMut() -> std::io::Result<B> + Send + 'static,
        config: Config,
        verify_on_open: bool,
    ) -> Result<Self> {
        Self::open_on_backend_with_options(
            name,
            make,
            config,
            EmbeddedOptions::default().verify_on_open(verify_on_open),
        )
        .await
    }

    /// As [`EmbeddedQueue::open_on_backend_with`], with [`EmbeddedOptions`]
    /// (`verify_on_open` and the checkpoint settings are used). The redo
    /// log lives on the same simulated disk when the backend is a
    /// [`SimBackend`](crate::testing::faults::SimBackend), so that power
    /// cuts and faults reach it too; with any other backend it lives in
    /// memory.
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`], or `Io` if `make` fails.
    #[cfg(feature = "testing")]
    pub async fn open_on_backend_with_options<B: redb::StorageBackend>(
        name: &str,
        mut make: impl FnMut() -> std::io::Result<B> + Send + 'static,
        config: Config,
        options: EmbeddedOptions,
    ) -> Result<Self> {
        let path = PathBuf::from(format!("backend:{name}"));
        let claim = PathClaim::take(path.clone()).await?;
        let first = make().map_err(|source| Error::Io {
            context: format!("open {}", path.display()),
            source,
        })?;
        let log: Box<dyn LogFile> = match (&first as &dyn std::any::Any)
            .downcast_ref::<crate::testing::faults::SimBackend>()
        {
            Some(sim) => Box::new(sim.log_file()),
            None => Box::new(redo::MemLog::default()),
        };
        let mut first = Some(first);
        let verify_on_open = options.verify_on_open;
        Self::start_on_backend(
            config,
            path,
            claim,
            Box::new(move || {
                let backend = match first.take() {
                    Some(b) => b,
                    None => make()
                        .map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?,
                };
                let mut builder = redb::Builder::new();
                builder.set_check_integrity_on_open(verify_on_open);
                // Under cargo-fuzz (`--cfg fuzzing`, which also unlocks this
                // redb setting): 1 MiB regions instead of one of 4 GiB, whose
                // allocator bitmaps redb writes at every close and rebuilds
                // at every open; most of a short fuzz execution went there.
                #[cfg(fuzzing)]
                builder.set_region_size(1 << 20);
                builder.create_with_backend(backend)
            }),
            Box::new(move || Ok(log)),
            options.checkpoint,
            options.inline_writer,
        )
        .await
    }

    /// As [`EmbeddedQueue::start`], with the writer on the caller's thread
    /// when `inline` ([`EmbeddedOptions::inline_writer`]).
    #[cfg(feature = "testing")]
    async fn start_on_backend(
        config: Config,
        path: PathBuf,
        claim: PathClaim,
        build: writer::Build,
        open_log: LogOpen,
        policy: redo::Policy,
        inline: bool,
    ) -> Result<Self> {
        if !inline {
            return Self::start(config, path, claim, build, open_log, policy, false).await;
        }
        let limits = limits_of(&config);
        let clock = config
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let wake = Arc::new(Notify::new());
        let closing = claim.closing_flag();
        let writer = writer::Inline::open(
            build,
            open_log,
            policy,
            path.clone(),
            limits,
            wake.clone(),
            claim,
        )?;
        // Nothing receives: every message goes to `inline` instead.
        let (tx, _) = mpsc::unbounded_channel();
        Ok(EmbeddedQueue {
            inner: Arc::new(Inner {
                tx,
                clock,
                wake,
                path,
                closing,
                read_only: false,
                max_deliveries: limits.max_deliveries,
                inline: Some(std::sync::Mutex::new(writer)),
            }),
        })
    }

    async fn start(
        config: Config,
        path: PathBuf,
        claim: PathClaim,
        mut build: writer::Build,
        open_log: LogOpen,
        policy: redo::Policy,
        read_only: bool,
    ) -> Result<Self> {
        let limits = limits_of(&config);
        let clock = config
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let wake = Arc::new(Notify::new());
        let (tx, rx) = mpsc::unbounded_channel();
        let (ready_tx, ready_rx) = oneshot::channel();
        let thread_wake = wake.clone();
        let thread_path = path.clone();
        let closing = claim.closing_flag();
        std::thread::Builder::new()
            .name("workjournal-writer".into())
            .spawn(move || {
                let opened = open_log()
                    .map(redo::Log::new)
                    .map_err(|source| Error::Io {
                        context: format!("open the redo log of {}", thread_path.display()),
                        source,
                    })
                    .and_then(|mut log| {
                        writer::open_database(&mut build, &mut log, &thread_path, limits)
                            .map(|db| (db, log))
                    });
                match opened {
                    Ok((db, log)) => {
                        let _ = ready_tx.send(Ok(()));
                        writer::run(
                            db,
                            build,
                            log,
                            policy,
                            thread_path,
                            rx,
                            limits,
                            thread_wake,
                            claim,
                        );
                    }
                    Err(e) => {
                        drop(claim);
                        let _ = ready_tx.send(Err(e));
                    }
                }
            })
            .map_err(|source| Error::Io {
                context: "start the writer thread".into(),
                source,
            })?;
        ready_rx.await.map_err(|_| Error::Closed)??;
        Ok(EmbeddedQueue {
            inner: Arc::new(Inner {
                tx,
                clock,
                wake,
                path,
                closing,
                read_only,
                max_deliveries: limits.max_deliveries,
                #[cfg(feature = "testing")]
                inline: None,
            }),
        })
    }

    /// The file this queue lives in.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Refuse a change to a queue opened read-only.
    fn writable(&self, what: &str) -> Result<()> {
        if self.inner.read_only {
            return Err(Error::invalid(format!(
                "{what}: the queue file {} was opened read-only",
                self.inner.path.display()
            )));
        }
        Ok(())
    }

    async fn call(&self, op: Op) -> Result<Reply> {
        if !op.is_read() {
            self.writable(op.name())?;
        }
        let (reply, rx) = oneshot::channel();
        let now = self.inner.clock.now_ms();
        #[cfg(feature = "testing")]
        if let Some(inline) = &self.inner.inline {
            lock(inline).call(Request { op, now, reply });
            return rx.await.map_err(|_| Error::Closed)?;
        }
        self.inner
            .tx
            .send(Msg::Req(Request { op, now, reply }))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

/// The limits the writer enforces, from the queue's config.
fn limits_of(config: &Config) -> Limits {
    Limits {
        max_deliveries: config.max_deliveries,
        done_ttl_ms: ms(config.done_ttl),
        result_ttl_ms: ms(config.result_ttl),
        dedup_window_ms: ms(config.dedup_window),
        dead_letter_cap: config.dead_letter_cap,
        max_backlog: config.max_backlog,
        max_payload_bytes: config.max_payload_bytes,
        aging_step: config.aging_step,
    }
}

/// The inline writer, also after a caller panicked holding it.
#[cfg(feature = "testing")]
fn lock(inline: &std::sync::Mutex<writer::Inline>) -> std::sync::MutexGuard<'_, writer::Inline> {
    inline.lock().unwrap_or_else(|e| e.into_inner())
}

fn unexpected(reply: Reply) -> Error {
    Error::corrupt(format!("writer answered with the wrong shape: {reply:?}"))
}

macro_rules! expect_reply {
    ($self:ident, $op:expr, $pat:pat => $out:expr) => {
        match $self.call($op).await? {
            $pat => Ok($out),
            other => Err(unexpected(other)),
        }
    };
}

// After the macro, which it uses.
#[cfg(feature = "forward")]
mod forward;

impl EmbeddedQueue {
    /// Where every item is, by a full scan of the file's state indexes on
    /// the writer thread (test support, feature `testing`): for invariant
    /// checks against [`Stats`] and against what a test knows was
    /// acknowledged. An id with two entries is in two states (a bug); an id
    /// with none has an item record that no state names (a bug).
    ///
    /// # Errors
    ///
    /// `Corrupt` if an index names an id without an item record; `Decode`
    /// for an unreadable dead-letter record; storage failures.
    #[cfg(feature = "testing")]
    pub async fn locations(&self) -> Result<BTreeMap<u64, Vec<crate::testing::Location>>> {
        expect_reply!(self, Op::Locations, Reply::Locations(m) => m)
    }

    /// Every table of the file as text, table by table, leaving out the
    /// orphan index that each open rewrites (test support, feature
    /// `testing`): two queues hold exactly the same state when their dumps
    /// are equal. Power-loss tests compare a reopened file with the state
    /// after the last acknowledged commit.
    ///
    /// # Errors
    ///
    /// Storage failures only.
    #[cfg(feature = "testing")]
    pub async fn dump_tables(&self) -> Result<BTreeMap<String, Vec<String>>> {
        expect_reply!(self, Op::Dump, Reply::Dump(m) => m)
    }

    /// Where every item is, checked strictly (test support, feature
    /// `testing`): each id in exactly one state, the lease index equal to the
    /// leases, every index naming a stored item and every item named once.
    /// The model tests compare this with the reference model.
    ///
    /// # Errors
    ///
    /// `Corrupt` naming the first broken invariant; storage failures.
    #[cfg(feature = "testing")]
    pub async fn audit(&self) -> Result<BTreeMap<u64, crate::testing::Location>> {
        expect_reply!(self, Op::Audit, Reply::Audit(m) => m)
    }
}

impl WorkQueue for EmbeddedQueue {
    async fn add(&self, item: NewItem) -> Result<Added> {
        let mut v: Vec<Added> =
            expect_reply!(self, Op::Add(vec![(item, None)]), Reply::Added(v) => v)?;
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        expect_reply!(self, Op::Add(items.into_iter().map(|i| (i, None)).collect()), Reply::Added(v) => v)
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        let mut v: Vec<Added> =
            expect_reply!(self, Op::Add(vec![(item, Some(not_before_ms))]), Reply::Added(v) => v)?;
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        expect_reply!(self, Op::NextDue, Reply::Due(t) => t)
    }

    async fn promote_due(&self) -> Result<u64> {
        expect_reply!(self, Op::Promote, Reply::Count(n) => n)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let deadline = crate::clock::wait_deadline(wait);
        loop {
            let notified = self.inner.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let (got, next_due) = expect_reply!(
                self,
                Op::Claim { count, from },
                Reply::Claim { claimed, next_due } => (claimed, next_due)
            )?;
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            let timer = match next_due {
                Some(t) => self.inner.clock.sleep_until(t),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = timer => {}
            }
        }
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        self.ack_with_result(receipt, Vec::new()).await
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        expect_reply!(self, Op::Ack(receipt, result), Reply::Unit => ())
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        expect_reply!(self, Op::Outcome(id), Reply::Outcome(o) => o)
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        // Every committed write wakes `wake`; an ack is one.
        crate::clock::wait_notified(&self.inner.wake, wait, || self.outcome(id)).await
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        expect_reply!(self, Op::SetProgress(receipt, progress), Reply::Unit => ())
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        expect_reply!(self, Op::SendChunk(receipt, chunk), Reply::Count(n) => n)
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        expect_reply!(self, Op::Progress(id), Reply::Bytes(b) => b)
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let got = crate::clock::wait_notified(&self.inner.wake, wait, || async move {
            let (chunks, finished) = expect_reply!(
                self,
                Op::Chunks(id, after_seq),
                Reply::Chunks(c, f) => (c, f)
            )?;
            Ok((!chunks.is_empty() || finished).then_some(chunks))
        })
        .await?;
        Ok(got.unwrap_or_default())
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        expect_reply!(self, Op::AckBatch(receipts), Reply::Count(n) => n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        expect_reply!(self, Op::Touch(receipts), Reply::Unit => ())
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        expect_reply!(self, Op::Retry(receipt, not_before_ms), Reply::Retry(o) => o)
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        expect_reply!(self, Op::Release(receipt, not_before_ms), Reply::Unit => ())
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        expect_reply!(self, Op::DeadLetter(receipt, reason.to_string()), Reply::Unit => ())
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        expect_reply!(self, Op::Reclaim { min_idle_ms: ms(min_idle), count }, Reply::Reclaimed(r) => r)
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        expect_reply!(self, Op::Pause(flow.to_string()), Reply::Unit => ())
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        expect_reply!(self, Op::Resume(flow.to_string()), Reply::Count(n) => n)
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        expect_reply!(self, Op::Park(receipt), Reply::Unit => ())
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        expect_reply!(self, Op::Step(flow.to_string()), Reply::Step(c) => c)
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        expect_reply!(self, Op::ClearFlow(flow.to_string()), Reply::Count(n) => n)
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        expect_reply!(self, Op::Parked(flow.to_string()), Reply::Count(n) => n)
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        expect_reply!(self, Op::PausedFlows, Reply::Flows(v) => v)
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        expect_reply!(self, Op::SetFlowLimit(flow.to_string(), limit), Reply::Unit => ())
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        expect_reply!(self, Op::FlowLimits, Reply::Limits(v) => v)
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        expect_reply!(self, Op::MarkDone(id, step.to_string()), Reply::Unit => ())
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        expect_reply!(self, Op::WasDone(id, step.to_string()), Reply::Bool(b) => b)
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        expect_reply!(self, Op::DeadLetters(count), Reply::Dead(v) => v)
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        expect_reply!(self, Op::Redrive(id), Reply::Bool(b) => b)
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        expect_reply!(self, Op::PurgeDead, Reply::Count(n) => n)
    }

    async fn stats(&self) -> Result<Stats> {
        expect_reply!(self, Op::Stats, Reply::Stats(s) => s)
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        expect_reply!(self, Op::BacklogByFlow(sample), Reply::ByFlow(m) => m)
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        expect_reply!(self, Op::Peek(count), Reply::Items(v) => v)
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        expect_reply!(self, Op::List(query), Reply::Page(p) => p)
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        expect_reply!(self, Op::Find(id), Reply::Found(f) => f)
    }

    async fn now_ms(&self) -> Result<u64> {
        // The clock needs no writer, but a closed handle answers nothing
        // (SPEC section 8): `closing` is set by `close` on any clone.
        if self.inner.closing.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(self.inner.clock.now_ms())
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries
    }

    async fn compact(&self) -> Result<bool> {
        self.writable("compact")?;
        #[cfg(feature = "testing")]
        if let Some(inline) = &self.inner.inline {
            return lock(inline).compact();
        }
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Compact(reply))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    async fn close(&self) -> Result<()> {
        self.inner.closing.store(true, Ordering::Release);
        #[cfg(feature = "testing")]
        if let Some(inline) = &self.inner.inline {
            lock(inline).close();
        }
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(Msg::Close(reply)).is_ok() {
            let _ = rx.await;
        }
        // Claims and outcome waits blocked on other clones wake up, ask the
        // writer again and get `Closed`, rather than sleep out their wait
        // (SPEC section 8).
        self.inner.wake.notify_waiters();
        Ok(())
    }
}
