//! Flows: pause one flow while its downstream is broken, let the others
//! run, try one parked item with `step`, then resume the rest.
//!
//! `cargo run --example flows`

use std::time::Duration;

use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, WorkQueue};

#[tokio::main]
async fn main() -> workjournal::Result<()> {
    let queue = MemoryQueue::new(Config::default());
    queue.pause("billing").await?;
    for n in 0..3 {
        queue
            .add(NewItem::new(format!("invoice {n}").into_bytes()).flow("billing"))
            .await?;
        queue
            .add(NewItem::new(format!("email {n}").into_bytes()).flow("mail"))
            .await?;
    }
    // Claims hand out the mail and park the invoices of the paused flow.
    for c in queue.claim(10, Duration::ZERO, ClaimFrom::All).await? {
        println!("ran {}", String::from_utf8_lossy(&c.item.payload));
        queue.ack(c.receipt).await?;
    }
    println!("parked in billing: {}", queue.parked("billing").await?);

    // Try the fix on one invoice while the flow stays paused.
    if let Some(one) = queue.step("billing").await? {
        println!("stepped {}", String::from_utf8_lossy(&one.item.payload));
        queue.ack(one.receipt).await?;
    }
    // It worked: release the rest, oldest first.
    println!("resumed {}", queue.resume("billing").await?);
    for c in queue.claim(10, Duration::ZERO, ClaimFrom::All).await? {
        println!("ran {}", String::from_utf8_lossy(&c.item.payload));
        queue.ack(c.receipt).await?;
    }
    Ok(())
}
