//! Conformance cases of SPEC 3, clock steps: elapsed time across a step of the
//! queue's clock.

use std::time::Duration;

use super::{
    Factory, HOUR, NOW, T0, add, claim, claim_one, done, env, env_with, ids, item, step_back,
};
use crate::config::Config;
use crate::queue::WorkQueue;

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
    // `next_due` meets the step (SPEC 3, Clock steps: on Redis `stats` only looks).
    e.q.next_due().await.unwrap();
    assert_eq!(e.q.stats().await.unwrap().delayed, 1);
    e.clock.advance(Duration::from_secs(2));
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
}

/// A claim's idle time is measured in elapsed time across a step back:
/// 10 s before the step and 20 s after it make a 30 s `min_idle`. The step
/// is measured from the latest time an operation saw (on Redis one that
/// writes: `stats` only looks, SPEC 3, Clock steps).
pub async fn clock_step_back_keeps_a_claims_idle_time(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let held = claim_one(&e.q).await;
    e.clock.advance(Duration::from_secs(10));
    e.q.next_due().await.unwrap();
    assert_eq!(
        e.q.stats().await.unwrap().oldest_pending_age_ms,
        Some(10_000)
    );
    step_back(&e.clock, HOUR);
    assert!(
        e.q.reclaim(Duration::from_secs(30), 1)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
    e.clock.advance(Duration::from_secs(20));
    let again =
        e.q.reclaim(Duration::from_secs(30), 1)
            .await
            .unwrap()
            .claimed;
    assert_eq!(
        ids(&again),
        vec![held.item.id],
        "the idle time lost the step"
    );
}

/// An outcome is kept for `result_ttl` of elapsed time across a step back
/// of the clock, its progress and chunks with it; its `at_ms` is history and
/// stays (SPEC 3, Clock steps).
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
    // `next_due` meets the step (SPEC 3, Clock steps: on Redis `stats` only looks).
    e.q.next_due().await.unwrap();
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
