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

use crate::error::{Error, Result};
use crate::item::{Added, Claimed, Item, NewItem, Receipt};
use crate::outcome::Outcome;
use crate::queue::{WorkQueue, dispatch};
use crate::request::{Reply, Request};
use crate::schedule::ScheduleQueue;

mod browse;
mod operations;

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

    /// The partition of a schedule (SPEC 6.1): its flow's, or for the
    /// default flow the router's choice or its name's hash.
    fn schedule_part(&self, schedule: &crate::Schedule) -> usize {
        if !schedule.get_flow().is_empty() {
            return self.flow_part(schedule.get_flow());
        }
        self.routed("")
            .unwrap_or_else(|| (fnv1a(schedule.name().as_bytes()) % self.n()) as usize)
    }

    /// Whether partition `p` holds schedule `name`.
    async fn holds_schedule(&self, p: usize, name: &str) -> Result<bool> {
        Ok(self.parts[p]
            .schedules()
            .await?
            .iter()
            .any(|s| s.schedule.name() == name))
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
            Error::Cancelled {
                id,
                delivery,
                lease,
            } => match self.global(p, id) {
                Ok(id) => Error::Cancelled {
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
