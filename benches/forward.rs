//! Store and forward (SPEC section 11): forwarding throughput from an
//! embedded queue into a Redis queue (criterion group `forwarding`, next to
//! the Redis backend's `add_batch_100` in the report), and the lag while a
//! 10 000-item backlog drains under a steady producer: how long the drain
//! takes, and how old the oldest unforwarded item is once it has drained.

mod common;

use std::time::{Duration, Instant};

use common::REDIS;
use criterion::{Throughput, criterion_main};
use workjournal::NewItem;
use workjournal::WorkQueue;
use workjournal::forward::{Forwarder, RunUntil};

/// Items forwarded per criterion iteration.
const PER_ITER: u64 = 1000;
/// The backlog of the lag run.
const BACKLOG: u64 = 10_000;

/// The subject name of the forwarder in the report.
const FORWARD: &str = "workjournal-forward";

fn benches() {
    let common::Setup {
        mut c,
        rt,
        dir,
        redis: _redis,
        url,
        body,
    } = common::setup();

    let local = rt.block_on(common::embedded(dir.path(), "forward"));
    let remote = rt.block_on(common::redis(&url, "forward"));
    let forwarder = rt
        .block_on(Forwarder::new(local.clone(), remote.clone(), "bench"))
        .expect("forwarder");
    let batch = rt.block_on(common::redis(&url, "forward-batch"));
    {
        let mut g = c.benchmark_group("forwarding");
        g.throughput(Throughput::Elements(PER_ITER));
        g.bench_function(FORWARD, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    common::fill(&local, n * PER_ITER, &body).await;
                    let start = Instant::now();
                    let p = forwarder
                        .run(RunUntil::Empty, std::future::pending(), |_| {})
                        .await
                        .expect("forward");
                    let took = start.elapsed();
                    assert_eq!(p.items, n * PER_ITER);
                    took
                })
            })
        });
        // The same server, the same run: the Redis backend's own batches.
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| {
                rt.block_on(common::add_batch(&batch, 100, n * PER_ITER / 100, &body))
            })
        });
        g.finish();
    }

    let (drain_ms, mut after) = rt.block_on(async {
        let local = common::embedded(dir.path(), "lag").await;
        common::fill(&local, BACKLOG, &body).await;
        let forwarder = Forwarder::new(local.clone(), common::redis(&url, "lag").await, "lag")
            .await
            .expect("forwarder");
        let producer = {
            let local = local.clone();
            let body = body.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(Duration::from_millis(1));
                loop {
                    tick.tick().await;
                    local.add(NewItem::new(body.clone())).await.expect("add");
                }
            })
        };
        let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
        let run = {
            let f = forwarder.clone();
            tokio::spawn(async move {
                f.run(
                    RunUntil::Stopped,
                    async {
                        let _ = stop_rx.await;
                    },
                    |_| {},
                )
                .await
                .expect("forward")
            })
        };
        let start = Instant::now();
        let mut drained = None;
        let mut after = Vec::new();
        while start.elapsed() < Duration::from_secs(120) {
            tokio::time::sleep(Duration::from_millis(5)).await;
            let lag = forwarder.lag().await.expect("lag");
            match drained {
                None if lag.count < 10 => drained = Some(start.elapsed()),
                None => {}
                Some(d) => {
                    after.push(lag.oldest_age_ms.unwrap_or(0) as f64);
                    if start.elapsed() > d + Duration::from_secs(1) {
                        break;
                    }
                }
            }
        }
        producer.abort();
        let _ = stop_tx.send(());
        run.await.expect("forwarder task");
        let drained = drained.expect("the backlog never drained within 120 s");
        (drained.as_secs_f64() * 1000.0, after)
    });
    common::record("forward 10k backlog drain", FORWARD, drain_ms, "ms");
    common::record_percentiles("forward lag after drain", FORWARD, &mut after);
}

criterion_main!(benches);
