//! Conformance cases of SPEC 3, looking: `stats`, `peek`, `backlog_by_flow` and
//! `now_ms`.

use std::time::Duration;

use super::{Factory, T0, add, claim, env, in_flow, item, payloads, peek_payloads};
use crate::queue::WorkQueue;

/// stats counts every state exactly.
pub async fn stats_count_every_state(f: &dyn Factory) {
    let e = env(f).await;
    assert_eq!(e.q.stats().await.unwrap().durable, f.durable());
    e.q.pause("p").await.unwrap();
    e.q.add(in_flow("parked", "p")).await.unwrap();
    for p in ["pending", "dead", "backlog"] {
        add(&e.q, p).await;
    }
    e.q.add_delayed(item("due"), T0).await.unwrap();
    e.q.add_delayed(item("delayed"), T0 + 100_000)
        .await
        .unwrap();
    let c = claim(&e.q, 3).await;
    assert_eq!(payloads(&c), vec!["due", "pending", "dead"]);
    e.q.dead_letter(c[2].receipt, "x").await.unwrap();
    e.q.retry(c[0].receipt, T0).await.unwrap();
    e.q.promote_due().await.unwrap();
    e.clock.advance(Duration::from_millis(250));
    let s = e.q.stats().await.unwrap();
    assert_eq!(s.backlog, 2, "{s:?}");
    assert_eq!(s.due, 1);
    assert_eq!(s.pending, 1);
    assert_eq!(s.delayed, 1);
    assert_eq!(s.parked, 1);
    assert_eq!(s.dead_letters, 1);
    assert_eq!(s.oldest_pending_age_ms, Some(250));
}

/// peek shows what a claim would hand out, without claiming.
pub async fn peek_does_not_claim(f: &dyn Factory) {
    let e = env(f).await;
    e.q.pause("p").await.unwrap();
    add(&e.q, "b1").await;
    e.q.add(in_flow("held", "p")).await.unwrap();
    add(&e.q, "b2").await;
    e.q.add_delayed(item("timer"), T0).await.unwrap();
    assert_eq!(peek_payloads(&e.q, 10).await, vec!["timer", "b1", "b2"]);
    assert_eq!(e.q.peek(1).await.unwrap().len(), 1);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.pending, s.delayed, s.parked), (0, 1, 0));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["timer", "b1", "b2"]);
}

/// backlog_by_flow counts flows over the next items to be claimed.
pub async fn backlog_by_flow_counts_the_sample(f: &dyn Factory) {
    let e = env(f).await;
    for flow in ["a", "b", "a", "c", "a"] {
        e.q.add(in_flow("x", flow)).await.unwrap();
    }
    let m = e.q.backlog_by_flow(4).await.unwrap();
    assert_eq!(m.get("a"), Some(&2));
    assert_eq!(m.get("b"), Some(&1));
    assert_eq!(m.get("c"), Some(&1));
    assert_eq!(m.values().sum::<u64>(), 4);
}

/// now_ms reads the queue's clock.
pub async fn now_reads_the_queue_clock(f: &dyn Factory) {
    let e = env(f).await;
    assert_eq!(e.q.now_ms().await.unwrap(), T0);
    e.clock.advance(Duration::from_millis(5));
    assert_eq!(e.q.now_ms().await.unwrap(), T0 + 5);
}
