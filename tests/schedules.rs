//! SPEC 13 on the embedded file beyond the conformance cases: the
//! schema-5 to schema-6 migration against a committed fixture, and
//! schedules across a reopen and a replay of the redo log.

use std::path::{Path, PathBuf};
use std::time::Duration;

use workjournal::{
    ClaimFrom, Config, EmbeddedQueue, ManualClock, Schedule, ScheduleQueue, WorkQueue,
};

const T0: u64 = 1_700_000_000_000;

fn config(clock: &ManualClock) -> Config {
    Config::default().clock(clock.clone())
}

/// A schema-5 queue file (written by the build before schedules): two
/// items in the backlog ("first", "second"), one delayed until T0 + 60 s
/// ("later"). Made once by the build that added schedules: those three
/// items added and the file compacted with no item pending (so no lease
/// record, the one record schema 6 changed), the redo log removed, and
/// `schema_version` set back to 5: byte for byte what a schema-5 build
/// leaves.
fn fixture() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/schema5.redb")
}

fn meta(path: &Path, key: &str) -> Option<u64> {
    use redb::ReadableDatabase;
    let db = redb::Database::create(path).unwrap();
    let txn = db.begin_read().unwrap();
    let def: redb::TableDefinition<&str, u64> = redb::TableDefinition::new("meta");
    let t = txn.open_table(def).unwrap();
    t.get(key).unwrap().map(|v| v.value())
}

/// SPEC 6, schema 6: the committed schema-5 file opens as schema 6 by its
/// version alone, keeps its items in their states, and takes schedules
/// from then on, across a reopen.
#[tokio::test]
async fn a_schema_5_fixture_migrates_and_takes_schedules() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    std::fs::copy(fixture(), &path).unwrap();
    assert_eq!(meta(&path, "schema_version"), Some(5));
    let clock = ManualClock::new(T0);
    let q = EmbeddedQueue::open(&path, config(&clock)).await.unwrap();
    let s = q.stats().await.unwrap();
    assert_eq!((s.backlog, s.delayed), (2, 1), "{s:?}");
    let every = Schedule::every("tick", Duration::from_secs(10))
        .unwrap()
        .payload(b"tick".to_vec());
    assert!(q.upsert_schedule(every).await.unwrap());
    assert_eq!(q.fire_schedules().await.unwrap().items, 1);
    q.close().await.unwrap();
    drop(q);
    assert_eq!(meta(&path, "schema_version"), Some(8));

    let q = EmbeddedQueue::open(&path, config(&clock)).await.unwrap();
    let listed = q.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        (listed[0].fired, listed[0].next_fire_ms),
        (1, Some(T0 + 10_000))
    );
    // The file's own items first (the schedule's is in the due lane).
    let got = q.claim(10, Duration::ZERO, ClaimFrom::All).await.unwrap();
    let payloads: Vec<&[u8]> = got.iter().map(|c| c.item.payload.as_slice()).collect();
    assert_eq!(payloads, vec![&b"tick"[..], b"first", b"second"]);
    q.close().await.unwrap();
}

/// A schedule's swap is one redo log record: a file closed without its
/// checkpoint (the log holds the swap) replays it whole at the next open.
#[tokio::test]
async fn a_firing_is_replayed_whole_from_the_redo_log() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let options = workjournal::EmbeddedOptions::default().checkpoint_ops(1_000_000);
    let q = EmbeddedQueue::open_with(&path, config(&clock), options.clone())
        .await
        .unwrap();
    q.upsert_schedule(Schedule::every("r", Duration::from_secs(1)).unwrap())
        .await
        .unwrap();
    for _ in 0..5 {
        q.fire_schedules().await.unwrap();
        clock.advance(Duration::from_secs(1));
    }
    // Copy the two files as they are now, as a power cut would leave them
    // (the open handle keeps its redb transaction uncommitted).
    let copy = dir.path().join("copy.redb");
    std::fs::copy(&path, &copy).unwrap();
    std::fs::copy(
        dir.path().join("q.redb-redo"),
        dir.path().join("copy.redb-redo"),
    )
    .unwrap();
    q.close().await.unwrap();
    let q = EmbeddedQueue::open_with(&copy, config(&clock), options)
        .await
        .unwrap();
    let s = &q.schedules().await.unwrap()[0];
    assert_eq!((s.fired, s.last_fired_ms), (5, Some(T0 + 4_000)));
    assert_eq!(
        q.stats().await.unwrap().delayed + q.stats().await.unwrap().backlog,
        5
    );
    q.close().await.unwrap();
}
