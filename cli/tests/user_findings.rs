//! Regressions found by a new user's review that run the `workjournal`
//! command (the library's are in the root's tests/user_findings.rs).

// Failed: `workjournal step F --exec true --lease 0s` panicked ("`period` must be non-zero", exit 101) with a backtrace.
#[test]
fn step_with_a_zero_lease_gives_one_line_and_no_panic() {
    use std::process::Command;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    let wj = |args: &[&str]| {
        Command::new(env!("CARGO_BIN_EXE_workjournal"))
            .arg("--db")
            .arg(&db)
            .args(args)
            .env_remove("RUST_BACKTRACE")
            .output()
            .unwrap()
    };
    // Only `add` creates the queue file.
    assert!(wj(&["add", "first"]).status.success());
    assert!(wj(&["pause", "f"]).status.success());
    assert!(wj(&["add", "--flow", "f", "x"]).status.success());
    // A worker parks the paused flow's item, so that `step` has one to run.
    assert!(
        wj(&["work", "--exec", "true", "--until-empty"])
            .status
            .success()
    );
    let out = wj(&["step", "f", "--exec", "true", "--lease", "0s"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_ne!(out.status.code(), Some(101), "panicked: {stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

fn wj_in(db: &std::path::Path, args: &[&str]) -> std::process::Output {
    std::process::Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(db)
        .args(args)
        .env_remove("RUST_LOG")
        .stdin(std::process::Stdio::null())
        .output()
        .unwrap()
}

// Failed: `work --exec "$CMD"` with CMD unset ran `sh -c ''`, which exits 0,
// so every item was acked (deleted) without anything running.
#[test]
fn an_empty_exec_is_a_usage_error_and_acks_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    assert!(wj_in(&db, &["add", "important"]).status.success());
    for exec in ["", "   ", "\t\n"] {
        for args in [
            vec!["work", "--exec", exec, "--until-empty"],
            vec!["step", "f", "--exec", exec],
        ] {
            let out = wj_in(&db, &args);
            let err = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{args:?}: {err}");
            assert_eq!(err.lines().count(), 1, "{err:?}");
            assert!(err.contains("--exec"), "{err:?}");
        }
    }
    let stats = wj_in(&db, &["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(stats["backlog"], 1, "the item is still queued: {stats}");
}

// Failed: `serve --listen PORT` on a port in use exited 1 but left a stale
// `<db>.sock` (and a new token file) behind.
#[test]
fn serve_on_a_port_in_use_fails_and_leaves_no_socket() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    assert!(wj_in(&db, &["add", "x"]).status.success());
    let busy = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = busy.local_addr().unwrap().port().to_string();
    let mut child = std::process::Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&db)
        .args(["serve", "--listen", &port])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if start.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            panic!("serve on a port in use kept running");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let mut err = String::new();
    std::io::Read::read_to_string(&mut child.stderr.take().unwrap(), &mut err).unwrap();
    assert_eq!(status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("listen on"), "{err:?}");
    assert!(
        !dir.path().join("q.redb.sock").exists(),
        "a stale socket was left"
    );
    assert!(
        !dir.path().join("q.redb.token").exists(),
        "a token file was made"
    );
    drop(busy);
}

// Failed: a dead-letter reason was printed raw: `result ID` wrote every line
// of it to stderr (not one line), and escape sequences from the command's
// stderr reached the terminal through `work`, `dead-letters` and `result`.
#[test]
fn dead_letter_reasons_print_as_one_escaped_line() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    assert!(wj_in(&db, &["add", "x"]).status.success());
    let exec = r#"printf 'first\n\033]0;retitled\007\033[31mred\tend\n' >&2; exit 1"#;
    let work = wj_in(
        &db,
        &[
            "work",
            "--exec",
            exec,
            "--max-deliveries",
            "1",
            "--until-empty",
        ],
    );
    assert_eq!(work.status.code(), Some(10));
    let dead = wj_in(&db, &["dead-letters"]);
    let result = wj_in(&db, &["result", "1"]);
    assert_eq!(result.status.code(), Some(10));
    for (what, bytes) in [
        ("work", &work.stderr),
        ("dead-letters", &dead.stdout),
        ("result", &result.stderr),
    ] {
        let text = String::from_utf8_lossy(bytes);
        assert!(
            !text.contains('\u{1b}') && !text.contains('\u{7}'),
            "{what} printed control characters: {text:?}"
        );
        assert!(text.contains("red end"), "{what}: {text:?}");
    }
    let err = String::from_utf8_lossy(&result.stderr);
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains(r"\u{1b}[31mred end"), "{err:?}");
    // The JSON keeps the whole reason, unaltered.
    let json = wj_in(&db, &["dead-letters", "--json"]);
    let list: serde_json::Value = serde_json::from_slice(&json.stdout).unwrap();
    let reason = list[0]["reason"].as_str().unwrap();
    assert!(reason.contains("\u{1b}[31mred\tend"), "{reason:?}");
    assert!(reason.contains("first"), "{reason:?}");
}

// Failed: `workjournal --db /dev/null add x` replaced /dev/null with a
// regular file (its length of 0 read as "no queue yet") and said it added
// the item; a FIFO was replaced the same way (SPEC 6, Creating a file).
#[test]
fn a_db_that_is_a_fifo_is_refused_and_left_alone() {
    use std::os::unix::fs::FileTypeExt;
    let dir = tempfile::tempdir().unwrap();
    let fifo = dir.path().join("q.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo (coreutils) is needed for this test");
    assert!(made.success());
    let out = wj_in(&fifo, &["add", "x"]);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(err.lines().count(), 1, "{err:?}");
    assert!(err.contains("not a regular file"), "{err:?}");
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced");
}
