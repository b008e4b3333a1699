//! Conformance cases of SPEC 3, Controlling one item: `promote` (a delayed
//! item becomes due now), `remove` (an item is deleted unrun) and the one
//! atomic `back_off`.

use std::time::Duration;

use super::{Factory, T0, add, claim, claim_one, env, in_flow, invalid, item, payloads};
use crate::item::ClaimFrom;
use crate::queue::WorkQueue;

/// promote moves one delayed item to the due lane now, ahead of the
/// backlog; anything that is not a delayed item answers false and changes
/// nothing.
pub async fn promote_makes_a_delayed_item_due_now(f: &dyn Factory) {
    let e = env(f).await;
    let x = e.q.add_delayed(item("x"), T0 + 60_000).await.unwrap().id;
    let z = e.q.add_delayed(item("z"), T0 + 90_000).await.unwrap().id;
    let y = add(&e.q, "y").await;
    assert!(e.q.promote(x).await.unwrap());
    let s = e.q.stats().await.unwrap();
    // The backlog count includes the due lane (SPEC 3, Looking).
    assert_eq!((s.due, s.delayed, s.backlog), (1, 1, 2));
    assert_eq!(e.q.next_due().await.unwrap(), Some(T0 + 90_000));
    // Not delayed (backlog, due, unknown): false, nothing moves.
    assert!(!e.q.promote(x).await.unwrap());
    assert!(!e.q.promote(y).await.unwrap());
    assert!(!e.q.promote(999).await.unwrap());
    let got = claim(&e.q, 3).await;
    assert_eq!(payloads(&got), vec!["x", "y"]);
    assert_eq!(got[0].item.id, x);
    assert_eq!(got[0].item.deliveries, 1);
    // Pending: false too; the lease is untouched.
    assert!(!e.q.promote(x).await.unwrap());
    e.q.ack(got[0].receipt).await.unwrap();
    // A retried item waits in delayed and can be promoted like any timer.
    let r = e.q.retry(got[1].receipt, T0 + 30_000).await.unwrap();
    assert_eq!(r, crate::item::RetryOutcome::Delayed);
    assert!(e.q.promote(y).await.unwrap());
    let again = claim_one(&e.q).await;
    assert_eq!((again.item.id, again.item.deliveries), (y, 2));
    assert!(e.q.promote(z).await.unwrap());
    assert_eq!(e.q.next_due().await.unwrap(), None);
}

/// remove deletes a waiting, due, delayed, parked or dead-lettered item for
/// good; a pending one is refused with InvalidInput and keeps its lease;
/// an unknown id answers false. A dead letter's outcome stays, as with a
/// purge.
pub async fn remove_deletes_any_item_that_is_not_pending(f: &dyn Factory) {
    let e = env(f).await;
    let dead = add(&e.q, "dead").await;
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "bad").await.unwrap();
    let parked = e.q.add(in_flow("parked", "f")).await.unwrap().id;
    e.q.pause("f").await.unwrap();
    assert!(claim(&e.q, 1).await.is_empty());
    assert_eq!(e.q.parked("f").await.unwrap(), 1);
    let p = add(&e.q, "pending").await;
    let held = claim_one(&e.q).await;
    assert_eq!(held.item.id, p);
    let waiting = add(&e.q, "waiting").await;
    let delayed =
        e.q.add_delayed(item("delayed"), T0 + 60_000)
            .await
            .unwrap()
            .id;
    let due = e.q.add_delayed(item("due"), T0 - 1).await.unwrap().id;
    assert_eq!(e.q.promote_due().await.unwrap(), 1);

    invalid(e.q.remove(p).await);
    assert_eq!(e.q.stats().await.unwrap().pending, 1);
    for id in [waiting, delayed, due, parked, dead] {
        assert!(e.q.remove(id).await.unwrap(), "remove item {id}");
        assert!(!e.q.remove(id).await.unwrap(), "remove item {id} twice");
        assert_eq!(e.q.find(id).await.unwrap(), None);
    }
    assert!(!e.q.remove(999).await.unwrap());
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (
            s.backlog,
            s.due,
            s.delayed,
            s.parked,
            s.dead_letters,
            s.pending
        ),
        (0, 0, 0, 0, 0, 1)
    );
    assert_eq!(e.q.parked("f").await.unwrap(), 0);
    assert!(e.q.dead_letters(10).await.unwrap().is_empty());
    assert!(e.q.outcome(dead).await.unwrap().is_some());
    assert!(claim(&e.q, 10).await.is_empty());
    e.q.ack(held.receipt).await.unwrap();
    // The flow stays paused: remove takes items, not pause state.
    assert_eq!(e.q.paused_flows().await.unwrap(), vec!["f".to_string()]);
}

/// An item a flow limit holds aside is removed like any waiting item, and
/// the flow's held count goes down with it.
pub async fn remove_takes_an_item_a_flow_limit_holds(f: &dyn Factory) {
    let e = env(f).await;
    e.q.back_off("h", Duration::from_secs(10)).await.unwrap();
    let h1 = e.q.add(in_flow("h1", "h")).await.unwrap().id;
    let h2 = e.q.add(in_flow("h2", "h")).await.unwrap().id;
    assert!(claim(&e.q, 10).await.is_empty());
    assert_eq!(e.q.stats().await.unwrap().limited, 2);
    assert!(e.q.remove(h1).await.unwrap());
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.limited), (1, 1));
    e.clock.advance(Duration::from_secs(10));
    let got = e.q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.id, h2);
}

/// back_off is one operation: a shorter back-off leaves a longer one in
/// force, a longer one extends it, and the default flow is refused.
pub async fn back_off_keeps_the_longer_hold(f: &dyn Factory) {
    let e = env(f).await;
    let until = |q: Vec<crate::limit::FlowLimits>| q.first().and_then(|l| l.backoff_until_ms);
    e.q.back_off("a", Duration::from_secs(10)).await.unwrap();
    assert_eq!(until(e.q.flow_limits().await.unwrap()), Some(T0 + 10_000));
    e.q.back_off("a", Duration::from_secs(1)).await.unwrap();
    assert_eq!(until(e.q.flow_limits().await.unwrap()), Some(T0 + 10_000));
    e.clock.advance(Duration::from_secs(5));
    e.q.back_off("a", Duration::from_secs(20)).await.unwrap();
    assert_eq!(until(e.q.flow_limits().await.unwrap()), Some(T0 + 25_000));
    invalid(e.q.back_off("", Duration::from_secs(1)).await);
}
