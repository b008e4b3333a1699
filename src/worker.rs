//! The worker runtime: the claim / heartbeat / retry / shutdown loop, written
//! once (SPEC section 8).
//!
//! A [`Worker`] runs an async handler for every item it takes from a queue:
//!
//! - it claims only as many items as it has free slots (`concurrency`);
//! - `Ok` acks; `Err` retries with exponential backoff and jitter
//!   ([`RetryPolicy`]), and once the item has had `max_deliveries` deliveries
//!   it is dead-lettered with the error's text as the reason;
//! - a handler that panics counts as a failed attempt; the worker lives on;
//! - a [`HandlerError::not_attempted`] (the worker's own failure) gives the
//!   item back with [`WorkQueue::release`], its delivery not spent, and
//!   pauses claiming for a backoff;
//! - an ack (or retry, touch, ...) that fails with a retryable error is
//!   tried again with a backoff for up to one lease;
//! - it touches its in-flight items every lease / 3 (heartbeat), reclaims
//!   stale items of dead consumers every lease / 2, and promotes timers at
//!   their deadline;
//! - on shutdown it stops claiming, waits for in-flight items up to a grace
//!   period and gives the rest back with [`WorkQueue::release`] (no delivery
//!   spent), or leaves them pending for `reclaim_stale` if that fails.
//!
//! Every item runs inside a `tracing` span named `item` with its `id`, `flow`
//! and `delivery`.
//!
//! # Examples
//!
//! ```
//! use std::time::Duration;
//! use workjournal::{Config, MemoryQueue, NewItem, WorkQueue, Worker};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let queue = MemoryQueue::new(Config::default());
//! queue.add(NewItem::new(b"hello".to_vec())).await?;
//!
//! let report = Worker::new(queue.clone())
//!     .concurrency(4)
//!     .until_empty(true)
//!     .run(
//!         |claimed| async move {
//!             println!("item {} says {:?}", claimed.item.id, claimed.item.payload);
//!             Ok::<(), std::io::Error>(())
//!         },
//!         std::future::pending(),
//!     )
//!     .await?;
//! assert_eq!(report.acked, 1);
//! # Ok::<(), workjournal::Error>(())
//! # }).unwrap();
//! ```

use std::collections::HashMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::{AbortHandle, JoinSet};
use tokio::time::Instant;
use tracing::Instrument;

use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, Claimed, Receipt, RetryOutcome};
use crate::queue::WorkQueue;

/// How long a failed item waits before its next attempt: exponential backoff
/// with jitter.
///
/// After failed delivery `n` (1 for the first attempt) the item waits
/// `base * factor^(n-1)`, capped at `max_delay`, then shortened by a random
/// fraction of up to `jitter` of itself, so that items that failed together
/// do not all come back at the same instant. The cap is therefore also the
/// longest wait.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::RetryPolicy;
/// let policy = RetryPolicy::default()
///     .base(Duration::from_millis(100))
///     .factor(3.0)
///     .max_delay(Duration::from_secs(1))
///     .jitter(0.0);
/// assert_eq!(policy.delay(1), Duration::from_millis(100));
/// assert_eq!(policy.delay(2), Duration::from_millis(300));
/// assert_eq!(policy.delay(5), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    base: Duration,
    factor: f64,
    max_delay: Duration,
    jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            factor: 2.0,
            max_delay: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The wait after the first failed delivery. Default: 1 s.
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// How much each further failure multiplies the wait. Values below 1
    /// (and NaN) are treated as 1. Default: 2.
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = if factor.is_nan() {
            1.0
        } else {
            factor.max(1.0)
        };
        self
    }

    /// The longest wait. Default: 5 min.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// The largest fraction (0 to 1) by which a wait is shortened at random.
    /// Values outside are clamped, NaN is 0. Default: 0.2.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The wait after failed delivery `delivery` (1-based), before jitter:
    /// `base * factor^(delivery-1)`, at most `max_delay`.
    pub fn delay(&self, delivery: u32) -> Duration {
        let exponent = i32::try_from(delivery.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.base.as_secs_f64() * self.factor.powi(exponent);
        match Duration::try_from_secs_f64(secs) {
            Ok(d) => d.min(self.max_delay),
            // Overflow or infinity: the cap applies.
            Err(_) => self.max_delay,
        }
    }

    /// [`RetryPolicy::delay`] shortened by `jitter * unit`, where `unit` is
    /// in `0..=1` (clamped). [`RetryPolicy::next_delay`] draws `unit` at
    /// random.
    pub fn delay_with(&self, delivery: u32, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        self.delay(delivery).mul_f64(1.0 - self.jitter * unit)
    }

    /// The wait after failed delivery `delivery`, with random jitter.
    pub fn next_delay(&self, delivery: u32) -> Duration {
        self.delay_with(delivery, fastrand::f64())
    }
}

/// A handler's error: a failed attempt (the usual case, made from any
/// `Display` error with `From`/`?`), or a failure of the worker's own
/// side that means the item was never attempted
/// ([`HandlerError::not_attempted`]: the command could not be started, a
/// local resource ran out). SPEC 9, Worker.
///
/// It does not implement `Display` itself, so that every `Display` error
/// converts into it.
///
/// # Examples
///
/// ```
/// use workjournal::HandlerError;
/// let failed: HandlerError = std::io::Error::other("bad input").into();
/// assert!(failed.is_attempt());
/// let not_run = HandlerError::not_attempted("cannot start sh: too many open files");
/// assert!(!not_run.is_attempt());
/// assert_eq!(not_run.text(), "cannot start sh: too many open files");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    text: String,
    attempt: bool,
    back_off: Option<Duration>,
}

impl HandlerError {
    /// A failed attempt with `reason` (what `From` makes of any error).
    pub fn failed(reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: true,
            back_off: None,
        }
    }

    /// The item was not attempted because of the worker's own failure: it
    /// is given back with [`WorkQueue::release`] (its delivery not spent)
    /// after a backoff, and the worker pauses its claims for that backoff.
    pub fn not_attempted(reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: false,
            back_off: None,
        }
    }

    /// The upstream asked to slow down ("retry after `duration`", an HTTP
    /// 429): back the item's whole flow off for `duration`, for every
    /// consumer of the queue ([`WorkQueue::back_off`], SPEC 3, Flow limits;
    /// on Redis the whole fleet), and give the item back without spending
    /// its delivery, due when the back-off lifts. An item of the default
    /// flow `""` (which has no limits) is only given back, due then.
    ///
    /// ```
    /// use std::time::Duration;
    /// use workjournal::HandlerError;
    /// let slow = HandlerError::back_off(Duration::from_secs(30), "429 from the API");
    /// assert!(!slow.is_attempt());
    /// assert_eq!(slow.back_off_for(), Some(Duration::from_secs(30)));
    /// ```
    pub fn back_off(duration: Duration, reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: false,
            back_off: Some(duration),
        }
    }

    /// The back-off asked for by [`HandlerError::back_off`], if any.
    pub fn back_off_for(&self) -> Option<Duration> {
        self.back_off
    }

    /// Whether this counts as a failed attempt of the item.
    pub fn is_attempt(&self) -> bool {
        self.attempt
    }

    /// The reason text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<E: fmt::Display> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::failed(e)
    }
}

/// Something a worker did, reported to the callback set with
/// [`Worker::on_event`] (the CLI draws its progress from these).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handler started on an item.
    Started {
        /// The item's id.
        id: u64,
        /// The item's flow.
        flow: String,
        /// This delivery's number (first: 1).
        delivery: u32,
    },
    /// The handler succeeded and the item was acked.
    Acked {
        /// The item's id.
        id: u64,
        /// How long the handler ran.
        elapsed: Duration,
    },
    /// The handler failed; the item waits in delayed until `not_before_ms`
    /// (or, for a worker on one flow, went back to the flow's parked list,
    /// and `not_before_ms` is the time of the failure).
    Retried {
        /// The item's id.
        id: u64,
        /// The delivery that failed.
        delivery: u32,
        /// When the next attempt may start, ms since the Unix epoch (queue
        /// clock).
        not_before_ms: u64,
        /// The handler's error text.
        error: String,
    },
    /// The handler failed on the last allowed delivery; the item is a dead
    /// letter.
    DeadLettered {
        /// The item's id.
        id: u64,
        /// The delivery that failed.
        delivery: u32,
        /// The reason stored with the dead letter.
        reason: String,
    },
    /// The item was given back without spending its delivery
    /// ([`WorkQueue::release`]): the handler said it was not attempted
    /// ([`HandlerError::not_attempted`]), or the worker stopped before the
    /// handler finished.
    Released {
        /// The item's id.
        id: u64,
        /// The delivery given back.
        delivery: u32,
        /// When it may be claimed again, ms since the Unix epoch (queue
        /// clock).
        not_before_ms: u64,
        /// Why (the handler's text, or `"worker stopped"`).
        reason: String,
    },
    /// The item's claim was no longer current when the worker finished it
    /// (it was reclaimed by another consumer); nothing was changed.
    LeaseLost {
        /// The item's id.
        id: u64,
        /// The delivery the worker held.
        delivery: u32,
    },
    /// A queue operation failed; the worker goes on (the item, if any, comes
    /// back through `reclaim_stale`).
    QueueError {
        /// Which operation (`"ack"`, `"touch"`, `"claim"`, ...).
        op: &'static str,
        /// The error's text.
        error: String,
    },
}

/// What a finished [`Worker::run`] did, in items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Report {
    /// Handled successfully and acked.
    pub acked: u64,
    /// Failed and given back for a later attempt.
    pub retried: u64,
    /// Dead-lettered: failed for the last time, or found stale by the
    /// worker's reclaim past `max_deliveries` (a crashed holder's item).
    pub dead_lettered: u64,
    /// Dead letters the queue dropped for good past its
    /// `dead_letter_cap` during the run (`Stats::dead_letters_dropped` at
    /// the end minus at the start, so drops by other consumers of the same
    /// queue count too). These are among `dead_lettered` but not kept.
    pub dead_letters_dropped: u64,
    /// Given back without spending a delivery ([`WorkQueue::release`]):
    /// not attempted ([`HandlerError::not_attempted`]), or unfinished at
    /// shutdown.
    pub released: u64,
    /// Of the failures, how many were handler panics.
    pub panicked: u64,
    /// Finished after their claim was taken over; nothing changed.
    pub lease_lost: u64,
    /// Still running when the grace period ran out: cancelled and given
    /// back with [`WorkQueue::release`] (counted in `released` too), or, if
    /// that failed, left pending for `reclaim_stale`.
    pub abandoned: u64,
}

/// Run an idempotent step: if `step` of item `id` was already marked done
/// (within the queue's `done_ttl`), skip it and return `Ok(None)`; otherwise
/// run `effect`, and only if it succeeds, mark the step done and return its
/// value (SPEC section 3, Idempotency).
///
/// A crash between the side effect and the mark runs the effect again on the
/// next delivery: the helper narrows the window to that, it cannot close it.
/// Effects that must happen exactly once also need the far side to recognise
/// the item id.
///
/// # Errors
///
/// The effect's error, or a queue error (converted with `From`) from
/// `was_done` or `mark_done`.
///
/// # Examples
///
/// ```
/// use workjournal::{Config, Error, MemoryQueue, worker::idempotent_step};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = MemoryQueue::new(Config::default());
/// let first = idempotent_step(&queue, 7, "email", || async { Ok::<_, Error>("sent") }).await?;
/// let again = idempotent_step(&queue, 7, "email", || async { Ok::<_, Error>("sent") }).await?;
/// assert_eq!((first, again), (Some("sent"), None));
/// # Ok::<(), Error>(())
/// # }).unwrap();
/// ```
pub async fn idempotent_step<Q, F, Fut, T, E>(
    queue: &Q,
    id: u64,
    step: &str,
    effect: F,
) -> std::result::Result<Option<T>, E>
where
    Q: WorkQueue + ?Sized,
    F: FnOnce() -> Fut,
    Fut: Future<Output = std::result::Result<T, E>>,
    E: From<Error>,
{
    if queue.was_done(id, step).await? {
        return Ok(None);
    }
    let value = effect().await?;
    queue.mark_done(id, step).await?;
    Ok(Some(value))
}

type EventFn = Arc<dyn Fn(&Event) + Send + Sync>;

/// Runs a handler over the items of a queue (see the [module docs](self)).
///
/// Build it with the setters, then call [`Worker::run`].
pub struct Worker<Q> {
    queue: Q,
    concurrency: usize,
    lease: Duration,
    retry: RetryPolicy,
    grace: Duration,
    claim_wait: Duration,
    until_empty: bool,
    flow: Option<String>,
    on_event: Option<EventFn>,
}

impl<Q> fmt::Debug for Worker<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("concurrency", &self.concurrency)
            .field("lease", &self.lease)
            .field("retry", &self.retry)
            .field("grace", &self.grace)
            .field("claim_wait", &self.claim_wait)
            .field("until_empty", &self.until_empty)
            .field("flow", &self.flow)
            .finish_non_exhaustive()
    }
}

/// The largest [`Worker::concurrency`]: 65536 handlers (each claim asks the
/// queue for at most this many items).
pub const MAX_CONCURRENCY: usize = 65_536;

/// Default of [`Worker::lease`]: 30 s.
pub const DEFAULT_LEASE: Duration = Duration::from_secs(30);
/// Default of [`Worker::grace`]: 10 s.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(10);
/// Default of [`Worker::claim_wait`]: 1 s.
pub const DEFAULT_CLAIM_WAIT: Duration = Duration::from_secs(1);

impl<Q: WorkQueue + Clone + 'static> Worker<Q> {
    /// A worker on `queue` with the defaults below.
    pub fn new(queue: Q) -> Self {
        Worker {
            queue,
            concurrency: 1,
            lease: DEFAULT_LEASE,
            retry: RetryPolicy::default(),
            grace: DEFAULT_GRACE,
            claim_wait: DEFAULT_CLAIM_WAIT,
            until_empty: false,
            flow: None,
            on_event: None,
        }
    }

    /// How many handlers run at once. The worker claims only into free
    /// slots; a slot frees when its handler returns, so the next claim can
    /// share a commit with that item's ack (which may briefly leave one more
    /// item pending per slot). 0 is treated as 1, and values above
    /// [`MAX_CONCURRENCY`] as that. Default: 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.clamp(1, MAX_CONCURRENCY);
        self
    }

    /// The lease: in-flight items are touched every lease / 3, and items
    /// whose claim is at least a lease old are reclaimed (checked every
    /// lease / 2). A handler that may run longer than this is still safe,
    /// since the heartbeat keeps its claim fresh. Below 30 ms it is 30 ms.
    /// Default: 30 s.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(30));
        self
    }

    /// The backoff between attempts. Default: [`RetryPolicy::default`].
    pub fn retry_policy(mut self, policy: RetryPolicy) -> Self {
        self.retry = policy;
        self
    }

    /// How long shutdown waits for in-flight items before cancelling their
    /// handlers and giving the items back with [`WorkQueue::release`].
    /// Default: 10 s.
    pub fn grace(mut self, grace: Duration) -> Self {
        self.grace = grace;
        self
    }

    /// How long one claim blocks when nothing is ready (it wakes early on an
    /// add or a timer). Capped at lease / 2. Default: 1 s.
    pub fn claim_wait(mut self, wait: Duration) -> Self {
        self.claim_wait = wait;
        self
    }

    /// Stop once the queue has nothing left to do: backlog, due, delayed and
    /// pending all 0 and nothing in flight (items of paused flows, parked,
    /// do not count). Delayed retries are waited for. Default: false.
    pub fn until_empty(mut self, yes: bool) -> Self {
        self.until_empty = yes;
        self
    }

    /// Work only on the parked items of the paused flow `flow`, taking them
    /// one at a time with [`WorkQueue::step`] (the flow stays paused for
    /// everyone else), instead of claiming. A failed item goes back to the
    /// flow's parked tail (with [`WorkQueue::park`]) until its last allowed
    /// delivery, then is dead-lettered. This worker does not reclaim, and
    /// `until_empty` means: the flow has nothing parked. Default: none.
    pub fn flow(mut self, flow: Option<String>) -> Self {
        self.flow = flow.filter(|f| !f.is_empty());
        self
    }

    /// Call `f` for every [`Event`] (from the worker's tasks; keep it quick).
    pub fn on_event(mut self, f: impl Fn(&Event) + Send + Sync + 'static) -> Self {
        self.on_event = Some(Arc::new(f));
        self
    }

    /// Run until `shutdown` resolves (or, with `until_empty`, until the queue
    /// is empty), then shut down gracefully: stop claiming, wait up to the
    /// grace period for in-flight items, cancel the rest and give them back
    /// with [`WorkQueue::release`] (their deliveries not spent).
    ///
    /// `handler` gets each claimed item; `Ok` acks it, `Err` (any `Display`
    /// error, converted to [`HandlerError`]) fails the attempt, unless it
    /// is [`HandlerError::not_attempted`] (then the item is released after
    /// a backoff, SPEC 9). A failed attempt retries with backoff, or dead
    /// letters with the error's
    /// `Display` text as the reason on the last allowed delivery). A panic is
    /// a failed attempt with reason `"handler panicked: ..."`.
    ///
    /// # Errors
    ///
    /// A queue error that trying again cannot fix (`Closed`, `Corrupt`,
    /// `Decode`, `InvalidInput`) ends the run after the graceful shutdown.
    /// Retryable errors (`Io`, `Storage`, `Backend`, `Full`) are reported as
    /// [`Event::QueueError`] and the worker tries again after a pause.
    ///
    /// # Cancel safety
    ///
    /// Dropping the future cancels every handler at once; their items stay
    /// pending and come back through `reclaim_stale`. Nothing is lost.
    pub async fn run<H, Fut, E>(
        self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Report>
    where
        H: Fn(Claimed) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<(), E>> + Send + 'static,
        E: Into<HandlerError> + Send + 'static,
    {
        self.run_with_result(
            move |c| {
                let fut = handler(c);
                async move { fut.await.map(|()| None) }
            },
            shutdown,
        )
        .await
    }

    /// As [`Worker::run`], for a handler that answers: `Ok(Some(bytes))`
    /// acks with `bytes` as the item's result
    /// ([`WorkQueue::ack_with_result`]; [`encode_result`](crate::encode_result)
    /// for a typed one), `Ok(None)` acks plainly (an empty result), `Err`
    /// fails the attempt as in `run` (SPEC 9, Worker).
    ///
    /// # Errors
    ///
    /// As [`Worker::run`]. A result over `max_payload_bytes` is a failed
    /// attempt with reason `"result refused: ..."`.
    ///
    /// # Cancel safety
    ///
    /// As [`Worker::run`].
    pub async fn run_with_result<H, Fut, E>(
        self,
        handler: H,
        shutdown: impl Future<Output = ()> + Send,
    ) -> Result<Report>
    where
        H: Fn(Claimed) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = std::result::Result<Option<Vec<u8>>, E>> + Send + 'static,
        E: Into<HandlerError> + Send + 'static,
    {
        let handler: Handler = Arc::new(move |c| {
            let fut = handler(c);
            Box::pin(async move { fut.await.map_err(Into::into) })
        });
        let queue_max_deliveries = self.queue.max_deliveries().max(1);
        let shared = Arc::new(Shared {
            queue: self.queue,
            lease: self.lease,
            // The queue's own limit (SPEC section 9): a failure on this
            // delivery is dead-lettered with the handler's error text.
            max_deliveries: queue_max_deliveries,
            retry: self.retry,
            flow: self.flow,
            on_event: self.on_event,
            handler,
            in_flight: Mutex::new(HashMap::new()),
            report: Mutex::new(Report::default()),
            next_reclaim: Mutex::new(Some(Instant::now())),
            claims_paused_until: Mutex::new(Instant::now()),
            worker_faults: AtomicU32::new(0),
        });
        let dropped_at_start = shared
            .queue
            .stats()
            .await
            .map(|s| s.dead_letters_dropped)
            .ok();
        let claim_wait = self.claim_wait.min(self.lease / 2);
        let permits = Arc::new(Semaphore::new(self.concurrency));

        let mut background = JoinSet::new();
        background.spawn(heartbeat(shared.clone()));
        if shared.flow.is_none() {
            background.spawn(timers(shared.clone()));
        }

        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut fill: Option<FillFuture> = None;
        let mut failure: Option<Error> = None;

        loop {
            if fill.is_none() {
                fill = Some(Box::pin(fill_slots(
                    shared.clone(),
                    permits.clone(),
                    claim_wait,
                )));
            }
            tokio::select! {
                biased;
                () = &mut shutdown => break,
                Some(_) = tasks.join_next(), if !tasks.is_empty() => {
                    // The last item just finished: if the queue is empty now,
                    // stop without waiting out the claim in progress. Backlog,
                    // due and delayed are empty, so it can take nothing; and
                    // had it just taken something, pending would not be 0.
                    // (Not for one flow: its emptiness test, nothing parked,
                    // would miss an item the step in progress just took.)
                    if self.until_empty
                        && shared.flow.is_none()
                        && tasks.is_empty()
                        && matches!(shared.is_empty().await, Ok(true))
                    {
                        break;
                    }
                }
                result = async { match fill.as_mut() {
                    Some(f) => f.await,
                    None => std::future::pending().await,
                } } => {
                    fill = None;
                    match result {
                        Ok(got) if got.is_empty() => {
                            if self.until_empty && tasks.is_empty() {
                                match shared.is_empty().await {
                                    Ok(true) => break,
                                    Ok(false) => {}
                                    Err(e) => shared.emit(Event::QueueError {
                                        op: "stats",
                                        error: e.to_string(),
                                    }),
                                }
                            }
                        }
                        Ok(got) => {
                            for (claimed, permit) in got {
                                tasks.spawn(supervise(shared.clone(), claimed, permit));
                            }
                        }
                        Err(e) if e.is_retryable() => {
                            shared.emit(Event::QueueError { op: "claim", error: e.to_string() });
                            tokio::select! {
                                () = &mut shutdown => break,
                                () = tokio::time::sleep(claim_wait.max(Duration::from_millis(100))) => {}
                            }
                        }
                        Err(e) => {
                            failure = Some(e);
                            break;
                        }
                    }
                }
            }
        }
        // Stop claiming. A claim dropped while it waits took nothing; one
        // dropped after it was submitted leaves its items pending for
        // reclaim (the trait's cancel-safety contract).
        drop(fill);

        // A grace too long to represent (`Duration::MAX`) waits for every
        // item, however long it runs.
        let deadline = Instant::now().checked_add(self.grace);
        loop {
            tokio::select! {
                joined = tasks.join_next() => if joined.is_none() { break },
                () = sleep_until_or_forever(deadline) => {
                    let left = tasks.len() as u64;
                    shared.report().abandoned += left;
                    let unfinished: Vec<Receipt> =
                        lock(&shared.in_flight).values().copied().collect();
                    tasks.abort_all();
                    while tasks.join_next().await.is_some() {}
                    give_back_unfinished(&shared, unfinished).await;
                    break;
                }
            }
        }
        background.abort_all();
        while background.join_next().await.is_some() {}
        if let (Some(start), Ok(end)) = (dropped_at_start, shared.queue.stats().await) {
            shared.report().dead_letters_dropped = end.dead_letters_dropped.saturating_sub(start);
        }

        match failure {
            Some(e) => Err(e),
            None => Ok(*shared.report()),
        }
    }
}

type Handler = Arc<
    dyn Fn(
            Claimed,
        ) -> Pin<
            Box<dyn Future<Output = std::result::Result<Option<Vec<u8>>, HandlerError>> + Send>,
        > + Send
        + Sync,
>;

type FillFuture =
    Pin<Box<dyn Future<Output = Result<Vec<(Claimed, OwnedSemaphorePermit)>>> + Send>>;

struct Shared<Q> {
    queue: Q,
    lease: Duration,
    max_deliveries: u32,
    retry: RetryPolicy,
    flow: Option<String>,
    on_event: Option<EventFn>,
    handler: Handler,
    /// Receipts of the items being handled, by lease number: what the
    /// heartbeat touches.
    in_flight: Mutex<HashMap<u64, Receipt>>,
    report: Mutex<Report>,
    /// When the next reclaim is due; `None`: never (an endless lease).
    next_reclaim: Mutex<Option<Instant>>,
    /// After a worker-side failure ([`HandlerError::not_attempted`]) no
    /// claim is made before this instant: the backoff.
    claims_paused_until: Mutex<Instant>,
    /// Worker-side failures in a row (reset by any handler that ran): the
    /// backoff grows with it as a retry's does with deliveries.
    worker_faults: AtomicU32,
}

/// Sleep until `deadline`, or forever for `None` (a time past what
/// `Instant` can hold).
async fn sleep_until_or_forever(deadline: Option<Instant>) {
    match deadline {
        Some(at) => tokio::time::sleep_until(at).await,
        None => std::future::pending().await,
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // Nothing that holds these locks can panic half-way through an update,
    // so a poisoned lock still holds consistent data.
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl<Q: WorkQueue> Shared<Q> {
    fn emit(&self, event: Event) {
        if let Some(f) = &self.on_event {
            f(&event);
        }
    }

    fn report(&self) -> MutexGuard<'_, Report> {
        lock(&self.report)
    }

    /// Run a queue operation that finishes an item (ack, retry, release,
    /// dead letter, park), trying again with a growing pause (50 ms
    /// doubling, at most lease / 4) while it fails with a retryable error
    /// (a full disk, a file made read-only, a Redis timeout), for up to one
    /// lease: the heartbeat keeps the claim fresh meanwhile, so a fault that
    /// clears within the lease costs the item nothing. Only then is the item
    /// left to its lease (SPEC 9, Worker). A retried call whose first try
    /// had an unknown outcome (a Redis timeout) may then be `LeaseLost`.
    async fn persist<T, F, Fut>(&self, op: &'static str, mut call: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        // `None`: a lease too long to represent, so no end to the tries.
        let give_up = Instant::now().checked_add(self.lease);
        let mut pause = Duration::from_millis(50);
        loop {
            match call().await {
                Err(e)
                    if e.is_retryable() && give_up.is_none_or(|g| Instant::now() + pause < g) =>
                {
                    tracing::debug!(op, error = %e, "queue operation failed; trying again");
                    self.emit(Event::QueueError {
                        op,
                        error: e.to_string(),
                    });
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(self.lease / 4);
                }
                other => return other,
            }
        }
    }

    async fn is_empty(&self) -> Result<bool> {
        match &self.flow {
            Some(flow) => Ok(self.queue.parked(flow).await? == 0),
            None => {
                let s = self.queue.stats().await?;
                Ok(s.backlog + s.delayed + s.pending == 0)
            }
        }
    }
}

/// Wait for at least one free slot, take every free slot, and fill them:
/// first with stale items (every lease / 2), then by claiming (or stepping).
async fn fill_slots<Q: WorkQueue + 'static>(
    shared: Arc<Shared<Q>>,
    permits: Arc<Semaphore>,
    claim_wait: Duration,
) -> Result<Vec<(Claimed, OwnedSemaphorePermit)>> {
    // A worker-side failure pauses claiming for its backoff.
    let paused_until = *lock(&shared.claims_paused_until);
    tokio::time::sleep_until(paused_until).await;
    let Ok(mut slots) = permits.clone().acquire_owned().await else {
        return Err(Error::Closed);
    };
    // Take every other free slot into the same permit: one value however
    // large `concurrency` is (nothing is allocated per free slot).
    let free_now = u32::try_from(permits.available_permits()).unwrap_or(u32::MAX);
    if free_now > 0
        && let Ok(more) = permits.clone().try_acquire_many_owned(free_now)
    {
        slots.merge(more);
    }
    let want = slots.num_permits();
    let mut got: Vec<Claimed> = Vec::new();

    if let Some(flow) = &shared.flow {
        while got.len() < want {
            match shared.queue.step(flow).await {
                Ok(Some(c)) => got.push(c),
                Ok(None) => break,
                Err(e) => {
                    return keep_taken(&shared, "step", got, e).map(|got| slot_each(got, slots));
                }
            }
        }
        if got.is_empty() {
            // `step` cannot block; poll at the claim-wait pace.
            tokio::time::sleep(claim_wait).await;
        }
    } else {
        let reclaim_now = {
            let mut next = lock(&shared.next_reclaim);
            let now = Instant::now();
            match *next {
                Some(at) if now < at => false,
                // Never again, for a lease too long to represent.
                None => false,
                Some(_) => {
                    *next = now.checked_add(shared.lease / 2);
                    true
                }
            }
        };
        if reclaim_now {
            let reclaimed = shared.queue.reclaim(shared.lease, want).await?;
            for dead in reclaimed.dead_lettered {
                shared.report().dead_lettered += 1;
                shared.emit(Event::DeadLettered {
                    id: dead.id,
                    delivery: dead.delivery,
                    reason: crate::item::MAX_DELIVERIES_REASON.to_string(),
                });
            }
            got = reclaimed.claimed;
        }
        let free = want.saturating_sub(got.len());
        if free > 0 {
            let wait = if got.is_empty() {
                claim_wait
            } else {
                Duration::ZERO
            };
            match shared.queue.claim(free, wait, ClaimFrom::All).await {
                Ok(more) => got.extend(more),
                Err(e) => got = keep_taken(&shared, "claim", got, e)?,
            }
        }
    }
    Ok(slot_each(got, slots))
}

/// A claim (or step) failed after this fill had already taken `got`: those
/// items are pending under this worker's receipts, so run them (reported
/// as [`Event::QueueError`]) rather than drop them, which would leave them
/// pending until a reclaim and cost each a delivery (an item on its last
/// delivery would be dead-lettered without running). With nothing taken,
/// the error is the fill's.
fn keep_taken<Q: WorkQueue>(
    shared: &Shared<Q>,
    op: &'static str,
    got: Vec<Claimed>,
    e: Error,
) -> Result<Vec<Claimed>> {
    if got.is_empty() {
        return Err(e);
    }
    shared.emit(Event::QueueError {
        op,
        error: e.to_string(),
    });
    Ok(got)
}

/// One permit of `slots` per item.
fn slot_each(
    got: Vec<Claimed>,
    mut slots: OwnedSemaphorePermit,
) -> Vec<(Claimed, OwnedSemaphorePermit)> {
    // One permit per item (never more items than slots: the queue promises
    // it); the surplus slots go back when `slots` drops here.
    let mut out = Vec::with_capacity(got.len());
    for claimed in got {
        match slots.split(1) {
            Some(permit) => out.push((claimed, permit)),
            // Unreachable while the queue keeps its promise; the item stays
            // pending and comes back through `reclaim_stale`.
            None => break,
        }
    }
    out
}

/// Removes an item from the heartbeat set and cancels its handler when the
/// supervisor ends, however it ends (including abort at shutdown).
struct InFlight<'a, Q> {
    shared: &'a Shared<Q>,
    lease: u64,
    handler: Option<AbortHandle>,
}

impl<Q> Drop for InFlight<'_, Q> {
    fn drop(&mut self) {
        lock(&self.shared.in_flight).remove(&self.lease);
        if let Some(h) = &self.handler {
            h.abort();
        }
    }
}

async fn supervise<Q: WorkQueue + 'static>(
    shared: Arc<Shared<Q>>,
    claimed: Claimed,
    permit: OwnedSemaphorePermit,
) {
    let receipt = claimed.receipt;
    let span = tracing::info_span!(
        "item",
        id = claimed.item.id,
        flow = %claimed.item.flow,
        delivery = receipt.delivery
    );
    async {
        lock(&shared.in_flight).insert(receipt.lease, receipt);
        let mut guard = InFlight {
            shared: &shared,
            lease: receipt.lease,
            handler: None,
        };
        shared.emit(Event::Started {
            id: receipt.id,
            flow: claimed.item.flow.clone(),
            delivery: receipt.delivery,
        });
        let started = Instant::now();
        let claimed_flow = claimed.item.flow.clone();
        let task = tokio::spawn((shared.handler)(claimed).in_current_span());
        guard.handler = Some(task.abort_handle());
        let outcome = match task.await {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) if e.back_off.is_some() => {
                // The slot stays taken until the flow is held, so that this
                // worker's next claim already obeys the back-off.
                let d = e.back_off.unwrap_or_default();
                finish_back_off(&shared, receipt, &claimed_flow, d, e.text).await;
                drop(permit);
                drop(guard);
                return;
            }
            Ok(Err(e)) if !e.is_attempt() => {
                drop(permit);
                finish_not_attempted(&shared, receipt, e.text).await;
                drop(guard);
                return;
            }
            Ok(Err(e)) => Err((e.text, false)),
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_string());
                Err((format!("handler panicked: {msg}"), true))
            }
            Err(_) => Err(("handler was cancelled".to_string(), false)),
        };
        // The slot is free once the handler is done: the next claim can go
        // to the queue together with this item's ack (the embedded backend
        // commits both in one transaction) instead of after it.
        drop(permit);
        shared.worker_faults.store(0, Ordering::Relaxed);
        match outcome {
            Ok(result) => finish_ok(&shared, receipt, result, started.elapsed()).await,
            Err((text, panicked)) => {
                if panicked {
                    shared.report().panicked += 1;
                }
                tracing::warn!(error = %text, "attempt failed");
                finish_err(&shared, receipt, text).await;
            }
        }
        drop(guard);
    }
    .instrument(span)
    .await
}

async fn finish_ok<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    result: Option<Vec<u8>>,
    elapsed: Duration,
) {
    let acked = shared
        .persist("ack", || {
            let result = result.clone();
            async move {
                match result {
                    Some(bytes) => shared.queue.ack_with_result(receipt, bytes).await,
                    None => shared.queue.ack(receipt).await,
                }
            }
        })
        .await;
    // A result the queue refuses (over `max_payload_bytes`) is a failed
    // attempt, not an item left pending to fail the same way again.
    if let Err(Error::InvalidInput(why)) = &acked {
        let text = format!("result refused: {why}");
        return Box::pin(finish_err(shared, receipt, text)).await;
    }
    match acked {
        Ok(()) => {
            shared.report().acked += 1;
            shared.emit(Event::Acked {
                id: receipt.id,
                elapsed,
            });
        }
        Err(e) => lost_or_error(shared, receipt, "ack", e),
    }
}

async fn finish_err<Q: WorkQueue>(shared: &Shared<Q>, receipt: Receipt, text: String) {
    let last = receipt.delivery >= shared.max_deliveries;
    let result = if last {
        shared
            .persist("dead_letter", || shared.queue.dead_letter(receipt, &text))
            .await
            .map(|()| RetryOutcome::DeadLettered)
    } else if shared.flow.is_some() {
        match shared.persist("park", || shared.queue.park(receipt)).await {
            Ok(()) => shared.queue.now_ms().await.map(|now| {
                shared.report().retried += 1;
                shared.emit(Event::Retried {
                    id: receipt.id,
                    delivery: receipt.delivery,
                    not_before_ms: now,
                    error: text.clone(),
                });
                RetryOutcome::Delayed
            }),
            Err(e) => Err(e),
        }
    } else {
        let wait = shared.retry.next_delay(receipt.delivery);
        match shared.queue.now_ms().await {
            Ok(now) => {
                let not_before_ms = now.saturating_add(ms(wait));
                let r = shared
                    .persist("retry", || shared.queue.retry(receipt, not_before_ms))
                    .await;
                if let Ok(RetryOutcome::Delayed) = r {
                    shared.report().retried += 1;
                    shared.emit(Event::Retried {
                        id: receipt.id,
                        delivery: receipt.delivery,
                        not_before_ms,
                        error: text.clone(),
                    });
                }
                r
            }
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(RetryOutcome::Delayed) => {}
        Ok(RetryOutcome::DeadLettered) => {
            shared.report().dead_lettered += 1;
            shared.emit(Event::DeadLettered {
                id: receipt.id,
                delivery: receipt.delivery,
                reason: if last {
                    text
                } else {
                    crate::item::MAX_DELIVERIES_REASON.to_string()
                },
            });
        }
        Err(e) => lost_or_error(
            shared,
            receipt,
            if last { "dead_letter" } else { "retry" },
            e,
        ),
    }
}

/// The handler said the item was not attempted (a worker-side failure):
/// give it back without spending its delivery, due after a backoff that
/// grows with the worker's failures in a row, and pause claiming for that
/// long, so that a worker that cannot start anything does not churn through
/// the backlog.
async fn finish_not_attempted<Q: WorkQueue>(shared: &Shared<Q>, receipt: Receipt, text: String) {
    let streak = shared
        .worker_faults
        .fetch_add(1, Ordering::Relaxed)
        .saturating_add(1);
    let wait = shared.retry.next_delay(streak);
    {
        let mut until = lock(&shared.claims_paused_until);
        *until = (*until).max(Instant::now() + wait);
    }
    tracing::warn!(error = %text, "item not attempted: the worker failed");
    release_for(shared, receipt, wait, text).await;
}

/// The handler asked to back the item's flow off for `d` (SPEC 9, Worker):
/// hold the flow for every consumer, then give the item back without
/// spending its delivery, due when the back-off lifts.
async fn finish_back_off<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    flow: &str,
    d: Duration,
    text: String,
) {
    tracing::info!(flow, back_off_ms = ms(d), reason = %text, "flow backed off");
    if !flow.is_empty()
        && let Err(e) = shared.queue.back_off(flow, d).await
    {
        shared.emit(Event::QueueError {
            op: "back_off",
            error: e.to_string(),
        });
    }
    release_for(shared, receipt, d, text).await;
}

/// Give the item back without spending its delivery, due `wait` from now
/// by the queue's clock, and report it as released (or lost).
async fn release_for<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    wait: Duration,
    text: String,
) {
    let result = match shared.queue.now_ms().await {
        Ok(now) => {
            let not_before_ms = now.saturating_add(ms(wait));
            shared
                .persist("release", || shared.queue.release(receipt, not_before_ms))
                .await
                .map(|()| not_before_ms)
        }
        Err(e) => Err(e),
    };
    match result {
        Ok(not_before_ms) => {
            shared.report().released += 1;
            shared.emit(Event::Released {
                id: receipt.id,
                delivery: receipt.delivery,
                not_before_ms,
                reason: text,
            });
        }
        Err(e) => lost_or_error(shared, receipt, "release", e),
    }
}

/// At shutdown past the grace period: give the cancelled items back
/// without spending their deliveries, due at once. Stops at the first
/// failure that is not a lost lease (the queue is unreachable: the rest
/// stay pending for `reclaim_stale`).
async fn give_back_unfinished<Q: WorkQueue>(shared: &Shared<Q>, unfinished: Vec<Receipt>) {
    if unfinished.is_empty() {
        return;
    }
    let now = match shared.queue.now_ms().await {
        Ok(now) => now,
        Err(e) => {
            shared.emit(Event::QueueError {
                op: "release",
                error: e.to_string(),
            });
            return;
        }
    };
    for receipt in unfinished {
        match shared.queue.release(receipt, now).await {
            Ok(()) => {
                shared.report().released += 1;
                shared.emit(Event::Released {
                    id: receipt.id,
                    delivery: receipt.delivery,
                    not_before_ms: now,
                    reason: "worker stopped".to_string(),
                });
            }
            Err(e) if e.is_lease_lost() => lost_or_error(shared, receipt, "release", e),
            Err(e) => {
                lost_or_error(shared, receipt, "release", e);
                return;
            }
        }
    }
}

fn lost_or_error<Q: WorkQueue>(shared: &Shared<Q>, receipt: Receipt, op: &'static str, e: Error) {
    if e.is_lease_lost() {
        shared.report().lease_lost += 1;
        shared.emit(Event::LeaseLost {
            id: receipt.id,
            delivery: receipt.delivery,
        });
    } else {
        tracing::warn!(id = receipt.id, op, error = %e, "queue operation failed");
        shared.emit(Event::QueueError {
            op,
            error: e.to_string(),
        });
    }
}

/// Touch every in-flight item each lease / 3. A receipt that has been lost is
/// dropped from the set (its handler's ack will report the loss) and the
/// rest are touched again, since `touch` is all-or-nothing.
async fn heartbeat<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let mut tick = tokio::time::interval(shared.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut receipts: Vec<Receipt> = lock(&shared.in_flight).values().copied().collect();
        // A transient failure is tried again, with a growing pause, until
        // the next beat is due (SPEC 9, Worker).
        let give_up = Instant::now().checked_add(shared.lease / 3);
        let mut pause = Duration::from_millis(50);
        while !receipts.is_empty() {
            match shared.queue.touch(receipts.clone()).await {
                Ok(()) => break,
                Err(Error::LeaseLost { lease, .. }) => {
                    // By lease, the one field no two claims share: a redrive
                    // repeats (id, delivery), and this worker may hold both
                    // the lost claim and a current one of the same item.
                    let before = receipts.len();
                    receipts.retain(|r| r.lease != lease);
                    lock(&shared.in_flight).remove(&lease);
                    if receipts.len() == before {
                        // A backend naming a receipt it was not given: touch
                        // the rest next tick rather than loop.
                        break;
                    }
                }
                Err(e) => {
                    shared.emit(Event::QueueError {
                        op: "touch",
                        error: e.to_string(),
                    });
                    if !e.is_retryable() || give_up.is_some_and(|g| Instant::now() + pause >= g) {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
}

/// Promote delayed items at their deadline. Sleeps until the soonest
/// `not_before`, re-reading it at least every lease / 2 (a timer added
/// meanwhile is also promoted by the next claim, which promotes first).
async fn timers<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let cap = shared.lease / 2;
    loop {
        let pause = match (shared.queue.next_due().await, shared.queue.now_ms().await) {
            (Ok(Some(due)), Ok(now)) if due <= now => match shared.queue.promote_due().await {
                Ok(n) if n > 0 => continue,
                // Due by `next_due` yet nothing promoted (another consumer
                // was first): look again shortly rather than spin.
                Ok(_) => Duration::from_millis(10),
                Err(e) => {
                    shared.emit(Event::QueueError {
                        op: "promote_due",
                        error: e.to_string(),
                    });
                    cap
                }
            },
            (Ok(Some(due)), Ok(now)) => Duration::from_millis(due - now).min(cap),
            (Ok(None), Ok(_)) => cap,
            (Err(e), _) | (_, Err(e)) => {
                shared.emit(Event::QueueError {
                    op: "next_due",
                    error: e.to_string(),
                });
                cap
            }
        };
        tokio::time::sleep(pause).await;
    }
}
