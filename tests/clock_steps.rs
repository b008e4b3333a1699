//! The wall clock stepping back (SPEC 8, Clock steps), for the worker and
//! across an embedded restart; the queue-level rules are conformance cases
//! (`clock_step_*`) on every backend. Devices without a
//! battery-backed clock are corrected by NTP, sometimes backwards. The
//! queue then moves its stored times back by the
//! step, so that a retry's wait and a claim's idle time are measured in
//! elapsed time: a 2 s retry is not stretched to an hour, a crashed
//! holder's claim is not kept for an hour more, and `until_empty` does not
//! hang. A step forward only makes timers due early.
//!
//! Regression (issue 10, item 10): after a step back of one hour a 2 s
//! retry waited an hour and one more second, and `work --until-empty` hung.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use tempfile::TempDir;
use workjournal::{
    BoxQueue, Config, EmbeddedQueue, ManualClock, MemoryQueue, NewItem, RetryPolicy, WorkQueue,
    Worker,
};

/// Ten hours after the epoch-ish start used by the other tests.
const T0: u64 = 1_700_000_000_000 + 36_000_000;
const HOUR: Duration = Duration::from_secs(3600);

type Kept = Option<TempDir>;

async fn memory(clock: &ManualClock) -> (BoxQueue, Kept) {
    let config = Config::default().clock(clock.clone());
    (BoxQueue::new(MemoryQueue::new(config)), None)
}

async fn embedded(clock: &ManualClock) -> (BoxQueue, Kept) {
    let dir = tempfile::tempdir().unwrap();
    let config = Config::default().clock(clock.clone());
    let q = EmbeddedQueue::open(dir.path().join("q.redb"), config)
        .await
        .unwrap();
    (BoxQueue::new(q), Some(dir))
}

fn back(clock: &ManualClock, by: Duration) {
    let now = workjournal::Clock::now_ms(clock);
    clock.set(now - u64::try_from(by.as_millis()).unwrap());
}

macro_rules! on_both {
    ($($case:ident),* $(,)?) => {
        mod on_memory {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(|c| Box::pin(super::memory(c))).await;
                }
            )*
        }
        mod on_embedded {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
                async fn $case() {
                    super::$case(|c| Box::pin(super::embedded(c))).await;
                }
            )*
        }
    };
}

type Make =
    fn(&ManualClock) -> std::pin::Pin<Box<dyn std::future::Future<Output = (BoxQueue, Kept)> + '_>>;

on_both!(until_empty_finishes_across_a_step_back);

async fn until_empty_finishes_across_a_step_back(make: Make) {
    let clock = ManualClock::new(T0);
    let (q, _keep) = make(&clock).await;
    q.add(NewItem::new(b"x".to_vec())).await.unwrap();
    let stepped = Arc::new(AtomicUsize::new(0));
    let (s2, c2) = (stepped.clone(), clock.clone());
    // The clock moves 5 s in all after the step, and stops: enough for a
    // 2 s retry measured in elapsed time, not for one stretched by an hour.
    let mover = async move {
        while s2.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        for _ in 0..50 {
            tokio::time::sleep(Duration::from_millis(10)).await;
            c2.advance(Duration::from_millis(100));
        }
        // Then give the worker a moment to finish, and stop it.
        tokio::time::sleep(Duration::from_secs(3)).await;
    };
    let (s3, c3) = (stepped.clone(), clock.clone());
    let report = Worker::new(q.clone())
        .retry_policy(
            RetryPolicy::default()
                .base(Duration::from_secs(2))
                .jitter(0.0),
        )
        .claim_wait(Duration::from_millis(50))
        .until_empty(true)
        // The clock steps back an hour just after the retry is written.
        .on_event(move |e| {
            if matches!(e, workjournal::worker::Event::Retried { .. }) {
                back(&c3, HOUR);
                s3.store(1, Ordering::SeqCst);
            }
        })
        .run(
            |c| async move {
                if c.item.deliveries == 1 {
                    Err("first attempt fails".to_string())
                } else {
                    Ok(())
                }
            },
            mover,
        )
        .await
        .unwrap();
    assert_eq!(
        (report.retried, report.acked),
        (1, 1),
        "the retry did not come due: {report:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn embedded_notices_a_step_back_across_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("q.redb");
    let clock = ManualClock::new(T0);
    let config = || Config::default().clock(clock.clone());
    let q = EmbeddedQueue::open(&path, config()).await.unwrap();
    q.add_delayed(NewItem::new(b"x".to_vec()), T0 + 2_000)
        .await
        .unwrap();
    q.close().await.unwrap();
    drop(q);
    // Powered off; on boot the clock reads an hour earlier.
    back(&clock, HOUR);
    let q = EmbeddedQueue::open(&path, config()).await.unwrap();
    assert_eq!(q.promote_due().await.unwrap(), 0);
    assert_eq!(q.next_due().await.unwrap(), Some(T0 - 3_600_000 + 2_000));
    clock.advance(Duration::from_secs(2));
    assert_eq!(q.promote_due().await.unwrap(), 1);
    q.close().await.unwrap();
}
