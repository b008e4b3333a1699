//! Conformance cases of SPEC 3, adding: ids, batches, size limits, dedup keys
//! and the backlog cap.

use std::time::Duration;

use super::{
    Factory, T0, add, claim, claim_one, env, env_with, ids, in_flow, invalid, item, payloads,
};
use crate::config::Config;
use crate::error::Error;
use crate::item::NewItem;
use crate::queue::WorkQueue;

/// Ids start at 1 and increase; the item keeps its flow and payload.
pub async fn add_assigns_increasing_ids(f: &dyn Factory) {
    let e = env(f).await;
    let a = add(&e.q, "a").await;
    let b = e.q.add(in_flow("b", "mail")).await.unwrap();
    assert_eq!(a, 1);
    assert_eq!(b.id, 2);
    assert!(!b.duplicate);
    let c = claim(&e.q, 2).await;
    assert_eq!(ids(&c), vec![1, 2]);
    assert_eq!(c[1].item.flow, "mail");
    assert_eq!(c[1].item.payload, b"b");
    assert_eq!(c[0].item.enqueued_at_ms, T0);
}

/// add_batch returns ids in input order.
pub async fn add_batch_returns_ids_in_order(f: &dyn Factory) {
    let e = env(f).await;
    let out =
        e.q.add_batch(vec![item("x"), item("y"), item("z")])
            .await
            .unwrap();
    assert_eq!(out.iter().map(|a| a.id).collect::<Vec<_>>(), vec![1, 2, 3]);
    assert_eq!(payloads(&claim(&e.q, 3).await), vec!["x", "y", "z"]);
}

/// A batch with one bad item journals nothing.
pub async fn add_batch_is_all_or_none(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_payload_bytes(4)).await;
    let r =
        e.q.add_batch(vec![item("ok"), item("too long"), item("ok")])
            .await;
    invalid(r);
    assert_eq!(e.q.stats().await.unwrap().backlog, 0);
    assert!(e.q.add_batch(vec![]).await.unwrap().is_empty());
    assert_eq!(
        add(&e.q, "next").await,
        1,
        "a refused batch consumes no ids"
    );
}

/// A payload over max_payload_bytes is InvalidInput and journals nothing.
pub async fn payload_over_limit_is_invalid_input(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_payload_bytes(8)).await;
    invalid(e.q.add(NewItem::new(vec![0u8; 9])).await);
    invalid(e.q.add_delayed(NewItem::new(vec![0u8; 9]), T0).await);
    e.q.add(NewItem::new(vec![0u8; 8])).await.unwrap();
    assert_eq!(e.q.stats().await.unwrap().backlog, 1);
}

/// Two identical payloads are two items.
pub async fn identical_payloads_stay_two_items(f: &dyn Factory) {
    let e = env(f).await;
    let a = add(&e.q, "same").await;
    let b = add(&e.q, "same").await;
    assert_ne!(a, b);
    assert_eq!(e.q.stats().await.unwrap().backlog, 2);
}

/// A dedup key seen within the window returns the first id, flagged, and
/// journals nothing, even after the first item was acked.
pub async fn dedup_key_within_window_is_a_duplicate(f: &dyn Factory) {
    let e = env(f).await;
    let first = e.q.add(item("a").dedup_key("k")).await.unwrap();
    let again = e.q.add(item("b").dedup_key("k")).await.unwrap();
    assert_eq!(again.id, first.id);
    assert!(again.duplicate);
    assert_eq!(e.q.stats().await.unwrap().backlog, 1);
    let c = claim_one(&e.q).await;
    e.q.ack(c.receipt).await.unwrap();
    e.clock.advance(Duration::from_secs(299));
    let after_ack = e.q.add(item("c").dedup_key("k")).await.unwrap();
    assert!(after_ack.duplicate);
    assert_eq!(after_ack.id, first.id);
    assert_eq!(e.q.stats().await.unwrap().backlog, 0);
}

/// After dedup_window (from the first add) the key is free again; within a
/// batch a repeated key is a duplicate of the earlier entry.
pub async fn dedup_window_expires(f: &dyn Factory) {
    let e = env_with(f, Config::default().dedup_window(Duration::from_secs(10))).await;
    let first = e.q.add(item("a").dedup_key("k")).await.unwrap();
    e.clock.advance(Duration::from_secs(10));
    let later = e.q.add(item("b").dedup_key("k")).await.unwrap();
    assert!(!later.duplicate);
    assert_ne!(later.id, first.id);
    let batch =
        e.q.add_batch(vec![item("c").dedup_key("j"), item("d").dedup_key("j")])
            .await
            .unwrap();
    assert!(!batch[0].duplicate);
    assert!(batch[1].duplicate);
    assert_eq!(batch[1].id, batch[0].id);
    assert_eq!(e.q.stats().await.unwrap().backlog, 3);
}

/// With max_backlog, an add past it is Full and nothing already journaled is
/// dropped; backlog + due + delayed count, pending does not.
pub async fn full_refuses_and_drops_nothing(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_backlog(Some(3))).await;
    add(&e.q, "1").await;
    add(&e.q, "2").await;
    e.q.add_delayed(item("3"), T0 + 1000).await.unwrap();
    match e.q.add(item("4")).await {
        Err(Error::Full { limit: 3 }) => {}
        other => panic!("expected Full, got {other:?}"),
    }
    assert!(matches!(
        e.q.add_batch(vec![item("5")]).await,
        Err(Error::Full { .. })
    ));
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.delayed), (2, 1));
    let c = claim_one(&e.q).await;
    add(&e.q, "6").await;
    assert!(matches!(e.q.add(item("7")).await, Err(Error::Full { .. })));
    e.q.ack(c.receipt).await.unwrap();
    // A duplicate journals nothing, so it is accepted even when full.
    e.q.add(item("8").dedup_key("d")).await.err();
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.backlog + s.delayed, 3);
}
