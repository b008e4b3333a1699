//! Combined adds (SPEC 7, "Redis add combining"): concurrent adds of one
//! handle share script calls, each caller gets its own id, and a caller
//! that goes away cuts nobody else's add. On a real `redis-server` from the
//! harness, and on a real Redis Cluster (each body runs as `server::NAME`
//! and `cluster::NAME`).

#![cfg(all(feature = "redis", feature = "testing"))]

use std::collections::BTreeSet;
use std::sync::Arc;
use std::time::Duration;

use workjournal::testing::redis_server::fresh_namespace;
use workjournal::testing::{RawConnection, RedisKind};
use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

workjournal::on_server_and_cluster!(
    concurrent_adds_share_script_calls_and_each_gets_its_own_id,
    a_dropped_add_cuts_no_other_add_of_its_call,
    a_bad_payload_fails_only_its_own_add,
    combined_adds_keep_each_ones_tier,
);

/// Script calls (`EVALSHA` and `EVAL`) the node serving namespace `ns` has
/// run, from `INFO commandstats`.
async fn script_calls(url: &str, ns: &str) -> u64 {
    let mut conn = RawConnection::open(url).await.unwrap();
    conn.command_calls(ns, &["evalsha", "eval"]).await.unwrap()
}

/// A queue on `url` with its add script loaded, so NOSCRIPT retries do not
/// count as script calls.
async fn warm_queue(url: &str, ns: &str) -> Arc<RedisQueue> {
    let q = RedisQueue::connect(url, ns, Config::default(), RedisOptions::default())
        .await
        .unwrap();
    q.add(NewItem::new(b"warm".to_vec())).await.unwrap();
    Arc::new(q)
}

/// `items` added concurrently, one task each: their ids, and how many
/// script calls the server ran for them.
async fn add_concurrently(
    q: &Arc<RedisQueue>,
    url: &str,
    ns: &str,
    items: Vec<NewItem>,
) -> (BTreeSet<u64>, u64) {
    let before = script_calls(url, ns).await;
    let adds: Vec<_> = items
        .into_iter()
        .map(|item| {
            let q = q.clone();
            tokio::spawn(async move { q.add(item).await.unwrap().id })
        })
        .collect();
    let mut ids = BTreeSet::new();
    for a in adds {
        ids.insert(a.await.unwrap());
    }
    (ids, script_calls(url, ns).await - before)
}

// Counts the server's script calls: on a deployment of its own.
async fn concurrent_adds_share_script_calls_and_each_gets_its_own_id(kind: RedisKind) {
    let server = kind.start_private(false).unwrap();
    let url = server.url();
    let q = warm_queue(&url, "combine").await;
    let items = (0..200).map(|i| NewItem::new(format!("{i}").into_bytes()));
    let (ids, calls) = add_concurrently(&q, &url, "combine", items.collect()).await;
    assert_eq!(ids.len(), 200, "two adds got the same id");
    assert!(calls < 200, "200 concurrent adds took {calls} script calls");
    let mut claimed = BTreeSet::new();
    loop {
        let got = q.claim(100, Duration::ZERO, ClaimFrom::All).await.unwrap();
        if got.is_empty() {
            break;
        }
        claimed.extend(got.iter().map(|c| c.item.id));
    }
    assert_eq!(claimed.len(), 201);
    assert!(ids.is_subset(&claimed));
}

/// Dropping the add that started a combined call does not cut the call:
/// the other callers' adds still finish with their ids.
async fn a_dropped_add_cuts_no_other_add_of_its_call(kind: RedisKind) {
    let q = Arc::new(
        RedisQueue::connect(
            &kind.shared_url().unwrap(),
            &fresh_namespace(),
            Config::default(),
            RedisOptions::default(),
        )
        .await
        .unwrap(),
    );
    for round in 0..20 {
        let first = {
            let q = q.clone();
            tokio::spawn(async move { q.add(NewItem::new(b"dropped".to_vec())).await })
        };
        let others: Vec<_> = (0..10)
            .map(|i| {
                let q = q.clone();
                tokio::spawn(async move {
                    q.add(NewItem::new(format!("{round}-{i}").into_bytes()))
                        .await
                })
            })
            .collect();
        first.abort();
        for o in others {
            o.await.unwrap().unwrap();
        }
    }
    let s = q.stats().await.unwrap();
    // 200 kept adds; each aborted one happened or not, whole.
    assert!((200..=220).contains(&s.backlog), "{s:?}");
}

/// A payload over the limit fails its own add only, never another
/// caller's in the same call.
async fn a_bad_payload_fails_only_its_own_add(kind: RedisKind) {
    let q = Arc::new(
        RedisQueue::connect(
            &kind.shared_url().unwrap(),
            &fresh_namespace(),
            Config::default().max_payload_bytes(8),
            RedisOptions::default(),
        )
        .await
        .unwrap(),
    );
    let adds: Vec<_> = (0..20)
        .map(|i| {
            let q = q.clone();
            tokio::spawn(async move {
                let payload = if i % 2 == 0 {
                    vec![1u8; 4]
                } else {
                    vec![1u8; 9]
                };
                (i, q.add(NewItem::new(payload)).await)
            })
        })
        .collect();
    for a in adds {
        let (i, r) = a.await.unwrap();
        match (i % 2 == 0, r) {
            (true, Ok(_)) => {}
            (false, Err(workjournal::Error::InvalidInput(_))) => {}
            (_, other) => panic!("add {i}: {other:?}"),
        }
    }
    assert_eq!(q.stats().await.unwrap().backlog, 10);
}

/// Adds combined into one script call keep each one's priority tier (SPEC
/// section 3, Priority): every high-tier item is claimed before every
/// tier-0 one, whatever order the combined call took them in.
// Counts the server's script calls: on a deployment of its own.
async fn combined_adds_keep_each_ones_tier(kind: RedisKind) {
    let server = kind.start_private(false).unwrap();
    let url = server.url();
    let q = warm_queue(&url, "tiers").await;
    let items = (0..100u8).map(|i| {
        let tier = if i % 2 == 0 { 0 } else { 3 };
        NewItem::new(format!("{i}").into_bytes()).priority(tier)
    });
    let (_, calls) = add_concurrently(&q, &url, "tiers", items.collect()).await;
    assert!(calls < 100, "100 concurrent adds took {calls} script calls");
    let got = q.claim(101, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let tiers: Vec<u8> = got.iter().map(|c| c.item.priority).collect();
    let mut want = vec![3; 50];
    want.extend([0; 51]);
    assert_eq!(tiers, want);
}
