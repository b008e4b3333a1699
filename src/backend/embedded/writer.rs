//! The writer thread: owns the redb `Database`, batches concurrent
//! operations into one write transaction and one fsync (group commit), and
//! hands each caller its own result.

use std::collections::{BTreeMap, HashMap};
use std::panic::{AssertUnwindSafe, catch_unwind};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use redb::{Database, Durability, TableHandle};
use tokio::sync::{Notify, mpsc, oneshot};

use super::migrate;
use super::redo::{self, Log};
use super::tables::{self, Ctx, Limits, Tables};
use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
use crate::outcome::{Chunk, Outcome};

/// Most operations one transaction takes; more wait for the next one.
const MAX_BATCH: usize = 512;

/// One operation of the contract, with its arguments.
#[derive(Debug)]
pub(super) enum Op {
    Add(Vec<(NewItem, Option<u64>)>),
    Promote,
    Claim {
        count: usize,
        from: ClaimFrom,
    },
    Ack(Receipt, Vec<u8>),
    Outcome(u64),
    SetProgress(Receipt, Vec<u8>),
    SendChunk(Receipt, Vec<u8>),
    Progress(u64),
    Chunks(u64, u64),
    AckBatch(Vec<Receipt>),
    Touch(Vec<Receipt>),
    Retry(Receipt, u64),
    Release(Receipt, u64),
    DeadLetter(Receipt, String),
    Reclaim {
        min_idle_ms: u64,
        count: usize,
    },
    Pause(String),
    Resume(String),
    Park(Receipt),
    Step(String),
    ClearFlow(String),
    MarkDone(u64, String),
    Redrive(u64),
    PurgeDead,
    NextDue,
    Parked(String),
    PausedFlows,
    SetFlowLimit(String, crate::limit::FlowLimit),
    FlowLimits,
    WasDone(u64, String),
    DeadLetters(usize),
    Stats,
    BacklogByFlow(usize),
    Peek(usize),
    /// SPEC 12.1: one page of a state.
    List(crate::browse::ListQuery),
    /// SPEC 12.1: one item by id.
    Find(u64),
    /// Store and forward (SPEC section 11): the file's journal id, made
    /// from the candidate (random, drawn by the caller) on first use.
    #[cfg(feature = "forward")]
    ForwardJournal(u64),
    /// The next items to hand over under a mark key.
    #[cfg(feature = "forward")]
    ForwardRead {
        key: String,
        flows: Option<Vec<String>>,
        max_items: usize,
        max_bytes: usize,
        late: bool,
    },
    /// Remove items Redis has taken and raise the mark.
    #[cfg(feature = "forward")]
    ForwardDone {
        key: String,
        ids: Vec<u64>,
        mark: u64,
    },
    /// What waits to be handed over.
    #[cfg(feature = "forward")]
    ForwardLag(Option<Vec<String>>),
    #[cfg(feature = "testing")]
    Locations,
    #[cfg(feature = "testing")]
    Dump,
    #[cfg(feature = "testing")]
    Audit,
}

impl Op {
    /// Operations that only read: a batch of nothing else never commits,
    /// even when the housekeeping of its transaction (purging expired
    /// markers) wrote something.
    pub(super) fn is_read(&self) -> bool {
        matches!(
            self,
            Op::NextDue
                | Op::Parked(_)
                | Op::PausedFlows
                | Op::FlowLimits
                | Op::WasDone(..)
                | Op::DeadLetters(_)
                | Op::Stats
                | Op::BacklogByFlow(_)
                | Op::Peek(_)
                | Op::Outcome(_)
                | Op::Progress(_)
                | Op::Chunks(..)
                | Op::List(_)
                | Op::Find(_)
        ) || self.is_test_read()
            || self.is_forward_read()
    }

    #[cfg(feature = "forward")]
    fn is_forward_read(&self) -> bool {
        matches!(self, Op::ForwardRead { .. } | Op::ForwardLag(_))
    }

    #[cfg(not(feature = "forward"))]
    fn is_forward_read(&self) -> bool {
        false
    }

    /// The operation's name, for errors.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Add(_) => "add",
            Op::Promote => "promote_due",
            Op::Claim { .. } => "claim",
            Op::Ack(..) | Op::AckBatch(_) => "ack",
            Op::SetProgress(..) => "set_progress",
            Op::SendChunk(..) => "send_chunk",
            Op::Release(..) => "release",
            Op::Touch(_) => "touch",
            Op::Retry(..) => "retry",
            Op::DeadLetter(..) => "dead_letter",
            Op::Reclaim { .. } => "reclaim_stale",
            Op::Pause(_) => "pause",
            Op::Resume(_) => "resume",
            Op::Park(_) => "park",
            Op::Step(_) => "step",
            Op::ClearFlow(_) => "clear_flow",
            Op::MarkDone(..) => "mark_done",
            Op::Redrive(_) => "redrive",
            Op::PurgeDead => "purge_dead_letters",
            Op::SetFlowLimit(..) => "set_flow_limit",
            _ => "read",
        }
    }

    #[cfg(feature = "testing")]
    fn is_test_read(&self) -> bool {
        matches!(self, Op::Locations | Op::Dump | Op::Audit)
    }

    #[cfg(not(feature = "testing"))]
    fn is_test_read(&self) -> bool {
        false
    }

    /// Operations whose only effect is to hand items to the caller: if the
    /// caller has gone, running them would strand items in pending.
    fn hands_out(&self) -> bool {
        matches!(self, Op::Claim { .. } | Op::Reclaim { .. } | Op::Step(_))
    }
}

/// What an operation returns.
#[derive(Debug)]
pub(super) enum Reply {
    /// A claim's items and, when it took none, the soonest timer.
    Claim {
        claimed: Vec<Claimed>,
        next_due: Option<u64>,
    },
    Added(Vec<Added>),
    Count(u64),
    Reclaimed(Reclaimed),
    Unit,
    Retry(RetryOutcome),
    Step(Option<Claimed>),
    Bool(bool),
    Due(Option<u64>),
    Flows(Vec<String>),
    Dead(Vec<DeadLetter>),
    Stats(Stats),
    ByFlow(BTreeMap<String, u64>),
    Items(Vec<Item>),
    Outcome(Option<Outcome>),
    Bytes(Option<Vec<u8>>),
    /// Chunks after a sequence number, and whether the item has finished.
    Chunks(Vec<Chunk>, bool),
    Limits(Vec<crate::limit::FlowLimits>),
    Page(crate::browse::ItemPage),
    Found(Option<crate::browse::ListedItem>),
    #[cfg(feature = "forward")]
    Outgoing(Vec<tables::Outgoing>),
    #[cfg(feature = "forward")]
    Lag(tables::Unforwarded),
    #[cfg(feature = "testing")]
    Locations(BTreeMap<u64, Vec<crate::testing::Location>>),
    #[cfg(feature = "testing")]
    Dump(BTreeMap<String, Vec<String>>),
    #[cfg(feature = "testing")]
    Audit(BTreeMap<u64, crate::testing::Location>),
}

pub(super) struct Request {
    pub(super) op: Op,
    pub(super) now: u64,
    pub(super) reply: oneshot::Sender<Result<Reply>>,
}

pub(super) enum Msg {
    Req(Request),
    Compact(oneshot::Sender<Result<bool>>),
    Close(oneshot::Sender<()>),
}

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
pub(super) struct PathClaim {
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
    pub(super) async fn take(path: PathBuf) -> Result<Self> {
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
    pub(super) fn closing_flag(&self) -> Arc<AtomicBool> {
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

fn apply(t: &mut Tables<'_>, op: &Op, now: u64) -> Result<Reply> {
    Ok(match op {
        Op::Add(items) => Reply::Added(t.add(items, now)?),
        Op::Promote => Reply::Count(t.promote_due(now)?),
        Op::Claim { count, from } => {
            let claimed = t.claim(*count, *from, now)?;
            // An empty claim is followed by a wait until the next timer:
            // read it in this transaction rather than in another one.
            let next_due = if claimed.is_empty() {
                t.next_wake()?
            } else {
                None
            };
            Reply::Claim { claimed, next_due }
        }
        Op::Ack(r, result) => {
            t.ack(r, result, now)?;
            Reply::Unit
        }
        Op::Outcome(id) => Reply::Outcome(t.outcome(*id, now)?),
        Op::SetProgress(r, p) => {
            t.set_progress(r, p)?;
            Reply::Unit
        }
        Op::SendChunk(r, c) => Reply::Count(t.send_chunk(r, c)?),
        Op::Progress(id) => Reply::Bytes(t.progress(*id, now)?),
        Op::Chunks(id, after) => {
            let (chunks, finished) = t.chunks_after(*id, *after, now)?;
            Reply::Chunks(chunks, finished)
        }
        Op::AckBatch(rs) => Reply::Count(t.ack_batch(rs, now)?),
        Op::Touch(rs) => {
            t.touch(rs, now)?;
            Reply::Unit
        }
        Op::Retry(r, nb) => Reply::Retry(t.retry(r, *nb, now)?),
        Op::Release(r, nb) => {
            t.release(r, *nb, now)?;
            Reply::Unit
        }
        Op::DeadLetter(r, reason) => {
            t.dead_letter(r, reason, now)?;
            Reply::Unit
        }
        Op::Reclaim { min_idle_ms, count } => {
            Reply::Reclaimed(t.reclaim_stale(*min_idle_ms, *count, now)?)
        }
        Op::Pause(f) => {
            t.pause(f)?;
            Reply::Unit
        }
        Op::Resume(f) => Reply::Count(t.resume(f, now)?),
        Op::Park(r) => {
            t.park(r, now)?;
            Reply::Unit
        }
        Op::Step(f) => Reply::Step(t.step(f, now)?),
        Op::ClearFlow(f) => Reply::Count(t.clear_flow(f)?),
        Op::MarkDone(id, step) => {
            t.mark_done(*id, step, now)?;
            Reply::Unit
        }
        Op::Redrive(id) => Reply::Bool(t.redrive(*id, now)?),
        Op::PurgeDead => Reply::Count(t.purge_dead_letters()?),
        Op::NextDue => Reply::Due(t.next_due()?),
        Op::Parked(f) => Reply::Count(t.parked_count(f)?),
        Op::PausedFlows => Reply::Flows(t.paused_flows()?),
        Op::SetFlowLimit(f, l) => {
            t.set_flow_limit(f, *l, now)?;
            Reply::Unit
        }
        Op::FlowLimits => Reply::Limits(t.flow_limits_list(now)?),
        Op::WasDone(id, step) => Reply::Bool(t.was_done(*id, step, now)?),
        Op::DeadLetters(n) => Reply::Dead(t.dead_letters(*n)?),
        Op::Stats => Reply::Stats(t.stats(now)?),
        Op::BacklogByFlow(n) => Reply::ByFlow(t.backlog_by_flow(*n, now)?),
        Op::Peek(n) => Reply::Items(t.peek(*n, now)?),
        Op::List(q) => Reply::Page(t.list(q)?),
        Op::Find(id) => Reply::Found(t.find(*id)?),
        #[cfg(feature = "forward")]
        Op::ForwardJournal(candidate) => Reply::Count(t.forward_journal(*candidate)?),
        #[cfg(feature = "forward")]
        Op::ForwardRead {
            key,
            flows,
            max_items,
            max_bytes,
            late,
        } => Reply::Outgoing(t.forward_read(
            key,
            flows.as_deref(),
            *max_items,
            *max_bytes,
            *late,
            now,
        )?),
        #[cfg(feature = "forward")]
        Op::ForwardDone { key, ids, mark } => Reply::Count(t.forward_done(key, ids, *mark)?),
        #[cfg(feature = "forward")]
        Op::ForwardLag(flows) => Reply::Lag(t.forward_lag(flows.as_deref())?),
        #[cfg(feature = "testing")]
        Op::Locations => Reply::Locations(t.locations()?),
        #[cfg(feature = "testing")]
        Op::Dump => Reply::Dump(t.dump()?),
        #[cfg(feature = "testing")]
        Op::Audit => Reply::Audit(t.audit()?),
    })
}

/// Errors an operation returns before it changes anything: the transaction
/// can go on with the other callers' operations.
fn changed_nothing(e: &Error) -> bool {
    matches!(
        e,
        Error::LeaseLost { .. } | Error::InvalidInput(_) | Error::Full { .. }
    )
}

/// What the transaction body did with a batch.
struct Ran {
    /// Each operation's result, in order, up to a poisoning one.
    done: Vec<Result<Reply>>,
    /// The operation (by position) that failed after it may have written.
    poisoned: Option<(usize, Error)>,
    /// Whether anything was written.
    dirty: bool,
    /// Whether a clock step back moved the stored times.
    rebased: bool,
}

/// The body of every write transaction, live and at the replay of the redo
/// log alike: move the stored times back after a clock step (from `latest`,
/// the latest reading this process had seen), purge expired markers as of
/// `now` (the batch's time), apply each operation at its own time, note the
/// clock. Given the same file state and the same arguments it writes the
/// same changes, which is what makes the replay exact.
fn run_txn<'o>(
    txn: &redb::WriteTransaction,
    limits: Limits,
    latest: u64,
    now: u64,
    ops: impl Iterator<Item = (&'o Op, u64)>,
) -> Result<Ran> {
    let mut t = Tables::open(txn, limits)?;
    let rebased = t.observe_clock(latest, now)?;
    t.purge_expired(now)?;
    let mut done = Vec::new();
    let mut poisoned = None;
    for (k, (op, at)) in ops.enumerate() {
        match apply(&mut t, op, at) {
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
struct Executed {
    results: Vec<Result<Reply>>,
    /// A commit changed (or may have changed) the file: wake waiters.
    changed: bool,
    /// redb's commit failed after the log took the batch: redb may be
    /// behind the log, so it must be opened again with a replay.
    behind: bool,
}

/// Run `reqs` in as few write transactions as possible: normally one. An
/// operation that fails after it may have written aborts the transaction; it
/// gets its error and the others run again without it. A transaction in
/// which nothing was written (an empty claim, a reclaim or promotion that
/// found nothing, reads) is aborted rather than committed: it costs no
/// write and no fsync (SPEC 8, Idle).
///
/// A transaction that wrote is made durable by the redo log (module
/// `redo`): its record is appended and synced, then redb commits without a
/// sync. A failed append aborts the transaction (redb never holds what the
/// log may lack) and leaves the log broken until the next checkpoint.
///
/// `latest` is the latest time (ms) this process has seen: a clock more than
/// the tolerance below it, or below the file's own latest commit time, has
/// stepped back, and the transaction first moves the stored times back by
/// the step (SPEC 8, Clock steps).
fn execute(
    db: &Database,
    log: &mut Log,
    limits: Limits,
    reqs: &[(Op, u64)],
    latest: u64,
) -> Executed {
    let mut results: Vec<Option<Result<Reply>>> = reqs.iter().map(|_| None).collect();
    let mut active: Vec<usize> = (0..reqs.len()).collect();
    let mut changed = false;
    let mut behind = false;
    while !active.is_empty() {
        let fail_all = |results: &mut Vec<Option<Result<Reply>>>, active: &[usize], e: Error| {
            for &i in active {
                results[i] = Some(Err(e.duplicate()));
            }
        };
        let mut txn = match db.begin_write().ctx("begin write transaction") {
            Ok(t) => t,
            Err(e) => {
                fail_all(&mut results, &active, e);
                break;
            }
        };
        if let Err(e) = txn.set_durability(Durability::None).ctx("set durability") {
            fail_all(&mut results, &active, e);
            break;
        }
        let now = active.iter().map(|&i| reqs[i].1).max().unwrap_or(0);
        let ran = match run_txn(
            &txn,
            limits,
            latest,
            now,
            active.iter().map(|&i| (&reqs[i].0, reqs[i].1)),
        ) {
            Ok(ran) => ran,
            Err(e) => {
                let _ = txn.abort();
                fail_all(&mut results, &active, e);
                break;
            }
        };
        if let Some((k, e)) = ran.poisoned {
            let _ = txn.abort();
            let i = active.remove(k);
            results[i] = Some(Err(e));
            continue;
        }
        // Commit only what changed something, and never a batch of reads
        // alone (unless it found the clock stepped back and moved the
        // stored times, which must not be lost).
        let writes = active.iter().any(|&i| !reqs[i].0.is_read());
        if !(ran.rebased || (ran.dirty && writes)) {
            let finished = txn.abort().ctx("end read");
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
        redo::begin_batch(&mut log.buf, &limits, latest, now);
        let mut logged = 0u64;
        for (&i, r) in active.iter().zip(&ran.done) {
            if r.is_ok() && redo::encode_op(&mut log.buf, &reqs[i].0, reqs[i].1) {
                logged += redo::weight(&reqs[i].0);
            }
        }
        let end = log.end_after(log.buf.len());
        if let Err(e) = Tables::open(&txn, limits).and_then(|mut t| t.set_redo_at(end)) {
            let _ = txn.abort();
            fail_all(&mut results, &active, e);
            break;
        }
        if let Err(source) = log.append(logged) {
            let _ = txn.abort();
            fail_all(
                &mut results,
                &active,
                Error::Io {
                    context: "append to the redo log".into(),
                    source,
                },
            );
            break;
        }
        // From here the batch is durable; a failed commit may have
        // happened all the same (and will at the replay): wake waiters.
        changed = true;
        match txn.commit().ctx("commit") {
            Ok(()) => {
                for (&i, r) in active.iter().zip(ran.done) {
                    results[i] = Some(r);
                }
            }
            Err(e) => {
                behind = true;
                fail_all(&mut results, &active, e);
            }
        }
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

/// Apply the records of the redo log under `tag` from offset `at` on, each
/// in its own non-durable transaction through [`run_txn`], as the live path
/// ran it; stops where the log ends (a torn, damaged, zeroed or older
/// record). Returns the number of records replayed.
///
/// # Errors
///
/// `Io` if the log cannot be read; `Decode` for a whole record this build
/// cannot read; `Corrupt` if an operation fails at replay (the live path
/// logged it only after it succeeded); storage failures.
fn replay(db: &Database, log: &Log, tag: u64, mut at: u64) -> Result<u64> {
    let mut records = 0;
    while let Some((body, end)) = log.read_record(tag, at)? {
        let batch = redo::decode_batch(&body)?;
        let mut txn = db.begin_write().ctx("begin replay")?;
        txn.set_durability(Durability::None).ctx("set durability")?;
        let ran = run_txn(
            &txn,
            batch.limits,
            batch.latest,
            batch.now,
            batch.ops.iter().map(|(op, t)| (op, *t)),
        )
        .and_then(
            |ran| match (ran.poisoned, ran.done.into_iter().find_map(|r| r.err())) {
                (Some((_, e)), _) | (None, Some(e)) => Err(e),
                (None, None) => Ok(()),
            },
        )
        .and_then(|()| Tables::open(&txn, batch.limits)?.set_redo_at(end));
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

/// A checkpoint: one durable redb commit (with quick repair, so that an
/// open after a crash need not walk the file) that stores a fresh log tag
/// and `redo_at = 0`, after which the log is written from its start again.
/// With `orphan` it also marks every pending item as orphaned (the open's
/// own recovery); with `clock`, it saves that latest clock reading (close).
/// With `force` false it commits only if the log holds records or the clock
/// needed saving. Returns the orphans marked.
fn checkpoint(
    db: &Database,
    log: &mut Log,
    limits: Limits,
    orphan: bool,
    clock: Option<u64>,
    force: bool,
) -> Result<u64> {
    let mut txn = db.begin_write().ctx("begin checkpoint")?;
    txn.set_durability(Durability::Immediate)
        .ctx("set durability")?;
    txn.set_quick_repair(true);
    let tag = redo::new_tag();
    let prepared = (|| -> Result<(u64, bool)> {
        let mut t = Tables::open(&txn, limits)?;
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

fn panic_error(what: &str) -> Error {
    Error::corrupt(format!(
        "the storage engine panicked during {what}; the file is likely damaged"
    ))
}

/// Opens the database: from the file's path and options, or from a test's
/// storage backend. Called again to reopen after an I/O error.
pub(super) type Build =
    Box<dyn FnMut() -> std::result::Result<Database, redb::DatabaseError> + Send>;

/// Open (or create) the file and run recovery: check the schema (migrating
/// an older one), replay the redo log's tail, mark every pending item as
/// orphaned, checkpoint. Runs on the writer thread.
pub(super) fn open_database(
    build: &mut Build,
    log: &mut Log,
    path: &std::path::Path,
    limits: Limits,
) -> Result<Database> {
    open_and_recover(build, log, path, limits, true)
}

/// Open, check the schema, replay the log and checkpoint; with `orphan`,
/// mark every pending item as belonging to a process that is gone. A reopen
/// by the same process after an I/O error does not: its consumers still
/// hold their claims.
fn open_and_recover(
    build: &mut Build,
    log: &mut Log,
    path: &std::path::Path,
    limits: Limits,
    orphan: bool,
) -> Result<Database> {
    let db = match catch_unwind(AssertUnwindSafe(build)) {
        Ok(Ok(db)) => db,
        Ok(Err(e)) => return Err(open_error(e, path)),
        Err(_) => return Err(panic_error("open")),
    };
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
            let t = Tables::open(&txn, limits)?;
            (t.schema_version()?, t.redo_state()?)
        };
        match version {
            None => Tables::open(&txn, limits)?.set_schema_version(tables::SCHEMA_VERSION)?,
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
            Some(1) => {
                migrate::schema1_to_2(&txn, limits.aging_step)?;
                tracing::info!(path = %path.display(), "migrated the queue file from schema 1 to 2");
            }
            Some(_) => {}
        }
        txn.commit().ctx("commit recovery")?;
        let replayed = match redo {
            Some((tag, at)) => replay(&db, log, tag, at)?,
            None => 0,
        };
        let orphans = checkpoint(&db, log, limits, orphan, None, true)?;
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

/// The database and how to open it again.
struct Store {
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
    /// a clock step back (SPEC 8, Clock steps).
    latest: u64,
    /// When the last checkpoint was made.
    checkpointed: std::time::Instant,
    policy: redo::Policy,
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
    /// A store over a database that [`open_database`] has just opened.
    fn new(
        db: Database,
        build: Build,
        log: Log,
        policy: redo::Policy,
        path: PathBuf,
        limits: Limits,
    ) -> Self {
        Store {
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
        }
    }

    /// The database, reopened first if an I/O error has poisoned it (or a
    /// failed commit left it behind the log), and checkpointed first if a
    /// log append failed, so that the queue carries on once the fault (a
    /// full disk, a failing device) clears, without the caller reopening it.
    fn ready(&mut self) -> Result<&mut Database> {
        if self.suspect || self.behind {
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
                )
                .map_err(|e| Error::Io {
                    context: format!("reopen {} after an i/o error", self.path.display()),
                    source: std::io::Error::other(e),
                })?;
                tracing::warn!(path = %self.path.display(), "reopened after an i/o error");
                self.db = Some(db);
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
                checkpoint(db, &mut self.log, self.limits, false, None, true)
            }))
            .unwrap_or_else(|_| Err(panic_error("a checkpoint")));
            if let Err(e) = done {
                self.suspect = true;
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
            checkpoint(db, &mut self.log, self.limits, false, None, false)
        }))
        .unwrap_or_else(|_| Err(panic_error("a checkpoint")));
        match done {
            Ok(_) => self.checkpointed = std::time::Instant::now(),
            Err(e) => {
                tracing::warn!(error = %e, "checkpoint failed; the queue file is reopened before the next operation");
                self.behind = true;
            }
        }
    }
}

/// The writer loop. Returns when every handle is gone or on `Close`.
#[allow(clippy::too_many_arguments)]
pub(super) fn run(
    db: Database,
    build: Build,
    log: Log,
    policy: redo::Policy,
    path: PathBuf,
    mut rx: mpsc::UnboundedReceiver<Msg>,
    limits: Limits,
    wake: Arc<Notify>,
    claim: PathClaim,
) {
    let mut store = Store::new(db, build, log, policy, path, limits);
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

/// `compact`: checkpoint first (redb compacts durable state only), then
/// let redb move pages to the front of the file and shrink it.
fn compact(store: &mut Store) -> Result<bool> {
    let limits = store.limits;
    store.ready()?;
    let Store { db, log, .. } = store;
    let db = db
        .as_mut()
        .ok_or_else(|| Error::corrupt("the database is not open"))?;
    match catch_unwind(AssertUnwindSafe(|| -> Result<bool> {
        checkpoint(db, log, limits, false, None, false)?;
        db.compact().ctx("compact")
    })) {
        Ok(r) => r,
        Err(_) => Err(panic_error("compact")),
    }
}

/// At close: a last checkpoint, so that the file alone holds the whole
/// queue and the next open replays nothing, with the latest time this
/// process saw (if the file's is older), so that a clock step back while
/// the process is down is measured from it at the next open (SPEC 8, Clock
/// steps). Skipped when neither is needed (an idle close writes nothing).
/// Best effort: after a failure the next open replays the log.
fn close_checkpoint(store: &mut Store) {
    let (latest, limits) = (store.latest, store.limits);
    if store.ready().is_err() {
        return;
    }
    let Store {
        db: Some(db), log, ..
    } = store
    else {
        return;
    };
    let saved = catch_unwind(AssertUnwindSafe(|| {
        checkpoint(db, log, limits, false, Some(latest), false)
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
            let log = &mut store.log;
            match catch_unwind(AssertUnwindSafe(|| execute(db, log, limits, &ops, latest))) {
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
        // Only after a write, so that an idle queue writes nothing (SPEC 8,
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

/// The writer without its thread (test support, feature `testing`; see
/// `EmbeddedOptions::inline_writer`): the caller's thread runs each
/// operation as a batch of one, through the same [`run_batch`] and
/// checkpoints as the writer thread, so a fuzz execution pays no thread
/// start and no two thread hand-offs per call. Dropping it closes the
/// queue as the thread does when the last handle goes.
#[cfg(feature = "testing")]
pub(super) struct Inline {
    /// `None` once closed.
    open: Option<(Store, PathClaim)>,
    wake: Arc<Notify>,
}

#[cfg(feature = "testing")]
impl Inline {
    /// Open (with recovery, as the writer thread does) on this thread.
    ///
    /// # Errors
    ///
    /// As [`open_database`], and `Io` if the redo log cannot be opened.
    pub(super) fn open(
        mut build: Build,
        open_log: impl FnOnce() -> std::io::Result<Box<dyn redo::LogFile>>,
        policy: redo::Policy,
        path: PathBuf,
        limits: Limits,
        wake: Arc<Notify>,
        claim: PathClaim,
    ) -> Result<Self> {
        let mut log = open_log().map(Log::new).map_err(|source| Error::Io {
            context: format!("open the redo log of {}", path.display()),
            source,
        })?;
        let db = open_database(&mut build, &mut log, &path, limits)?;
        Ok(Inline {
            open: Some((Store::new(db, build, log, policy, path, limits), claim)),
            wake,
        })
    }

    /// Run one request and answer it (`Closed` once closed, as a send to a
    /// finished writer thread gives).
    pub(super) fn call(&mut self, req: Request) {
        match &mut self.open {
            Some((store, _)) => {
                run_batch(store, &self.wake, vec![req]);
            }
            None => {
                let _ = req.reply.send(Err(Error::Closed));
            }
        }
    }

    /// As the writer thread's `Compact` message.
    ///
    /// # Errors
    ///
    /// `Closed` once closed; as `compact` otherwise.
    pub(super) fn compact(&mut self) -> Result<bool> {
        let (store, _) = self.open.as_mut().ok_or(Error::Closed)?;
        let result = compact(store);
        store.note(&result);
        result
    }

    /// As the writer thread's end: the last checkpoint, then the file is
    /// let go. Later calls get `Closed`.
    pub(super) fn close(&mut self) {
        if let Some((mut store, claim)) = self.open.take() {
            close_checkpoint(&mut store);
            drop(store);
            drop(claim);
        }
    }
}

#[cfg(feature = "testing")]
impl std::fmt::Debug for Inline {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Inline")
            .field("open", &self.open.is_some())
            .finish_non_exhaustive()
    }
}

#[cfg(feature = "testing")]
impl Drop for Inline {
    fn drop(&mut self) {
        self.close();
    }
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
        let Err(e) = crate::codec::encode(&Unencodable) else {
            panic!("an unencodable record encoded");
        };
        assert!(!changed_nothing(&e), "{e:?} would be committed around");
    }
}
