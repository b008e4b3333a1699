//! Opening a queue: on a file (read-write or read-only), or on a storage
//! backend a test supplies, and starting the writer thread that owns it.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use super::create::{claim_path, create_fresh, refuse_special_file};
use super::opening::OpeningMarker;
use super::tables::Limits;
use super::writer::{self, PathClaim, Verify};
use super::{EmbeddedOptions, EmbeddedQueue, Inner, LogFile, read_only, redo};
use crate::clock::SystemClock;
use crate::config::{Config, ms};
use crate::error::{Error, Result};

/// Opens the redo log's storage, once per queue open, on the writer thread.
type LogOpen = Box<dyn FnOnce() -> std::io::Result<Box<dyn LogFile>> + Send>;

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
        let marker = OpeningMarker::of(&path, !options.read_only);
        let policy = options.checkpoint;
        let verify = options.verify_interval;
        let orphan_claims = options.orphan_claims;
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
                        .set_check_integrity_on_open(Verify::every_open(verify))
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
                verify,
                true,
                orphan_claims,
                Some(marker),
                None,
            )
            .await;
        }
        // A redo log this open makes is removed again when the file turns
        // out not to be a queue (SPEC 9: a failed open leaves nothing).
        let log_path = super::create::companion(&path, "-redo");
        let fresh_log = (!log_path.exists()).then_some(log_path);
        Self::start(
            config,
            path,
            claim,
            Box::new(move || {
                create_fresh(&file, options.refuses_hard_links())
                    .map_err(|e| redb::DatabaseError::Storage(redb::StorageError::Io(e)))?;
                redb::Builder::new()
                    .set_check_integrity_on_open(Verify::every_open(verify))
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
            verify,
            false,
            orphan_claims,
            Some(marker),
            fresh_log,
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
        Self::open_on_backend_with(name, opened_once(backend), config, verify_on_open).await
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
        let verify_every_open = Verify::every_open(options.verify_interval);
        Self::start(
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
                builder.set_check_integrity_on_open(verify_every_open);
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
            options.verify_interval,
            false,
            options.orphan_claims,
            None,
            None,
        )
        .await
    }

    #[allow(clippy::too_many_arguments)]
    async fn start(
        config: Config,
        path: PathBuf,
        claim: PathClaim,
        mut build: writer::Build,
        open_log: LogOpen,
        policy: redo::Policy,
        verify: Option<Duration>,
        read_only: bool,
        orphan_claims: bool,
        mut marker: Option<OpeningMarker>,
        fresh_log: Option<PathBuf>,
    ) -> Result<Self> {
        let limits = Limits {
            max_deliveries: config.max_deliveries,
            done_ttl_ms: ms(config.done_ttl),
            result_ttl_ms: ms(config.result_ttl),
            dedup_window_ms: ms(config.dedup_window),
            dead_letter_cap: config.dead_letter_cap,
            max_backlog: config.max_backlog,
            max_payload_bytes: config.max_payload_bytes,
            aging_step: config.aging_step,
            completed_retention: config.completed_retention,
            cancelled_retention: config.cancelled_retention,
        };
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
                    .map(|file| {
                        let mut log = redo::Log::new(file);
                        log.set_ahead_from(policy.ahead_from);
                        log
                    })
                    .map_err(|source| Error::Io {
                        context: format!("open the redo log of {}", thread_path.display()),
                        source,
                    })
                    .and_then(|mut log| {
                        // SPEC 6, Verification: an open that did not finish verifies the
                        // next one (see `opening`); the marker is looked at
                        // once the file lock is held.
                        let db = writer::open_database(
                            &mut build,
                            &mut log,
                            &thread_path,
                            limits,
                            verify,
                            marker.as_mut(),
                            orphan_claims,
                        );
                        if let Some(marker) = &marker {
                            marker.end(db.as_ref().map(|_| ()));
                        }
                        db.map(|db| (db, log))
                    });
                match opened {
                    Ok((db, log)) => {
                        let _ = ready_tx.send(Ok(()));
                        writer::run(
                            db,
                            build,
                            log,
                            policy,
                            verify,
                            thread_path,
                            rx,
                            limits,
                            thread_wake,
                            claim,
                        );
                    }
                    Err(e) => {
                        if matches!(e, Error::Corrupt { .. } | Error::Decode { .. })
                            && let Some(log) = &fresh_log
                        {
                            remove_if_empty(log);
                        }
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
            }),
        })
    }
}

/// A maker for [`EmbeddedQueue::open_on_backend_with_options`] that hands
/// out `backend` once: a reopen after an I/O error then fails instead of
/// opening the same storage again (what `open_on_backend` does).
#[cfg(feature = "testing")]
pub(crate) fn opened_once<B: Send + 'static>(
    backend: B,
) -> impl FnMut() -> std::io::Result<B> + Send + 'static {
    let mut backend = Some(backend);
    move || {
        backend.take().ok_or_else(|| {
            std::io::Error::other(
                "this storage backend cannot be opened twice: open the queue again",
            )
        })
    }
}

/// Remove the redo log at `path` if it holds nothing: one this open made
/// beside a file that is not a queue (or one this build cannot read).
fn remove_if_empty(path: &Path) {
    if std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.len() == 0)
        && let Err(e) = std::fs::remove_file(path)
    {
        tracing::debug!(log = %path.display(), error = %e, "cannot remove the empty redo log");
    }
}
