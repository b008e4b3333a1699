//! The two bearer tokens of `workjournal serve` (SPEC 10, Security; SPEC
//! 12.2): the full one allows every route, the read-only one (for viewers
//! and Prometheus) only looks, on the API port (`--listen`) and on the
//! dashboard port (`--http`). Both are generated owner-only; a short one
//! is refused. A real `serve` process on a queue file in a temp dir.

mod support;

use std::os::unix::fs::PermissionsExt;
use std::process::{Command, Stdio};

use support::{Served, tcp};

fn read_token(served: &Served) -> String {
    std::fs::read_to_string(served.path("q.redb.read-token"))
        .unwrap()
        .trim()
        .to_string()
}

fn post(addr: &str, token: &str, op: &str, body: &str) -> support::Reply {
    let bearer = format!("Bearer {token}");
    tcp(
        addr,
        "POST",
        &format!("/v1/{op}"),
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        body,
    )
}

fn action(addr: &str, token: &str, body: &str) -> support::Reply {
    let bearer = format!("Bearer {token}");
    tcp(
        addr,
        "POST",
        "/ui/action",
        &[
            ("authorization", &bearer),
            ("content-type", "application/json"),
        ],
        body,
    )
}

#[test]
fn the_read_only_token_looks_but_cannot_add_ack_or_purge() {
    // Before, one token file served both the API and the viewers'
    // dashboard: a viewer's token purged the dead letters on --listen.
    let served = Served::start(&["--listen", "127.0.0.1:0", "--http", "127.0.0.1:0"]);
    let api = served.listen.clone().unwrap();
    let dash = served.http.clone().unwrap();
    let (full, read) = (served.token(), read_token(&served));
    assert_ne!(full, read);
    assert!(full.len() >= 32 && read.len() >= 32);
    for name in ["q.redb.token", "q.redb.read-token"] {
        let mode = std::fs::metadata(served.path(name))
            .unwrap()
            .permissions()
            .mode();
        assert_eq!(mode & 0o777, 0o600, "{name} mode {mode:o}");
    }
    served.cli(&["add", "one"]);
    served.cli(&["add", "two"]);

    // Looking works with the read-only token.
    let r = post(&api, &read, "stats", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(&api, &read, "peek", r#"{"count":5}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let bearer = format!("Bearer {read}");
    let r = tcp(&dash, "GET", "/metrics", &[("authorization", &bearer)], "");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = tcp(&api, "GET", "/metrics", &[("authorization", &bearer)], "");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = tcp(&dash, "GET", "/", &[("authorization", &bearer)], "");
    assert_eq!(r.status, 200);
    assert!(r.body.contains("data-read-only=\"true\""), "{}", r.body);
    let r = tcp(
        &dash,
        "GET",
        "/",
        &[("authorization", &format!("Bearer {full}"))],
        "",
    );
    assert!(r.body.contains("data-read-only=\"false\""), "{}", r.body);

    // Claim one with the full token, for the ack below.
    let r = post(&api, &full, "claim", r#"{"count":1}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let reply: serde_json::Value = serde_json::from_str(&r.body).unwrap();
    let receipt = reply["claimed"][0]["receipt"].to_string();

    // Changes are refused with the read-only token, and change nothing.
    let before = served.stats();
    for (op, body) in [
        ("add", r#"{"payload":"aGk="}"#.to_string()),
        ("ack", format!(r#"{{"receipt":{receipt}}}"#)),
        ("purge_dead_letters", "{}".to_string()),
        ("pause", r#"{"flow":"f"}"#.to_string()),
        (
            "reclaim_stale",
            r#"{"min_idle_ms":0,"count":5}"#.to_string(),
        ),
    ] {
        let r = post(&api, &read, op, &body);
        assert_eq!(r.status, 403, "{op}: {}", r.body);
        assert!(r.body.contains("read-only"), "{op}: {}", r.body);
    }
    for body in [r#"{"action":"purge"}"#, r#"{"action":"pause","flow":"f"}"#] {
        let r = action(&dash, &read, body);
        assert_eq!(r.status, 403, "{body}: {}", r.body);
    }
    let after = served.stats();
    for key in ["backlog", "pending", "dead_letters"] {
        assert_eq!(before[key], after[key], "{key}");
    }

    // The full token can.
    let r = post(&api, &full, "ack", &format!(r#"{{"receipt":{receipt}}}"#));
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(&api, &full, "add", r#"{"payload":"aGk="}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    let r = post(&api, &full, "purge_dead_letters", "{}");
    assert_eq!(r.status, 200, "{}", r.body);
    let r = action(&dash, &full, r#"{"action":"purge"}"#);
    assert_eq!(r.status, 200, "{}", r.body);
    // A wrong token is still 401.
    let r = post(&api, "not-a-token-of-this-server-at-all", "stats", "{}");
    assert_eq!(r.status, 401, "{}", r.body);
}

#[test]
fn a_short_token_file_is_refused() {
    // Before, a 5-character token file was accepted.
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("short.token");
    std::fs::write(&token, "abcde\n").unwrap();
    std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(dir.path())
        .args(["--db", "q.redb", "add", "x"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let out = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .current_dir(dir.path())
        .args(["--db", "q.redb", "serve", "--listen", "127.0.0.1:0"])
        .arg("--token-file")
        .arg(&token)
        .stdin(Stdio::null())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("fewer than 32"), "{err}");
    assert!(err.contains("short.token"), "{err}");
    assert!(!dir.path().join("q.redb.sock").exists());
}
