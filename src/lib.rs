//! # workjournal
//!
//! A durable work queue. Every piece of work is journaled before it runs and
//! removed only when a consumer acknowledges it, so a process that dies
//! mid-work finds the work again when it comes back.
//!
//! It has delayed items (timers) with a due lane claimed before the backlog,
//! leases with touch and reclaim of stale claims, max-delivery dead-lettering
//! with redrive, per-flow pause / park / resume / step, idempotency done
//! markers with a time-to-live, retries with backoff, and exact stats. The
//! contract is `docs/SPEC.md`; every backend follows it and one conformance
//! suite checks that they do.
//!
//! ## Choosing a backend
//!
//! | backend | feature | storage | pick it for |
//! |---|---|---|---|
//! | [`MemoryQueue`] | always | process memory, not durable | tests; the reference model |
//! | [`EmbeddedQueue`] | `embedded` (default) | one crash-safe redb file | one process on one machine: edge devices, single servers |
//! | `RedisQueue` | `redis` | Redis sorted sets and hashes; one server or a Redis Cluster (`redis+cluster://`) | many processes on many machines sharing one Redis |
//! | `RemoteQueue` | `remote` | the queue another process serves (`workjournal serve`) | many processes on one node sharing one file |
//!
//! [`PartitionedQueue`] spreads one queue over several queues of any
//! backend (e.g. Redis namespaces on different cluster primaries): a flow
//! stays on one partition, claims go round-robin, and FIFO and caps hold
//! per partition (SPEC 6.1).
//!
//! Every backend implements [`WorkQueue`]; code written against the trait
//! runs on any of them. Choose at run time with [`BoxQueue`], or let
//! `connect` pick the backend from a path or URL (feature `remote`). Other
//! features: `server` serves any queue over HTTP + JSON on a Unix socket or
//! TCP (docs/API.md); `forward` adds `forward::Forwarder`, which hands an
//! embedded queue's items over to a Redis queue exactly once (store and
//! forward); `cron` lets a [`Schedule`] (recurring items, exactly once per
//! slot: [`Schedule`]) take cron expressions in IANA time zones;
//! `testing` exposes the conformance cases, the reference model
//! and the simulated disk ([`testing`], feature `testing`). The default is
//! `embedded` alone. The `workjournal` command is a crate of its own,
//! `workjournal-cli` (cli/ in the repository), so depending on the library
//! compiles none of the command's dependencies.
//!
//! ## Adding, claiming, acknowledging
//!
//! ```
//! use std::time::Duration;
//! use workjournal::{ClaimFrom, Config, EmbeddedQueue, NewItem, WorkQueue};
//!
//! # fn main() -> Result<(), Box<dyn std::error::Error>> {
//! # let dir = tempfile::tempdir()?;
//! # let path = dir.path().join("jobs.redb");
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let queue = EmbeddedQueue::open(&path, Config::default()).await?;
//! queue.add(NewItem::new(b"send invoice 42".to_vec())).await?;
//!
//! for claimed in queue.claim(10, Duration::from_secs(1), ClaimFrom::All).await? {
//!     // ... do the work ...
//!     queue.ack(claimed.receipt).await?;
//! }
//! assert_eq!(queue.stats().await?.pending, 0);
//! queue.close().await?;
//! # Ok::<(), workjournal::Error>(())
//! # })?;
//! # Ok(())
//! # }
//! ```
//!
//! A claim hands out a [`Receipt`]; every later operation on the item names
//! it, and fails with [`Error::LeaseLost`] once someone else has taken the
//! item over (after the claim went stale and was reclaimed).
//!
//! ## A worker with retries
//!
//! [`Worker`] runs an async handler over a queue's items: it claims into
//! free slots, acks on `Ok`, retries with [`RetryPolicy`] backoff on `Err`,
//! dead-letters on the queue's last delivery ([`Config::max_deliveries`],
//! read through [`WorkQueue::max_deliveries`]), keeps leases fresh, reclaims
//! stale items, promotes timers and shuts down gracefully.
//!
//! ```
//! use std::time::Duration;
//! use workjournal::{Config, MemoryQueue, NewItem, RetryPolicy, WorkQueue, Worker};
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let queue = MemoryQueue::new(Config::default().max_deliveries(2));
//! queue.add(NewItem::new(b"flaky".to_vec())).await?;
//!
//! let report = Worker::new(queue.clone())
//!     .concurrency(4)
//!     .retry_policy(RetryPolicy::default().base(Duration::from_millis(10)))
//!     .until_empty(true)
//!     .run(
//!         |claimed| async move {
//!             if claimed.receipt.delivery < 2 {
//!                 return Err("the far side was busy");
//!             }
//!             Ok(())
//!         },
//!         std::future::pending(),
//!     )
//!     .await?;
//! assert_eq!((report.retried, report.acked), (1, 1));
//! # Ok::<(), workjournal::Error>(())
//! # }).unwrap();
//! ```
//!
//! ## Idempotent side effects
//!
//! Delivery is at least once: a crash after the side effect and before the
//! ack runs the item again. The item's `id` is stable through every move, so
//! key side effects by it; [`worker::idempotent_step`] skips a step already
//! marked done (within [`Config::done_ttl`]).
//!
//! ```
//! use workjournal::{Config, Error, MemoryQueue, worker::idempotent_step};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let queue = MemoryQueue::new(Config::default());
//! let id = 42;
//! let sent = idempotent_step(&queue, id, "email", || async { Ok::<_, Error>("sent") }).await?;
//! let again = idempotent_step(&queue, id, "email", || async { Ok::<_, Error>("sent") }).await?;
//! assert_eq!((sent, again), (Some("sent"), None));
//! # Ok::<(), Error>(())
//! # }).unwrap();
//! ```
//!
//! ## Flows
//!
//! Items carry a flow name ([`NewItem::flow`]). Pausing a flow parks its
//! items as claims meet them; [`WorkQueue::step`] runs one parked item (to
//! try a fix on one before releasing the rest), [`WorkQueue::resume`] puts
//! them all back in the backlog, oldest first.
//!
//! ```
//! use std::time::Duration;
//! use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, WorkQueue};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let queue = MemoryQueue::new(Config::default());
//! queue.pause("billing").await?;
//! queue.add(NewItem::new(b"invoice 1".to_vec()).flow("billing")).await?;
//! queue.add(NewItem::new(b"invoice 2".to_vec()).flow("billing")).await?;
//! assert!(queue.claim(10, Duration::ZERO, ClaimFrom::All).await?.is_empty());
//! assert_eq!(queue.parked("billing").await?, 2);
//!
//! let one = queue.step("billing").await?.expect("a parked item");
//! queue.ack(one.receipt).await?;
//! assert_eq!(queue.resume("billing").await?, 1);
//! # Ok::<(), workjournal::Error>(())
//! # }).unwrap();
//! ```
//!
//! ## Choosing the backend at run time
//!
//! [`BoxQueue`] erases the backend's type, so a configuration flag can pick
//! it (the `workjournal` command does):
//!
//! ```
//! use workjournal::{BoxQueue, Config, EmbeddedQueue, MemoryQueue, WorkQueue};
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! # let dir = tempfile::tempdir().unwrap();
//! let durable = true;
//! let queue = if durable {
//!     BoxQueue::new(EmbeddedQueue::open(dir.path().join("q.redb"), Config::default()).await?)
//! } else {
//!     BoxQueue::new(MemoryQueue::new(Config::default()))
//! };
//! assert!(queue.stats().await?.durable);
//! # Ok::<(), workjournal::Error>(())
//! # }).unwrap();
//! ```
//!
//! ## Cancel safety
//!
//! Dropping any future of this crate never leaves a queue half-changed, and
//! nothing is ever lost by cancelling; but not every method is cancel safe
//! in tokio's sense (that dropping the future has no effect):
//!
//! - `claim`, `reclaim` and `step` are not cancel safe: if the future
//!   is dropped after the request reached the backend, the items it took may
//!   be pending with nobody holding them. They come back through
//!   `reclaim` once idle (embedded: at the next open). Dropped while a
//!   claim is still waiting, nothing was taken.
//! - The other writes (`add`, `ack`, `retry`, ...) are not cancel safe
//!   either: dropped, the write may or may not have happened, whole.
//! - The reads (`stats`, `peek`, `next_due`, ...) are cancel safe.
//!
//! Each method's own `# Cancel safety` section says which case it is.
//!
//! ## Implementing `WorkQueue`
//!
//! Every operation of the contract is a [`Request`] with its [`Reply`]
//! (docs/DESIGN.md, One request type): a backend implements
//! [`WorkQueue::call`] and [`WorkQueue::max_deliveries`], and the typed
//! methods (`add`, `claim`, ...) come with the trait. A layer over another
//! queue forwards `call` alone; this one counts the requests it passes on:
//!
//! ```
//! use std::sync::atomic::{AtomicU64, Ordering};
//! use workjournal::{MemoryQueue, NewItem, Reply, Request, Result, WorkQueue};
//!
//! #[derive(Debug, Default)]
//! struct Counted<Q> {
//!     inner: Q,
//!     calls: AtomicU64,
//! }
//!
//! impl<Q: WorkQueue> WorkQueue for Counted<Q> {
//!     async fn call(&self, request: Request) -> Result<Reply> {
//!         self.calls.fetch_add(1, Ordering::Relaxed);
//!         self.inner.call(request).await
//!     }
//!
//!     fn max_deliveries(&self) -> u32 {
//!         self.inner.max_deliveries()
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new().unwrap().block_on(async {
//! let queue = Counted { inner: MemoryQueue::new(Default::default()), calls: AtomicU64::new(0) };
//! queue.add(NewItem::new(b"job".to_vec())).await?;
//! assert_eq!(queue.stats().await?.backlog, 1);
//! assert_eq!(queue.calls.load(Ordering::Relaxed), 2);
//! # Ok::<(), workjournal::Error>(())
//! # }).unwrap();
//! ```
//!
//! A new storage backend answers each [`Request`] variant it knows (the
//! enum is `#[non_exhaustive]`: answer the others with
//! [`Error::InvalidInput`]) and proves itself with the conformance suite
//! (feature `testing`): implement [`testing::Factory`] to make fresh
//! queues, then expand one test per case of `docs/SPEC.md`:
//!
//! ```no_run
//! # #[cfg(feature = "testing")]
//! mod my_backend {
//!     use workjournal::testing::{BoxFuture, Factory, Subject};
//!     use workjournal::{BoxQueue, Config, MemoryQueue};
//!
//!     /// Makes the queues under test (here memory ones, for the example).
//!     struct MyFactory;
//!
//!     impl Factory for MyFactory {
//!         fn name(&self) -> &'static str {
//!             "mine"
//!         }
//!         fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
//!             Box::pin(async move { Subject::new(BoxQueue::new(MemoryQueue::new(config)), Vec::new()) })
//!         }
//!         fn durable(&self) -> bool {
//!             false
//!         }
//!     }
//!
//!     workjournal::conformance_tests!(MyFactory);
//! }
//! # fn main() {}
//! ```
//!
//! The [`testing::ops`] module drives a backend with random operation
//! sequences against the reference [`testing::Model`].
//!
//! ## Naming
//!
//! Builder types ([`Config`], [`NewItem`], `RedisOptions`) set with the
//! plain name and get with `get_` (as `std::process::Command` does).

#![deny(missing_docs)]
// No unwrap, expect or panic on any path that input, stored bytes or a
// server reply can reach (SPEC section 5); the test support of `testing`
// allows them module by module.
#![cfg_attr(
    not(test),
    deny(clippy::unwrap_used, clippy::expect_used, clippy::panic)
)]
#![forbid(unsafe_code)]
#![cfg_attr(docsrs, feature(doc_cfg))]
#![warn(unreachable_pub, missing_debug_implementations)]

mod backend;
mod browse;
mod clock;
mod config;
#[cfg(feature = "remote")]
mod connect;
mod error;
#[cfg(feature = "forward")]
mod handover;
mod item;
mod limit;
#[cfg(feature = "metrics")]
pub mod metered;
mod outcome;
mod queue;
mod request;
mod schedule;
pub mod worker;

#[cfg(feature = "forward")]
pub mod forward;

#[cfg(feature = "server")]
pub mod server;
#[cfg(feature = "testing")]
pub mod testing;

/// The README's Rust examples, compiled and run as doctests.
#[cfg(all(doctest, feature = "embedded", feature = "redis"))]
#[doc = include_str!("../README.md")]
mod readme_doctests {}

pub use browse::{ItemPage, ItemState, ListQuery, ListedItem, MAX_LIST_LIMIT, MAX_SEARCH_SCAN};
pub use clock::{CLOCK_STEP_TOLERANCE_MS, Clock, ManualClock, SharedClock, Sleep, SystemClock};
pub use config::{
    Config, DEFAULT_AGING_STEP, DEFAULT_DEAD_LETTER_CAP, DEFAULT_DEDUP_WINDOW, DEFAULT_DONE_TTL,
    DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_PAYLOAD_BYTES, DEFAULT_RESULT_TTL, DEFAULT_RETENTION,
    MAX_AGING_STEP, MAX_RETENTION_COUNT, MEMORY_DONE_MARKER_CAP, Retention,
};
pub use error::{Error, Result};
pub use item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, Lane,
    MAX_DELIVERIES_REASON, MAX_FLOW_NAME_BYTES, NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
pub use limit::{FlowLimit, FlowLimits, RateLimit};
pub use outcome::{Chunk, Outcome, OutcomeKind, encode_result};
pub use queue::{BoxQueue, WorkQueue};
pub use request::{Reply, Request};
pub use schedule::{
    CatchUp, Fired, FiredSchedule, MAX_SCHEDULE_NAME_BYTES, MAX_SCHEDULE_PREVIEW,
    MIN_SCHEDULE_EVERY_MS, Overlap, SCHEDULE_SKIP_GRACE_MS, Schedule, ScheduleInfo, ScheduleQueue,
    Spec,
};
pub use worker::{HandlerError, RetryPolicy, Worker, cancel_requested, idempotent_step};

pub use backend::memory::MemoryQueue;
pub use backend::partitioned::{MAX_PARTITIONS, PartitionedQueue};
#[cfg(feature = "metrics")]
pub use metered::{MeteredQueue, Totals};

#[cfg(feature = "embedded")]
pub use backend::embedded::{EmbeddedOptions, EmbeddedQueue};

#[cfg(feature = "redis")]
pub use backend::redis::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_REPLICA_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, Origin,
    RedisOptions, RedisQueue,
};

// The wire types of `workjournal serve`, shared by the server and
// `RemoteQueue`: public for the command and the tests, hidden from the
// docs, since users meet the wire as docs/API.md and the OpenAPI document,
// never as these types (docs/DESIGN.md, Public surface).
#[cfg(any(feature = "remote", feature = "server"))]
#[doc(hidden)]
pub mod wire;
#[cfg(feature = "remote")]
pub use backend::remote::{
    DEFAULT_CLAIM_POLL, DEFAULT_POOL_IDLE_TIMEOUT, DEFAULT_REMOTE_CONNECT_TIMEOUT,
    DEFAULT_REQUEST_TIMEOUT, RemoteOptions, RemoteQueue,
};

#[cfg(feature = "remote")]
pub use connect::{
    ConnectOptions, DEFAULT_LOCKED_WAIT, FileQueue, Opened, Target, connect, socket_path_for,
};
