//! The add-combining lever (SPEC 7, "Redis add combining"): 64 producer
//! tasks each adding single items through one handle, against 64 tasks
//! sending raw `XADD`s over one multiplexed connection, on the same
//! harness-started `redis-server` (no persistence). Prints both rates and
//! how many items each add script call carried (`INFO commandstats`).
//!
//! Run: `cargo bench --bench redis_add_combining --features redis,testing -- [items]`.

use std::sync::Arc;
use std::time::Instant;

use workjournal::testing::RedisServer;
use workjournal::{Config, NewItem, RedisOptions, RedisQueue, WorkQueue};

type BoxError = Box<dyn std::error::Error + Send + Sync>;

const PRODUCERS: usize = 64;

async fn script_calls(conn: &mut redis::aio::MultiplexedConnection) -> Result<u64, BoxError> {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await?;
    Ok(info
        .lines()
        .filter_map(|l| {
            l.strip_prefix("cmdstat_evalsha:calls=")
                .or_else(|| l.strip_prefix("cmdstat_eval:calls="))
        })
        .filter_map(|rest| rest.split(',').next()?.parse::<u64>().ok())
        .sum())
}

#[tokio::main]
async fn main() -> Result<(), BoxError> {
    let items: usize = std::env::args()
        // `cargo bench` passes `--bench`: the first other argument.
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|a| a.parse())
        .transpose()?
        .unwrap_or(64_000);
    let per = items / PRODUCERS;
    let server = RedisServer::start()?;
    let url = server.url();
    let mut admin = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let q = Arc::new(
        RedisQueue::connect(&url, "bench", Config::default(), RedisOptions::default()).await?,
    );
    q.add(NewItem::new(b"warm".to_vec())).await?;
    let before = script_calls(&mut admin).await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let q = q.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                q.add(NewItem::new(vec![7u8; 64])).await?;
            }
            Ok::<_, workjournal::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let queue_rate = (per * PRODUCERS) as f64 / started.elapsed().as_secs_f64();
    let calls = script_calls(&mut admin).await? - before;

    let conn = redis::Client::open(url.as_str())?
        .get_multiplexed_async_connection()
        .await?;
    let started = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..PRODUCERS {
        let mut c = conn.clone();
        tasks.push(tokio::spawn(async move {
            for _ in 0..per {
                let _: String = redis::cmd("XADD")
                    .arg("raw")
                    .arg("*")
                    .arg("p")
                    .arg(vec![7u8; 64])
                    .query_async(&mut c)
                    .await?;
            }
            Ok::<_, redis::RedisError>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let raw_rate = (per * PRODUCERS) as f64 / started.elapsed().as_secs_f64();
    println!(
        "| add, {PRODUCERS} producers | redis backend | raw XADD | ratio | items per script call |"
    );
    println!("|---|---|---|---|---|");
    println!(
        "| | {queue_rate:.0}/s | {raw_rate:.0}/s | {:.2}x | {:.1} |",
        queue_rate / raw_rate,
        (per * PRODUCERS) as f64 / calls.max(1) as f64
    );
    Ok(())
}
