//! Test support shared by the integration tests, the fuzz targets and the
//! benchmarks (feature `testing`): the conformance cases every backend must
//! pass, factories that make a fresh queue of each backend, and a
//! simulated disk for power-loss and I/O-fault tests (`faults`).
//!
//! Not part of the stable API.

use std::any::Any;

use crate::config::Config;
use crate::queue::BoxQueue;

pub use crate::backend::memory::Model;
use crate::browse::ItemState;
pub use crate::queue::BoxFuture;

pub mod conformance;
pub mod ops;

// The harnesses below serve this crate's own tests, fuzz targets and
// benches: real Redis servers and clusters on free ports, a simulated
// disk, fuzz bodies, migration fixtures, a TCP proxy, a served queue.
// A backend implementer needs none of them (the conformance cases, the
// factories and the op runner above are theirs), so they are public for
// the crate's other targets but hidden from the docs (docs/DESIGN.md,
// Public surface).
#[cfg(feature = "redis")]
#[doc(hidden)]
pub mod redis_server;

#[cfg(feature = "redis")]
#[doc(hidden)]
pub mod redis_cluster;

#[cfg(feature = "redis")]
#[doc(hidden)]
pub mod redis_target;

#[cfg(feature = "redis")]
#[doc(hidden)]
pub use redis_cluster::{RedisCluster, RedisClusterFactory, RedisClusterOptions};
#[cfg(feature = "redis")]
#[doc(hidden)]
pub use redis_server::{
    RedisFactory, RedisServer, RedisServerOptions, TestCertificates, command_calls, raw_connection,
};
#[cfg(feature = "redis")]
#[doc(hidden)]
pub use redis_target::{RawConnection, RedisDeployment, RedisKind};

#[cfg(feature = "embedded")]
#[doc(hidden)]
pub mod faults;

#[cfg(feature = "embedded")]
#[doc(hidden)]
pub mod fuzz;

/// Schema-1 queue files for migration tests (SPEC section 6).
#[cfg(feature = "embedded")]
#[doc(hidden)]
pub use crate::backend::embedded::migrate::{V1Item, write_schema1_fixture};
#[doc(hidden)]
pub mod proxy;
#[cfg(all(feature = "server", feature = "remote", feature = "embedded"))]
#[doc(hidden)]
pub mod remote;

#[cfg(all(feature = "server", feature = "remote", feature = "embedded"))]
#[doc(hidden)]
pub use remote::{RemoteFactory, RemoteTarget, ServedQueue};

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

/// Factory of [`PartitionedQueue`](crate::PartitionedQueue)s over fresh
/// queues of another factory: `partitions` of them, each made with the
/// test's config (so its clock).
#[derive(Debug, Clone, Copy)]
pub struct PartitionedFactory<F> {
    /// Makes each partition.
    pub inner: F,
    /// How many partitions.
    pub partitions: usize,
    /// Place every flow, the default one included, on partition 0
    /// ([`PartitionedQueue::route_flows_with`](crate::PartitionedQueue::route_flows_with)),
    /// for the cases in [`PER_PARTITION_CASES`]; the other partitions
    /// stay empty, so claims, reclaims and reads still sweep them.
    pub one_partition: bool,
}

/// The conformance cases whose promise holds per partition only (SPEC
/// 6.1): each asserts ids, an order or a cap across items that a
/// partitioned queue may place on different partitions (default-flow items
/// round-robin, named flows by hash). The partitioned suites
/// ([`partitioned_conformance_tests!`](crate::partitioned_conformance_tests))
/// run these with every flow on partition 0, the rest spread.
pub const PER_PARTITION_CASES: &[&str] = &[
    // Ids increase per partition (partition p's ids start at p << 48 | 1).
    "add_assigns_increasing_ids",
    "add_batch_returns_ids_in_order",
    // FIFO, due before backlog and the promote order hold per partition.
    "backlog_is_fifo",
    "due_lane_before_backlog",
    "promote_orders_by_not_before_then_id",
    "peek_does_not_claim",
    // dead_letter_cap and max_backlog bound each partition.
    "dead_letter_cap_drops_the_oldest",
    "dead_letter_cap_counts_what_it_drops",
    "full_refuses_and_drops_nothing",
    // touch is all or none per partition.
    "touch_with_a_lost_receipt_changes_nothing",
    // Orders across named flows: the flows live on different partitions.
    "backlog_by_flow_counts_the_sample",
    "reclaim_parks_items_of_paused_flows",
    "resume_requeues_parked_oldest_first",
    "stats_count_every_state",
    // Listing orders hold per partition (SPEC 12.1).
    "list_orders_each_state",
    "list_shows_each_state",
    "list_and_find_show_items_held_by_a_flow_limit",
    // The priority rank order (tier and aging) holds per partition.
    "higher_priority_runs_first_fifo_within_a_tier",
    "aging_lets_a_waiting_low_tier_overtake",
    "tier_zero_stays_fifo_when_the_clock_steps_back",
    "priority_orders_the_due_lane_and_survives_retry",
    "backlog_by_flow_samples_in_priority_order",
    "aging_counts_elapsed_time_across_a_clock_step",
    "release_keeps_the_tier",
    "concurrency_cap_holds_a_flow_and_exits_free_slots",
    "concurrency_cap_counts_reclaimed_items",
    "back_off_holds_a_flow_until_it_lifts_itself",
    "rate_limit_hands_out_n_permits_per_period",
    "blocking_claim_wakes_when_permits_or_slots_return",
    "limits_and_pause_combine",
    // Compared with one model queue: every flow on one partition.
    "large_batches_with_flow_limits_match_the_model",
];

/// The conformance suite against a [`PartitionedQueue`](crate::PartitionedQueue)
/// of `partitions` queues made by `inner`: one test per case, the cases of
/// [`PER_PARTITION_CASES`] with the default flow pinned to one partition.
#[macro_export]
macro_rules! partitioned_conformance_tests {
    ($inner:expr, $partitions:expr) => {
        $crate::conformance_case_list!(
            $crate::__workjournal_partitioned_tests,
            ($inner, $partitions)
        );
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __workjournal_partitioned_tests {
    ($factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                let (inner, partitions) = $factory;
                let f = $crate::testing::PartitionedFactory {
                    inner,
                    partitions,
                    one_partition: $crate::testing::PER_PARTITION_CASES
                        .contains(&stringify!($case)),
                };
                $crate::testing::conformance::$case(&f).await;
            }
        )*
    };
}

impl<F: Factory> Factory for PartitionedFactory<F> {
    fn name(&self) -> &'static str {
        "partitioned"
    }

    #[allow(clippy::expect_used)]
    fn make(&self, config: Config) -> BoxFuture<'_, Subject> {
        Box::pin(async move {
            let mut parts = Vec::new();
            let mut keep: Vec<Box<dyn Any + Send + Sync>> = Vec::new();
            for _ in 0..self.partitions {
                let s = self.inner.make(config.clone()).await;
                parts.push(s.queue);
                keep.extend(s.keep);
            }
            let mut queue = crate::PartitionedQueue::new(parts).expect("at least one partition");
            if self.one_partition {
                queue = queue.route_flows_with(|_| Some(0));
            }
            Subject::new(BoxQueue::new(queue), keep)
        })
    }

    fn durable(&self) -> bool {
        self.inner.durable()
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
    pub fn recount<'a>(places: impl IntoIterator<Item = &'a ItemState>) -> Self {
        let mut c = StateCounts::default();
        for place in places {
            match place {
                ItemState::Backlog => c.backlog += 1,
                ItemState::Due => {
                    c.backlog += 1;
                    c.due += 1;
                }
                ItemState::Pending => c.pending += 1,
                ItemState::Delayed => c.delayed += 1,
                ItemState::Parked => c.parked += 1,
                ItemState::DeadLetter => c.dead_letters += 1,
                // Finished items kept for a while (SPEC 3, History) are
                // not in the queue any more.
                ItemState::Completed | ItemState::Cancelled => {}
            }
        }
        c
    }
}

/// A small seeded random generator (splitmix64) for tests that must replay
/// a run from its seed: the simulated disk's power cuts and the crash and
/// fault tests' workloads draw from it. Not for anything secret.
#[derive(Debug, Clone)]
pub struct Rng(pub u64);

impl Rng {
    /// The next 64 random bits.
    #[allow(clippy::should_implement_trait)]
    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A number below `n` (0 for `n` = 0).
    pub fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}
