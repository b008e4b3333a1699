//! Redis Cluster tests (issue 17): failovers under a workload, blocking
//! claims that follow their slot. Each starts its own real cluster of 3
//! primaries and 3 replicas (`testing::RedisCluster`) on free loopback
//! ports; the conformance suite runs on a shared one (tests/conformance.rs).

#![cfg(all(feature = "redis", feature = "testing"))]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use workjournal::testing::{RedisCluster, RedisClusterOptions};
use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

async fn start(options: RedisClusterOptions) -> RedisCluster {
    tokio::task::spawn_blocking(move || RedisCluster::start_with(options))
        .await
        .unwrap()
        .unwrap()
}

/// Every add that returned `Ok` with `min_replicas(1)` and `appendfsync
/// always` is still there after the slot's primary is killed mid-workload
/// and its replica takes over; adds fail (within the call bound) only while
/// no primary serves the slot, and work again once the old primary is back
/// as a replica of the new one.
///
/// This flaked under load in two ways, both races of the test, not of the
/// queue: (1) the old primary was restarted at the first failed add, often
/// before the cluster had declared it failed, so it came back with its
/// slots and no failover happened ("the replica did not take over"); it is
/// now restarted only once its replica reports `role:master`. (2) A 500 ms
/// `replica_timeout` was shorter than a replica's `appendfsync always`
/// write on a busy machine, so an add before the kill could fail; an add
/// whose `WAIT` times out is refused, never lost, so a longer timeout
/// asserts the same.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killing_the_primary_mid_workload_loses_no_acknowledged_add() {
    let mut cluster = start(RedisClusterOptions {
        aof_always: true,
        ..Default::default()
    })
    .await;
    let ns = "failover";
    let options = RedisOptions::default()
        .min_replicas(1)
        .replica_timeout(Duration::from_secs(5))
        .connect_timeout(Duration::from_millis(500))
        .response_timeout(Duration::from_millis(2000));
    let q = RedisQueue::connect(&cluster.url(), ns, Config::default(), options)
        .await
        .unwrap();
    let mut acked = BTreeSet::new();
    let mut failed = 0u32;
    let add = async |q: &RedisQueue, n: u32, acked: &mut BTreeSet<u64>| match q
        .add(NewItem::new(format!("item {n}").into_bytes()))
        .await
    {
        Ok(a) => {
            acked.insert(a.id);
            true
        }
        Err(e) => {
            assert!(matches!(e, workjournal::Error::Backend { .. }), "{e:?}");
            false
        }
    };
    let mut n = 0u32;
    for _ in 0..50 {
        n += 1;
        assert!(
            add(&q, n, &mut acked).await,
            "add before the failover failed"
        );
    }
    let primary = cluster.primary_of(&format!("{{{ns}}}:seq")).unwrap();
    let replica = cluster.replica_of(primary).unwrap();
    cluster.kill_node(primary);
    // Keep adding while the replica is promoted (about the node timeout,
    // 1 s, then an election). The deadline only stops a hung test.
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut after_kill = 0;
    while after_kill < 20 {
        assert!(
            Instant::now() < deadline,
            "fewer than 20 adds succeeded within 60 s of the kill"
        );
        n += 1;
        if add(&q, n, &mut acked).await {
            after_kill += 1;
        } else {
            failed += 1;
            // The new primary has no replica (so WAIT fails) until the old
            // one is back; bring it back only once the replica took over,
            // so it rejoins as a replica rather than keeping its slots.
            let c = &mut cluster;
            tokio::task::block_in_place(|| {
                if !c.nodes()[primary].is_running() && c.is_primary(replica).unwrap_or(false) {
                    c.restart_node(primary).unwrap();
                }
            });
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    assert!(
        cluster.nodes()[primary].is_running(),
        "adds succeeded with min_replicas 1 while the new primary had no replica"
    );
    let new_primary =
        tokio::task::block_in_place(|| cluster.primary_of(&format!("{{{ns}}}:seq"))).unwrap();
    assert_ne!(new_primary, primary, "the replica did not take over");
    assert_eq!(new_primary, replica);
    let mut claimed = BTreeSet::new();
    loop {
        let got = q.claim(100, Duration::ZERO, ClaimFrom::All).await.unwrap();
        if got.is_empty() {
            break;
        }
        for c in got {
            claimed.insert(c.item.id);
            q.ack(c.receipt).await.unwrap();
        }
    }
    let lost: Vec<_> = acked.difference(&claimed).collect();
    assert!(
        lost.is_empty(),
        "acknowledged adds lost: {lost:?} ({failed} adds failed)"
    );
    q.close().await.unwrap();
}

/// A claim blocked on the wake stream keeps waiting across a coordinated
/// failover of its slot (the wait's own connection follows the slot to the
/// new primary) and is woken by an add made after it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blocking_claim_follows_its_slot_through_a_failover() {
    let cluster = start(RedisClusterOptions::default()).await;
    let ns = "moving";
    let url = cluster.url();
    let q = RedisQueue::connect(&url, ns, Config::default(), RedisOptions::default())
        .await
        .unwrap();
    let producer = RedisQueue::connect(&url, ns, Config::default(), RedisOptions::default())
        .await
        .unwrap();
    let waiter = tokio::spawn({
        let q = q.clone();
        async move {
            q.claim(1, Duration::from_secs(30), ClaimFrom::All)
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    let primary = cluster.primary_of(&format!("{{{ns}}}:seq")).unwrap();
    let new_primary = tokio::task::block_in_place(|| cluster.failover(primary)).unwrap();
    assert_ne!(new_primary, primary);
    producer
        .add(NewItem::new(b"after the move".to_vec()))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(20), waiter)
        .await
        .expect("the blocked claim was not woken after the failover")
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"after the move");
    q.ack(got[0].receipt).await.unwrap();
}

/// `WAIT` goes to the primary that ran the write: a dead replica of another
/// primary does not fail the queue's writes, a dead replica of its own does
/// (saying how many acknowledged). Sent to every primary, as redis-rs
/// routes a bare `WAIT`, the first kill would fail them too.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_replicas_waits_on_the_slot_primary_only() {
    let mut cluster = start(RedisClusterOptions::default()).await;
    let ns = "waits";
    let options = RedisOptions::default()
        .min_replicas(1)
        // Long enough for a replica's ack on a busy machine; the adds that
        // must fail wait it out.
        .replica_timeout(Duration::from_secs(2));
    let q = RedisQueue::connect(&cluster.url(), ns, Config::default(), options)
        .await
        .unwrap();
    q.add(NewItem::new(b"both up".to_vec())).await.unwrap();
    let own = cluster.primary_of(&format!("{{{ns}}}:seq")).unwrap();
    let primaries = cluster.primaries();
    // A fresh cluster: the replica of primary i is node primaries + i.
    let other = (own + 1) % primaries;
    cluster.kill_node(primaries + other);
    q.add(NewItem::new(b"other replica down".to_vec()))
        .await
        .unwrap();
    cluster.kill_node(primaries + own);
    let err = q
        .add(NewItem::new(b"own replica down".to_vec()))
        .await
        .unwrap_err();
    let text = err.to_string();
    assert!(text.contains("only 0 of 1"), "{text}");
}

/// `connect()` opens a `redis+cluster://` URL as a Redis Cluster queue (it
/// took such a URL for a file path and made a file named after it).
#[cfg(feature = "remote")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_opens_a_cluster_url() {
    let cluster = start(RedisClusterOptions::default()).await;
    let url = cluster.url();
    assert!(url.starts_with("redis+cluster://"), "{url}");
    let cwd = std::env::current_dir().unwrap();
    let q = workjournal::connect(&url, Config::default()).await.unwrap();
    let id = q
        .add(NewItem::new(b"through connect".to_vec()))
        .await
        .unwrap()
        .id;
    let got = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got[0].item.id, id);
    q.ack(got[0].receipt).await.unwrap();
    q.close().await.unwrap();
    let stray = cwd.join(&url);
    assert!(
        !stray.exists(),
        "connect made a file at {}",
        stray.display()
    );
    // The same items through a plain handle on the cluster.
    let direct = RedisQueue::connect(
        &url,
        "workjournal",
        Config::default(),
        RedisOptions::default(),
    )
    .await
    .unwrap();
    assert_eq!(direct.stats().await.unwrap().pending, 0);
}
