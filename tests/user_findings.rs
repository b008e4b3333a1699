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

// Failed: after close() the memory queue still accepted add and stats (SPEC 3, Closing: every call is Closed).
#[tokio::test]
async fn memory_calls_after_close_are_closed() {
    let q = MemoryQueue::new(Config::default());
    q.close().await.unwrap();
    let r = q.add(NewItem::new(b"late".to_vec())).await;
    assert!(matches!(r, Err(Error::Closed)), "add after close: {r:?}");
}

// Failed: opening the file again right after dropping the last handle was Locked for ~30 ms (SPEC 3, Closing: dropping closes it).
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

// Failed: `EmbeddedQueue::open` on a device (`workjournal --db /dev/null add
// x`) read its length of 0 as "no file yet" and renamed the new queue over
// it, replacing /dev/null with a regular file; a FIFO was replaced the same
// way, and a read-only open of a FIFO blocked for a writer (SPEC 6, Creating a file).
#[cfg(all(feature = "embedded", unix))]
#[tokio::test]
async fn embedded_open_refuses_a_path_that_is_not_a_regular_file() {
    use std::os::unix::fs::FileTypeExt;
    use workjournal::EmbeddedOptions;
    let dir = tempfile::tempdir().unwrap();
    let socket = dir.path().join("q.sock");
    let _listener = std::os::unix::net::UnixListener::bind(&socket).unwrap();
    for read_only in [false, true] {
        let r = EmbeddedQueue::open_with(
            &socket,
            Config::default(),
            EmbeddedOptions::default().read_only(read_only),
        )
        .await;
        match r {
            Err(Error::Io { source, .. }) => {
                assert!(
                    source.to_string().contains("not a regular file"),
                    "{source}"
                )
            }
            other => panic!("read_only {read_only}: expected Io, got {other:?}"),
        }
        let kind = std::fs::symlink_metadata(&socket).unwrap().file_type();
        assert!(kind.is_socket(), "the socket was replaced");
    }
    // A FIFO (writable open only: a regression would block a read-only one).
    let fifo = dir.path().join("q.fifo");
    let made = std::process::Command::new("mkfifo")
        .arg(&fifo)
        .status()
        .expect("mkfifo (coreutils) is needed for this test");
    assert!(made.success());
    let r = EmbeddedQueue::open(&fifo, Config::default()).await;
    assert!(matches!(r, Err(Error::Io { .. })), "{r:?}");
    let kind = std::fs::symlink_metadata(&fifo).unwrap().file_type();
    assert!(kind.is_fifo(), "the FIFO was replaced");
}
