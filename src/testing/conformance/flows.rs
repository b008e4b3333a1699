//! Conformance cases of SPEC 3, flows: pause, resume, park, step and clear.

use super::{Factory, T0, add, claim, claim_one, env, in_flow, invalid, lease_lost, payloads};
use crate::item::{Lane, NewItem};
use crate::queue::WorkQueue;

/// resume moves parked items back to the backlog tail, oldest first.
pub async fn resume_requeues_parked_oldest_first(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    for i in 0..3 {
        e.q.add(in_flow(&format!("p{i}"), "f")).await.unwrap();
    }
    assert!(claim(&e.q, 5).await.is_empty());
    add(&e.q, "other").await;
    assert_eq!(e.q.resume("f").await.unwrap(), 3);
    assert_eq!(e.q.parked("f").await.unwrap(), 0);
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let c = claim(&e.q, 10).await;
    assert_eq!(payloads(&c), vec!["other", "p0", "p1", "p2"]);
    assert_eq!(e.q.resume("f").await.unwrap(), 0);
}

/// park moves a pending item to its flow's parked list.
pub async fn park_moves_a_pending_item_to_parked(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(in_flow("x", "f")).await.unwrap();
    let c = claim_one(&e.q).await;
    e.q.park(c.receipt).await.unwrap();
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.parked), (0, 1));
    lease_lost(e.q.ack(c.receipt).await, c.receipt);
    assert_eq!(e.q.resume("f").await.unwrap(), 1);
    let again = claim_one(&e.q).await;
    assert_eq!(again.item.deliveries, 2);
}

/// Flow operations need a flow name; an item of the default flow cannot be
/// parked.
pub async fn flow_operations_refuse_the_default_flow(f: &dyn Factory) {
    let e = env(f).await;
    add(&e.q, "x").await;
    let c = claim_one(&e.q).await;
    invalid(e.q.park(c.receipt).await);
    invalid(e.q.pause("").await);
    invalid(e.q.resume("").await);
    invalid(e.q.step("").await);
    invalid(e.q.clear_flow("").await);
    e.q.ack(c.receipt).await.unwrap();
}

/// A flow name with control characters or over `MAX_FLOW_NAME_BYTES` is
/// refused by adds and flow operations alike, and nothing changes; a name
/// of exactly the limit is taken (SPEC section 5).
pub async fn malformed_flow_names_are_invalid_input(f: &dyn Factory) {
    let e = env(f).await;
    let long = "f".repeat(crate::MAX_FLOW_NAME_BYTES + 1);
    for bad in ["a\tb", "a\nb", "\u{7}", long.as_str()] {
        invalid(e.q.add(in_flow("x", bad)).await);
        invalid(
            e.q.add_batch(vec![NewItem::new(b"ok".to_vec()), in_flow("x", bad)])
                .await,
        );
        invalid(e.q.add_delayed(in_flow("x", bad), T0 + 1000).await);
        invalid(e.q.pause(bad).await);
        invalid(e.q.resume(bad).await);
        invalid(e.q.step(bad).await);
        invalid(e.q.clear_flow(bad).await);
    }
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.delayed), (0, 0), "nothing was added");
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let longest = "f".repeat(crate::MAX_FLOW_NAME_BYTES);
    e.q.add(in_flow("x", &longest)).await.unwrap();
    e.q.pause(&longest).await.unwrap();
    assert_eq!(e.q.paused_flows().await.unwrap(), vec![longest.clone()]);
    assert_eq!(e.q.resume(&longest).await.unwrap(), 0);
    assert_eq!(claim_one(&e.q).await.item.flow, longest);
}

/// step hands out the oldest parked item; the rest stay held and the flow
/// stays paused.
pub async fn step_runs_one_parked_item(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    e.q.add(in_flow("first", "f")).await.unwrap();
    e.q.add(in_flow("second", "f")).await.unwrap();
    claim(&e.q, 5).await;
    let s = e.q.step("f").await.unwrap().expect("one parked item");
    assert_eq!(s.item.payload, b"first");
    assert_eq!(s.lane, Lane::Parked);
    assert_eq!(s.item.deliveries, 1);
    assert_eq!(e.q.parked("f").await.unwrap(), 1);
    assert_eq!(e.q.paused_flows().await.unwrap(), vec!["f".to_string()]);
    e.q.ack(s.receipt).await.unwrap();
    assert!(e.q.step("g").await.unwrap().is_none());
}

/// clear_flow deletes parked items and the pause state.
pub async fn clear_flow_deletes_parked_items_and_pause(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("f").await.unwrap();
    e.q.add(in_flow("a", "f")).await.unwrap();
    e.q.add(in_flow("b", "f")).await.unwrap();
    claim(&e.q, 5).await;
    assert_eq!(e.q.clear_flow("f").await.unwrap(), 2);
    assert!(e.q.paused_flows().await.unwrap().is_empty());
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.parked, s.backlog, s.pending), (0, 0, 0));
    e.q.add(in_flow("c", "f")).await.unwrap();
    assert_eq!(claim(&e.q, 5).await.len(), 1);
}

/// paused_flows lists paused flows sorted; pausing is idempotent.
pub async fn paused_flows_are_listed_sorted(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("b").await.unwrap();
    e.q.pause("a").await.unwrap();
    e.q.pause("b").await.unwrap();
    assert_eq!(
        e.q.paused_flows().await.unwrap(),
        vec!["a".to_string(), "b".to_string()]
    );
}
