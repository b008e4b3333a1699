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

/// SPEC 12.3: a served queue file has a lag source (the one route
/// `forward_lag` reads), but a file never forwarded (no forwarder was ever
/// set up on it, none runs) exports no forwarding lag: before, every item
/// of a plain queue file showed as `workjournal_forward_lag_items` waiting
/// for a Redis it was never meant for. A Redis queue has no source at all
/// (below).
#[test]
fn metrics_show_no_forwarding_lag_for_a_file_never_forwarded() {
    let served = Served::start(&[]);
    wait_for("the socket", || served.socket().exists());
    served.cli(&["add", "one"]);
    served.cli(&["add", "--flow", "f", "two"]);
    let lag = unix(&served.socket(), "POST", "/v1/forward_lag", "{}");
    assert_eq!(lag.status, 200, "{}", lag.body);
    let v: serde_json::Value = serde_json::from_str(&lag.body).unwrap();
    assert_eq!(v["lag"]["forwarded"], false, "{v}");
    let m = unix(&served.socket(), "GET", "/metrics", "").body;
    assert!(m.contains("workjournal_items{"), "{m}");
    assert!(!m.contains("workjournal_forward_lag_items"), "{m}");
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
    // No lag source on a Redis queue: no forwarding lag series.
    assert!(!m.contains("workjournal_forward_lag_items"), "{m}");
    q.close().await.unwrap();
}

/// The dashboard's writes as JSON (SPEC 12.2): step hands the oldest
/// parked item to the page, which gives it back or acks it; redrive all
/// and purge answer how many; an unknown action or a form post is refused.
#[test]
fn dashboard_actions_step_redrive_and_purge() {
    let served = Served::start(&["--http", "127.0.0.1:0"]);
    let http = served.http.clone().unwrap();
    let bearer = format!("Bearer {}", served.token());
    let act = |body: &str| {
        tcp(
            &http,
            "POST",
            "/ui/action",
            &[
                ("authorization", &bearer),
                ("content-type", "application/json"),
            ],
            body,
        )
    };
    served.cli(&["pause", "held"]);
    served.cli(&["add", "--flow", "held", "h1"]);
    served.cli(&["add", "--flow", "held", "h2"]);
    // A claim parks them: `work` would; here one step of the page does.
    let r = act(r#"{"action":"step","flow":"held"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    // Nothing was parked yet (parking happens at a claim): nothing to step.
    assert!(r.body.contains("nothing parked"), "{}", r.body);
    let dir = served.dir.path().to_path_buf();
    let claim = std::process::Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(&dir)
        .args(&served.target)
        .args([
            "work",
            "--exec",
            "exit 1",
            "--max-deliveries",
            "1",
            "--until-empty",
        ])
        .output()
        .unwrap();
    assert!(
        claim.status.success(),
        "{}",
        String::from_utf8_lossy(&claim.stderr)
    );
    assert_eq!(served.stats()["parked"], 2);
    let r = act(r#"{"action":"step","flow":"held"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    assert_eq!(v["stepped"]["item"]["payload"]["text"], "h1", "{v}");
    assert_eq!(served.stats()["pending"], 1);
    let receipt = v["stepped"]["receipt"].to_string();
    let r = act(&format!(r#"{{"action":"release","receipt":{receipt}}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    assert_eq!(served.stats()["parked"], 2, "given back to the parked list");
    let r = act(r#"{"action":"step","flow":"held"}"#);
    let v: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let receipt = v["stepped"]["receipt"].to_string();
    let r = act(&format!(r#"{{"action":"ack","receipt":{receipt}}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    let s = served.stats();
    assert_eq!(
        (s["parked"].as_u64(), s["pending"].as_u64()),
        (Some(1), Some(0)),
        "{s}"
    );

    // Dead letters: two failures, redrive all, fail again, purge.
    served.cli(&["add", "bad one"]);
    served.cli(&["add", "bad two"]);
    let fail = || {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_workjournal"))
            .current_dir(&dir)
            .args(&served.target)
            .args([
                "work",
                "--exec",
                "exit 1",
                "--max-deliveries",
                "1",
                "--until-empty",
            ])
            .output()
            .unwrap();
        // Exit 10: finished, with items dead-lettered in the run.
        assert_eq!(
            out.status.code(),
            Some(10),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    fail();
    assert_eq!(served.stats()["dead_letters"], 2);
    let r = act(r#"{"action":"redrive_all"}"#);
    assert!(r.body.contains("2 dead letters redriven"), "{}", r.body);
    assert_eq!(served.stats()["dead_letters"], 0);
    fail();
    let r = act(r#"{"action":"purge"}"#);
    assert!(r.body.contains("2 dead letters deleted"), "{}", r.body);
    assert_eq!(served.stats()["dead_letters"], 0);

    let r = act(r#"{"action":"explode"}"#);
    assert_eq!(r.status, 400, "{}", r.body);
    let form = tcp(
        &http,
        "POST",
        "/ui/action",
        &[
            ("authorization", &bearer),
            ("content-type", "application/x-www-form-urlencoded"),
        ],
        "action=purge",
    );
    assert_eq!(form.status, 400, "{}", form.body);
}
