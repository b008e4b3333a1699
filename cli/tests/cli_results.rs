//! `workjournal add --wait`, `work --keep-stdout` and `workjournal result`:
//! the queue as a durable RPC from the shell (SPEC section 9), with the real
//! binary. A running `work` holds an embedded file, so the round trip runs
//! on Redis (a `redis-server` of the test harness).

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
        r#"input=$(cat); if [ "$input" = big ]; then head -c 1048577 /dev/zero; exit 0; fi; if [ "$input" = bad ]; then echo "cannot do $input" >&2; exit 3; fi; printf '%s' "$input" | tr a-z A-Z"#,
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
