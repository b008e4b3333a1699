//! The worker's background duties: the heartbeat that touches in-flight items,
//! and the timers that promote due items.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::Event;
use super::{Shared, lock};
use crate::error::Error;
use crate::item::Receipt;
use crate::queue::WorkQueue;

/// Touch every in-flight item each lease / 3. A receipt that has been lost is
/// dropped from the set (its handler's ack will report the loss) and the
/// rest are touched again, since `touch` is all-or-nothing.
pub(super) async fn heartbeat<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let mut tick = tokio::time::interval(shared.lease / 3);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tick.tick().await;
    loop {
        tick.tick().await;
        let mut receipts: Vec<Receipt> = lock(&shared.in_flight).values().copied().collect();
        // A transient failure is tried again, with a growing pause, until
        // the next beat is due (SPEC 9, Worker).
        let give_up = Instant::now().checked_add(shared.lease / 3);
        let mut pause = Duration::from_millis(50);
        while !receipts.is_empty() {
            match shared.queue.touch(receipts.clone()).await {
                Ok(()) => break,
                // Cancelled: the touch ended the item; its handler is told.
                Err(Error::Cancelled { lease, .. }) => {
                    receipts.retain(|r| r.lease != lease);
                    shared.cancel_lease(lease);
                }
                Err(Error::LeaseLost { lease, .. }) => {
                    // By lease, the one field no two claims share: a redrive
                    // repeats (id, delivery), and this worker may hold both
                    // the lost claim and a current one of the same item.
                    let before = receipts.len();
                    receipts.retain(|r| r.lease != lease);
                    lock(&shared.in_flight).remove(&lease);
                    if receipts.len() == before {
                        // A backend naming a receipt it was not given: touch
                        // the rest next tick rather than loop.
                        break;
                    }
                }
                Err(e) => {
                    shared.emit(Event::QueueError {
                        op: "touch",
                        error: crate::error::one_line(&e),
                    });
                    if !e.is_retryable() || give_up.is_some_and(|g| Instant::now() + pause >= g) {
                        break;
                    }
                    tokio::time::sleep(pause).await;
                    pause *= 2;
                }
            }
        }
    }
}

/// Promote delayed items at their deadline. Sleeps until the soonest
/// `not_before`, re-reading it at least every lease / 2 (a timer added
/// meanwhile is also promoted by the next claim, which promotes first).
pub(super) async fn timers<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let cap = shared.lease / 2;
    loop {
        let pause = match (shared.queue.next_due().await, shared.queue.now_ms().await) {
            (Ok(Some(due)), Ok(now)) if due <= now => match shared.queue.promote_due().await {
                Ok(n) if n > 0 => continue,
                // Due by `next_due` yet nothing promoted (another consumer
                // was first): look again shortly rather than spin.
                Ok(_) => Duration::from_millis(10),
                Err(e) => {
                    shared.emit(Event::QueueError {
                        op: "promote_due",
                        error: crate::error::one_line(&e),
                    });
                    cap
                }
            },
            (Ok(Some(due)), Ok(now)) => Duration::from_millis(due - now).min(cap),
            (Ok(None), Ok(_)) => cap,
            (Err(e), _) | (_, Err(e)) => {
                shared.emit(Event::QueueError {
                    op: "next_due",
                    error: crate::error::one_line(&e),
                });
                cap
            }
        };
        tokio::time::sleep(pause).await;
    }
}

/// Fire the queue's schedules at their slots (SPEC 13): whoever runs a
/// queue's timers fires its schedules, so a worker needs no other daemon
/// ([`crate::schedule::fire_loop`]).
pub(super) async fn schedules<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let cap = (shared.lease / 2).min(Duration::from_secs(1));
    crate::schedule::fire_loop(&shared.queue, cap, |op, e| {
        shared.emit(Event::QueueError {
            op,
            error: e.to_string(),
        });
    })
    .await;
}
