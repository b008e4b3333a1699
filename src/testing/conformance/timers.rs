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

/// SPEC 3, Never early: a producer of timers, three promoters and a
/// claimer race while the clock moves a millisecond at a time; no claim
/// hands out an item before its `not_before` by the claim's own time.
/// Regression: the memory backend read its clock before taking its lock,
/// so a claim that read 639 ms ran after a promotion at 640 ms and handed
/// out a timer due at 640 ms at 639 ms.
pub async fn timers_never_fire_early_under_racing_promoters(f: &dyn Factory) {
    use std::sync::atomic::{AtomicBool, Ordering};
    const TIMERS: usize = 120;
    let e = env(f).await;
    let (q, clock) = (&e.q, &e.clock);
    let added = AtomicBool::new(false);
    let claimed_all = AtomicBool::new(false);
    let producer = async {
        for i in 0..TIMERS as u64 {
            let now = crate::clock::Clock::now_ms(clock);
            q.add_delayed(item("t"), now + i % 4).await.unwrap();
            if i % 3 == 0 {
                clock.advance(Duration::from_millis(1));
            }
            tokio::task::yield_now().await;
        }
        added.store(true, Ordering::Release);
        // Time enough for the last timers to come due.
        while !claimed_all.load(Ordering::Acquire) {
            clock.advance(Duration::from_millis(1));
            tokio::task::yield_now().await;
        }
    };
    let promoter = || async {
        while !claimed_all.load(Ordering::Acquire) {
            q.promote_due().await.unwrap();
            tokio::task::yield_now().await;
        }
    };
    let claimer = async {
        let mut got = 0;
        // Bounded: a claim that never finds the timers fails the case
        // instead of hanging it.
        for _ in 0..100_000 {
            if got == TIMERS {
                break;
            }
            for c in q.claim(7, Duration::ZERO, ClaimFrom::All).await.unwrap() {
                let nb = c.item.not_before_ms.unwrap_or(0);
                assert!(
                    c.claimed_at_ms >= nb,
                    "item {} handed out at {} ms, before its not_before {nb} ms",
                    c.item.id,
                    c.claimed_at_ms
                );
                got += 1;
            }
            tokio::task::yield_now().await;
        }
        claimed_all.store(true, Ordering::Release);
        assert_eq!(got, TIMERS, "every timer was claimed");
        assert!(added.load(Ordering::Acquire));
    };
    tokio::join!(producer, promoter(), promoter(), promoter(), claimer);
}
