//! A fleet of workers sharing one Redis queue: a producer adds jobs, three
//! workers (each with its own connection, as on three hosts) take them,
//! a flaky downstream fails some first attempts (retried with backoff),
//! one job never succeeds (dead-lettered after 3 deliveries), and the
//! queue's stats are printed at the end.
//!
//! ```sh
//! redis-server --port 6379 --appendonly yes --appendfsync always &
//! REDIS_URL=redis://127.0.0.1:6379/ cargo run --example redis_fleet --features redis
//! ```
//!
//! Every run uses a fresh namespace (`fleet-example-<pid>`), so it never
//! touches other queues on that Redis; it purges its dead letter at the
//! end, and the outcomes it kept expire after the default `result_ttl`.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use workjournal::{Config, NewItem, RedisOptions, RedisQueue, RetryPolicy, WorkQueue, Worker};

const JOBS: u64 = 30;
const WORKERS: usize = 3;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let Ok(url) = std::env::var("REDIS_URL") else {
        eprintln!(
            "redis_fleet needs a Redis server: set REDIS_URL, e.g.\n  \
             REDIS_URL=redis://127.0.0.1:6379/ cargo run --example redis_fleet --features redis\n\
             (start one with `redis-server --port 6379`; the example writes only keys \
             under its own fleet-example-<pid> namespace)"
        );
        std::process::exit(2);
    };
    let namespace = format!("fleet-example-{}", std::process::id());
    // Every handle of one queue should agree on its config: three
    // deliveries, then the item is a dead letter.
    let config = Config::default().max_deliveries(3);
    let connect = || RedisQueue::connect(&url, &namespace, config.clone(), RedisOptions::default());

    let producer = connect().await?;
    let mut jobs: Vec<NewItem> = (1..JOBS)
        .map(|n| NewItem::new(format!("resize image {n}").into_bytes()))
        .collect();
    jobs.push(NewItem::new(b"resize image corrupt.png".to_vec()));
    let added = producer.add_batch(jobs).await?;
    println!(
        "added {} jobs to {namespace} (ids {}..={})",
        added.len(),
        added.first().map_or(0, |a| a.id),
        added.last().map_or(0, |a| a.id)
    );

    // The downstream is busy for every fourth job's first attempt.
    let busy = Arc::new(AtomicU64::new(0));
    let mut fleet = tokio::task::JoinSet::new();
    for w in 1..=WORKERS {
        let queue = connect().await?;
        let busy = busy.clone();
        fleet.spawn(async move {
            let worker = Worker::new(queue.clone())
                .concurrency(4)
                .lease(Duration::from_secs(10))
                .retry_policy(RetryPolicy::default().base(Duration::from_millis(100)))
                .until_empty(true);
            let report = worker
                .run(
                    move |claimed| {
                        let busy = busy.clone();
                        async move {
                            let job = String::from_utf8_lossy(&claimed.item.payload).into_owned();
                            let delivery = claimed.receipt.delivery;
                            if job.ends_with("corrupt.png") {
                                return Err(format!("{job}: not an image"));
                            }
                            if claimed.item.id % 4 == 0 && delivery == 1 {
                                busy.fetch_add(1, Ordering::Relaxed);
                                return Err(format!("{job}: downstream busy, try later"));
                            }
                            // The work itself; side effects keyed by the item
                            // id stay idempotent across redeliveries.
                            tokio::time::sleep(Duration::from_millis(20)).await;
                            println!("worker {w}: {job} (delivery {delivery})");
                            Ok(())
                        }
                    },
                    async {
                        let _ = tokio::signal::ctrl_c().await;
                    },
                )
                .await;
            let closed = queue.close().await;
            (w, report, closed)
        });
    }
    while let Some(joined) = fleet.join_next().await {
        let (w, report, closed) = joined?;
        let report = report?;
        closed?;
        println!(
            "worker {w} stopped: {} acked, {} retried, {} dead-lettered",
            report.acked, report.retried, report.dead_lettered
        );
    }
    println!(
        "{} first attempts met a busy downstream",
        busy.load(Ordering::Relaxed)
    );

    let stats = producer.stats().await?;
    println!(
        "stats: backlog {}, delayed {}, pending {}, dead letters {}, durable {}",
        stats.backlog,
        stats.delayed,
        stats.pending,
        stats.dead_letters,
        if stats.durable {
            "yes"
        } else {
            "no (turn on AOF with appendfsync always)"
        }
    );
    for dead in producer.dead_letters(10).await? {
        println!(
            "dead letter {} after {} deliveries: {}",
            dead.item.id, dead.item.deliveries, dead.reason
        );
    }
    producer.purge_dead_letters().await?;
    producer.close().await?;
    Ok(())
}
