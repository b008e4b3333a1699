//! Group commit: a batch of callers' operations as one redb write
//! transaction made durable by one redo record (module `redo`), the
//! transaction body that the live path and the replay share, and the
//! checkpoint that makes redb durable and lets the log start over.

use redb::{Database, Durability, WriteTransaction};

use super::apply::apply;
use super::open::replay;
use super::{Op, Reply};
use crate::backend::embedded::redo::{self, Log};
use crate::backend::embedded::tables::{Ctx, ExpiryFloors, Limits, Tables};
use crate::error::{Error, Result};

/// Errors an operation returns before it changes anything: the transaction
/// can go on with the other callers' operations.
fn changed_nothing(e: &Error) -> bool {
    matches!(
        e,
        Error::LeaseLost { .. }
            | Error::Cancelled { .. }
            | Error::InvalidInput(_)
            | Error::Full { .. }
    )
}

/// What the transaction body did with a batch.
pub(super) struct Ran {
    /// Each operation's result, in order, up to a poisoning one.
    pub(super) done: Vec<Result<Reply>>,
    /// The operation (by position) that failed after it may have written.
    pub(super) poisoned: Option<(usize, Error)>,
    /// Whether anything was written.
    pub(super) dirty: bool,
    /// Whether a clock step back moved the stored times.
    pub(super) rebased: bool,
}

/// The body of every write transaction, live and at the replay of the redo
/// log alike, on the batch's tables `t` (the caller then records the redo
/// offset in the same tables, so that no table is opened twice in a
/// batch): move the stored times back after a clock step (from `latest`,
/// the latest reading this process had seen), purge expired markers as of
/// `now` (the batch's time), apply each operation at its own time, note the
/// clock. Given the same file state and the same arguments it writes the
/// same changes, which is what makes the replay exact (the purge skips
/// only what it would not have changed: [`ExpiryFloors`]).
pub(super) fn run_txn<'o>(
    t: &mut Tables<'_>,
    latest: u64,
    now: u64,
    ops: impl Iterator<Item = (&'o Op, u64)>,
) -> Result<Ran> {
    let rebased = t.observe_clock(latest, now)?;
    t.purge_expired(now)?;
    let mut done = Vec::new();
    let mut poisoned = None;
    // SPEC 3, Clock steps: the queue's time never runs backward by noise.
    // Each caller reads the clock before its operation reaches the writer,
    // so an operation can arrive after one that read a later time: it runs
    // at that later time when its own reading is at most the tolerance
    // below it, so that no claim hands out a timer promoted at a later
    // reading before that reading (never early, SPEC 3, Timers).
    let mut floor = if rebased { now } else { latest };
    for (k, (op, at)) in ops.enumerate() {
        let at = if crate::clock::step_back(floor, at).is_none() {
            at.max(floor)
        } else {
            at
        };
        floor = floor.max(at);
        match apply(t, op, at) {
            Ok(r) => done.push(Ok(r)),
            Err(e) if changed_nothing(&e) => done.push(Err(e)),
            Err(e) => {
                poisoned = Some((k, e));
                break;
            }
        }
    }
    if poisoned.is_none() {
        t.note_clock(now)?;
    }
    Ok(Ran {
        done,
        poisoned,
        dirty: t.is_dirty(),
        rebased,
    })
}

/// How a batch ended.
pub(super) struct Executed {
    pub(super) results: Vec<Result<Reply>>,
    /// A commit changed (or may have changed) the file: wake waiters.
    pub(super) changed: bool,
    /// redb's commit failed after the log took the batch: redb may be
    /// behind the log, so it must be opened again with a replay.
    pub(super) behind: bool,
}

/// The writer's open write transaction: the batches applied since redb's
/// last commit, each already durable in the redo log (records from
/// `Log::applied` to `Log::pos`). It commits at the next checkpoint (which
/// it becomes), or without a sync before a batch of reads alone: a redb
/// commit costs far more CPU than a batch's own changes (page checksums,
/// the allocator's state, freed-page bookkeeping), and the redo log makes
/// each batch durable on its own. The checkpoint policy bounds what it
/// holds (module `redo`).
///
/// It keeps its tables open across batches too: redb charges each table
/// opened in a transaction an open and a close (about 6 000 and 2 000
/// instructions), and a batch of one claim or one ack touched eight to ten
/// tables, which was a third of its instructions.
pub(super) struct Open {
    cell: TxnTables,
    batches: u32,
}

self_cell::self_cell!(
    /// A write transaction and its [`Tables`], each opened on first use
    /// and closed when the transaction is given up or committed.
    struct TxnTables {
        owner: WriteTransaction,
        #[not_covariant]
        dependent: Tables,
    }
);

impl Open {
    /// `txn` with none of its tables opened yet.
    fn new(txn: WriteTransaction, limits: Limits, batches: u32) -> Self {
        Open {
            cell: TxnTables::new(txn, |txn| Tables::open(txn, limits)),
            batches,
        }
    }

    /// The transaction, its tables closed (so that it can commit or abort).
    pub(super) fn into_txn(self) -> WriteTransaction {
        self.cell.into_owner()
    }
}

/// Give up the open transaction `txn`; if it held logged batches, apply
/// them again from the log (records from `Log::applied` to `Log::pos`), so
/// that redb is never left behind the log. Returns false if that failed:
/// the caller then marks the store behind (reopen and replay).
pub(super) fn abandon(db: &Database, log: &mut Log, txn: WriteTransaction) -> bool {
    let _ = txn.abort();
    if !log.has_unapplied() {
        return true;
    }
    match replay(db, log, log.tag(), log.applied(), Some(log.pos())) {
        Ok(_) => {
            log.mark_applied();
            true
        }
        Err(e) => {
            tracing::warn!(error = %crate::error::one_line(&e), "re-applying the redo log failed; the queue file is reopened before the next operation");
            false
        }
    }
}

/// Commit the open transaction, if any, without a sync: redb then holds
/// every record appended so far.
///
/// # Errors
///
/// `Storage` if the commit fails (redb may then be behind the log: the
/// caller reopens it with a replay).
pub(super) fn apply_open(open: &mut Option<Open>, log: &mut Log) -> Result<()> {
    if let Some(o) = open.take() {
        o.into_txn().commit().ctx("commit")?;
        log.mark_applied();
    }
    Ok(())
}

/// Run `reqs` in as few write transactions as possible: normally one. An
/// operation that fails after it may have written aborts the transaction; it
/// gets its error and the others run again without it. A transaction in
/// which nothing was written (an empty claim, a reclaim or promotion that
/// found nothing, reads) is aborted rather than committed: it costs no
/// write and no fsync (SPEC 6, Idle).
///
/// A batch that wrote is made durable by the redo log (module `redo`): its
/// record is appended and synced, and only then do its callers get their
/// replies. Its changes stay in the writer's open transaction ([`Open`]),
/// which the next checkpoint commits. A failed append aborts the transaction (redb never holds
/// what the log may lack) and leaves the log broken until the next
/// checkpoint; an abort of a transaction that held earlier logged batches
/// applies them again from the log first (`abandon`).
///
/// `latest` is the latest time (ms) this process has seen: a clock more than
/// the tolerance below it, or below the file's own latest commit time, has
/// stepped back, and the transaction first moves the stored times back by
/// the step (SPEC 3, Clock steps).
///
/// `floors` are the expiry floors as of the last kept batch (see
/// [`ExpiryFloors`]): the batch starts from them and leaves its own when
/// its transaction is kept; every failure leaves them unknown.
pub(super) fn execute(
    db: &Database,
    log: &mut Log,
    open: &mut Option<Open>,
    limits: Limits,
    reqs: &[(Op, u64)],
    latest: u64,
    floors: &mut ExpiryFloors,
) -> Executed {
    let mut results: Vec<Option<Result<Reply>>> = reqs.iter().map(|_| None).collect();
    let mut active: Vec<usize> = (0..reqs.len()).collect();
    let mut changed = false;
    let mut behind = false;
    let fail_all = |results: &mut Vec<Option<Result<Reply>>>, active: &[usize], e: Error| {
        for &i in active {
            results[i] = Some(Err(e.duplicate()));
        }
    };
    // A batch of reads alone must not leave its housekeeping (purged
    // markers, which the log does not hold) in a transaction that commits
    // later: commit what is open first, and run it on its own.
    if reqs.iter().all(|(op, _)| op.is_read())
        && let Err(e) = apply_open(open, log)
    {
        fail_all(&mut results, &active, e);
        active.clear();
        behind = true;
    }
    while !active.is_empty() {
        let mut o = match open.take() {
            Some(o) => o,
            None => {
                let begun = db
                    .begin_write()
                    .ctx("begin write transaction")
                    .and_then(|mut t| {
                        t.set_durability(Durability::None)
                            .ctx("set durability")
                            .map(|()| t)
                    });
                match begun {
                    Ok(t) => Open::new(t, limits, 0),
                    Err(e) => {
                        fail_all(&mut results, &active, e);
                        break;
                    }
                }
            }
        };
        let now = active.iter().map(|&i| reqs[i].1).max().unwrap_or(0);
        // SPEC 6, redo log: a large batch of adds that cannot fail (every
        // item valid, room for all of them) has its record written and its
        // sync started before the adds run, so that the disk syncs while
        // they apply. Only on the first pass: a batch that lost an
        // operation is not all adds any more.
        let ahead = active.len() == reqs.len()
            && !log.is_broken()
            && writes_ahead(reqs, log.ahead_from())
            && o.cell
                .with_dependent(|_, t| t.adds_fit(reqs.iter().filter_map(|(op, _)| op.added())))
                .unwrap_or(false);
        let mut logged_ahead = 0u64;
        if ahead {
            logged_ahead = record(
                log,
                &limits,
                latest,
                now,
                reqs.iter().map(|(op, at)| (op, *at)),
            );
            if let Err(source) = log.write_ahead() {
                // Nothing of this batch ran: the transaction keeps the
                // earlier batches, and the broken log is checkpointed
                // before the next operation.
                *open = Some(o);
                fail_all(&mut results, &active, append_failed(source));
                break;
            }
        }
        // The batch runs on the transaction's tables, opened by earlier
        // batches or on first use here.
        let ran = o.cell.with_dependent_mut(|_, t| {
            t.begin_batch(*floors);
            run_txn(
                t,
                latest,
                now,
                active.iter().map(|&i| (&reqs[i].0, reqs[i].1)),
            )
        });
        if ahead {
            let end = log.record_end();
            let applied = match ran {
                Ok(ran) if ran.poisoned.is_none() => {
                    match ran.done.into_iter().collect::<Result<Vec<_>>>() {
                        Ok(done) => o
                            .cell
                            .with_dependent_mut(|_, t| t.set_redo_at(end).map(|()| t.floors()))
                            .map(|kept| (done, kept)),
                        Err(e) => Err(e),
                    }
                }
                Ok(ran) => Err(ran
                    .poisoned
                    .map_or_else(|| Error::corrupt("an add failed"), |(_, e)| e)),
                Err(e) => Err(e),
            };
            match (log.finish_ahead(logged_ahead), applied) {
                (Ok(()), Ok((done, kept))) => {
                    *floors = kept;
                    changed = true;
                    for (&i, r) in active.iter().zip(done) {
                        results[i] = Some(Ok(r));
                    }
                    o.batches += 1;
                    *open = Some(o);
                }
                (Err(source), _) => {
                    // Not durable: redb goes back to the log's last record.
                    *floors = ExpiryFloors::default();
                    behind |= !abandon(db, log, o.into_txn());
                    fail_all(&mut results, &active, append_failed(source));
                }
                (Ok(()), Err(e)) => {
                    // The record is durable but the adds did not apply
                    // here: redb takes the log's word (the abandon replays
                    // the record), and the callers learn that their adds'
                    // outcome is unknown, as for a failed commit (SPEC 5).
                    *floors = ExpiryFloors::default();
                    behind |= !abandon(db, log, o.into_txn());
                    changed = true;
                    fail_all(
                        &mut results,
                        &active,
                        Error::Io {
                            context:
                                "apply adds whose redo record was synced (their outcome is unknown)"
                                    .into(),
                            source: std::io::Error::other(e.to_string()),
                        },
                    );
                }
            }
            break;
        }
        let ran = match ran {
            Ok(ran) => ran,
            Err(e) => {
                *floors = ExpiryFloors::default();
                behind |= !abandon(db, log, o.into_txn());
                fail_all(&mut results, &active, e);
                break;
            }
        };
        if let Some((k, e)) = ran.poisoned {
            *floors = ExpiryFloors::default();
            let i = active.remove(k);
            results[i] = Some(Err(e));
            if !abandon(db, log, o.into_txn()) {
                behind = true;
                let e = Error::corrupt("the queue file is reopened after a failed operation");
                fail_all(&mut results, &active, e);
                break;
            }
            continue;
        }
        // Commit only what changed something, and never a batch of reads
        // alone (unless it found the clock stepped back and moved the
        // stored times, which must not be lost). A queue opened read-only
        // never keeps a rebase: its reads ran on the moved times, the
        // transaction ends here, and the next writer of the file moves
        // them itself (SPEC 3, Clock steps; SPEC 9, looks never write).
        let writes = active.iter().any(|&i| !reqs[i].0.is_read());
        let keeps_rebase = ran.rebased && !log.is_read_only();
        if !(keeps_rebase || (ran.dirty && writes)) {
            // A clean transaction's floors hold whether it is kept or not;
            // a dirty one (a batch of reads whose purge found something) is
            // ended here, its purge undone, and the floors it raised with it.
            if !ran.dirty {
                *floors = o.cell.with_dependent(|_, t| t.floors());
            }
            // This batch wrote nothing (`dirty` is false: the reads-alone
            // case committed what was open above): keep the transaction
            // that holds earlier batches, end an empty one.
            let finished = if o.batches > 0 {
                *open = Some(o);
                Ok(())
            } else {
                o.into_txn().abort().ctx("end read")
            };
            match finished {
                Ok(()) => {
                    for (&i, r) in active.iter().zip(ran.done) {
                        results[i] = Some(r);
                    }
                }
                Err(e) => fail_all(&mut results, &active, e),
            }
            break;
        }
        // The record: the operations that succeeded (a failed one changed
        // nothing), each with its time; reads write nothing and are left
        // out.
        let logged = record(
            log,
            &limits,
            latest,
            now,
            active
                .iter()
                .zip(&ran.done)
                .filter(|(_, r)| r.is_ok())
                .map(|(&i, _)| (&reqs[i].0, reqs[i].1)),
        );
        let end = log.record_end();
        let (redo_at, kept) = o
            .cell
            .with_dependent_mut(|_, t| (t.set_redo_at(end), t.floors()));
        if let Err(e) = redo_at {
            *floors = ExpiryFloors::default();
            behind |= !abandon(db, log, o.into_txn());
            fail_all(&mut results, &active, e);
            break;
        }
        if let Err(source) = log.append(logged) {
            *floors = ExpiryFloors::default();
            behind |= !abandon(db, log, o.into_txn());
            fail_all(&mut results, &active, append_failed(source));
            break;
        }
        // From here the batch is durable: wake waiters.
        *floors = kept;
        changed = true;
        for (&i, r) in active.iter().zip(ran.done) {
            results[i] = Some(r);
        }
        o.batches += 1;
        *open = Some(o);
        break;
    }
    let results = results
        .into_iter()
        .map(|r| r.unwrap_or_else(|| Err(Error::corrupt("operation was not run"))))
        .collect();
    Executed {
        results,
        changed,
        behind,
    }
}

/// The error of an operation whose redo record could not be appended
/// (written or synced): nothing of it is kept.
fn append_failed(source: std::io::Error) -> Error {
    Error::Io {
        context: "append to the redo log".into(),
        source,
    }
}

/// Begin the log's next record with the batch's settings and times, and
/// put `ops` into it (each with its time; reads are left out). Returns
/// their [`redo::weight`] in all.
fn record<'o>(
    log: &mut Log,
    limits: &Limits,
    latest: u64,
    now: u64,
    ops: impl Iterator<Item = (&'o Op, u64)>,
) -> u64 {
    let body = log.start_record();
    redo::begin_batch(body, limits, latest, now);
    let mut logged = 0;
    for (op, at) in ops {
        if redo::encode_op(body, op, at) {
            logged += redo::weight(op);
        }
    }
    logged
}

/// Whether `reqs` is a batch whose redo record is written ahead of its run
/// (SPEC 6, redo log): adds only, of at least `from` items in
/// all (`from` 0: never).
fn writes_ahead(reqs: &[(Op, u64)], from: usize) -> bool {
    if from == 0 {
        return false;
    }
    let mut items = 0usize;
    for (op, _) in reqs {
        match op.added() {
            Some(added) => items += added.len(),
            None => return false,
        }
    }
    items >= from
}

/// A checkpoint: one durable redb commit (with quick repair, so that an
/// open after a crash need not walk the file) that stores a fresh log tag
/// and `redo_at = 0`, after which the log is written from its start again.
/// With `orphan` it also marks every pending item as orphaned (the open's
/// own recovery); with `clock`, it saves that latest clock reading (close).
/// With `force` false it commits only if the log holds records or the clock
/// needed saving. Returns the orphans marked. After a failure with
/// records redb had not committed (`Log::has_unapplied`), redb is behind
/// the log: the caller reopens it with a replay.
pub(super) fn checkpoint(
    db: &Database,
    log: &mut Log,
    open: &mut Option<Open>,
    limits: Limits,
    orphan: bool,
    clock: Option<u64>,
    force: bool,
) -> Result<u64> {
    // The open transaction, holding the batches since redb's last commit,
    // becomes the checkpoint (redb has one writer: a second transaction
    // would wait for it for ever).
    let mut txn = match open.take() {
        Some(o) => o.into_txn(),
        None => db.begin_write().ctx("begin checkpoint")?,
    };
    txn.set_durability(Durability::Immediate)
        .ctx("set durability")?;
    txn.set_quick_repair(true);
    let tag = redo::new_tag();
    let prepared = (|| -> Result<(u64, bool)> {
        let mut t = Tables::open(&txn, limits);
        let orphans = if orphan { t.orphan_all_pending()? } else { 0 };
        let saved = match clock {
            Some(latest) if latest > 0 => t.save_clock(latest)?,
            _ => false,
        };
        let needed = force || saved || orphans > 0 || log.has_records();
        if needed {
            t.set_redo(tag, 0)?;
        }
        Ok((orphans, needed))
    })();
    match prepared {
        Ok((orphans, true)) => {
            txn.commit().ctx("commit checkpoint")?;
            log.reset(tag);
            Ok(orphans)
        }
        Ok((orphans, false)) => {
            txn.abort().ctx("end checkpoint")?;
            Ok(orphans)
        }
        Err(e) => {
            let _ = txn.abort();
            Err(e)
        }
    }
}

/// `compact`'s first step after its checkpoint: delete the records of
/// every deferred delete (SPEC 6, schema 4), so that their space is given
/// back too, in one durable transaction of its own. It changes no item's
/// state, so the redo log (empty after the checkpoint) needs no record of
/// it: a crash before its commit only leaves the records for later.
///
/// # Errors
///
/// Storage failures.
pub(super) fn sweep_deferred(db: &Database, limits: Limits) -> Result<()> {
    let mut txn = db.begin_write().ctx("begin sweep")?;
    txn.set_durability(Durability::Immediate)
        .ctx("set durability")?;
    let swept = (|| -> Result<bool> {
        let mut t = Tables::open(&txn, limits);
        t.sweep_all_deferred()?;
        t.write_counters()?;
        Ok(t.is_dirty())
    })();
    match swept {
        Ok(true) => txn.commit().ctx("commit sweep"),
        Ok(false) => txn.abort().ctx("end sweep"),
        Err(e) => {
            let _ = txn.abort();
            Err(e)
        }
    }
}

pub(super) fn panic_error(what: &str) -> Error {
    Error::corrupt(format!(
        "the storage engine panicked during {what}; the file is likely damaged"
    ))
}

#[cfg(test)]
mod tests {
    use super::changed_nothing;

    /// A record whose encoding fails, as a bincode `Encode` impl may.
    struct Unencodable;

    impl bincode::Encode for Unencodable {
        fn encode<E: bincode::enc::Encoder>(
            &self,
            _encoder: &mut E,
        ) -> Result<(), bincode::error::EncodeError> {
            Err(bincode::error::EncodeError::Other("refused"))
        }
    }

    // Failed: an encoding failure was `InvalidInput`, which group commit
    // reads as "wrote nothing" and so committed whatever the operation had
    // written before it.
    #[test]
    fn an_encoding_failure_aborts_the_transaction() {
        let Err(e) = crate::backend::embedded::codec::encode(&Unencodable) else {
            panic!("an unencodable record encoded");
        };
        assert!(!changed_nothing(&e), "{e:?} would be committed around");
    }
}
