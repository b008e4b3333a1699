//! The worker runtime: the claim / heartbeat / retry / shutdown loop, written
//! once (SPEC section 9).
//!
//! A [`Worker`] runs an async handler for every item it takes from a queue:
//!
//! - it claims only as many items as it has free slots (`concurrency`),
//!   plus up to [`Worker::prefetch`] items held ahead, which start the
//!   moment a slot frees;
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
//! - on shutdown it stops claiming, gives back prefetched items that have
//!   not started, waits for in-flight items up to a grace
//!   period and gives the rest back with [`WorkQueue::release`] (no delivery
//!   spent), or leaves them pending for `reclaim` if that fails.
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
use std::sync::atomic::AtomicU32;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::task::JoinSet;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::item::{Claimed, Receipt};
use crate::queue::WorkQueue;

mod backed_off;
mod cancel;
mod events;
mod finish;
mod retry;
mod slots;
mod upkeep;

use backed_off::BackedOff;

pub use cancel::cancel_requested;
use cancel::watch_cancels;
pub use events::{Event, Report};
use finish::give_back_unfinished;
pub use retry::{HandlerError, RetryPolicy};
use slots::{StartTurn, fill_slots, supervise};
use upkeep::{heartbeat, schedules, timers};

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
    prefetch: usize,
    lease: Duration,
    retry: RetryPolicy,
    grace: Duration,
    cancel_grace: Duration,
    claim_wait: Duration,
    until_empty: bool,
    flow: Option<String>,
    on_event: Option<EventFn>,
}

impl<Q> fmt::Debug for Worker<Q> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Worker")
            .field("concurrency", &self.concurrency)
            .field("prefetch", &self.prefetch)
            .field("lease", &self.lease)
            .field("retry", &self.retry)
            .field("grace", &self.grace)
            .field("cancel_grace", &self.cancel_grace)
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
            prefetch: 0,
            lease: DEFAULT_LEASE,
            retry: RetryPolicy::default(),
            grace: DEFAULT_GRACE,
            cancel_grace: Duration::ZERO,
            claim_wait: DEFAULT_CLAIM_WAIT,
            until_empty: false,
            flow: None,
            on_event: None,
        }
    }

    /// How many handlers run at once. The worker claims only into free
    /// slots (and its [`Worker::prefetch`]); a slot frees when its handler
    /// returns, so the next claim can share a commit with that item's ack
    /// (which may briefly leave one more item pending per slot). 0 is treated as 1, and values above
    /// [`MAX_CONCURRENCY`] as that. Default: 1.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.clamp(1, MAX_CONCURRENCY);
        self
    }

    /// Prefetch: how many items, in all, the worker may hold claimed ahead
    /// of its free slots (SPEC 9, Worker). With `n > 0` it claims up to
    /// `concurrency + n` items; those beyond the running handlers wait,
    /// their leases kept fresh by the heartbeat, and the next one starts
    /// the moment a handler returns, while that handler's ack and the claim
    /// that refills the prefetch share one commit. Only a worker that runs
    /// short handlers gains; pending can then reach `concurrency + n`.
    /// Prefetched items not started at shutdown are given back at once with
    /// [`WorkQueue::release`] (their deliveries not spent; counted in
    /// [`Report::released`]); one whose claim the heartbeat finds lost
    /// while it waits is not run ([`Report::lease_lost`]), and one of a
    /// flow this worker backed off meanwhile is given back, due at once,
    /// for the back-off to hold ([`HandlerError::back_off`]). Values above
    /// [`MAX_CONCURRENCY`] are that.
    /// One-flow mode ([`Worker::flow`]) does not prefetch: an item stepped
    /// ahead and given back would go to its paused flow's parked tail, out
    /// of order. Default: 0 (claim only into free slots).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n.min(MAX_CONCURRENCY);
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

    /// How long a handler whose item was cancelled while it ran (SPEC 3,
    /// Cancelling) may go on after [`cancel_requested`] resolves, to stop
    /// cleanly, before the worker drops its future. Either way the item
    /// ends as cancelled ([`Event::Cancelled`], [`Report::cancelled`]):
    /// the handler's answer is not used. The worker learns of the cancel
    /// from the queue at once (`wait_cancelled`, from any process), not at
    /// its next heartbeat. Default: 0 (the future is dropped at once).
    pub fn cancel_grace(mut self, grace: Duration) -> Self {
        self.cancel_grace = grace;
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
    /// pending and come back through `reclaim`. Nothing is lost.
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
            held_changed: tokio::sync::Notify::new(),
            cancels: Mutex::new(HashMap::new()),
            cancel_grace: self.cancel_grace,
            report: Mutex::new(Report::default()),
            next_reclaim: Mutex::new(Some(Instant::now())),
            claims_paused_until: Mutex::new(Instant::now()),
            worker_faults: AtomicU32::new(0),
            backed_off: Mutex::new(HashMap::new()),
            back_off_calls: AtomicU32::new(0),
        });
        let dropped_at_start = shared
            .queue
            .stats()
            .await
            .map(|s| s.dead_letters_dropped)
            .ok();
        let claim_wait = self.claim_wait.min(self.lease / 2);
        // Claims take `permits` (running handlers plus the prefetch); a
        // claimed item starts once it holds one of `running`.
        // One-flow mode never prefetches: an item stepped ahead and given
        // back unstarted would go to its paused flow's parked tail.
        let prefetch = if shared.flow.is_some() {
            0
        } else {
            self.prefetch
        };
        let permits = Arc::new(Semaphore::new(self.concurrency + prefetch));
        let running = Arc::new(Semaphore::new(self.concurrency));

        let mut background = JoinSet::new();
        background.spawn(heartbeat(shared.clone()));
        background.spawn(watch_cancels(shared.clone()));
        if shared.flow.is_none() {
            background.spawn(timers(shared.clone()));
            background.spawn(schedules(shared.clone()));
        }

        let mut tasks: JoinSet<()> = JoinSet::new();
        let mut shutdown = std::pin::pin!(shutdown);
        let mut fill: Option<FillFuture> = None;
        let mut failure: Option<Error> = None;
        // Where the next claimed item queues for a running slot.
        let mut last_turn: Option<tokio::sync::oneshot::Receiver<()>> = None;

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
                                        error: crate::error::one_line(&e),
                                    }),
                                }
                            }
                        }
                        Ok(got) => {
                            for (claimed, permit, asked) in got {
                                tasks.spawn(supervise(
                                    shared.clone(),
                                    claimed,
                                    permit,
                                    asked,
                                    running.clone(),
                                    StartTurn::next(&mut last_turn, &running),
                                ));
                            }
                        }
                        Err(e) if e.is_retryable() => {
                            shared.emit(Event::QueueError { op: "claim", error: crate::error::one_line(&e) });
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
        // Prefetched items that have not started are given back now
        // (their supervisors see the closed semaphore).
        running.close();

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

type FillFuture = Pin<
    Box<dyn Future<Output = Result<Vec<(Claimed, OwnedSemaphorePermit, Option<Instant>)>>> + Send>,
>;

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
    /// Woken when an item joins the heartbeat set: the cancel watch asks
    /// the queue about the new set.
    held_changed: tokio::sync::Notify,
    /// Each held item's cancel signal, by lease number (SPEC 3,
    /// Cancelling).
    cancels: Mutex<HashMap<u64, tokio::sync::watch::Sender<bool>>>,
    /// [`Worker::cancel_grace`].
    cancel_grace: Duration,
    report: Mutex<Report>,
    /// When the next reclaim is due; `None`: never (an endless lease).
    next_reclaim: Mutex<Option<Instant>>,
    /// After a worker-side failure ([`HandlerError::not_attempted`]) no
    /// claim is made before this instant: the backoff.
    claims_paused_until: Mutex<Instant>,
    /// Worker-side failures in a row (reset by any handler that ran): the
    /// backoff grows with it as a retry's does with deliveries.
    worker_faults: AtomicU32,
    /// Flows this worker backed off ([`HandlerError::back_off`]): a
    /// prefetched item of such a flow is given back instead of started
    /// (SPEC 9, Prefetch). Expired entries are dropped at the next back-off.
    backed_off: Mutex<HashMap<String, BackedOff>>,
    /// Back-off calls made so far (wrapping): the number of the latest names it in
    /// [`BackedOff::call`].
    back_off_calls: AtomicU32,
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

    /// Tell the handler of the item held under `lease` that it was
    /// cancelled (SPEC 3, Cancelling).
    fn cancel_lease(&self, lease: u64) {
        if let Some(tx) = lock(&self.cancels).get(&lease) {
            tx.send_replace(true);
        }
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
                        error: crate::error::one_line(&e),
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
