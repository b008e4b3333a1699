//! Conformance cases of SPEC 3, History: acked and cancelled items are
//! kept, with their result and times, by each state's retention (a count
//! and an age), listed newest first, found by id and counted by `stats`.
//!
//! The items whose order is compared share one flow, so that a partitioned
//! queue keeps them in one partition.

use std::time::Duration;

use super::{Factory, T0, claim, claim_one, env, env_with, in_flow};
use crate::browse::{ItemState, ListQuery, ListedItem};
use crate::config::{Config, Retention};
use crate::queue::{BoxQueue, WorkQueue};

/// Every item of `state` read page by page (pages of one), newest first.
async fn finished(q: &BoxQueue, state: ItemState) -> Vec<ListedItem> {
    let mut out = Vec::new();
    let mut offset = 0;
    for _ in 0..100 {
        let page = q
            .list(ListQuery::new(state).offset(offset).limit(1))
            .await
            .unwrap();
        out.extend(page.items);
        match page.next_offset {
            Some(n) => offset = n,
            None => return out,
        }
    }
    panic!("list {state:?} did not end");
}

fn ids(items: &[ListedItem]) -> Vec<u64> {
    items.iter().map(|l| l.item.id).collect()
}

/// An acked item is kept whole (flow, payload, tier, deliveries, added
/// time) with its result, the claim of its last delivery and when it
/// finished; `list` shows the newest first, `find` names it `completed`,
/// `stats` counts it. A plain ack keeps an empty result; a retried item
/// shows its deliveries and its last claim.
pub async fn acked_items_are_kept_with_their_result_and_times(f: &dyn Factory) {
    let e = env(f).await;
    let a = e.q.add(in_flow("a", "h").priority(2)).await.unwrap().id;
    let b = e.q.add(in_flow("b", "h")).await.unwrap().id;
    e.clock.advance(Duration::from_millis(10));
    let ca = claim_one(&e.q).await;
    assert_eq!(ca.item.id, a);
    e.clock.advance(Duration::from_millis(10));
    e.q.ack_with_result(ca.receipt, b"ra".to_vec())
        .await
        .unwrap();
    // b fails once, runs again and is acked plainly.
    let cb = claim_one(&e.q).await;
    e.q.retry(cb.receipt, T0 + 30).await.unwrap();
    e.clock.advance(Duration::from_millis(20));
    let cb = claim_one(&e.q).await;
    assert_eq!(cb.item.id, b);
    e.clock.advance(Duration::from_millis(5));
    e.q.ack(cb.receipt).await.unwrap();

    let done = finished(&e.q, ItemState::Completed).await;
    assert_eq!(ids(&done), vec![b, a], "newest first");
    let (lb, la) = (&done[0], &done[1]);
    assert_eq!(la.state, ItemState::Completed);
    assert_eq!(
        (
            &la.item.payload[..],
            la.item.flow.as_str(),
            la.item.priority
        ),
        (&b"a"[..], "h", 2)
    );
    assert_eq!(la.item.enqueued_at_ms, T0);
    assert_eq!(la.item.deliveries, 1);
    assert_eq!(la.result.as_deref(), Some(&b"ra"[..]));
    assert_eq!(la.claimed_at_ms, Some(T0 + 10));
    assert_eq!(la.finished_at_ms, Some(T0 + 20));
    assert_eq!(lb.item.deliveries, 2);
    assert_eq!(lb.result.as_deref(), Some(&b""[..]));
    assert_eq!(lb.claimed_at_ms, Some(T0 + 40));
    assert_eq!(lb.finished_at_ms, Some(T0 + 45));
    assert_eq!(lb.reason, None);

    let found = e.q.find(a).await.unwrap().expect("a is kept");
    assert_eq!(&found, la);
    let s = e.q.stats().await.unwrap();
    assert_eq!(
        (s.completed, s.cancelled, s.backlog, s.pending),
        (2, 0, 0, 0)
    );
    // A search reads the kept payloads too.
    let page =
        e.q.list(ListQuery::new(ItemState::Completed).contains(b"b".to_vec()))
            .await
            .unwrap();
    assert_eq!(ids(&page.items), vec![b]);
    assert!(finished(&e.q, ItemState::Cancelled).await.is_empty());
}

/// A cancelled item is kept: one cancelled while it waited with no claim
/// time, one marked while it ran and ended by its holder's next call with
/// the claim of that delivery. Neither has a result.
pub async fn cancelled_items_are_kept_waiting_or_running(f: &dyn Factory) {
    let e = env(f).await;
    let w = e.q.add(in_flow("w", "h")).await.unwrap().id;
    let r = e.q.add(in_flow("r", "h")).await.unwrap().id;
    let x = e.q.add(in_flow("x", "h")).await.unwrap().id;
    e.clock.advance(Duration::from_millis(10));
    assert_eq!(
        e.q.cancel(w).await.unwrap(),
        crate::item::CancelOutcome::Ended
    );
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, r);
    e.clock.advance(Duration::from_millis(10));
    assert_eq!(
        e.q.cancel(r).await.unwrap(),
        crate::item::CancelOutcome::Marked
    );
    // Still pending while its holder has not called.
    assert_eq!(
        e.q.find(r).await.unwrap().map(|l| l.state),
        Some(ItemState::Pending)
    );
    e.clock.advance(Duration::from_millis(10));
    assert!(e.q.touch(vec![c.receipt]).await.is_err());

    let gone = finished(&e.q, ItemState::Cancelled).await;
    assert_eq!(ids(&gone), vec![r, w]);
    assert_eq!(gone[0].claimed_at_ms, Some(T0 + 10));
    assert_eq!(gone[0].finished_at_ms, Some(T0 + 30));
    assert_eq!(gone[0].item.deliveries, 1);
    assert_eq!(gone[1].claimed_at_ms, None);
    assert_eq!(gone[1].finished_at_ms, Some(T0 + 10));
    assert!(
        gone.iter()
            .all(|l| l.result.is_none() && l.state == ItemState::Cancelled)
    );
    assert_eq!(
        e.q.find(w).await.unwrap().map(|l| l.state),
        Some(ItemState::Cancelled)
    );
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled, s.backlog), (0, 2, 1));
    // The item left waits on, untouched.
    assert_eq!(claim(&e.q, 2).await.len(), 1);
    let _ = x;
}

/// Each state keeps at most its retention's count (the newest; one
/// `ack_batch` larger than the count keeps its highest ids) and nothing
/// older than its age: `list`, `find` and `stats` agree at every step,
/// and the outcomes (kept by `result_ttl`) are not touched.
pub async fn history_keeps_the_newest_count_within_the_age(f: &dyn Factory) {
    let config = Config::default()
        .completed_retention(Retention::new(2, Duration::from_secs(10)))
        .cancelled_retention(Retention::new(1, Duration::from_secs(60)));
    let e = env_with(f, config).await;
    let mut added = Vec::new();
    for p in ["a", "b", "c", "d"] {
        added.push(e.q.add(in_flow(p, "h")).await.unwrap().id);
    }
    let got = claim(&e.q, 3).await;
    let n =
        e.q.ack_batch(got.iter().map(|c| c.receipt).collect())
            .await
            .unwrap();
    assert_eq!(n, 3);
    assert_eq!(
        ids(&finished(&e.q, ItemState::Completed).await),
        vec![added[2], added[1]]
    );
    assert_eq!(e.q.find(added[0]).await.unwrap(), None);
    assert!(e.q.outcome(added[0]).await.unwrap().is_some());
    assert_eq!(e.q.stats().await.unwrap().completed, 2);

    e.clock.advance(Duration::from_secs(5));
    let last = claim_one(&e.q).await;
    e.q.ack(last.receipt).await.unwrap();
    assert_eq!(
        ids(&finished(&e.q, ItemState::Completed).await),
        vec![added[3], added[2]]
    );
    // Ten seconds after the batch, its items are past the age.
    e.clock.advance(Duration::from_secs(5));
    assert_eq!(
        ids(&finished(&e.q, ItemState::Completed).await),
        vec![added[3]]
    );
    assert_eq!(e.q.find(added[2]).await.unwrap(), None);
    assert_eq!(e.q.stats().await.unwrap().completed, 1);
    e.clock.advance(Duration::from_secs(5));
    assert!(finished(&e.q, ItemState::Completed).await.is_empty());
    assert_eq!(e.q.stats().await.unwrap().completed, 0);

    // The cancelled state keeps one.
    let c1 = e.q.add(in_flow("c1", "h")).await.unwrap().id;
    let c2 = e.q.add(in_flow("c2", "h")).await.unwrap().id;
    e.q.cancel(c1).await.unwrap();
    e.clock.advance(Duration::from_millis(1));
    e.q.cancel(c2).await.unwrap();
    assert_eq!(ids(&finished(&e.q, ItemState::Cancelled).await), vec![c2]);
    assert_eq!(e.q.find(c1).await.unwrap(), None);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (0, 1));
}

/// A retention of none keeps no finished item: nothing is listed or
/// found, `stats` counts none, and the outcome is still there.
pub async fn no_retention_keeps_no_finished_item(f: &dyn Factory) {
    let config = Config::default()
        .completed_retention(Retention::none())
        .cancelled_retention(Retention::new(5, Duration::ZERO));
    let e = env_with(f, config).await;
    let a = e.q.add(in_flow("a", "h")).await.unwrap().id;
    let b = e.q.add(in_flow("b", "h")).await.unwrap().id;
    let c = claim_one(&e.q).await;
    e.q.ack(c.receipt).await.unwrap();
    e.q.cancel(b).await.unwrap();
    assert!(finished(&e.q, ItemState::Completed).await.is_empty());
    assert!(finished(&e.q, ItemState::Cancelled).await.is_empty());
    assert_eq!(e.q.find(a).await.unwrap(), None);
    assert_eq!(e.q.find(b).await.unwrap(), None);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (0, 0));
    assert!(e.q.outcome(a).await.unwrap().is_some());
    assert!(e.q.outcome(b).await.unwrap().is_some());
}

/// Many finishes past the count (by `ack`, `ack_batch` and `cancel`):
/// reads show exactly the newest `count` of each state at every step,
/// whatever the store holds between its trims.
pub async fn history_shows_the_newest_count_through_many_finishes(f: &dyn Factory) {
    let config = Config::default()
        .completed_retention(Retention::new(3, Duration::from_secs(3600)))
        .cancelled_retention(Retention::new(2, Duration::from_secs(3600)));
    let e = env_with(f, config).await;
    let mut acked = Vec::new();
    let mut cancelled = Vec::new();
    for round in 0..12u64 {
        let mut added = Vec::new();
        for k in 0..6 {
            added.push(
                e.q.add(in_flow(&format!("i{round}-{k}"), "h"))
                    .await
                    .unwrap()
                    .id,
            );
        }
        let got = claim(&e.q, 4).await;
        e.q.ack(got[0].receipt).await.unwrap();
        e.q.ack_batch(got[1..].iter().map(|c| c.receipt).collect())
            .await
            .unwrap();
        acked.extend(got.iter().map(|c| c.item.id));
        for id in &added[4..] {
            e.q.cancel(*id).await.unwrap();
            cancelled.push(*id);
        }
        e.clock.advance(Duration::from_millis(1));
        let mut newest: Vec<u64> = acked.iter().rev().take(3).copied().collect();
        // One batch finishes at one time: by id, highest first.
        newest.sort_unstable_by(|a, b| b.cmp(a));
        assert_eq!(ids(&finished(&e.q, ItemState::Completed).await), newest);
        let newest: Vec<u64> = cancelled.iter().rev().take(2).copied().collect();
        assert_eq!(ids(&finished(&e.q, ItemState::Cancelled).await), newest);
        let s = e.q.stats().await.unwrap();
        assert_eq!((s.completed, s.cancelled), (3, 2));
        assert_eq!(e.q.find(acked[0]).await.unwrap(), None);
    }
}
