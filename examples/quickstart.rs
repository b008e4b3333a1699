//! Add, claim and ack 10 000 items on the embedded default, then print stats.
//!
//! `cargo run --release --example quickstart [PATH]` (default
//! `./quickstart.redb`, removed first so every run starts empty).

use std::time::{Duration, Instant};

use workjournal::{ClaimFrom, Config, EmbeddedQueue, NewItem, WorkQueue};

const ITEMS: usize = 10_000;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "quickstart.redb".into());
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let queue = EmbeddedQueue::open(&path, Config::default()).await?;

    let start = Instant::now();
    for chunk in (0..ITEMS).collect::<Vec<_>>().chunks(100) {
        let batch = chunk
            .iter()
            .map(|i| NewItem::new(format!("job {i}").into_bytes()))
            .collect();
        queue.add_batch(batch).await?;
    }
    let added = start.elapsed();

    let start = Instant::now();
    let mut done = 0;
    while done < ITEMS {
        let claimed = queue
            .claim(100, Duration::from_millis(100), ClaimFrom::All)
            .await?;
        if claimed.is_empty() {
            break;
        }
        done += claimed.len();
        queue
            .ack_batch(claimed.iter().map(|c| c.receipt).collect())
            .await?;
    }
    let worked = start.elapsed();

    let stats = queue.stats().await?;
    println!("file:      {path}");
    println!(
        "added:     {ITEMS} items in {:.2?} ({:.0} items/s, batches of 100, each batch fsynced)",
        added,
        ITEMS as f64 / added.as_secs_f64()
    );
    println!(
        "processed: {done} items in {:.2?} ({:.0} items/s, claim + ack in batches of 100)",
        worked,
        done as f64 / worked.as_secs_f64()
    );
    println!("stats:     {stats:?}");
    queue.close().await?;
    if done != ITEMS || stats.backlog + stats.pending != 0 {
        return Err(format!("expected {ITEMS} processed and an empty queue").into());
    }
    Ok(())
}
