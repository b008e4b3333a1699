//! The `embedded` backend: one redb file on local disk, crash-safe.
//!
//! One writer thread owns the file and runs every operation; concurrent
//! callers' operations share one transaction and one fsync (group commit).
//! Each item is one record plus an entry in the index table of its state,
//! so a state move is one transaction; every `Ok` is on disk in the redo
//! log `NAME-redo` first (SPEC sections 4 and 6). The design (tables,
//! group commit, durability, crash recovery, disk faults, read-only
//! inspection, store and forward, damaged files) is in docs/DESIGN.md,
//! section "Embedded file"; the redo log's own is in module `redo`.
//!
//! Files: this one has the queue handle and its `WorkQueue` methods;
//! `options` its settings, `open` the opening and the writer thread's start,
//! `create` how a new file is made crash-safely, `writer` the writer thread,
//! `redo` the log, `tables` the state machine on the tables, `codec` the
//! versioned records, `migrate` the schema migrations, `read_only` the
//! storage of read-only handles, `audit` the test support.
pub(crate) mod codec;
mod create;
pub(crate) mod migrate;
mod open;
mod opening;
mod options;
mod read_only;
mod redo;
mod tables;
mod writer;

pub use options::EmbeddedOptions;

#[cfg(feature = "testing")]
pub(crate) use open::opened_once;
pub(crate) use redo::LogFile;

use std::collections::BTreeMap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, mpsc, oneshot};

use crate::clock::SharedClock;
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::queue::{Backend, WorkQueue, dispatch};
use crate::request::{Reply as QueueReply, Request as QueueRequest};
use writer::{Msg, Op, Reply, Request};

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

impl EmbeddedQueue {
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

    async fn submit(&self, op: Op) -> Result<Reply> {
        if !op.is_read() {
            self.writable(op.name())?;
        }
        let (reply, rx) = oneshot::channel();
        let now = self.inner.clock.now_ms();
        self.inner
            .tx
            .send(Msg::Req(Request { op, now, reply }))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }
}

fn unexpected(reply: Reply) -> Error {
    Error::corrupt(format!("writer answered with the wrong shape: {reply:?}"))
}

macro_rules! expect_reply {
    ($self:ident, $op:expr, $pat:pat => $out:expr) => {
        match $self.submit($op).await? {
            $pat => Ok($out),
            other => Err(unexpected(other)),
        }
    };
}

// After the macro, which they use.
#[cfg(feature = "testing")]
mod audit;
#[cfg(feature = "forward")]
mod forward;

impl EmbeddedQueue {
    /// Submit `op`, a call a holder makes with its receipt. When it is
    /// answered `Cancelled` (SPEC 3, Cancelling: the item is marked, and
    /// the call changed nothing), end the item by a second operation and
    /// answer `Cancelled`; should that fail, the mark stays, and the next
    /// call or a reclaim ends the item.
    async fn fenced(&self, op: Op) -> Result<Reply> {
        match self.submit(op).await {
            Err(Error::Cancelled {
                id,
                delivery,
                lease,
            }) => {
                let r = Receipt {
                    id,
                    delivery,
                    lease,
                };
                if let Err(e) = self.submit(Op::EndCancelled(r)).await {
                    tracing::warn!(id, error = %e, "a cancelled item could not be ended yet");
                }
                Err(Error::cancelled(&r))
            }
            other => other,
        }
    }
}

impl WorkQueue for EmbeddedQueue {
    fn call(&self, request: QueueRequest) -> impl Future<Output = Result<QueueReply>> + Send {
        dispatch(self, request)
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries
    }
}

impl Backend for EmbeddedQueue {
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

    async fn promote(&self, id: u64) -> Result<bool> {
        expect_reply!(self, Op::PromoteId(id), Reply::Bool(b) => b)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let deadline = crate::clock::wait_deadline(wait);
        let mut due = crate::clock::DueTimer::new();
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
            let timer = due.until(&*self.inner.clock, next_due);
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = timer => due.fired(),
            }
        }
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        Backend::ack_with_result(self, receipt, Vec::new()).await
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        match self.fenced(Op::Ack(receipt, result)).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        expect_reply!(self, Op::Outcome(id), Reply::Outcome(o) => o)
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        // Every committed write wakes `wake`; an ack is one.
        crate::clock::wait_notified(&self.inner.wake, wait, || Backend::outcome(self, id)).await
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        match self.fenced(Op::SetProgress(receipt, progress)).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        match self.fenced(Op::SendChunk(receipt, chunk)).await? {
            Reply::Count(n) => Ok(n),
            other => Err(unexpected(other)),
        }
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
        match self.fenced(Op::Touch(receipts)).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        match self.fenced(Op::Retry(receipt, not_before_ms)).await? {
            Reply::Retry(o) => Ok(o),
            other => Err(unexpected(other)),
        }
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        match self.fenced(Op::Release(receipt, not_before_ms)).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        match self
            .fenced(Op::DeadLetter(receipt, reason.to_string()))
            .await?
        {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
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
        match self.fenced(Op::Park(receipt)).await? {
            Reply::Unit => Ok(()),
            other => Err(unexpected(other)),
        }
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

    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        expect_reply!(self, Op::BackOff(flow.to_string(), ms(duration)), Reply::Unit => ())
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

    async fn remove(&self, id: u64) -> Result<bool> {
        expect_reply!(self, Op::Remove(id), Reply::Bool(b) => b)
    }

    async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        expect_reply!(self, Op::Cancel(id), Reply::Cancel(c) => c)
    }

    async fn update(&self, id: u64, update: ItemUpdate) -> Result<bool> {
        expect_reply!(self, Op::Update(id, update), Reply::Bool(b) => b)
    }

    async fn wait_cancelled(&self, ids: Vec<u64>, wait: Duration) -> Result<Vec<u64>> {
        // Every committed write wakes `wake`; a cancel mark is one.
        let ids = &ids;
        let got = crate::clock::wait_notified(&self.inner.wake, wait, || async move {
            let marked = expect_reply!(self, Op::Cancelling(ids.clone()), Reply::Ids(v) => v)?;
            Ok((!marked.is_empty()).then_some(marked))
        })
        .await?;
        Ok(got.unwrap_or_default())
    }

    async fn schedule_load(
        &self,
        scan: crate::schedule::fire::ScheduleScan,
    ) -> Result<crate::schedule::fire::ScheduleRows> {
        expect_reply!(self, Op::ScheduleLoad(scan), Reply::Schedules(rows) => rows)
    }

    async fn schedule_swap(
        &self,
        swap: crate::schedule::fire::ScheduleSwap,
    ) -> Result<Option<Vec<u64>>> {
        expect_reply!(self, Op::ScheduleSwap(swap), Reply::Swapped(ids) => ids)
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
        // (SPEC section 3, Closing): `closing` is set by `close` on any clone.
        if self.inner.closing.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(self.inner.clock.now_ms())
    }

    async fn compact(&self) -> Result<bool> {
        self.writable("compact")?;
        let (reply, rx) = oneshot::channel();
        self.inner
            .tx
            .send(Msg::Compact(reply))
            .map_err(|_| Error::Closed)?;
        rx.await.map_err(|_| Error::Closed)?
    }

    async fn close(&self) -> Result<()> {
        self.inner.closing.store(true, Ordering::Release);
        let (reply, rx) = oneshot::channel();
        if self.inner.tx.send(Msg::Close(reply)).is_ok() {
            let _ = rx.await;
        }
        // Claims and outcome waits blocked on other clones wake up, ask the
        // writer again and get `Closed`, rather than sleep out their wait
        // (SPEC section 3, Closing).
        self.inner.wake.notify_waiters();
        Ok(())
    }
}
