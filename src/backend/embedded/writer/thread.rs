//! The writer loop: takes the requests that have arrived as one batch (up
//! to [`MAX_BATCH`]), runs it, answers each caller, checkpoints when the
//! policy says so, and after an I/O error reopens (with a replay) before
//! the next batch, so that the queue carries on once the fault clears.

use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::PathBuf;
use std::sync::Arc;

use redb::Database;
use tokio::sync::{Notify, mpsc};

use super::commit::{Open, abandon, checkpoint, execute, panic_error, sweep_deferred};
use super::open::{Build, PathClaim, Verify, open_and_recover};
use super::{Msg, Op, Request};
use crate::backend::embedded::redo::{self, Log};
use crate::backend::embedded::tables::{Ctx, ExpiryFloors, Limits};
use crate::error::{Error, Result};

/// Most operations one transaction takes; more wait for the next one.
const MAX_BATCH: usize = 512;

/// The database and how to open it again.
struct Store {
    /// The write transaction holding the batches since redb's last commit
    /// (module `commit`); before `db`, so that it is dropped (aborted)
    /// first.
    open: Option<Open>,
    /// `None` after an I/O error, until a reopen succeeds.
    db: Option<Database>,
    build: Build,
    /// The redo log every commit goes through.
    log: Log,
    path: PathBuf,
    limits: Limits,
    /// An operation failed with an I/O or storage error: before the next
    /// one, check whether redb has poisoned itself.
    suspect: bool,
    /// redb may be behind the log (its commit or a checkpoint failed):
    /// before the next operation, open it again and replay.
    behind: bool,
    /// The latest time (ms, queue clock) an operation brought, for noticing
    /// a clock step back (SPEC 3, Clock steps).
    latest: u64,
    /// When the last checkpoint was made.
    checkpointed: std::time::Instant,
    policy: redo::Policy,
    /// When a reopen verifies the whole file (SPEC 6, Verification);
    /// `verify.now` is set when a redb panic was caught (evidence of a
    /// damaged file), so that the reopen verifies whatever the schedule.
    verify: Verify,
    /// The expiry floors of the file's state as of the last kept batch
    /// (module `clock`'s `ExpiryFloors`); unknown again after anything
    /// that may have undone or moved expiries behind the writer's back.
    floors: ExpiryFloors,
}

/// Whether `db` refuses all work after an earlier I/O error (redb then
/// answers every call with `PreviousIo` until it is dropped and reopened).
fn poisoned(db: &Database) -> bool {
    match catch_unwind(AssertUnwindSafe(|| db.begin_write())) {
        Ok(Ok(txn)) => {
            let _ = txn.abort();
            false
        }
        Ok(Err(redb::TransactionError::Storage(
            redb::StorageError::PreviousIo | redb::StorageError::Io(_),
        ))) => true,
        Ok(Err(_)) => false,
        Err(_) => true,
    }
}

impl Store {
    /// The database, reopened first if an I/O error has poisoned it (or a
    /// failed commit left it behind the log), and checkpointed first if a
    /// log append failed, so that the queue carries on once the fault (a
    /// full disk, a failing device) clears, without the caller reopening it.
    fn ready(&mut self) -> Result<&mut Database> {
        if self.suspect || self.behind {
            self.floors = ExpiryFloors::default();
            // redb has one writer: the open transaction ends before the
            // check below begins another. Its batches are in the log.
            if let Some(o) = self.open.take() {
                match self.db.as_ref() {
                    Some(db) if !self.behind => {
                        self.behind = !abandon(db, &mut self.log, o.into_txn());
                    }
                    _ => drop(o),
                }
            }
            if self.behind || self.db.as_ref().is_some_and(poisoned) {
                // Dropped before the reopen, which needs the file lock.
                self.db = None;
            }
            if self.db.is_none() {
                let db = open_and_recover(
                    &mut self.build,
                    &mut self.log,
                    &self.path,
                    self.limits,
                    false,
                    self.verify,
                )
                .map_err(|e| Error::Io {
                    context: format!("reopen {} after an i/o error", self.path.display()),
                    source: std::io::Error::other(e),
                })?;
                tracing::warn!(path = %self.path.display(), "reopened after an i/o error");
                self.db = Some(db);
                self.verify.now = false;
                self.checkpointed = std::time::Instant::now();
            }
            self.suspect = false;
            self.behind = false;
        }
        if self.log.is_broken() {
            let db = self
                .db
                .as_ref()
                .ok_or_else(|| Error::corrupt("the database is not open"))?;
            let done = catch_unwind(AssertUnwindSafe(|| {
                checkpoint(
                    db,
                    &mut self.log,
                    &mut self.open,
                    self.limits,
                    false,
                    None,
                    true,
                )
            }))
            .unwrap_or_else(|_| {
                self.verify.now = true;
                Err(panic_error("a checkpoint"))
            });
            if let Err(e) = done {
                self.suspect = true;
                self.behind = self.verify.now || self.log.has_unapplied();
                return Err(e);
            }
            self.checkpointed = std::time::Instant::now();
        }
        self.db
            .as_mut()
            .ok_or_else(|| Error::corrupt("the database is not open"))
    }

    fn note<T>(&mut self, result: &Result<T>) {
        if matches!(result, Err(Error::Io { .. } | Error::Storage { .. })) {
            self.suspect = true;
        }
    }

    /// After a batch that wrote: checkpoint if the log holds
    /// enough, or the last checkpoint is old enough (module `redo`). A
    /// failure is logged; the next operation reopens the database.
    fn maybe_checkpoint(&mut self) {
        if !self.log.has_records()
            || self.suspect
            || self.behind
            || !(self.log.checkpoint_due(&self.policy)
                || self.checkpointed.elapsed() >= self.policy.interval)
        {
            return;
        }
        let Some(db) = self.db.as_ref() else {
            return;
        };
        let done = catch_unwind(AssertUnwindSafe(|| {
            checkpoint(
                db,
                &mut self.log,
                &mut self.open,
                self.limits,
                false,
                None,
                false,
            )
        }))
        .unwrap_or_else(|_| {
            self.verify.now = true;
            Err(panic_error("a checkpoint"))
        });
        match done {
            Ok(_) => self.checkpointed = std::time::Instant::now(),
            Err(e) => {
                tracing::warn!(error = %crate::error::one_line(&e), "checkpoint failed; the queue file is reopened before the next operation");
                self.behind = true;
            }
        }
    }
}

/// The writer loop. Returns when every handle is gone or on `Close`.
#[allow(clippy::too_many_arguments)]
pub(in crate::backend::embedded) fn run(
    db: Database,
    build: Build,
    log: Log,
    policy: redo::Policy,
    verify: Option<std::time::Duration>,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    limits: Limits,
    wake: Arc<Notify>,
    claim: PathClaim,
) {
    let mut store = Store {
        open: None,
        db: Some(db),
        build,
        log,
        path,
        limits,
        suspect: false,
        behind: false,
        latest: 0,
        checkpointed: std::time::Instant::now(),
        policy,
        verify: Verify {
            interval: verify,
            now: false,
        },
        floors: ExpiryFloors::default(),
    };
    let mut close_reply = None;
    'outer: while let Some(first) = rx.blocking_recv() {
        let mut reqs: Vec<Request> = Vec::new();
        let mut next = Some(first);
        while let Some(msg) = next.take() {
            match msg {
                Msg::Req(r) => reqs.push(r),
                Msg::Compact(reply) => {
                    let _ = run_batch(&mut store, &wake, std::mem::take(&mut reqs));
                    let result = compact(&mut store);
                    store.note(&result);
                    let _ = reply.send(result);
                }
                Msg::Close(reply) => {
                    let _ = run_batch(&mut store, &wake, std::mem::take(&mut reqs));
                    close_reply = Some(reply);
                    break 'outer;
                }
            }
            if reqs.len() < MAX_BATCH {
                next = rx.try_recv().ok();
            }
        }
        let _ = run_batch(&mut store, &wake, reqs);
    }
    rx.close();
    close_checkpoint(&mut store);
    drop(store);
    drop(claim);
    if let Some(reply) = close_reply {
        let _ = reply.send(());
    }
}

/// `compact`: checkpoint first (redb compacts durable state only), sweep
/// the deferred deletes, then let redb move pages to the front of the
/// file and shrink it.
fn compact(store: &mut Store) -> Result<bool> {
    let limits = store.limits;
    store.ready()?;
    let Store {
        db,
        log,
        open,
        behind,
        verify,
        ..
    } = store;
    let db = db
        .as_mut()
        .ok_or_else(|| Error::corrupt("the database is not open"))?;
    let done = match catch_unwind(AssertUnwindSafe(|| -> Result<bool> {
        checkpoint(db, log, open, limits, false, None, false)?;
        log.shrink();
        sweep_deferred(db, limits)?;
        db.compact().ctx("compact")
    })) {
        Ok(r) => r,
        Err(_) => {
            verify.now = true;
            *behind = true;
            Err(panic_error("compact"))
        }
    };
    if done.is_err() && (log.has_unapplied() || open.is_some()) {
        *open = None;
        *behind = true;
    }
    done
}

/// At close: a last checkpoint, so that the file alone holds the whole
/// queue and the next open replays nothing, with the latest time this
/// process saw (if the file's is older), so that a clock step back while
/// the process is down is measured from it at the next open (SPEC 3, Clock
/// steps). Skipped when neither is needed (an idle close writes nothing).
/// Best effort: after a failure the next open replays the log.
fn close_checkpoint(store: &mut Store) {
    let (latest, limits) = (store.latest, store.limits);
    if store.ready().is_err() {
        return;
    }
    let Store {
        db: Some(db),
        log,
        open,
        ..
    } = store
    else {
        return;
    };
    let saved = catch_unwind(AssertUnwindSafe(|| {
        checkpoint(db, log, open, limits, false, Some(latest), false)
    }));
    if !matches!(saved, Ok(Ok(_))) {
        tracing::debug!("the last checkpoint at close failed; the next open replays the redo log");
    }
}

/// Run one batch and answer its callers; returns whether it wrote.
fn run_batch(store: &mut Store, wake: &Notify, reqs: Vec<Request>) -> bool {
    // A claim whose caller has gone (its future was dropped) is not run, so
    // that it strands nothing in pending.
    let reqs: Vec<Request> = reqs
        .into_iter()
        .filter(|r| !(r.op.hands_out() && r.reply.is_closed()))
        .collect();
    if reqs.is_empty() {
        return false;
    }
    let (ops, replies): (Vec<(Op, u64)>, Vec<_>) =
        reqs.into_iter().map(|r| ((r.op, r.now), r.reply)).unzip();
    let limits = store.limits;
    let latest = store.latest;
    let now = ops.iter().map(|(_, now)| *now).max().unwrap_or(0);
    // After a step back the clock's new reading is the latest from now on.
    store.latest = if crate::clock::step_back(latest, now).is_some() {
        now
    } else {
        latest.max(now)
    };
    let ready = store.ready().map(|_| ());
    let (results, changed) = match (ready, &store.db) {
        (Ok(()), Some(db)) => {
            let (log, open, floors) = (&mut store.log, &mut store.open, &mut store.floors);
            match catch_unwind(AssertUnwindSafe(|| {
                execute(db, log, open, limits, &ops, latest, floors)
            })) {
                Ok(out) => {
                    if out.behind {
                        store.behind = true;
                    }
                    (out.results, out.changed)
                }
                // The commit may or may not have happened: wake the
                // waiters, and reopen with a replay before the next batch.
                Err(_) => {
                    store.behind = true;
                    store.verify.now = true;
                    store.open = None;
                    store.floors = ExpiryFloors::default();
                    (
                        ops.iter()
                            .map(|_| Err(panic_error("a transaction")))
                            .collect(),
                        true,
                    )
                }
            }
        }
        (Ok(()), None) => (
            ops.iter()
                .map(|_| Err(Error::corrupt("the database is not open")))
                .collect(),
            false,
        ),
        (Err(e), _) => {
            store.suspect = true;
            (ops.iter().map(|_| Err(e.duplicate())).collect(), false)
        }
    };
    for r in &results {
        store.note(r);
    }
    // Only a commit that changed the file can give a waiting claim
    // something to take (or a new timer to wait for). Waking waiters after
    // a transaction that changed nothing made a waiting claim wake itself
    // with its own empty claim, and claim again, without end.
    if changed {
        wake.notify_waiters();
        // Only after a write, so that an idle queue writes nothing (SPEC 6,
        // Idle); before the replies, so that a caller that saw this
        // operation return sees no write it caused afterwards. The batch
        // is durable already (its record is synced): a failed checkpoint
        // changes no reply.
        store.maybe_checkpoint();
    }
    for (reply, result) in replies.into_iter().zip(results) {
        let _ = reply.send(result);
    }
    changed
}
