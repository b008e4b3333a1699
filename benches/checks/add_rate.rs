//! A quick measure of durable single adds per second on the embedded
//! backend, with 1 producer and with 64 concurrent producers. The benchmark
//! suite in `benches/` does this properly; this is the foundation's check.
//!
//! `cargo bench --bench add_rate -- [SECONDS_PER_CASE]`

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use workjournal::{Config, EmbeddedQueue, NewItem, WorkQueue};

async fn run(producers: usize, seconds: f64) -> Result<f64, workjournal::Error> {
    let dir = std::env::temp_dir().join(format!(
        "workjournal-add-rate-{}-{producers}",
        std::process::id()
    ));
    std::fs::create_dir_all(&dir).map_err(|e| workjournal::Error::Io {
        context: "temp dir".into(),
        source: e,
    })?;
    let path = dir.join("q.redb");
    let _ = std::fs::remove_file(&path);
    let q = EmbeddedQueue::open(&path, Config::default()).await?;
    let stop = Arc::new(AtomicBool::new(false));
    let count = Arc::new(AtomicU64::new(0));
    let start = Instant::now();
    let mut tasks = Vec::new();
    for _ in 0..producers {
        let (q, stop, count) = (q.clone(), stop.clone(), count.clone());
        tasks.push(tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                q.add(NewItem::new(vec![0u8; 64])).await?;
                count.fetch_add(1, Ordering::Relaxed);
            }
            Ok::<(), workjournal::Error>(())
        }));
    }
    tokio::time::sleep(Duration::from_secs_f64(seconds)).await;
    stop.store(true, Ordering::Relaxed);
    for t in tasks {
        t.await
            .map_err(|e| workjournal::Error::InvalidInput(e.to_string()))??;
    }
    let rate = count.load(Ordering::Relaxed) as f64 / start.elapsed().as_secs_f64();
    q.close().await?;
    let _ = std::fs::remove_dir_all(&dir);
    Ok(rate)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let seconds: f64 = std::env::args()
        // `cargo bench` passes `--bench`: the first other argument.
        .skip(1)
        .find(|a| !a.starts_with("--"))
        .map(|s| s.parse())
        .transpose()?
        .unwrap_or(3.0);
    let one = run(1, seconds).await?;
    let many = run(64, seconds).await?;
    println!("durable adds/s, 1 producer:   {one:.0}");
    println!(
        "durable adds/s, 64 producers: {many:.0} ({:.1}x)",
        many / one
    );
    Ok(())
}
