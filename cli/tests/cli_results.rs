//! `workjournal add --wait`, `work --keep-stdout` and `workjournal result`:
//! the queue as a durable RPC from the shell (SPEC section 9), with the real
//! binary: on an embedded file a running `work` serves (its socket, SPEC
//! section 10), and on Redis (a `redis-server` of the test harness).

use std::process::{Child, Command, Output, Stdio};

fn workjournal(db: &std::path::Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    c.arg("--db").arg(db).args(args).env_remove("RUST_LOG");
    c
}

fn run(db: &std::path::Path, args: &[&str]) -> Output {
    workjournal(db, args).stdin(Stdio::null()).output().unwrap()
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn code_and_stderr(out: &Output) -> (Option<i32>, String) {
    (out.status.code(), text(&out.stderr))
}

/// Stop `work` with SIGTERM (a graceful shutdown) and insist it exits 0.
fn stop(mut worker: Child) {
    let pid = worker.id().to_string();
    let killed = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
    assert!(killed.success());
    let status = worker.wait().unwrap();
    assert!(status.success(), "work exited with {status:?}");
}

#[test]
fn without_a_worker_add_wait_times_out_and_result_finds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    let out = run(&db, &["add", "job", "--wait", "--timeout", "100ms"]);
    let (code, err) = code_and_stderr(&out);
    assert_eq!(code, Some(11), "{err}");
    assert!(err.contains("item 1 did not finish within 100ms"), "{err}");
    assert!(out.stdout.is_empty());
    let out = run(&db, &["result", "1"]);
    let (code, err) = code_and_stderr(&out);
    assert_eq!(code, Some(9), "{err}");
    assert!(err.contains("item 1 has no outcome"), "{err}");
    let out = run(&db, &["add", "x", "--timeout", "1s"]);
    assert_eq!(out.status.code(), Some(2), "--timeout needs --wait");
}

/// The command of the round-trip tests: upper-cases its input; `bad`
/// fails (exit 3), `big` writes more than `--keep-stdout` keeps.
const UPPER: &str = r#"input=$(cat); if [ "$input" = big ]; then head -c 1048577 /dev/zero; exit 0; fi; if [ "$input" = bad ]; then echo "cannot do $input" >&2; exit 3; fi; printf '%s' "$input" | tr a-z A-Z"#;

#[test]
fn add_wait_round_trips_through_a_running_work_on_an_embedded_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("q.redb");
    // An `add --wait` started before any `work`: it makes the file and lets
    // go of it while it waits, so the `work` started next can take it.
    let early = workjournal(&db, &["add", "early", "--wait", "--timeout", "60s"])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let t = std::time::Instant::now();
    while !db.exists() {
        assert!(
            t.elapsed() < std::time::Duration::from_secs(20),
            "add made no file"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let worker = workjournal(
        &db,
        &[
            "work",
            "--exec",
            UPPER,
            "--keep-stdout",
            "--max-deliveries",
            "1",
            "--concurrency",
            "2",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    let out = early.wait_with_output().unwrap();
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "EARLY");

    // With `work` running (and serving the file), through its socket.
    let call = |args: &[&str]| run(&db, args);
    let out = call(&["add", "hello", "--wait", "--timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "HELLO");
    let out = call(&["result", "2"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "HELLO");

    // A command that fails for good: exit 10, the reason on stderr.
    let out = call(&["add", "bad", "--wait", "--timeout", "30s"]);
    let (code, err) = code_and_stderr(&out);
    assert_eq!(code, Some(10), "{err}");
    assert!(
        err.contains("item 3 was dead-lettered: command exited with code 3: cannot do bad"),
        "{err}"
    );
    assert_eq!(call(&["result", "3"]).status.code(), Some(10));

    // A retried request gets the first answer, and runs once.
    let first = call(&[
        "add",
        "once",
        "--dedup-key",
        "req-1",
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert!(first.status.success(), "{}", text(&first.stderr));
    assert_eq!(text(&first.stdout), "ONCE");
    let again = call(&[
        "add",
        "other",
        "--dedup-key",
        "req-1",
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), "ONCE");
    assert!(
        text(&again.stderr)
            .contains("duplicate: key \"req-1\" was added within the dedup window as item 4"),
        "{}",
        text(&again.stderr)
    );
    stop(worker);

    // With nobody serving the file, `result` reads it itself.
    let out = call(&["result", "4"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "ONCE");
    let out = call(&["stats", "--json"]);
    let stats: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(stats["backlog"], 0, "{stats}");
    assert_eq!(stats["dead_letters"], 1, "{stats}");
}

#[cfg(feature = "redis")]
#[test]
fn add_wait_round_trips_through_a_running_work() {
    let server = workjournal::testing::RedisServer::start().unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("unused.redb");
    let on_redis = |args: &[&str]| {
        let mut all = vec!["--redis", url.as_str(), "--namespace", "rpc"];
        all.extend_from_slice(args);
        all.iter().map(|s| s.to_string()).collect::<Vec<_>>()
    };
    let call = |args: &[&str]| {
        let all = on_redis(args);
        let refs: Vec<&str> = all.iter().map(String::as_str).collect();
        run(&db, &refs)
    };
    let work_args = on_redis(&[
        "work",
        "--exec",
        UPPER,
        "--keep-stdout",
        "--max-deliveries",
        "1",
        "--concurrency",
        "2",
    ]);
    let refs: Vec<&str> = work_args.iter().map(String::as_str).collect();
    let worker = workjournal(&db, &refs)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();

    let out = call(&["add", "hello", "--wait", "--timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "HELLO");
    let out = call(&["result", "1"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "HELLO");

    // A command that fails for good: exit 10, the reason on stderr.
    let out = call(&["add", "bad", "--wait", "--timeout", "30s"]);
    let (code, err) = code_and_stderr(&out);
    assert_eq!(code, Some(10), "{err}");
    assert!(
        err.contains("item 2 was dead-lettered: command exited with code 3: cannot do bad"),
        "{err}"
    );
    assert_eq!(call(&["result", "2"]).status.code(), Some(10));

    // Stdout past the 1 MiB cap fails the attempt instead of being cut.
    let out = call(&["add", "big", "--wait", "--timeout", "30s"]);
    let (code, err) = code_and_stderr(&out);
    assert_eq!(code, Some(10), "{err}");
    assert!(
        err.contains("more than the 1048576 bytes --keep-stdout keeps"),
        "{err}"
    );

    // A retried request gets the first answer, and runs once.
    let first = call(&[
        "add",
        "once",
        "--dedup-key",
        "req-1",
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert_eq!(text(&first.stdout), "ONCE");
    let again = call(&[
        "add",
        "other",
        "--dedup-key",
        "req-1",
        "--wait",
        "--timeout",
        "30s",
    ]);
    assert!(again.status.success(), "{}", text(&again.stderr));
    assert_eq!(text(&again.stdout), "ONCE");
    assert!(
        text(&again.stderr).contains("duplicate"),
        "{}",
        text(&again.stderr)
    );
    stop(worker);
}
