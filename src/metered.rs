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
//! | `workjournal_oldest_pending_age_seconds` | gauge | | age of the oldest pending claim, since the claim, at the last `stats` (0 when none) |
//! | `workjournal_oldest_touch_age_seconds` | gauge | | time since the stalest pending item's last touch (claim or heartbeat) at the last `stats` (0 when none) |
//! | `workjournal_forward_lag_items` | gauge | `target` | items waiting to be forwarded ([`record_forward_lag`]) |
//! | `workjournal_schedule_fires_total` | counter | `schedule` | items schedules made (SPEC 13) |
//! | `workjournal_schedule_fire_lateness_seconds` | histogram | | per firing schedule, the queue's clock at the firing minus its latest slot |

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use crate::error::Result;
use crate::item::Stats;
use crate::queue::WorkQueue;
use crate::request::{Reply, Request};

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
/// `workjournal_schedule_fires_total{schedule}` (SPEC 13).
pub const SCHEDULE_FIRES: &str = "workjournal_schedule_fires_total";
/// `workjournal_schedule_fire_lateness_seconds` (SPEC 13).
pub const SCHEDULE_FIRE_LATENESS: &str = "workjournal_schedule_fire_lateness_seconds";
/// `workjournal_oldest_touch_age_seconds`.
pub const OLDEST_TOUCH_AGE: &str = "workjournal_oldest_touch_age_seconds";
/// `workjournal_forward_lag_items{target}`.
pub const FORWARD_LAG: &str = "workjournal_forward_lag_items";

/// Set the state gauges from `stats` (what a [`MeteredQueue`] does
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
    let silent = s.oldest_touch_age_ms.unwrap_or(0) as f64 / 1000.0;
    metrics::gauge!(OLDEST_TOUCH_AGE).set(silent);
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

impl<Q: WorkQueue> MeteredQueue<Q> {
    /// Count what a successful reply says happened to items.
    fn note(&self, reply: &Reply) {
        match reply {
            Reply::Added(a) if !a.duplicate => self.note_added(1),
            Reply::AddedList(v) => {
                self.note_added(v.iter().filter(|a| !a.duplicate).count() as u64)
            }
            Reply::Claimed(v) => metrics::counter!(CLAIMED).increment(v.len() as u64),
            Reply::Stats(s) => record_stats(s),
            Reply::Fired(f) => {
                self.note_added(f.items);
                for s in &f.schedules {
                    metrics::counter!(SCHEDULE_FIRES, "schedule" => s.name.clone())
                        .increment(s.items);
                    metrics::histogram!(SCHEDULE_FIRE_LATENESS)
                        .record(s.lateness_ms as f64 / 1000.0);
                }
            }
            Reply::Reclaimed(rc) => self.note_failed(rc.dead_lettered.len() as u64),
            _ => {}
        }
    }
}

impl<Q: WorkQueue> WorkQueue for MeteredQueue<Q> {
    async fn call(&self, request: Request) -> Result<Reply> {
        let op = request.name();
        let acked = match &request {
            Request::Ack { .. } | Request::AckWithResult { .. } => Some(1),
            Request::AckBatch { .. } => None,
            _ => Some(0),
        };
        let failed = matches!(request, Request::Retry { .. } | Request::DeadLetter { .. });
        let start = Instant::now();
        let r = self.inner.call(request).await;
        let outcome = match &r {
            Ok(_) => "ok",
            Err(e) => e.kind(),
        };
        metrics::counter!(OPERATIONS, "op" => op, "outcome" => outcome).increment(1);
        metrics::histogram!(OPERATION_DURATION, "op" => op).record(start.elapsed().as_secs_f64());
        if let Ok(reply) = &r {
            self.note(reply);
            match (acked, reply) {
                (None, Reply::Count(n)) => self.note_acked(*n),
                (Some(n), _) if n > 0 => self.note_acked(n),
                _ => {}
            }
            if failed {
                self.note_failed(1);
            }
        }
        r
    }

    fn max_deliveries(&self) -> u32 {
        self.inner.max_deliveries()
    }
}
