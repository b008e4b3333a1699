//! Conformance cases of SPEC 3, Cancelling: `cancel` ends a waiting item at
//! once, marks a pending one for its holder (whose next call ends it, or a
//! reclaim of its stale claim), and `wait_cancelled` tells the holder.

use std::time::Duration;

use super::{Factory, T0, add, claim, claim_one, env, in_flow, invalid, item, lease_lost};
use crate::error::Error;
use crate::item::{CancelOutcome, Receipt};
use crate::outcome::OutcomeKind;
use crate::queue::{BoxQueue, WorkQueue};

/// The call was answered `Cancelled` naming `r`.
fn cancelled<T: std::fmt::Debug>(got: Result<T, Error>, r: Receipt) {
    match got {
        Err(Error::Cancelled {
            id,
            delivery,
            lease,
        }) if (id, delivery, lease) == (r.id, r.delivery, r.lease) => {}
        other => panic!("expected Cancelled naming {r:?}, got {other:?}"),
    }
}

/// Item `id` ended as cancelled: its outcome says so, and the queue holds
/// it only as a finished item (SPEC 3, History).
async fn ended_cancelled(q: &BoxQueue, id: u64) {
    let o = q.outcome(id).await.unwrap().expect("a cancelled outcome");
    assert_eq!(o.kind, OutcomeKind::Cancelled, "item {id}");
    assert!(o.is_cancelled());
    assert_eq!(
        q.find(id).await.unwrap().map(|l| l.state),
        Some(crate::browse::ItemState::Cancelled),
        "item {id} is finished"
    );
}

/// cancel ends an item that waits (backlog, due lane, delayed, parked,
/// held by a flow limit) at once, with a cancelled outcome that wakes a
/// waiter; again, or for an unknown id, it answers NotFound; a dead letter
/// is refused and stays.
pub async fn cancel_ends_a_waiting_item_at_once(f: &dyn Factory) {
    let e = env(f).await;
    let dead = add(&e.q, "dead").await;
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "bad").await.unwrap();
    let parked = e.q.add(in_flow("parked", "p")).await.unwrap().id;
    e.q.pause("p").await.unwrap();
    assert!(claim(&e.q, 1).await.is_empty());
    e.q.back_off("h", Duration::from_secs(60)).await.unwrap();
    let held = e.q.add(in_flow("held", "h")).await.unwrap().id;
    let waiting = add(&e.q, "waiting").await;
    let delayed =
        e.q.add_delayed(item("delayed"), T0 + 60_000)
            .await
            .unwrap()
            .id;
    let due = e.q.add_delayed(item("due"), T0 - 1).await.unwrap().id;
    assert_eq!(e.q.promote_due().await.unwrap(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.limited, s.parked, s.delayed, s.due), (1, 1, 1, 1));

    // A waiter on the outcome wakes with the cancel.
    let q = e.q.clone();
    let waiter =
        tokio::spawn(async move { q.wait_outcome(waiting, Duration::from_secs(10)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    for id in [waiting, delayed, due, parked, held] {
        assert_eq!(
            e.q.cancel(id).await.unwrap(),
            CancelOutcome::Ended,
            "cancel item {id}"
        );
        ended_cancelled(&e.q, id).await;
        assert_eq!(e.q.cancel(id).await.unwrap(), CancelOutcome::NotFound);
    }
    let woke = waiter.await.unwrap().unwrap().expect("the waiter woke");
    assert_eq!((woke.kind, woke.at_ms), (OutcomeKind::Cancelled, T0));
    assert_eq!(e.q.cancel(999).await.unwrap(), CancelOutcome::NotFound);
    invalid(e.q.cancel(dead).await);
    assert_eq!(e.q.dead_letters(10).await.unwrap().len(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.due, s.delayed, s.parked, s.limited, s.pending),
        (0, 0, 0, 0, 0, 0)
    );
    assert_eq!(e.q.parked("p").await.unwrap(), 0);
    // The flows keep their pause and their back-off.
    assert_eq!(e.q.paused_flows().await.unwrap(), vec!["p".to_string()]);
    assert_eq!(e.q.flow_limits().await.unwrap().len(), 1);
}

/// A pending item is marked, not ended: it stays pending (and cannot be
/// removed) until its holder's next call, which ends it as cancelled and
/// answers Cancelled; later calls with the receipt are LeaseLost. Each
/// call a holder makes does this; ack_batch ends marked items without
/// counting them.
pub async fn cancel_marks_a_pending_item_for_its_holder(f: &dyn Factory) {
    let e = env(f).await;
    for i in 0..10 {
        e.q.add(in_flow(&format!("i{i}"), "f")).await.unwrap();
    }
    let got = claim(&e.q, 10).await;
    assert_eq!(got.len(), 10);
    for c in &got {
        assert_eq!(e.q.cancel(c.item.id).await.unwrap(), CancelOutcome::Marked);
    }
    // Again: still marked, nothing changes. `find` and `list` show the
    // mark (SPEC 12.1).
    assert_eq!(
        e.q.cancel(got[0].item.id).await.unwrap(),
        CancelOutcome::Marked
    );
    let found = e.q.find(got[0].item.id).await.unwrap().unwrap();
    assert!(found.cancelling, "{found:?}");
    let listed =
        e.q.list(crate::browse::ListQuery::new(crate::browse::ItemState::Pending).limit(20))
            .await
            .unwrap()
            .items;
    assert_eq!(listed.len(), 10);
    assert!(listed.iter().all(|l| l.cancelling), "{listed:?}");
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.pending, 10);
    invalid(e.q.remove(got[0].item.id).await);
    let r: Vec<Receipt> = got.iter().map(|c| c.receipt).collect();
    cancelled(e.q.ack(r[0]).await, r[0]);
    cancelled(e.q.ack_with_result(r[1], b"x".to_vec()).await, r[1]);
    cancelled(e.q.touch(vec![r[2]]).await, r[2]);
    cancelled(e.q.set_progress(r[3], b"half".to_vec()).await, r[3]);
    cancelled(e.q.send_chunk(r[4], b"c".to_vec()).await, r[4]);
    cancelled(e.q.retry(r[5], T0 + 1_000).await, r[5]);
    cancelled(e.q.release(r[6], T0).await, r[6]);
    cancelled(e.q.dead_letter(r[7], "no").await, r[7]);
    cancelled(e.q.park(r[8]).await, r[8]);
    assert_eq!(e.q.ack_batch(vec![r[9]]).await.unwrap(), 0);
    for c in &got {
        ended_cancelled(&e.q, c.item.id).await;
    }
    // Ended: a second call is LeaseLost, and nothing is pending or dead.
    lease_lost(e.q.ack(r[0]).await, r[0]);
    lease_lost(e.q.touch(vec![r[2]]).await, r[2]);
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (s.pending, s.delayed, s.dead_letters, s.parked, s.backlog),
        (0, 0, 0, 0, 0)
    );
    assert!(claim(&e.q, 10).await.is_empty());
}

/// A touch of several receipts stops at the first that is not current:
/// a lost one answers LeaseLost, a marked one ends its item and answers
/// Cancelled; no lease is extended. The others stay pending, unmarked.
pub async fn touch_stops_at_the_first_cancelled_receipt(f: &dyn Factory) {
    let e = env(f).await;
    // One flow: a partitioned queue keeps both in one partition, where a
    // touch is all or nothing.
    e.q.add(in_flow("a", "t")).await.unwrap();
    e.q.add(in_flow("b", "t")).await.unwrap();
    let got = claim(&e.q, 2).await;
    let (a, b) = (got[0].receipt, got[1].receipt);
    assert_eq!(e.q.cancel(b.id).await.unwrap(), CancelOutcome::Marked);
    e.clock.advance(Duration::from_secs(5));
    cancelled(e.q.touch(vec![a, b]).await, b);
    ended_cancelled(&e.q, b.id).await;
    // `a` was not touched: its last touch is still its claim; unmarked.
    let found = e.q.find(a.id).await.unwrap().expect("a is pending");
    assert_eq!(found.last_touch_ms, Some(T0));
    assert!(!found.cancelling);
    e.q.touch(vec![a]).await.unwrap();
    e.q.ack(a).await.unwrap();
    assert!(
        e.q.wait_cancelled(vec![a.id], Duration::ZERO)
            .await
            .unwrap()
            .is_empty()
    );
}

/// A marked item whose holder went silent ends at the reclaim of its
/// stale claim (reported in `cancelled`), never handed out again.
pub async fn a_stale_cancelled_claim_ends_at_reclaim(f: &dyn Factory) {
    let e = env(f).await;
    let x = add(&e.q, "x").await;
    let y = add(&e.q, "y").await;
    let got = claim(&e.q, 2).await;
    assert_eq!(e.q.cancel(x).await.unwrap(), CancelOutcome::Marked);
    e.clock.advance(Duration::from_secs(60));
    let r = e.q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert_eq!(r.cancelled, vec![got[0].receipt]);
    assert_eq!(r.claimed.len(), 1);
    assert_eq!(r.claimed[0].item.id, y);
    assert!(r.dead_lettered.is_empty());
    ended_cancelled(&e.q, x).await;
    lease_lost(e.q.ack(got[0].receipt).await, got[0].receipt);
    e.q.ack(r.claimed[0].receipt).await.unwrap();
    assert_eq!(e.q.stats().await.unwrap().pending, 0);
}

/// wait_cancelled answers the marked ids among those asked at once, and
/// otherwise waits and wakes when one of them is marked (not when another
/// item is); without a mark it answers empty when its wait runs out.
pub async fn wait_cancelled_wakes_on_a_mark(f: &dyn Factory) {
    let e = env(f).await;
    let a = add(&e.q, "a").await;
    let b = add(&e.q, "b").await;
    let c = add(&e.q, "c").await;
    let got = claim(&e.q, 3).await;
    assert_eq!(got.len(), 3);
    assert!(
        e.q.wait_cancelled(vec![a, b], Duration::from_millis(20))
            .await
            .unwrap()
            .is_empty()
    );
    let q = e.q.clone();
    let waiter =
        tokio::spawn(async move { q.wait_cancelled(vec![a, b], Duration::from_secs(20)).await });
    tokio::time::sleep(Duration::from_millis(50)).await;
    // Another item's mark does not answer this wait.
    assert_eq!(e.q.cancel(c).await.unwrap(), CancelOutcome::Marked);
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert!(!waiter.is_finished());
    assert_eq!(e.q.cancel(b).await.unwrap(), CancelOutcome::Marked);
    assert_eq!(waiter.await.unwrap().unwrap(), vec![b]);
    assert_eq!(
        e.q.wait_cancelled(vec![c, a, b, 999], Duration::ZERO)
            .await
            .unwrap(),
        vec![b, c]
    );
    // Ended items are no longer marked: they are not pending.
    cancelled(e.q.ack(got[1].receipt).await, got[1].receipt);
    assert_eq!(
        e.q.wait_cancelled(vec![a, b, c], Duration::ZERO)
            .await
            .unwrap(),
        vec![c]
    );
}
