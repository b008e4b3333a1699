//! Conformance cases of SPEC 3, timers: delayed adds, `next_due`, promotion and
//! the due lane.

use std::time::Duration;

use super::{Factory, NOW, T0, add, claim, claim_one, env, item, payloads};
use crate::item::{ClaimFrom, Lane};
use crate::queue::WorkQueue;

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
