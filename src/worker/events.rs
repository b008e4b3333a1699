//! What a worker tells its caller: the [`Event`]s of a run and its final
//! [`Report`].

use std::time::Duration;

/// Something a worker did, reported to the callback set with
/// [`Worker::on_event`](crate::Worker::on_event) (the CLI draws its progress from these).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Event {
    /// The handler started on an item.
    Started {
        /// The item's id.
        id: u64,
        /// The item's flow.
        flow: String,
        /// This delivery's number (first: 1).
        delivery: u32,
    },
    /// The handler succeeded and the item was acked.
    Acked {
        /// The item's id.
        id: u64,
        /// How long the handler ran.
        elapsed: Duration,
    },
    /// The handler failed; the item waits in delayed until `not_before_ms`
    /// (or, for a worker on one flow, went back to the flow's parked list,
    /// and `not_before_ms` is the time of the failure).
    Retried {
        /// The item's id.
        id: u64,
        /// The delivery that failed.
        delivery: u32,
        /// When the next attempt may start, ms since the Unix epoch (queue
        /// clock).
        not_before_ms: u64,
        /// The handler's error text.
        error: String,
    },
    /// The handler failed on the last allowed delivery; the item is a dead
    /// letter.
    DeadLettered {
        /// The item's id.
        id: u64,
        /// The delivery that failed.
        delivery: u32,
        /// The reason stored with the dead letter.
        reason: String,
    },
    /// The item was given back without spending its delivery
    /// ([`WorkQueue::release`](crate::WorkQueue::release)): the handler said it was not attempted
    /// ([`HandlerError::not_attempted`](crate::HandlerError::not_attempted)), or the worker stopped before the
    /// handler finished.
    Released {
        /// The item's id.
        id: u64,
        /// The delivery given back.
        delivery: u32,
        /// When it may be claimed again, ms since the Unix epoch (queue
        /// clock).
        not_before_ms: u64,
        /// Why (the handler's text, or `"worker stopped"`).
        reason: String,
    },
    /// The item's claim was no longer current when the worker finished it,
    /// or, prefetched, before it started (it was reclaimed by another
    /// consumer; a prefetched one is then not run); nothing was changed.
    LeaseLost {
        /// The item's id.
        id: u64,
        /// The delivery the worker held.
        delivery: u32,
    },
    /// The item was cancelled while the worker held it (SPEC 3,
    /// Cancelling): its handler was stopped (or had finished), and the item
    /// ended as cancelled.
    Cancelled {
        /// The item's id.
        id: u64,
        /// The delivery the worker held.
        delivery: u32,
    },
    /// A queue operation failed; the worker goes on (the item, if any, comes
    /// back through `reclaim`).
    QueueError {
        /// Which operation (`"ack"`, `"touch"`, `"claim"`, ...).
        op: &'static str,
        /// The error's text.
        error: String,
    },
}

/// What a finished [`Worker::run`](crate::Worker::run) did, in items.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct Report {
    /// Handled successfully and acked.
    pub acked: u64,
    /// Failed and given back for a later attempt.
    pub retried: u64,
    /// Dead-lettered: failed for the last time, or found stale by the
    /// worker's reclaim past `max_deliveries` (a crashed holder's item).
    pub dead_lettered: u64,
    /// Dead letters the queue dropped for good past its
    /// `dead_letter_cap` during the run (`Stats::dead_letters_dropped` at
    /// the end minus at the start, so drops by other consumers of the same
    /// queue count too). These are among `dead_lettered` but not kept.
    pub dead_letters_dropped: u64,
    /// Given back without spending a delivery ([`WorkQueue::release`](crate::WorkQueue::release)):
    /// not attempted ([`HandlerError::not_attempted`](crate::HandlerError::not_attempted)), or unfinished at
    /// shutdown (running past the grace period, or prefetched and not
    /// started: [`Worker::prefetch`](crate::Worker::prefetch)).
    pub released: u64,
    /// Of the failures, how many were handler panics.
    pub panicked: u64,
    /// Finished after their claim was taken over, or prefetched and found
    /// taken over before they started (not run); nothing changed.
    pub lease_lost: u64,
    /// Cancelled while held (SPEC 3, Cancelling): the handler was stopped
    /// (or its answer dropped) and the item ended as cancelled.
    pub cancelled: u64,
    /// Still running when the grace period ran out: cancelled and given
    /// back with [`WorkQueue::release`](crate::WorkQueue::release) (counted in `released` too), or, if
    /// that failed, left pending for `reclaim`.
    pub abandoned: u64,
}
