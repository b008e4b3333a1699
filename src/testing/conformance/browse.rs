//! Conformance cases of SPEC 12.1: `list` and `find`.

use std::collections::BTreeSet;

use super::{Factory, T0, add, claim, claim_one, env, in_flow, invalid, item};
use crate::browse::{ItemState, ListQuery, ListedItem, MAX_LIST_LIMIT};
use crate::queue::{BoxQueue, WorkQueue};

/// Every page of `query`'s state, read on until `next_offset` is `None`.
async fn all_pages(q: &BoxQueue, query: ListQuery) -> Vec<ListedItem> {
    let mut out = Vec::new();
    let mut offset = query.get_offset();
    for _ in 0..1000 {
        let page = q.list(query.clone().offset(offset)).await.unwrap();
        assert!(page.items.len() <= query.get_limit().min(MAX_LIST_LIMIT));
        out.extend(page.items);
        match page.next_offset {
            Some(n) => {
                assert!(n > offset, "next_offset {n} does not move past {offset}");
                offset = n;
            }
            None => return out,
        }
    }
    panic!("list never reached the end of the state");
}

fn id_set(items: &[ListedItem]) -> BTreeSet<u64> {
    items.iter().map(|l| l.item.id).collect()
}

/// SPEC 12.1: each state lists exactly its items, with what the state
/// adds (claim time, dead-letter reason and time), and changes nothing.
pub async fn list_shows_each_state(f: &dyn Factory) {
    let e = env(f).await;
    let q = &e.q;
    let pending = add(q, "pending").await;
    let c = claim_one(q).await;
    assert_eq!(c.item.id, pending);
    let dead = add(q, "dead").await;
    let d = claim_one(q).await;
    q.dead_letter(d.receipt, "boom").await.unwrap();
    let backlog = add(q, "backlog").await;
    let delayed = q
        .add_delayed(item("delayed"), T0 + 60_000)
        .await
        .unwrap()
        .id;
    let due = q.add_delayed(item("due"), T0 - 1).await.unwrap().id;
    assert_eq!(q.promote_due().await.unwrap(), 1);
    q.pause("held").await.unwrap();
    let parked = q.add(in_flow("parked", "held")).await.unwrap().id;
    // The due item comes first, then the parked one is parked by the claim.
    let got = claim(q, 1).await;
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.id, due);
    let due2 = q.add_delayed(item("due2"), T0 - 1).await.unwrap().id;
    q.promote_due().await.unwrap();
    let before = q.stats().await.unwrap();

    let list = |state| async move { all_pages(q, ListQuery::new(state).limit(10)).await };
    let b = list(ItemState::Backlog).await;
    assert!(id_set(&b).contains(&backlog), "backlog: {b:?}");
    assert!(b.iter().all(|l| l.state == ItemState::Backlog));
    let du = list(ItemState::Due).await;
    assert_eq!(id_set(&du), BTreeSet::from([due2]));
    let dl = list(ItemState::Delayed).await;
    assert_eq!(id_set(&dl), BTreeSet::from([delayed]));
    assert_eq!(dl[0].item.not_before_ms, Some(T0 + 60_000));
    let p = list(ItemState::Pending).await;
    assert_eq!(id_set(&p), BTreeSet::from([pending, due]));
    assert!(p.iter().all(|l| l.claimed_at_ms == Some(T0)));
    let pk = list(ItemState::Parked).await;
    let pk_ids = id_set(&pk);
    assert!(
        pk_ids.contains(&parked) || id_set(&b).contains(&parked),
        "parked: {pk:?}"
    );
    let dd = list(ItemState::DeadLetter).await;
    assert_eq!(id_set(&dd), BTreeSet::from([dead]));
    assert_eq!(dd[0].reason.as_deref(), Some("boom"));
    assert_eq!(dd[0].failed_at_ms, Some(T0));
    assert_eq!(dd[0].item.payload, b"dead");
    // Every item is listed once, in one state, and listing changed nothing.
    let total = b.len() + du.len() + dl.len() + p.len() + pk.len() + dd.len();
    assert_eq!(total, 7);
    assert_eq!(q.stats().await.unwrap(), before);
}

/// SPEC 12.1: pages of at most `limit` items cover the state exactly once,
/// in the state's order, and the last page says it is the last.
pub async fn list_pages_cover_the_state_once(f: &dyn Factory) {
    let e = env(f).await;
    let q = &e.q;
    let mut ids = Vec::new();
    for i in 0..7 {
        ids.push(add(q, &format!("item {i}")).await);
    }
    let listed = all_pages(q, ListQuery::new(ItemState::Backlog).limit(3)).await;
    let got: Vec<u64> = listed.iter().map(|l| l.item.id).collect();
    assert_eq!(id_set(&listed), ids.iter().copied().collect(), "{got:?}");
    assert_eq!(got.len(), ids.len(), "an item listed twice: {got:?}");
    // Past the end: an empty last page.
    let past = q
        .list(ListQuery::new(ItemState::Backlog).offset(100).limit(3))
        .await
        .unwrap();
    assert!(past.items.is_empty());
    assert_eq!(past.next_offset, None);
    // An empty state.
    let none = q.list(ListQuery::new(ItemState::Pending)).await.unwrap();
    assert!(none.items.is_empty());
    assert_eq!(none.next_offset, None);
    invalid(q.list(ListQuery::new(ItemState::Backlog).limit(0)).await);
    // A huge limit is lowered, not refused.
    let big = q
        .list(ListQuery::new(ItemState::Backlog).limit(usize::MAX))
        .await
        .unwrap();
    assert_eq!(big.items.len(), 7);
}

/// SPEC 12.1: the claim order per state, oldest claim first for pending
/// and newest first for dead letters (per partition on a partitioned
/// queue).
pub async fn list_orders_each_state(f: &dyn Factory) {
    let e = env(f).await;
    let q = &e.q;
    let a = add(q, "a").await;
    let b = add(q, "b").await;
    let c = add(q, "c").await;
    let first = claim_one(q).await;
    e.clock.advance(std::time::Duration::from_millis(5));
    let second = claim_one(q).await;
    let pending = all_pages(q, ListQuery::new(ItemState::Pending).limit(1)).await;
    let order: Vec<u64> = pending.iter().map(|l| l.item.id).collect();
    assert_eq!(order, vec![a, b]);
    assert_eq!(pending[1].claimed_at_ms, Some(T0 + 5));
    q.dead_letter(first.receipt, "one").await.unwrap();
    q.dead_letter(second.receipt, "two").await.unwrap();
    let dead = all_pages(q, ListQuery::new(ItemState::DeadLetter).limit(1)).await;
    let order: Vec<u64> = dead.iter().map(|l| l.item.id).collect();
    assert_eq!(order, vec![b, a], "dead letters newest first");
    let backlog = all_pages(q, ListQuery::new(ItemState::Backlog).limit(1)).await;
    assert_eq!(
        backlog.iter().map(|l| l.item.id).collect::<Vec<_>>(),
        vec![c]
    );
}

/// SPEC 12.1: `contains` keeps items whose payload holds the bytes, and a
/// search also reads on with `next_offset`.
pub async fn list_searches_payload_text(f: &dyn Factory) {
    let e = env(f).await;
    let q = &e.q;
    let one = add(q, "invoice 1 for ACME").await;
    add(q, "receipt 7").await;
    let two = add(q, "late invoice 2").await;
    let found = all_pages(
        q,
        ListQuery::new(ItemState::Backlog)
            .limit(10)
            .contains("invoice"),
    )
    .await;
    assert_eq!(id_set(&found), BTreeSet::from([one, two]));
    let none = all_pages(q, ListQuery::new(ItemState::Backlog).contains("nothing")).await;
    assert!(none.is_empty());
    // An empty needle keeps everything.
    let all = all_pages(q, ListQuery::new(ItemState::Backlog).contains("")).await;
    assert_eq!(all.len(), 3);
}

/// SPEC 12.1: `find` names an item's state, `completed` once it is acked
/// (SPEC 3, History), and `None` for an id never added.
pub async fn find_names_the_state(f: &dyn Factory) {
    let e = env(f).await;
    let q = &e.q;
    let first = add(q, "first").await;
    let c = claim_one(q).await;
    let waiting = add(q, "waiting").await;
    let found = q.find(waiting).await.unwrap().unwrap();
    assert_eq!(found.state, ItemState::Backlog);
    assert_eq!(found.item.payload, b"waiting");
    let p = q.find(first).await.unwrap().unwrap();
    assert_eq!(p.state, ItemState::Pending);
    assert_eq!(p.claimed_at_ms, Some(T0));
    q.dead_letter(c.receipt, "broken").await.unwrap();
    let d = q.find(first).await.unwrap().unwrap();
    assert_eq!(d.state, ItemState::DeadLetter);
    assert_eq!(d.reason.as_deref(), Some("broken"));
    let later = q.add_delayed(item("later"), T0 + 1_000).await.unwrap().id;
    assert_eq!(
        q.find(later).await.unwrap().unwrap().state,
        ItemState::Delayed
    );
    q.pause("held").await.unwrap();
    let held = q.add(in_flow("held item", "held")).await.unwrap().id;
    let c = claim(q, 10).await;
    assert_eq!(
        c.iter().map(|c| c.item.id).collect::<Vec<_>>(),
        vec![waiting]
    );
    assert_eq!(
        q.find(held).await.unwrap().unwrap().state,
        ItemState::Parked
    );
    q.ack(c[0].receipt).await.unwrap();
    // Acked, it is found as a finished item (SPEC 3, History).
    assert_eq!(
        q.find(waiting).await.unwrap().map(|l| l.state),
        Some(ItemState::Completed)
    );
    assert_eq!(q.find(u64::MAX).await.unwrap(), None);
}

/// SPEC 12.1 with SPEC 3, Flow limits: the items a flow limit holds (a
/// concurrency cap reached, a rate used up, a back-off) are listed in
/// their state after the shared lane's items, flow by flow, marked held;
/// pages cover them once; `find` names their state and the mark.
pub async fn list_and_find_show_items_held_by_a_flow_limit(f: &dyn Factory) {
    use crate::limit::{FlowLimit, RateLimit};
    use std::time::Duration;
    let e = env(f).await;
    let q = &e.q;
    // x1 is in the shared lane before its flow's limit: the claim that
    // meets it moves it to the held lane.
    let x1 = q.add(in_flow("x1", "x")).await.unwrap().id;
    q.set_flow_limit("c", FlowLimit::Concurrency(Some(1)))
        .await
        .unwrap();
    q.set_flow_limit(
        "r",
        FlowLimit::Rate(Some(RateLimit::new(1, Duration::from_secs(60)))),
    )
    .await
    .unwrap();
    q.back_off("z", Duration::from_secs(30)).await.unwrap();
    q.back_off("x", Duration::from_secs(30)).await.unwrap();
    let listed = q
        .list(ListQuery::new(ItemState::Backlog))
        .await
        .unwrap()
        .items;
    assert_eq!(
        listed
            .iter()
            .map(|l| (l.item.id, l.held))
            .collect::<Vec<_>>(),
        vec![(x1, false)],
        "x1 is still in the shared lane"
    );
    let mut ids = std::collections::BTreeMap::new();
    for (p, flow) in [
        ("c1", "c"),
        ("c2", "c"),
        ("c3", "c"),
        ("r1", "r"),
        ("r2", "r"),
        ("z1", "z"),
    ] {
        // r2 costs 2 permits: the listing carries the cost.
        let cost = if p == "r2" { 2 } else { 1 };
        ids.insert(p, q.add(in_flow(p, flow).cost(cost)).await.unwrap().id);
    }
    let got = claim(q, 10).await;
    assert_eq!(id_set_of(&got), BTreeSet::from([ids["c1"], ids["r1"]]));
    let b1 = add(q, "b1").await;
    let b2 = add(q, "b2").await;
    let d1 = q.add_delayed(item("d1"), T0 - 1).await.unwrap().id;
    let z2 = q.add_delayed(in_flow("z2", "z"), T0 - 1).await.unwrap().id;
    q.promote_due().await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.due, s.pending, s.limited), (9, 2, 2, 6));

    // The shared lane in claim order, then the held lanes by flow name.
    let want_backlog = vec![
        (b1, false),
        (b2, false),
        (ids["c2"], true),
        (ids["c3"], true),
        (ids["r2"], true),
        (x1, true),
        (ids["z1"], true),
    ];
    for limit in [1, 2, 3, 50] {
        let b = all_pages(q, ListQuery::new(ItemState::Backlog).limit(limit)).await;
        assert!(b.iter().all(|l| l.state == ItemState::Backlog), "{b:?}");
        assert_eq!(
            b.iter().map(|l| (l.item.id, l.held)).collect::<Vec<_>>(),
            want_backlog,
            "backlog in pages of {limit}"
        );
        let d = all_pages(q, ListQuery::new(ItemState::Due).limit(limit)).await;
        assert!(d.iter().all(|l| l.state == ItemState::Due), "{d:?}");
        assert_eq!(
            d.iter().map(|l| (l.item.id, l.held)).collect::<Vec<_>>(),
            vec![(d1, false), (z2, true)],
            "due in pages of {limit}"
        );
    }
    assert_eq!(
        want_backlog.len() as u64,
        s.backlog - s.due,
        "the listing covers what stats counts"
    );
    // An offset into the held lanes, and past them.
    let page = q
        .list(ListQuery::new(ItemState::Backlog).offset(4).limit(2))
        .await
        .unwrap();
    assert_eq!(
        page.items.iter().map(|l| l.item.id).collect::<Vec<_>>(),
        vec![ids["r2"], x1]
    );
    assert_eq!(page.next_offset, Some(6));
    let past = q
        .list(ListQuery::new(ItemState::Backlog).offset(7))
        .await
        .unwrap();
    assert!(past.items.is_empty());
    assert_eq!(past.next_offset, None);
    // A search reaches into the held lanes.
    let found = all_pages(q, ListQuery::new(ItemState::Backlog).contains("2")).await;
    assert_eq!(
        found.iter().map(|l| l.item.id).collect::<Vec<_>>(),
        vec![b2, ids["c2"], ids["r2"]]
    );
    let found = all_pages(q, ListQuery::new(ItemState::Due).contains("z")).await;
    assert_eq!(
        found.iter().map(|l| l.item.id).collect::<Vec<_>>(),
        vec![z2]
    );

    // find names the real state and the mark.
    for (id, state, held) in [
        (ids["c2"], ItemState::Backlog, true),
        (ids["r2"], ItemState::Backlog, true),
        (ids["z1"], ItemState::Backlog, true),
        (x1, ItemState::Backlog, true),
        (z2, ItemState::Due, true),
        (b1, ItemState::Backlog, false),
        (d1, ItemState::Due, false),
        (ids["c1"], ItemState::Pending, false),
    ] {
        let l = q.find(id).await.unwrap().unwrap();
        assert_eq!((l.state, l.held), (state, held), "find {id}");
    }
    assert_eq!(
        q.find(ids["c3"]).await.unwrap().unwrap().item.payload,
        b"c3"
    );
    assert_eq!(q.find(ids["r2"]).await.unwrap().unwrap().item.cost, 2);
    let costs: Vec<(u64, u32)> = all_pages(q, ListQuery::new(ItemState::Backlog))
        .await
        .iter()
        .map(|l| (l.item.id, l.item.cost))
        .filter(|(_, c)| *c != 1)
        .collect();
    assert_eq!(costs, vec![(ids["r2"], 2)]);
    // Listing changed nothing.
    assert_eq!(q.stats().await.unwrap(), s);

    // Once the flows run again, their items leave the held lanes.
    for c in &got {
        q.ack(c.receipt).await.unwrap();
    }
    for round in 0.. {
        assert!(round < 20, "the held items never ran");
        e.clock.advance(Duration::from_secs(60));
        let more = claim(q, 10).await;
        if more.is_empty() {
            break;
        }
        for c in more {
            q.ack(c.receipt).await.unwrap();
        }
    }
    for state in [ItemState::Backlog, ItemState::Due] {
        assert!(all_pages(q, ListQuery::new(state)).await.is_empty());
    }
    assert_eq!(
        q.find(ids["c3"]).await.unwrap().map(|l| l.state),
        Some(ItemState::Completed)
    );
}

fn id_set_of(claimed: &[crate::item::Claimed]) -> BTreeSet<u64> {
    claimed.iter().map(|c| c.item.id).collect()
}
