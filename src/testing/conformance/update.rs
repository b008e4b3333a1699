//! Conformance cases of SPEC 3, Updating: `update` changes a waiting item's
//! tier (re-ranked where it waits, arrival and position kept), not-before
//! time (delayed, or due at the due lane's tail) and payload, atomically;
//! it refuses an item that does not wait and changes nothing then.
//!
//! The items whose order is compared share one flow, so that a partitioned
//! queue keeps them in one partition.

use std::time::Duration;

use super::{Factory, T0, claim, claim_one, env, in_flow, invalid, payloads};
use crate::item::ItemUpdate;
use crate::limit::FlowLimit;
use crate::queue::WorkQueue;

/// A new tier re-ranks a waiting item in place: it keeps its arrival (an
/// older item of tier 0 stays ahead of one raised a tier that arrived an
/// aging step later) and its position (raised and lowered again, it is
/// back where it was, not at the tail); a new payload is what the next
/// claim gets. An unknown id answers false; an empty update is refused.
pub async fn update_reranks_a_waiting_item_in_place(f: &dyn Factory) {
    let e = env(f).await;
    let a = e.q.add(in_flow("a", "u")).await.unwrap().id;
    let b = e.q.add(in_flow("b", "u")).await.unwrap().id;
    let c = e.q.add(in_flow("c", "u")).await.unwrap().id;
    // b up a tier, then back: the order is a, b, c again.
    assert!(e.q.update(b, ItemUpdate::new().priority(1)).await.unwrap());
    assert_eq!(
        e.q.find(b).await.unwrap().expect("b waits").item.priority,
        1
    );
    assert!(e.q.update(b, ItemUpdate::new().priority(0)).await.unwrap());
    // c up a tier: it overtakes a and b, which arrived with it.
    assert!(e.q.update(c, ItemUpdate::new().priority(1)).await.unwrap());
    // d arrives two aging steps later, raised one tier: its rank is still
    // behind a's and b's (arrival kept: T0 + 120 s - 60 s > T0).
    e.clock.advance(Duration::from_secs(120));
    let d = e.q.add(in_flow("d", "u")).await.unwrap().id;
    assert!(
        e.q.update(d, ItemUpdate::new().priority(1).payload(b"d2".to_vec()))
            .await
            .unwrap()
    );
    assert!(
        !e.q.update(999, ItemUpdate::new().priority(1))
            .await
            .unwrap()
    );
    invalid(e.q.update(a, ItemUpdate::new()).await);
    let got = claim(&e.q, 4).await;
    assert_eq!(payloads(&got), vec!["c", "a", "b", "d2"]);
    assert_eq!((got[0].item.id, got[0].item.priority), (c, 1));
    assert_eq!(got[3].item.id, d);
    assert_eq!(got[1].item.id, a);
}

/// A new not-before time moves an item: after now it waits in delayed
/// (out of the backlog, `next_due` names it); at or before now it is due,
/// claimed ahead of the backlog at the due lane's tail. A delayed item
/// given a new tier keeps it when its timer fires.
pub async fn update_moves_an_item_by_its_not_before(f: &dyn Factory) {
    let e = env(f).await;
    let w = e.q.add(in_flow("w", "u")).await.unwrap().id;
    let x = e.q.add(in_flow("x", "u")).await.unwrap().id;
    let later =
        e.q.add_delayed(in_flow("later", "u"), T0 + 600_000)
            .await
            .unwrap()
            .id;
    // w leaves the backlog for delayed.
    assert!(
        e.q.update(w, ItemUpdate::new().not_before_ms(T0 + 60_000))
            .await
            .unwrap()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.delayed), (1, 2));
    assert_eq!(e.q.next_due().await.unwrap(), Some(T0 + 60_000));
    let found = e.q.find(w).await.unwrap().expect("w waits");
    assert_eq!(found.item.not_before_ms, Some(T0 + 60_000));
    // `later` becomes due now, ahead of x in the backlog, with its new tier.
    assert!(
        e.q.update(later, ItemUpdate::new().not_before_ms(T0).priority(3))
            .await
            .unwrap()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.due, s.delayed), (1, 1));
    let first = claim_one(&e.q).await;
    assert_eq!(
        (first.item.id, first.item.priority, first.item.not_before_ms),
        (later, 3, Some(T0))
    );
    // w, raised while delayed, fires with its tier and runs before x.
    assert!(e.q.update(w, ItemUpdate::new().priority(2)).await.unwrap());
    assert_eq!(claim(&e.q, 1).await[0].item.id, x);
    e.clock.advance(Duration::from_secs(60));
    let fired = claim_one(&e.q).await;
    assert_eq!((fired.item.id, fired.item.priority), (w, 2));
    assert_eq!(e.q.next_due().await.unwrap(), None);
}

/// An item that does not wait is refused with InvalidInput and keeps
/// everything: a pending one (its lease still acks), a dead letter, a
/// finished one whose outcome is kept (acked, dead-lettered and purged,
/// cancelled). A parked item takes a tier and a payload but no
/// not-before time. An item a flow limit holds is re-ranked among its
/// flow's held items.
pub async fn update_refuses_an_item_that_does_not_wait(f: &dyn Factory) {
    let e = env(f).await;
    let p = e.q.add(in_flow("p", "u")).await.unwrap().id;
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, p);
    invalid(e.q.update(p, ItemUpdate::new().priority(4)).await);
    invalid(e.q.update(p, ItemUpdate::new().not_before_ms(T0)).await);
    e.q.ack(c.receipt).await.unwrap();
    // Acked, its outcome kept: finished.
    invalid(e.q.update(p, ItemUpdate::new().priority(4)).await);
    let d = e.q.add(in_flow("d", "u")).await.unwrap().id;
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "bad").await.unwrap();
    invalid(
        e.q.update(d, ItemUpdate::new().payload(b"again".to_vec()))
            .await,
    );
    assert_eq!(e.q.dead_letters(5).await.unwrap()[0].item.payload, b"d");
    // Purged, its dead-lettered outcome kept: finished too.
    assert_eq!(e.q.purge_dead_letters().await.unwrap(), 1);
    invalid(e.q.update(d, ItemUpdate::new().priority(1)).await);
    // Cancelled while it waited: finished, and it stays so.
    let x = e.q.add(in_flow("x", "u")).await.unwrap().id;
    assert_eq!(
        e.q.cancel(x).await.unwrap(),
        crate::item::CancelOutcome::Ended
    );
    invalid(e.q.update(x, ItemUpdate::new().priority(1)).await);
    assert!(
        e.q.outcome(x)
            .await
            .unwrap()
            .is_some_and(|o| o.is_cancelled())
    );

    // Parked: a tier and a payload, no timer.
    e.q.pause("p").await.unwrap();
    let k = e.q.add(in_flow("k", "p")).await.unwrap().id;
    assert!(claim(&e.q, 1).await.is_empty());
    invalid(e.q.update(k, ItemUpdate::new().not_before_ms(T0 + 1)).await);
    assert!(
        e.q.update(k, ItemUpdate::new().priority(5).payload(b"k2".to_vec()))
            .await
            .unwrap()
    );
    assert_eq!(e.q.parked("p").await.unwrap(), 1);
    let stepped = e.q.step("p").await.unwrap().expect("k steps");
    assert_eq!(
        (
            stepped.item.id,
            stepped.item.priority,
            &stepped.item.payload[..]
        ),
        (k, 5, &b"k2"[..])
    );
    e.q.ack(stepped.receipt).await.unwrap();

    // Held by a back-off: re-ranked among the flow's held items.
    e.q.back_off("h", Duration::from_secs(30)).await.unwrap();
    let h1 = e.q.add(in_flow("h1", "h")).await.unwrap().id;
    let h2 = e.q.add(in_flow("h2", "h")).await.unwrap().id;
    assert!(e.q.update(h2, ItemUpdate::new().priority(1)).await.unwrap());
    assert_eq!(e.q.stats().await.unwrap().limited, 2);
    assert!(claim(&e.q, 2).await.is_empty());
    e.q.set_flow_limit("h", FlowLimit::BackOffUntil(None))
        .await
        .unwrap();
    let got = claim(&e.q, 2).await;
    assert_eq!(
        got.iter().map(|c| c.item.id).collect::<Vec<_>>(),
        vec![h2, h1]
    );
    // A held item given a timer leaves its flow's held lane.
    e.q.back_off("h", Duration::from_secs(30)).await.unwrap();
    let h3 = e.q.add(in_flow("h3", "h")).await.unwrap().id;
    assert!(
        e.q.update(h3, ItemUpdate::new().not_before_ms(T0 + 90_000))
            .await
            .unwrap()
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.limited, s.delayed), (0, 1));
}
