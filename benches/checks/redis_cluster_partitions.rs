//! Throughput of one queue on a Redis Cluster of 3 primaries (harness
//! started, no persistence, no replicas): as 1 namespace (one slot, so one
//! primary) and as a `PartitionedQueue` over 4 namespaces (spread over the
//! primaries). 8 producers add batches of 100, then 8 consumers claim and
//! `ack_batch` batches of 100.
//!
//! Run: `cargo bench --bench redis_cluster_partitions --features redis,testing -- [items]`.
//! On one machine every primary shares its cores with the client, so the
//! gain shown is a floor of what separate hosts give.

use std::sync::Arc;
use std::time::{Duration, Instant};

use workjournal::testing::{RedisCluster, RedisClusterOptions};
use workjournal::{
    BoxQueue, ClaimFrom, Config, NewItem, PartitionedQueue, RedisOptions, RedisQueue, WorkQueue,
};

const BATCH: usize = 100;
const TASKS: usize = 8;

type BoxError = Box<dyn std::error::Error + Send + Sync>;

async fn run(queue: Arc<BoxQueue>, items: usize) -> Result<(f64, f64), BoxError> {
    let per_task = items / TASKS / BATCH;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let q = queue.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per_task {
                let batch = (0..BATCH).map(|_| NewItem::new(vec![7u8; 64])).collect();
                q.add_batch(batch).await?;
            }
            Ok::<_, workjournal::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let add = (per_task * TASKS * BATCH) as f64 / started.elapsed().as_secs_f64();
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..TASKS {
        let q = queue.clone();
        tasks.push(tokio::spawn(async move {
            let mut done = 0usize;
            loop {
                let got = q.claim(BATCH, Duration::ZERO, ClaimFrom::All).await?;
                if got.is_empty() {
                    return Ok::<_, workjournal::Error>(done);
                }
                done += got.len();
                q.ack_batch(got.into_iter().map(|c| c.receipt).collect())
                    .await?;
            }
        }));
    }
    let mut done = 0;
    for t in tasks {
        done += t.await??;
    }
    let claim_ack = done as f64 / started.elapsed().as_secs_f64();
    Ok((add, claim_ack))
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let items: usize = std::env::args()
        // `cargo bench` passes `--bench`: the first other argument.
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(80_000);
    let cluster = RedisCluster::start_with(RedisClusterOptions {
        primaries: 3,
        replicas_per_primary: 0,
        aof_always: false,
        ..Default::default()
    })?;
    let url = cluster.url();
    let connect = |ns: String| {
        let url = url.clone();
        async move { RedisQueue::connect(&url, &ns, Config::default(), RedisOptions::default()).await }
    };
    let one = Arc::new(BoxQueue::new(connect("one".into()).await?));
    let (add1, ca1) = run(one, items).await?;
    let mut parts = Vec::new();
    for p in 0..4 {
        parts.push(connect(format!("four-{p}")).await?);
    }
    let four = Arc::new(BoxQueue::new(PartitionedQueue::new(parts)?));
    let (add4, ca4) = run(four, items).await?;
    println!(
        "| workload ({TASKS} tasks, batches of {BATCH}) | 1 namespace | 4 partitions | ratio |"
    );
    println!("|---|---|---|---|");
    println!(
        "| add_batch | {add1:.0}/s | {add4:.0}/s | {:.2}x |",
        add4 / add1
    );
    println!(
        "| claim + ack_batch | {ca1:.0}/s | {ca4:.0}/s | {:.2}x |",
        ca4 / ca1
    );
    Ok(())
}
