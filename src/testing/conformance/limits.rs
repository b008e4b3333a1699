//! Conformance cases of SPEC 3, flow limits: concurrency caps, back-off and
//! rate limits.

use std::time::Duration;

use super::{
    Factory, NOW, T0, add, claim, claim_one, env, env_with, in_flow, invalid, payloads,
    peek_payloads,
};
use crate::config::Config;
use crate::item::ClaimFrom;
use crate::limit::{FlowLimit, RateLimit};
use crate::queue::{BoxQueue, WorkQueue};

async fn limit(q: &BoxQueue, flow: &str, l: FlowLimit) {
    q.set_flow_limit(flow, l).await.unwrap();
}

/// At most K items of a capped flow are pending at once; the other flows'
/// items go past the held ones, which keep their place; ack, retry,
/// release, dead letter and park each free a slot.
pub async fn concurrency_cap_holds_a_flow_and_exits_free_slots(f: &dyn Factory) {
    let e = env(f).await;
    limit(&e.q, "a", FlowLimit::Concurrency(Some(2))).await;
    for p in ["a1", "a2", "a3", "a4", "a5", "a6"] {
        e.q.add(in_flow(p, "a")).await.unwrap();
    }
    add(&e.q, "b1").await;
    let c = claim(&e.q, 10).await;
    assert_eq!(payloads(&c), vec!["a1", "a2", "b1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending, s.limited), (4, 3, 4));
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!(l.len(), 1);
    assert_eq!(
        (
            l[0].flow.as_str(),
            l[0].concurrency,
            l[0].pending,
            l[0].held,
            l[0].blocked
        ),
        ("a", Some(2), 2, 4, true)
    );
    e.q.ack(c[0].receipt).await.unwrap();
    let d = claim(&e.q, 10).await;
    assert_eq!(payloads(&d), vec!["a3"]);
    e.q.retry(c[1].receipt, T0).await.unwrap();
    // The retried a2 comes due again and runs first (due lane), in a2's slot.
    let g = claim(&e.q, 10).await;
    assert_eq!(payloads(&g), vec!["a2"]);
    e.q.release(d[0].receipt, T0 + 60_000).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4"]);
    e.q.dead_letter(g[0].receipt, "no").await.unwrap();
    let h = claim(&e.q, 10).await;
    assert_eq!(payloads(&h), vec!["a5"]);
    e.q.park(h[0].receipt).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a6"]);
    assert_eq!(e.q.stats().await.unwrap().limited, 0);
    // Clearing the cap lets the released a3 run beside the others.
    limit(&e.q, "a", FlowLimit::Concurrency(None)).await;
    e.clock.advance(Duration::from_secs(60));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a3"]);
    assert!(e.q.flow_limits().await.unwrap().is_empty());
    invalid(
        e.q.set_flow_limit("a", FlowLimit::Concurrency(Some(0)))
            .await,
    );
    invalid(
        e.q.set_flow_limit("", FlowLimit::Concurrency(Some(1)))
            .await,
    );
}

/// A reclaim that hands a stale item over keeps its slot; one that
/// dead-letters it frees the slot.
pub async fn concurrency_cap_counts_reclaimed_items(f: &dyn Factory) {
    let e = env_with(f, Config::default().max_deliveries(2)).await;
    limit(&e.q, "a", FlowLimit::Concurrency(Some(1))).await;
    e.q.add(in_flow("a1", "a")).await.unwrap();
    e.q.add(in_flow("a2", "a")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1"]);
    e.clock.advance(Duration::from_secs(60));
    let r = e.q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert_eq!(payloads(&r.claimed), vec!["a1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    e.clock.advance(Duration::from_secs(60));
    let r = e.q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert_eq!(r.dead_lettered.len(), 1);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a2"]);
}

/// A back-off holds the flow until its time, then lifts itself; the held
/// items keep their tier and place; a claim waiting on the flow wakes when
/// it lifts.
pub async fn back_off_holds_a_flow_until_it_lifts_itself(f: &dyn Factory) {
    let e = env(f).await;
    e.q.add(in_flow("a1", "a")).await.unwrap();
    e.q.add(in_flow("a2", "a").priority(3)).await.unwrap();
    add(&e.q, "b1").await;
    limit(&e.q, "a", FlowLimit::BackOffUntil(Some(T0 + 30_000))).await;
    e.q.add(in_flow("a3", "a")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["b1"]);
    let s = e.q.stats().await.unwrap();
    assert_eq!((s.backlog, s.limited), (3, 3));
    assert!(peek_payloads(&e.q, 10).await.is_empty());
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!(l[0].backoff_until_ms, Some(T0 + 30_000));
    e.clock.advance(Duration::from_millis(29_999));
    assert!(claim(&e.q, 10).await.is_empty());
    let clock = e.clock.clone();
    let mover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(Duration::from_millis(1));
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    mover.await.unwrap();
    assert_eq!(payloads(&c), vec!["a2"]);
    assert_eq!(peek_payloads(&e.q, 10).await, vec!["a1", "a3"]);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1", "a3"]);
    assert!(e.q.flow_limits().await.unwrap().is_empty());
    // back_off from now; lifting it early with None.
    e.q.back_off("a", Duration::from_secs(10)).await.unwrap();
    e.q.add(in_flow("a4", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    limit(&e.q, "a", FlowLimit::BackOffUntil(None)).await;
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4"]);
}

/// A rate limit hands out at most N permits per window, by the queue's
/// clock; the other flows go past; an item's cost counts; a window opens
/// at the first claim after the last one ended.
pub async fn rate_limit_hands_out_n_permits_per_period(f: &dyn Factory) {
    let e = env(f).await;
    limit(
        &e.q,
        "a",
        FlowLimit::Rate(Some(RateLimit::new(3, Duration::from_secs(1)))),
    )
    .await;
    for p in ["a1", "a2", "a3", "a4", "a5"] {
        e.q.add(in_flow(p, "a")).await.unwrap();
    }
    e.q.add(in_flow("a6", "a").cost(2)).await.unwrap();
    e.q.add(in_flow("a7", "a")).await.unwrap();
    add(&e.q, "b1").await;
    assert_eq!(payloads(&claim(&e.q, 2).await), vec!["a1", "a2"]);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a3", "b1"]);
    assert!(claim(&e.q, 10).await.is_empty());
    let l = e.q.flow_limits().await.unwrap();
    assert_eq!((l[0].permits_used, l[0].held, l[0].blocked), (3, 4, true));
    assert_eq!(e.q.stats().await.unwrap().limited, 4);
    e.clock.advance(Duration::from_millis(999));
    assert!(claim(&e.q, 10).await.is_empty());
    e.clock.advance(Duration::from_millis(1));
    // a4 (1) fits, a5 (1) fits, a6 (2) does not: the window's last permit
    // goes unused and a7 waits behind a6.
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a4", "a5"]);
    e.clock.advance(Duration::from_secs(1));
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a6", "a7"]);
    // A change keeps the window; clearing lifts the limit.
    e.q.add(in_flow("a8", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    limit(&e.q, "a", FlowLimit::Rate(None)).await;
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a8"]);
    invalid(
        e.q.set_flow_limit(
            "a",
            FlowLimit::Rate(Some(RateLimit::new(0, Duration::from_secs(1)))),
        )
        .await,
    );
}

/// A claim blocked waiting wakes when a rate window ends, and when a slot
/// of a capped flow is freed, without anything else happening.
pub async fn blocking_claim_wakes_when_permits_or_slots_return(f: &dyn Factory) {
    let e = env(f).await;
    limit(
        &e.q,
        "r",
        FlowLimit::Rate(Some(RateLimit::new(1, Duration::from_secs(5)))),
    )
    .await;
    e.q.add(in_flow("r1", "r")).await.unwrap();
    e.q.add(in_flow("r2", "r")).await.unwrap();
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["r1"]);
    let clock = e.clock.clone();
    let mover = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        clock.advance(Duration::from_secs(5));
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    mover.await.unwrap();
    assert_eq!(payloads(&c), vec!["r2"]);

    limit(&e.q, "k", FlowLimit::Concurrency(Some(1))).await;
    e.q.add(in_flow("k1", "k")).await.unwrap();
    e.q.add(in_flow("k2", "k")).await.unwrap();
    let k1 = claim_one(&e.q).await;
    let q = e.q.clone();
    let acker = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(50)).await;
        q.ack(k1.receipt).await.unwrap();
    });
    let c =
        e.q.claim(1, Duration::from_secs(20), ClaimFrom::All)
            .await
            .unwrap();
    acker.await.unwrap();
    assert_eq!(payloads(&c), vec!["k2"]);
}

/// Limits combine with pause: a held flow's items stay held (not parked);
/// once the limits let the flow run, a paused flow's items are parked.
pub async fn limits_and_pause_combine(f: &dyn Factory) {
    let e = env(f).await;
    limit(&e.q, "a", FlowLimit::BackOffUntil(Some(T0 + 1_000))).await;
    e.q.pause("a").await.unwrap();
    e.q.add(in_flow("a1", "a")).await.unwrap();
    assert!(claim(&e.q, 10).await.is_empty());
    assert_eq!(e.q.parked("a").await.unwrap(), 0);
    e.clock.advance(Duration::from_secs(1));
    assert!(claim(&e.q, 10).await.is_empty());
    assert_eq!(e.q.parked("a").await.unwrap(), 1);
    assert_eq!(e.q.resume("a").await.unwrap(), 1);
    assert_eq!(payloads(&claim(&e.q, 10).await), vec!["a1"]);
    // flow_limits lists flows by name.
    limit(&e.q, "z", FlowLimit::Concurrency(Some(3))).await;
    limit(&e.q, "m", FlowLimit::Concurrency(Some(3))).await;
    let names: Vec<String> =
        e.q.flow_limits()
            .await
            .unwrap()
            .into_iter()
            .map(|l| l.flow)
            .collect();
    assert_eq!(names, vec!["m", "z"]);
}

/// Claims of up to 100 and `ack_batch`es over free, rate-limited (with
/// items of cost 2), capped and paused flows at two tiers hand out, hold,
/// park and count exactly as the reference model does: runs of free flows'
/// items taken in one pass between held flows' items, and each flow's
/// pending count lowered once per batch, change no result.
pub async fn large_batches_with_flow_limits_match_the_model(f: &dyn Factory) {
    let e = env(f).await;
    let m = crate::MemoryQueue::new(Config::default().clock(e.clock.clone()));
    let rate = FlowLimit::Rate(Some(RateLimit {
        permits: 6,
        period_ms: 1_000,
    }));
    limit(&e.q, "rated", rate).await;
    m.set_flow_limit("rated", rate).await.unwrap();
    e.q.pause("paused").await.unwrap();
    m.pause("paused").await.unwrap();
    let flows = ["", "free", "rated", "", "capped", "free", "paused"];
    let items = |base: usize| -> Vec<crate::NewItem> {
        (0..140)
            .map(|k| {
                let n = base + k;
                crate::NewItem::new(vec![(n % 251) as u8; 40])
                    .flow(flows[n % flows.len()])
                    .priority(u8::from(n.is_multiple_of(5)))
                    .cost(if n.is_multiple_of(9) { 2 } else { 1 })
            })
            .collect()
    };
    assert_eq!(
        e.q.add_batch(items(0)).await.unwrap(),
        m.add_batch(items(0)).await.unwrap()
    );
    // Capped after its items entered the shared lane: a claim meets them
    // there and holds them in their places.
    let cap = FlowLimit::Concurrency(Some(7));
    limit(&e.q, "capped", cap).await;
    m.set_flow_limit("capped", cap).await.unwrap();
    let mut held = Vec::new();
    for round in 0..4 {
        let got = e.q.claim(30, NOW, ClaimFrom::All).await.unwrap();
        let want = m.claim(30, NOW, ClaimFrom::All).await.unwrap();
        assert_eq!(got, want, "claim {round}");
        assert!(!got.is_empty(), "claim {round} handed out nothing");
        held.extend(got.into_iter().map(|c| c.receipt));
        agree_with_model(&e.q, &m, &format!("claim {round}")).await;
        e.clock.advance(Duration::from_millis(400));
    }
    // A batch over several flows, one receipt in it twice.
    let mut batch: Vec<_> = held[..50].to_vec();
    batch.push(held[1]);
    assert_eq!(
        e.q.ack_batch(batch.clone()).await.unwrap(),
        m.ack_batch(batch).await.unwrap()
    );
    agree_with_model(&e.q, &m, "after the first acks").await;
    // A new rate window and freed slots: the held items run again.
    e.clock.advance(Duration::from_millis(1_100));
    assert_eq!(
        e.q.add_batch(items(140)).await.unwrap(),
        m.add_batch(items(140)).await.unwrap()
    );
    let got = e.q.claim(100, NOW, ClaimFrom::All).await.unwrap();
    let want = m.claim(100, NOW, ClaimFrom::All).await.unwrap();
    assert_eq!(got, want);
    let rest: Vec<_> = held[50..]
        .iter()
        .copied()
        .chain(got.iter().map(|c| c.receipt))
        .collect();
    assert_eq!(
        e.q.ack_batch(rest.clone()).await.unwrap(),
        m.ack_batch(rest).await.unwrap()
    );
    agree_with_model(&e.q, &m, "at the end").await;
    assert_eq!(e.q.peek(500).await.unwrap(), m.peek(500).await.unwrap());
}

/// `q` and the model `m` show the same flow limits and the same counts
/// (SPEC 3; `durable` and the pending age differ by design).
async fn agree_with_model(q: &BoxQueue, m: &crate::MemoryQueue, what: &str) {
    assert_eq!(
        q.flow_limits().await.unwrap(),
        m.flow_limits().await.unwrap(),
        "{what}"
    );
    let key = |s: crate::Stats| (s.backlog, s.due, s.pending, s.delayed, s.parked, s.limited);
    assert_eq!(
        key(q.stats().await.unwrap()),
        key(m.stats().await.unwrap()),
        "{what}"
    );
}
