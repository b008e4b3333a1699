//! Opening a queue file: this process's claim on the path, the open
//! itself, and recovery (the schema check and migration of SPEC 6, the
//! replay of the redo log's tail, the orphaning of pending items and the
//! open's checkpoint).

use std::collections::HashMap;
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use redb::{Database, Durability, TableHandle};

use super::commit::{checkpoint, panic_error, run_txn};
use crate::backend::embedded::migrate;
use crate::backend::embedded::opening::OpeningMarker;
use crate::backend::embedded::redo::{self, Log};
use crate::backend::embedded::tables::{self, Ctx, Limits, Tables};
use crate::error::{Error, Result};

/// Paths open in this process: redb's file lock does not exclude a second
/// handle of the same process on every platform, so we do.
static OPEN_PATHS: Mutex<Option<HashMap<PathBuf, Arc<AtomicBool>>>> = Mutex::new(None);

/// How long an open waits for a handle of this process that is closing (its
/// last clone was dropped, its writer thread is finishing) to let go of the
/// file, before it reports `Locked`.
const CLOSING_GRACE: std::time::Duration = std::time::Duration::from_secs(10);

/// This process's claim on one queue file, held by the writer thread until
/// it has dropped the database. `closing` is set once no handle can use the
/// file any more, so that an open of the same file waits for the release
/// instead of failing with `Locked`.
pub(in crate::backend::embedded) struct PathClaim {
    path: PathBuf,
    closing: Arc<AtomicBool>,
}

impl PathClaim {
    fn try_take(path: &Path) -> std::result::Result<Self, Arc<AtomicBool>> {
        let mut guard = OPEN_PATHS.lock().unwrap_or_else(|e| e.into_inner());
        let map = guard.get_or_insert_with(HashMap::new);
        if let Some(holder) = map.get(path) {
            return Err(holder.clone());
        }
        let closing = Arc::new(AtomicBool::new(false));
        map.insert(path.to_path_buf(), closing.clone());
        Ok(PathClaim {
            path: path.to_path_buf(),
            closing,
        })
    }

    /// Claim `path` for this process. If a handle of this process holds it
    /// and is closing, wait (up to 10 s) for it to let go.
    ///
    /// # Errors
    ///
    /// `Locked` if an open handle of this process holds the file.
    pub(in crate::backend::embedded) async fn take(path: PathBuf) -> Result<Self> {
        let start = tokio::time::Instant::now();
        loop {
            match Self::try_take(&path) {
                Ok(claim) => return Ok(claim),
                Err(holder)
                    if holder.load(Ordering::Acquire) && start.elapsed() < CLOSING_GRACE =>
                {
                    tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                }
                Err(_) => return Err(Error::Locked { path }),
            }
        }
    }

    /// The flag a handle sets when it can no longer use the file.
    pub(in crate::backend::embedded) fn closing_flag(&self) -> Arc<AtomicBool> {
        self.closing.clone()
    }
}

impl Drop for PathClaim {
    fn drop(&mut self) {
        let mut guard = OPEN_PATHS.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(map) = guard.as_mut() {
            map.remove(&self.path);
        }
    }
}

/// Opens the database: from the file's path and options, or from a test's
/// storage backend. Called again to reopen after an I/O error.
pub(in crate::backend::embedded) type Build =
    Box<dyn FnMut() -> std::result::Result<Database, redb::DatabaseError> + Send>;

/// Open (or create) the file and run recovery: check the schema (migrating
/// an older one), replay the redo log's tail, mark every pending item as
/// orphaned (unless `orphan_claims` is false: a take-over, SPEC 10),
/// checkpoint. Runs on the writer thread. `marker`: the file's
/// open-in-progress marker, looked at once the file lock is held (SPEC 6,
/// Verification): found there, an earlier open did not finish, and this
/// one verifies whatever the schedule.
pub(in crate::backend::embedded) fn open_database(
    build: &mut Build,
    log: &mut Log,
    path: &std::path::Path,
    limits: Limits,
    interval: Option<Duration>,
    marker: Option<&mut OpeningMarker>,
    orphan_claims: bool,
) -> Result<Database> {
    let verify = Verify {
        interval,
        now: false,
    };
    open_and_recover_marked(build, log, path, limits, orphan_claims, verify, marker)
}

/// When an open verifies the whole file (SPEC 6, Verification).
#[derive(Debug, Clone, Copy)]
pub(in crate::backend::embedded) struct Verify {
    /// How long a full verification holds: `Some(ZERO)` verifies at every
    /// open (in redb's open itself, `Build` asks for it), `None` never by
    /// schedule.
    pub(in crate::backend::embedded) interval: Option<Duration>,
    /// Verify at this open whatever the schedule: a redb panic was caught,
    /// evidence of a damaged file.
    pub(in crate::backend::embedded) now: bool,
}

impl Verify {
    /// Whether redb's open itself verifies (an interval of zero).
    pub(in crate::backend::embedded) fn every_open(interval: Option<Duration>) -> bool {
        interval == Some(Duration::ZERO)
    }
}

/// When the file was last verified whole (ms since the epoch), as recorded
/// in its meta table; `None` if never, or if it cannot be read (the
/// verification that follows then says why).
fn verified_at(db: &Database) -> Option<u64> {
    use redb::ReadableDatabase;
    let read = || -> std::result::Result<Option<u64>, redb::Error> {
        let txn = db.begin_read()?;
        let meta = match txn.open_table(tables::META) {
            Ok(t) => t,
            Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
            Err(e) => return Err(e.into()),
        };
        Ok(meta.get(tables::VERIFIED_AT_KEY)?.map(|v| v.value()))
    };
    catch_unwind(AssertUnwindSafe(read)).ok()?.ok()?
}

/// Whether this open must verify the whole file now: forced, or the last
/// verification is missing, older than the interval, or ahead of `now`
/// (a clock that was set back, or a device that booted at 1970).
fn verification_due(db: &Database, verify: Verify, now: u64) -> bool {
    if verify.now {
        return true;
    }
    let Some(interval) = verify.interval else {
        return false;
    };
    match verified_at(db) {
        None => true,
        Some(at) => at > now || now - at >= crate::config::ms(interval),
    }
}

/// Verify every page of the file and rebuild redb's allocator state,
/// repairing what it can (SPEC 6, Verification).
fn verify_whole_file(db: &mut Database, path: &Path) -> Result<()> {
    match catch_unwind(AssertUnwindSafe(|| db.check_integrity())) {
        Ok(Ok(true)) => Ok(()),
        Ok(Ok(false)) => {
            tracing::warn!(path = %path.display(), "the verification found the queue file damaged and repaired it");
            Ok(())
        }
        Ok(Err(e)) => Err(open_error(e, path)),
        Err(_) => Err(panic_error("verification")),
    }
}

/// Open, check the schema, replay the log and checkpoint; with `orphan`,
/// mark every pending item as belonging to a process that is gone. A reopen
/// by the same process after an I/O error does not: its consumers still
/// hold their claims.
pub(super) fn open_and_recover(
    build: &mut Build,
    log: &mut Log,
    path: &std::path::Path,
    limits: Limits,
    orphan: bool,
    verify: Verify,
) -> Result<Database> {
    open_and_recover_marked(build, log, path, limits, orphan, verify, None)
}

/// [`open_and_recover`], looking at the open-in-progress `marker` only once
/// `build` has taken the file lock: another process's open in progress
/// (its marker made, its lock held) is then never taken for an open that
/// did not finish, which made an `add` beside a `stats` verify the whole
/// file (SPEC 6, Verification).
fn open_and_recover_marked(
    build: &mut Build,
    log: &mut Log,
    path: &std::path::Path,
    limits: Limits,
    orphan: bool,
    mut verify: Verify,
    marker: Option<&mut OpeningMarker>,
) -> Result<Database> {
    let mut db = match catch_unwind(AssertUnwindSafe(build)) {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => return Err(open_error(e, path)),
        Err(_) => return Err(panic_error("open")),
    };
    if let Some(marker) = marker {
        verify.now |= marker.begin();
    }
    // The system clock, not the queue's: the schedule is about the file's
    // age on this machine.
    let now = crate::clock::system_now_ms();
    // With an interval of zero, redb's open has just verified the file.
    let every_open = Verify::every_open(verify.interval);
    let verified = every_open || verification_due(&db, verify, now);
    if verified && !every_open {
        verify_whole_file(&mut db, path)?;
    }
    let recovered = catch_unwind(AssertUnwindSafe(|| -> Result<(u64, u64)> {
        let mut txn = db.begin_write().ctx("begin recovery")?;
        // Durable with the checkpoint below: a crash before it leaves the
        // file as it was (a schema-1 file stays schema 1).
        txn.set_durability(Durability::None).ctx("set durability")?;
        let names: Vec<String> = txn
            .list_tables()
            .ctx("list tables")?
            .map(|t| t.name().to_string())
            .collect();
        if !names.is_empty() && !names.iter().any(|n| n == tables::META.name()) {
            return Err(Error::corrupt(format!(
                "{} is a redb file but not a workjournal queue (tables: {})",
                path.display(),
                names.join(", ")
            )));
        }
        let (version, redo) = {
            let t = Tables::open(&txn, limits);
            (t.schema_version()?, t.redo_state()?)
        };
        match version {
            None => Tables::open(&txn, limits).set_schema_version(tables::SCHEMA_VERSION)?,
            Some(v) if v > tables::SCHEMA_VERSION => {
                return Err(Error::Decode {
                    what: format!("schema of {}", path.display()),
                    detail: format!(
                        "the file has schema version {v}; this build reads up to version {}: upgrade workjournal",
                        tables::SCHEMA_VERSION
                    ),
                });
            }
            // SPEC 6: an older schema migrates in this very transaction
            // (made durable by the open's checkpoint below).
            Some(v @ 1..=7) => {
                if v == 1 {
                    migrate::schema1_to_2(&txn, limits.aging_step)?;
                }
                if v <= 2 {
                    migrate::schema2_to_3(&txn)?;
                }
                if v <= 3 {
                    migrate::schema3_to_4(&txn)?;
                }
                if v <= 4 {
                    migrate::schema4_to_5(&txn)?;
                }
                if v <= 5 {
                    migrate::schema5_to_6(&txn)?;
                }
                if v <= 6 {
                    migrate::schema6_to_7(&txn)?;
                }
                migrate::schema7_to_8(&txn)?;
                tracing::info!(path = %path.display(), "migrated the queue file from schema {v} to 8");
            }
            Some(_) => {}
        }
        if verified {
            Tables::open(&txn, limits).set_verified_at(now)?;
        }
        txn.commit().ctx("commit recovery")?;
        let replayed = match redo {
            // After a failed append, not past it (see `replay`).
            Some((tag, at)) => replay(&db, log, tag, at, log.is_broken().then(|| log.pos()))?,
            None => 0,
        };
        let orphans = checkpoint(&db, log, &mut None, limits, orphan, None, true)?;
        Ok((orphans, replayed))
    }));
    match recovered {
        Ok(Ok((orphans, replayed))) => {
            if replayed > 0 {
                tracing::info!(records = replayed, "replayed the redo log");
            }
            if orphans > 0 {
                tracing::info!(
                    orphans,
                    "pending items of an earlier process will be reclaimed"
                );
            }
            Ok(db)
        }
        Ok(Err(e)) => Err(match e {
            Error::Storage { context, source } => Error::Corrupt {
                detail: format!("{}: {context}", path.display()),
                source: Some(source),
            },
            other => other,
        }),
        Err(_) => Err(panic_error("recovery")),
    }
}

fn open_error(e: redb::DatabaseError, path: &std::path::Path) -> Error {
    use std::io::ErrorKind;
    match e {
        redb::DatabaseError::DatabaseAlreadyOpen | redb::DatabaseError::LockProtocolMismatch => {
            Error::Locked {
                path: path.to_path_buf(),
            }
        }
        redb::DatabaseError::Storage(redb::StorageError::Io(io))
            if matches!(
                io.kind(),
                ErrorKind::NotFound
                    | ErrorKind::PermissionDenied
                    | ErrorKind::ReadOnlyFilesystem
                    | ErrorKind::StorageFull
                    | ErrorKind::IsADirectory
                    | ErrorKind::NotADirectory
            ) =>
        {
            Error::Io {
                context: format!("open {}", path.display()),
                source: io,
            }
        }
        other => Error::Corrupt {
            detail: format!("{} cannot be opened as a queue", path.display()),
            source: Some(Box::new(other)),
        },
    }
}

/// Apply the records of the redo log under `tag` from offset `at` on, each
/// in its own non-durable transaction through [`run_txn`], as the live path
/// ran it; stops where the log ends (a torn, damaged, zeroed or older
/// record) or, with `until`, at that offset (where an append failed: the
/// record there may be whole on the disk, but its callers got an error).
/// Returns the number of records replayed.
///
/// # Errors
///
/// `Io` if the log cannot be read; `Decode` for a whole record this build
/// cannot read; `Corrupt` if an operation fails at replay (the live path
/// logged it only after it succeeded); storage failures.
pub(super) fn replay(
    db: &Database,
    log: &Log,
    tag: u64,
    mut at: u64,
    until: Option<u64>,
) -> Result<u64> {
    let mut records = 0;
    while until.is_none_or(|u| at < u) {
        let Some((body, end)) = log.read_record(tag, at)? else {
            break;
        };
        let batch = redo::decode_batch(&body)?;
        let mut txn = db.begin_write().ctx("begin replay")?;
        txn.set_durability(Durability::None).ctx("set durability")?;
        let ran = (|| {
            let mut t = Tables::open(&txn, batch.limits);
            let ran = run_txn(
                &mut t,
                batch.latest,
                batch.now,
                batch.ops.iter().map(|(op, t)| (op, *t)),
            )?;
            match (ran.poisoned, ran.done.into_iter().find_map(|r| r.err())) {
                (Some((_, e)), _) | (None, Some(e)) => Err(e),
                (None, None) => t.set_redo_at(end),
            }
        })();
        if let Err(e) = ran {
            let _ = txn.abort();
            return Err(match e {
                e @ (Error::Io { .. } | Error::Storage { .. }) => e,
                other => Error::corrupt(format!(
                    "the redo log record at offset {at} does not replay: {other}"
                )),
            });
        }
        txn.commit().ctx("commit replay")?;
        at = end;
        records += 1;
    }
    Ok(records)
}
