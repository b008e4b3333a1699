//! The typed operations a backend implements ([`Backend`]) and the one
//! place a [`Request`] becomes one of them ([`dispatch`]).
//!
//! A backend implements `Backend` and answers
//! [`WorkQueue::call`](super::WorkQueue::call) with `dispatch(self,
//! request)`; the compiler then checks that it has every operation, and no
//! backend writes the match over `Request` again (docs/DESIGN.md, One
//! request type). Each method is the typed method of `WorkQueue` of the
//! same name, whose docs say what it does.

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
use crate::request::{Reply, Request};
use crate::schedule::fire::{self, ScheduleRows, ScheduleScan, ScheduleSwap};
use crate::schedule::{Fired, Schedule, ScheduleInfo};

/// The operations of the contract as typed methods, implemented by each
/// backend (memory, embedded, Redis, remote, partitioned); the layers that
/// pass operations on implement only `WorkQueue::call`.
#[allow(missing_docs)] // each method is documented on `WorkQueue`
pub(crate) trait Backend: Send + Sync {
    fn add(&self, item: NewItem) -> impl Future<Output = Result<Added>> + Send;
    fn add_batch(&self, items: Vec<NewItem>) -> impl Future<Output = Result<Vec<Added>>> + Send;
    fn add_delayed(
        &self,
        item: NewItem,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<Added>> + Send;
    fn next_due(&self) -> impl Future<Output = Result<Option<u64>>> + Send;
    fn promote_due(&self) -> impl Future<Output = Result<u64>> + Send;
    fn promote(&self, id: u64) -> impl Future<Output = Result<bool>> + Send {
        async move {
            let _ = id;
            Err(crate::error::Error::invalid(
                "promote is not supported by this backend yet",
            ))
        }
    }
    fn claim(
        &self,
        count: usize,
        wait: Duration,
        from: ClaimFrom,
    ) -> impl Future<Output = Result<Vec<Claimed>>> + Send;
    fn ack(&self, receipt: Receipt) -> impl Future<Output = Result<()>> + Send;
    fn ack_with_result(
        &self,
        receipt: Receipt,
        result: Vec<u8>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn outcome(&self, id: u64) -> impl Future<Output = Result<Option<Outcome>>> + Send;
    fn wait_outcome(
        &self,
        id: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Option<Outcome>>> + Send;
    fn set_progress(
        &self,
        receipt: Receipt,
        progress: Vec<u8>,
    ) -> impl Future<Output = Result<()>> + Send;
    fn send_chunk(
        &self,
        receipt: Receipt,
        chunk: Vec<u8>,
    ) -> impl Future<Output = Result<u64>> + Send;
    fn progress(&self, id: u64) -> impl Future<Output = Result<Option<Vec<u8>>>> + Send;
    fn wait_chunks(
        &self,
        id: u64,
        after_seq: u64,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<Chunk>>> + Send;
    fn ack_batch(&self, receipts: Vec<Receipt>) -> impl Future<Output = Result<u64>> + Send;
    fn touch(&self, receipts: Vec<Receipt>) -> impl Future<Output = Result<()>> + Send;
    fn retry(
        &self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<RetryOutcome>> + Send;
    fn release(
        &self,
        receipt: Receipt,
        not_before_ms: u64,
    ) -> impl Future<Output = Result<()>> + Send;
    fn dead_letter(
        &self,
        receipt: Receipt,
        reason: &str,
    ) -> impl Future<Output = Result<()>> + Send;
    fn reclaim(
        &self,
        min_idle: Duration,
        count: usize,
    ) -> impl Future<Output = Result<Reclaimed>> + Send;
    fn pause(&self, flow: &str) -> impl Future<Output = Result<()>> + Send;
    fn resume(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send;
    fn park(&self, receipt: Receipt) -> impl Future<Output = Result<()>> + Send;
    fn step(&self, flow: &str) -> impl Future<Output = Result<Option<Claimed>>> + Send;
    fn clear_flow(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send;
    fn parked(&self, flow: &str) -> impl Future<Output = Result<u64>> + Send;
    fn paused_flows(&self) -> impl Future<Output = Result<Vec<String>>> + Send;
    fn set_flow_limit(
        &self,
        flow: &str,
        limit: FlowLimit,
    ) -> impl Future<Output = Result<()>> + Send;
    fn back_off(&self, flow: &str, duration: Duration) -> impl Future<Output = Result<()>> + Send;
    fn flow_limits(&self) -> impl Future<Output = Result<Vec<FlowLimits>>> + Send;
    fn mark_done(&self, id: u64, step: &str) -> impl Future<Output = Result<()>> + Send;
    fn was_done(&self, id: u64, step: &str) -> impl Future<Output = Result<bool>> + Send;
    fn dead_letters(&self, count: usize) -> impl Future<Output = Result<Vec<DeadLetter>>> + Send;
    fn redrive(&self, id: u64) -> impl Future<Output = Result<bool>> + Send;
    fn purge_dead_letters(&self) -> impl Future<Output = Result<u64>> + Send;
    fn remove(&self, id: u64) -> impl Future<Output = Result<bool>> + Send;
    fn cancel(&self, id: u64) -> impl Future<Output = Result<CancelOutcome>> + Send;
    fn update(&self, id: u64, update: ItemUpdate) -> impl Future<Output = Result<bool>> + Send;
    fn wait_cancelled(
        &self,
        ids: Vec<u64>,
        wait: Duration,
    ) -> impl Future<Output = Result<Vec<u64>>> + Send;
    fn stats(&self) -> impl Future<Output = Result<Stats>> + Send;
    fn backlog_by_flow(
        &self,
        sample: usize,
    ) -> impl Future<Output = Result<BTreeMap<String, u64>>> + Send;
    fn peek(&self, count: usize) -> impl Future<Output = Result<Vec<Item>>> + Send;
    fn list(&self, query: ListQuery) -> impl Future<Output = Result<ItemPage>> + Send;
    fn find(&self, id: u64) -> impl Future<Output = Result<Option<ListedItem>>> + Send;
    fn now_ms(&self) -> impl Future<Output = Result<u64>> + Send;
    fn compact(&self) -> impl Future<Output = Result<bool>> + Send {
        async { Ok(false) }
    }
    fn close(&self) -> impl Future<Output = Result<()>> + Send;

    // Schedules (SPEC 13). The storage backends implement the two
    // primitives; the operations are written once over them
    // (`schedule::fire`), and the partitioned queue routes them itself.

    /// Stored schedule records (`schedule::fire`, module doc).
    fn schedule_load(
        &self,
        scan: ScheduleScan,
    ) -> impl Future<Output = Result<ScheduleRows>> + Send {
        async move {
            let _ = scan;
            Err(crate::error::Error::invalid(
                "schedules are not supported by this backend",
            ))
        }
    }
    /// One compare-and-swap of a schedule record with the items of its
    /// slots, in one transaction: `None` when the record is not at the
    /// expected generation (nothing changed), else the ids added.
    fn schedule_swap(
        &self,
        swap: ScheduleSwap,
    ) -> impl Future<Output = Result<Option<Vec<u64>>>> + Send {
        async move {
            let _ = swap;
            Err(crate::error::Error::invalid(
                "schedules are not supported by this backend",
            ))
        }
    }
    /// Several swaps, each answered on its own as by
    /// [`Backend::schedule_swap`]; a firer sends every due schedule of one
    /// firing at once. By default they run concurrently (the embedded
    /// writer commits them in one transaction); Redis sends them in one
    /// script call.
    fn schedule_swap_many(
        &self,
        swaps: Vec<ScheduleSwap>,
    ) -> impl Future<Output = Result<Vec<Result<Option<Vec<u64>>>>>> + Send
    where
        Self: Sized,
    {
        fire::swap_each(swaps, |s| self.schedule_swap(s))
    }
    fn upsert_schedule(&self, schedule: Schedule) -> impl Future<Output = Result<bool>> + Send
    where
        Self: Sized,
    {
        fire::upsert(self, schedule)
    }
    fn remove_schedule(&self, name: String) -> impl Future<Output = Result<bool>> + Send
    where
        Self: Sized,
    {
        async move { fire::remove(self, &name).await }
    }
    fn pause_schedule(&self, name: String) -> impl Future<Output = Result<bool>> + Send
    where
        Self: Sized,
    {
        async move { fire::set_paused(self, &name, true).await }
    }
    fn resume_schedule(&self, name: String) -> impl Future<Output = Result<bool>> + Send
    where
        Self: Sized,
    {
        async move { fire::set_paused(self, &name, false).await }
    }
    fn schedules(&self) -> impl Future<Output = Result<Vec<ScheduleInfo>>> + Send
    where
        Self: Sized,
    {
        fire::list(self)
    }
    fn preview_schedule(
        &self,
        name: String,
        count: usize,
    ) -> impl Future<Output = Result<Vec<u64>>> + Send
    where
        Self: Sized,
    {
        async move { fire::preview(self, &name, count).await }
    }
    fn fire_schedules(&self) -> impl Future<Output = Result<Fired>> + Send
    where
        Self: Sized,
    {
        fire::fire(self)
    }
}

/// Carry out `request` on `backend`: the match over every [`Request`],
/// written once for every backend.
pub(crate) async fn dispatch<B: Backend>(backend: &B, request: Request) -> Result<Reply> {
    let b = backend;
    Ok(match request {
        Request::Add { item } => Reply::Added(b.add(item).await?),
        Request::AddBatch { items } => Reply::AddedList(b.add_batch(items).await?),
        Request::AddDelayed {
            item,
            not_before_ms,
        } => Reply::Added(b.add_delayed(item, not_before_ms).await?),
        Request::NextDue => Reply::NextDue(b.next_due().await?),
        Request::PromoteDue => Reply::Count(b.promote_due().await?),
        Request::Promote { id } => Reply::Bool(b.promote(id).await?),
        Request::Claim { count, wait, from } => Reply::Claimed(b.claim(count, wait, from).await?),
        Request::Ack { receipt } => {
            b.ack(receipt).await?;
            Reply::Unit
        }
        Request::AckWithResult { receipt, result } => {
            b.ack_with_result(receipt, result).await?;
            Reply::Unit
        }
        Request::Outcome { id } => Reply::Outcome(b.outcome(id).await?),
        Request::WaitOutcome { id, wait } => Reply::Outcome(b.wait_outcome(id, wait).await?),
        Request::SetProgress { receipt, progress } => {
            b.set_progress(receipt, progress).await?;
            Reply::Unit
        }
        Request::SendChunk { receipt, chunk } => Reply::Seq(b.send_chunk(receipt, chunk).await?),
        Request::Progress { id } => Reply::Progress(b.progress(id).await?),
        Request::WaitChunks {
            id,
            after_seq,
            wait,
        } => Reply::Chunks(b.wait_chunks(id, after_seq, wait).await?),
        Request::AckBatch { receipts } => Reply::Count(b.ack_batch(receipts).await?),
        Request::Touch { receipts } => {
            b.touch(receipts).await?;
            Reply::Unit
        }
        Request::Retry {
            receipt,
            not_before_ms,
        } => Reply::Retried(b.retry(receipt, not_before_ms).await?),
        Request::Release {
            receipt,
            not_before_ms,
        } => {
            b.release(receipt, not_before_ms).await?;
            Reply::Unit
        }
        Request::DeadLetter { receipt, reason } => {
            b.dead_letter(receipt, &reason).await?;
            Reply::Unit
        }
        Request::Reclaim { min_idle, count } => Reply::Reclaimed(b.reclaim(min_idle, count).await?),
        Request::Pause { flow } => {
            b.pause(&flow).await?;
            Reply::Unit
        }
        Request::Resume { flow } => Reply::Count(b.resume(&flow).await?),
        Request::Park { receipt } => {
            b.park(receipt).await?;
            Reply::Unit
        }
        Request::Step { flow } => Reply::Stepped(b.step(&flow).await?),
        Request::ClearFlow { flow } => Reply::Count(b.clear_flow(&flow).await?),
        Request::Parked { flow } => Reply::Count(b.parked(&flow).await?),
        Request::PausedFlows => Reply::Flows(b.paused_flows().await?),
        Request::SetFlowLimit { flow, limit } => {
            b.set_flow_limit(&flow, limit).await?;
            Reply::Unit
        }
        Request::BackOff { flow, duration } => {
            b.back_off(&flow, duration).await?;
            Reply::Unit
        }
        Request::FlowLimits => Reply::FlowLimits(b.flow_limits().await?),
        Request::MarkDone { id, step } => {
            b.mark_done(id, &step).await?;
            Reply::Unit
        }
        Request::WasDone { id, step } => Reply::Bool(b.was_done(id, &step).await?),
        Request::DeadLetters { count } => Reply::DeadLetters(b.dead_letters(count).await?),
        Request::Redrive { id } => Reply::Bool(b.redrive(id).await?),
        Request::PurgeDeadLetters => Reply::Count(b.purge_dead_letters().await?),
        Request::Remove { id } => Reply::Bool(b.remove(id).await?),
        Request::Cancel { id } => Reply::Cancel(b.cancel(id).await?),
        Request::WaitCancelled { ids, wait } => Reply::Ids(b.wait_cancelled(ids, wait).await?),
        Request::Update { id, update } => Reply::Bool(b.update(id, update).await?),
        Request::Stats => Reply::Stats(b.stats().await?),
        Request::BacklogByFlow { sample } => Reply::BacklogByFlow(b.backlog_by_flow(sample).await?),
        Request::Peek { count } => Reply::Items(b.peek(count).await?),
        Request::List { query } => Reply::Page(b.list(query).await?),
        Request::Find { id } => Reply::Found(b.find(id).await?),
        Request::Now => Reply::Time(b.now_ms().await?),
        Request::Compact => Reply::Bool(b.compact().await?),
        Request::Close => {
            b.close().await?;
            Reply::Unit
        }
        Request::UpsertSchedule { schedule } => Reply::Bool(b.upsert_schedule(schedule).await?),
        Request::RemoveSchedule { name } => Reply::Bool(b.remove_schedule(name).await?),
        Request::PauseSchedule { name } => Reply::Bool(b.pause_schedule(name).await?),
        Request::ResumeSchedule { name } => Reply::Bool(b.resume_schedule(name).await?),
        Request::Schedules => Reply::Schedules(b.schedules().await?),
        Request::PreviewSchedule { name, count } => {
            Reply::Times(b.preview_schedule(name, count).await?)
        }
        Request::FireSchedules => Reply::Fired(b.fire_schedules().await?),
    })
}
