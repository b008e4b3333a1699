//! Conformance cases of SPEC 3, claiming: counts, order, blocking claims and
//! paused flows.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Factory, NOW, T0, add, claim, claim_one, env, ids, in_flow, invalid, item, payloads};
use crate::item::{ClaimFrom, NewItem};
use crate::queue::WorkQueue;

/// A claim never hands out more than count, across both lanes.
pub async fn claim_never_exceeds_count(f: &dyn Factory) {
    let e = env(f).await;
    for i in 0..5 {
        add(&e.q, &format!("b{i}")).await;
        e.q.add_delayed(item(&format!("d{i}")), T0).await.unwrap();
    }
    let c = claim(&e.q, 3).await;
    assert_eq!(c.len(), 3);
    let c = claim(&e.q, 4).await;
    assert_eq!(c.len(), 4);
    assert_eq!(claim(&e.q, 100).await.len(), 3);
    assert!(claim(&e.q, 100).await.is_empty());
}

/// count == 0 is InvalidInput.
pub async fn claim_count_zero_is_invalid(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    invalid(e.q.claim(0, NOW, ClaimFrom::All).await);
    invalid(e.q.reclaim(Duration::ZERO, 0).await.map(|r| r.claimed));
    assert_eq!(e.q.stats().await.unwrap().backlog, 1);
}

/// A claim sets claimed_at to now, counts the delivery and returns a receipt.
pub async fn claim_counts_delivery_and_sets_claimed_at(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    e.clock.advance(Duration::from_millis(42));
    let c = claim_one(&e.q).await;
    assert_eq!(c.claimed_at_ms, T0 + 42);
    assert_eq!(c.item.deliveries, 1);
    assert_eq!(c.receipt.id, id);
    assert_eq!(c.receipt.delivery, 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.backlog), (1, 0));
}

/// The backlog is FIFO in add order.
pub async fn backlog_is_fifo(f: &dyn Factory) {
    let e = env(f).await;
    for i in 0..20 {
        add(&e.q, &format!("{i:02}")).await;
    }
    let mut seen = Vec::new();
    for n in [3, 7, 10] {
        seen.extend(payloads(&claim(&e.q, n).await));
    }
    let want: Vec<String> = (0..20).map(|i| format!("{i:02}")).collect();
    assert_eq!(seen, want);
}

/// A waiting claim returns soon after an add.
pub async fn blocking_claim_is_woken_by_add(f: &dyn Factory) {
    let e = env(f).await;
    let q = e.q.clone();
    let adder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.add(item("wake")).await.unwrap();
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    assert_eq!(payloads(&c), vec!["wake"]);
    adder.await.unwrap();
}

/// A waiting claim returns when a timer comes due by the queue's clock.
pub async fn blocking_claim_is_woken_by_timer(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add_delayed(item("timer"), T0 + 60_000).await.unwrap();
    let clock = e.clock.clone();
    let mover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(Duration::from_secs(60));
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    assert_eq!(payloads(&c), vec!["timer"]);
    mover.await.unwrap();
}

/// A claim with nothing to take returns empty when its wait runs out.
pub async fn blocking_claim_times_out_empty(f: &dyn Factory) {
    let e = env(f).await;
    let start = std::time::Instant::now();
    let c =
        e.q.claim(1, Duration::from_millis(100), ClaimFrom::All)
            .await
            .unwrap();
    assert!(c.is_empty());
    assert!(start.elapsed() >= Duration::from_millis(90));
}

/// Items of a paused flow are parked by the claim, which goes on to the next.
pub async fn claim_parks_items_of_paused_flows(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("held").await.unwrap();
    e.q.add(in_flow("h1", "held")).await.unwrap();
    add(&e.q, "free").await;
    e.q.add(in_flow("h2", "held")).await.unwrap();
    let c = claim(&e.q, 5).await;
    assert_eq!(payloads(&c), vec!["free"]);
    assert_eq!(e.q.parked("held").await.unwrap(), 2);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.parked, s.backlog, s.pending), (2, 0, 1));
}

/// A claim already waiting when the flow is paused obeys the pause.
pub async fn waiting_claim_obeys_a_later_pause(f: &dyn Factory) {
    let e = env(f).await;
    let q = e.q.clone();
    let waiter =
        tokio::spawn(async move { q.claim(1, Duration::from_millis(600), ClaimFrom::All).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    e.q.pause("p").await.unwrap();
    e.q.add(in_flow("held", "p")).await.unwrap();
    let got = waiter.await.unwrap().unwrap();
    assert!(
        got.is_empty(),
        "the paused flow's item was handed out: {got:?}"
    );
    assert_eq!(e.q.parked("p").await.unwrap(), 1);
}

/// Concurrent claims never hand out one item twice.
pub async fn concurrent_claims_never_share_an_item(f: &dyn Factory) {
    let e = env(f).await;
    let items: Vec<NewItem> = (0..200).map(|i| item(&i.to_string())).collect();
    e.q.add_batch(items).await.unwrap();
    let mut tasks = Vec::new();
    for _ in 0..4 {
        let q = e.q.clone();
        tasks.push(tokio::spawn(async move {
            let mut mine = Vec::new();
            loop {
                let c = q.claim(7, NOW, ClaimFrom::All).await.unwrap();
                if c.is_empty() {
                    break mine;
                }
                mine.extend(ids(&c));
            }
        }));
    }
    let mut all = Vec::new();
    for t in tasks {
        all.extend(t.await.unwrap());
    }
    let unique: BTreeSet<u64> = all.iter().copied().collect();
    assert_eq!(all.len(), 200);
    assert_eq!(unique.len(), 200);
}
