//! Conformance cases of SPEC 3, priority: tiers, aging and the orders they
//! give.

use std::time::Duration;

use super::{
    Factory, HOUR, T0, add, claim, env, env_with, in_flow, item, payloads, peek_payloads, step_back,
};
use crate::config::Config;
use crate::item::{Lane, NewItem};
use crate::queue::WorkQueue;

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

/// SPEC 3, Clock steps, with SPEC 3, Priority: aging counts elapsed time
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
    // The step is met by this operation (`next_due`; on Redis `stats` only
    // looks), before anything else arrives.
    e.q.next_due().await.unwrap();
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
