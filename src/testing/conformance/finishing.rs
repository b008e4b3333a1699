//! Conformance cases of SPEC 3, finishing a claim: ack, touch, retry, release
//! and dead-letter, and the receipts each one fences.

use std::time::Duration;

use super::{Factory, T0, add, claim, claim_one, env, env_with, in_flow, lease_lost};
use crate::browse::{ItemState, ListQuery};
use crate::config::Config;
use crate::item::{Lane, MAX_DELIVERIES_REASON, RetryOutcome};
use crate::queue::WorkQueue;

/// ack removes the item for good; a second ack is LeaseLost.
pub async fn ack_removes_for_good_and_second_ack_is_lease_lost(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.q.ack(c.receipt).await.unwrap();
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.backlog, s.dead_letters), (0, 0, 0));
    assert!(
        e.q.reclaim(Duration::ZERO, 10)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
}

/// ack_batch acks the current receipts and skips lost ones.
pub async fn ack_batch_counts_only_current_receipts(f: &dyn Factory) {
    let e = env(f).await;
    for i in 0..3 {
        add(&e.q, &i.to_string()).await;
    }
    let c = claim(&e.q, 3).await;
    e.q.ack(c[1].receipt).await.unwrap();
    let n =
        e.q.ack_batch(c.iter().map(|c| c.receipt).collect())
            .await
            .unwrap();
    assert_eq!(n, 2);
    assert_eq!(e.q.stats().await.unwrap().pending, 0);
}

/// A lost receipt of an item ahead of its current receipt in one ack_batch
/// does not hide the current one (found by the Redis model test).
pub async fn ack_batch_acks_a_current_receipt_behind_a_lost_one(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let old = claim_one(&e.q).await;
    e.q.retry(old.receipt, T0).await.unwrap();
    let new = claim_one(&e.q).await;
    assert_eq!(new.item.id, old.item.id);
    let n = e.q.ack_batch(vec![old.receipt, new.receipt]).await.unwrap();
    assert_eq!(n, 1);
    assert_eq!(e.q.stats().await.unwrap().pending, 0);
}

/// touch resets the last touch so the claim is no longer stale; deliveries
/// stay, and so does the claim time.
pub async fn touch_extends_the_lease(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(20));
    e.q.touch(vec![c.receipt]).await.unwrap();
    e.clock.advance(Duration::from_secs(20));
    assert!(
        e.q.reclaim(Duration::from_secs(30), 10)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.oldest_pending_age_ms, Some(40_000), "{s:?}");
    assert_eq!(s.oldest_touch_age_ms, Some(20_000), "{s:?}");
    e.q.ack(c.receipt).await.unwrap();
}

/// SPEC 3, Looking: a claim's age counts from the claim, whatever
/// heartbeats came after, and its last touch is shown apart; a reclaim is
/// a new claim. (Before, `touch` moved the claim time: a command stuck
/// for an hour behind a live heartbeat showed "claimed 0 s ago".)
pub async fn claim_age_counts_from_the_claim_and_touch_age_from_the_heartbeat(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    assert_eq!(c.claimed_at_ms, T0);
    e.clock.advance(Duration::from_secs(30));
    e.q.touch(vec![c.receipt]).await.unwrap();
    e.clock.advance(Duration::from_secs(5));
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.oldest_pending_age_ms, Some(35_000), "{s:?}");
    assert_eq!(s.oldest_touch_age_ms, Some(5_000), "{s:?}");
    let found = e.q.find(id).await.unwrap().unwrap();
    assert_eq!(found.claimed_at_ms, Some(T0), "{found:?}");
    assert_eq!(found.last_touch_ms, Some(T0 + 30_000), "{found:?}");
    let listed =
        e.q.list(ListQuery::new(ItemState::Pending))
            .await
            .unwrap()
            .items;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].claimed_at_ms, Some(T0));
    assert_eq!(listed[0].last_touch_ms, Some(T0 + 30_000));
    // Staleness is measured from the last touch, not the claim.
    assert!(
        e.q.reclaim(Duration::from_secs(10), 5)
            .await
            .unwrap()
            .claimed
            .is_empty()
    );
    e.clock.advance(Duration::from_secs(5));
    let again =
        e.q.reclaim(Duration::from_secs(10), 5)
            .await
            .unwrap()
            .claimed;
    assert_eq!(again.len(), 1);
    let now = T0 + 40_000;
    assert_eq!(again[0].claimed_at_ms, now);
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (s.oldest_pending_age_ms, s.oldest_touch_age_ms),
        (Some(0), Some(0))
    );
    let found = e.q.find(id).await.unwrap().unwrap();
    assert_eq!(
        (found.claimed_at_ms, found.last_touch_ms),
        (Some(now), Some(now))
    );
    e.q.ack(again[0].receipt).await.unwrap();
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (s.oldest_pending_age_ms, s.oldest_touch_age_ms),
        (None, None)
    );
}

/// touch with any lost receipt changes nothing at all.
pub async fn touch_with_a_lost_receipt_changes_nothing(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "a").await;
    add(&e.q, "b").await;
    let c = claim(&e.q, 2).await;
    e.q.ack(c[1].receipt).await.unwrap();
    e.clock.advance(Duration::from_secs(10));
    lease_lost(
        e.q.touch(vec![c[0].receipt, c[1].receipt]).await,
        c[1].receipt,
    );
    assert_eq!(
        e.q.stats().await.unwrap().oldest_pending_age_ms,
        Some(10_000)
    );
}

/// retry moves the item to delayed, keeping id and deliveries.
pub async fn retry_moves_to_delayed_keeping_id(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    let out = e.q.retry(c.receipt, T0 + 1000).await.unwrap();
    assert_eq!(out, RetryOutcome::Delayed);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.delayed), (0, 1));
    assert!(claim(&e.q, 1).await.is_empty());
    e.clock.advance(Duration::from_secs(1));
    let again = claim_one(&e.q).await;
    assert_eq!(again.item.id, id);
    assert_eq!(again.item.deliveries, 2);
    assert_eq!(again.lane, Lane::Due);
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
}

/// retry after max_deliveries dead-letters and says so.
pub async fn retry_past_max_deliveries_dead_letters(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(2)).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    assert_eq!(
        e.q.retry(c.receipt, T0).await.unwrap(),
        RetryOutcome::Delayed
    );
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.deliveries, 2);
    assert_eq!(
        e.q.retry(c.receipt, T0).await.unwrap(),
        RetryOutcome::DeadLettered
    );
    let dl = e.q.dead_letters(10).await.unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].item.id, id);
    assert_eq!(dl[0].reason, MAX_DELIVERIES_REASON);
    assert_eq!(dl[0].item.deliveries, 2);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.delayed, s.dead_letters, s.pending), (0, 1, 0));
}

/// dead_letter records the reason and time.
pub async fn dead_letter_records_reason_and_time(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.clock.advance(Duration::from_millis(7));
    e.q.dead_letter(c.receipt, "bad input").await.unwrap();
    let dl = e.q.dead_letters(1).await.unwrap();
    assert_eq!(dl[0].reason, "bad input");
    assert_eq!(dl[0].failed_at_ms, T0 + 7);
    assert_eq!(dl[0].item.payload, b"x");
    lease_lost(e.q.dead_letter(c.receipt, "again").await, c.receipt);
}

/// After a reclaim by someone else, every operation with the old receipt is
/// LeaseLost and changes nothing.
pub async fn stale_receipt_after_reclaim_is_lease_lost_everywhere(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(in_flow("x", "f")).await.unwrap();
    let old = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(60));
    let new =
        e.q.reclaim(Duration::from_secs(30), 10)
            .await
            .map(|r| r.claimed)
            .unwrap();
    assert_eq!(new.len(), 1);
    let before = e.q.stats().await.unwrap();
    lease_lost(e.q.ack(old.receipt).await, old.receipt);
    lease_lost(e.q.touch(vec![old.receipt]).await, old.receipt);
    lease_lost(e.q.retry(old.receipt, T0).await, old.receipt);
    lease_lost(e.q.dead_letter(old.receipt, "x").await, old.receipt);
    lease_lost(e.q.park(old.receipt).await, old.receipt);
    assert_eq!(e.q.ack_batch(vec![old.receipt]).await.unwrap(), 0);
    assert_eq!(e.q.stats().await.unwrap(), before);
    e.q.ack(new[0].receipt).await.unwrap();
}

/// release gives a claim back without spending its delivery: the item
/// waits in delayed until `not_before`, then comes back with the same
/// delivery number, however often it is released; it never dead-letters.
/// The old receipt is lost. An item of a paused flow is parked instead.
pub async fn release_gives_the_delivery_back(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(1)).await;
    let id = add(&e.q, "a").await;
    for round in 0..3u64 {
        let c = claim_one(&e.q).await;
        assert_eq!((c.item.id, c.item.deliveries), (id, 1), "round {round}");
        let at = e.q.now_ms().await.unwrap() + 1_000;
        e.q.release(c.receipt, at).await.unwrap();
        lease_lost(e.q.release(c.receipt, at).await, c.receipt);
        lease_lost(e.q.ack(c.receipt).await, c.receipt);
        let s = e.q.stats().await.unwrap();
        assert_eq!((s.pending, s.delayed, s.dead_letters), (0, 1, 0));
        assert_eq!(e.q.next_due().await.unwrap(), Some(at));
        assert!(claim(&e.q, 1).await.is_empty(), "not before its time");
        e.clock.advance(Duration::from_secs(1));
    }
    // Paused flow: parked with the delivery given back.
    let c = claim_one(&e.q).await;
    e.q.ack(c.receipt).await.unwrap();
    let id = e.q.add(in_flow("b", "f")).await.unwrap().id;
    let c = claim_one(&e.q).await;
    e.q.pause("f").await.unwrap();
    e.q.release(c.receipt, T0).await.unwrap();
    assert_eq!(e.q.parked("f").await.unwrap(), 1);
    assert_eq!(e.q.stats().await.unwrap().delayed, 0);
    let stepped = e.q.step("f").await.unwrap().unwrap();
    assert_eq!((stepped.item.id, stepped.item.deliveries), (id, 1));
}
