//! `/metrics` (SPEC 12.3) of a real `workjournal serve`: the series are
//! there, the state counts match `stats`, and who may scrape follows the
//! listener's rule (the socket's owner; the token on TCP).

mod support;

use support::{Served, sample, tcp, unix, wait_for};

#[test]
fn metrics_over_the_socket_match_stats() {
    let served = Served::start(&[]);
    wait_for("the socket", || served.socket().exists());
    for p in ["one", "two", "three"] {
        served.cli(&["add", p]);
    }
    served.cli(&["add", "--flow", "f", "four"]);
    let stats = served.stats();
    let r = unix(&served.socket(), "GET", "/metrics", "");
    assert_eq!(r.status, 200, "{}", r.body);
    assert!(
        r.header("content-type")
            .unwrap_or("")
            .starts_with("text/plain"),
        "{:?}",
        r.headers
    );
    let m = &r.body;
    for (state, key) in [
        ("backlog", "backlog"),
        ("due", "due"),
        ("pending", "pending"),
        ("delayed", "delayed"),
        ("parked", "parked"),
        ("dead_letter", "dead_letters"),
    ] {
        let series = format!("workjournal_items{{state=\"{state}\"}}");
        assert_eq!(
            sample(m, &series),
            stats[key].as_f64(),
            "{series} against stats {stats}\n{m}"
        );
    }
    assert_eq!(sample(m, "workjournal_items_added_total"), Some(4.0), "{m}");
    assert_eq!(
        sample(m, "workjournal_operations_total{op=\"add\",outcome=\"ok\"}"),
        Some(4.0),
        "{m}"
    );
    assert_eq!(
        sample(m, "workjournal_oldest_pending_age_seconds"),
        Some(0.0)
    );
    assert!(
        m.contains("# TYPE workjournal_operation_duration_seconds histogram"),
        "{m}"
    );
    assert!(
        m.contains("workjournal_operation_duration_seconds_bucket{op=\"add\",le=\""),
        "{m}"
    );
    // A failed call is counted by its error kind.
    let bad = unix(
        &served.socket(),
        "POST",
        "/v1/claim",
        "{\"count\":0,\"wait_ms\":0}",
    );
    assert_eq!(bad.status, 400);
    let m = unix(&served.socket(), "GET", "/metrics", "").body;
    assert_eq!(
        sample(
            &m,
            "workjournal_operations_total{op=\"claim\",outcome=\"invalid_input\"}"
        ),
        Some(1.0),
        "{m}"
    );
}

#[test]
fn metrics_on_tcp_need_the_token() {
    let served = Served::start(&["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
    let token = served.token();
    let bearer = format!("Bearer {token}");
    for addr in [served.listen.clone().unwrap(), served.http.clone().unwrap()] {
        let none = tcp(&addr, "GET", "/metrics", &[], "");
        assert_eq!(none.status, 401, "{addr}: {}", none.body);
        let wrong = tcp(
            &addr,
            "GET",
            "/metrics",
            &[("authorization", "Bearer guess")],
            "",
        );
        assert_eq!(wrong.status, 401, "{addr}");
        let ok = tcp(&addr, "GET", "/metrics", &[("authorization", &bearer)], "");
        assert_eq!(ok.status, 200, "{addr}: {}", ok.body);
        assert!(
            ok.body.contains("workjournal_items{state=\"backlog\"} 0"),
            "{}",
            ok.body
        );
    }
    // The dashboard listener serves no API route.
    let api = tcp(
        &served.http.clone().unwrap(),
        "POST",
        "/v1/stats",
        &[("authorization", &bearer)],
        "",
    );
    assert_eq!(api.status, 404, "{}", api.body);
}

/// The dashboard's JSON routes and `/metrics` on a Redis queue: pending
/// items name their consumer, dead letters their reason, and the state
/// gauges match `stats`.
#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dashboard_reads_a_redis_queue() {
    use std::time::Duration;
    use workjournal::{ClaimFrom, Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

    let redis = workjournal::testing::RedisServer::start().unwrap();
    let url = redis.url();
    let served = Served::start_redis(&url, "dash", &["--http", "127.0.0.1:0"]);
    let http = served.http.clone().unwrap();
    let bearer = format!("Bearer {}", served.token());
    let auth = [("authorization", bearer.as_str())];
    let q = RedisQueue::connect(&url, "dash", Config::default(), RedisOptions::default())
        .await
        .unwrap();
    q.add(NewItem::new(b"first".to_vec())).await.unwrap();
    q.add(NewItem::new(b"second".to_vec())).await.unwrap();
    q.add(NewItem::new(b"third".to_vec())).await.unwrap();
    let c = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.dead_letter(c[1].receipt, "no such customer")
        .await
        .unwrap();

    let pending = tcp(&http, "GET", "/ui/items?state=pending", &auth, "");
    assert_eq!(pending.status, 200, "{}", pending.body);
    let v: serde_json::Value = serde_json::from_str(&pending.body).unwrap();
    assert_eq!(v["items"][0]["payload"]["text"], "first", "{v}");
    assert!(
        v["items"][0]["consumer"]
            .as_str()
            .is_some_and(|c| c.starts_with("wj-")),
        "{v}"
    );
    let dead = tcp(&http, "GET", "/ui/items?state=dead_letter", &auth, "");
    let v: serde_json::Value = serde_json::from_str(&dead.body).unwrap();
    assert_eq!(v["items"][0]["reason"], "no such customer", "{v}");
    let found = tcp(
        &http,
        "GET",
        &format!("/ui/find?id={}", c[1].item.id),
        &auth,
        "",
    );
    let v: serde_json::Value = serde_json::from_str(&found.body).unwrap();
    assert_eq!(v["item"]["state"], "dead_letter", "{v}");

    let stats = served.stats();
    let m = tcp(&http, "GET", "/metrics", &auth, "").body;
    for (state, key) in [
        ("backlog", "backlog"),
        ("pending", "pending"),
        ("dead_letter", "dead_letters"),
    ] {
        assert_eq!(
            sample(&m, &format!("workjournal_items{{state=\"{state}\"}}")),
            stats[key].as_f64(),
            "{state}: {stats}\n{m}"
        );
    }
    q.close().await.unwrap();
}
