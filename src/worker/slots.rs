//! The claim loop: fill free slots with stale or claimed items, and supervise
//! each item's handler until it finishes.

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::{OwnedSemaphorePermit, Semaphore, oneshot};
use tokio::task::AbortHandle;
use tokio::time::Instant;
use tracing::Instrument;

use super::Event;
use super::cancel::{finish_cancelled, with_signal};
use super::finish::{
    finish_back_off, finish_err, finish_not_attempted, finish_ok, give_back_unfinished, release_for,
};
use super::{Shared, lock};
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, Claimed};
use crate::queue::WorkQueue;

/// Wait for at least one free slot, take every free slot, and fill them:
/// first with stale items (every lease / 2), then by claiming (or stepping).
pub(super) async fn fill_slots<Q: WorkQueue + 'static>(
    shared: Arc<Shared<Q>>,
    permits: Arc<Semaphore>,
    claim_wait: Duration,
) -> Result<Vec<(Claimed, OwnedSemaphorePermit, Option<Instant>)>> {
    // A worker-side failure pauses claiming for its backoff.
    let paused_until = *lock(&shared.claims_paused_until);
    tokio::time::sleep_until(paused_until).await;
    let Ok(mut slots) = permits.clone().acquire_owned().await else {
        return Err(Error::Closed);
    };
    // Take every other free slot into the same permit: one value however
    // large `concurrency` is (nothing is allocated per free slot).
    let free_now = u32::try_from(permits.available_permits()).unwrap_or(u32::MAX);
    if free_now > 0
        && let Ok(more) = permits.clone().try_acquire_many_owned(free_now)
    {
        slots.merge(more);
    }
    let want = slots.num_permits();
    let mut got: Vec<Claimed> = Vec::new();
    // When this fill first asked the queue: what it takes may predate a
    // back-off that finished after this instant, never one before it.
    let asked = Instant::now();

    let mut from_limits = 0;
    if let Some(flow) = &shared.flow {
        // `step` does not look at limits: wait out this worker's back-off.
        let until = lock(&shared.backed_off).get(flow).map(|b| b.until);
        let now = Instant::now();
        if let Some(until) = until.filter(|u| *u > now) {
            let wake = now.checked_add(claim_wait).map_or(until, |t| t.min(until));
            tokio::time::sleep_until(wake).await;
            return Ok(Vec::new());
        }
        while got.len() < want {
            match shared.queue.step(flow).await {
                Ok(Some(c)) => got.push(c),
                Ok(None) => break,
                Err(e) => {
                    return keep_taken(&shared, "step", got, e)
                        .map(|got| slot_each(got, slots, asked, 0));
                }
            }
        }
        if got.is_empty() {
            // `step` cannot block; poll at the claim-wait pace.
            tokio::time::sleep(claim_wait).await;
        }
    } else {
        let reclaim_now = {
            let mut next = lock(&shared.next_reclaim);
            let now = Instant::now();
            match *next {
                Some(at) if now < at => false,
                // Never again, for a lease too long to represent.
                None => false,
                Some(_) => {
                    *next = now.checked_add(shared.lease / 2);
                    true
                }
            }
        };
        if reclaim_now {
            match shared.queue.reclaim(shared.lease, want).await {
                Ok(reclaimed) => {
                    for dead in reclaimed.dead_lettered {
                        shared.report().dead_lettered += 1;
                        shared.emit(Event::DeadLettered {
                            id: dead.id,
                            delivery: dead.delivery,
                            reason: crate::item::MAX_DELIVERIES_REASON.to_string(),
                        });
                    }
                    got = reclaimed.claimed;
                }
                // Reported as the reclaim's own failure (it was reported
                // as the claim's); the claim below still runs, and says
                // so itself if it fails too.
                Err(e) if e.is_retryable() => shared.emit(Event::QueueError {
                    op: "reclaim",
                    error: crate::error::one_line(&e),
                }),
                Err(e) => return Err(e),
            }
        }
        // Reclaimed items skip limits: only the ones after them were gated.
        from_limits = got.len();
        let free = want.saturating_sub(got.len());
        if free > 0 {
            let wait = if got.is_empty() {
                claim_wait
            } else {
                Duration::ZERO
            };
            match shared.queue.claim(free, wait, ClaimFrom::All).await {
                Ok(more) => got.extend(more),
                Err(e) => got = keep_taken(&shared, "claim", got, e)?,
            }
        }
    }
    Ok(slot_each(got, slots, asked, from_limits))
}

/// A claim (or step) failed after this fill had already taken `got`: those
/// items are pending under this worker's receipts, so run them (reported
/// as [`Event::QueueError`]) rather than drop them, which would leave them
/// pending until a reclaim and cost each a delivery (an item on its last
/// delivery would be dead-lettered without running). With nothing taken,
/// the error is the fill's.
pub(super) fn keep_taken<Q: WorkQueue>(
    shared: &Shared<Q>,
    op: &'static str,
    got: Vec<Claimed>,
    e: Error,
) -> Result<Vec<Claimed>> {
    if got.is_empty() {
        return Err(e);
    }
    shared.emit(Event::QueueError {
        op,
        error: crate::error::one_line(&e),
    });
    Ok(got)
}

/// One permit of `slots` per item, each with the instant its fill `asked`.
pub(super) fn slot_each(
    got: Vec<Claimed>,
    mut slots: OwnedSemaphorePermit,
    asked: Instant,
    ungated: usize,
) -> Vec<(Claimed, OwnedSemaphorePermit, Option<Instant>)> {
    // One permit per item (never more items than slots: the queue promises
    // it); the surplus slots go back when `slots` drops here.
    let mut out = Vec::with_capacity(got.len());
    for (i, claimed) in got.into_iter().enumerate() {
        let asked = (i >= ungated).then_some(asked);
        match slots.split(1) {
            Some(permit) => out.push((claimed, permit, asked)),
            // Unreachable while the queue keeps its promise; the item stays
            // pending and comes back through `reclaim`.
            None => break,
        }
    }
    out
}

/// The reason of a prefetched item given back because its flow was backed
/// off while it waited.
const BACKED_OFF: &str = "flow backed off";

/// A running item's two permits: its claim (of `concurrency + prefetch`)
/// and its running slot (of `concurrency`), given back together.
struct Slot {
    _claim: OwnedSemaphorePermit,
    _run: OwnedSemaphorePermit,
}

/// Removes an item from the heartbeat set and cancels its handler when the
/// supervisor ends, however it ends (including abort at shutdown).
struct InFlight<'a, Q> {
    shared: &'a Shared<Q>,
    lease: u64,
    handler: Option<AbortHandle>,
}

impl<Q> Drop for InFlight<'_, Q> {
    fn drop(&mut self) {
        lock(&self.shared.in_flight).remove(&self.lease);
        lock(&self.shared.cancels).remove(&self.lease);
        if let Some(h) = &self.handler {
            h.abort();
        }
    }
}

/// One item's place in the start order (SPEC 9, Worker: prefetched items
/// start in claim order). `after` resolves (or is dropped) once the item
/// claimed just before holds a running slot or has gone; dropping `then`
/// tells the item claimed just after. `slot` is the running slot the item
/// was given at its claim, when one was free and no item claimed before it
/// was still waiting.
pub(super) struct StartTurn {
    pub(super) after: Option<oneshot::Receiver<()>>,
    pub(super) then: Option<oneshot::Sender<()>>,
    pub(super) slot: Option<OwnedSemaphorePermit>,
}

impl StartTurn {
    /// The turn for the next claimed item, after the one `last` leads to;
    /// `last` becomes the turn of the item after it. The item takes a free
    /// running slot of `running` at once when every item claimed before it
    /// has one (or has gone): it is then not claimed ahead but started, and
    /// a stop or a failed claim that ends the run before its task first
    /// runs does not give it back (SPEC 9, Prefetch).
    pub(super) fn next(last: &mut Option<oneshot::Receiver<()>>, running: &Arc<Semaphore>) -> Self {
        let (then, following) = oneshot::channel();
        let mut after = last.replace(following);
        // The item before has its slot or has gone: nothing to wait for (and
        // a receiver that has answered must not be polled again).
        if after
            .as_mut()
            .is_some_and(|rx| !matches!(rx.try_recv(), Err(oneshot::error::TryRecvError::Empty)))
        {
            after = None;
        }
        let slot = match after {
            None => running.clone().try_acquire_owned().ok(),
            Some(_) => None,
        };
        StartTurn {
            after,
            // Holding its slot, it lets the next item ask for one at once.
            then: slot.is_none().then_some(then),
            slot,
        }
    }
}

/// Run one claimed item: wait for a running slot (an item claimed ahead,
/// `Worker::prefetch`, waits here with its lease in the heartbeat set; at
/// shutdown `running` closes and it is given back unstarted), run the
/// handler, finish the item.
pub(super) async fn supervise<Q: WorkQueue + 'static>(
    shared: Arc<Shared<Q>>,
    claimed: Claimed,
    claim_permit: OwnedSemaphorePermit,
    asked: Option<Instant>,
    running: Arc<Semaphore>,
    turn: StartTurn,
) {
    let receipt = claimed.receipt;
    let span = tracing::info_span!(
        "item",
        id = claimed.item.id,
        flow = %claimed.item.flow,
        delivery = receipt.delivery
    );
    async {
        lock(&shared.in_flight).insert(receipt.lease, receipt);
        let (cancel_tx, mut cancel_rx) = tokio::sync::watch::channel(false);
        lock(&shared.cancels).insert(receipt.lease, cancel_tx);
        shared.held_changed.notify_waiters();
        let mut guard = InFlight {
            shared: &shared,
            lease: receipt.lease,
            handler: None,
        };
        // Prefetched items start in claim order: this one asks for a running
        // slot only once the item claimed before it has one (the semaphore
        // then serves them first come, first served).
        let StartTurn { after, then, slot } = turn;
        let run_permit = match slot {
            Some(slot) => Ok(slot),
            None => {
                if let Some(after) = after {
                    let _ = after.await;
                }
                running.acquire_owned().await
            }
        };
        drop(then);
        let Ok(run_permit) = run_permit else {
            drop(claim_permit);
            give_back_unfinished(&shared, vec![receipt]).await;
            drop(guard);
            return;
        };
        let permit = Slot {
            _claim: claim_permit,
            _run: run_permit,
        };
        // A prefetched item whose claim the heartbeat found lost while it
        // waited (taken over by another consumer) is not run here: its new
        // holder runs it.
        if !lock(&shared.in_flight).contains_key(&receipt.lease) {
            shared.report().lease_lost += 1;
            shared.emit(Event::LeaseLost {
                id: receipt.id,
                delivery: receipt.delivery,
            });
            drop(permit);
            drop(guard);
            return;
        }
        // A prefetched item of a flow this worker backed off meanwhile is
        // given back: the flow's back-off then holds it.
        let now = Instant::now();
        let held_for = lock(&shared.backed_off)
            .get(&claimed.item.flow)
            .filter(|b| b.gives_back(asked, now))
            .map(|b| b.give_back_wait(now));
        if let Some(wait) = held_for {
            release_for(&shared, receipt, wait, BACKED_OFF.into()).await;
            drop(permit);
            drop(guard);
            return;
        }
        shared.emit(Event::Started {
            id: receipt.id,
            flow: claimed.item.flow.clone(),
            delivery: receipt.delivery,
        });
        let started = Instant::now();
        let claimed_flow = claimed.item.flow.clone();
        let mut task = tokio::spawn(
            with_signal(cancel_rx.clone(), (shared.handler)(claimed)).in_current_span(),
        );
        guard.handler = Some(task.abort_handle());
        // SPEC 3, Cancelling: a cancel of the item stops the handler (after
        // the worker's cancel grace) and ends the run as cancelled.
        let cancelled = async {
            if cancel_rx.wait_for(|c| *c).await.is_err() {
                std::future::pending::<()>().await;
            }
        };
        let joined = tokio::select! {
            r = &mut task => Some(r),
            () = cancelled => None,
        };
        let Some(joined) = joined else {
            if !shared.cancel_grace.is_zero() {
                let _ = tokio::time::timeout(shared.cancel_grace, &mut task).await;
            }
            task.abort();
            drop(permit);
            finish_cancelled(&shared, receipt).await;
            drop(guard);
            return;
        };
        let outcome = match joined {
            Ok(Ok(result)) => Ok(result),
            Ok(Err(e)) if e.back_off.is_some() => {
                // The slot stays taken until the flow is held, so that this
                // worker's next claim already obeys the back-off.
                let d = e.back_off.unwrap_or_default();
                finish_back_off(&shared, receipt, &claimed_flow, d, e.text).await;
                drop(permit);
                drop(guard);
                return;
            }
            Ok(Err(e)) if !e.is_attempt() => {
                drop(permit);
                finish_not_attempted(&shared, receipt, e.text).await;
                drop(guard);
                return;
            }
            Ok(Err(e)) => Err((e.text, false)),
            Err(e) if e.is_panic() => {
                let payload = e.into_panic();
                let msg = payload
                    .downcast_ref::<&str>()
                    .map(|s| (*s).to_string())
                    .or_else(|| payload.downcast_ref::<String>().cloned())
                    .unwrap_or_else(|| "no message".to_string());
                Err((format!("handler panicked: {msg}"), true))
            }
            Err(_) => Err(("handler was cancelled".to_string(), false)),
        };
        // The slot is free once the handler is done: the next claim can go
        // to the queue together with this item's ack (the embedded backend
        // commits both in one transaction) instead of after it.
        drop(permit);
        shared.worker_faults.store(0, Ordering::Relaxed);
        match outcome {
            Ok(result) => finish_ok(&shared, receipt, result, started.elapsed()).await,
            Err((text, panicked)) => {
                if panicked {
                    shared.report().panicked += 1;
                }
                tracing::warn!(error = %text, "attempt failed");
                finish_err(&shared, receipt, text).await;
            }
        }
        drop(guard);
    }
    .instrument(span)
    .await
}
