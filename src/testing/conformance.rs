//! The conformance suite: one async function per rule of SPEC sections 3 and
//! 4, each taking a [`Factory`] so that every backend runs the very same
//! scenario. `tests/conformance.rs` expands [`conformance_tests!`](crate::conformance_tests)
//! into one `#[tokio::test]` per case and backend.
//!
//! Every case drives time with a [`ManualClock`]; `wait` of a blocking claim
//! is real time, kept short.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, missing_docs)]

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Factory, Subject};
use crate::clock::ManualClock;
use crate::config::Config;
use crate::error::Error;
use crate::item::{
    ClaimFrom, Claimed, DeadLetter, Lane, MAX_DELIVERIES_REASON, NewItem, Receipt, RetryOutcome,
};
use crate::limit::{FlowLimit, RateLimit};
use crate::outcome::{Chunk, Outcome, OutcomeKind};
use crate::queue::{BoxQueue, WorkQueue};

/// The manual clock's starting time, ms since the Unix epoch.
pub const T0: u64 = 1_700_000_000_000;

const NOW: Duration = Duration::ZERO;

mod browse;
pub use browse::*;

struct Env {
    q: BoxQueue,
    clock: ManualClock,
    _subject: Subject,
}

async fn env_with(f: &dyn Factory, config: Config) -> Env {
    let clock = ManualClock::new(T0);
    let subject = f.make(config.clock(clock.clone())).await;
    Env {
        q: subject.queue.clone(),
        clock,
        _subject: subject,
    }
}

async fn env(f: &dyn Factory) -> Env {
    env_with(f, Config::default()).await
}

fn item(payload: &str) -> NewItem {
    NewItem::new(payload.as_bytes().to_vec())
}

fn in_flow(payload: &str, flow: &str) -> NewItem {
    item(payload).flow(flow)
}

async fn add(q: &BoxQueue, payload: &str) -> u64 {
    q.add(item(payload)).await.unwrap().id
}

async fn claim(q: &BoxQueue, n: usize) -> Vec<Claimed> {
    q.claim(n, NOW, ClaimFrom::All).await.unwrap()
}

async fn claim_one(q: &BoxQueue) -> Claimed {
    let mut v = claim(q, 1).await;
    assert_eq!(v.len(), 1, "expected one item to claim");
    v.remove(0)
}

fn ids(claimed: &[Claimed]) -> Vec<u64> {
    claimed.iter().map(|c| c.item.id).collect()
}

fn payloads(claimed: &[Claimed]) -> Vec<String> {
    claimed
        .iter()
        .map(|c| String::from_utf8_lossy(&c.item.payload).into_owned())
        .collect()
}

/// The payloads `peek(n)` shows, in its order.
async fn peek_payloads(q: &BoxQueue, n: usize) -> Vec<String> {
    q.peek(n)
        .await
        .unwrap()
        .iter()
        .map(|i| String::from_utf8_lossy(&i.payload).into_owned())
        .collect()
}

/// `r` is `LeaseLost` naming every field of `lost` (SPEC section 5): the
/// lease too, since a redrive repeats (id, delivery).
fn lease_lost<T: std::fmt::Debug>(r: Result<T, Error>, lost: Receipt) {
    match r {
        Err(Error::LeaseLost {
            id,
            delivery,
            lease,
        }) if (id, delivery, lease) == (lost.id, lost.delivery, lost.lease) => {}
        other => panic!("expected LeaseLost naming {lost:?}, got {other:?}"),
    }
}

fn invalid<T: std::fmt::Debug>(r: Result<T, Error>) {
    match r {
        Err(Error::InvalidInput(_)) => {}
        other => panic!("expected InvalidInput, got {other:?}"),
    }
}

// ---- Adding ---------------------------------------------------------------

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

// ---- Timers ---------------------------------------------------------------

/// A delayed item waits for its not_before, then is claimable.
pub async fn add_delayed_waits_for_not_before(f: &dyn Factory) {
    let e = env(f).await;
    let id = e.q.add_delayed(item("later"), T0 + 5000).await.unwrap().id;
    assert!(claim(&e.q, 1).await.is_empty());
    assert_eq!(e.q.stats().await.unwrap().delayed, 1);
    e.clock.advance(Duration::from_millis(4999));
    assert!(claim(&e.q, 1).await.is_empty());
    e.clock.advance(Duration::from_millis(1));
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, id);
    assert_eq!(c.lane, Lane::Due);
    assert_eq!(c.item.not_before_ms, Some(T0 + 5000));
}

/// A not_before in the past is due at the next promotion.
pub async fn add_delayed_in_the_past_is_due_at_once(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add_delayed(item("late"), T0 - 1000).await.unwrap();
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.delayed, s.due, s.backlog), (0, 1, 1));
}

/// next_due is the soonest not_before among delayed items.
pub async fn next_due_is_the_soonest_timer(f: &dyn Factory) {
    let e = env(f).await;
    assert_eq!(e.q.next_due().await.unwrap(), None);
    e.q.add_delayed(item("b"), T0 + 300).await.unwrap();
    e.q.add_delayed(item("a"), T0 + 100).await.unwrap();
    e.q.add_delayed(item("c"), T0 + 200).await.unwrap();
    assert_eq!(e.q.next_due().await.unwrap(), Some(T0 + 100));
    e.clock.advance(Duration::from_millis(150));
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
    assert_eq!(e.q.next_due().await.unwrap(), Some(T0 + 200));
}

/// promote_due moves due items in (not_before, id) order.
pub async fn promote_orders_by_not_before_then_id(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add_delayed(item("t300-a"), T0 + 300).await.unwrap();
    e.q.add_delayed(item("t100"), T0 + 100).await.unwrap();
    e.q.add_delayed(item("t300-b"), T0 + 300).await.unwrap();
    e.q.add_delayed(item("t900"), T0 + 900).await.unwrap();
    e.clock.advance(Duration::from_millis(500));
    assert_eq!(e.q.promote_due().await.unwrap(), 3);
    assert_eq!(e.q.promote_due().await.unwrap(), 0);
    let c = claim(&e.q, 10).await;
    assert_eq!(payloads(&c), vec!["t100", "t300-a", "t300-b"]);
}

/// The due lane is claimed before the backlog, even backlog items added
/// earlier.
pub async fn due_lane_before_backlog(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "backlog-1").await;
    e.q.add_delayed(item("timer"), T0 + 10).await.unwrap();
    add(&e.q, "backlog-2").await;
    e.clock.advance(Duration::from_millis(10));
    let c = claim(&e.q, 3).await;
    assert_eq!(payloads(&c), vec!["timer", "backlog-1", "backlog-2"]);
    assert_eq!(
        c.iter().map(|c| c.lane).collect::<Vec<_>>(),
        vec![Lane::Due, Lane::Backlog, Lane::Backlog]
    );
}

/// ClaimFrom::DueOnly takes only the due lane.
pub async fn claim_due_only_skips_backlog(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "backlog").await;
    assert!(
        e.q.claim(5, NOW, ClaimFrom::DueOnly)
            .await
            .unwrap()
            .is_empty()
    );
    e.q.add_delayed(item("timer"), T0).await.unwrap();
    let c = e.q.claim(5, NOW, ClaimFrom::DueOnly).await.unwrap();
    assert_eq!(payloads(&c), vec!["timer"]);
    assert_eq!(e.q.stats().await.unwrap().backlog, 1);
}

// ---- Claiming -------------------------------------------------------------

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
    invalid(e.q.reclaim_stale(Duration::ZERO, 0).await);
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

// ---- Finishing ------------------------------------------------------------

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
        e.q.reclaim_stale(Duration::ZERO, 10)
            .await
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

/// touch resets claimed_at so the claim is no longer stale; deliveries stay.
pub async fn touch_extends_the_lease(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(20));
    e.q.touch(vec![c.receipt]).await.unwrap();
    e.clock.advance(Duration::from_secs(20));
    assert!(
        e.q.reclaim_stale(Duration::from_secs(30), 10)
            .await
            .unwrap()
            .is_empty()
    );
    assert_eq!(
        e.q.stats().await.unwrap().oldest_pending_age_ms,
        Some(20_000)
    );
    e.q.ack(c.receipt).await.unwrap();
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
        e.q.reclaim_stale(Duration::from_secs(30), 10)
            .await
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

// ---- Crash recovery -------------------------------------------------------

/// reclaim_stale takes only claims idle for min_idle, oldest first.
pub async fn reclaim_takes_idle_claims_oldest_first(f: &dyn Factory) {
    let e = env(f).await;
    for p in ["a", "b", "c"] {
        add(&e.q, p).await;
    }
    let a = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(10));
    let b = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(10));
    let _c = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(5));
    let r =
        e.q.reclaim_stale(Duration::from_secs(15), 10)
            .await
            .unwrap();
    assert_eq!(ids(&r), vec![a.item.id, b.item.id]);
    assert!(r.iter().all(|c| c.claimed_at_ms == T0 + 25_000));
}

/// A reclaimed item gets deliveries + 1 and a new receipt.
pub async fn reclaim_counts_a_delivery_and_issues_a_new_receipt(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(1));
    let r = e.q.reclaim_stale(Duration::from_secs(1), 1).await.unwrap();
    assert_eq!(r[0].item.deliveries, 2);
    assert_eq!(r[0].receipt.delivery, 2);
    assert_ne!(r[0].receipt, c.receipt);
    assert_eq!(r[0].lane, Lane::Backlog);
    e.q.touch(vec![r[0].receipt]).await.unwrap();
    e.q.ack(r[0].receipt).await.unwrap();
}

/// A reclaim that would pass max_deliveries dead-letters instead.
pub async fn reclaim_past_max_deliveries_dead_letters(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(2)).await;
    add(&e.q, "doomed").await;
    add(&e.q, "fine").await;
    let d = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(1));
    let r = e.q.reclaim_stale(Duration::ZERO, 10).await.unwrap();
    assert_eq!(ids(&r), vec![d.item.id]);
    let doomed = r[0].receipt;
    let f2 = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(1));
    let r = e.q.reclaim(Duration::from_millis(500), 1).await.unwrap();
    // "doomed" is at 2 deliveries: dead-lettered, not returned, not counted,
    // and named by the receipt of its stale claim.
    assert_eq!(ids(&r.claimed), vec![f2.item.id]);
    assert_eq!(r.dead_lettered, vec![doomed]);
    let dl = e.q.dead_letters(10).await.unwrap();
    assert_eq!(dl.len(), 1);
    assert_eq!(dl[0].reason, MAX_DELIVERIES_REASON);
    assert_eq!(dl[0].item.id, d.item.id);
}

/// reclaim_stale never hands out an item of a paused flow: it moves it to
/// the flow's parked list tail with its deliveries unchanged, and does not
/// count it towards `count`. An item handed out by `step` is the exception
/// only at the step itself: once stale, it is parked again.
pub async fn reclaim_parks_items_of_paused_flows(f: &dyn Factory) {
    let e = env(f).await;
    let a = e.q.add(in_flow("a", "f")).await.unwrap().id;
    let b = add(&e.q, "b").await;
    let c = e.q.add(in_flow("c", "f")).await.unwrap().id;
    let held = claim(&e.q, 3).await;
    assert_eq!(ids(&held), vec![a, b, c]);
    e.q.pause("f").await.unwrap();
    let d = e.q.add(in_flow("d", "f")).await.unwrap().id;
    assert!(claim(&e.q, 5).await.is_empty());
    assert_eq!(e.q.parked("f").await.unwrap(), 1);
    e.clock.advance(Duration::from_secs(10));
    // "a" is parked and not counted, "b" is taken; "c" is not reached.
    let r = e.q.reclaim_stale(Duration::from_secs(5), 1).await.unwrap();
    assert_eq!(ids(&r), vec![b]);
    assert_eq!(e.q.parked("f").await.unwrap(), 2);
    let r = e.q.reclaim_stale(Duration::from_secs(5), 10).await.unwrap();
    assert!(r.is_empty(), "handed out an item of a paused flow: {r:?}");
    assert_eq!(e.q.parked("f").await.unwrap(), 3);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.parked, s.pending, s.dead_letters), (3, 1, 0));
    // The old holders lost their leases.
    lease_lost(e.q.ack(held[0].receipt).await, held[0].receipt);
    lease_lost(e.q.ack(held[2].receipt).await, held[2].receipt);
    // Parked in the order reclaimed, behind "d"; deliveries unchanged.
    let s1 = e.q.step("f").await.unwrap().expect("d parked");
    assert_eq!((s1.item.id, s1.item.deliveries), (d, 1));
    let s2 = e.q.step("f").await.unwrap().expect("a parked");
    assert_eq!((s2.item.id, s2.item.deliveries), (a, 2));
    e.q.ack(s2.receipt).await.unwrap();
    // The holder of the stepped "d" crashed: "d" goes back to the parked
    // tail, behind "c", since the flow is still paused.
    e.clock.advance(Duration::from_secs(10));
    let r = e.q.reclaim_stale(Duration::from_secs(5), 10).await.unwrap();
    assert_eq!(ids(&r), vec![b]);
    lease_lost(e.q.ack(s1.receipt).await, s1.receipt);
    assert_eq!(e.q.parked("f").await.unwrap(), 2);
    // After resume both run, "c" first, with deliveries unchanged by the
    // reclaims that parked them.
    assert_eq!(e.q.resume("f").await.unwrap(), 2);
    let r = claim(&e.q, 5).await;
    assert_eq!(ids(&r), vec![c, d]);
    assert_eq!(r[0].item.deliveries, 2);
    assert_eq!(r[1].item.deliveries, 2);
}

/// Repeated reclaims reach every stale item, however many fresh ones there
/// are.
pub async fn repeated_reclaims_reach_stale_items_behind_fresh_ones(f: &dyn Factory) {
    let e = env(f).await;
    let stale: Vec<NewItem> = (0..60).map(|i| item(&format!("s{i}"))).collect();
    e.q.add_batch(stale).await.unwrap();
    let s = claim(&e.q, 60).await;
    assert_eq!(s.len(), 60);
    e.clock.advance(Duration::from_secs(100));
    let fresh: Vec<NewItem> = (0..40).map(|i| item(&format!("f{i}"))).collect();
    e.q.add_batch(fresh).await.unwrap();
    assert_eq!(claim(&e.q, 40).await.len(), 40);
    e.clock.advance(Duration::from_secs(1));
    let mut got = Vec::new();
    loop {
        let r = e.q.reclaim_stale(Duration::from_secs(50), 7).await.unwrap();
        assert!(r.len() <= 7);
        if r.is_empty() {
            break;
        }
        got.extend(ids(&r));
    }
    let want: BTreeSet<u64> = ids(&s).into_iter().collect();
    assert_eq!(got.iter().copied().collect::<BTreeSet<_>>(), want);
    assert_eq!(got.len(), 60);
}

// ---- Flows ----------------------------------------------------------------

/// resume moves parked items back to the backlog tail, oldest first.
pub async fn resume_requeues_parked_oldest_first(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    for i in 0..3 {
        e.q.add(in_flow(&format!("p{i}"), "f")).await.unwrap();
    }
    assert!(claim(&e.q, 5).await.is_empty());
    add(&e.q, "other").await;
    assert_eq!(e.q.resume("f").await.unwrap(), 3);
    assert_eq!(e.q.parked("f").await.unwrap(), 0);
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let c = claim(&e.q, 10).await;
    assert_eq!(payloads(&c), vec!["other", "p0", "p1", "p2"]);
    assert_eq!(e.q.resume("f").await.unwrap(), 0);
}

/// park moves a pending item to its flow's parked list.
pub async fn park_moves_a_pending_item_to_parked(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(in_flow("x", "f")).await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.park(c.receipt).await.unwrap();
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.parked), (0, 1));
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
    assert_eq!(e.q.resume("f").await.unwrap(), 1);
    let again = claim_one(&e.q).await;
    assert_eq!(again.item.deliveries, 2);
}

/// Flow operations need a flow name; an item of the default flow cannot be
/// parked.
pub async fn flow_operations_refuse_the_default_flow(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    invalid(e.q.park(c.receipt).await);
    invalid(e.q.pause("").await);
    invalid(e.q.resume("").await);
    invalid(e.q.step("").await);
    invalid(e.q.clear_flow("").await);
    e.q.ack(c.receipt).await.unwrap();
}

/// A flow name with control characters or over `MAX_FLOW_NAME_BYTES` is
/// refused by adds and flow operations alike, and nothing changes; a name
/// of exactly the limit is taken (SPEC section 5).
pub async fn malformed_flow_names_are_invalid_input(f: &dyn Factory) {
    let e = env(f).await;
    let long = "f".repeat(crate::MAX_FLOW_NAME_BYTES + 1);
    for bad in ["a\tb", "a\nb", "\u{7}", long.as_str()] {
        invalid(e.q.add(in_flow("x", bad)).await);
        invalid(
            e.q.add_batch(vec![NewItem::new(b"ok".to_vec()), in_flow("x", bad)])
                .await,
        );
        invalid(e.q.add_delayed(in_flow("x", bad), T0 + 1000).await);
        invalid(e.q.pause(bad).await);
        invalid(e.q.resume(bad).await);
        invalid(e.q.step(bad).await);
        invalid(e.q.clear_flow(bad).await);
    }
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.delayed), (0, 0), "nothing was added");
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let longest = "f".repeat(crate::MAX_FLOW_NAME_BYTES);
    e.q.add(in_flow("x", &longest)).await.unwrap();
    e.q.pause(&longest).await.unwrap();
    assert_eq!(e.q.paused_flows().await.unwrap(), vec![longest.clone()]);
    assert_eq!(e.q.resume(&longest).await.unwrap(), 0);
    assert_eq!(claim_one(&e.q).await.item.flow, longest);
}

/// step hands out the oldest parked item; the rest stay held and the flow
/// stays paused.
pub async fn step_runs_one_parked_item(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    e.q.add(in_flow("first", "f")).await.unwrap();
    e.q.add(in_flow("second", "f")).await.unwrap();
    claim(&e.q, 5).await;
    let s = e.q.step("f").await.unwrap().expect("one parked item");
    assert_eq!(s.item.payload, b"first");
    assert_eq!(s.lane, Lane::Parked);
    assert_eq!(s.item.deliveries, 1);
    assert_eq!(e.q.parked("f").await.unwrap(), 1);
    assert_eq!(e.q.paused_flows().await.unwrap(), vec!["f".to_string()]);
    e.q.ack(s.receipt).await.unwrap();
    assert!(e.q.step("g").await.unwrap().is_none());
}

/// clear_flow deletes parked items and the pause state.
pub async fn clear_flow_deletes_parked_items_and_pause(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    e.q.add(in_flow("a", "f")).await.unwrap();
    e.q.add(in_flow("b", "f")).await.unwrap();
    claim(&e.q, 5).await;
    assert_eq!(e.q.clear_flow("f").await.unwrap(), 2);
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.parked, s.backlog, s.pending), (0, 0, 0));
    e.q.add(in_flow("c", "f")).await.unwrap();
    assert_eq!(claim(&e.q, 5).await.len(), 1);
}

/// paused_flows lists paused flows sorted; pausing is idempotent.
pub async fn paused_flows_are_listed_sorted(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("b").await.unwrap();
    e.q.pause("a").await.unwrap();
    e.q.pause("b").await.unwrap();
    assert_eq!(
        e.q.paused_flows().await.unwrap(),
        vec!["a".to_string(), "b".to_string()]
    );
}

// ---- Idempotency ----------------------------------------------------------

/// A done marker lives for done_ttl by the queue's clock.
pub async fn done_marker_lives_for_its_ttl(f: &dyn Factory) {
    let e = env_with(f, Config::default().done_ttl(Duration::from_secs(60))).await;
    assert!(!e.q.was_done(7, "charge").await.unwrap());
    e.q.mark_done(7, "charge").await.unwrap();
    assert!(e.q.was_done(7, "charge").await.unwrap());
    assert!(!e.q.was_done(7, "email").await.unwrap());
    assert!(!e.q.was_done(8, "charge").await.unwrap());
    e.clock.advance(Duration::from_secs(59));
    assert!(e.q.was_done(7, "charge").await.unwrap());
    e.clock.advance(Duration::from_secs(1));
    assert!(!e.q.was_done(7, "charge").await.unwrap());
}

// ---- Dead letters ---------------------------------------------------------

/// dead_letters lists newest first, at most count.
pub async fn dead_letters_are_newest_first(f: &dyn Factory) {
    let e = env(f).await;
    for p in ["a", "b", "c"] {
        add(&e.q, p).await;
    }
    for c in claim(&e.q, 3).await {
        e.clock.advance(Duration::from_millis(1));
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let dl = e.q.dead_letters(2).await.unwrap();
    assert_eq!(
        dl.iter()
            .map(|d| d.item.payload.clone())
            .collect::<Vec<_>>(),
        vec![b"c".to_vec(), b"b".to_vec()]
    );
}

/// redrive moves a dead letter back to the backlog tail with deliveries 0;
/// an old receipt stays void.
pub async fn redrive_resets_deliveries(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "oops").await.unwrap();
    add(&e.q, "y").await;
    assert!(e.q.redrive(id).await.unwrap());
    assert!(!e.q.redrive(id).await.unwrap());
    assert!(!e.q.redrive(999).await.unwrap());
    assert_eq!(e.q.stats().await.unwrap().dead_letters, 0);
    let again = claim(&e.q, 2).await;
    assert_eq!(payloads(&again), vec!["y", "x"]);
    assert_eq!(again[1].item.id, id);
    assert_eq!(again[1].item.deliveries, 1);
    // The receipt from before the dead-lettering names delivery 1 as well,
    // but it is not this claim.
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
    e.q.ack(again[1].receipt).await.unwrap();
}

/// Past dead_letter_cap the oldest dead letters are dropped.
pub async fn dead_letter_cap_drops_the_oldest(f: &dyn Factory) {
    let e = env_with(f, Config::default().dead_letter_cap(2)).await;
    for p in ["a", "b", "c"] {
        add(&e.q, p).await;
    }
    for c in claim(&e.q, 3).await {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let dl = e.q.dead_letters(10).await.unwrap();
    assert_eq!(dl.len(), 2);
    assert_eq!(dl[1].item.payload, b"b");
    assert!(!e.q.redrive(1).await.unwrap());
    assert_eq!(e.q.stats().await.unwrap().dead_letters, 2);
}

// ---- Clock steps (SPEC 8) -------------------------------------------------

const HOUR: Duration = Duration::from_secs(3600);

fn step_back(clock: &ManualClock, by: Duration) {
    let now = crate::clock::Clock::now_ms(clock);
    clock.set(now.saturating_sub(crate::config::ms(by)));
}

/// A retry's delay is measured in elapsed time across a step back of the
/// clock: the first operation after the step moves the timer back with it.
pub async fn clock_step_back_keeps_a_retry_delay(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.q.retry(c.receipt, T0 + 2_000).await.unwrap();
    step_back(&e.clock, HOUR);
    let now = T0 - 3_600_000;
    assert_eq!(e.q.stats().await.unwrap().delayed, 1);
    assert_eq!(e.q.next_due().await.unwrap(), Some(now + 2_000));
    e.clock.advance(Duration::from_millis(1_999));
    assert!(claim(&e.q, 1).await.is_empty(), "not before its 2 s");
    e.clock.advance(Duration::from_millis(1));
    let got = claim(&e.q, 1).await;
    assert_eq!(got.len(), 1, "the 2 s retry was stretched by the step");
    // A second step back is noticed as well.
    e.q.retry(got[0].receipt, now + 4_000).await.unwrap();
    step_back(&e.clock, HOUR);
    assert_eq!(e.q.stats().await.unwrap().delayed, 1);
    e.clock.advance(Duration::from_secs(2));
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
}

/// A claim's idle time is measured in elapsed time across a step back:
/// 10 s before the step and 20 s after it make a 30 s `min_idle`. The step
/// is measured from the latest time an operation saw.
pub async fn clock_step_back_keeps_a_claims_idle_time(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let held = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(10));
    assert_eq!(
        e.q.stats().await.unwrap().oldest_pending_age_ms,
        Some(10_000)
    );
    step_back(&e.clock, HOUR);
    assert!(
        e.q.reclaim_stale(Duration::from_secs(30), 1)
            .await
            .unwrap()
            .is_empty()
    );
    e.clock.advance(Duration::from_secs(20));
    let again = e.q.reclaim_stale(Duration::from_secs(30), 1).await.unwrap();
    assert_eq!(
        ids(&again),
        vec![held.item.id],
        "the idle time lost the step"
    );
}

/// An outcome is kept for `result_ttl` of elapsed time across a step back
/// of the clock, its progress and chunks with it; its `at_ms` is history and
/// stays (SPEC 8, Clock steps).
pub async fn clock_step_back_keeps_an_outcomes_ttl(f: &dyn Factory) {
    let e = env_with(f, Config::default().result_ttl(Duration::from_secs(10))).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    e.q.set_progress(c.receipt, b"half".to_vec()).await.unwrap();
    e.q.send_chunk(c.receipt, b"part".to_vec()).await.unwrap();
    e.q.ack_with_result(c.receipt, b"answer".to_vec())
        .await
        .unwrap();
    e.clock.advance(Duration::from_secs(4));
    assert!(e.q.outcome(id).await.unwrap().is_some());
    step_back(&e.clock, HOUR);
    assert_eq!(e.q.stats().await.unwrap().backlog, 0);
    e.clock.advance(Duration::from_millis(5_999));
    assert_eq!(e.q.outcome(id).await.unwrap(), done(id, b"answer", T0));
    assert_eq!(e.q.progress(id).await.unwrap(), Some(b"half".to_vec()));
    e.clock.advance(Duration::from_millis(1));
    assert_eq!(
        e.q.outcome(id).await.unwrap(),
        None,
        "the outcome outlived its 10 s by the step"
    );
    assert_eq!(e.q.progress(id).await.unwrap(), None);
    assert_eq!(e.q.wait_chunks(id, 0, NOW).await.unwrap(), vec![]);
}

/// A step forward moves nothing: timers simply come due early.
pub async fn clock_step_forward_makes_timers_due_early(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add_delayed(item("x"), T0 + 2 * 3_600_000)
        .await
        .unwrap();
    e.clock.advance(3 * HOUR);
    assert_eq!(e.q.stats().await.unwrap().delayed, 1);
    assert_eq!(e.q.next_due().await.unwrap(), Some(T0 + 2 * 3_600_000));
    assert_eq!(claim(&e.q, 1).await.len(), 1);
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

/// Dead letters dropped past dead_letter_cap are counted in
/// `Stats::dead_letters_dropped`, by every way an item is dead-lettered
/// (dead_letter, retry and reclaim past max_deliveries), and the count
/// survives a purge: a drop is never silent.
pub async fn dead_letter_cap_counts_what_it_drops(f: &dyn Factory) {
    let e = env_with(f, Config::default().dead_letter_cap(1).max_deliveries(1)).await;
    assert_eq!(e.q.stats().await.unwrap().dead_letters_dropped, 0);
    for p in ["a", "b", "c", "d"] {
        add(&e.q, p).await;
    }
    let mut held = claim(&e.q, 4).await;
    let last = held.pop().unwrap();
    for c in &held[..2] {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 1));
    // retry past max_deliveries dead-letters, and drops the older one.
    assert_eq!(
        e.q.retry(held[2].receipt, T0).await.unwrap(),
        RetryOutcome::DeadLettered
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 2));
    // reclaim past max_deliveries too.
    e.clock.advance(Duration::from_secs(60));
    assert!(
        e.q.reclaim_stale(Duration::from_secs(1), 4)
            .await
            .unwrap()
            .is_empty()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (1, 3));
    let kept = e.q.dead_letters(10).await.unwrap();
    assert_eq!(ids_of_dead(&kept), vec![last.item.id]);
    // A purge deletes what was kept; the drops stay counted.
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.dead_letters, s.dead_letters_dropped), (0, 3));
}

fn ids_of_dead(dead: &[DeadLetter]) -> Vec<u64> {
    dead.iter().map(|d| d.item.id).collect()
}

/// purge_dead_letters deletes them all and says how many.
pub async fn purge_dead_letters_deletes_all(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "a").await;
    add(&e.q, "b").await;
    for c in claim(&e.q, 2).await {
        e.q.dead_letter(c.receipt, "no").await.unwrap();
    }
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 2);
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 0);
    assert!(e.q.dead_letters(10).await.unwrap().is_empty());
    assert!(!e.q.redrive(1).await.unwrap());
}

// ---- Looking --------------------------------------------------------------

/// stats counts every state exactly.
pub async fn stats_count_every_state(f: &dyn Factory) {
    let e = env(f).await;
    assert_eq!(e.q.stats().await.unwrap().durable, f.durable());
    e.q.pause("p").await.unwrap();
    e.q.add(in_flow("parked", "p")).await.unwrap();
    for p in ["pending", "dead", "backlog"] {
        add(&e.q, p).await;
    }
    e.q.add_delayed(item("due"), T0).await.unwrap();
    e.q.add_delayed(item("delayed"), T0 + 100_000)
        .await
        .unwrap();
    let c = claim(&e.q, 3).await;
    assert_eq!(payloads(&c), vec!["due", "pending", "dead"]);
    e.q.dead_letter(c[2].receipt, "x").await.unwrap();
    e.q.retry(c[0].receipt, T0).await.unwrap();
    e.q.promote_due().await.unwrap();
    e.clock.advance(Duration::from_millis(250));
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.backlog, 2, "{s:?}");
    assert_eq!(s.due, 1);
    assert_eq!(s.pending, 1);
    assert_eq!(s.delayed, 1);
    assert_eq!(s.parked, 1);
    assert_eq!(s.dead_letters, 1);
    assert_eq!(s.oldest_pending_age_ms, Some(250));
}

/// peek shows what a claim would hand out, without claiming.
pub async fn peek_does_not_claim(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("p").await.unwrap();
    add(&e.q, "b1").await;
    e.q.add(in_flow("held", "p")).await.unwrap();
    add(&e.q, "b2").await;
    e.q.add_delayed(item("timer"), T0).await.unwrap();
    assert_eq!(peek_payloads(&e.q, 10).await, vec!["timer", "b1", "b2"]);
    assert_eq!(e.q.peek(1).await.unwrap().len(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.delayed, s.parked), (0, 1, 0));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["timer", "b1", "b2"]);
}

/// backlog_by_flow counts flows over the next items to be claimed.
pub async fn backlog_by_flow_counts_the_sample(f: &dyn Factory) {
    let e = env(f).await;
    for flow in ["a", "b", "a", "c", "a"] {
        e.q.add(in_flow("x", flow)).await.unwrap();
    }
    let m = e.q.backlog_by_flow(4).await.unwrap();
    assert_eq!(m.get("a"), Some(&2));
    assert_eq!(m.get("b"), Some(&1));
    assert_eq!(m.get("c"), Some(&1));
    assert_eq!(m.values().sum::<u64>(), 4);
}

/// now_ms reads the queue's clock.
pub async fn now_reads_the_queue_clock(f: &dyn Factory) {
    let e = env(f).await;
    assert_eq!(e.q.now_ms().await.unwrap(), T0);
    e.clock.advance(Duration::from_millis(5));
    assert_eq!(e.q.now_ms().await.unwrap(), T0 + 5);
}

// ---- Delivery (SPEC section 4) --------------------------------------------

/// An item comes back after a retry and after a reclaim, never otherwise.
pub async fn item_is_handed_out_again_only_after_retry_or_reclaim(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    assert!(claim(&e.q, 5).await.is_empty());
    e.clock.advance(Duration::from_secs(3600));
    assert!(
        claim(&e.q, 5).await.is_empty(),
        "a stale claim is not handed out by claim"
    );
    e.q.retry(c.receipt, T0).await.unwrap();
    let c2 = claim_one(&e.q).await;
    assert_eq!(c2.item.id, id);
    let r = e.q.reclaim_stale(Duration::ZERO, 5).await.unwrap();
    assert_eq!(ids(&r), vec![id]);
    e.q.ack(r[0].receipt).await.unwrap();
    assert!(claim(&e.q, 5).await.is_empty());
}

/// The id is the same through delay, claim, retry, park, resume,
/// dead-lettering and redrive.
pub async fn id_is_stable_through_every_move(f: &dyn Factory) {
    let e = env(f).await;
    let id = e.q.add_delayed(in_flow("x", "f"), T0).await.unwrap().id;
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, id);
    e.q.park(c.receipt).await.unwrap();
    e.q.resume("f").await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.retry(c.receipt, T0).await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "x").await.unwrap();
    e.q.redrive(id).await.unwrap();
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, id);
    assert_eq!(c.item.enqueued_at_ms, T0);
}

/// A claim may wait "forever" (`Duration::MAX`) without overflowing.
pub async fn claim_with_an_endless_wait_does_not_overflow(f: &dyn Factory) {
    let e = env(f).await;
    let waited = tokio::time::timeout(
        Duration::from_millis(100),
        e.q.claim(1, Duration::MAX, ClaimFrom::All),
    )
    .await;
    assert!(
        waited.is_err(),
        "an empty queue handed something out: {waited:?}"
    );
    add(&e.q, "x").await;
    let c = e.q.claim(1, Duration::MAX, ClaimFrom::All).await.unwrap();
    assert_eq!(payloads(&c), vec!["x"]);
}

/// After close(), every call on that handle is `Closed` (SPEC section 8).
pub async fn calls_after_close_are_closed(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    e.q.close().await.unwrap();
    for r in [
        e.q.add(item("late")).await.map(|_| ()),
        e.q.stats().await.map(|_| ()),
        e.q.claim(1, NOW, ClaimFrom::All).await.map(|_| ()),
        e.q.wait_outcome(1, NOW).await.map(|_| ()),
        e.q.wait_chunks(1, 0, NOW).await.map(|_| ()),
        e.q.now_ms().await.map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::Closed)), "after close: {r:?}");
    }
}

// ---- outcomes and progress (SPEC 3, Outcomes and progress) -----------------

fn done(id: u64, result: &[u8], at_ms: u64) -> Option<Outcome> {
    Some(Outcome {
        id,
        kind: OutcomeKind::Done {
            result: result.to_vec(),
        },
        at_ms,
    })
}

fn dead(id: u64, reason: &str, at_ms: u64) -> Option<Outcome> {
    Some(Outcome {
        id,
        kind: OutcomeKind::DeadLettered {
            reason: reason.to_string(),
        },
        at_ms,
    })
}

/// An ack's result is kept for `result_ttl` by the queue's clock, then is
/// gone with the item's progress and chunks; a plain ack keeps an empty
/// result; a `result_ttl` of zero keeps nothing.
pub async fn result_is_kept_for_result_ttl_then_expires(f: &dyn Factory) {
    let e = env_with(f, Config::default().result_ttl(Duration::from_secs(10))).await;
    let a = add(&e.q, "a").await;
    let b = add(&e.q, "b").await;
    assert_eq!(e.q.outcome(a).await.unwrap(), None);
    let c = claim(&e.q, 2).await;
    e.q.send_chunk(c[0].receipt, b"part".to_vec())
        .await
        .unwrap();
    e.q.set_progress(c[0].receipt, b"50%".to_vec())
        .await
        .unwrap();
    e.q.ack_with_result(c[0].receipt, b"answer".to_vec())
        .await
        .unwrap();
    e.clock.advance(Duration::from_secs(1));
    e.q.ack(c[1].receipt).await.unwrap();
    assert_eq!(e.q.outcome(a).await.unwrap(), done(a, b"answer", T0));
    assert_eq!(e.q.outcome(b).await.unwrap(), done(b, b"", T0 + 1000));
    e.clock.advance(Duration::from_millis(8_999));
    assert_eq!(e.q.outcome(a).await.unwrap(), done(a, b"answer", T0));
    assert_eq!(e.q.progress(a).await.unwrap(), Some(b"50%".to_vec()));
    e.clock.advance(Duration::from_millis(1));
    assert_eq!(e.q.outcome(a).await.unwrap(), None);
    assert!(e.q.outcome(b).await.unwrap().is_some());
    // The progress and chunks expire with the outcome.
    assert_eq!(e.q.progress(a).await.unwrap(), None);
    assert_eq!(e.q.wait_chunks(a, 0, NOW).await.unwrap(), vec![]);

    let off = env_with(f, Config::default().result_ttl(Duration::ZERO)).await;
    let id = add(&off.q, "x").await;
    let c = claim_one(&off.q).await;
    off.q
        .ack_with_result(c.receipt, b"r".to_vec())
        .await
        .unwrap();
    assert_eq!(off.q.outcome(id).await.unwrap(), None);
}

/// A result over `max_payload_bytes` is refused and the item stays pending.
pub async fn result_over_limit_is_invalid_input(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_payload_bytes(4)).await;
    let id = add(&e.q, "a").await;
    let c = claim_one(&e.q).await;
    invalid(e.q.ack_with_result(c.receipt, b"12345".to_vec()).await);
    invalid(e.q.set_progress(c.receipt, b"12345".to_vec()).await);
    invalid(e.q.send_chunk(c.receipt, b"12345".to_vec()).await);
    assert_eq!(e.q.stats().await.unwrap().pending, 1);
    e.q.ack_with_result(c.receipt, b"1234".to_vec())
        .await
        .unwrap();
    assert_eq!(e.q.outcome(id).await.unwrap(), done(id, b"1234", T0));
}

/// A waiting `wait_outcome` returns as soon as the item is acked.
pub async fn wait_outcome_is_woken_by_an_ack(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "job").await;
    let c = claim_one(&e.q).await;
    let q = e.q.clone();
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.ack_with_result(c.receipt, b"ok".to_vec()).await.unwrap();
    });
    let got = e.q.wait_outcome(id, Duration::from_secs(20)).await.unwrap();
    assert_eq!(got, done(id, b"ok", T0));
    acker.await.unwrap();
    // An outcome that exists already is returned without waiting.
    let again = e.q.wait_outcome(id, Duration::MAX).await.unwrap();
    assert_eq!(again, done(id, b"ok", T0));
    // A large result (Redis: too large to ride on the wake-up signal).
    let big_id = add(&e.q, "big").await;
    let c = claim_one(&e.q).await;
    let big = vec![7u8; 5000];
    let (q, answer) = (e.q.clone(), big.clone());
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.ack_with_result(c.receipt, answer).await.unwrap();
    });
    let got =
        e.q.wait_outcome(big_id, Duration::from_secs(20))
            .await
            .unwrap();
    assert_eq!(got, done(big_id, &big, T0));
    acker.await.unwrap();
}

/// `wait_outcome` of an unfinished (or unknown) item returns `None` when
/// the wait runs out, and changes nothing.
pub async fn wait_outcome_times_out_empty(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "slow").await;
    let _c = claim_one(&e.q).await;
    let got =
        e.q.wait_outcome(id, Duration::from_millis(100))
            .await
            .unwrap();
    assert_eq!(got, None);
    assert_eq!(e.q.wait_outcome(999, NOW).await.unwrap(), None);
    assert_eq!(e.q.stats().await.unwrap().pending, 1);
}

/// A dead-lettered item's outcome holds the reason and the time, whether it
/// was dead-lettered by hand or past `max_deliveries`; a redrive clears it
/// until the item finishes again.
pub async fn dead_lettered_outcome_holds_the_reason(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(1)).await;
    let a = add(&e.q, "a").await;
    let b = add(&e.q, "b").await;
    let c = claim(&e.q, 2).await;
    let q = e.q.clone();
    let waiter = tokio::spawn(async move { q.wait_outcome(a, Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    e.q.dead_letter(c[0].receipt, "bad input").await.unwrap();
    assert_eq!(waiter.await.unwrap().unwrap(), dead(a, "bad input", T0));
    e.clock.advance(Duration::from_secs(1));
    let r = e.q.retry(c[1].receipt, T0).await.unwrap();
    assert_eq!(r, RetryOutcome::DeadLettered);
    assert_eq!(
        e.q.outcome(b).await.unwrap(),
        dead(b, MAX_DELIVERIES_REASON, T0 + 1000)
    );
    assert!(e.q.redrive(a).await.unwrap());
    assert_eq!(e.q.outcome(a).await.unwrap(), None);
    let again = claim_one(&e.q).await;
    e.q.ack_with_result(again.receipt, b"second try".to_vec())
        .await
        .unwrap();
    assert_eq!(
        e.q.outcome(a).await.unwrap(),
        done(a, b"second try", T0 + 1000)
    );
}

/// Progress and chunks need the current receipt: a stale one (after a
/// reclaim, or after the ack) is `LeaseLost` and publishes nothing. The
/// latest progress is kept, and stays readable after the ack.
pub async fn progress_is_fenced_like_touch(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "a").await;
    let first = claim_one(&e.q).await;
    assert_eq!(e.q.progress(id).await.unwrap(), None);
    e.q.set_progress(first.receipt, b"10%".to_vec())
        .await
        .unwrap();
    e.q.set_progress(first.receipt, b"20%".to_vec())
        .await
        .unwrap();
    assert_eq!(e.q.progress(id).await.unwrap(), Some(b"20%".to_vec()));
    e.clock.advance(Duration::from_secs(60));
    let second =
        e.q.reclaim_stale(Duration::from_secs(30), 10)
            .await
            .unwrap();
    assert_eq!(ids(&second), vec![id]);
    lease_lost(
        e.q.set_progress(first.receipt, b"stale".to_vec()).await,
        first.receipt,
    );
    lease_lost(
        e.q.send_chunk(first.receipt, b"stale".to_vec()).await,
        first.receipt,
    );
    assert_eq!(e.q.progress(id).await.unwrap(), Some(b"20%".to_vec()));
    assert_eq!(e.q.wait_chunks(id, 0, NOW).await.unwrap(), vec![]);
    e.q.set_progress(second[0].receipt, b"90%".to_vec())
        .await
        .unwrap();
    e.q.ack(second[0].receipt).await.unwrap();
    lease_lost(
        e.q.set_progress(second[0].receipt, b"late".to_vec()).await,
        second[0].receipt,
    );
    assert_eq!(e.q.progress(id).await.unwrap(), Some(b"90%".to_vec()));
}

/// Chunks get sequence numbers 1, 2, 3... and a reader gets them in order,
/// after the sequence number it names; a waiting reader wakes on the next
/// chunk, and returns at once, empty, once the item has finished.
pub async fn chunks_arrive_in_order(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "stream").await;
    let c = claim_one(&e.q).await;
    for (i, part) in ["one", "two", "three"].iter().enumerate() {
        let seq =
            e.q.send_chunk(c.receipt, part.as_bytes().to_vec())
                .await
                .unwrap();
        assert_eq!(seq, i as u64 + 1);
    }
    let chunk = |seq: u64, data: &str| Chunk {
        seq,
        data: data.as_bytes().to_vec(),
    };
    assert_eq!(
        e.q.wait_chunks(id, 0, NOW).await.unwrap(),
        vec![chunk(1, "one"), chunk(2, "two"), chunk(3, "three")]
    );
    assert_eq!(
        e.q.wait_chunks(id, 2, NOW).await.unwrap(),
        vec![chunk(3, "three")]
    );
    let q = e.q.clone();
    let sender = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.send_chunk(c.receipt, b"four".to_vec()).await.unwrap()
    });
    let got =
        e.q.wait_chunks(id, 3, Duration::from_secs(20))
            .await
            .unwrap();
    assert_eq!(got, vec![chunk(4, "four")]);
    assert_eq!(sender.await.unwrap(), 4);
    assert_eq!(
        e.q.wait_chunks(id, 3, Duration::from_millis(50))
            .await
            .unwrap(),
        vec![chunk(4, "four")]
    );
    assert_eq!(
        e.q.wait_chunks(id, 4, Duration::from_millis(50))
            .await
            .unwrap(),
        vec![]
    );
    e.q.ack(c.receipt).await.unwrap();
    // Finished: an endless wait returns at once, and the stream is still
    // readable from the start.
    assert_eq!(e.q.wait_chunks(id, 4, Duration::MAX).await.unwrap(), vec![]);
    assert_eq!(e.q.wait_chunks(id, 0, NOW).await.unwrap().len(), 4);
}

/// A retried request (an add whose dedup key matches) gets the first item's
/// id, and awaiting it gives the first item's outcome.
pub async fn dedup_then_await_gets_the_first_outcome(f: &dyn Factory) {
    let e = env(f).await;
    let first = e.q.add(item("req").dedup_key("request-7")).await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.ack_with_result(c.receipt, b"first answer".to_vec())
        .await
        .unwrap();
    e.clock.advance(Duration::from_secs(1));
    let again = e.q.add(item("req").dedup_key("request-7")).await.unwrap();
    assert!(again.duplicate);
    assert_eq!(again.id, first.id);
    let got =
        e.q.wait_outcome(again.id, Duration::from_secs(5))
            .await
            .unwrap();
    assert_eq!(got, done(first.id, b"first answer", T0));
    assert_eq!(e.q.stats().await.unwrap().backlog, 0);
}

// ---- Priority (SPEC 3, Priority) ------------------------------------------

fn tiered(payload: &str, tier: u8) -> NewItem {
    item(payload).priority(tier)
}

/// Higher tiers are claimed first; within a tier, add order.
pub async fn higher_priority_runs_first_fifo_within_a_tier(f: &dyn Factory) {
    let e = env(f).await;
    for (p, t) in [("a0", 0), ("b2", 2), ("c1", 1), ("d2", 2), ("e0", 0)] {
        e.q.add(tiered(p, t)).await.unwrap();
    }
    let c = claim(&e.q, 2).await;
    assert_eq!(payloads(&c), vec!["b2", "d2"]);
    assert_eq!(c[0].item.priority, 2);
    assert_eq!(payloads(&claim(&e.q, 5).await), vec!["c1", "a0", "e0"]);
}

/// Each tier is worth `aging_step` of waiting: an item of a low tier that
/// has waited longer than that overtakes a fresh item of a higher tier, and
/// one that has waited less does not.
pub async fn aging_lets_a_waiting_low_tier_overtake(f: &dyn Factory) {
    let e = env_with(f, Config::default().aging_step(Duration::from_secs(1))).await;
    e.q.add(tiered("old0", 0)).await.unwrap();
    e.clock.advance(Duration::from_millis(2500));
    // Rank T0 + 2500 - 2 x 1000 = T0 + 500: behind old0 (T0), ahead of a
    // tier-1 item added now (T0 + 1500) and of a tier-0 one.
    e.q.add(tiered("new2", 2)).await.unwrap();
    e.q.add(tiered("new1", 1)).await.unwrap();
    e.q.add(tiered("new0", 0)).await.unwrap();
    let peeked = peek_payloads(&e.q, 10).await;
    let want = vec!["old0", "new2", "new1", "new0"];
    assert_eq!(peeked, want);
    assert_eq!(payloads(&claim(&e.q, 10).await), want);
}

/// At tier 0 the order is the backlog position, even when the clock steps
/// back; redrive and resume put items at the tail with their tier.
pub async fn tier_zero_stays_fifo_when_the_clock_steps_back(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "a").await;
    e.clock.set(T0 - 30_000);
    add(&e.q, "b").await;
    e.clock.set(T0 + 5_000);
    let x = add(&e.q, "x").await;
    e.clock.set(T0 - 60_000);
    add(&e.q, "c").await;
    let got = claim(&e.q, 3).await;
    assert_eq!(payloads(&got), vec!["a", "b", "x"]);
    e.q.dead_letter(got[2].receipt, "again").await.unwrap();
    e.q.pause("p").await.unwrap();
    e.q.add(in_flow("p1", "p")).await.unwrap();
    assert!(claim(&e.q, 5).await.iter().all(|c| c.item.flow != "p"));
    add(&e.q, "d").await;
    assert!(e.q.redrive(x).await.unwrap());
    assert_eq!(e.q.resume("p").await.unwrap(), 1);
    assert_eq!(payloads(&claim(&e.q, 5).await), vec!["d", "x", "p1"]);
}

/// The due lane is ranked by tier too (arrival = `not_before`); a retried
/// item keeps its tier, and so does a redriven one.
pub async fn priority_orders_the_due_lane_and_survives_retry(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add_delayed(tiered("lo", 0), T0 + 1_000).await.unwrap();
    e.q.add_delayed(tiered("hi", 3), T0 + 2_000).await.unwrap();
    add(&e.q, "backlog").await;
    e.clock.advance(Duration::from_secs(2));
    let c = claim(&e.q, 1).await;
    assert_eq!(payloads(&c), vec!["hi"]);
    assert_eq!(c[0].lane, Lane::Due);
    e.q.retry(c[0].receipt, T0 + 3_000).await.unwrap();
    e.clock.advance(Duration::from_secs(1));
    let again = claim(&e.q, 3).await;
    assert_eq!(payloads(&again), vec!["hi", "lo", "backlog"]);
    assert_eq!(again[0].item.priority, 3);
    e.q.dead_letter(again[0].receipt, "x").await.unwrap();
    assert_eq!(e.q.dead_letters(1).await.unwrap()[0].item.priority, 3);
    add(&e.q, "plain").await;
    assert!(e.q.redrive(again[0].item.id).await.unwrap());
    let last = claim(&e.q, 2).await;
    assert_eq!(payloads(&last), vec!["hi", "plain"]);
    assert_eq!(last[0].item.priority, 3);
}

/// SPEC 8, Clock steps, with SPEC 3, Priority: aging counts elapsed time
/// across a step back, in both lanes. A tier-0 item that has waited 30 s
/// (three aging steps of 10 s) runs before a fresh tier-1 item, as without
/// the step; a lane that kept its pre-step arrivals would rank every
/// arrival after the step at the old time and put the tier-1 item first.
pub async fn aging_counts_elapsed_time_across_a_clock_step(f: &dyn Factory) {
    let e = env_with(f, Config::default().aging_step(Duration::from_secs(10))).await;
    e.q.add(tiered("old0", 0)).await.unwrap();
    e.clock.advance(Duration::from_secs(1));
    e.q.add_delayed(tiered("due0", 0), T0 + 1_000)
        .await
        .unwrap();
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
    step_back(&e.clock, HOUR);
    // The step is noticed by this operation, before anything else arrives.
    assert_eq!(e.q.stats().await.unwrap().backlog, 2);
    e.clock.advance(Duration::from_secs(30));
    e.q.add(tiered("new1", 1)).await.unwrap();
    let now = e.q.now_ms().await.unwrap();
    e.q.add_delayed(tiered("due1", 1), now).await.unwrap();
    let want = vec!["due0", "due1", "old0", "new1"];
    let peeked = peek_payloads(&e.q, 10).await;
    assert_eq!(peeked, want);
    assert_eq!(payloads(&claim(&e.q, 10).await), want);
}

/// A claim given back by `release` re-enters through delayed and the due
/// lane with its tier: of two items released to the same time, the higher
/// tier comes back first though its id is larger.
pub async fn release_keeps_the_tier(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(tiered("lo", 0)).await.unwrap();
    e.q.add(tiered("hi", 2)).await.unwrap();
    let got = claim(&e.q, 2).await;
    assert_eq!(payloads(&got), vec!["hi", "lo"]);
    let at = T0 + 1_000;
    e.q.release(got[1].receipt, at).await.unwrap();
    e.q.release(got[0].receipt, at).await.unwrap();
    e.clock.advance(Duration::from_secs(1));
    let again = claim(&e.q, 2).await;
    assert_eq!(payloads(&again), vec!["hi", "lo"]);
    assert_eq!(
        again
            .iter()
            .map(|c| (c.item.priority, c.item.deliveries, c.lane))
            .collect::<Vec<_>>(),
        vec![(2, 1, Lane::Due), (0, 1, Lane::Due)]
    );
}

/// `backlog_by_flow` samples the same order as a claim.
pub async fn backlog_by_flow_samples_in_priority_order(f: &dyn Factory) {
    let e = env(f).await;
    for i in 0..3 {
        e.q.add(in_flow(&format!("low{i}"), "low")).await.unwrap();
    }
    e.q.add(in_flow("high", "high").priority(5)).await.unwrap();
    let sample = e.q.backlog_by_flow(2).await.unwrap();
    assert_eq!(sample.get("high"), Some(&1));
    assert_eq!(sample.get("low"), Some(&1));
}

/// close() on one clone ends a claim blocked on another clone with `Closed`
/// at once, not when its wait runs out (SPEC section 8).
pub async fn close_wakes_claims_blocked_on_other_clones(f: &dyn Factory) {
    let e = env(f).await;
    let blocked = tokio::spawn({
        let q = e.q.clone();
        async move { q.claim(1, Duration::from_secs(60), ClaimFrom::All).await }
    });
    // Let the claim find nothing and start waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    e.q.close().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("a claim blocked across close() still waits after 10 s")
        .unwrap();
    assert!(
        matches!(ended, Err(Error::Closed)),
        "blocked claim: {ended:?}"
    );
}

/// Run every case against `factory`, in order: the same list
/// [`conformance_tests!`](crate::conformance_tests) expands.
pub async fn run_all(factory: &dyn Factory) {
    macro_rules! run {
        ($($case:ident),* $(,)?) => { $( $case(factory).await; )* };
    }
    crate::conformance_case_list!(run);
}

// ---- flow limits (SPEC 3, Flow limits) -------------------------------------

async fn limit(q: &BoxQueue, flow: &str, l: FlowLimit) {
    q.set_flow_limit(flow, l).await.unwrap();
}

/// At most K items of a capped flow are pending at once; the other flows'
/// items go past the held ones, which keep their place; ack, retry,
/// release, dead letter and park each free a slot.
pub async fn concurrency_cap_holds_a_flow_and_exits_free_slots(f: &dyn Factory) {
    let e = env(f).await;
    limit(&e.q, "a", FlowLimit::Concurrency(Some(2))).await;
    for p in ["a1", "a2", "a3", "a4", "a5", "a6"] {
        e.q.add(in_flow(p, "a")).await.unwrap();
    }
    add(&e.q, "b1").await;
    let c = claim(&e.q, 10).await;
    assert_eq!(payloads(&c), vec!["a1", "a2", "b1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending, s.limited), (4, 3, 4));
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(
        (
            l[0].flow.as_str(),
            l[0].concurrency,
            l[0].pending,
            l[0].held,
            l[0].blocked
        ),
        ("a", Some(2), 2, 4, true)
    );
    e.q.ack(c[0].receipt).await.unwrap();
    let d = claim(&e.q, 10).await;
    assert_eq!(payloads(&d), vec!["a3"]);
    e.q.retry(c[1].receipt, T0).await.unwrap();
    // The retried a2 comes due again and runs first (due lane), in a2's slot.
    let g = claim(&e.q, 10).await;
    assert_eq!(payloads(&g), vec!["a2"]);
    e.q.release(d[0].receipt, T0 + 60_000).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4"]);
    e.q.dead_letter(g[0].receipt, "no").await.unwrap();
    let h = claim(&e.q, 10).await;
    assert_eq!(payloads(&h), vec!["a5"]);
    e.q.park(h[0].receipt).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a6"]);
    assert_eq!(e.q.stats().await.unwrap().limited, 0);
    // Clearing the cap lets the released a3 run beside the others.
    limit(&e.q, "a", FlowLimit::Concurrency(None)).await;
    e.clock.advance(Duration::from_secs(60));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a3"]);
    assert!(e.q.flow_limits().await.unwrap().is_empty());
    invalid(
        e.q.set_flow_limit("a", FlowLimit::Concurrency(Some(0)))
            .await,
    );
    invalid(
        e.q.set_flow_limit("", FlowLimit::Concurrency(Some(1)))
            .await,
    );
}

/// A reclaim that hands a stale item over keeps its slot; one that
/// dead-letters it frees the slot.
pub async fn concurrency_cap_counts_reclaimed_items(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(2)).await;
    limit(&e.q, "a", FlowLimit::Concurrency(Some(1))).await;
    e.q.add(in_flow("a1", "a")).await.unwrap();
    e.q.add(in_flow("a2", "a")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1"]);
    e.clock.advance(Duration::from_secs(60));
    let r = e.q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert_eq!(payloads(&r.claimed), vec!["a1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    e.clock.advance(Duration::from_secs(60));
    let r = e.q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert_eq!(r.dead_lettered.len(), 1);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a2"]);
}

/// A back-off holds the flow until its time, then lifts itself; the held
/// items keep their tier and place; a claim waiting on the flow wakes when
/// it lifts.
pub async fn back_off_holds_a_flow_until_it_lifts_itself(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(in_flow("a1", "a")).await.unwrap();
    e.q.add(in_flow("a2", "a").priority(3)).await.unwrap();
    add(&e.q, "b1").await;
    limit(&e.q, "a", FlowLimit::BackOffUntil(Some(T0 + 30_000))).await;
    e.q.add(in_flow("a3", "a")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["b1"]);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.limited), (3, 3));
    assert!(peek_payloads(&e.q, 10).await.is_empty());
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!(l[0].backoff_until_ms, Some(T0 + 30_000));
    e.clock.advance(Duration::from_millis(29_999));
    assert!(claim(&e.q, 10).await.is_empty());
    let clock = e.clock.clone();
    let mover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(Duration::from_millis(1));
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    mover.await.unwrap();
    assert_eq!(payloads(&c), vec!["a2"]);
    assert_eq!(peek_payloads(&e.q, 10).await, vec!["a1", "a3"]);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1", "a3"]);
    assert!(e.q.flow_limits().await.unwrap().is_empty());
    // back_off from now; lifting it early with None.
    e.q.back_off("a", Duration::from_secs(10)).await.unwrap();
    e.q.add(in_flow("a4", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    limit(&e.q, "a", FlowLimit::BackOffUntil(None)).await;
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4"]);
}

/// A rate limit hands out at most N permits per window, by the queue's
/// clock; the other flows go past; an item's cost counts; a window opens
/// at the first claim after the last one ended.
pub async fn rate_limit_hands_out_n_permits_per_period(f: &dyn Factory) {
    let e = env(f).await;
    limit(
        &e.q,
        "a",
        FlowLimit::Rate(Some(RateLimit::new(3, Duration::from_secs(1)))),
    )
    .await;
    for p in ["a1", "a2", "a3", "a4", "a5"] {
        e.q.add(in_flow(p, "a")).await.unwrap();
    }
    e.q.add(in_flow("a6", "a").cost(2)).await.unwrap();
    e.q.add(in_flow("a7", "a")).await.unwrap();
    add(&e.q, "b1").await;
    assert_eq!(payloads(&claim(&e.q, 2).await), vec!["a1", "a2"]);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a3", "b1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!((l[0].permits_used, l[0].held, l[0].blocked), (3, 4, true));
    assert_eq!(e.q.stats().await.unwrap().limited, 4);
    e.clock.advance(Duration::from_millis(999));
    assert!(claim(&e.q, 10).await.is_empty());
    e.clock.advance(Duration::from_millis(1));
    // a4 (1) fits, a5 (1) fits, a6 (2) does not: the window's last permit
    // goes unused and a7 waits behind a6.
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4", "a5"]);
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a6", "a7"]);
    // A change keeps the window; clearing lifts the limit.
    e.q.add(in_flow("a8", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    limit(&e.q, "a", FlowLimit::Rate(None)).await;
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a8"]);
    invalid(
        e.q.set_flow_limit(
            "a",
            FlowLimit::Rate(Some(RateLimit::new(0, Duration::from_secs(1)))),
        )
        .await,
    );
}

/// A claim blocked waiting wakes when a rate window ends, and when a slot
/// of a capped flow is freed, without anything else happening.
pub async fn blocking_claim_wakes_when_permits_or_slots_return(f: &dyn Factory) {
    let e = env(f).await;
    limit(
        &e.q,
        "r",
        FlowLimit::Rate(Some(RateLimit::new(1, Duration::from_secs(5)))),
    )
    .await;
    e.q.add(in_flow("r1", "r")).await.unwrap();
    e.q.add(in_flow("r2", "r")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["r1"]);
    let clock = e.clock.clone();
    let mover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(Duration::from_secs(5));
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    mover.await.unwrap();
    assert_eq!(payloads(&c), vec!["r2"]);

    limit(&e.q, "k", FlowLimit::Concurrency(Some(1))).await;
    e.q.add(in_flow("k1", "k")).await.unwrap();
    e.q.add(in_flow("k2", "k")).await.unwrap();
    let k1 = claim_one(&e.q).await;
    let q = e.q.clone();
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.ack(k1.receipt).await.unwrap();
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    acker.await.unwrap();
    assert_eq!(payloads(&c), vec!["k2"]);
}

/// Limits combine with pause: a held flow's items stay held (not parked);
/// once the limits let the flow run, a paused flow's items are parked.
pub async fn limits_and_pause_combine(f: &dyn Factory) {
    let e = env(f).await;
    limit(&e.q, "a", FlowLimit::BackOffUntil(Some(T0 + 1_000))).await;
    e.q.pause("a").await.unwrap();
    e.q.add(in_flow("a1", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    assert_eq!(e.q.parked("a").await.unwrap(), 0);
    e.clock.advance(Duration::from_secs(1));
    assert!(claim(&e.q, 10).await.is_empty());
    assert_eq!(e.q.parked("a").await.unwrap(), 1);
    assert_eq!(e.q.resume("a").await.unwrap(), 1);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1"]);
    // flow_limits lists flows by name.
    limit(&e.q, "z", FlowLimit::Concurrency(Some(3))).await;
    limit(&e.q, "m", FlowLimit::Concurrency(Some(3))).await;
    let names: Vec<String> =
        e.q.flow_limits()
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.flow)
            .collect();
    assert_eq!(names, vec!["m", "z"]);
}

/// The list of cases, handed to a callback macro.
#[doc(hidden)]
#[macro_export]
macro_rules! conformance_case_list {
    ($callback:ident $(, $arg:expr)?) => {
        $callback! {
            $($arg;)?
            add_assigns_increasing_ids,
            add_batch_returns_ids_in_order,
            add_batch_is_all_or_none,
            payload_over_limit_is_invalid_input,
            identical_payloads_stay_two_items,
            dedup_key_within_window_is_a_duplicate,
            dedup_window_expires,
            full_refuses_and_drops_nothing,
            add_delayed_waits_for_not_before,
            add_delayed_in_the_past_is_due_at_once,
            next_due_is_the_soonest_timer,
            promote_orders_by_not_before_then_id,
            due_lane_before_backlog,
            claim_due_only_skips_backlog,
            claim_never_exceeds_count,
            claim_count_zero_is_invalid,
            claim_counts_delivery_and_sets_claimed_at,
            backlog_is_fifo,
            blocking_claim_is_woken_by_add,
            blocking_claim_is_woken_by_timer,
            blocking_claim_times_out_empty,
            claim_parks_items_of_paused_flows,
            waiting_claim_obeys_a_later_pause,
            concurrent_claims_never_share_an_item,
            ack_removes_for_good_and_second_ack_is_lease_lost,
            ack_batch_counts_only_current_receipts,
            ack_batch_acks_a_current_receipt_behind_a_lost_one,
            touch_extends_the_lease,
            touch_with_a_lost_receipt_changes_nothing,
            retry_moves_to_delayed_keeping_id,
            retry_past_max_deliveries_dead_letters,
            dead_letter_records_reason_and_time,
            stale_receipt_after_reclaim_is_lease_lost_everywhere,
            reclaim_takes_idle_claims_oldest_first,
            reclaim_counts_a_delivery_and_issues_a_new_receipt,
            reclaim_past_max_deliveries_dead_letters,
            repeated_reclaims_reach_stale_items_behind_fresh_ones,
            reclaim_parks_items_of_paused_flows,
            resume_requeues_parked_oldest_first,
            park_moves_a_pending_item_to_parked,
            flow_operations_refuse_the_default_flow,
            malformed_flow_names_are_invalid_input,
            step_runs_one_parked_item,
            clear_flow_deletes_parked_items_and_pause,
            paused_flows_are_listed_sorted,
            done_marker_lives_for_its_ttl,
            dead_letters_are_newest_first,
            redrive_resets_deliveries,
            dead_letter_cap_drops_the_oldest,
            dead_letter_cap_counts_what_it_drops,
            release_gives_the_delivery_back,
            clock_step_back_keeps_a_retry_delay,
            clock_step_back_keeps_a_claims_idle_time,
            clock_step_back_keeps_an_outcomes_ttl,
            clock_step_forward_makes_timers_due_early,
            purge_dead_letters_deletes_all,
            stats_count_every_state,
            peek_does_not_claim,
            backlog_by_flow_counts_the_sample,
            list_shows_each_state,
            list_pages_cover_the_state_once,
            list_orders_each_state,
            list_searches_payload_text,
            find_names_the_state,
            list_and_find_show_items_held_by_a_flow_limit,
            now_reads_the_queue_clock,
            item_is_handed_out_again_only_after_retry_or_reclaim,
            id_is_stable_through_every_move,
            claim_with_an_endless_wait_does_not_overflow,
            calls_after_close_are_closed,
            result_is_kept_for_result_ttl_then_expires,
            result_over_limit_is_invalid_input,
            wait_outcome_is_woken_by_an_ack,
            wait_outcome_times_out_empty,
            dead_lettered_outcome_holds_the_reason,
            progress_is_fenced_like_touch,
            chunks_arrive_in_order,
            dedup_then_await_gets_the_first_outcome,
            higher_priority_runs_first_fifo_within_a_tier,
            aging_lets_a_waiting_low_tier_overtake,
            tier_zero_stays_fifo_when_the_clock_steps_back,
            priority_orders_the_due_lane_and_survives_retry,
            backlog_by_flow_samples_in_priority_order,
            aging_counts_elapsed_time_across_a_clock_step,
            release_keeps_the_tier,
            close_wakes_claims_blocked_on_other_clones,
            concurrency_cap_holds_a_flow_and_exits_free_slots,
            concurrency_cap_counts_reclaimed_items,
            back_off_holds_a_flow_until_it_lifts_itself,
            rate_limit_hands_out_n_permits_per_period,
            blocking_claim_wakes_when_permits_or_slots_return,
            limits_and_pause_combine,
        }
    };
}

/// Expand one `#[tokio::test]` per conformance case, each running the case
/// against the factory expression given (SPEC sections 3 and 4).
///
/// ```text
/// mod embedded {
///     workjournal::conformance_tests!(workjournal::testing::EmbeddedFactory);
/// }
/// ```
#[macro_export]
macro_rules! conformance_tests {
    ($factory:expr) => {
        $crate::conformance_case_list!(__workjournal_conformance_tests, $factory);
    };
}

#[doc(hidden)]
#[macro_export]
macro_rules! __workjournal_conformance_tests {
    ($factory:expr; $($case:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $case() {
                $crate::testing::conformance::$case(&$factory).await;
            }
        )*
    };
}
