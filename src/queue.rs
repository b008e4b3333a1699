//! The contract: trait [`WorkQueue`] (SPEC section 3) and its type-erased
//! form [`BoxQueue`].

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use crate::browse::{ItemPage, ListQuery, ListedItem};
use crate::error::Result;
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::request::{Reply, Request, ask};

mod backend;
mod boxed;

pub(crate) use backend::{Backend, dispatch};
pub use boxed::BoxQueue;
// The testing harness names the boxed future in its own object-safe traits
// (re-exported as `testing::BoxFuture`).
#[cfg(feature = "testing")]
pub use boxed::BoxFuture;

#[doc = include_str!("queue/work_queue.md")]
pub trait WorkQueue: Send + Sync {
    /// Carry out one operation of the contract (docs/DESIGN.md, One
    /// request type): the one method a backend implements besides
    /// [`WorkQueue::max_deliveries`]. Every typed method below builds its
    /// [`Request`] and calls this; layers that only pass operations on
    /// (boxing, metering, the server, the remote client) forward this one
    /// call.
    ///
    /// # Errors
    ///
    /// Those of the typed method of the request's name; `InvalidInput` for
    /// a request this backend does not support (see [`Request`]).
    fn call(&self, request: Request) -> impl Future<Output = Result<Reply>> + Send;

    /// Journal `item` at the backlog tail (SPEC 3, Adding). Returns once the
    /// item is as durable as the backend promises.
    ///
    /// # Errors
    ///
    /// `Full` past `max_backlog`; `InvalidInput` for a payload over
    /// `max_payload_bytes`; `Storage`/`Io`/`Backend` if the write failed.
    fn add(&self, item: NewItem) -> impl Future<Output = Result<Added>> + Send {
        ask!(self, Request::Add { item }, Added)
    }

    /// Journal all of `items` at the backlog tail, all or none; results in
    /// input order. An empty batch is `Ok(vec![])`.
    ///
    /// # Errors
    ///
    /// As [`WorkQueue::add`]; on any error nothing of the batch was journaled.
    fn add_batch(&self, items: Vec<NewItem>) -> impl Future<Output = Result<Vec<Added>>> + Send {
        ask!(self, Request::AddBatch { items }, AddedList)
    }

    /// Journal `item` into delayed, due at `not_before_ms` (ms since the Unix
    /// epoch, queue clock). A time in the past is due at the next promotion.
    ///
    /// # Errors
    ///
    /// As [`WorkQueue::add`].
    fn add_delayed(
        &self,
        item: NewItem,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<Added>> + Send {
        ask!(
            self,
            Request::AddDelayed {
                item,
                not_before_ms,
            },
            Added
        )
    }

    /// The soonest `not_before_ms` among delayed items (not yet promoted).
    ///
    /// # Errors
    ///
    /// Storage or backend failures only. Cancel-safe (read only).
    fn next_due(&self) -> impl Future<Output = Result<Option<u64>>> + Send {
        ask!(self, Request::NextDue, NextDue)
    }

    /// Atomically move every delayed item with `not_before_ms <= now` to the
    /// due-lane tail, ordered by (`not_before_ms`, id). Returns how many
    /// moved. Claims promote on their own first; call this to see due items
    /// in `stats()` without claiming.
    ///
    /// # Errors
    ///
    /// Storage or backend failures only.
    fn promote_due(&self) -> impl Future<Output = Result<u64>> + Send {
        ask!(self, Request::PromoteDue, Count)
    }

    /// Make delayed item `id` due now (SPEC 3, Timers): atomically move it
    /// from delayed to the due lane, its `not_before` the earlier of its
    /// own and now (its arrival in the due lane, as a promotion gives),
    /// keeping its id, tier and deliveries. Returns false, and changes
    /// nothing, when the queue holds no delayed item `id` (it is in
    /// another state, finished, or was never added). BullMQ's
    /// `job.promote`.
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable record.
    fn promote(&self, id: u64) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::Promote { id }, Bool)
    }

    /// Take up to `count` items (never more): due lane first, then the
    /// backlog (unless `from` is [`ClaimFrom::DueOnly`]), each in rank order
    /// (SPEC 3, Claiming and Priority). Items of a paused
    /// flow are parked instead of handed out. If nothing is ready, wait up to
    /// `wait` (real time) for an add, a promotion or a timer; return empty
    /// when the wait runs out. Each claimed item has `deliveries += 1` and
    /// `claimed_at_ms = now`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `count == 0`; `Decode` for an unreadable record at
    /// the head of a lane; storage or backend failures.
    ///
    /// # Cancel safety
    ///
    /// This method is not cancel safe: if the future is dropped after the
    /// claim reached the backend, the items it took may be pending with
    /// nobody holding them; they come back through
    /// [`WorkQueue::reclaim`] once idle. Dropped while it waits for
    /// work, it took nothing. Nothing is lost either way.
    fn claim(
        &self,
        count: usize,
        wait: Duration,
        from: ClaimFrom,
    ) -> impl Future<Output = Result<Vec<Claimed>>> + Send {
        ask!(self, Request::Claim { count, wait, from }, Claimed)
    }

    /// The item is done and gone for good.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the item is not pending under `receipt` (including a
    /// second ack of the same receipt); nothing changes.
    fn ack(&self, receipt: Receipt) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::Ack { receipt })
    }

    /// As [`WorkQueue::ack`], and the item's outcome carries `result`
    /// (opaque bytes; [`encode_result`](crate::encode_result) for a typed
    /// one) for `result_ttl` (SPEC 3, Outcomes and progress). A plain `ack` is this with
    /// an empty result.
    ///
    /// # Errors
    ///
    /// `LeaseLost` as `ack`; `InvalidInput` for a result over
    /// `max_payload_bytes`. Nothing changes on error.
    fn ack_with_result(
        &self,
        receipt: Receipt,
        result: Vec<u8>,
    ) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::AckWithResult { receipt, result })
    }

    /// The outcome of item `id` (done with its result, or dead-lettered with
    /// its reason, and when), or `None` if it has none: not finished yet,
    /// never existed, or finished more than `result_ttl` ago (SPEC 3,
    /// Outcomes and progress).
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable outcome record.
    fn outcome(&self, id: u64) -> impl Future<Output = Result<Option<Outcome>>> + Send {
        ask!(self, Request::Outcome { id }, Outcome)
    }

    /// As [`WorkQueue::outcome`], but while there is none, wait up to `wait`
    /// (real time) for one. Woken by the ack or dead letter itself (no
    /// polling); `None` when the wait runs out (SPEC 3, Outcomes and progress).
    ///
    /// # Errors
    ///
    /// As [`WorkQueue::outcome`].
    fn wait_outcome(
        &self,
        id: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Outcome>>> + Send {
        ask!(self, Request::WaitOutcome { id, wait }, Outcome)
    }

    /// Publish the progress of a pending item: `progress` replaces the
    /// last one (SPEC 3, Outcomes and progress). Fenced like `touch`; it does not extend
    /// the lease.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the receipt is not current; `InvalidInput` for bytes
    /// over `max_payload_bytes`. Nothing changes on error.
    fn set_progress(
        &self,
        receipt: Receipt,
        progress: Vec<u8>,
    ) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::SetProgress { receipt, progress })
    }

    /// Append one chunk to a pending item's stream; returns its sequence
    /// number (from 1 per item, increasing across deliveries). Fenced like
    /// `touch` (SPEC 3, Outcomes and progress).
    ///
    /// # Errors
    ///
    /// As [`WorkQueue::set_progress`].
    fn send_chunk(
        &self,
        receipt: Receipt,
        chunk: Vec<u8>,
    ) -> impl Future<Output = Result<u64>> + Send {
        ask!(self, Request::SendChunk { receipt, chunk }, Seq)
    }

    /// The last progress published for item `id`, if any (kept until its
    /// outcome expires).
    fn progress(&self, id: u64) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send {
        ask!(self, Request::Progress { id }, Progress)
    }

    /// The chunks of item `id` after sequence number `after_seq`, in order.
    /// While there are none and the item has no outcome, wait up to `wait`
    /// (real time) for one; empty when the wait runs out or the item has
    /// finished (check [`WorkQueue::outcome`] to tell which). A long poll:
    /// pass the last `seq` seen to read on (SPEC 3, Outcomes and progress).
    fn wait_chunks(
        &self,
        id: u64,
        after_seq: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Chunk>>> + Send {
        ask!(
            self,
            Request::WaitChunks {
                id,
                after_seq,
                wait,
            },
            Chunks
        )
    }

    /// Ack each receipt; lost ones are skipped and not counted. Returns how
    /// many were acked. Atomic as a whole.
    ///
    /// # Errors
    ///
    /// Storage or backend failures only.
    fn ack_batch(&self, receipts: Vec<Receipt>) -> impl Future<Output = Result<u64>> + Send {
        ask!(self, Request::AckBatch { receipts }, Count)
    }

    /// Extend the leases: set `claimed_at_ms = now` for every receipt;
    /// deliveries unchanged. All or nothing.
    ///
    /// # Errors
    ///
    /// `LeaseLost` naming the first receipt that is no longer current; then
    /// no lease was extended.
    fn touch(&self, receipts: Vec<Receipt>) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::Touch { receipts })
    }

    /// Give a failed attempt back: atomically move the pending item to
    /// delayed, due at `not_before_ms`, keeping id and deliveries. If the
    /// item already had `max_deliveries` deliveries it is dead-lettered
    /// instead, and the outcome says so.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the receipt is not current; nothing changes.
    fn retry(
        &self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<RetryOutcome>> + Send {
        ask!(
            self,
            Request::Retry {
                receipt,
                not_before_ms,
            },
            Retried
        )
    }

    /// Give a claim back without counting it as an attempt (SPEC 3,
    /// Finishing): atomically move the pending item to delayed, due at
    /// `not_before_ms`, with `deliveries - 1`, so the delivery of this
    /// claim is not spent. Never dead-letters. An item of a paused flow goes
    /// to the flow's parked tail instead. For a consumer that could not
    /// attempt the item at all (it could not start the work, or is shutting
    /// down before finishing it).
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the receipt is not current; nothing changes.
    fn release(
        &self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::Release {
                receipt,
                not_before_ms,
            }
        )
    }

    /// Atomically move the pending item to the dead letters with `reason` and
    /// `failed_at_ms = now`.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the receipt is not current; nothing changes.
    fn dead_letter(
        &self,
        receipt: Receipt,
        reason: &str,
    ) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::DeadLetter {
                receipt,
                reason: reason.to_string(),
            }
        )
    }

    /// Take over up to `count` pending items whose claim is at least
    /// `min_idle` old, whoever held them, oldest claim first (by
    /// `claimed_at_ms`, then id). Each gets `deliveries += 1`, a new receipt
    /// and `claimed_at_ms = now`; they are [`Reclaimed::claimed`]. An item
    /// that would pass `max_deliveries` is dead-lettered instead, not
    /// handed out and not counted towards `count`: its old receipt is in
    /// [`Reclaimed::dead_lettered`] (so that a worker can count them).
    /// Embedded: items claimed before the current open are stale whatever
    /// `min_idle`. SPEC section 3, Crash recovery.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `count == 0`; storage or backend failures.
    fn reclaim(
        &self,
        min_idle: Duration,
        count: usize,
    ) -> impl Future<Output = Result<Reclaimed>> + Send {
        ask!(self, Request::Reclaim { min_idle, count }, Reclaimed)
    }

    /// Pause `flow`: from now on claims park its items instead of handing
    /// them out. Durable; pausing a paused flow changes nothing.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow name.
    fn pause(&self, flow: &str) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::Pause {
                flow: flow.to_string(),
            }
        )
    }

    /// Unpause `flow` and atomically move all of its parked items back to the
    /// backlog tail, oldest first. Returns how many moved.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow name.
    fn resume(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send {
        ask!(
            self,
            Request::Resume {
                flow: flow.to_string(),
            },
            Count
        )
    }

    /// Atomically move a pending item to its flow's parked-list tail.
    ///
    /// # Errors
    ///
    /// `LeaseLost` if the receipt is not current; `InvalidInput` if the item
    /// is in the default flow `""` (which cannot be parked).
    fn park(&self, receipt: Receipt) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::Park { receipt })
    }

    /// Atomically move the oldest parked item of `flow` into pending for the
    /// caller (`deliveries += 1`, lane `Parked`): one item runs, the rest stay
    /// held. `None` when nothing is parked. The flow stays paused.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow name.
    fn step(&self, flow: &str) -> impl Future<Output = Result<Option<Claimed>>> + Send {
        ask!(
            self,
            Request::Step {
                flow: flow.to_string(),
            },
            Stepped
        )
    }

    /// Delete the flow's parked items and its pause state; returns how many
    /// items were deleted. Deletes work unrun.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow name.
    fn clear_flow(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send {
        ask!(
            self,
            Request::ClearFlow {
                flow: flow.to_string(),
            },
            Count
        )
    }

    /// How many items `flow` has parked.
    fn parked(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send {
        ask!(
            self,
            Request::Parked {
                flow: flow.to_string(),
            },
            Count
        )
    }

    /// The paused flows, sorted.
    fn paused_flows(&self) -> impl Future<Output = Result<Vec<String>>> + Send {
        ask!(self, Request::PausedFlows, Flows)
    }

    // ---- flow limits (SPEC 3, Flow limits) ----

    /// Set, change or clear one of `flow`'s limits (SPEC 3, Flow limits):
    /// a rate limit (at most N permits per period, each claim taking the
    /// item's cost), a concurrency cap (at most K items of the flow
    /// pending, across every consumer) or a back-off (hold the flow until
    /// a time; it lifts itself). Shared by every consumer of the queue (on
    /// Redis, the fleet). A claim skips the items of a flow its limits
    /// hold; they keep their place and tier, and a claim blocked waiting
    /// wakes when the flow may run again. Durable like pause state.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for the default flow `""`, a malformed flow name, a
    /// rate of 0 permits or 0 period, or a cap of 0.
    fn set_flow_limit(
        &self,
        flow: &str,
        limit: FlowLimit,
    ) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::SetFlowLimit {
                flow: flow.to_string(),
                limit,
            }
        )
    }

    /// Hold `flow` for `duration` from now by the queue's clock (SPEC 3,
    /// Flow limits): [`FlowLimit::BackOffUntil`] of now + `duration`. A
    /// longer back-off already in force is kept. One atomic operation:
    /// the time is read and the hold set in the same step, so two
    /// consumers backing off at once keep the longer of the two.
    ///
    /// # Errors
    ///
    /// As [`WorkQueue::set_flow_limit`].
    fn back_off(&self, flow: &str, duration: Duration) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::BackOff {
                flow: flow.to_string(),
                duration,
            }
        )
    }

    /// Every flow with a limit in force, by flow name, with its state
    /// (SPEC 3, Flow limits).
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable record.
    fn flow_limits(&self) -> impl Future<Output = Result<Vec<FlowLimits>>> + Send {
        ask!(self, Request::FlowLimits, FlowLimits)
    }

    /// Remember that `step` of item `id` happened, for `done_ttl`.
    ///
    /// # Errors
    ///
    /// Storage or backend failures only.
    fn mark_done(&self, id: u64, step: &str) -> impl Future<Output = Result<()>> + Send {
        ask!(
            self,
            Request::MarkDone {
                id,
                step: step.to_string(),
            }
        )
    }

    /// Whether `step` of item `id` was marked done within `done_ttl`.
    fn was_done(&self, id: u64, step: &str) -> impl Future<Output = Result<bool>> + Send {
        ask!(
            self,
            Request::WasDone {
                id,
                step: step.to_string(),
            },
            Bool
        )
    }

    /// Up to `count` dead letters, newest first.
    fn dead_letters(&self, count: usize) -> impl Future<Output = Result<Vec<DeadLetter>>> + Send {
        ask!(self, Request::DeadLetters { count }, DeadLetters)
    }

    /// Atomically move dead letter `id` back to the backlog tail with
    /// `deliveries = 0`. False if there is no such dead letter.
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` if the item's record is unreadable.
    fn redrive(&self, id: u64) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::Redrive { id }, Bool)
    }

    /// Delete every dead letter; returns how many.
    fn purge_dead_letters(&self) -> impl Future<Output = Result<u64>> + Send {
        ask!(self, Request::PurgeDeadLetters, Count)
    }

    /// Delete item `id` unrun (SPEC 3, Removing): an item that is waiting
    /// (backlog, due lane, or held by a flow limit), delayed, parked or a
    /// dead letter is gone for good, with its progress and chunks. No
    /// outcome is written (a dead letter keeps the one its dead-lettering
    /// wrote, as after `purge_dead_letters`); its dedup key stays taken
    /// until its window ends, as after an ack. Returns false, and changes
    /// nothing, when the queue holds no item `id`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` if the item is pending (claimed): a consumer holds it,
    /// so it is finished through its receipt (ack, retry, dead-letter), not
    /// removed; nothing changes. `Decode` for an unreadable record.
    fn remove(&self, id: u64) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::Remove { id }, Bool)
    }

    /// Cancel item `id` (SPEC 3, Cancelling). An item that is waiting
    /// (backlog, due lane, or held by a flow limit), delayed or parked ends
    /// at once as cancelled: it leaves its state, and its outcome
    /// ([`OutcomeKind::Cancelled`](crate::OutcomeKind::Cancelled), kept
    /// for `result_ttl` as any outcome) wakes `wait_outcome` waiters; its
    /// progress and chunks live as long as that outcome, and its dedup key
    /// stays taken until its window ends. A pending item is marked
    /// ([`CancelOutcome::Marked`]): the next call its holder makes with
    /// the receipt (`ack`, `touch`, `set_progress`, `send_chunk`, `retry`,
    /// `release`, `dead_letter`, `park`; each of `ack_batch`) ends it as
    /// cancelled and answers [`Error::Cancelled`](crate::Error::Cancelled);
    /// a reclaim of its stale claim ends it too
    /// ([`Reclaimed::cancelled`]). [`WorkQueue::wait_cancelled`] tells a
    /// holder at once. Cancelling a marked item again answers `Marked`;
    /// an id the queue does not hold answers `NotFound`. Nothing changes
    /// for those two.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a dead letter (it has finished: `remove` deletes
    /// it, `redrive` runs it again); nothing changes. `Decode` for an
    /// unreadable record.
    fn cancel(&self, id: u64) -> impl Future<Output = Result<CancelOutcome>> + Send {
        ask!(self, Request::Cancel { id }, Cancel)
    }

    /// The ids among `ids` whose items are pending and marked by
    /// [`WorkQueue::cancel`], ascending (SPEC 3, Cancelling). While there
    /// are none it waits up to `wait` (real time, like a claim's) and
    /// returns as soon as one of them is marked, from any process, without
    /// polling (memory and embedded: an in-process wake-up; a server's
    /// clients: the server's; Redis: a blocking read of the namespace's
    /// events stream, in rounds of at most 10 s). Empty when the wait runs
    /// out. Read only: dropping the future changes nothing. A worker calls
    /// it with the ids it holds, to stop their handlers.
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable record.
    fn wait_cancelled(
        &self,
        ids: Vec<u64>,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<u64>>> + Send {
        ask!(self, Request::WaitCancelled { ids, wait }, Ids)
    }

    /// Change a waiting item's priority tier, not-before time or payload,
    /// atomically (SPEC 3, Updating). The item keeps its id, flow, cost,
    /// dedup key and deliveries. A new tier re-ranks it where it waits,
    /// keeping its arrival and its position in the lane; a new not-before
    /// time after now makes it delayed until then, and one at or before
    /// now makes it due, entering the due lane's tail as a promotion
    /// would. Returns false, and changes nothing, when the queue holds no
    /// item `id` and keeps no outcome of it (never added, removed, or its
    /// outcome expired). BullMQ's `changeDelay`, `changePriority` and
    /// `updateData` in one call.
    ///
    /// # Errors
    ///
    /// `InvalidInput`, and nothing changes: an empty update; a payload over
    /// `max_payload_bytes`; a pending item (its holder finishes it through
    /// its receipt); a dead letter or a finished item (acked or cancelled,
    /// while its outcome is kept); a not-before time for a parked item
    /// (it waits for `step` or `resume`, not a timer). `Decode` for an
    /// unreadable record.
    fn update(&self, id: u64, update: ItemUpdate) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::Update { id, update }, Bool)
    }

    /// Exact counts of every state.
    fn stats(&self) -> impl Future<Output = Result<Stats>> + Send {
        ask!(self, Request::Stats, Stats)
    }

    /// Count by flow over the next `sample` items in claim order (due lane,
    /// delayed items already due, backlog), paused flows included.
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable record.
    fn backlog_by_flow(
        &self,
        sample: usize,
    ) -> impl Future<Output = Result<BTreeMap<String, u64>>> + Send {
        ask!(self, Request::BacklogByFlow { sample }, BacklogByFlow)
    }

    /// The next `count` items a claim would hand out (due lane, delayed items
    /// already due, backlog; paused flows skipped), without claiming them.
    ///
    /// # Errors
    ///
    /// Only the common ones; `Decode` for an unreadable record.
    fn peek(&self, count: usize) -> impl Future<Output = Result<Vec<Item>>> + Send {
        ask!(self, Request::Peek { count }, Items)
    }

    /// One page of the items in `query`'s state, in that state's order,
    /// without claiming or changing anything (SPEC 12.1): at most
    /// [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT) items, and with
    /// [`ListQuery::contains`] at most
    /// [`MAX_SEARCH_SCAN`](crate::MAX_SEARCH_SCAN) positions looked at. Read
    /// on from [`ItemPage::next_offset`]; pages read while the queue changes
    /// may skip or repeat an item that moved.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a limit of 0; `Decode` for an unreadable record;
    /// the common ones. Cancel-safe (read only).
    fn list(&self, query: ListQuery) -> impl Future<Output = Result<ItemPage>> + Send {
        ask!(self, Request::List { query }, Page)
    }

    /// Item `id` with its state (SPEC 12.1), or `None` if the queue holds no
    /// such item (acknowledged, purged, dropped past the dead-letter cap,
    /// or never added).
    ///
    /// # Errors
    ///
    /// `Decode` for an unreadable record; the common ones. Cancel-safe
    /// (read only).
    fn find(&self, id: u64) -> impl Future<Output = Result<Option<ListedItem>>> + Send {
        ask!(self, Request::Find { id }, Found)
    }

    /// Now, by the queue's clock, in ms since the Unix epoch.
    fn now_ms(&self) -> impl Future<Output = Result<u64>> + Send {
        ask!(self, Request::Now, Time)
    }

    /// The handle's [`Config::max_deliveries`](crate::Config::max_deliveries):
    /// the delivery past which `retry` and `reclaim` dead-letter an
    /// item (SPEC section 3). Fixed when the handle is opened; a
    /// [`Worker`](crate::Worker) reads it here, so the two cannot disagree.
    fn max_deliveries(&self) -> u32;

    /// Rewrite the storage to give back free space. Returns whether anything
    /// was given back. Only the embedded backend has anything to do; the
    /// others return `Ok(false)`.
    fn compact(&self) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::Compact, Bool)
    }

    /// Finish what is in flight and release the file or connections. Later
    /// calls fail with `Error::Closed`.
    fn close(&self) -> impl Future<Output = Result<()>> + Send {
        ask!(self, Request::Close)
    }
}
