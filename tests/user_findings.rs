//! Regressions found by a new user's review: one test per bug, each named
//! for the behaviour the SPEC promises.

use std::time::Duration;

use workjournal::{ClaimFrom, Config, EmbeddedQueue, Error, MemoryQueue, NewItem, WorkQueue};

// Failed: claim(_, Duration::MAX, _) panicked with "overflow when adding duration to instant" (every backend).
#[tokio::test]
async fn claim_with_the_largest_wait_does_not_panic() {
    let q = MemoryQueue::new(Config::default());
    let task = tokio::spawn(async move {
        let _ = tokio::time::timeout(
            Duration::from_millis(100),
            q.claim(1, Duration::MAX, ClaimFrom::All),
        )
        .await;
    });
    assert!(
        task.await.is_ok(),
        "claim with wait = Duration::MAX panicked"
    );
}

// Failed: after close() the memory queue still accepted add and stats (SPEC 8, Closing: every call is Closed).
#[tokio::test]
async fn memory_calls_after_close_are_closed() {
    let q = MemoryQueue::new(Config::default());
    q.close().await.unwrap();
    let r = q.add(NewItem::new(b"late".to_vec())).await;
    assert!(matches!(r, Err(Error::Closed)), "add after close: {r:?}");
}

// Failed: opening the file again right after dropping the last handle was Locked for ~30 ms (SPEC 8: dropping closes it).
#[cfg(feature = "embedded")]
#[tokio::test]
async fn embedded_reopen_right_after_dropping_the_last_handle_is_not_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let q = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    drop(q);
    let again = EmbeddedQueue::open(&path, Config::default()).await;
    assert!(again.is_ok(), "reopen after drop: {again:?}");
}

// Failed: `workjournal step F --exec true --lease 0s` panicked ("`period` must be non-zero", exit 101) with a backtrace.
#[cfg(feature = "cli")]
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
