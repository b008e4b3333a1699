//! Idempotent side effects: an item whose handler dies after the side
//! effect and before the ack runs again; `idempotent_step` keeps the side
//! effect from happening twice.
//!
//! `cargo run --example idempotency`

use std::time::Duration;

use workjournal::worker::idempotent_step;
use workjournal::{ClaimFrom, Config, Error, ManualClock, MemoryQueue, NewItem, WorkQueue};

#[tokio::main]
async fn main() -> workjournal::Result<()> {
    let clock = ManualClock::new(1_700_000_000_000);
    let queue = MemoryQueue::new(Config::default().clock(clock.clone()));
    queue.add(NewItem::new(b"charge card 7".to_vec())).await?;

    // First delivery: the charge happens, then the consumer dies before it
    // can ack (nothing acks the receipt).
    let first = queue.claim(1, Duration::ZERO, ClaimFrom::All).await?;
    for c in &first {
        let id = c.item.id;
        let done = idempotent_step(&queue, id, "charge", || async {
            println!("charging for item {id}");
            Ok::<_, Error>(())
        })
        .await?;
        println!(
            "delivery {}: charged now: {}",
            c.receipt.delivery,
            done.is_some()
        );
    }

    // A minute later another consumer reclaims the stale item and runs it
    // again: the charge is skipped, the item is acked.
    clock.advance(Duration::from_secs(60));
    for c in queue.reclaim(Duration::from_secs(30), 10).await?.claimed {
        let id = c.item.id;
        let done = idempotent_step(&queue, id, "charge", || async {
            println!("charging for item {id}");
            Ok::<_, Error>(())
        })
        .await?;
        println!(
            "delivery {}: charged now: {}",
            c.receipt.delivery,
            done.is_some()
        );
        queue.ack(c.receipt).await?;
    }
    Ok(())
}
