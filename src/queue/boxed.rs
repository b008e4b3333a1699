//! The type-erased form of [`WorkQueue`]: [`BoxQueue`], a run-time choice of
//! backend behind one object-safe mirror of the trait.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use super::WorkQueue;
use crate::browse::{ItemPage, ListQuery, ListedItem};
use crate::error::Result;
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};

/// A boxed future, as the object-safe mirror of [`WorkQueue`] returns and the
/// test factories of `testing` take.
#[cfg_attr(not(feature = "testing"), allow(unreachable_pub))]
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The object-safe mirror of [`WorkQueue`], implemented for every
/// `WorkQueue`: what [`BoxQueue`] holds. Crate-private: `BoxQueue` is the
/// public face of a run-time choice of backend.
pub(crate) trait DynWorkQueue: Send + Sync {
    fn add<'a>(&'a self, item: NewItem) -> BoxFuture<'a, Result<Added>>;
    fn add_batch<'a>(&'a self, items: Vec<NewItem>) -> BoxFuture<'a, Result<Vec<Added>>>;
    fn add_delayed<'a>(&'a self, item: NewItem, not_before_ms: u64)
    -> BoxFuture<'a, Result<Added>>;
    fn next_due<'a>(&'a self) -> BoxFuture<'a, Result<Option<u64>>>;
    fn promote_due<'a>(&'a self) -> BoxFuture<'a, Result<u64>>;
    fn claim<'a>(
        &'a self,
        count: usize,
        wait: Duration,
        from: ClaimFrom,
    ) -> BoxFuture<'a, Result<Vec<Claimed>>>;
    fn ack<'a>(&'a self, receipt: Receipt) -> BoxFuture<'a, Result<()>>;
    fn ack_with_result<'a>(
        &'a self,
        receipt: Receipt,
        result: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>>;
    fn outcome<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<Outcome>>>;
    fn wait_outcome<'a>(
        &'a self,
        id: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>>>;
    fn set_progress<'a>(&'a self, receipt: Receipt, progress: Vec<u8>)
    -> BoxFuture<'a, Result<()>>;
    fn send_chunk<'a>(&'a self, receipt: Receipt, chunk: Vec<u8>) -> BoxFuture<'a, Result<u64>>;
    fn progress<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<Vec<u8>>>>;
    fn wait_chunks<'a>(
        &'a self,
        id: u64,
        after_seq: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Chunk>>>;
    fn ack_batch<'a>(&'a self, receipts: Vec<Receipt>) -> BoxFuture<'a, Result<u64>>;
    fn touch<'a>(&'a self, receipts: Vec<Receipt>) -> BoxFuture<'a, Result<()>>;
    fn retry<'a>(
        &'a self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> BoxFuture<'a, Result<RetryOutcome>>;
    fn release<'a>(&'a self, receipt: Receipt, not_before_ms: u64) -> BoxFuture<'a, Result<()>>;
    fn dead_letter<'a>(&'a self, receipt: Receipt, reason: &'a str) -> BoxFuture<'a, Result<()>>;
    fn reclaim<'a>(&'a self, min_idle: Duration, count: usize) -> BoxFuture<'a, Result<Reclaimed>>;
    fn pause<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<()>>;
    fn resume<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>>;
    fn park<'a>(&'a self, receipt: Receipt) -> BoxFuture<'a, Result<()>>;
    fn step<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<Option<Claimed>>>;
    fn clear_flow<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>>;
    fn parked<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>>;
    fn paused_flows<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>>>;
    fn set_flow_limit<'a>(&'a self, flow: &'a str, limit: FlowLimit) -> BoxFuture<'a, Result<()>>;
    fn back_off<'a>(&'a self, flow: &'a str, duration: Duration) -> BoxFuture<'a, Result<()>>;
    fn flow_limits<'a>(&'a self) -> BoxFuture<'a, Result<Vec<FlowLimits>>>;
    fn mark_done<'a>(&'a self, id: u64, step: &'a str) -> BoxFuture<'a, Result<()>>;
    fn was_done<'a>(&'a self, id: u64, step: &'a str) -> BoxFuture<'a, Result<bool>>;
    fn dead_letters<'a>(&'a self, count: usize) -> BoxFuture<'a, Result<Vec<DeadLetter>>>;
    fn redrive<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<bool>>;
    fn purge_dead_letters<'a>(&'a self) -> BoxFuture<'a, Result<u64>>;
    fn stats<'a>(&'a self) -> BoxFuture<'a, Result<Stats>>;
    fn backlog_by_flow<'a>(&'a self, sample: usize)
    -> BoxFuture<'a, Result<BTreeMap<String, u64>>>;
    fn peek<'a>(&'a self, count: usize) -> BoxFuture<'a, Result<Vec<Item>>>;
    fn list<'a>(&'a self, query: ListQuery) -> BoxFuture<'a, Result<ItemPage>>;
    fn find<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<ListedItem>>>;
    fn now_ms<'a>(&'a self) -> BoxFuture<'a, Result<u64>>;
    fn max_deliveries(&self) -> u32;
    fn compact<'a>(&'a self) -> BoxFuture<'a, Result<bool>>;
    fn close<'a>(&'a self) -> BoxFuture<'a, Result<()>>;
}

impl<Q: WorkQueue> DynWorkQueue for Q {
    fn add<'a>(&'a self, item: NewItem) -> BoxFuture<'a, Result<Added>> {
        Box::pin(WorkQueue::add(self, item))
    }
    fn add_batch<'a>(&'a self, items: Vec<NewItem>) -> BoxFuture<'a, Result<Vec<Added>>> {
        Box::pin(WorkQueue::add_batch(self, items))
    }
    fn add_delayed<'a>(
        &'a self,
        item: NewItem,
        not_before_ms: u64,
    ) -> BoxFuture<'a, Result<Added>> {
        Box::pin(WorkQueue::add_delayed(self, item, not_before_ms))
    }
    fn next_due<'a>(&'a self) -> BoxFuture<'a, Result<Option<u64>>> {
        Box::pin(WorkQueue::next_due(self))
    }
    fn promote_due<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::promote_due(self))
    }
    fn claim<'a>(
        &'a self,
        count: usize,
        wait: Duration,
        from: ClaimFrom,
    ) -> BoxFuture<'a, Result<Vec<Claimed>>> {
        Box::pin(WorkQueue::claim(self, count, wait, from))
    }
    fn ack<'a>(&'a self, receipt: Receipt) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::ack(self, receipt))
    }
    fn ack_with_result<'a>(
        &'a self,
        receipt: Receipt,
        result: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::ack_with_result(self, receipt, result))
    }
    fn outcome<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<Outcome>>> {
        Box::pin(WorkQueue::outcome(self, id))
    }
    fn wait_outcome<'a>(
        &'a self,
        id: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Option<Outcome>>> {
        Box::pin(WorkQueue::wait_outcome(self, id, wait))
    }
    fn set_progress<'a>(
        &'a self,
        receipt: Receipt,
        progress: Vec<u8>,
    ) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::set_progress(self, receipt, progress))
    }
    fn send_chunk<'a>(&'a self, receipt: Receipt, chunk: Vec<u8>) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::send_chunk(self, receipt, chunk))
    }
    fn progress<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<Vec<u8>>>> {
        Box::pin(WorkQueue::progress(self, id))
    }
    fn wait_chunks<'a>(
        &'a self,
        id: u64,
        after_seq: u64,
        wait: Duration,
    ) -> BoxFuture<'a, Result<Vec<Chunk>>> {
        Box::pin(WorkQueue::wait_chunks(self, id, after_seq, wait))
    }
    fn ack_batch<'a>(&'a self, receipts: Vec<Receipt>) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::ack_batch(self, receipts))
    }
    fn touch<'a>(&'a self, receipts: Vec<Receipt>) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::touch(self, receipts))
    }
    fn retry<'a>(
        &'a self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> BoxFuture<'a, Result<RetryOutcome>> {
        Box::pin(WorkQueue::retry(self, receipt, not_before_ms))
    }
    fn release<'a>(&'a self, receipt: Receipt, not_before_ms: u64) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::release(self, receipt, not_before_ms))
    }
    fn dead_letter<'a>(&'a self, receipt: Receipt, reason: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::dead_letter(self, receipt, reason))
    }
    fn reclaim<'a>(&'a self, min_idle: Duration, count: usize) -> BoxFuture<'a, Result<Reclaimed>> {
        Box::pin(WorkQueue::reclaim(self, min_idle, count))
    }
    fn pause<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::pause(self, flow))
    }
    fn resume<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::resume(self, flow))
    }
    fn park<'a>(&'a self, receipt: Receipt) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::park(self, receipt))
    }
    fn step<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<Option<Claimed>>> {
        Box::pin(WorkQueue::step(self, flow))
    }
    fn clear_flow<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::clear_flow(self, flow))
    }
    fn parked<'a>(&'a self, flow: &'a str) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::parked(self, flow))
    }
    fn paused_flows<'a>(&'a self) -> BoxFuture<'a, Result<Vec<String>>> {
        Box::pin(WorkQueue::paused_flows(self))
    }
    fn set_flow_limit<'a>(&'a self, flow: &'a str, limit: FlowLimit) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::set_flow_limit(self, flow, limit))
    }
    fn back_off<'a>(&'a self, flow: &'a str, duration: Duration) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::back_off(self, flow, duration))
    }
    fn flow_limits<'a>(&'a self) -> BoxFuture<'a, Result<Vec<FlowLimits>>> {
        Box::pin(WorkQueue::flow_limits(self))
    }
    fn mark_done<'a>(&'a self, id: u64, step: &'a str) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::mark_done(self, id, step))
    }
    fn was_done<'a>(&'a self, id: u64, step: &'a str) -> BoxFuture<'a, Result<bool>> {
        Box::pin(WorkQueue::was_done(self, id, step))
    }
    fn dead_letters<'a>(&'a self, count: usize) -> BoxFuture<'a, Result<Vec<DeadLetter>>> {
        Box::pin(WorkQueue::dead_letters(self, count))
    }
    fn redrive<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<bool>> {
        Box::pin(WorkQueue::redrive(self, id))
    }
    fn purge_dead_letters<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::purge_dead_letters(self))
    }
    fn stats<'a>(&'a self) -> BoxFuture<'a, Result<Stats>> {
        Box::pin(WorkQueue::stats(self))
    }
    fn backlog_by_flow<'a>(
        &'a self,
        sample: usize,
    ) -> BoxFuture<'a, Result<BTreeMap<String, u64>>> {
        Box::pin(WorkQueue::backlog_by_flow(self, sample))
    }
    fn peek<'a>(&'a self, count: usize) -> BoxFuture<'a, Result<Vec<Item>>> {
        Box::pin(WorkQueue::peek(self, count))
    }
    fn list<'a>(&'a self, query: ListQuery) -> BoxFuture<'a, Result<ItemPage>> {
        Box::pin(WorkQueue::list(self, query))
    }
    fn find<'a>(&'a self, id: u64) -> BoxFuture<'a, Result<Option<ListedItem>>> {
        Box::pin(WorkQueue::find(self, id))
    }
    fn now_ms<'a>(&'a self) -> BoxFuture<'a, Result<u64>> {
        Box::pin(WorkQueue::now_ms(self))
    }
    fn max_deliveries(&self) -> u32 {
        WorkQueue::max_deliveries(self)
    }
    fn compact<'a>(&'a self) -> BoxFuture<'a, Result<bool>> {
        Box::pin(WorkQueue::compact(self))
    }
    fn close<'a>(&'a self) -> BoxFuture<'a, Result<()>> {
        Box::pin(WorkQueue::close(self))
    }
}

/// A queue whose backend is chosen at run time (the CLI picks it from
/// flags). Cheap to clone: clones share one handle (one consumer).
///
/// # Examples
///
/// ```
/// use workjournal::{BoxQueue, MemoryQueue, NewItem, WorkQueue};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = BoxQueue::new(MemoryQueue::new(Default::default()));
/// let added = queue.add(NewItem::new(b"hello".to_vec())).await?;
/// assert_eq!(added.id, 1);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Clone)]
pub struct BoxQueue {
    inner: Arc<dyn DynWorkQueue>,
}

impl std::fmt::Debug for BoxQueue {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BoxQueue").finish_non_exhaustive()
    }
}

impl BoxQueue {
    /// Erase the type of `queue`.
    pub fn new(queue: impl WorkQueue + 'static) -> Self {
        BoxQueue {
            inner: Arc::new(queue),
        }
    }
}

impl WorkQueue for BoxQueue {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.inner.add(item).await
    }
    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        self.inner.add_batch(items).await
    }
    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.inner.add_delayed(item, not_before_ms).await
    }
    async fn next_due(&self) -> Result<Option<u64>> {
        self.inner.next_due().await
    }
    async fn promote_due(&self) -> Result<u64> {
        self.inner.promote_due().await
    }
    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        self.inner.claim(count, wait, from).await
    }
    async fn ack(&self, receipt: Receipt) -> Result<()> {
        self.inner.ack(receipt).await
    }
    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        self.inner.ack_with_result(receipt, result).await
    }
    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        self.inner.outcome(id).await
    }
    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        self.inner.wait_outcome(id, wait).await
    }
    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        self.inner.set_progress(receipt, progress).await
    }
    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        self.inner.send_chunk(receipt, chunk).await
    }
    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        self.inner.progress(id).await
    }
    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        self.inner.wait_chunks(id, after_seq, wait).await
    }
    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        self.inner.ack_batch(receipts).await
    }
    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        self.inner.touch(receipts).await
    }
    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        self.inner.retry(receipt, not_before_ms).await
    }
    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        self.inner.release(receipt, not_before_ms).await
    }
    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        self.inner.dead_letter(receipt, reason).await
    }
    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        self.inner.reclaim(min_idle, count).await
    }
    async fn pause(&self, flow: &str) -> Result<()> {
        self.inner.pause(flow).await
    }
    async fn resume(&self, flow: &str) -> Result<u64> {
        self.inner.resume(flow).await
    }
    async fn park(&self, receipt: Receipt) -> Result<()> {
        self.inner.park(receipt).await
    }
    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        self.inner.step(flow).await
    }
    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        self.inner.clear_flow(flow).await
    }
    async fn parked(&self, flow: &str) -> Result<u64> {
        self.inner.parked(flow).await
    }
    async fn paused_flows(&self) -> Result<Vec<String>> {
        self.inner.paused_flows().await
    }
    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        self.inner.set_flow_limit(flow, limit).await
    }
    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        self.inner.back_off(flow, duration).await
    }
    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        self.inner.flow_limits().await
    }
    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        self.inner.mark_done(id, step).await
    }
    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        self.inner.was_done(id, step).await
    }
    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        self.inner.dead_letters(count).await
    }
    async fn redrive(&self, id: u64) -> Result<bool> {
        self.inner.redrive(id).await
    }
    async fn purge_dead_letters(&self) -> Result<u64> {
        self.inner.purge_dead_letters().await
    }
    async fn stats(&self) -> Result<Stats> {
        self.inner.stats().await
    }
    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        self.inner.backlog_by_flow(sample).await
    }
    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        self.inner.peek(count).await
    }
    async fn list(&self, query: ListQuery) -> Result<ItemPage> {
        self.inner.list(query).await
    }
    async fn find(&self, id: u64) -> Result<Option<ListedItem>> {
        self.inner.find(id).await
    }
    async fn now_ms(&self) -> Result<u64> {
        self.inner.now_ms().await
    }
    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries()
    }
    async fn compact(&self) -> Result<bool> {
        self.inner.compact().await
    }
    async fn close(&self) -> Result<()> {
        self.inner.close().await
    }
}
