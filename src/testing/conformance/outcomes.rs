//! Conformance cases of SPEC 3, outcomes and progress: results, waits,
//! progress, chunks and done markers.

use std::time::Duration;

use super::{
    Factory, HOUR, NOW, T0, add, claim, claim_one, dead, done, env, env_with, ids, in_flow,
    invalid, item, lease_lost, step_back,
};
use crate::config::Config;
use crate::item::{MAX_DELIVERIES_REASON, RetryOutcome};
use crate::outcome::Chunk;
use crate::queue::WorkQueue;

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

/// Plain acks (`ack` and `ack_batch`) keep an empty result for
/// `result_ttl` whatever the order of their ids: a claim over priority
/// tiers acks every other id, a redriven dead letter is acked after later
/// ids; each outcome keeps its own time, hides the item's progress when it
/// expires, and keeps its elapsed ttl across a step back of the clock.
pub async fn plain_acks_keep_their_outcomes_in_any_id_order(f: &dyn Factory) {
    let e = env_with(f, Config::default().result_ttl(Duration::from_secs(10))).await;
    // One flow, so that a partitioned queue keeps them on one partition.
    let d = e.q.add(in_flow("d", "f")).await.unwrap().id;
    let first = claim_one(&e.q).await;
    e.q.dead_letter(first.receipt, "bad").await.unwrap();
    let mut tiered = Vec::new();
    for i in 0..6u8 {
        let p = if i % 2 == 1 { 5 } else { 0 };
        tiered.push(e.q.add(in_flow("t", "f").priority(p)).await.unwrap().id);
    }
    let high = claim(&e.q, 3).await;
    assert_eq!(ids(&high), vec![tiered[1], tiered[3], tiered[5]]);
    e.q.set_progress(high[0].receipt, b"half".to_vec())
        .await
        .unwrap();
    let receipts = high.iter().map(|c| c.receipt).collect();
    assert_eq!(e.q.ack_batch(receipts).await.unwrap(), 3);
    for &id in &[tiered[1], tiered[3], tiered[5]] {
        assert_eq!(e.q.outcome(id).await.unwrap(), done(id, b"", T0));
    }
    assert_eq!(e.q.outcome(tiered[0]).await.unwrap(), None);
    e.clock.advance(Duration::from_secs(1));
    let low = claim(&e.q, 1).await;
    e.q.ack(low[0].receipt).await.unwrap();
    assert_eq!(
        e.q.outcome(tiered[0]).await.unwrap(),
        done(tiered[0], b"", T0 + 1000)
    );
    // The dead letter's outcome, then the plain ack's after its redrive.
    assert_eq!(e.q.outcome(d).await.unwrap(), dead(d, "bad", T0));
    assert!(e.q.redrive(d).await.unwrap());
    let mut left = claim(&e.q, 3).await;
    let again = left.pop().unwrap();
    assert_eq!(again.item.id, d);
    e.q.ack(again.receipt).await.unwrap();
    assert_eq!(e.q.outcome(d).await.unwrap(), done(d, b"", T0 + 1000));
    let receipts = left.iter().map(|c| c.receipt).collect();
    assert_eq!(e.q.ack_batch(receipts).await.unwrap(), 2);

    step_back(&e.clock, HOUR);
    // `next_due` meets the step (SPEC 3, Clock steps: on Redis `stats` only looks).
    e.q.next_due().await.unwrap();
    assert_eq!(e.q.stats().await.unwrap().backlog, 0);
    e.clock.advance(Duration::from_millis(8_999));
    assert_eq!(
        e.q.outcome(tiered[1]).await.unwrap(),
        done(tiered[1], b"", T0)
    );
    assert_eq!(
        e.q.progress(tiered[1]).await.unwrap(),
        Some(b"half".to_vec())
    );
    e.clock.advance(Duration::from_millis(1));
    for &id in &[tiered[1], tiered[3], tiered[5]] {
        assert_eq!(
            e.q.outcome(id).await.unwrap(),
            None,
            "{id} outlived its ttl"
        );
    }
    assert_eq!(e.q.progress(tiered[1]).await.unwrap(), None);
    assert!(e.q.outcome(tiered[0]).await.unwrap().is_some());
    assert!(e.q.outcome(d).await.unwrap().is_some());
    e.clock.advance(Duration::from_secs(1));
    for id in [tiered[0], tiered[2], tiered[4], d] {
        assert_eq!(
            e.q.outcome(id).await.unwrap(),
            None,
            "{id} outlived its ttl"
        );
    }
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
        e.q.reclaim(Duration::from_secs(30), 10)
            .await
            .map(|r| r.claimed)
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

/// A `result_ttl` of zero keeps no outcome, so an item's progress and
/// chunks go when it finishes, by ack, ack batch or dead letter, and a
/// `purge_dead_letters` leaves nothing of them (SPEC 3, Outcomes and
/// progress). Regression: they were never deleted (Redis kept
/// `{ns}:prog:<id>` and `{ns}:chunks:<id>` for good).
pub async fn a_zero_result_ttl_keeps_no_progress_or_chunks(f: &dyn Factory) {
    let e = env_with(f, Config::default().result_ttl(Duration::ZERO)).await;
    let ids: Vec<u64> = [
        add(&e.q, "acked").await,
        add(&e.q, "batch").await,
        add(&e.q, "dead").await,
    ]
    .to_vec();
    let held = claim(&e.q, 3).await;
    assert_eq!(held.len(), 3);
    for c in &held {
        e.q.set_progress(c.receipt, b"half".to_vec()).await.unwrap();
        e.q.send_chunk(c.receipt, b"part".to_vec()).await.unwrap();
    }
    e.q.ack(held[0].receipt).await.unwrap();
    assert_eq!(e.q.ack_batch(vec![held[1].receipt]).await.unwrap(), 1);
    e.q.dead_letter(held[2].receipt, "bad").await.unwrap();
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 1);
    for id in ids {
        assert_eq!(e.q.outcome(id).await.unwrap(), None);
        assert_eq!(e.q.progress(id).await.unwrap(), None, "item {id}");
        assert_eq!(
            e.q.wait_chunks(id, 0, Duration::ZERO).await.unwrap(),
            vec![],
            "item {id}"
        );
    }
}
