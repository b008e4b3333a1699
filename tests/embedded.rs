//! Embedded-only behaviour: the file survives close and reopen, is locked
//! against a second handle, refuses damaged or foreign files without a
//! panic, and hands orphaned claims back after a reopen (SPEC sections 3,
//! 5 and 6).

use std::time::Duration;

use workjournal::testing::conformance::T0;
use workjournal::{
    ClaimFrom, Config, EmbeddedOptions, EmbeddedQueue, Error, ManualClock, NewItem, WorkQueue,
};

fn config(clock: &ManualClock) -> Config {
    Config::default().clock(clock.clone())
}

async fn open(path: &std::path::Path, clock: &ManualClock) -> EmbeddedQueue {
    EmbeddedQueue::open(path, config(clock)).await.unwrap()
}

#[tokio::test]
async fn every_state_survives_close_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    q.pause("p").await.unwrap();
    q.add(NewItem::new(b"parked".to_vec()).flow("p"))
        .await
        .unwrap();
    q.add(NewItem::new(b"pending".to_vec())).await.unwrap();
    q.add(NewItem::new(b"dead".to_vec())).await.unwrap();
    q.add(NewItem::new(b"backlog".to_vec()).dedup_key("k"))
        .await
        .unwrap();
    q.add_delayed(NewItem::new(b"due".to_vec()), T0)
        .await
        .unwrap();
    q.add_delayed(NewItem::new(b"delayed".to_vec()), T0 + 60_000)
        .await
        .unwrap();
    let c = q.claim(3, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.dead_letter(c[2].receipt, "broken").await.unwrap();
    q.retry(c[0].receipt, T0).await.unwrap();
    q.promote_due().await.unwrap();
    q.mark_done(2, "email").await.unwrap();
    let before = q.stats().await.unwrap();
    let peek_before = q.peek(10).await.unwrap();
    q.close().await.unwrap();
    assert!(matches!(q.stats().await, Err(Error::Closed)));

    let q = open(&path, &clock).await;
    assert_eq!(q.stats().await.unwrap(), before);
    assert_eq!(q.peek(10).await.unwrap(), peek_before);
    assert_eq!(q.paused_flows().await.unwrap(), vec!["p".to_string()]);
    assert_eq!(q.parked("p").await.unwrap(), 1);
    assert!(q.was_done(2, "email").await.unwrap());
    let dl = q.dead_letters(5).await.unwrap();
    assert_eq!(dl[0].reason, "broken");
    let dup = q
        .add(NewItem::new(b"again".to_vec()).dedup_key("k"))
        .await
        .unwrap();
    assert!(dup.duplicate);
    // Ids keep increasing across opens; they are never reused.
    let next = q.add(NewItem::new(b"new".to_vec())).await.unwrap();
    assert_eq!(next.id, 7);
}

#[tokio::test]
async fn a_second_open_of_the_same_file_is_locked() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    match EmbeddedQueue::open(&path, config(&clock)).await {
        Err(Error::Locked { path: p }) => assert!(p.ends_with("q.redb")),
        other => panic!("expected Locked, got {other:?}"),
    }
    // Another spelling of the same path is the same file.
    let other_spelling = dir.path().join(".").join("q.redb");
    assert!(matches!(
        EmbeddedQueue::open(&other_spelling, config(&clock)).await,
        Err(Error::Locked { .. })
    ));
    q.close().await.unwrap();
    let again = open(&path, &clock).await;
    again.close().await.unwrap();
}

#[tokio::test]
async fn dropping_the_last_handle_releases_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    drop(q);
    // The writer thread lets go of the file shortly after the last handle.
    let mut reopened = None;
    for _ in 0..100 {
        match EmbeddedQueue::open(&path, config(&clock)).await {
            Ok(q) => {
                reopened = Some(q);
                break;
            }
            Err(Error::Locked { .. }) => tokio::time::sleep(Duration::from_millis(10)).await,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    let q = reopened.expect("file released after the last handle was dropped");
    assert_eq!(q.stats().await.unwrap().backlog, 1);
}

async fn expect_corrupt(path: &std::path::Path, what: &str) {
    let clock = ManualClock::new(T0);
    match EmbeddedQueue::open(path, config(&clock)).await {
        Err(Error::Corrupt { .. }) => {}
        Ok(q) => {
            // A damage redb can repair is acceptable only if every read works.
            let r = q.stats().await;
            panic!("{what}: opened a damaged file, stats gave {r:?}");
        }
        Err(e) => panic!("{what}: expected Corrupt, got {e:?}"),
    }
}

#[tokio::test]
async fn a_file_that_is_not_a_queue_is_corrupt() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("notes.txt");
    std::fs::write(&text, "this is not a database\n".repeat(400)).unwrap();
    expect_corrupt(&text, "text file").await;
    // A valid redb file of another program is not a queue either.
    let other = dir.path().join("other.redb");
    {
        let db = redb::Database::create(&other).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let def: redb::TableDefinition<u64, u64> = redb::TableDefinition::new("accounts");
            let mut t = txn.open_table(def).unwrap();
            t.insert(1, 2).unwrap();
        }
        txn.commit().unwrap();
    }
    expect_corrupt(&other, "foreign redb file").await;
    // The files are left as they were.
    assert!(
        std::fs::read_to_string(&text)
            .unwrap()
            .starts_with("this is not")
    );
}

async fn make_queue_file(path: &std::path::Path) -> Vec<u8> {
    let clock = ManualClock::new(T0);
    let q = open(path, &clock).await;
    let items: Vec<NewItem> = (0..300).map(|i| NewItem::new(vec![i as u8; 100])).collect();
    q.add_batch(items).await.unwrap();
    let c = q.claim(50, Duration::ZERO, ClaimFrom::All).await.unwrap();
    for c in &c[..25] {
        q.ack(c.receipt).await.unwrap();
    }
    q.close().await.unwrap();
    std::fs::read(path).unwrap()
}

#[tokio::test]
async fn a_truncated_file_is_corrupt_not_a_panic() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let bytes = make_queue_file(&path).await;
    for keep in [bytes.len() / 2, 4096, 600, 10] {
        std::fs::write(&path, &bytes[..keep]).unwrap();
        expect_corrupt(&path, &format!("truncated to {keep} bytes")).await;
    }
}

#[tokio::test]
async fn bit_flips_give_corrupt_or_a_working_queue_never_a_panic() {
    // The default open inside the verification interval trusts the file
    // (the damage is found when an operation reads it); `verify_on_open`
    // checks it whole first. Neither lets a panic out.
    for (name, options) in [
        ("scheduled", EmbeddedOptions::default()),
        (
            "every open",
            EmbeddedOptions::default().verify_on_open(true),
        ),
    ] {
        bit_flips_with(name, options).await;
    }
}

async fn bit_flips_with(name: &str, options: EmbeddedOptions) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let bytes = make_queue_file(&path).await;
    let clock = ManualClock::new(T0);
    // Flip one bit at offsets spread over the file: the header, the region
    // headers and data pages. Each open either refuses with a clear error
    // or gives a queue whose reads and claims answer without panicking.
    let step = (bytes.len() / 61).max(1);
    let mut refused = 0;
    for offset in (0..bytes.len()).step_by(step) {
        let mut damaged = bytes.clone();
        damaged[offset] ^= 0x10;
        std::fs::write(&path, &damaged).unwrap();
        match EmbeddedQueue::open_with(&path, config(&clock), options.clone()).await {
            Ok(q) => {
                let _ = q.stats().await;
                let _ = q.claim(5, Duration::ZERO, ClaimFrom::All).await;
                let _ = q.peek(5).await;
                q.close().await.unwrap();
            }
            Err(Error::Corrupt { .. }) => refused += 1,
            Err(e) => panic!("{name}: flip at {offset}: expected Corrupt, got {e:?}"),
        }
    }
    assert!(refused > 0, "{name}: no damaged file was refused");
}

/// The meta counter `key` of the closed queue file at `path`.
fn meta(path: &std::path::Path, key: &str) -> Option<u64> {
    use redb::ReadableDatabase;
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let t = txn.open_table(def).unwrap();
    t.get(key).unwrap().map(|v| v.value())
}

fn wall_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64
}

#[tokio::test]
async fn the_whole_file_is_verified_on_its_schedule_not_at_every_open() {
    const KEY: &str = "verified_at_ms";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let reopen = |options: EmbeddedOptions| {
        let (path, clock) = (path.clone(), clock.clone());
        async move {
            let q = EmbeddedQueue::open_with(&path, config(&clock), options)
                .await
                .unwrap();
            assert_eq!(q.stats().await.unwrap().backlog, 1, "the item is kept");
            q.close().await.unwrap();
        }
    };
    // A new file is verified (there is no earlier verification) and says when.
    let before = wall_ms();
    let q = open(&path, &clock).await;
    q.add(NewItem::new(b"kept".to_vec())).await.unwrap();
    q.close().await.unwrap();
    let first = meta(&path, KEY).expect("a new file records its verification");
    assert!(
        first >= before && first <= wall_ms(),
        "{first} not in [{before}, now]"
    );
    // Inside the interval, an open trusts the file and writes no new time.
    reopen(EmbeddedOptions::default()).await;
    assert_eq!(meta(&path, KEY), Some(first));
    // `verify_on_open(false)` never verifies by schedule, however old.
    set_meta(&path, KEY, 5);
    reopen(EmbeddedOptions::default().verify_on_open(false)).await;
    assert_eq!(meta(&path, KEY), Some(5));
    // Older than the interval (a day by default): verified again.
    let before = wall_ms();
    reopen(EmbeddedOptions::default()).await;
    let again = meta(&path, KEY).unwrap();
    assert!(again >= before, "a day-old verification is redone");
    // A time ahead of the system clock (a clock set back) is not trusted.
    set_meta(&path, KEY, wall_ms() + 86_400_000);
    let before = wall_ms();
    reopen(EmbeddedOptions::default()).await;
    let ahead = meta(&path, KEY).unwrap();
    assert!(
        ahead >= before && ahead <= wall_ms(),
        "a time ahead is redone"
    );
    // A short interval runs out, and `verify_on_open(true)` verifies at
    // every open whatever the record says.
    set_meta(&path, KEY, wall_ms() - 50);
    let before = wall_ms();
    reopen(EmbeddedOptions::default().verify_interval(Duration::from_millis(10))).await;
    assert!(meta(&path, KEY).unwrap() >= before);
    set_meta(&path, KEY, wall_ms() - 1);
    let before = wall_ms();
    reopen(EmbeddedOptions::default().verify_on_open(true)).await;
    assert!(meta(&path, KEY).unwrap() >= before);
    // A read-only open verifies when due too, but writes nothing.
    set_meta(&path, KEY, 5);
    reopen(EmbeddedOptions::default().read_only(true)).await;
    assert_eq!(meta(&path, KEY), Some(5));
}

#[tokio::test]
async fn orphaned_claims_are_reclaimed_after_reopen_with_one_more_delivery() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    for p in ["a", "b", "c"] {
        q.add(NewItem::new(p.as_bytes().to_vec())).await.unwrap();
    }
    let claimed = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.close().await.unwrap();

    let q = open(&path, &clock).await;
    // No time has passed, yet the claims of the closed handle are stale.
    let r = q
        .reclaim(Duration::from_secs(3600), 10)
        .await
        .map(|r| r.claimed)
        .unwrap();
    assert_eq!(
        r.iter().map(|c| c.item.id).collect::<Vec<_>>(),
        claimed.iter().map(|c| c.item.id).collect::<Vec<_>>()
    );
    assert!(r.iter().all(|c| c.item.deliveries == 2));
    for c in &claimed {
        assert!(q.ack(c.receipt).await.unwrap_err().is_lease_lost());
    }
    // A claim of this open is not an orphan.
    let fresh = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert!(
        q.reclaim(Duration::from_secs(3600), 10)
            .await
            .map(|r| r.claimed)
            .unwrap()
            .is_empty()
    );
    q.ack(fresh[0].receipt).await.unwrap();
}

/// Write `key = value` into the `meta` table of the closed queue file at
/// `path`, as another build would.
/// SPEC 6, Verification: an open that did not finish (its marker
/// `NAME-opening` is still there: the process aborted inside redb, was
/// killed or lost power while it opened) makes the next open verify the
/// whole file whatever the schedule, even with `verify_on_open(false)`.
/// A successful open removes the marker; a read-only open reads it and
/// neither makes nor removes it; an open refused as `Locked` leaves the
/// holder's marker alone.
#[tokio::test]
async fn an_open_that_did_not_finish_makes_the_next_one_verify() {
    const KEY: &str = "verified_at_ms";
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let marker = dir.path().join("q.redb-opening");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    q.add(NewItem::new(b"kept".to_vec())).await.unwrap();
    assert!(!marker.exists(), "a finished open leaves no marker");
    q.close().await.unwrap();
    let trusting = || EmbeddedOptions::default().verify_on_open(false);
    // The marker an open that died leaves behind.
    set_meta(&path, KEY, 5);
    std::fs::write(&marker, b"").unwrap();
    // Read-only: verifies (records nothing) and leaves the marker.
    let q = EmbeddedQueue::open_with(&path, config(&clock), trusting().read_only(true))
        .await
        .unwrap();
    assert_eq!(q.stats().await.unwrap().backlog, 1);
    q.close().await.unwrap();
    assert!(
        marker.exists(),
        "a read-only open does not remove the marker"
    );
    assert_eq!(meta(&path, KEY), Some(5));
    // Writable, trusting by schedule: verifies, records it, removes the marker.
    let before = wall_ms();
    let q = EmbeddedQueue::open_with(&path, config(&clock), trusting())
        .await
        .unwrap();
    assert!(!marker.exists(), "the open finished: marker removed");
    // A second handle in this process is refused by the path claim before
    // the marker is looked at (another process's open would reach redb's
    // lock, and remove only a marker it made itself: not covered here).
    std::fs::write(&marker, b"").unwrap();
    let second = EmbeddedQueue::open_with(&path, config(&clock), trusting()).await;
    assert!(matches!(second, Err(Error::Locked { .. })), "{second:?}");
    assert!(
        marker.exists(),
        "a Locked open leaves a marker it did not make"
    );
    std::fs::remove_file(&marker).unwrap();
    assert_eq!(q.stats().await.unwrap().backlog, 1, "the item is kept");
    q.close().await.unwrap();
    let at = meta(&path, KEY).unwrap();
    assert!(
        at >= before,
        "verified because of the marker: {at} < {before}"
    );
    // Without a marker the trusting open verifies nothing.
    set_meta(&path, KEY, 5);
    let q = EmbeddedQueue::open_with(&path, config(&clock), trusting())
        .await
        .unwrap();
    q.close().await.unwrap();
    assert_eq!(meta(&path, KEY), Some(5));
    assert!(!marker.exists());
}

fn set_meta(path: &std::path::Path, key: &str, value: u64) {
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_write().unwrap();
    {
        let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
        let mut t = txn.open_table(def).unwrap();
        t.insert(key, value).unwrap();
    }
    txn.commit().unwrap();
}

#[tokio::test]
async fn a_newer_schema_is_refused_with_a_clear_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    open(&path, &clock).await.close().await.unwrap();
    set_meta(&path, "schema_version", 99);
    match EmbeddedQueue::open(&path, config(&clock)).await {
        Err(Error::Decode { detail, .. }) => assert!(detail.contains("99"), "{detail}"),
        other => panic!("expected Decode, got {other:?}"),
    }
}

/// Copy the queue file and its redo log as they are now (a process crash
/// leaves the page cache, so this is what the next open finds).
fn crash_copy(from: &std::path::Path, to: &std::path::Path) {
    std::fs::copy(from, to).unwrap();
    let log = |p: &std::path::Path| {
        let mut s = p.as_os_str().to_os_string();
        s.push("-redo");
        std::path::PathBuf::from(s)
    };
    std::fs::copy(log(from), log(to)).unwrap();
}

// SPEC 6, the redo log: an operation is on disk once its record is synced.
// What a crash leaves of a real file (redb at its last checkpoint, the
// log holding the rest) opens with every operation replayed; a log left
// by another file of the same name is never replayed into a new one; and
// the `redo_log` key, which schema-2 builds of the priority change refused,
// is this build's own.
#[tokio::test]
async fn a_crash_copy_replays_the_log_and_a_stale_log_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let mut ids = Vec::new();
    for i in 0..5u8 {
        ids.push(q.add(NewItem::new(vec![i; 700])).await.unwrap().id);
    }
    let held = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.ack(held[0].receipt).await.unwrap();
    let crashed = dir.path().join("crashed.redb");
    crash_copy(&path, &crashed);
    q.close().await.unwrap();

    let c = open(&crashed, &clock).await;
    let st = c.stats().await.unwrap();
    assert_eq!((st.backlog, st.pending), (3, 1), "{st:?}");
    let orphan = c
        .reclaim(Duration::from_secs(3600), 5)
        .await
        .unwrap()
        .claimed;
    assert_eq!(orphan[0].item.id, held[1].item.id);
    c.close().await.unwrap();

    // A new queue where the crashed one's log still lies: nothing of it.
    let fresh = dir.path().join("fresh.redb");
    let mut stale = fresh.as_os_str().to_os_string();
    stale.push("-redo");
    let mut old_log = crashed.as_os_str().to_os_string();
    old_log.push("-redo");
    std::fs::copy(&old_log, &stale).unwrap();
    let f = open(&fresh, &clock).await;
    assert_eq!(f.stats().await.unwrap().backlog, 0, "a stale log replayed");
    f.close().await.unwrap();

    // A clean close leaves the queue file complete by itself.
    std::fs::remove_file(&old_log).unwrap();
    let again = open(&crashed, &clock).await;
    let st = again.stats().await.unwrap();
    assert_eq!((st.backlog, st.pending), (3, 1), "{st:?}");
    again.close().await.unwrap();
}

/// SPEC 6, the redo log, for the operations of schema 5: promote, remove
/// and back_off that returned `Ok` are in a crash copy (redb behind, the
/// log holding them) once replayed. The back-off's end is the one its op
/// computed from the writer's clock then, not one from the clock at the
/// replay.
#[tokio::test]
async fn a_crash_copy_replays_promote_remove_and_back_off() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let timer = q
        .add_delayed(NewItem::new(b"timer".to_vec()), T0 + 60_000)
        .await
        .unwrap()
        .id;
    let big = q.add(NewItem::new(vec![9; 700])).await.unwrap().id;
    q.back_off("h", Duration::from_secs(10)).await.unwrap();
    let held = q
        .add(NewItem::new(b"held".to_vec()).flow("h"))
        .await
        .unwrap()
        .id;
    let kept = q
        .add(NewItem::new(b"kept".to_vec()).flow("h"))
        .await
        .unwrap()
        .id;
    // `big` goes pending; the flow's two items wait in its held lane.
    let got = q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got.iter().map(|g| g.item.id).collect::<Vec<_>>(), vec![big]);
    assert_eq!(q.dump_tables().await.unwrap()["held"].len(), 2);
    let large = q.add(NewItem::new(vec![8; 900])).await.unwrap().id;
    clock.advance(Duration::from_secs(1));
    assert!(q.promote(timer).await.unwrap());
    assert!(q.remove(held).await.unwrap());
    assert!(q.remove(large).await.unwrap());
    q.back_off("h", Duration::from_secs(20)).await.unwrap();
    let crashed = dir.path().join("crashed.redb");
    crash_copy(&path, &crashed);
    q.close().await.unwrap();
    drop(q);

    clock.advance(Duration::from_secs(5));
    let c = open(&crashed, &clock).await;
    let s = c.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.due, s.delayed, s.pending, s.limited),
        (2, 1, 0, 1, 1),
        "{s:?}"
    );
    let limits = c.flow_limits().await.unwrap();
    assert_eq!(limits[0].backoff_until_ms, Some(T0 + 21_000));
    assert_eq!(limits[0].held, 1);
    let tables = c.dump_tables().await.unwrap();
    // The large payload's row went with the removed item.
    let row = format!("{large} =");
    assert!(tables["payloads"].iter().all(|r| !r.starts_with(&row)));
    assert_eq!(c.audit().await.unwrap().len(), 3);
    let got = c.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(
        got.iter().map(|g| g.item.id).collect::<Vec<_>>(),
        vec![timer]
    );
    assert_eq!(got[0].item.not_before_ms, Some(T0 + 1_000));
    clock.advance(Duration::from_secs(20));
    let got = c.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(
        got.iter().map(|g| g.item.id).collect::<Vec<_>>(),
        vec![kept]
    );
    c.close().await.unwrap();
}

#[tokio::test]
async fn a_schema_1_file_migrates_at_open_keeping_every_item_and_its_order() {
    use workjournal::testing::{V1Item, write_schema1_fixture};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("old.redb");
    let v1 = |flow: &str, payload: Vec<u8>, enq: u64, nb: Option<u64>, state| V1Item {
        flow: flow.to_string(),
        payload,
        enqueued_at_ms: enq,
        not_before_ms: nb,
        state,
    };
    let big = vec![7u8; 4096];
    write_schema1_fixture(
        &path,
        &[
            // Position order, not enqueue order: item 1 was redriven to the
            // tail before the file was left (its enqueue time is the oldest).
            v1("", b"b1".to_vec(), T0 - 5_000, None, "backlog"),
            v1("", big.clone(), T0 - 9_000, None, "backlog"),
            v1("f", b"b3".to_vec(), T0 - 8_000, None, "backlog"),
            v1("", b"due".to_vec(), T0 - 7_000, Some(T0 - 6_000), "due"),
            v1(
                "",
                b"later".to_vec(),
                T0 - 1_000,
                Some(T0 + 60_000),
                "delayed",
            ),
            v1("", b"dead".to_vec(), T0 - 3_000, None, "dead"),
        ],
    )
    .unwrap();
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let located = q.audit().await.unwrap();
    assert_eq!(located.len(), 6);
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.due, s.delayed, s.dead_letters), (4, 1, 1, 1));
    // A new tier-0 item goes behind the migrated ones; a high tier may not
    // overtake items that have waited longer than its tiers are worth.
    q.add(NewItem::new(b"new".to_vec())).await.unwrap();
    let peeked: Vec<Vec<u8>> = q
        .peek(10)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.payload)
        .collect();
    let want: Vec<Vec<u8>> = vec![
        b"due".to_vec(),
        b"b1".to_vec(),
        big.clone(),
        b"b3".to_vec(),
        b"new".to_vec(),
    ];
    assert_eq!(peeked, want);
    let claimed = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let payloads: Vec<Vec<u8>> = claimed.iter().map(|c| c.item.payload.clone()).collect();
    assert_eq!(payloads, want);
    assert!(claimed.iter().all(|c| c.item.priority == 0));
    assert_eq!(claimed[2].item.id, 2);
    assert_eq!(
        q.dead_letters(5).await.unwrap()[0].item.payload,
        b"dead".to_vec()
    );
    q.close().await.unwrap();
    // The migration was committed: the next open is at the current schema already, and
    // the claims made before are orphans as after any reopen.
    let q = open(&path, &clock).await;
    assert_eq!(q.audit().await.unwrap().len(), 7);
    let back = q
        .reclaim(Duration::from_secs(3600), 10)
        .await
        .map(|r| r.claimed)
        .unwrap();
    assert_eq!(back.len(), 5);
    assert!(back.iter().any(|c| c.item.payload == big));
    q.close().await.unwrap();
}

#[tokio::test]
async fn many_concurrent_producers_share_commits_and_get_their_own_results() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let q = EmbeddedQueue::open(&path, Config::default().max_payload_bytes(10))
        .await
        .unwrap();
    let mut tasks = Vec::new();
    for i in 0..64u32 {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            // Every eighth producer sends a payload over the limit: it alone fails.
            let payload = if i % 8 == 0 {
                vec![0u8; 11]
            } else {
                vec![1u8; 4]
            };
            q.add(NewItem::new(payload)).await
        }));
    }
    let mut ok = std::collections::BTreeSet::new();
    let mut refused = 0;
    for t in tasks {
        match t.await.unwrap() {
            Ok(a) => {
                ok.insert(a.id);
            }
            Err(Error::InvalidInput(_)) => refused += 1,
            Err(e) => panic!("unexpected {e}"),
        }
    }
    assert_eq!(refused, 8);
    assert_eq!(ok.len(), 56);
    assert_eq!(q.stats().await.unwrap().backlog, 56);
}

#[tokio::test]
async fn compact_gives_space_back_and_keeps_the_items() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let q = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    let items: Vec<NewItem> = (0..2000).map(|_| NewItem::new(vec![7u8; 1024])).collect();
    q.add_batch(items).await.unwrap();
    let c = q.claim(1990, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.ack_batch(c.iter().map(|c| c.receipt).collect())
        .await
        .unwrap();
    let before = std::fs::metadata(&path).unwrap().len();
    q.compact().await.unwrap();
    let after = std::fs::metadata(&path).unwrap().len();
    assert!(
        after < before,
        "compact did not shrink the file: {before} -> {after}"
    );
    assert_eq!(q.stats().await.unwrap().backlog, 10);
}

/// Outcomes survive a reopen, and expired ones are purged by later writes
/// with their progress and chunks (SPEC 6): the file does not keep every
/// acked item's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn outcomes_survive_reopen_and_expired_ones_are_purged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let id = q.add(NewItem::new(b"job".to_vec())).await.unwrap().id;
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.send_chunk(c[0].receipt, b"part".to_vec()).await.unwrap();
    q.set_progress(c[0].receipt, b"half".to_vec())
        .await
        .unwrap();
    q.ack_with_result(c[0].receipt, b"answer".to_vec())
        .await
        .unwrap();
    q.close().await.unwrap();
    drop(q);
    let q = open(&path, &clock).await;
    let got = q.outcome(id).await.unwrap().unwrap();
    assert_eq!(got.result(), Some(&b"answer"[..]));
    assert_eq!(q.progress(id).await.unwrap(), Some(b"half".to_vec()));
    let tables = q.dump_tables().await.unwrap();
    for t in ["outcomes", "outcome_expiry", "progress", "chunks"] {
        assert_eq!(tables[t].len(), 1, "{t}: {tables:?}");
    }
    clock.advance(workjournal::DEFAULT_RESULT_TTL);
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let tables = q.dump_tables().await.unwrap();
    for t in ["outcomes", "outcome_expiry", "progress", "chunks"] {
        assert!(tables[t].is_empty(), "{t}: {tables:?}");
    }
}

/// SPEC 6, schema 3: the outcomes of plain acks go into ack runs, one row
/// and one expiry entry per run of up to 64 ids, not two rows per ack; they
/// survive a reopen and expired runs are purged with their items' progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn plain_acks_share_ack_runs_that_survive_reopen_and_are_purged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let items = (0..130u8).map(|i| NewItem::new(vec![i])).collect();
    let ids: Vec<u64> = q
        .add_batch(items)
        .await
        .unwrap()
        .iter()
        .map(|a| a.id)
        .collect();
    let c = q.claim(130, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.set_progress(c[70].receipt, b"half".to_vec())
        .await
        .unwrap();
    let mut receipts: Vec<_> = c.iter().map(|c| c.receipt).collect();
    let last = receipts.pop().unwrap();
    assert_eq!(q.ack_batch(receipts).await.unwrap(), 129);
    q.ack(last).await.unwrap();
    let tables = q.dump_tables().await.unwrap();
    // 1..=64, 65..=128, 129..=129 (one batch), then 130 (a single ack).
    assert_eq!(tables["ack_runs"].len(), 4, "{:?}", tables["ack_runs"]);
    assert_eq!(tables["ack_run_expiry"].len(), 4);
    assert!(tables["outcomes"].is_empty(), "{:?}", tables["outcomes"]);
    q.close().await.unwrap();
    drop(q);

    let q = open(&path, &clock).await;
    for &id in &ids {
        let got = q.outcome(id).await.unwrap().unwrap();
        assert_eq!((got.id, got.result(), got.at_ms), (id, Some(&b""[..]), T0));
    }
    assert_eq!(q.outcome(ids[129] + 1).await.unwrap(), None);
    assert_eq!(q.progress(ids[70]).await.unwrap(), Some(b"half".to_vec()));
    clock.advance(workjournal::DEFAULT_RESULT_TTL);
    assert_eq!(q.outcome(ids[0]).await.unwrap(), None);
    assert_eq!(q.progress(ids[70]).await.unwrap(), None);
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let tables = q.dump_tables().await.unwrap();
    for t in ["ack_runs", "ack_run_expiry", "progress"] {
        assert!(tables[t].is_empty(), "{t}: {tables:?}");
    }
}

/// The deferred ids the dump's `deferred` table names (bucket = bits).
fn deferred_ids(tables: &std::collections::BTreeMap<String, Vec<String>>) -> Vec<u64> {
    let mut out = Vec::new();
    for row in &tables["deferred"] {
        let (k, v) = row.split_once(" = ").unwrap();
        let (bucket, bits): (u64, u64) = (k.parse().unwrap(), v.parse().unwrap());
        out.extend(
            (0..64)
                .filter(|b| bits >> b & 1 == 1)
                .map(|b| bucket * 64 + b),
        );
    }
    out
}

/// A queue in a fresh temp dir holding `n` items of one byte, item `i` at
/// tier `tier(i)`, added in one batch.
async fn queue_with_tiers(n: u32, tier: impl Fn(u32) -> u8) -> (tempfile::TempDir, EmbeddedQueue) {
    let dir = tempfile::tempdir().unwrap();
    let q = open(&dir.path().join("q.redb"), &ManualClock::new(T0)).await;
    let items = (0..n)
        .map(|i| NewItem::new(vec![1]).priority(tier(i)))
        .collect();
    q.add_batch(items).await.unwrap();
    (dir, q)
}

/// Claim everything in batches of `batch` and ack each batch with
/// `ack_batch`; returns the ids in the order they were claimed.
async fn drain_in_batches(q: &EmbeddedQueue, batch: usize, max: usize) -> Vec<u64> {
    let mut ids = Vec::new();
    while ids.len() < max {
        let c = q
            .claim(batch.min(max - ids.len()), Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap();
        if c.is_empty() {
            break;
        }
        ids.extend(c.iter().map(|c| c.item.id));
        let n = c.len() as u64;
        assert_eq!(
            q.ack_batch(c.iter().map(|c| c.receipt).collect())
                .await
                .unwrap(),
            n
        );
    }
    ids
}

/// SPEC 6, schema 4: an `ack_batch` of ids far apart (a claim over ten
/// priority tiers takes every tenth) leaves the records for a sweep. The
/// items are gone for every reader (find, stats, claims, the audit) and
/// answer with their outcomes, across a reopen; a bucket of 64 ids is swept
/// once 56 of its ids wait, and `compact` sweeps the rest.
#[tokio::test]
async fn acks_of_spread_ids_defer_their_records_and_sweep_them_in_groups() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let items = (0..640u32)
        .map(|i| NewItem::new(i.to_be_bytes().to_vec()).priority((i % 10) as u8))
        .collect();
    q.add_batch(items).await.unwrap();
    let first = drain_in_batches(&q, 64, 64).await;
    assert!(first.windows(2).all(|w| w[1] == w[0] + 10), "{first:?}");
    let tables = q.dump_tables().await.unwrap();
    assert_eq!(deferred_ids(&tables), first);
    assert_eq!(tables["items"].len(), 576, "deferred records are left out");
    assert_eq!(q.audit().await.unwrap().len(), 576);
    // Acked: found only as a finished item (SPEC 3, History).
    assert_eq!(
        q.find(first[3]).await.unwrap().map(|l| l.state),
        Some(workjournal::ItemState::Completed)
    );
    assert_eq!(q.stats().await.unwrap().backlog, 576);
    let got = q.outcome(first[3]).await.unwrap().unwrap();
    assert_eq!(got.result(), Some(&b""[..]));
    q.close().await.unwrap();
    drop(q);

    let q = open(&path, &clock).await;
    assert_eq!(deferred_ids(&q.dump_tables().await.unwrap()), first);
    let completed = Some(workjournal::ItemState::Completed);
    assert_eq!(q.find(first[0]).await.unwrap().map(|l| l.state), completed);
    assert!(q.find(first[0] + 1).await.unwrap().is_some());
    // Seven more tiers: a bucket holds 48 to 52 of them, under 56.
    let more = drain_in_batches(&q, 64, 7 * 64).await;
    assert_eq!(deferred_ids(&q.dump_tables().await.unwrap()).len(), 512);
    let peeked: Vec<u64> = q.peek(1000).await.unwrap().iter().map(|i| i.id).collect();
    assert_eq!(peeked.len(), 128);
    for id in first.iter().chain(&more) {
        assert!(!peeked.contains(id));
        assert_eq!(
            q.find(*id).await.unwrap().map(|l| l.state),
            completed,
            "item {id}"
        );
    }
    // The last two tiers fill every bucket: each is swept, and only acks
    // after a bucket's sweep (and id 640, alone in its bucket) are left.
    drain_in_batches(&q, 64, 1000).await;
    let left = deferred_ids(&q.dump_tables().await.unwrap());
    assert!(
        left.len() <= 1 + 7 * 10,
        "{} deferred after ten tiers",
        left.len()
    );
    assert!(left.contains(&640));
    assert_eq!(q.stats().await.unwrap().backlog, 0);
    assert!(q.audit().await.unwrap().is_empty());
    assert!(q.dump_tables().await.unwrap()["items"].is_empty());
    // `compact` deletes what is left, durably.
    q.compact().await.unwrap();
    assert!(q.dump_tables().await.unwrap()["deferred"].is_empty());
    q.close().await.unwrap();
    drop(q);
    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(tables["deferred"].is_empty());
    assert!(
        !tables["meta"]
            .iter()
            .any(|r| r.starts_with("\"deferred_records\" = "))
    );
    assert!(q.audit().await.unwrap().is_empty());
    q.close().await.unwrap();
}

/// SPEC 6, schema 4: an `ack_batch` of dense ids sweeps the deferred
/// deletes in its range. One item in five at tier 1: its acks are five ids
/// apart (deferred, thirteen to a bucket, which never reaches 56); the
/// FIFO acks of the others then pass over every bucket and sweep it.
#[tokio::test]
async fn dense_acks_sweep_the_deferred_deletes_they_pass() {
    let (_dir, q) = queue_with_tiers(5000, |i| u8::from(i % 5 == 4)).await;
    drain_in_batches(&q, 500, 1000).await;
    assert_eq!(deferred_ids(&q.dump_tables().await.unwrap()).len(), 1000);
    // Half the tier-0 items: the buckets they passed are swept.
    drain_in_batches(&q, 500, 2000).await;
    let left = deferred_ids(&q.dump_tables().await.unwrap());
    assert!(left.iter().all(|&id| id > 2400), "{left:?}");
    assert!(left.len() >= 480, "{} deferred", left.len());
    assert_eq!(q.audit().await.unwrap().len(), 2000);
    drain_in_batches(&q, 500, 100_000).await;
    assert!(deferred_ids(&q.dump_tables().await.unwrap()).is_empty());
    assert!(q.audit().await.unwrap().is_empty());
    q.close().await.unwrap();
}

/// SPEC 6, schema 4: the file holds at most max(4096, 4 x live records)
/// deferred records; past that, the lowest buckets are swept whatever
/// their count.
#[tokio::test]
async fn deferred_records_stay_within_their_bound() {
    // Six tiers: every claim of 500 spans 3 000 ids (spread), and five
    // tiers fill a bucket to 50 to 54 ids, under 56.
    let (_dir, q) = queue_with_tiers(6000, |i| (i % 6) as u8).await;
    drain_in_batches(&q, 500, 4500).await;
    assert_eq!(deferred_ids(&q.dump_tables().await.unwrap()).len(), 4500);
    // At 5 000 deferred against 1 000 live, the bound is 4 096.
    drain_in_batches(&q, 500, 500).await;
    let left = deferred_ids(&q.dump_tables().await.unwrap());
    assert!(left.len() <= 4096, "{} deferred", left.len());
    assert!(left.len() > 4000, "swept more than the bound needs");
    assert!(*left.first().unwrap() > 64, "the lowest buckets go first");
    assert_eq!(q.audit().await.unwrap().len(), 1000);
    drain_in_batches(&q, 500, 100_000).await;
    assert!(q.audit().await.unwrap().is_empty());
    assert_eq!(q.stats().await.unwrap().backlog, 0);
    q.close().await.unwrap();
}

/// A schema-3 file opens as schema 7 (it has no deferred deletes), keeps
/// its items, and its acks of spread ids are deferred from then on.
#[tokio::test]
async fn a_schema_3_file_migrates_by_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let items = (0..40u32)
        .map(|i| NewItem::new(vec![1]).priority((i % 10) as u8))
        .collect();
    q.add_batch(items).await.unwrap();
    q.close().await.unwrap();
    drop(q);
    set_meta(&path, "schema_version", 3);

    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(
        tables["meta"].iter().any(|r| r == "\"schema_version\" = 8"),
        "{:?}",
        tables["meta"]
    );
    assert_eq!(tables["items"].len(), 40);
    let acked = drain_in_batches(&q, 4, 4).await;
    assert_eq!(deferred_ids(&q.dump_tables().await.unwrap()), acked);
    assert_eq!(q.audit().await.unwrap().len(), 36);
    q.close().await.unwrap();
}

/// SPEC 6, schema 5: a schema-4 file (made by this build, its version set
/// back) opens as schema 7 by its version alone, keeps every item in its
/// state, and takes the operations of schema 5 (promote, remove, the
/// atomic back-off) from then on, across a reopen.
#[tokio::test]
async fn a_schema_4_file_migrates_by_its_version() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let waiting = q.add(NewItem::new(b"waiting".to_vec())).await.unwrap().id;
    let later = q
        .add_delayed(NewItem::new(vec![7; 700]), T0 + 60_000)
        .await
        .unwrap()
        .id;
    q.close().await.unwrap();
    drop(q);
    set_meta(&path, "schema_version", 4);

    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(
        tables["meta"].iter().any(|r| r == "\"schema_version\" = 8"),
        "{:?}",
        tables["meta"]
    );
    assert_eq!(q.audit().await.unwrap().len(), 2);
    assert!(q.promote(later).await.unwrap());
    assert!(q.remove(waiting).await.unwrap());
    q.back_off("f", Duration::from_secs(5)).await.unwrap();
    q.close().await.unwrap();
    drop(q);

    let q = open(&path, &clock).await;
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.due, s.delayed), (1, 1, 0), "{s:?}");
    let limits = q.flow_limits().await.unwrap();
    assert_eq!(limits[0].backoff_until_ms, Some(T0 + 5_000));
    let got = q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!((got[0].item.id, got[0].item.payload.len()), (later, 700));
    q.close().await.unwrap();
}

/// SPEC 6: a file of a newer schema than this build's (here 9, one past
/// schema 8) is refused with `Decode` at open and its contents left as
/// they were (the version is not lowered, no item is touched), so that
/// the build that wrote it still opens it.
#[tokio::test]
async fn a_schema_9_file_is_refused_and_left_unchanged() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    q.add(NewItem::new(b"kept".to_vec())).await.unwrap();
    q.close().await.unwrap();
    drop(q);
    set_meta(&path, "schema_version", 9);
    match EmbeddedQueue::open(&path, config(&clock)).await {
        Err(Error::Decode { detail, .. }) => {
            assert!(detail.contains("schema version 9"), "{detail}");
            assert!(detail.contains("up to version 8"), "{detail}");
        }
        other => panic!("expected Decode, got {other:?}"),
    }
    // redb rewrites its own header and allocator pages at any open; what
    // the file holds is as it was: the version, and the item under it.
    assert_eq!(meta(&path, "schema_version"), Some(9));
    set_meta(&path, "schema_version", 8);
    let q = open(&path, &clock).await;
    let got = q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].item.payload, b"kept");
    q.close().await.unwrap();
}

/// SPEC section 9, read-only inspection: a read-only open sees every state
/// (pending claims of a process that did not close too), refuses every
/// change with `InvalidInput`, never writes the file, and never creates one.
#[tokio::test]
async fn a_read_only_open_reads_everything_and_writes_nothing() {
    use workjournal::EmbeddedOptions;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let ro = EmbeddedOptions::default().read_only(true);
    let missing = EmbeddedQueue::open_with(&path, config(&clock), ro.clone()).await;
    assert!(
        matches!(&missing, Err(Error::Io { source, .. }) if source.kind() == std::io::ErrorKind::NotFound),
        "{missing:?}"
    );
    assert!(!path.exists(), "a read-only open created the file");

    let q = open(&path, &clock).await;
    q.pause("p").await.unwrap();
    q.add(NewItem::new(b"parked".to_vec()).flow("p"))
        .await
        .unwrap();
    q.add(NewItem::new(b"pending".to_vec())).await.unwrap();
    q.add(NewItem::new(b"backlog".to_vec())).await.unwrap();
    q.add_delayed(NewItem::new(b"later".to_vec()), T0 + 60_000)
        .await
        .unwrap();
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(c.len(), 1);
    // Dropped without close: the claim stays pending, as after a crash.
    drop(q);

    // The open waits for the dropped handle's writer to let go of the file.
    let view = EmbeddedQueue::open_with(&path, config(&clock), ro.clone())
        .await
        .unwrap();
    let before = std::fs::read(&path).unwrap();
    let s = view.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.parked),
        (1, 1, 1, 1),
        "{s:?}"
    );
    let peeked = view.peek(10).await.unwrap();
    assert_eq!(peeked.len(), 1);
    assert_eq!(peeked[0].payload, b"backlog");
    assert_eq!(view.paused_flows().await.unwrap(), vec!["p".to_string()]);
    assert!(view.dead_letters(10).await.unwrap().is_empty());
    let refused = [
        view.add(NewItem::new(b"x".to_vec())).await.err(),
        view.pause("q").await.err(),
        view.purge_dead_letters().await.err(),
        view.claim(1, Duration::ZERO, ClaimFrom::All).await.err(),
        view.reclaim(Duration::ZERO, 10)
            .await
            .map(|r| r.claimed)
            .err(),
        view.compact().await.err(),
        view.promote(1).await.err(),
        view.remove(1).await.err(),
        view.back_off("q", Duration::from_secs(1)).await.err(),
    ];
    for e in refused {
        assert!(
            matches!(&e, Some(Error::InvalidInput(m)) if m.contains("read-only")),
            "{e:?}"
        );
    }
    view.close().await.unwrap();
    assert!(
        before == std::fs::read(&path).unwrap(),
        "the file was written"
    );

    // The writer finds everything where it was, the pending claim included.
    let q = open(&path, &clock).await;
    assert_eq!(q.stats().await.unwrap().pending, 1);
    q.close().await.unwrap();
}

// Failed: a new file was placed with a hard link only, so on FAT/exFAT SD
// cards and FUSE mounts that refuse links the first open failed with `Io`.
#[tokio::test]
async fn a_new_file_is_created_where_hard_links_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let options = workjournal::EmbeddedOptions::default().refuse_hard_links(true);
    let q = EmbeddedQueue::open_with(&path, Config::default(), options.clone())
        .await
        .unwrap();
    let id = q.add(NewItem::new(b"kept".to_vec())).await.unwrap().id;
    q.close().await.unwrap();
    drop(q);
    // Only the queue file and its redo log are left: the temporary one was
    // renamed into place.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, vec!["q.redb".to_string(), "q.redb-redo".to_string()]);
    let q = EmbeddedQueue::open_with(&path, Config::default(), options)
        .await
        .unwrap();
    let c = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(c[0].item.id, id);
    // A crash between claiming the name and the rename leaves an empty
    // file: the next open (links refused again) makes a queue of it.
    let empty = dir.path().join("empty.redb");
    std::fs::File::create(&empty).unwrap();
    let e = EmbeddedQueue::open_with(
        &empty,
        Config::default(),
        workjournal::EmbeddedOptions::default().refuse_hard_links(true),
    )
    .await
    .unwrap();
    assert_eq!(e.stats().await.unwrap().backlog, 0);
}

/// The batched claim and `ack_batch` (range passes over the indexes,
/// appended leases and outcomes) move items exactly as one at a time does:
/// checked against the memory model on batches far larger than the model
/// tests draw, with priority tiers (ids out of order), payloads stored
/// outside the record, two claim times, a stale and a repeated receipt,
/// and orphaned leases after a reopen.
#[tokio::test]
async fn large_batches_move_items_as_the_model_does() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let e = open(&path, &clock).await;
    let m = workjournal::MemoryQueue::new(config(&clock));
    let items = |base: usize| -> Vec<NewItem> {
        (0..150)
            .map(|k| {
                let n = base + k;
                let size = if n.is_multiple_of(10) { 700 } else { 40 };
                NewItem::new(vec![(n % 251) as u8; size])
                    .flow(["", "x", "y"][n % 3])
                    .priority(if n.is_multiple_of(4) { 2 } else { 0 })
            })
            .collect()
    };
    assert_eq!(
        e.add_batch(items(0)).await.unwrap(),
        m.add_batch(items(0)).await.unwrap()
    );
    let mut held = Vec::new();
    for round in 0..3 {
        let ce = e.claim(40, Duration::ZERO, ClaimFrom::All).await.unwrap();
        let cm = m.claim(40, Duration::ZERO, ClaimFrom::All).await.unwrap();
        assert_eq!(ce, cm, "claim {round}");
        held.extend(ce.into_iter().map(|c| c.receipt));
        clock.advance(Duration::from_millis(700));
    }
    // A stale receipt (its item retried) and a repeated one.
    e.retry(held[5], T0).await.unwrap();
    m.retry(held[5], T0).await.unwrap();
    let mut batch: Vec<_> = held[..70].to_vec();
    batch.push(held[0]);
    batch.push(held[3]);
    assert_eq!(
        e.ack_batch(batch.clone()).await.unwrap(),
        m.ack_batch(batch).await.unwrap()
    );
    // Acked in reverse, ids far apart: the one-by-one passes.
    let rest: Vec<_> = held[70..].iter().rev().step_by(2).copied().collect();
    assert_eq!(
        e.ack_batch(rest.clone()).await.unwrap(),
        m.ack_batch(rest).await.unwrap()
    );
    // More adds behind the outcomes, then claims and acks again.
    assert_eq!(
        e.add_batch(items(150)).await.unwrap(),
        m.add_batch(items(150)).await.unwrap()
    );
    let ce = e.claim(100, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let cm = m.claim(100, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(ce, cm);
    let receipts: Vec<_> = ce.iter().map(|c| c.receipt).collect();
    assert_eq!(
        e.ack_batch(receipts.clone()).await.unwrap(),
        m.ack_batch(receipts).await.unwrap()
    );
    for c in &cm {
        assert_eq!(
            e.outcome(c.item.id).await.unwrap(),
            m.outcome(c.item.id).await.unwrap()
        );
    }
    let (se, sm) = (e.stats().await.unwrap(), m.stats().await.unwrap());
    assert_eq!((se.durable, sm.durable), (true, false));
    assert_eq!(
        format!("{se:?}"),
        format!("{sm:?}").replace("durable: false", "durable: true")
    );
    assert_eq!(e.peek(500).await.unwrap(), m.peek(500).await.unwrap());
    // Every index agrees with every other (an id in two states, or named
    // by an index without its record, fails the audit).
    let located = e.audit().await.unwrap();
    assert_eq!(located.len() as u64, {
        let s = m.stats().await.unwrap();
        s.backlog + s.delayed + s.pending + s.parked + s.dead_letters
    });

    // Orphaned leases (a reopen) are acked in a batch like any other.
    let orphaned = e.claim(30, Duration::ZERO, ClaimFrom::All).await.unwrap();
    e.close().await.unwrap();
    let e = open(&path, &clock).await;
    let receipts: Vec<_> = orphaned.iter().map(|c| c.receipt).collect();
    assert_eq!(e.ack_batch(receipts).await.unwrap(), 30);
    // What is reclaimed is what was still pending before the claim of 30
    // (the half of `rest` not acked), none of the batch just acked.
    let reclaimed = e
        .reclaim(Duration::from_secs(3600), 100)
        .await
        .map(|r| r.claimed)
        .unwrap();
    assert_eq!(reclaimed.len(), 25);
    assert!(
        reclaimed
            .iter()
            .all(|r| orphaned.iter().all(|o| o.item.id != r.item.id))
    );
    e.audit().await.unwrap();
    e.close().await.unwrap();
}

/// A lease of record version 1 (an earlier build's claim, which counted the
/// delivery in the item record and wrote a lease without a count) is read
/// with the item record's count (SPEC 6): a file with such pending items
/// opens unchanged, and find, retry and reclaim count on from it.
#[tokio::test]
async fn a_version_1_lease_takes_its_count_from_the_item_record() {
    use redb::ReadableTable;
    type Record = (String, u64, Option<u64>, u32, u8, u32, Option<Vec<u8>>);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let q = open(&path, &clock).await;
    let a = q.add(NewItem::new(b"a".to_vec())).await.unwrap().id;
    let b = q.add(NewItem::new(b"b".to_vec())).await.unwrap().id;
    let claimed = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!(claimed.len(), 2);
    q.close().await.unwrap();
    drop(q);
    {
        // Rewrite both as the earlier build left them: the count (1) in the
        // item record, the lease without one.
        let config = bincode::config::standard();
        let db = redb::Database::create(&path).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let items_def: redb::TableDefinition<u64, &[u8]> = redb::TableDefinition::new("items");
            let pending_def: redb::TableDefinition<u64, &[u8]> =
                redb::TableDefinition::new("pending");
            let mut items = txn.open_table(items_def).unwrap();
            let mut pending = txn.open_table(pending_def).unwrap();
            for c in &claimed {
                let id = c.item.id;
                let bytes = items.get(id).unwrap().unwrap().value().to_vec();
                assert_eq!(bytes[0], 2, "item record version");
                let (mut rec, _): (Record, usize) =
                    bincode::decode_from_slice(&bytes[1..], config).unwrap();
                assert_eq!(rec.3, 0, "a claim leaves the item record's count alone");
                rec.3 = 1;
                let mut out = vec![2u8];
                out.extend(bincode::encode_to_vec(&rec, config).unwrap());
                items.insert(id, out.as_slice()).unwrap();
                let bytes = pending.get(id).unwrap().unwrap().value().to_vec();
                assert_eq!(bytes[0], 4, "lease record version");
                // Version 4: last touch, lease, lane, count, claim time,
                // cancel mark.
                let (lease, _): ((u64, u64, u8, u32, u64, bool), usize) =
                    bincode::decode_from_slice(&bytes[1..], config).unwrap();
                assert_eq!(lease.3, 1, "the lease carries the count");
                let mut v1 = vec![1u8];
                v1.extend(bincode::encode_to_vec((lease.0, lease.1, lease.2), config).unwrap());
                pending.insert(id, v1.as_slice()).unwrap();
            }
        }
        txn.commit().unwrap();
    }
    let q = open(&path, &clock).await;
    let found = q.find(a).await.unwrap().unwrap();
    assert_eq!(found.item.deliveries, 1);
    let ra = claimed.iter().find(|c| c.item.id == a).unwrap().receipt;
    q.retry(ra, T0).await.unwrap();
    q.promote_due().await.unwrap();
    let again = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
    assert_eq!((again[0].item.id, again[0].receipt.delivery), (a, 2));
    // b was pending at the close: an orphan, reclaimed with its count + 1.
    let reclaimed = q
        .reclaim(Duration::from_secs(3600), 10)
        .await
        .map(|r| r.claimed)
        .unwrap();
    let ids: Vec<_> = reclaimed
        .iter()
        .map(|c| (c.item.id, c.receipt.delivery))
        .collect();
    assert_eq!(ids, vec![(b, 2)]);
    q.audit().await.unwrap();
    q.close().await.unwrap();
}

/// The write transactions that find nothing expired do not look at the
/// expiry indexes (SPEC 6, "Expiry floors"), and that skips no
/// purge: done markers, dedup keys, outcomes and ack runs are kept while
/// they live and gone after the first write once they expired, also when
/// a read before that write purged them in a transaction it did not keep
/// (a batch of reads is never committed).
#[tokio::test]
async fn expired_entries_are_purged_after_writes_that_skipped_the_purge() {
    const EXPIRY: [&str; 4] = [
        "done_expiry",
        "dedup_expiry",
        "outcome_expiry",
        "ack_run_expiry",
    ];
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let ttl = Duration::from_secs(60);
    let q = EmbeddedQueue::open(
        &path,
        config(&clock)
            .done_ttl(ttl)
            .result_ttl(ttl)
            .dedup_window(ttl),
    )
    .await
    .unwrap();
    q.add(NewItem::new(b"keyed".to_vec()).dedup_key("k"))
        .await
        .unwrap();
    q.add(NewItem::new(b"plain".to_vec())).await.unwrap();
    let c = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let with_result = c[0].item.id;
    q.ack_with_result(c[0].receipt, b"answer".to_vec())
        .await
        .unwrap();
    q.ack(c[1].receipt).await.unwrap();
    q.mark_done(c[1].item.id, "step").await.unwrap();
    // Writes while everything lives: none of them loses an entry.
    for i in 0..5u8 {
        clock.advance(Duration::from_secs(5));
        q.add(NewItem::new(vec![i])).await.unwrap();
    }
    let tables = q.dump_tables().await.unwrap();
    for t in EXPIRY {
        assert_eq!(tables[t].len(), 1, "{t}: {tables:?}");
    }
    assert!(q.was_done(c[1].item.id, "step").await.unwrap());
    assert!(q.outcome(with_result).await.unwrap().is_some());

    clock.advance(ttl);
    // Reads first: each purges in a transaction that is then ended.
    q.stats().await.unwrap();
    assert!(q.outcome(with_result).await.unwrap().is_none());
    // The first write purges them for good.
    q.add(NewItem::new(b"later".to_vec())).await.unwrap();
    let tables = q.dump_tables().await.unwrap();
    for t in EXPIRY {
        assert!(tables[t].is_empty(), "{t}: {tables:?}");
    }
    for t in ["done", "dedup", "outcomes", "ack_runs"] {
        assert!(tables[t].is_empty(), "{t}: {tables:?}");
    }
    // A new entry after the purge is kept, and purged again in its turn.
    q.add(NewItem::new(b"keyed again".to_vec()).dedup_key("k"))
        .await
        .unwrap();
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    assert_eq!(q.dump_tables().await.unwrap()["dedup_expiry"].len(), 1);
    clock.advance(ttl);
    q.add(NewItem::new(b"y".to_vec())).await.unwrap();
    assert!(q.dump_tables().await.unwrap()["dedup_expiry"].is_empty());
}

/// SPEC 9 (`stats`, `peek`, `dead-letters`, `limits` and `result` never
/// write the file) and SPEC 3 (Clock steps). Regression: after an add
/// under a clock a day ahead, every look through a read-only open failed
/// with `append to the redo log: the redo log was opened read-only`
/// (exit 1 from the CLI) until some writing command ran: the read batch
/// found the clock stepped back and tried to keep the moved times.
#[tokio::test]
async fn looks_after_a_clock_step_back_never_write() {
    const DAY: u64 = 24 * 3600 * 1000;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let redo = dir.path().join("q.redb-redo");
    let clock = ManualClock::new(T0 + DAY);
    let q = open(&path, &clock).await;
    let id = q
        .add_delayed(NewItem::new(b"later".to_vec()), T0 + DAY + 5_000)
        .await
        .unwrap()
        .id;
    q.close().await.unwrap();
    let (file, log) = (std::fs::read(&path).unwrap(), std::fs::read(&redo).unwrap());
    // The clock is set right: a day back.
    clock.set(T0);
    let ro = EmbeddedQueue::open_with(
        &path,
        config(&clock),
        EmbeddedOptions::default().read_only(true),
    )
    .await
    .unwrap();
    let stats = ro.stats().await.unwrap();
    assert_eq!((stats.delayed, stats.backlog), (1, 0), "{stats:?}");
    assert!(ro.peek(10).await.unwrap().is_empty());
    assert!(ro.dead_letters(10).await.unwrap().is_empty());
    assert!(ro.flow_limits().await.unwrap().is_empty());
    assert!(ro.outcome(id).await.unwrap().is_none());
    // The looks saw the timer moved with the step: due 5 s from the new now.
    assert_eq!(ro.next_due().await.unwrap(), Some(T0 + 5_000));
    ro.close().await.unwrap();
    assert!(
        std::fs::read(&path).unwrap() == file,
        "the queue file was written"
    );
    assert!(
        std::fs::read(&redo).unwrap() == log,
        "the redo log was written"
    );
    // A writer moves the times itself, once, and keeps them.
    let q = open(&path, &clock).await;
    assert_eq!(q.next_due().await.unwrap(), Some(T0 + 5_000));
    q.close().await.unwrap();
}

/// SPEC 6, schema 6: `tests/fixtures/schema4_pending.redb`, made by a
/// schema-4 build of the command (`add a`, `add b`, a `work` killed while
/// it ran `a`, then `add c`, whose open wrote the claim into the file: `a`
/// is pending under a version-2 lease, `b` and `c` wait),
/// opens as schema 6 (and on, to the current schema). The old lease's one time, its last touch, reads as
/// its claim time too; a new claim keeps its claim time apart from its
/// heartbeats, also across a reopen (a version-3 lease).
#[tokio::test]
async fn a_schema_4_fixture_with_a_pending_claim_migrates_to_the_current_schema() {
    use workjournal::{ItemState, ListQuery};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    std::fs::copy(
        concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/fixtures/schema4_pending.redb"
        ),
        &path,
    )
    .unwrap();
    // Well after the fixture was made (December 2026).
    let later = 1_900_000_000_000;
    let clock = ManualClock::new(later);
    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(
        tables["meta"].iter().any(|r| r == "\"schema_version\" = 8"),
        "{:?}",
        tables["meta"]
    );
    let pending = q
        .list(ListQuery::new(ItemState::Pending))
        .await
        .unwrap()
        .items;
    assert_eq!(pending.len(), 1, "{pending:?}");
    assert_eq!(pending[0].item.payload, b"a".to_vec());
    let touched = pending[0].last_touch_ms.unwrap();
    assert_eq!(pending[0].claimed_at_ms, Some(touched));
    assert!(touched > 1_790_000_000_000 && touched < later, "{touched}");
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (2, 1), "{s:?}");
    assert_eq!(s.oldest_pending_age_ms, Some(later - touched));
    assert_eq!(s.oldest_touch_age_ms, Some(later - touched));
    // A reclaim is a new claim, written as a version-3 lease.
    let again = q.reclaim(Duration::ZERO, 5).await.unwrap().claimed;
    assert_eq!(again.len(), 1);
    assert_eq!(again[0].claimed_at_ms, later);
    clock.advance(Duration::from_secs(10));
    q.touch(vec![again[0].receipt]).await.unwrap();
    clock.advance(Duration::from_secs(5));
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.oldest_pending_age_ms, s.oldest_touch_age_ms),
        (Some(15_000), Some(5_000))
    );
    q.close().await.unwrap();
    drop(q);
    let q = open(&path, &clock).await;
    let found = q.find(again[0].item.id).await.unwrap().unwrap();
    assert_eq!(
        (found.claimed_at_ms, found.last_touch_ms),
        (Some(later), Some(later + 10_000))
    );
    let waiting = q.claim(5, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let payloads: Vec<&[u8]> = waiting.iter().map(|c| c.item.payload.as_slice()).collect();
    assert_eq!(payloads, [b"b".as_slice(), b"c".as_slice()]);
    q.close().await.unwrap();
}

/// SPEC 6, schema 7: `tests/fixtures/schema6.redb`, made by a schema-6
/// build of the command (`add done-me`, run with `cat --keep-stdout`;
/// `add dead-me`, run with `exit 3` and one delivery; `add hold-me`, its
/// `work` SIGKILLed while it ran; `add wait-me`; `add --at
/// 2030-01-02T03:04:05Z later-me`; `compact`), opens as schema 7 with
/// every item and outcome where it was. Its version-3 lease reads
/// unmarked and takes the cancel mark; its outcome records read as
/// before, and a cancelled outcome is written and read back across a
/// reopen.
#[tokio::test]
async fn a_schema_6_fixture_migrates_to_schema_7_and_cancels() {
    use workjournal::{CancelOutcome, ItemState, ListQuery, OutcomeKind};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema6.redb"),
        &path,
    )
    .unwrap();
    // A minute after the fixture was made (December 2026).
    let clock = ManualClock::new(1_796_668_775_000);
    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(
        tables["meta"].iter().any(|r| r == "\"schema_version\" = 8"),
        "{:?}",
        tables["meta"]
    );
    let done = q.outcome(1).await.unwrap().expect("item 1's outcome");
    assert_eq!(done.result(), Some(b"done-me".as_slice()));
    let dead = q.outcome(2).await.unwrap().expect("item 2's outcome");
    assert!(dead.reason().is_some(), "{dead:?}");
    let pending = q
        .list(ListQuery::new(ItemState::Pending))
        .await
        .unwrap()
        .items;
    assert_eq!(pending.len(), 1);
    assert_eq!(
        (pending[0].item.id, &pending[0].item.payload[..]),
        (3, &b"hold-me"[..])
    );
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (1, 1, 1, 1)
    );

    assert_eq!(q.cancel(3).await.unwrap(), CancelOutcome::Marked);
    assert_eq!(q.cancel(4).await.unwrap(), CancelOutcome::Ended);
    assert_eq!(q.cancel(5).await.unwrap(), CancelOutcome::Ended);
    assert!(matches!(q.cancel(2).await, Err(Error::InvalidInput(_))));
    q.close().await.unwrap();
    drop(q);
    // The mark is stored: after a reopen the orphaned claim is reclaimed
    // and ends as cancelled.
    let q = open(&path, &clock).await;
    assert_eq!(
        q.wait_cancelled(vec![3, 4], Duration::ZERO).await.unwrap(),
        vec![3]
    );
    let r = q.reclaim(Duration::from_secs(30), 10).await.unwrap();
    assert!(r.claimed.is_empty(), "{r:?}");
    assert_eq!(r.cancelled.len(), 1);
    assert_eq!(r.cancelled[0].id, 3);
    q.close().await.unwrap();
    drop(q);
    let q = open(&path, &clock).await;
    for id in [3, 4, 5] {
        let o = q.outcome(id).await.unwrap().expect("a cancelled outcome");
        assert_eq!(o.kind, OutcomeKind::Cancelled, "item {id}");
    }
    assert_eq!(
        q.outcome(1).await.unwrap().map(|o| o.kind),
        Some(OutcomeKind::Done {
            result: b"done-me".to_vec()
        })
    );
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (0, 0, 0, 1)
    );
    q.close().await.unwrap();
}

/// SPEC 6, schema 8: `tests/fixtures/schema7.redb`, made by a schema-7
/// build of the command (the steps of the schema-6 fixture, then `add
/// cancel-me` and `cancel 6`), opens as schema 8 with every item and
/// outcome where it was and an empty history (the build kept none). The
/// history then fills: an ack and a cancel after the migration are listed
/// and found, and stay across a reopen.
#[tokio::test]
async fn a_schema_7_fixture_migrates_to_schema_8_and_keeps_history() {
    use workjournal::{ItemState, ListQuery, OutcomeKind};
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    std::fs::copy(
        concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/schema7.redb"),
        &path,
    )
    .unwrap();
    // A minute after the fixture was made (December 2026).
    let clock = ManualClock::new(1_796_682_021_000);
    let q = open(&path, &clock).await;
    let tables = q.dump_tables().await.unwrap();
    assert!(
        tables["meta"].iter().any(|r| r == "\"schema_version\" = 8"),
        "{:?}",
        tables["meta"]
    );
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.dead_letters),
        (1, 1, 1, 1)
    );
    assert_eq!((s.completed, s.cancelled), (0, 0));
    assert_eq!(
        q.outcome(6).await.unwrap().map(|o| o.kind),
        Some(OutcomeKind::Cancelled)
    );
    assert_eq!(q.find(6).await.unwrap(), None);

    let got = q
        .claim(1, Duration::ZERO, workjournal::ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got[0].item.id, 4);
    clock.advance(Duration::from_millis(5));
    q.ack_with_result(got[0].receipt, b"ok".to_vec())
        .await
        .unwrap();
    assert_eq!(
        q.cancel(5).await.unwrap(),
        workjournal::CancelOutcome::Ended
    );
    q.close().await.unwrap();
    drop(q);

    let q = open(&path, &clock).await;
    let done = q
        .list(ListQuery::new(ItemState::Completed))
        .await
        .unwrap()
        .items;
    assert_eq!(done.len(), 1);
    assert_eq!(
        (
            done[0].item.id,
            &done[0].item.payload[..],
            done[0].result.as_deref()
        ),
        (4, &b"wait-me"[..], Some(&b"ok"[..]))
    );
    assert_eq!(done[0].claimed_at_ms, Some(1_796_682_021_000));
    assert_eq!(done[0].finished_at_ms, Some(1_796_682_021_005));
    assert_eq!(done[0].item.deliveries, 1);
    let cancelled = q
        .list(ListQuery::new(ItemState::Cancelled))
        .await
        .unwrap()
        .items;
    assert_eq!(cancelled.len(), 1);
    assert_eq!(
        (cancelled[0].item.id, &cancelled[0].item.payload[..]),
        (5, &b"later-me"[..])
    );
    assert_eq!(cancelled[0].claimed_at_ms, None);
    assert_eq!(
        q.find(4).await.unwrap().map(|l| l.state),
        Some(ItemState::Completed)
    );
    let s = q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (1, 1));
    q.close().await.unwrap();
}

/// SPEC 3, History: the file holds at most the retention's count, its
/// slack (1/8 of the count, at least 16) and one run of each state, in
/// runs (a row per finishing commit), however many items finish, and the
/// runs agree with their headers and the kept counters (audit).
#[tokio::test]
async fn the_history_tables_stay_within_count_and_slack() {
    use workjournal::{ClaimFrom, Retention};
    let dir = tempfile::tempdir().unwrap();
    let clock = ManualClock::new(T0);
    let config = config(&clock)
        .completed_retention(Retention::new(2, Duration::from_secs(3600)))
        .cancelled_retention(Retention::new(2, Duration::from_secs(3600)));
    let q = EmbeddedQueue::open(dir.path().join("q.redb"), config)
        .await
        .unwrap();
    for round in 0..20 {
        let mut ids = Vec::new();
        for k in 0..8 {
            let p = format!("{round}-{k}").into_bytes();
            ids.push(q.add(NewItem::new(p)).await.unwrap().id);
        }
        let got = q.claim(6, Duration::ZERO, ClaimFrom::All).await.unwrap();
        q.ack(got[0].receipt).await.unwrap();
        q.ack_batch(got[1..].iter().map(|c| c.receipt).collect())
            .await
            .unwrap();
        for id in &ids[6..] {
            q.cancel(*id).await.unwrap();
        }
        clock.advance(Duration::from_millis(1));
        let tables = q.dump_tables().await.unwrap();
        for t in ["completed", "cancelled"] {
            // Rows hold an item or more: count + slack + a run of 5 at most.
            assert!(tables[t].len() <= 2 + 16 + 5, "{t}: {}", tables[t].len());
        }
        q.audit().await.unwrap();
    }
    let s = q.stats().await.unwrap();
    assert_eq!((s.completed, s.cancelled), (2, 2));
    q.close().await.unwrap();
}
