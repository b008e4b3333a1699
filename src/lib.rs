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
//! ## Backends
//!
//! | backend | feature | storage |
//! |---|---|---|
//! | [`MemoryQueue`] | always | process memory; the reference model |
//! | [`EmbeddedQueue`] | `embedded` (default) | one crash-safe redb file |
//! | `RedisQueue` | `redis` | Redis (sorted sets and hashes), shared by many processes |
//!
//! Choose at run time with [`BoxQueue`]. Other features: `cli` (default) builds
//! the `workjournal` command; `testing` exposes the conformance cases;
//! `forward` adds [`forward::Forwarder`], which hands an embedded queue's
//! items over to a Redis queue exactly once (store and forward).
//!
//! ## Workers
//!
//! [`Worker`] runs an async handler over a queue's items: claims into free
//! slots, acks on `Ok`, retries with [`RetryPolicy`] backoff on `Err`,
//! dead-letters on the last delivery, keeps leases fresh, reclaims stale
//! items, promotes timers and shuts down gracefully. The `workjournal work
//! --exec CMD` command is a `Worker` running a shell command per item.
//!
//! ## Example
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
//! let added = queue.add(NewItem::new(b"send invoice 42".to_vec())).await?;
//!
//! for claimed in queue.claim(10, Duration::from_secs(1), ClaimFrom::All).await? {
//!     // ... do the work, idempotently keyed by claimed.item.id ...
//!     queue.ack(claimed.receipt).await?;
//! }
//! assert_eq!(queue.stats().await?.pending, 0);
//! queue.close().await?;
//! # let _ = added;
//! # Ok::<(), workjournal::Error>(())
//! # })?;
//! # Ok(())
//! # }
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]
#![warn(unreachable_pub, missing_debug_implementations)]

mod backend;
mod clock;
#[cfg(feature = "embedded")]
mod codec;
mod config;
mod error;
mod item;
mod queue;
pub mod worker;

#[cfg(feature = "forward")]
pub mod forward;

#[cfg(feature = "testing")]
pub mod testing;

pub use clock::{CLOCK_STEP_TOLERANCE_MS, Clock, ManualClock, SharedClock, Sleep, SystemClock};
pub use config::{
    Config, DEFAULT_AGING_STEP, DEFAULT_DEAD_LETTER_CAP, DEFAULT_DEDUP_WINDOW, DEFAULT_DONE_TTL,
    DEFAULT_MAX_DELIVERIES, DEFAULT_MAX_PAYLOAD_BYTES, MAX_AGING_STEP, MEMORY_DONE_MARKER_CAP,
};
pub use error::{Error, Result};
pub use item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, Lane, MAX_DELIVERIES_REASON, MAX_FLOW_NAME_BYTES,
    NewItem, Receipt, Reclaimed, RetryOutcome, Stats,
};
pub use queue::{BoxFuture, BoxQueue, DynWorkQueue, WorkQueue};
pub use worker::{
    Event as WorkerEvent, HandlerError, Report as WorkerReport, RetryPolicy, Worker,
    idempotent_step,
};

pub use backend::memory::{Location, MemoryQueue, Model};

#[cfg(feature = "embedded")]
pub use backend::embedded::{Durability, EmbeddedOptions, EmbeddedQueue};

#[cfg(feature = "redis")]
pub use backend::redis::{
    DEFAULT_CONNECT_TIMEOUT, DEFAULT_REPLICA_TIMEOUT, DEFAULT_RESPONSE_TIMEOUT, Origin,
    RedisOptions, RedisQueue,
};
