//! [`MemoryQueue`]: the reference model behind a mutex, with the queue's clock
//! and the wake-ups of blocking claims and outcome waits.

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use super::Model;
use crate::clock::{SharedClock, SystemClock};
use crate::config::Config;
use crate::error::{Error, Result};
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::queue::{Backend, WorkQueue, dispatch};
use crate::request::{Reply, Request};

#[derive(Debug)]
struct Shared {
    model: Mutex<Model>,
    wake: Notify,
    /// Woken by every outcome and chunk: what `wait_outcome` and
    /// `wait_chunks` wait on.
    finished: Notify,
    clock: SharedClock,
    closed: AtomicBool,
    max_deliveries: u32,
}

/// The memory backend: [`Model`] behind a mutex, with the queue's clock and
/// wake-ups for blocking claims. Clones share one queue.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, WorkQueue};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = MemoryQueue::new(Config::default());
/// queue.add(NewItem::new(b"job".to_vec())).await?;
/// let claimed = queue.claim(1, Duration::ZERO, ClaimFrom::All).await?;
/// queue.ack(claimed[0].receipt).await?;
/// assert_eq!(queue.stats().await?.pending, 0);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MemoryQueue {
    shared: Arc<Shared>,
}

impl MemoryQueue {
    /// A new empty queue. Uses `config`'s clock, or the system clock.
    pub fn new(config: Config) -> Self {
        let clock = config
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let max_deliveries = config.max_deliveries;
        MemoryQueue {
            shared: Arc::new(Shared {
                max_deliveries,
                model: Mutex::new(Model::new(config)),
                wake: Notify::new(),
                finished: Notify::new(),
                clock,
                closed: AtomicBool::new(false),
            }),
        }
    }

    fn now(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // A poisoned lock means a panic inside the model; the model's state
        // changes are each completed before any call that could panic, so the
        // state is still consistent and can be used.
        self.shared.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Run `f` on the model at the queue's time (SPEC 3, Clock steps): the
    /// clock read under the lock, so that operations run in the order of
    /// their readings, and raised to the latest time the queue has seen if
    /// it is below it by no more than the tolerance. Read before the lock,
    /// a claim that read 639 ms and waited for the lock behind a promotion
    /// at 640 ms handed out a timer due at 640 ms at 639 ms.
    fn with<T>(&self, f: impl FnOnce(&mut Model, u64) -> T) -> T {
        let mut m = self.lock();
        let now = m.observe_clock_at(self.now());
        f(&mut m, now)
    }

    /// `Error::Closed` once `close()` was called on this queue.
    fn live(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// A pending item left: a flow at its concurrency cap may run again
    /// (SPEC 3, Flow limits), so wake the blocked claims.
    fn freed(&self) {
        if self.lock().has_limits() {
            self.changed();
        }
    }

    fn changed(&self) {
        self.shared.wake.notify_waiters();
    }

    fn finished(&self) {
        self.shared.finished.notify_waiters();
    }

    /// `r`, after waking what an item ended as cancelled wakes when it is
    /// `Cancelled` (SPEC 3, Cancelling: the holder's call ended the item).
    fn fenced<T>(&self, r: Result<T>) -> Result<T> {
        if matches!(r, Err(Error::Cancelled { .. })) {
            self.freed();
            self.finished();
        }
        r
    }

    /// Wait up to `wait` until `look` finds something, woken by
    /// [`MemoryQueue::finished`]; `Error::Closed` once the queue is closed.
    async fn wait_for<T>(
        &self,
        wait: Duration,
        look: impl Fn(&Model, u64) -> Option<T>,
    ) -> Result<Option<T>> {
        let look = &look;
        crate::clock::wait_notified(&self.shared.finished, wait, move || async move {
            self.live()?;
            Ok(self.with(|m, now| look(m, now)))
        })
        .await
    }

    /// A copy of the model's current state (test support, feature
    /// `testing`: for tests comparing backends).
    #[cfg(feature = "testing")]
    pub fn snapshot(&self) -> Model {
        self.lock().clone()
    }
}

impl WorkQueue for MemoryQueue {
    fn call(&self, request: Request) -> impl Future<Output = Result<Reply>> + Send {
        dispatch(self, request)
    }

    fn max_deliveries(&self) -> u32 {
        self.shared.max_deliveries
    }
}

impl Backend for MemoryQueue {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.live()?;
        let mut v = self.with(|m, now| m.add_many(vec![(item, None)], now))?;
        self.changed();
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        self.live()?;
        let out =
            self.with(|m, now| m.add_many(items.into_iter().map(|i| (i, None)).collect(), now))?;
        self.changed();
        Ok(out)
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.live()?;
        let mut v = self.with(|m, now| m.add_many(vec![(item, Some(not_before_ms))], now))?;
        self.changed();
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        self.live()?;
        Ok(self.with(|m, _| m.next_due()))
    }

    async fn promote_due(&self) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.promote_due(now));
        if n > 0 {
            self.changed();
        }
        Ok(n)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let deadline = crate::clock::wait_deadline(wait);
        let mut due = crate::clock::DueTimer::new();
        loop {
            self.live()?;
            let notified = self.shared.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = self.with(|m, now| m.claim(count, from, now))?;
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            let now = self.now();
            let next_due = self.lock().next_wake(now);
            let timer = due.until(&*self.shared.clock, next_due);
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
        self.live()?;
        self.fenced(self.with(|m, now| m.ack_with_result(receipt, result, now)))?;
        self.freed();
        self.finished();
        Ok(())
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        self.live()?;
        Ok(self.with(|m, now| m.outcome(id, now)))
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        self.wait_for(wait, |m, now| m.outcome(id, now)).await
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        self.live()?;
        self.fenced(self.with(|m, now| m.set_progress(receipt, progress, now)))?;
        self.finished();
        Ok(())
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        self.live()?;
        let seq = self.fenced(self.with(|m, now| m.send_chunk(receipt, chunk, now)))?;
        self.finished();
        Ok(seq)
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        self.live()?;
        Ok(self.with(|m, now| m.progress(id, now)))
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let got = self
            .wait_for(wait, |m, now| {
                let got = m.chunks_after(id, after_seq, now);
                (!got.is_empty() || m.outcome(id, now).is_some()).then_some(got)
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.ack_batch(&receipts, now));
        self.freed();
        self.finished();
        Ok(n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        self.live()?;
        self.fenced(self.with(|m, now| m.touch(&receipts, now)))
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        self.live()?;
        let out = self.fenced(self.with(|m, now| m.retry(receipt, not_before_ms, now)))?;
        self.changed();
        self.finished();
        Ok(out)
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        self.live()?;
        self.fenced(self.with(|m, now| m.release(receipt, not_before_ms, now)))?;
        self.changed();
        Ok(())
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        self.live()?;
        self.fenced(self.with(|m, now| m.dead_letter(receipt, reason, now)))?;
        self.freed();
        self.finished();
        Ok(())
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        self.live()?;
        let out = self.with(|m, now| m.reclaim(min_idle, count, now))?;
        self.freed();
        self.finished();
        Ok(out)
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        self.live()?;
        self.with(|m, _| m.pause(flow))
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.resume(flow, now))?;
        self.changed();
        Ok(n)
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        self.live()?;
        self.fenced(self.with(|m, now| m.park(receipt, now)))?;
        self.freed();
        Ok(())
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        self.live()?;
        self.with(|m, now| m.step(flow, now))
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        self.live()?;
        self.with(|m, _| m.clear_flow(flow))
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        self.live()?;
        Ok(self.with(|m, _| m.parked(flow)))
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        self.live()?;
        Ok(self.with(|m, _| m.paused_flows()))
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.set_flow_limit(flow, limit, now))?;
        self.changed();
        Ok(())
    }

    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        self.live()?;
        let d = crate::config::ms(duration);
        self.with(|m, now| m.back_off(flow, d, now))?;
        self.changed();
        Ok(())
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        self.live()?;
        Ok(self.with(|m, now| m.flow_limits(now)))
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.mark_done(id, step, now));
        Ok(())
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        self.live()?;
        Ok(self.with(|m, now| m.was_done(id, step, now)))
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        self.live()?;
        Ok(self.with(|m, _| m.dead_letters(count)))
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        self.live()?;
        let ok = self.with(|m, now| m.redrive(id, now));
        if ok {
            self.changed();
        }
        Ok(ok)
    }

    async fn promote(&self, id: u64) -> Result<bool> {
        self.live()?;
        let ok = self.with(|m, now| m.promote(id, now));
        if ok {
            self.changed();
        }
        Ok(ok)
    }

    async fn remove(&self, id: u64) -> Result<bool> {
        self.live()?;
        self.with(|m, now| m.remove(id, now))
    }

    async fn update(&self, id: u64, update: ItemUpdate) -> Result<bool> {
        self.live()?;
        let ok = self.with(|m, now| m.update(id, &update, now))?;
        if ok {
            // It may have become due, or its timer moved.
            self.changed();
        }
        Ok(ok)
    }

    async fn cancel(&self, id: u64) -> Result<CancelOutcome> {
        self.live()?;
        let out = self.with(|m, now| m.cancel(id, now))?;
        if out != CancelOutcome::NotFound {
            // An ended item frees a held slot and has an outcome; a marked
            // one wakes `wait_cancelled`, which waits on `finished` too.
            self.freed();
            self.finished();
        }
        Ok(out)
    }

    async fn wait_cancelled(&self, ids: Vec<u64>, wait: Duration) -> Result<Vec<u64>> {
        let got = self
            .wait_for(wait, |m, _| {
                let marked = m.cancelled_among(&ids);
                (!marked.is_empty()).then_some(marked)
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        self.live()?;
        Ok(self.with(|m, _| m.purge_dead_letters()))
    }

    async fn stats(&self) -> Result<Stats> {
        self.live()?;
        Ok(self.with(|m, now| m.stats(now)))
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        self.live()?;
        Ok(self.with(|m, now| m.backlog_by_flow(sample, now)))
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        self.live()?;
        Ok(self.with(|m, now| m.peek(count, now)))
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        self.live()?;
        self.with(|m, now| m.list(&query, now))
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        self.live()?;
        Ok(self.with(|m, now| m.find(id, now)))
    }

    async fn now_ms(&self) -> Result<u64> {
        self.live()?;
        Ok(self.now())
    }

    async fn schedule_load(
        &self,
        scan: crate::schedule::fire::ScheduleScan,
    ) -> Result<crate::schedule::fire::ScheduleRows> {
        self.live()?;
        Ok(self.with(|m, _| m.schedule_load(&scan)))
    }

    async fn schedule_swap(
        &self,
        swap: crate::schedule::fire::ScheduleSwap,
    ) -> Result<Option<Vec<u64>>> {
        self.live()?;
        let adds = !swap.items.is_empty();
        let out = self.with(|m, now| m.schedule_swap(swap, now))?;
        if adds && out.is_some() {
            self.changed();
        }
        Ok(out)
    }

    async fn close(&self) -> Result<()> {
        self.shared.closed.store(true, Ordering::Release);
        // A claim waiting for work wakes up and sees the queue closed.
        self.changed();
        self.finished();
        Ok(())
    }
}
