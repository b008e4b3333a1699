//! [`MeteredQueue`]: any queue, recording what it does through the
//! [`metrics`](https://docs.rs/metrics) facade (feature `metrics`, SPEC
//! 12.3). Whatever recorder the process installs (a Prometheus exporter,
//! StatsD, ...) gets the same series `workjournal serve --http` exposes at
//! `/metrics`; without a recorder the facade costs next to nothing.
//!
//! Series (Prometheus names; units in the names, counters end in `_total`):
//!
//! | name | kind | labels | what |
//! |---|---|---|---|
//! | `workjournal_operations_total` | counter | `op`, `outcome` | calls by operation and result (`ok` or the error kind: `full`, `lease_lost`, `invalid_input`, `closed`, `backend`, `io`, `storage`, `decode`, `corrupt`, `locked`) |
//! | `workjournal_operation_duration_seconds` | histogram | `op` | how long each call took |
//! | `workjournal_items_added_total` | counter | | items journaled (duplicates not counted) |
//! | `workjournal_items_claimed_total` | counter | | items handed out by claims |
//! | `workjournal_items_acked_total` | counter | | items acknowledged |
//! | `workjournal_items_failed_total` | counter | | failed attempts: retries and dead letters |
//! | `workjournal_items` | gauge | `state` | items per state at the last `stats` (`backlog` = ready, due lane included; `due`, `pending`, `delayed`, `parked`, `dead_letter`) |
//! | `workjournal_dead_letters_dropped_total` | counter | | dead letters dropped past `dead_letter_cap`, at the last `stats` |
//! | `workjournal_oldest_pending_age_seconds` | gauge | | age of the oldest pending claim at the last `stats` (0 when none) |
//! | `workjournal_forward_lag_items` | gauge | `target` | items waiting to be forwarded ([`record_forward_lag`]) |

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use crate::browse::{ItemPage, ListQuery, ListedItem};
use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
use crate::outcome::{Chunk, Outcome};
use crate::queue::WorkQueue;

/// `workjournal_operations_total{op, outcome}`.
pub const OPERATIONS: &str = "workjournal_operations_total";
/// `workjournal_operation_duration_seconds{op}`.
pub const OPERATION_DURATION: &str = "workjournal_operation_duration_seconds";
/// `workjournal_items_added_total`.
pub const ADDED: &str = "workjournal_items_added_total";
/// `workjournal_items_claimed_total`.
pub const CLAIMED: &str = "workjournal_items_claimed_total";
/// `workjournal_items_acked_total`.
pub const ACKED: &str = "workjournal_items_acked_total";
/// `workjournal_items_failed_total`.
pub const FAILED: &str = "workjournal_items_failed_total";
/// `workjournal_items{state}`.
pub const ITEMS: &str = "workjournal_items";
/// `workjournal_dead_letters_dropped_total`.
pub const DEAD_LETTERS_DROPPED: &str = "workjournal_dead_letters_dropped_total";
/// `workjournal_oldest_pending_age_seconds`.
pub const OLDEST_PENDING_AGE: &str = "workjournal_oldest_pending_age_seconds";
/// `workjournal_forward_lag_items{target}`.
pub const FORWARD_LAG: &str = "workjournal_forward_lag_items";

/// The `outcome` label of an error (the wire's error kinds, SPEC 10).
fn outcome_of(e: &Error) -> &'static str {
    match e {
        Error::Full { .. } => "full",
        Error::LeaseLost { .. } => "lease_lost",
        Error::Locked { .. } => "locked",
        Error::Corrupt { .. } => "corrupt",
        Error::Io { .. } => "io",
        Error::Storage { .. } => "storage",
        Error::Backend { .. } => "backend",
        Error::Decode { .. } => "decode",
        Error::InvalidInput(_) => "invalid_input",
        Error::Closed => "closed",
    }
}

async fn timed<T>(op: &'static str, call: impl Future<Output = Result<T>>) -> Result<T> {
    let start = Instant::now();
    let r = call.await;
    let outcome = match &r {
        Ok(_) => "ok",
        Err(e) => outcome_of(e),
    };
    metrics::counter!(OPERATIONS, "op" => op, "outcome" => outcome).increment(1);
    metrics::histogram!(OPERATION_DURATION, "op" => op).record(start.elapsed().as_secs_f64());
    r
}

/// Set the state gauges from `stats` (what [`MeteredQueue::stats`] does
/// with every answer).
pub fn record_stats(s: &Stats) {
    let ready = s.backlog;
    for (state, n) in [
        ("backlog", ready),
        ("due", s.due),
        ("pending", s.pending),
        ("delayed", s.delayed),
        ("parked", s.parked),
        ("dead_letter", s.dead_letters),
    ] {
        metrics::gauge!(ITEMS, "state" => state).set(n as f64);
    }
    metrics::counter!(DEAD_LETTERS_DROPPED).absolute(s.dead_letters_dropped);
    let age = s.oldest_pending_age_ms.unwrap_or(0) as f64 / 1000.0;
    metrics::gauge!(OLDEST_PENDING_AGE).set(age);
}

/// The hook for store and forward (SPEC section 11): set how many items
/// wait to be handed over to `target`, e.g. from
/// `EmbeddedQueue::forward_lag` after each round.
pub fn record_forward_lag(target: &str, items: u64) {
    metrics::gauge!(FORWARD_LAG, "target" => target.to_string()).set(items as f64);
}

/// What a [`MeteredQueue`] has seen since it was made, as plain numbers
/// (for a dashboard's throughput chart; the facade cannot be read back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Totals {
    /// Items journaled through this handle (duplicates not counted).
    pub added: u64,
    /// Items acknowledged through this handle.
    pub acked: u64,
    /// Failed attempts through this handle: retries, dead letters, and
    /// stale claims a reclaim dead-lettered.
    pub failed: u64,
}

#[derive(Debug, Default)]
struct Counts {
    added: AtomicU64,
    acked: AtomicU64,
    failed: AtomicU64,
}

/// A queue that records every call through the `metrics` facade (SPEC
/// 12.3): series named in the [module docs](self). Cheap to clone; clones
/// share their [`Totals`].
///
/// # Examples
///
/// ```
/// use workjournal::{MemoryQueue, MeteredQueue, NewItem, WorkQueue};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = MeteredQueue::new(MemoryQueue::new(Default::default()));
/// queue.add(NewItem::new(b"hello".to_vec())).await?;
/// assert_eq!(queue.totals().added, 1);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MeteredQueue<Q> {
    inner: Q,
    counts: Arc<Counts>,
}

impl<Q: WorkQueue> MeteredQueue<Q> {
    /// Record the calls made on `inner`.
    pub fn new(inner: Q) -> Self {
        MeteredQueue {
            inner,
            counts: Arc::new(Counts::default()),
        }
    }

    /// The queue inside.
    pub fn inner(&self) -> &Q {
        &self.inner
    }

    /// Items added, acked and failed through this handle and its clones.
    pub fn totals(&self) -> Totals {
        Totals {
            added: self.counts.added.load(Ordering::Relaxed),
            acked: self.counts.acked.load(Ordering::Relaxed),
            failed: self.counts.failed.load(Ordering::Relaxed),
        }
    }

    fn note_added(&self, n: u64) {
        self.counts.added.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(ADDED).increment(n);
    }

    fn note_acked(&self, n: u64) {
        self.counts.acked.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(ACKED).increment(n);
    }

    fn note_failed(&self, n: u64) {
        self.counts.failed.fetch_add(n, Ordering::Relaxed);
        metrics::counter!(FAILED).increment(n);
    }
}

impl<Q: WorkQueue> WorkQueue for MeteredQueue<Q> {
    async fn add(&self, item: NewItem) -> Result<Added> {
        let r = timed("add", self.inner.add(item)).await;
        if let Ok(a) = &r
            && !a.duplicate
        {
            self.note_added(1);
        }
        r
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        let r = timed("add_batch", self.inner.add_batch(items)).await;
        if let Ok(v) = &r {
            self.note_added(v.iter().filter(|a| !a.duplicate).count() as u64);
        }
        r
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        let r = timed("add_delayed", self.inner.add_delayed(item, not_before_ms)).await;
        if let Ok(a) = &r
            && !a.duplicate
        {
            self.note_added(1);
        }
        r
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        timed("next_due", self.inner.next_due()).await
    }

    async fn promote_due(&self) -> Result<u64> {
        timed("promote_due", self.inner.promote_due()).await
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let r = timed("claim", self.inner.claim(count, wait, from)).await;
        if let Ok(v) = &r {
            metrics::counter!(CLAIMED).increment(v.len() as u64);
        }
        r
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        let r = timed("ack", self.inner.ack(receipt)).await;
        if r.is_ok() {
            self.note_acked(1);
        }
        r
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        let r = timed(
            "ack_with_result",
            self.inner.ack_with_result(receipt, result),
        )
        .await;
        if r.is_ok() {
            self.note_acked(1);
        }
        r
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        timed("outcome", self.inner.outcome(id)).await
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        timed("wait_outcome", self.inner.wait_outcome(id, wait)).await
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        timed("set_progress", self.inner.set_progress(receipt, progress)).await
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        timed("send_chunk", self.inner.send_chunk(receipt, chunk)).await
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        timed("progress", self.inner.progress(id)).await
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        timed("wait_chunks", self.inner.wait_chunks(id, after_seq, wait)).await
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        let r = timed("ack_batch", self.inner.ack_batch(receipts)).await;
        if let Ok(n) = &r {
            self.note_acked(*n);
        }
        r
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        timed("touch", self.inner.touch(receipts)).await
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        let r = timed("retry", self.inner.retry(receipt, not_before_ms)).await;
        if r.is_ok() {
            self.note_failed(1);
        }
        r
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        timed("release", self.inner.release(receipt, not_before_ms)).await
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        let r = timed("dead_letter", self.inner.dead_letter(receipt, reason)).await;
        if r.is_ok() {
            self.note_failed(1);
        }
        r
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        let r = timed("reclaim", self.inner.reclaim(min_idle, count)).await;
        if let Ok(rc) = &r {
            self.note_failed(rc.dead_lettered.len() as u64);
        }
        r
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        timed("pause", self.inner.pause(flow)).await
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        timed("resume", self.inner.resume(flow)).await
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        timed("park", self.inner.park(receipt)).await
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        timed("step", self.inner.step(flow)).await
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        timed("clear_flow", self.inner.clear_flow(flow)).await
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        timed("parked", self.inner.parked(flow)).await
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        timed("paused_flows", self.inner.paused_flows()).await
    }

    async fn set_flow_limit(&self, flow: &str, limit: crate::FlowLimit) -> Result<()> {
        timed("set_flow_limit", self.inner.set_flow_limit(flow, limit)).await
    }

    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        timed("back_off", self.inner.back_off(flow, duration)).await
    }

    async fn flow_limits(&self) -> Result<Vec<crate::FlowLimits>> {
        timed("flow_limits", self.inner.flow_limits()).await
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        timed("mark_done", self.inner.mark_done(id, step)).await
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        timed("was_done", self.inner.was_done(id, step)).await
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        timed("dead_letters", self.inner.dead_letters(count)).await
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        timed("redrive", self.inner.redrive(id)).await
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        timed("purge_dead_letters", self.inner.purge_dead_letters()).await
    }

    async fn stats(&self) -> Result<Stats> {
        let r = timed("stats", self.inner.stats()).await;
        if let Ok(s) = &r {
            record_stats(s);
        }
        r
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        timed("backlog_by_flow", self.inner.backlog_by_flow(sample)).await
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        timed("peek", self.inner.peek(count)).await
    }

    async fn list(&self, query: ListQuery) -> Result<ItemPage> {
        timed("list", self.inner.list(query)).await
    }

    async fn find(&self, id: u64) -> Result<Option<ListedItem>> {
        timed("find", self.inner.find(id)).await
    }

    async fn now_ms(&self) -> Result<u64> {
        timed("now", self.inner.now_ms()).await
    }

    async fn compact(&self) -> Result<bool> {
        timed("compact", self.inner.compact()).await
    }

    async fn close(&self) -> Result<()> {
        timed("close", self.inner.close()).await
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries()
    }
}
