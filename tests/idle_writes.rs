//! An idle queue writes nothing (SPEC section 6, "Idle"): an embedded claim
//! that waits on an empty queue or on a timer, and a `Worker` with nothing
//! to do, perform no disk writes and no fsyncs. Counted on the simulated
//! disk of `workjournal::testing::faults`, whose event counter sees every
//! write and every `sync_data` that reaches the file.
//!
//! Regression: a waiting claim armed its wake-up before its own empty claim
//! transaction, and the writer committed that empty transaction (one fsync)
//! and woke every waiter after it, so the claim woke itself and committed
//! again: thousands of durable commits a second on an idle device.

use std::time::Duration;

use workjournal::testing::faults::SimDisk;
use workjournal::{ClaimFrom, Config, EmbeddedQueue, NewItem, ScheduleQueue, WorkQueue, Worker};

async fn open(name: &str, disk: &SimDisk) -> EmbeddedQueue {
    EmbeddedQueue::open_on_backend(name, disk.backend(), Config::default(), true)
        .await
        .unwrap_or_else(|e| panic!("open {name}: {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_waiting_embedded_claim_writes_nothing() {
    let disk = SimDisk::new();
    let q = open("idle-claim", &disk).await;

    // Empty queue: a claim that waits 2 s.
    let before = disk.events();
    let got = q
        .claim(1, Duration::from_secs(2), ClaimFrom::All)
        .await
        .unwrap();
    assert!(got.is_empty());
    assert_eq!(disk.events() - before, 0, "writes while waiting on nothing");

    // Empty claims, reclaims, promotions and touches of nothing write nothing.
    let before = disk.events();
    for _ in 0..50 {
        assert!(
            q.claim(4, Duration::ZERO, ClaimFrom::All)
                .await
                .unwrap()
                .is_empty()
        );
        assert!(
            q.reclaim(Duration::ZERO, 4)
                .await
                .unwrap()
                .claimed
                .is_empty()
        );
        assert_eq!(q.promote_due().await.unwrap(), 0);
        q.touch(Vec::new()).await.unwrap();
        assert_eq!(q.ack_batch(Vec::new()).await.unwrap(), 0);
    }
    assert_eq!(
        disk.events() - before,
        0,
        "writes by operations that changed nothing"
    );

    // A timer 2.5 s ahead: the claim waits on it without writing, then
    // takes the item once it is due.
    let now = q.now_ms().await.unwrap();
    let id = q
        .add_delayed(NewItem::new(b"later".to_vec()), now + 2_500)
        .await
        .unwrap()
        .id;
    let before = disk.events();
    let got = q
        .claim(1, Duration::from_secs(2), ClaimFrom::All)
        .await
        .unwrap();
    assert!(got.is_empty(), "the timer is not due yet");
    assert_eq!(disk.events() - before, 0, "writes while waiting on a timer");
    let got = q
        .claim(1, Duration::from_secs(5), ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got.len(), 1, "the timer came due");
    assert_eq!(got[0].item.id, id);
    q.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_writes_nothing() {
    let disk = SimDisk::new();
    let q = open("idle-worker", &disk).await;
    // Something to wait for that does not come due during the test, so the
    // timer task has a deadline to sleep on.
    let now = q.now_ms().await.unwrap();
    q.add_delayed(NewItem::new(b"tomorrow".to_vec()), now + 86_400_000)
        .await
        .unwrap();
    let before = disk.events();
    // A short lease makes the heartbeat (every 100 ms), the reclaim (every
    // 150 ms) and the timer task (every 150 ms) run many times in 3 s.
    let report = Worker::new(q.clone())
        .concurrency(4)
        .lease(Duration::from_millis(300))
        .claim_wait(Duration::from_millis(100))
        .run(
            |_claimed| async { Ok::<(), String>(()) },
            tokio::time::sleep(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    assert_eq!(report.acked, 0);
    assert_eq!(disk.events() - before, 0, "writes by an idle worker");
    assert_eq!(q.stats().await.unwrap().delayed, 1);
    q.close().await.unwrap();
}

/// SPEC 13: schedules that are not due cost an idle worker no writes: its
/// firer reads the due index and sleeps until the next fire time. Then,
/// once a slot comes due, the worker fires and runs it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_worker_with_schedules_not_due_writes_nothing() {
    use workjournal::Schedule;
    let disk = SimDisk::new();
    let q = open("idle-schedules", &disk).await;
    for n in 0..20 {
        let daily = Schedule::every(format!("daily-{n}"), Duration::from_secs(86_400))
            .unwrap()
            .start_ms(q.now_ms().await.unwrap() + 3_600_000);
        q.upsert_schedule(daily).await.unwrap();
    }
    let before = disk.events();
    let report = Worker::new(q.clone())
        .concurrency(2)
        .lease(Duration::from_millis(300))
        .claim_wait(Duration::from_millis(100))
        .run(
            |_claimed| async { Ok::<(), String>(()) },
            tokio::time::sleep(Duration::from_secs(3)),
        )
        .await
        .unwrap();
    assert_eq!(report.acked, 0);
    assert_eq!(
        disk.events() - before,
        0,
        "writes by an idle worker with schedules"
    );
    let listed = q.schedules().await.unwrap();
    assert_eq!(listed.len(), 20);
    assert!(listed.iter().all(|s| s.fired == 0));

    // A schedule due in 300 ms: the worker fires it and runs its item.
    let soon = Schedule::every("soon", Duration::from_secs(3600))
        .unwrap()
        .start_ms(q.now_ms().await.unwrap() + 300)
        .payload(b"now".to_vec());
    q.upsert_schedule(soon).await.unwrap();
    let report = Worker::new(q.clone())
        .concurrency(2)
        .lease(Duration::from_millis(600))
        .claim_wait(Duration::from_millis(100))
        .run(
            |_claimed| async { Ok::<(), String>(()) },
            tokio::time::sleep(Duration::from_millis(1500)),
        )
        .await
        .unwrap();
    assert_eq!(report.acked, 1, "the due slot fired once and ran");
    q.close().await.unwrap();
}
