//! Cancelling a running item (SPEC 3, Cancelling; SPEC 9, Worker): the
//! watch that asks the queue which held items are marked, the signal each
//! handler can await ([`cancel_requested`]), and how a cancelled item's
//! run ends.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use super::{Event, Shared, lock};
use crate::error::Error;
use crate::item::Receipt;
use crate::queue::WorkQueue;

tokio::task_local! {
    /// The cancel signal of the item the current handler task runs.
    static CANCEL: watch::Receiver<bool>;
}

/// The longest one `wait_cancelled` of the watch: the held set is asked
/// again after it (and at once when it changes).
const WATCH_ROUND: Duration = Duration::from_secs(10);

/// The least time between two asks of the watch when the held set
/// changes: a busy worker claims many items a second, and each ask is a
/// queue call (a Redis script, an embedded writer read), so a change only
/// ends the wait in progress once this long after it was asked. A cancel
/// of an item claimed meanwhile is seen at the next ask, at most this
/// much later.
const MIN_ASK_GAP: Duration = Duration::from_millis(25);

/// Resolves when the item the current [`Worker`](crate::Worker) handler
/// runs is cancelled (SPEC 3, Cancelling; SPEC 9, Worker): `cancel` marked
/// it while it ran, from this process or any other. A handler that awaits
/// it (in a `select!` beside its work) can stop cleanly within the
/// worker's [`cancel_grace`](crate::Worker::cancel_grace), after which the
/// worker drops the handler's future anyway. Outside a worker's handler
/// it never resolves.
pub async fn cancel_requested() {
    let rx = CANCEL.try_with(Clone::clone);
    match rx {
        Ok(mut rx) => {
            if rx.wait_for(|c| *c).await.is_err() {
                // The worker is gone with the signal: no cancel will come.
                std::future::pending::<()>().await;
            }
        }
        Err(_) => std::future::pending::<()>().await,
    }
}

/// `fut` with the cancel signal `rx` as its [`cancel_requested`].
pub(super) async fn with_signal<F: std::future::Future>(
    rx: watch::Receiver<bool>,
    fut: F,
) -> F::Output {
    CANCEL.scope(rx, fut).await
}

/// The watch: while the worker holds items, ask the queue which of them
/// are marked cancelled (`wait_cancelled`, a blocking wait woken by the
/// mark), and signal their handlers. A lease is signalled once; the held
/// set is asked again whenever it changes.
pub(super) async fn watch_cancels<Q: WorkQueue>(shared: Arc<Shared<Q>>) {
    let mut signalled: HashSet<u64> = HashSet::new();
    let round = (shared.lease / 3).clamp(Duration::from_millis(10), WATCH_ROUND);
    loop {
        let changed = shared.held_changed.notified();
        tokio::pin!(changed);
        changed.as_mut().enable();
        let held: Vec<Receipt> = lock(&shared.in_flight).values().copied().collect();
        signalled.retain(|l| held.iter().any(|r| r.lease == *l));
        let mut ids: Vec<u64> = held
            .iter()
            .filter(|r| !signalled.contains(&r.lease))
            .map(|r| r.id)
            .collect();
        ids.sort_unstable();
        ids.dedup();
        if ids.is_empty() {
            tokio::select! {
                () = &mut changed => {}
                () = tokio::time::sleep(round) => {}
            }
            continue;
        }
        let asked = tokio::time::Instant::now();
        let marked = tokio::select! {
            r = shared.queue.wait_cancelled(ids, round) => r,
            () = async {
                (&mut changed).await;
                tokio::time::sleep_until(asked + MIN_ASK_GAP).await;
            } => continue,
        };
        match marked {
            Ok(marked) => {
                for r in held.iter().filter(|r| marked.contains(&r.id)) {
                    if signalled.insert(r.lease) {
                        shared.cancel_lease(r.lease);
                    }
                }
            }
            Err(e) => {
                shared.emit(Event::QueueError {
                    op: "wait_cancelled",
                    error: crate::error::one_line(&e),
                });
                if matches!(e, Error::InvalidInput(_) | Error::Closed) {
                    // A server that predates cancelling (no such route), or
                    // a closed queue: said once, and the watch ends; a
                    // cancel still reaches the handler through the
                    // heartbeat's touch.
                    return;
                }
                // A queue that cannot answer now is asked again after a
                // pause, not in a loop.
                tokio::time::sleep(round).await;
            }
        }
    }
}

/// End the run of `receipt`'s item after its handler was stopped for a
/// cancel: a touch with its receipt ends the marked item as cancelled
/// (answered `Cancelled`, or `LeaseLost` when the heartbeat's touch or a
/// reclaim ended it first). A touch that extends the lease instead (the
/// item was not marked after all) is followed by a release, so that the
/// item the worker stopped runs again.
pub(super) async fn finish_cancelled<Q: WorkQueue>(shared: &Shared<Q>, receipt: Receipt) {
    let ended = shared
        .persist("touch", || shared.queue.touch(vec![receipt]))
        .await;
    match ended {
        Err(Error::Cancelled { .. } | Error::LeaseLost { .. }) => {
            shared.report().cancelled += 1;
            shared.emit(Event::Cancelled {
                id: receipt.id,
                delivery: receipt.delivery,
            });
        }
        Ok(()) => {
            super::finish::release_for(
                shared,
                receipt,
                Duration::ZERO,
                "handler stopped for a cancel the queue does not hold".to_string(),
            )
            .await;
        }
        Err(e) => super::finish::lost_or_error(shared, receipt, "touch", e),
    }
}
