//! Conformance cases of SPEC section 4, delivery, and of `close` (SPEC 3, Closing).

use std::time::Duration;

use super::{Factory, NOW, T0, add, claim, claim_one, env, ids, in_flow, item, payloads};
use crate::error::Error;
use crate::item::ClaimFrom;
use crate::queue::WorkQueue;

/// An item comes back after a retry and after a reclaim, never otherwise.
pub async fn item_is_handed_out_again_only_after_retry_or_reclaim(f: &dyn Factory) {
    let e = env(f).await;
    let id = add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    assert!(claim(&e.q, 5).await.is_empty());
    e.clock.advance(Duration::from_secs(3600));
    assert!(
        claim(&e.q, 5).await.is_empty(),
        "a stale claim is not handed out by claim"
    );
    e.q.retry(c.receipt, T0).await.unwrap();
    let c2 = claim_one(&e.q).await;
    assert_eq!(c2.item.id, id);
    let r = e.q.reclaim(Duration::ZERO, 5).await.unwrap().claimed;
    assert_eq!(ids(&r), vec![id]);
    e.q.ack(r[0].receipt).await.unwrap();
    assert!(claim(&e.q, 5).await.is_empty());
}

/// The id is the same through delay, claim, retry, park, resume,
/// dead-lettering and redrive.
pub async fn id_is_stable_through_every_move(f: &dyn Factory) {
    let e = env(f).await;
    let id = e.q.add_delayed(in_flow("x", "f"), T0).await.unwrap().id;
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, id);
    e.q.park(c.receipt).await.unwrap();
    e.q.resume("f").await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.retry(c.receipt, T0).await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.dead_letter(c.receipt, "x").await.unwrap();
    e.q.redrive(id).await.unwrap();
    let c = claim_one(&e.q).await;
    assert_eq!(c.item.id, id);
    assert_eq!(c.item.enqueued_at_ms, T0);
}

/// A claim may wait "forever" (`Duration::MAX`) without overflowing.
pub async fn claim_with_an_endless_wait_does_not_overflow(f: &dyn Factory) {
    let e = env(f).await;
    let waited = tokio::time::timeout(
        Duration::from_millis(100),
        e.q.claim(1, Duration::MAX, ClaimFrom::All),
    )
    .await;
    assert!(
        waited.is_err(),
        "an empty queue handed something out: {waited:?}"
    );
    add(&e.q, "x").await;
    let c = e.q.claim(1, Duration::MAX, ClaimFrom::All).await.unwrap();
    assert_eq!(payloads(&c), vec!["x"]);
}

/// After close(), every call on that handle is `Closed` (SPEC section 3, Closing).
pub async fn calls_after_close_are_closed(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    e.q.close().await.unwrap();
    for r in [
        e.q.add(item("late")).await.map(|_| ()),
        e.q.stats().await.map(|_| ()),
        e.q.claim(1, NOW, ClaimFrom::All).await.map(|_| ()),
        e.q.wait_outcome(1, NOW).await.map(|_| ()),
        e.q.wait_chunks(1, 0, NOW).await.map(|_| ()),
        e.q.now_ms().await.map(|_| ()),
    ] {
        assert!(matches!(r, Err(Error::Closed)), "after close: {r:?}");
    }
}

/// close() on one clone ends a claim blocked on another clone with `Closed`
/// at once, not when its wait runs out (SPEC section 3, Closing).
pub async fn close_wakes_claims_blocked_on_other_clones(f: &dyn Factory) {
    let e = env(f).await;
    let blocked = tokio::spawn({
        let q = e.q.clone();
        async move { q.claim(1, Duration::from_secs(60), ClaimFrom::All).await }
    });
    // Let the claim find nothing and start waiting.
    tokio::time::sleep(Duration::from_millis(200)).await;
    e.q.close().await.unwrap();
    let ended = tokio::time::timeout(Duration::from_secs(10), blocked)
        .await
        .expect("a claim blocked across close() still waits after 10 s")
        .unwrap();
    assert!(
        matches!(ended, Err(Error::Closed)),
        "blocked claim: {ended:?}"
    );
}
