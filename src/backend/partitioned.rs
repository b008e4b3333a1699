//! A queue over N partitions, each a queue of its own (SPEC 6.1,
//! "Partitioned queues"): past one Redis primary, N namespaces (one slot
//! each) let a Redis Cluster spread one logical queue over its primaries.
//!
//! # Routing
//!
//! - **Ids carry their partition.** Partition `p` gives out local ids 1,
//!   2, ...; the queue's id is `p << 48 | local`, so `p = id >> 48`. Every
//!   receipt, dead letter and done marker thus names its partition without
//!   a lookup, partition 0's ids are its own, and an id in a log says
//!   where its item lives. Ids increase within a partition, not across.
//! - **Adds by flow.** An item of a named flow goes to the partition its
//!   flow name hashes to (FNV-1a, the same in every process), so a flow's
//!   FIFO, its pause, its parked list and `step` stay on one partition. An
//!   item of the default flow with a dedup key goes where that key hashes
//!   (so a duplicate meets the first); others go round-robin. A batch whose
//!   items all go round-robin goes whole to one partition, so it stays all
//!   or none; a batch spanning partitions is split, all or none per
//!   partition.
//! - **Claims round-robin.** Each claim starts at the next partition and
//!   sweeps all of them until it has `count` items, so no partition starves
//!   behind a busy one. With nothing ready it waits on every partition at
//!   once and returns the first to answer.
//! - **Reads merge.** Stats are summed (the oldest pending age is the
//!   largest), dead letters merged newest first, peeks merged by id, paused
//!   flows unioned.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::Poll;
use std::time::Duration;

use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::queue::{Backend, WorkQueue, dispatch};
use crate::request::{Reply, Request};

mod browse;

/// One logical queue over `n` partition queues (SPEC 6.1). See the module
/// docs of the source for the routing. Clones share the partitions.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, PartitionedQueue, WorkQueue};
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> workjournal::Result<()> {
/// let parts = (0..4).map(|_| MemoryQueue::new(Config::default())).collect();
/// let queue = PartitionedQueue::new(parts)?;
/// queue.add(NewItem::new(b"a".to_vec()).flow("tenant-1")).await?;
/// for claimed in queue.claim(10, Duration::ZERO, ClaimFrom::All).await? {
///     assert_eq!(queue.partition_of(claimed.receipt.id), queue.partition_of(claimed.item.id));
///     queue.ack(claimed.receipt).await?;
/// }
/// # Ok(()) }
/// ```
pub struct PartitionedQueue<Q> {
    parts: Vec<Q>,
    router: Option<Router>,
    next_add: AtomicUsize,
    next_claim: AtomicUsize,
}

/// Bits of a queue id that hold the partition-local id.
const LOCAL_BITS: u32 = 48;
/// The most partitions a [`PartitionedQueue`] can have: 65 536.
pub const MAX_PARTITIONS: usize = 1 << (64 - LOCAL_BITS);

/// A custom placement of flows: see [`PartitionedQueue::route_flows_with`].
type Router = std::sync::Arc<dyn Fn(&str) -> Option<usize> + Send + Sync>;

impl<Q: std::fmt::Debug> std::fmt::Debug for PartitionedQueue<Q> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PartitionedQueue")
            .field("parts", &self.parts)
            .field("custom_router", &self.router.is_some())
            .finish_non_exhaustive()
    }
}

/// FNV-1a: a stable hash (std's is seeded per process).
fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in bytes {
        h ^= u64::from(*b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

impl<Q: WorkQueue> PartitionedQueue<Q> {
    /// One queue over `parts`, in this order (the order must be the same
    /// in every process sharing the partitions: it decides where a flow's
    /// items go and which partition an id names).
    ///
    /// # Errors
    ///
    /// `InvalidInput` for no partitions or more than [`MAX_PARTITIONS`].
    pub fn new(parts: Vec<Q>) -> Result<Self> {
        if parts.is_empty() || parts.len() > MAX_PARTITIONS {
            return Err(Error::invalid(format!(
                "a partitioned queue needs 1 to {MAX_PARTITIONS} partitions, not {}",
                parts.len()
            )));
        }
        Ok(PartitionedQueue {
            parts,
            router: None,
            next_add: AtomicUsize::new(0),
            next_claim: AtomicUsize::new(0),
        })
    }

    /// Place flows with `router`: for a flow name (`""` for the default
    /// flow) it gives a partition (taken modulo the partition count) or
    /// `None` for the default placement (a named flow by its hash; a
    /// default-flow item by its dedup key, else round-robin). Every process
    /// sharing the partitions must use the same router. E.g. `|f|
    /// f.is_empty().then_some(0)` keeps the default flow in one order (FIFO,
    /// due before backlog, one `max_backlog`) while named flows spread.
    /// Default: none.
    pub fn route_flows_with(
        mut self,
        router: impl Fn(&str) -> Option<usize> + Send + Sync + 'static,
    ) -> Self {
        self.router = Some(std::sync::Arc::new(router));
        self
    }

    /// The partitions, in routing order.
    pub fn partitions(&self) -> &[Q] {
        &self.parts
    }

    /// The partition (index into [`partitions`](Self::partitions)) holding
    /// the item with this id, or that issued this receipt id.
    /// An id no partition issued names the last partition.
    pub fn partition_of(&self, id: u64) -> usize {
        ((id >> LOCAL_BITS) as usize).min(self.parts.len() - 1)
    }

    fn n(&self) -> u64 {
        self.parts.len() as u64
    }

    /// The partition-local id of a queue id.
    fn local(&self, id: u64) -> u64 {
        if (id >> LOCAL_BITS) as usize >= self.parts.len() {
            // Not an id of this queue: an id no partition has, so the
            // call finds nothing (LeaseLost, false, ...).
            return u64::MAX;
        }
        id & ((1 << LOCAL_BITS) - 1)
    }

    /// The queue id of partition `p`'s local id.
    fn global(&self, p: usize, local: u64) -> Result<u64> {
        if local >> LOCAL_BITS != 0 {
            return Err(Error::backend(format!(
                "partition {p} gave id {local}, past the {LOCAL_BITS}-bit ids a partitioned queue holds"
            )));
        }
        Ok(((p as u64) << LOCAL_BITS) | local)
    }

    fn part(&self, id: u64) -> (usize, &Q) {
        let p = self.partition_of(id);
        (p, &self.parts[p])
    }

    /// The router's choice for `flow`, if any.
    fn routed(&self, flow: &str) -> Option<usize> {
        let p = self.router.as_ref()?(flow)?;
        Some(p % self.parts.len())
    }

    fn flow_part(&self, flow: &str) -> usize {
        self.routed(flow)
            .unwrap_or_else(|| (fnv1a(flow.as_bytes()) % self.n()) as usize)
    }

    /// Where `item` goes: `Some` for a fixed partition, `None` for round-robin.
    fn route(&self, item: &NewItem) -> Option<usize> {
        if !item.flow.is_empty() {
            return Some(self.flow_part(&item.flow));
        }
        if let Some(p) = self.routed("") {
            return Some(p);
        }
        item.dedup_key
            .as_deref()
            .map(|k| (fnv1a(k.as_bytes()) % self.n()) as usize)
    }

    fn round_robin(&self, counter: &AtomicUsize) -> usize {
        counter.fetch_add(1, Ordering::Relaxed) % self.parts.len()
    }

    /// The partition for the next round-robin add, without taking the
    /// turn: [`took_turn`](Self::took_turn) after it succeeded, so a refused
    /// add leaves the rotation where it was.
    fn next_turn(&self) -> usize {
        self.next_add.load(Ordering::Relaxed) % self.parts.len()
    }

    fn took_turn(&self) {
        self.next_add.fetch_add(1, Ordering::Relaxed);
    }

    fn local_receipt(&self, r: Receipt) -> Receipt {
        Receipt {
            id: self.local(r.id),
            ..r
        }
    }

    /// A partition's outcome with its local id made the queue's.
    fn lift_outcome(&self, p: usize, o: Option<Outcome>) -> Result<Option<Outcome>> {
        match o {
            Some(mut o) => {
                o.id = self.global(p, o.id)?;
                Ok(Some(o))
            }
            None => Ok(None),
        }
    }

    /// A partition's error with its local id made the queue's.
    fn lift_err(&self, p: usize, e: Error) -> Error {
        match e {
            Error::LeaseLost {
                id,
                delivery,
                lease,
            } => match self.global(p, id) {
                Ok(id) => Error::LeaseLost {
                    id,
                    delivery,
                    lease,
                },
                Err(e) => e,
            },
            e => e,
        }
    }

    fn lift_item(&self, p: usize, mut item: Item) -> Result<Item> {
        item.id = self.global(p, item.id)?;
        Ok(item)
    }

    fn lift_claimed(&self, p: usize, mut c: Claimed) -> Result<Claimed> {
        c.item.id = self.global(p, c.item.id)?;
        c.receipt.id = self.global(p, c.receipt.id)?;
        Ok(c)
    }

    fn lift_claims(&self, p: usize, got: Vec<Claimed>) -> Result<Vec<Claimed>> {
        got.into_iter().map(|c| self.lift_claimed(p, c)).collect()
    }

    async fn add_to(&self, p: usize, items: Vec<NewItem>) -> Result<Vec<Added>> {
        let added = self.parts[p]
            .add_batch(items)
            .await
            .map_err(|e| self.lift_err(p, e))?;
        added
            .into_iter()
            .map(|a| {
                Ok(Added {
                    id: self.global(p, a.id)?,
                    ..a
                })
            })
            .collect()
    }

    /// One add, delayed until `not_before_ms` if given, where it routes.
    async fn add_one(&self, item: NewItem, not_before_ms: Option<u64>) -> Result<Added> {
        let route = self.route(&item);
        let p = route.unwrap_or_else(|| self.next_turn());
        let q = &self.parts[p];
        let a = match not_before_ms {
            Some(t) => q.add_delayed(item, t).await,
            None => q.add(item).await,
        }
        .map_err(|e| self.lift_err(p, e))?;
        if route.is_none() {
            self.took_turn();
        }
        Ok(Added {
            id: self.global(p, a.id)?,
            ..a
        })
    }

    /// Group receipts by partition, keeping each one's position.
    fn by_part(&self, receipts: Vec<Receipt>) -> BTreeMap<usize, Vec<(usize, Receipt)>> {
        let mut m: BTreeMap<usize, Vec<(usize, Receipt)>> = BTreeMap::new();
        for (i, r) in receipts.into_iter().enumerate() {
            m.entry(self.partition_of(r.id))
                .or_default()
                .push((i, self.local_receipt(r)));
        }
        m
    }

    /// Sweep the partitions from the next one, up to `count` items, each
    /// with `f`.
    async fn sweep<'a, F, Fut>(&'a self, count: usize, f: F) -> Result<Vec<Claimed>>
    where
        F: Fn(&'a Q, usize) -> Fut,
        Fut: Future<Output = Result<Vec<Claimed>>>,
    {
        let start = self.round_robin(&self.next_claim);
        let mut out = Vec::new();
        for k in 0..self.parts.len() {
            let left = count - out.len();
            if left == 0 {
                break;
            }
            let p = (start + k) % self.parts.len();
            let got = f(&self.parts[p], left)
                .await
                .map_err(|e| self.lift_err(p, e))?;
            out.extend(self.lift_claims(p, got)?);
        }
        Ok(out)
    }
}

/// The first of `futs` to finish; the others are dropped.
async fn first<T>(mut futs: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>) -> T {
    std::future::poll_fn(move |cx| {
        for f in futs.iter_mut() {
            if let Poll::Ready(v) = f.as_mut().poll(cx) {
                return Poll::Ready(v);
            }
        }
        Poll::Pending
    })
    .await
}

impl<Q: WorkQueue> WorkQueue for PartitionedQueue<Q> {
    fn call(&self, request: Request) -> impl Future<Output = Result<Reply>> + Send {
        dispatch(self, request)
    }

    /// The smallest of the partitions' `max_deliveries` (they are meant to
    /// share one config): a worker never runs an item more often than its
    /// partition allows.
    fn max_deliveries(&self) -> u32 {
        self.parts
            .iter()
            .map(WorkQueue::max_deliveries)
            .min()
            .unwrap_or(crate::config::DEFAULT_MAX_DELIVERIES)
    }
}

impl<Q: WorkQueue> Backend for PartitionedQueue<Q> {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.add_one(item, None).await
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        if items.is_empty() {
            return Ok(Vec::new());
        }
        let routes: Vec<Option<usize>> = items.iter().map(|i| self.route(i)).collect();
        let fixed: Vec<usize> = routes.iter().flatten().copied().collect();
        // One partition for the whole batch when its fixed items agree (or
        // there are none): then the batch stays all or none.
        let whole = match fixed.first() {
            None => Some((self.next_turn(), true)),
            Some(&p) if fixed.iter().all(|&q| q == p) => Some((p, false)),
            Some(_) => None,
        };
        if let Some((p, turn)) = whole {
            let added = self.add_to(p, items).await?;
            if turn {
                self.took_turn();
            }
            return Ok(added);
        }
        let mut groups: BTreeMap<usize, Vec<(usize, NewItem)>> = BTreeMap::new();
        for (i, (item, route)) in items.into_iter().zip(routes).enumerate() {
            let p = route.unwrap_or_else(|| self.round_robin(&self.next_add));
            groups.entry(p).or_default().push((i, item));
        }
        let mut out: Vec<Option<Added>> = vec![None; groups.values().map(Vec::len).sum()];
        for (p, group) in groups {
            let (idx, batch): (Vec<usize>, Vec<NewItem>) = group.into_iter().unzip();
            for (i, a) in idx.into_iter().zip(self.add_to(p, batch).await?) {
                out[i] = Some(a);
            }
        }
        out.into_iter()
            .map(|a| a.ok_or_else(|| Error::backend("a partition returned too few ids")))
            .collect()
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.add_one(item, Some(not_before_ms)).await
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        let mut soonest = None;
        for q in &self.parts {
            if let Some(t) = q.next_due().await? {
                soonest = Some(soonest.map_or(t, |s: u64| s.min(t)));
            }
        }
        Ok(soonest)
    }

    async fn promote_due(&self) -> Result<u64> {
        let mut n = 0;
        for q in &self.parts {
            n += q.promote_due().await?;
        }
        Ok(n)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        let got = self
            .sweep(count, |q, n| q.claim(n, Duration::ZERO, from))
            .await?;
        if !got.is_empty() || wait.is_zero() {
            return Ok(got);
        }
        // Nothing ready: wait on every partition at once; the first to
        // answer wins. The others are dropped while they wait, which takes
        // nothing (see `WorkQueue::claim`, cancel safety).
        let waits = self
            .parts
            .iter()
            .enumerate()
            .map(|(p, q)| {
                Box::pin(async move {
                    let got = q
                        .claim(count, wait, from)
                        .await
                        .map_err(|e| self.lift_err(p, e))?;
                    self.lift_claims(p, got)
                })
                    as Pin<Box<dyn Future<Output = Result<Vec<Claimed>>> + Send + '_>>
            })
            .collect();
        first(waits).await
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.ack(self.local_receipt(receipt))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.ack_with_result(self.local_receipt(receipt), result)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        let (p, q) = self.part(id);
        let o = q
            .outcome(self.local(id))
            .await
            .map_err(|e| self.lift_err(p, e))?;
        self.lift_outcome(p, o)
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        let (p, q) = self.part(id);
        let o = q
            .wait_outcome(self.local(id), wait)
            .await
            .map_err(|e| self.lift_err(p, e))?;
        self.lift_outcome(p, o)
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.set_progress(self.local_receipt(receipt), progress)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        let (p, q) = self.part(receipt.id);
        q.send_chunk(self.local_receipt(receipt), chunk)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        let (p, q) = self.part(id);
        q.progress(self.local(id))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let (p, q) = self.part(id);
        q.wait_chunks(self.local(id), after_seq, wait)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        let mut n = 0;
        for (p, group) in self.by_part(receipts) {
            let batch = group.into_iter().map(|(_, r)| r).collect();
            n += self.parts[p]
                .ack_batch(batch)
                .await
                .map_err(|e| self.lift_err(p, e))?;
        }
        Ok(n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        // All or none per partition only: a lost receipt fails its
        // partition's touch, and the partitions before it stay extended.
        for (p, group) in self.by_part(receipts) {
            let batch = group.into_iter().map(|(_, r)| r).collect();
            self.parts[p]
                .touch(batch)
                .await
                .map_err(|e| self.lift_err(p, e))?;
        }
        Ok(())
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        let (p, q) = self.part(receipt.id);
        q.retry(self.local_receipt(receipt), not_before_ms)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.dead_letter(self.local_receipt(receipt), reason)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.release(self.local_receipt(receipt), not_before_ms)
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let start = self.round_robin(&self.next_claim);
        let mut out = Reclaimed::default();
        for k in 0..self.parts.len() {
            let left = count - out.claimed.len();
            if left == 0 {
                break;
            }
            let p = (start + k) % self.parts.len();
            let r = self.parts[p]
                .reclaim(min_idle, left)
                .await
                .map_err(|e| self.lift_err(p, e))?;
            out.claimed.extend(self.lift_claims(p, r.claimed)?);
            for d in r.dead_lettered {
                out.dead_lettered.push(Receipt {
                    id: self.global(p, d.id)?,
                    ..d
                });
            }
        }
        Ok(out)
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        self.parts[self.flow_part(flow)].pause(flow).await
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].resume(flow).await
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        let (p, q) = self.part(receipt.id);
        q.park(self.local_receipt(receipt))
            .await
            .map_err(|e| self.lift_err(p, e))
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        let p = self.flow_part(flow);
        match self.parts[p].step(flow).await? {
            Some(c) => Ok(Some(self.lift_claimed(p, c)?)),
            None => Ok(None),
        }
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].clear_flow(flow).await
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        self.parts[self.flow_part(flow)].parked(flow).await
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        let mut all = Vec::new();
        for q in &self.parts {
            all.extend(q.paused_flows().await?);
        }
        all.sort();
        all.dedup();
        Ok(all)
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        // SPEC 6.1: a named flow lives in one partition, and so do its
        // limits.
        crate::limit::check_limit(flow, &limit)?;
        self.parts[self.flow_part(flow)]
            .set_flow_limit(flow, limit)
            .await
    }

    async fn back_off(&self, flow: &str, duration: Duration) -> Result<()> {
        crate::limit::check_limit(flow, &FlowLimit::BackOffUntil(None))?;
        self.parts[self.flow_part(flow)]
            .back_off(flow, duration)
            .await
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        let mut all = Vec::new();
        for q in &self.parts {
            all.extend(q.flow_limits().await?);
        }
        all.sort_by(|a, b| a.flow.cmp(&b.flow));
        Ok(all)
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        let (_, q) = self.part(id);
        q.mark_done(self.local(id), step).await
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        let (_, q) = self.part(id);
        q.was_done(self.local(id), step).await
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        let mut all = Vec::new();
        for (p, q) in self.parts.iter().enumerate() {
            for mut d in q.dead_letters(count).await? {
                d.item = self.lift_item(p, d.item)?;
                all.push(d);
            }
        }
        // Newest first; a stable sort keeps each partition's own order
        // among letters that failed in the same ms.
        all.sort_by_key(|d| std::cmp::Reverse(d.failed_at_ms));
        all.truncate(count);
        Ok(all)
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.redrive(self.local(id)).await
    }

    async fn promote(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.promote(self.local(id)).await
    }

    async fn remove(&self, id: u64) -> Result<bool> {
        let (_, q) = self.part(id);
        q.remove(self.local(id)).await
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        let mut n = 0;
        for q in &self.parts {
            n += q.purge_dead_letters().await?;
        }
        Ok(n)
    }

    async fn stats(&self) -> Result<Stats> {
        let mut s = Stats {
            durable: true,
            ..Stats::default()
        };
        for q in &self.parts {
            let p = q.stats().await?;
            s.backlog += p.backlog;
            s.due += p.due;
            s.pending += p.pending;
            s.delayed += p.delayed;
            s.parked += p.parked;
            s.dead_letters += p.dead_letters;
            s.dead_letters_dropped += p.dead_letters_dropped;
            s.limited += p.limited;
            s.oldest_pending_age_ms = s.oldest_pending_age_ms.max(p.oldest_pending_age_ms);
            s.durable &= p.durable;
        }
        Ok(s)
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        let mut left = sample;
        for q in &self.parts {
            if left == 0 {
                break;
            }
            let part = q.backlog_by_flow(left).await?;
            for (flow, n) in part {
                left = left.saturating_sub(n as usize);
                *out.entry(flow).or_insert(0) += n;
            }
        }
        Ok(out)
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        // Partition by partition, each in its own claim order: there is
        // no order across partitions (SPEC 6.1).
        let mut all = Vec::new();
        for (p, q) in self.parts.iter().enumerate() {
            if all.len() >= count {
                break;
            }
            for item in q.peek(count - all.len()).await? {
                all.push(self.lift_item(p, item)?);
            }
        }
        Ok(all)
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        self.list_items(query).await
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        self.find_item(id).await
    }

    async fn now_ms(&self) -> Result<u64> {
        self.parts[0].now_ms().await
    }

    async fn compact(&self) -> Result<bool> {
        let mut any = false;
        for q in &self.parts {
            any |= q.compact().await?;
        }
        Ok(any)
    }

    async fn close(&self) -> Result<()> {
        let mut first_err = None;
        for q in &self.parts {
            if let Err(e) = q.close().await {
                first_err.get_or_insert(e);
            }
        }
        first_err.map_or(Ok(()), Err)
    }
}
