//! Model-based property tests (SPEC section 3): random sequences of every
//! operation, clock moves and (embedded) close-and-reopen, run on the memory
//! [`Model`](workjournal::testing::Model) as the reference and on a real backend as
//! the system under test. After every step every return value, `stats()`
//! and the backend's recount must equal the model's.
//!
//! Sized for CI: 64 cases of up to 50 steps per backend. `PROPTEST_CASES`
//! raises the number of cases. Failures are kept in `proptest-regressions/`.
//!
//! One test function per backend, so a failure names the backend: implement
//! [`Backend`] for it and add a `prop_state_machine!` line. The Redis test
//! needs `--features redis` and `redis-server` on `PATH`.

use std::marker::PhantomData;
use std::sync::OnceLock;

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, FileFailurePersistence};
use proptest_state_machine::{ReferenceStateMachine, StateMachineTest, prop_state_machine};
use workjournal::ManualClock;
use workjournal::testing::ops::{
    EmbeddedTarget, FactoryTarget, Op, Reference, START_MS, System, Target, op_strategy,
    setup_strategy,
};
use workjournal::testing::{Factory, MemoryFactory};

/// One runtime for every case and step (`block_on` per transition).
fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    })
}

fn cases() -> u32 {
    std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(64)
}

/// A backend under model test.
trait Backend: 'static {
    /// `stats().durable`.
    const DURABLE: bool;
    /// Whether the sequences close and reopen it.
    const REOPEN: bool;
    /// Whether its lease numbers must equal the model's (otherwise they only
    /// have to be unique).
    const EXACT_LEASES: bool;
    /// A fresh empty queue reading `config`'s clock.
    fn target(config: workjournal::Config) -> Box<dyn Target>;
}

struct Embedded;

impl Backend for Embedded {
    const DURABLE: bool = true;
    const REOPEN: bool = true;
    const EXACT_LEASES: bool = true;
    fn target(config: workjournal::Config) -> Box<dyn Target> {
        Box::new(runtime().block_on(EmbeddedTarget::new(config)).unwrap())
    }
}

/// The memory backend through the generic [`Factory`] path: checks the
/// harness itself (a factory-made target, no reopen, no recount, leases
/// only unique), the same path the Redis backend takes.
struct Memory;

impl Backend for Memory {
    const DURABLE: bool = false;
    const REOPEN: bool = false;
    const EXACT_LEASES: bool = false;
    fn target(config: workjournal::Config) -> Box<dyn Target> {
        factory_target(&MemoryFactory, config)
    }
}

fn factory_target(factory: &dyn Factory, config: workjournal::Config) -> Box<dyn Target> {
    Box::new(runtime().block_on(FactoryTarget::new(factory, config)))
}

/// The Redis backend (feature `redis`) against a real `redis-server` the
/// harness starts (one per test binary, a fresh namespace per case). Lease
/// numbers only have to be unique; there is no reopen (a new handle on the
/// same namespace is another consumer, not a restart) and no recount.
#[cfg(feature = "redis")]
struct Redis;

#[cfg(feature = "redis")]
impl Backend for Redis {
    // The test server keeps no persistence (SPEC 1).
    const DURABLE: bool = false;
    const REOPEN: bool = false;
    const EXACT_LEASES: bool = false;
    fn target(config: workjournal::Config) -> Box<dyn Target> {
        factory_target(&workjournal::testing::RedisFactory, config)
    }
}

/// The Redis backend on a real Redis Cluster (3 primaries, 3 replicas, one
/// per test binary; a fresh namespace, so a slot of its own, per case), as
/// [`Redis`] is on one server.
#[cfg(feature = "redis")]
struct RedisCluster;

#[cfg(feature = "redis")]
impl Backend for RedisCluster {
    // The test cluster keeps no persistence (SPEC 1).
    const DURABLE: bool = false;
    const REOPEN: bool = false;
    const EXACT_LEASES: bool = false;
    fn target(config: workjournal::Config) -> Box<dyn Target> {
        factory_target(&workjournal::testing::RedisClusterFactory, config)
    }
}

/// The remote backend: a server in this process on an embedded file in a
/// temp dir, reached over a real Unix socket. Its leases are the embedded
/// file's, so they must equal the model's. Reopen restarts the server on
/// the same file (the same client finds the new one); the recount reads
/// the served file.
struct Remote;

impl Backend for Remote {
    const DURABLE: bool = true;
    const REOPEN: bool = true;
    const EXACT_LEASES: bool = true;
    fn target(config: workjournal::Config) -> Box<dyn Target> {
        Box::new(
            runtime()
                .block_on(workjournal::testing::RemoteTarget::new(config))
                .unwrap(),
        )
    }
}

struct Machine<B>(PhantomData<B>);

impl<B: Backend> ReferenceStateMachine for Machine<B> {
    type State = Reference;
    type Transition = Op;

    fn init_state() -> BoxedStrategy<Reference> {
        setup_strategy()
            .prop_map(|s| Reference::new(&s, B::DURABLE, B::REOPEN))
            .boxed()
    }

    fn transitions(_: &Reference) -> BoxedStrategy<Op> {
        op_strategy()
    }

    fn apply(mut state: Reference, op: &Op) -> Reference {
        let _ = state.apply(op);
        state
    }
}

struct Sut<B>(PhantomData<B>);

impl<B: Backend> StateMachineTest for Sut<B> {
    type SystemUnderTest = System;
    type Reference = Machine<B>;

    fn init_test(reference: &Reference) -> System {
        let clock = ManualClock::new(START_MS);
        let target = B::target(reference.config().clock(clock.clone()));
        let system = System::new(target, clock, B::EXACT_LEASES);
        if let Err(e) = runtime().block_on(system.check(reference)) {
            panic!("fresh queue differs from the model: {e}");
        }
        system
    }

    fn apply(mut system: System, reference: &Reference, _: Op) -> System {
        if let Err(e) = runtime().block_on(system.verify(reference)) {
            panic!("{e}");
        }
        system
    }

    fn teardown(system: System, _: Reference) {
        let _ = runtime().block_on(workjournal::WorkQueue::close(system.queue()));
    }
}

prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2048,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        .. ProptestConfig::default()
    })]

    #[test]
    fn embedded_matches_model(sequential 1..50 => Sut<Embedded>);

    #[test]
    fn memory_queue_matches_model(sequential 1..50 => Sut<Memory>);

    #[test]
    fn remote_matches_model(sequential 1..50 => Sut<Remote>);
}

#[cfg(feature = "redis")]
prop_state_machine! {
    #![proptest_config(ProptestConfig {
        cases: cases(),
        max_shrink_iters: 2048,
        failure_persistence: Some(Box::new(FileFailurePersistence::Direct(
            "proptest-regressions/model.txt"
        ))),
        .. ProptestConfig::default()
    })]

    #[test]
    fn redis_matches_model(sequential 1..50 => Sut<Redis>);

    #[test]
    fn redis_cluster_matches_model(sequential 1..50 => Sut<RedisCluster>);
}

// ---- regressions found by the model tests ---------------------------------

#[tokio::test]
async fn reclaim_with_zero_idle_takes_each_stale_item_once() {
    // The embedded reclaim looped on the oldest lease-index entry; the item
    // it had just reclaimed was pending again under `now`, so with
    // `min_idle` 0 it was reclaimed again and again until dead-lettered.
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(START_MS);
    let config = workjournal::Config::default()
        .max_deliveries(3)
        .clock(clock.clone());
    let q = workjournal::EmbeddedQueue::open(dir.path().join("q.redb"), config)
        .await
        .unwrap();
    use workjournal::WorkQueue;
    q.add(workjournal::NewItem::new(b"x".to_vec()))
        .await
        .unwrap();
    let first = q
        .claim(1, std::time::Duration::ZERO, workjournal::ClaimFrom::All)
        .await
        .unwrap();
    let again = q
        .reclaim(std::time::Duration::ZERO, 5)
        .await
        .unwrap()
        .claimed;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].item.deliveries, first[0].item.deliveries + 1);
    let stats = q.stats().await.unwrap();
    assert_eq!((stats.pending, stats.dead_letters), (1, 0));
}

#[tokio::test]
async fn add_that_journals_nothing_is_never_full() {
    // With the queue pushed past max_backlog by a retry, the memory model
    // refused an empty add_batch (and every backend a duplicate add) with
    // Full, though nothing would be journaled; the embedded backend
    // returned Ok for the empty batch, so the two disagreed.
    use workjournal::testing::EmbeddedFactory;
    use workjournal::{ClaimFrom, NewItem, WorkQueue};
    let factories: Vec<Box<dyn Factory>> = vec![
        Box::new(MemoryFactory),
        Box::new(EmbeddedFactory),
        Box::new(workjournal::testing::RemoteFactory),
        #[cfg(feature = "redis")]
        Box::new(workjournal::testing::RedisFactory),
        #[cfg(feature = "redis")]
        Box::new(workjournal::testing::RedisClusterFactory),
    ];
    let mut subjects = Vec::new();
    for f in &factories {
        let clock = ManualClock::new(START_MS);
        let config = workjournal::Config::default()
            .max_backlog(Some(1))
            .clock(clock);
        subjects.push(f.make(config).await);
    }
    let queues: Vec<_> = subjects.iter().map(|s| s.queue.clone()).collect();
    for q in queues {
        q.add(NewItem::new(b"a".to_vec())).await.unwrap();
        let a = q
            .claim(1, std::time::Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap();
        let b = q
            .add(NewItem::new(b"b".to_vec()).dedup_key("b"))
            .await
            .unwrap();
        q.retry(a[0].receipt, START_MS + 1_000).await.unwrap();
        assert_eq!(q.add_batch(Vec::new()).await.unwrap(), Vec::new());
        let again = q
            .add(NewItem::new(b"b".to_vec()).dedup_key("b"))
            .await
            .unwrap();
        assert!(again.duplicate && again.id == b.id);
        assert!(matches!(
            q.add(NewItem::new(b"c".to_vec())).await,
            Err(workjournal::Error::Full { limit: 1 })
        ));
    }
}

#[tokio::test]
async fn zero_dedup_window_never_deduplicates_even_within_a_batch() {
    // With dedup_window 0 the memory model still took a key repeated in one
    // add_batch as a duplicate (it looked the key up without checking its
    // expiry), while the embedded backend journaled both items; and every
    // backend counted the repeat as no new item, so such a batch could pass
    // max_backlog. Found by the ops_vs_model and crash_recovery fuzzers.
    use workjournal::testing::EmbeddedFactory;
    use workjournal::{NewItem, WorkQueue};
    let factories: Vec<Box<dyn Factory>> = vec![
        Box::new(MemoryFactory),
        Box::new(EmbeddedFactory),
        Box::new(workjournal::testing::RemoteFactory),
        #[cfg(feature = "redis")]
        Box::new(workjournal::testing::RedisFactory),
        #[cfg(feature = "redis")]
        Box::new(workjournal::testing::RedisClusterFactory),
    ];
    for f in &factories {
        let config = workjournal::Config::default()
            .dedup_window(std::time::Duration::ZERO)
            .max_backlog(Some(2))
            .clock(ManualClock::new(START_MS));
        let subject = f.make(config).await;
        let q = &subject.queue;
        let twice = || vec![NewItem::new(b"x".to_vec()).dedup_key("k"); 2];
        let added = q.add_batch(twice()).await.unwrap();
        assert_eq!(added.len(), 2, "{}", f.name());
        assert!(added.iter().all(|a| !a.duplicate), "{}", f.name());
        assert_ne!(added[0].id, added[1].id, "{}", f.name());
        assert!(
            matches!(
                q.add_batch(twice()).await,
                Err(workjournal::Error::Full { limit: 2 })
            ),
            "{}",
            f.name()
        );
    }
}
