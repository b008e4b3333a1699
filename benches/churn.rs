//! File size under churn: each cycle adds 10 000 items of 1 KiB, claims
//! them and acks them (batches of 1000), so the queue is empty again at the
//! end of every cycle. The file size after 10 and after 100 cycles shows
//! whether freed space is reused. SQLite WAL does the same (size = database
//! plus WAL file).
//!
//! The finished-item history (SPEC 3, History) keeps the last 1 000 acked
//! items by default: the same churn on a file that keeps none is its
//! baseline, and so is a Redis namespace that keeps none for the memory of
//! one that keeps the default (the sum of `MEMORY USAGE` over the
//! namespace's keys after 1 and 10 cycles).
//!
//! Not a time measurement: `harness = false` with its own main.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::baselines::Sqlite;
use common::{EMBEDDED, REDIS};
use workjournal::{
    ClaimFrom, Config, EmbeddedQueue, NewItem, RedisOptions, RedisQueue, Retention, WorkQueue,
};

const ITEMS_PER_CYCLE: usize = 10_000;
const BATCH: usize = 1000;
const PAYLOAD: usize = 1024;
/// The subjects that keep no history: a file, a Redis namespace.
const NO_HISTORY: &str = "no-history";
const REDIS_NO_HISTORY: &str = "redis-no-history";

fn size(paths: &[&Path]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn no_history() -> Config {
    Config::default()
        .completed_retention(Retention::none())
        .cancelled_retention(Retention::none())
}

/// One churn cycle on `q`: add, claim and ack `ITEMS_PER_CYCLE` items.
async fn cycle<Q: WorkQueue>(q: &Q, body: &[u8]) {
    for _ in 0..ITEMS_PER_CYCLE / BATCH {
        let items = (0..BATCH).map(|_| NewItem::new(body.to_vec())).collect();
        q.add_batch(items).await.expect("add_batch");
    }
    for _ in 0..ITEMS_PER_CYCLE / BATCH {
        let got = q
            .claim(BATCH, Duration::ZERO, ClaimFrom::All)
            .await
            .expect("claim");
        assert_eq!(got.len(), BATCH);
        q.ack_batch(got.iter().map(|c| c.receipt).collect())
            .await
            .expect("ack");
    }
}

/// `cycles` cycles on a file made with `config`; the file's size after
/// `checkpoint` and after `cycles` cycles.
fn embedded_churn(
    rt: &tokio::runtime::Runtime,
    dir: &Path,
    name: &str,
    config: Config,
    body: &[u8],
    cycles: usize,
    checkpoint: usize,
) -> Vec<(usize, u64)> {
    let path = dir.join(format!("{name}.redb"));
    let t = Instant::now();
    let sizes = rt.block_on(async {
        let q = EmbeddedQueue::open(&path, config)
            .await
            .expect("open embedded queue");
        let mut sizes = Vec::new();
        for n in 1..=cycles {
            cycle(&q, body).await;
            if n == checkpoint || n == cycles {
                sizes.push((n, size(&[&path])));
            }
        }
        q.close().await.expect("close");
        sizes
    });
    println!(
        "embedded churn ({name}): {cycles} cycles in {:.1?}",
        t.elapsed()
    );
    sizes
}

/// The bytes namespace `ns` takes on the server at `url`: `MEMORY USAGE`
/// (all samples) summed over its keys.
async fn namespace_bytes(url: &str, ns: &str) -> u64 {
    let client = redis::Client::open(url).expect("redis url");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let mut cursor: u64 = 0;
    let mut total = 0u64;
    loop {
        let (next, keys): (u64, Vec<Vec<u8>>) = redis::cmd("SCAN")
            .arg(cursor)
            .arg("MATCH")
            .arg(format!("{{{ns}}}:*"))
            .arg("COUNT")
            .arg(1000)
            .query_async(&mut conn)
            .await
            .expect("scan");
        for k in keys {
            let used: Option<u64> = redis::cmd("MEMORY")
                .arg("USAGE")
                .arg(&k)
                .arg("SAMPLES")
                .arg(0)
                .query_async(&mut conn)
                .await
                .expect("memory usage");
            total += used.unwrap_or(0);
        }
        if next == 0 {
            return total;
        }
        cursor = next;
    }
}

/// `cycles` cycles on Redis namespace `ns` with `config`; the namespace's
/// bytes after the first and the last cycle.
fn redis_churn(
    rt: &tokio::runtime::Runtime,
    url: &str,
    ns: &str,
    config: Config,
    body: &[u8],
    cycles: usize,
) -> Vec<(usize, u64)> {
    let t = Instant::now();
    let sizes = rt.block_on(async {
        let q = RedisQueue::connect(url, ns, config, RedisOptions::default())
            .await
            .expect("connect redis queue");
        let mut sizes = Vec::new();
        for n in 1..=cycles {
            cycle(&q, body).await;
            if n == 1 || n == cycles {
                sizes.push((n, namespace_bytes(url, ns).await));
            }
        }
        q.close().await.expect("close");
        sizes
    });
    println!("redis churn ({ns}): {cycles} cycles in {:.1?}", t.elapsed());
    sizes
}

fn main() {
    let cycles: usize = std::env::var("WJ_CHURN_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let checkpoint = cycles.min(10);
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD);

    for (name, subject, config) in [
        ("churn", EMBEDDED, Config::default()),
        ("churn-no-history", NO_HISTORY, no_history()),
    ] {
        for (n, bytes) in embedded_churn(&rt, dir.path(), name, config, &body, cycles, checkpoint) {
            common::record(
                &format!("file MiB after {n} cycles"),
                subject,
                mib(bytes),
                "MiB",
            );
        }
    }

    let server = workjournal::testing::RedisServer::start()
        .expect("start redis-server (apt-get install redis-server)");
    let url = server.url();
    let redis_cycles = cycles.min(10);
    for (ns, subject, config) in [
        ("churn", REDIS, Config::default()),
        ("churn-none", REDIS_NO_HISTORY, no_history()),
    ] {
        for (n, bytes) in redis_churn(&rt, &url, ns, config, &body, redis_cycles) {
            common::record(
                &format!("redis namespace MiB after {n} cycles"),
                subject,
                mib(bytes),
                "MiB",
            );
        }
    }

    let db = dir.path().join("churn.sqlite");
    let wal = dir.path().join("churn.sqlite-wal");
    let mut s = Sqlite::open(&db);
    let t = Instant::now();
    for cycle in 1..=cycles {
        for _ in 0..ITEMS_PER_CYCLE / BATCH {
            s.fill(BATCH as u64, &body);
        }
        for _ in 0..ITEMS_PER_CYCLE / BATCH {
            assert_eq!(s.claim_ack_once(BATCH), BATCH);
        }
        if cycle == checkpoint || cycle == cycles {
            common::record(
                &format!("file MiB after {cycle} cycles"),
                "sqlite-wal",
                mib(size(&[&db, &wal])),
                "MiB",
            );
        }
    }
    println!("sqlite churn: {cycles} cycles in {:.1?}", t.elapsed());
}
