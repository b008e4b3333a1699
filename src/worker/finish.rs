//! How an item's run ends: ack, retry, dead-letter, release or back-off, each
//! retried for up to one lease when the queue fails transiently, and what is
//! given back at shutdown.

use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::time::Instant;

use super::Event;
use super::backed_off::{BackedOff, QueueHold};
use super::{Shared, lock};
use crate::config::ms;
use crate::error::Error;
use crate::item::{Receipt, RetryOutcome};
use crate::queue::WorkQueue;

pub(super) async fn finish_ok<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    result: Option<Vec<u8>>,
    elapsed: Duration,
) {
    let acked = shared
        .persist("ack", || {
            let result = result.clone();
            async move {
                match result {
                    Some(bytes) => shared.queue.ack_with_result(receipt, bytes).await,
                    None => shared.queue.ack(receipt).await,
                }
            }
        })
        .await;
    // A result the queue refuses (over `max_payload_bytes`) is a failed
    // attempt, not an item left pending to fail the same way again.
    if let Err(Error::InvalidInput(why)) = &acked {
        let text = format!("result refused: {why}");
        return Box::pin(finish_err(shared, receipt, text)).await;
    }
    match acked {
        Ok(()) => {
            shared.report().acked += 1;
            shared.emit(Event::Acked {
                id: receipt.id,
                elapsed,
            });
        }
        Err(e) => lost_or_error(shared, receipt, "ack", e),
    }
}

pub(super) async fn finish_err<Q: WorkQueue>(shared: &Shared<Q>, receipt: Receipt, text: String) {
    let last = receipt.delivery >= shared.max_deliveries;
    let result = if last {
        shared
            .persist("dead_letter", || shared.queue.dead_letter(receipt, &text))
            .await
            .map(|()| RetryOutcome::DeadLettered)
    } else if shared.flow.is_some() {
        match shared.persist("park", || shared.queue.park(receipt)).await {
            Ok(()) => shared.queue.now_ms().await.map(|now| {
                shared.report().retried += 1;
                shared.emit(Event::Retried {
                    id: receipt.id,
                    delivery: receipt.delivery,
                    not_before_ms: now,
                    error: text.clone(),
                });
                RetryOutcome::Delayed
            }),
            Err(e) => Err(e),
        }
    } else {
        let wait = shared.retry.next_delay(receipt.delivery);
        match shared.queue.now_ms().await {
            Ok(now) => {
                let not_before_ms = now.saturating_add(ms(wait));
                let r = shared
                    .persist("retry", || shared.queue.retry(receipt, not_before_ms))
                    .await;
                if let Ok(RetryOutcome::Delayed) = r {
                    shared.report().retried += 1;
                    shared.emit(Event::Retried {
                        id: receipt.id,
                        delivery: receipt.delivery,
                        not_before_ms,
                        error: text.clone(),
                    });
                }
                r
            }
            Err(e) => Err(e),
        }
    };
    match result {
        Ok(RetryOutcome::Delayed) => {}
        Ok(RetryOutcome::DeadLettered) => {
            shared.report().dead_lettered += 1;
            shared.emit(Event::DeadLettered {
                id: receipt.id,
                delivery: receipt.delivery,
                reason: if last {
                    text
                } else {
                    crate::item::MAX_DELIVERIES_REASON.to_string()
                },
            });
        }
        Err(e) => lost_or_error(
            shared,
            receipt,
            if last { "dead_letter" } else { "retry" },
            e,
        ),
    }
}

/// The handler said the item was not attempted (a worker-side failure):
/// give it back without spending its delivery, due after a backoff that
/// grows with the worker's failures in a row, and pause claiming for that
/// long, so that a worker that cannot start anything does not churn through
/// the backlog.
pub(super) async fn finish_not_attempted<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    text: String,
) {
    let streak = shared
        .worker_faults
        .fetch_add(1, Ordering::Relaxed)
        .saturating_add(1);
    let wait = shared.retry.next_delay(streak);
    {
        let mut until = lock(&shared.claims_paused_until);
        *until = (*until).max(Instant::now() + wait);
    }
    tracing::warn!(error = %text, "item not attempted: the worker failed");
    release_for(shared, receipt, wait, text).await;
}

/// The handler asked to back the item's flow off for `d` (SPEC 9, Worker):
/// hold the flow for every consumer, then give the item back without
/// spending its delivery: due at once when the queue holds the flow, so
/// that the hold keeps it in its place, ahead of the flow's later items
/// (due after `d`, it came back behind them); due when the back-off lifts
/// when nothing holds it (the default flow, a failed `back_off`).
pub(super) async fn finish_back_off<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    flow: &str,
    d: Duration,
    text: String,
) {
    tracing::info!(flow, back_off_ms = ms(d), reason = %text, "flow backed off");
    let mut wait = d;
    if !flow.is_empty() {
        let call = shared.back_off_calls.fetch_add(1, Ordering::Relaxed);
        {
            let now = Instant::now();
            let until = crate::clock::wait_deadline(d);
            let mut backed_off = lock(&shared.backed_off);
            backed_off.retain(|_, b| b.until > now);
            // A shorter back-off does not cut a longer one short: the
            // queue keeps the longer hold too.
            let b = backed_off.entry(flow.to_string()).or_insert(BackedOff {
                until,
                hold: QueueHold::Asked,
                call,
            });
            b.until = b.until.max(until);
            b.hold = QueueHold::Asked;
            b.call = call;
        }
        let result = shared.queue.back_off(flow, d).await;
        // Only the latest call's return says whether the queue holds it.
        if let Some(b) = lock(&shared.backed_off).get_mut(flow)
            && b.call == call
        {
            b.hold = match result {
                Ok(()) => QueueHold::Since(Instant::now()),
                Err(_) => QueueHold::Failed,
            };
        }
        match result {
            Ok(()) => wait = Duration::ZERO,
            Err(e) => shared.emit(Event::QueueError {
                op: "back_off",
                error: crate::error::one_line(&e),
            }),
        }
    }
    release_for(shared, receipt, wait, text).await;
}

/// Give the item back without spending its delivery, due `wait` from now
/// by the queue's clock, and report it as released (or lost).
pub(super) async fn release_for<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    wait: Duration,
    text: String,
) {
    let result = match shared.queue.now_ms().await {
        Ok(now) => {
            let not_before_ms = now.saturating_add(ms(wait));
            shared
                .persist("release", || shared.queue.release(receipt, not_before_ms))
                .await
                .map(|()| not_before_ms)
        }
        Err(e) => Err(clock_first(e)),
    };
    match result {
        Ok(not_before_ms) => {
            shared.report().released += 1;
            shared.emit(Event::Released {
                id: receipt.id,
                delivery: receipt.delivery,
                not_before_ms,
                reason: text,
            });
        }
        Err(e) => lost_or_error(shared, receipt, "release", e),
    }
}

/// At shutdown past the grace period: give the cancelled items back
/// without spending their deliveries, due at once. Stops at the first
/// failure that is not a lost lease (the queue is unreachable: the rest
/// stay pending for `reclaim`).
pub(super) async fn give_back_unfinished<Q: WorkQueue>(
    shared: &Shared<Q>,
    unfinished: Vec<Receipt>,
) {
    if unfinished.is_empty() {
        return;
    }
    let now = match shared.queue.now_ms().await {
        Ok(now) => now,
        Err(e) => {
            shared.emit(Event::QueueError {
                op: "release",
                error: crate::error::one_line(&clock_first(e)),
            });
            return;
        }
    };
    for receipt in unfinished {
        match shared.queue.release(receipt, now).await {
            Ok(()) => {
                shared.report().released += 1;
                shared.emit(Event::Released {
                    id: receipt.id,
                    delivery: receipt.delivery,
                    not_before_ms: now,
                    reason: "worker stopped".to_string(),
                });
            }
            Err(e) if e.is_lease_lost() => lost_or_error(shared, receipt, "release", e),
            Err(e) => {
                lost_or_error(shared, receipt, "release", e);
                return;
            }
        }
    }
}

pub(super) fn lost_or_error<Q: WorkQueue>(
    shared: &Shared<Q>,
    receipt: Receipt,
    op: &'static str,
    e: Error,
) {
    if e.is_cancelled() {
        // The handler finished, but the item was cancelled meanwhile: this
        // call ended it (SPEC 3, Cancelling).
        shared.report().cancelled += 1;
        shared.emit(Event::Cancelled {
            id: receipt.id,
            delivery: receipt.delivery,
        });
    } else if e.is_lease_lost() {
        shared.report().lease_lost += 1;
        shared.emit(Event::LeaseLost {
            id: receipt.id,
            delivery: receipt.delivery,
        });
    } else {
        tracing::warn!(id = receipt.id, op, error = %crate::error::one_line(&e), "queue operation failed");
        shared.emit(Event::QueueError {
            op,
            error: crate::error::one_line(&e),
        });
    }
}

/// A release reads the queue's clock first (its `not_before` is on that
/// clock): a failure there is the release's, said in its words rather than
/// as the clock call's (`now: cannot connect ...`), keeping the kind (so
/// that a retryable failure stays retryable) and the cause as the source.
fn clock_first(e: Error) -> Error {
    match e {
        Error::Backend { detail, source } => Error::Backend {
            detail: format!("cannot read the queue's clock before the release ({detail})"),
            source,
        },
        other => other,
    }
}
