//! A worker with retries on the embedded backend: a handler that fails the
//! first attempt of every third item, backoff, a dead letter for an item
//! that never succeeds, and a graceful stop once the queue is empty.
//!
//! `cargo run --example worker [PATH]` (default `./worker.redb`, removed
//! first so every run starts empty).

use std::time::Duration;

use workjournal::{Config, EmbeddedQueue, NewItem, RetryPolicy, WorkQueue, Worker};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let path = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "worker.redb".into());
    match std::fs::remove_file(&path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    let queue = EmbeddedQueue::open(&path, Config::default().max_deliveries(3)).await?;
    for n in 0..9 {
        queue
            .add(NewItem::new(format!("job {n}").into_bytes()))
            .await?;
    }
    queue.add(NewItem::new(b"poison".to_vec())).await?;

    let report = Worker::new(queue.clone())
        .concurrency(4)
        .lease(Duration::from_secs(10))
        .retry_policy(RetryPolicy::default().base(Duration::from_millis(50)))
        .until_empty(true)
        .run(
            |claimed| async move {
                let text = String::from_utf8_lossy(&claimed.item.payload).into_owned();
                if text == "poison" {
                    return Err(format!("{text} can never be handled"));
                }
                if claimed.item.id % 3 == 0 && claimed.receipt.delivery == 1 {
                    return Err(format!("{text}: the far side was busy"));
                }
                println!("handled {text} (delivery {})", claimed.receipt.delivery);
                Ok(())
            },
            // Stop on Ctrl-C too; the worker finishes what is in flight.
            async {
                let _ = tokio::signal::ctrl_c().await;
            },
        )
        .await?;
    println!("{report:?}");
    for dead in queue.dead_letters(10).await? {
        println!("dead letter {}: {}", dead.item.id, dead.reason);
    }
    queue.close().await?;
    Ok(())
}
