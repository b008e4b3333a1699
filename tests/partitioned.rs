//! The partitioned queue's own rules (SPEC 6.1): flows stay on one
//! partition, claims rotate so no partition starves, receipts and ids name
//! their partition, stats are summed. The conformance suite runs on it too
//! (tests/conformance.rs). Memory partitions: the routing layer alone.

use std::collections::BTreeSet;
use std::time::Duration;

use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, PartitionedQueue, WorkQueue};

fn queue(n: usize) -> PartitionedQueue<MemoryQueue> {
    PartitionedQueue::new(
        (0..n)
            .map(|_| MemoryQueue::new(Config::default()))
            .collect(),
    )
    .unwrap()
}

#[tokio::test]
async fn a_flow_stays_on_one_partition_and_keeps_its_fifo() {
    let q = queue(4);
    let mut parts = BTreeSet::new();
    for i in 0..20 {
        let a = q
            .add(NewItem::new(format!("{i}").into_bytes()).flow("tenant-7"))
            .await
            .unwrap();
        parts.insert(q.partition_of(a.id));
    }
    assert_eq!(parts.len(), 1, "one flow spread over {parts:?}");
    let p = *parts.iter().next().unwrap();
    assert_eq!(q.partitions()[p].stats().await.unwrap().backlog, 20);
    let got = q.claim(20, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let order: Vec<String> = got
        .iter()
        .map(|c| String::from_utf8_lossy(&c.item.payload).into_owned())
        .collect();
    let want: Vec<String> = (0..20).map(|i| i.to_string()).collect();
    assert_eq!(order, want);
}

#[tokio::test]
async fn default_flow_adds_spread_round_robin_and_stats_are_summed() {
    let q = queue(4);
    for i in 0..8 {
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    for p in q.partitions() {
        assert_eq!(p.stats().await.unwrap().backlog, 2);
    }
    let s = q.stats().await.unwrap();
    assert_eq!(s.backlog, 8);
    q.claim(3, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (5, 3));
}

/// One claim at a time, each of one item: a partition with a deep backlog
/// does not keep the others waiting, each claim starts at the next one.
#[tokio::test]
async fn single_claims_rotate_so_no_partition_starves() {
    let q = queue(3);
    // Flows placed by the router: "busy" on 0 with 30 items, "a" on 1 and
    // "b" on 2 with one each.
    let q = q.route_flows_with(|f| match f {
        "busy" => Some(0),
        "a" => Some(1),
        "b" => Some(2),
        _ => None,
    });
    for _ in 0..30 {
        q.add(NewItem::new(b"x".to_vec()).flow("busy"))
            .await
            .unwrap();
    }
    q.add(NewItem::new(b"a".to_vec()).flow("a")).await.unwrap();
    q.add(NewItem::new(b"b".to_vec()).flow("b")).await.unwrap();
    let mut seen = BTreeSet::new();
    for _ in 0..3 {
        let got = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
        assert_eq!(got.len(), 1);
        seen.insert(q.partition_of(got[0].receipt.id));
    }
    assert_eq!(
        seen,
        BTreeSet::from([0, 1, 2]),
        "three claims reached {seen:?}"
    );
}

#[tokio::test]
async fn receipts_reach_their_partition_and_lease_lost_names_the_queue_id() {
    let q = queue(3);
    for i in 0..3 {
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    let got = q.claim(3, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let parts: BTreeSet<_> = got.iter().map(|c| q.partition_of(c.receipt.id)).collect();
    assert_eq!(parts.len(), 3);
    for c in &got {
        assert_eq!(c.receipt.id, c.item.id);
        q.ack(c.receipt).await.unwrap();
    }
    let err = q.ack(got[2].receipt).await.unwrap_err();
    match err {
        workjournal::Error::LeaseLost { id, .. } => assert_eq!(id, got[2].item.id),
        other => panic!("expected LeaseLost, got {other:?}"),
    }
    // An id no partition issued: not found, not a panic.
    assert!(!q.redrive(u64::MAX).await.unwrap());
    assert_eq!(q.stats().await.unwrap().pending, 0);
}

#[tokio::test]
async fn a_blocking_claim_is_woken_by_an_add_on_any_partition() {
    let q = std::sync::Arc::new(queue(3));
    let waiter = tokio::spawn({
        let q = q.clone();
        async move { q.claim(1, Duration::from_secs(20), ClaimFrom::All).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Whichever partition the flow hashes to, the wait there answers.
    q.add(NewItem::new(b"late".to_vec()).flow("f"))
        .await
        .unwrap();
    let got = tokio::time::timeout(Duration::from_secs(10), waiter)
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"late");
}

#[tokio::test]
async fn a_batch_of_the_default_flow_is_all_on_one_partition() {
    let q = queue(3);
    let added = q
        .add_batch((0..5).map(|i| NewItem::new(vec![i])).collect())
        .await
        .unwrap();
    let parts: BTreeSet<_> = added.iter().map(|a| q.partition_of(a.id)).collect();
    assert_eq!(parts.len(), 1);
    let ids: Vec<u64> = added.iter().map(|a| a.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "{ids:?}");
}
