//! Conformance cases of SPEC 3, crash recovery: `reclaim` of idle claims.

use std::collections::BTreeSet;
use std::time::Duration;

use super::{Factory, T0, add, claim, claim_one, env, env_with, ids, in_flow, item, lease_lost};
use crate::config::Config;
use crate::item::{Lane, MAX_DELIVERIES_REASON, NewItem};
use crate::queue::WorkQueue;

/// reclaim takes only claims idle for min_idle, oldest first.
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
        e.q.reclaim(Duration::from_secs(15), 10)
            .await
            .map(|r| r.claimed)
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
    let r =
        e.q.reclaim(Duration::from_secs(1), 1)
            .await
            .unwrap()
            .claimed;
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
    let r = e.q.reclaim(Duration::ZERO, 10).await.unwrap().claimed;
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

/// reclaim never hands out an item of a paused flow: it moves it to
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
    let r =
        e.q.reclaim(Duration::from_secs(5), 1)
            .await
            .unwrap()
            .claimed;
    assert_eq!(ids(&r), vec![b]);
    assert_eq!(e.q.parked("f").await.unwrap(), 2);
    let r =
        e.q.reclaim(Duration::from_secs(5), 10)
            .await
            .unwrap()
            .claimed;
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
    let r =
        e.q.reclaim(Duration::from_secs(5), 10)
            .await
            .unwrap()
            .claimed;
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
        let r =
            e.q.reclaim(Duration::from_secs(50), 7)
                .await
                .unwrap()
                .claimed;
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
