//! Test support shared by the integration tests, the fuzz targets and the
//! benchmarks (feature `testing`): the conformance cases every backend must
//! pass, factories that make a fresh queue of each backend, and a
//! simulated disk for power-loss and I/O-fault tests ([`faults`]).
//!
//! Not part of the stable API.

use std::any::Any;

use crate::config::Config;
use crate::queue::{BoxFuture, BoxQueue};

pub mod conformance;
#[cfg(feature = "redis")]
pub mod redis_server;

#[cfg(feature = "redis")]
pub use redis_server::{RedisFactory, RedisServer, RedisServerOptions, TestCertificates};

#[cfg(feature = "embedded")]
pub mod faults;

#[cfg(feature = "embedded")]
pub mod fuzz;

/// Schema-1 queue files for migration tests (SPEC section 6).
#[cfg(feature = "embedded")]
pub use crate::backend::embedded::migrate::{V1Item, write_schema1_fixture};
pub mod ops;
pub mod proxy;

/// A queue under test and whatever keeps it alive (a temp dir, a server).
pub struct Subject {
    /// The queue, type-erased so one case body serves every backend.
    pub queue: BoxQueue,
    keep: Vec<Box<dyn Any + Send + Sync>>,
}

impl std::fmt::Debug for Subject {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Subject")
            .field("keep", &self.keep.len())
            .finish()
    }
}

impl Subject {
    /// A subject whose resources `keep` live as long as it.
    pub fn new(queue: BoxQueue, keep: Vec<Box<dyn Any + Send + Sync>>) -> Self {
        Subject { queue, keep }
    }
}

/// Makes a fresh, empty queue of one backend with a given config.
pub trait Factory: Send + Sync {
    /// The backend's name, for messages.
    fn name(&self) -> &'static str;

    /// A fresh empty queue using `config` (which carries the test's clock).
    ///
    /// # Panics
    ///
    /// Test support: panics if the backend cannot be set up.
    fn make(&self, config: Config) -> BoxFuture<'_, Subject>;

    /// Whether the backend is durable (`stats().durable`).
    fn durable(&self) -> bool;
}

/// Factory of [`MemoryQueue`](crate::MemoryQueue)s.
#[derive(Debug, Default, Clone, Copy)]
pub struct MemoryFactory;

impl Factory for MemoryFactory {
    fn name(&self) -> &'static str {
        "memory"
    }

    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(
            async move { Subject::new(BoxQueue::new(crate::MemoryQueue::new(config)), Vec::new()) },
        )
    }

    fn durable(&self) -> bool {
        false
    }
}

/// Factory of [`EmbeddedQueue`](crate::EmbeddedQueue)s, each in a file of
/// its own temp dir.
#[cfg(feature = "embedded")]
#[derive(Debug, Default, Clone, Copy)]
pub struct EmbeddedFactory;

#[cfg(feature = "embedded")]
impl Factory for EmbeddedFactory {
    fn name(&self) -> &'static str {
        "embedded"
    }

    #[allow(clippy::expect_used)]
    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(async move {
            let dir = tempfile::tempdir().expect("temp dir for an embedded queue");
            let queue = crate::EmbeddedQueue::open(dir.path().join("queue.redb"), config)
                .await
                .expect("open an embedded queue in a fresh temp dir");
            Subject::new(BoxQueue::new(queue), vec![Box::new(dir)])
        })
    }

    fn durable(&self) -> bool {
        true
    }
}

/// The counts of [`Stats`](crate::Stats) that a recount of item locations
/// can check, in `Stats`' own terms (`backlog` includes the due lane).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StateCounts {
    /// Backlog plus due lane.
    pub backlog: u64,
    /// Due lane.
    pub due: u64,
    /// Pending.
    pub pending: u64,
    /// Delayed.
    pub delayed: u64,
    /// Parked.
    pub parked: u64,
    /// Dead letters.
    pub dead_letters: u64,
}

impl StateCounts {
    /// The counts a queue reports.
    pub fn of_stats(stats: &crate::Stats) -> Self {
        StateCounts {
            backlog: stats.backlog,
            due: stats.due,
            pending: stats.pending,
            delayed: stats.delayed,
            parked: stats.parked,
            dead_letters: stats.dead_letters,
        }
    }

    /// The counts a recount finds: one location per item.
    pub fn recount<'a>(places: impl IntoIterator<Item = &'a crate::Location>) -> Self {
        use crate::Location;
        let mut c = StateCounts::default();
        for place in places {
            match place {
                Location::Backlog => c.backlog += 1,
                Location::Due => {
                    c.backlog += 1;
                    c.due += 1;
                }
                Location::Pending => c.pending += 1,
                Location::Delayed => c.delayed += 1,
                Location::Parked => c.parked += 1,
                Location::DeadLetter => c.dead_letters += 1,
            }
        }
        c
    }
}
