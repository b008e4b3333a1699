//! `workjournal cancel ID` of an item whose command runs under `work`, from
//! another process (SPEC 3, Cancelling; SPEC 9): the command's group gets
//! SIGTERM at once and SIGKILL after `--kill-grace`, and the item ends as
//! cancelled (`result` exits 12). On a file (the second process goes
//! through the socket `work` serves) and on Redis.

use std::path::PathBuf;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

/// A command that notes its start, and on SIGTERM notes it and exits 0.
const POLITE: &str =
    "trap 'echo term >> t.log; exit 0' TERM; echo start >> t.log; while :; do sleep 0.05; done";

/// A command that ignores SIGTERM (and so do its children): only SIGKILL
/// ends it.
const STUBBORN: &str = "trap '' TERM; echo start >> t.log; sleep 60; echo survived >> t.log";

struct Queue {
    dir: tempfile::TempDir,
    /// The global arguments naming the queue.
    target: Vec<String>,
}

impl Queue {
    fn file() -> Queue {
        let dir = tempfile::tempdir().unwrap();
        let db = dir.path().join("q.redb").display().to_string();
        Queue {
            dir,
            target: vec!["--db".into(), db],
        }
    }

    #[cfg(feature = "redis")]
    fn redis(url: &str) -> Queue {
        Queue {
            dir: tempfile::tempdir().unwrap(),
            target: vec![
                "--redis".into(),
                url.to_string(),
                "--namespace".into(),
                "cancel".into(),
            ],
        }
    }

    fn cmd(&self, args: &[&str]) -> Command {
        let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
        c.current_dir(self.dir.path())
            .args(&self.target)
            .args(args)
            .env_remove("RUST_LOG");
        c
    }

    fn run(&self, args: &[&str]) -> Output {
        self.cmd(args).stdin(Stdio::null()).output().unwrap()
    }

    fn ok(&self, args: &[&str]) -> String {
        let out = self.run(args);
        assert!(
            out.status.success(),
            "{args:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Run every waiting item once with a failing command and one
    /// delivery: each ends as a dead letter (`work` exits 10).
    fn dead_letter_all(&self) {
        let out = self.run(&[
            "work",
            "--exec",
            "exit 3",
            "--max-deliveries",
            "1",
            "--until-empty",
        ]);
        assert_eq!(out.status.code(), Some(10), "{out:?}");
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.log_path()).unwrap_or_default()
    }

    fn log_path(&self) -> PathBuf {
        self.dir.path().join("t.log")
    }

    fn work(&self, exec: &str, kill_grace: &str) -> Child {
        self.cmd(&[
            "work",
            "--exec",
            exec,
            "--until-empty",
            "--kill-grace",
            kill_grace,
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
    }
}

fn wait_for(what: &str, timeout: Duration, mut f: impl FnMut() -> bool) {
    let start = Instant::now();
    while !f() {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Wait up to `timeout` for `child` to exit; its stderr.
fn finished(mut child: Child, timeout: Duration) -> (std::process::ExitStatus, String) {
    let start = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            let mut err = String::new();
            if let Some(mut e) = child.stderr.take() {
                std::io::Read::read_to_string(&mut e, &mut err).unwrap();
            }
            return (status, err);
        }
        if start.elapsed() > timeout {
            let _ = child.kill();
            panic!("work did not finish within {timeout:?}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A running command's item is cancelled from another process: SIGTERM
/// reaches it (its trap runs), the item ends as cancelled, `work` says so
/// and stops (nothing is left), and `result` exits 12.
fn a_running_command_is_stopped_and_its_item_cancelled(q: &Queue) {
    assert_eq!(q.ok(&["add", "job"]).trim(), "1");
    let worker = q.work(POLITE, "10s");
    wait_for("the command to start", Duration::from_secs(20), || {
        q.log().contains("start")
    });
    let out = q.ok(&["cancel", "1"]);
    assert!(out.starts_with("cancelling 1"), "{out}");
    let (status, err) = finished(worker, Duration::from_secs(20));
    assert!(status.success(), "work: {status}: {err}");
    assert!(err.contains("item 1 (delivery 1) was cancelled"), "{err}");
    assert!(err.contains("1 cancelled"), "{err}");
    assert_eq!(q.log(), "start\nterm\n");
    let out = q.run(&["result", "1"]);
    assert_eq!(out.status.code(), Some(12), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("item 1 was cancelled"));
    // Ended: a second cancel finds nothing (exit 9), and the queue is empty.
    assert_eq!(q.run(&["cancel", "1"]).status.code(), Some(9));
    let stats: serde_json::Value = serde_json::from_str(&q.ok(&["stats", "--json"])).unwrap();
    assert_eq!(
        (stats["pending"].as_u64(), stats["dead_letters"].as_u64()),
        (Some(0), Some(0))
    );
}

/// A command that ignores SIGTERM is killed after `--kill-grace`.
fn a_command_that_ignores_sigterm_is_killed_after_the_grace(q: &Queue) {
    assert_eq!(q.ok(&["add", "job"]).trim(), "1");
    let worker = q.work(STUBBORN, "300ms");
    wait_for("the command to start", Duration::from_secs(20), || {
        q.log().contains("start")
    });
    let cancelled_at = Instant::now();
    q.ok(&["cancel", "1"]);
    let (status, err) = finished(worker, Duration::from_secs(20));
    assert!(status.success(), "work: {status}: {err}");
    // Killed long before its 60 s sleep ended.
    assert!(cancelled_at.elapsed() < Duration::from_secs(30));
    assert_eq!(q.log(), "start\n");
    assert_eq!(q.run(&["result", "1"]).status.code(), Some(12));
}

/// A waiting item is cancelled at once; a dead letter is refused.
fn a_waiting_item_is_cancelled_and_a_dead_letter_refused(q: &Queue) {
    assert_eq!(q.ok(&["add", "later", "--delay", "1h"]).trim(), "1");
    assert_eq!(q.ok(&["cancel", "1"]).trim(), "cancelled 1");
    assert_eq!(q.run(&["result", "1"]).status.code(), Some(12));
    assert_eq!(q.ok(&["add", "bad"]).trim(), "2");
    q.dead_letter_all();
    let out = q.run(&["cancel", "2"]);
    assert_eq!(out.status.code(), Some(7), "{out:?}");
    assert!(String::from_utf8_lossy(&out.stderr).contains("dead letter"));
    assert_eq!(q.run(&["cancel", "99"]).status.code(), Some(9));
}

#[test]
fn file_a_running_command_is_stopped_and_its_item_cancelled() {
    a_running_command_is_stopped_and_its_item_cancelled(&Queue::file());
}

#[test]
fn file_a_command_that_ignores_sigterm_is_killed_after_the_grace() {
    a_command_that_ignores_sigterm_is_killed_after_the_grace(&Queue::file());
}

#[test]
fn file_a_waiting_item_is_cancelled_and_a_dead_letter_refused() {
    a_waiting_item_is_cancelled_and_a_dead_letter_refused(&Queue::file());
}

#[cfg(feature = "redis")]
#[test]
fn redis_a_running_command_is_stopped_and_its_item_cancelled() {
    let server = workjournal::testing::RedisServer::start().unwrap();
    a_running_command_is_stopped_and_its_item_cancelled(&Queue::redis(&server.url()));
}

#[cfg(feature = "redis")]
#[test]
fn redis_a_waiting_item_is_cancelled_and_a_dead_letter_refused() {
    let server = workjournal::testing::RedisServer::start().unwrap();
    a_waiting_item_is_cancelled_and_a_dead_letter_refused(&Queue::redis(&server.url()));
}

/// `promote` and `remove` of one item from the command line.
#[test]
fn promote_and_remove_one_item() {
    let q = Queue::file();
    assert_eq!(q.ok(&["add", "a", "--delay", "1h"]).trim(), "1");
    assert_eq!(q.ok(&["add", "b"]).trim(), "2");
    assert_eq!(q.ok(&["promote", "1"]).trim(), "promoted 1");
    assert_eq!(q.run(&["promote", "1"]).status.code(), Some(9));
    assert_eq!(q.ok(&["remove", "2"]).trim(), "removed 2");
    assert_eq!(q.run(&["remove", "2"]).status.code(), Some(9));
    let out = q.ok(&["peek"]);
    assert!(out.contains('a') && !out.contains('b'), "{out}");
}

/// The ids `peek` lists, in claim order.
fn peek_ids(q: &Queue) -> Vec<String> {
    q.ok(&["peek"])
        .lines()
        .filter_map(|l| l.split('\t').next().map(str::to_string))
        .collect()
}

/// `update` of one item from the command line (SPEC 3, Updating): a new
/// priority re-ranks it, `--delay 0s` makes a delayed item due, a new
/// payload is what runs; no change is a usage error, an unknown id exit
/// 9, a dead letter exit 7.
#[test]
fn update_one_item() {
    let q = Queue::file();
    assert_eq!(q.ok(&["add", "a"]).trim(), "1");
    assert_eq!(q.ok(&["add", "b"]).trim(), "2");
    assert_eq!(q.ok(&["add", "c", "--delay", "1h"]).trim(), "3");
    assert_eq!(peek_ids(&q), ["1", "2"]);
    assert_eq!(
        q.ok(&["update", "2", "--priority", "3"]).trim(),
        "updated 2"
    );
    assert_eq!(peek_ids(&q), ["2", "1"]);
    assert_eq!(q.ok(&["update", "3", "--delay", "0s"]).trim(), "updated 3");
    assert_eq!(peek_ids(&q), ["3", "2", "1"]);
    assert_eq!(
        q.ok(&["update", "1", "--payload", "a2"]).trim(),
        "updated 1"
    );
    let peeked = q.ok(&["peek"]);
    assert!(peeked.contains("a2"), "{peeked}");
    assert_eq!(q.run(&["update", "1"]).status.code(), Some(2));
    assert_eq!(
        q.run(&[
            "update",
            "1",
            "--delay",
            "1s",
            "--at",
            "2030-01-02T03:04:05Z"
        ])
        .status
        .code(),
        Some(2)
    );
    assert_eq!(
        q.run(&["update", "99", "--priority", "1"]).status.code(),
        Some(9)
    );
    q.dead_letter_all();
    let refused = q.run(&["update", "1", "--priority", "1"]);
    assert_eq!(refused.status.code(), Some(7), "{refused:?}");
    let err = String::from_utf8_lossy(&refused.stderr);
    assert!(err.contains("dead letter"), "{err}");
}

/// SPEC 9, `list`: one page of a state, the finished items kept
/// (SPEC 3, History) included: an item run with `--keep-stdout` is
/// listed as completed with its result, a cancelled one as cancelled, a
/// dead letter with its reason; `--json` carries the same, a bad state is
/// a usage error, and a page that is not the last says where the next
/// one starts.
#[test]
fn list_shows_each_state_and_the_finished_items() {
    let q = Queue::file();
    assert_eq!(q.ok(&["add", "print poster"]).trim(), "1");
    let out = q.run(&[
        "work",
        "--exec",
        "echo done",
        "--keep-stdout",
        "--until-empty",
    ]);
    assert!(out.status.success(), "{out:?}");
    assert_eq!(q.ok(&["add", "old export"]).trim(), "2");
    assert_eq!(q.ok(&["cancel", "2"]).trim(), "cancelled 2");
    assert_eq!(q.ok(&["add", "bad"]).trim(), "3");
    q.dead_letter_all();
    for p in ["w1", "w2", "w3"] {
        q.ok(&["add", p]);
    }

    let done = q.ok(&["list", "--state", "completed"]);
    let cols: Vec<&str> = done.trim().split('\t').collect();
    assert_eq!(cols.len(), 6, "{done}");
    assert_eq!((cols[0], cols[2], cols[4]), ("1", "1", "print poster"));
    assert_eq!(cols[5], "done\\n", "{done}");
    let gone = q.ok(&["list", "--state", "cancelled"]);
    assert!(gone.starts_with("2\t"), "{gone}");
    assert!(gone.contains("old export"), "{gone}");
    let dead = q.ok(&["list", "--state", "dead_letter"]);
    assert!(dead.contains("command exited with code 3"), "{dead}");

    // Pages: two of the backlog, then the rest from the offset given.
    let out = q.run(&["list", "--limit", "2"]);
    assert!(out.status.success());
    let first = String::from_utf8_lossy(&out.stdout).into_owned();
    assert_eq!(first.lines().count(), 2, "{first}");
    let err = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(err.trim(), "more: --offset 2");
    let rest = q.ok(&["list", "--offset", "2"]);
    assert!(rest.starts_with("6\t"), "{rest}");

    let v: serde_json::Value =
        serde_json::from_str(&q.ok(&["list", "--state", "completed", "--json"])).unwrap();
    let item = &v["items"][0];
    assert_eq!(item["id"], 1);
    assert_eq!(item["state"], "completed");
    assert_eq!(item["result"], "done\n");
    assert!(item["finished_at_ms"].as_u64().is_some(), "{v}");
    assert!(item["claimed_at_ms"].as_u64().is_some(), "{v}");
    assert_eq!(v["next_offset"], serde_json::Value::Null);

    let bad = q.run(&["list", "--state", "failed"]);
    assert_eq!(bad.status.code(), Some(2), "{bad:?}");
    let err = String::from_utf8_lossy(&bad.stderr);
    assert!(err.contains("dead_letter"), "{err}");
}
