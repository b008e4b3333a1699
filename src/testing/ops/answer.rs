//! The reference's side of a [`Request`]: the one function that carries
//! out any operation of the contract on the [`Model`] at a given time, as
//! the memory backend does (its waits are over at once: the runner never
//! waits).

use crate::backend::memory::Model;
use crate::config::ms;
use crate::request::{Reply, Request};

/// Carry out `request` on `model` at `now_ms` and give its reply, as
/// [`MemoryQueue`](crate::MemoryQueue) would with its clock at `now_ms`
/// (the caller notes the clock first: every backend does, SPEC 3, Clock steps).
///
/// # Errors
///
/// The model's error for the operation.
pub fn answer(model: &mut Model, request: Request, now_ms: u64) -> crate::Result<Reply> {
    let m = model;
    let now = now_ms;
    if let Some(reply) = crate::backend::memory::answer_schedule(m, &request, now) {
        return reply;
    }
    Ok(match request {
        Request::Add { item } => Reply::Added(one(m.add_many(vec![(item, None)], now)?)?),
        Request::AddBatch { items } => {
            Reply::AddedList(m.add_many(items.into_iter().map(|i| (i, None)).collect(), now)?)
        }
        Request::AddDelayed {
            item,
            not_before_ms,
        } => Reply::Added(one(m.add_many(vec![(item, Some(not_before_ms))], now)?)?),
        Request::NextDue => Reply::NextDue(m.next_due()),
        Request::PromoteDue => Reply::Count(m.promote_due(now)),
        Request::Promote { id } => Reply::Bool(m.promote(id, now)),
        Request::Claim { count, from, .. } => Reply::Claimed(m.claim(count, from, now)?),
        Request::Ack { receipt } => {
            m.ack(receipt, now)?;
            Reply::Unit
        }
        Request::AckWithResult { receipt, result } => {
            m.ack_with_result(receipt, result, now)?;
            Reply::Unit
        }
        Request::Outcome { id } | Request::WaitOutcome { id, .. } => {
            Reply::Outcome(m.outcome(id, now))
        }
        Request::SetProgress { receipt, progress } => {
            m.set_progress(receipt, progress, now)?;
            Reply::Unit
        }
        Request::SendChunk { receipt, chunk } => Reply::Seq(m.send_chunk(receipt, chunk, now)?),
        Request::Progress { id } => Reply::Progress(m.progress(id, now)),
        Request::WaitChunks { id, after_seq, .. } => {
            Reply::Chunks(m.chunks_after(id, after_seq, now))
        }
        Request::AckBatch { receipts } => Reply::Count(m.ack_batch(&receipts, now)),
        Request::Touch { receipts } => {
            m.touch(&receipts, now)?;
            Reply::Unit
        }
        Request::Retry {
            receipt,
            not_before_ms,
        } => Reply::Retried(m.retry(receipt, not_before_ms, now)?),
        Request::Release {
            receipt,
            not_before_ms,
        } => {
            m.release(receipt, not_before_ms, now)?;
            Reply::Unit
        }
        Request::DeadLetter { receipt, reason } => {
            m.dead_letter(receipt, &reason, now)?;
            Reply::Unit
        }
        Request::Reclaim { min_idle, count } => Reply::Reclaimed(m.reclaim(min_idle, count, now)?),
        Request::Pause { flow } => {
            m.pause(&flow)?;
            Reply::Unit
        }
        Request::Resume { flow } => Reply::Count(m.resume(&flow, now)?),
        Request::Park { receipt } => {
            m.park(receipt, now)?;
            Reply::Unit
        }
        Request::Step { flow } => Reply::Stepped(m.step(&flow, now)?),
        Request::ClearFlow { flow } => Reply::Count(m.clear_flow(&flow)?),
        Request::Parked { flow } => Reply::Count(m.parked(&flow)),
        Request::PausedFlows => Reply::Flows(m.paused_flows()),
        Request::SetFlowLimit { flow, limit } => {
            m.set_flow_limit(&flow, limit, now)?;
            Reply::Unit
        }
        Request::BackOff { flow, duration } => {
            m.back_off(&flow, ms(duration), now)?;
            Reply::Unit
        }
        Request::FlowLimits => Reply::FlowLimits(m.flow_limits(now)),
        Request::MarkDone { id, step } => {
            m.mark_done(id, &step, now);
            Reply::Unit
        }
        Request::WasDone { id, step } => Reply::Bool(m.was_done(id, &step, now)),
        Request::DeadLetters { count } => Reply::DeadLetters(m.dead_letters(count)),
        Request::Redrive { id } => Reply::Bool(m.redrive(id, now)),
        Request::PurgeDeadLetters => Reply::Count(m.purge_dead_letters()),
        Request::Remove { id } => Reply::Bool(m.remove(id, now)?),
        Request::Cancel { id } => Reply::Cancel(m.cancel(id, now)?),
        Request::Update { id, update } => Reply::Bool(m.update(id, &update, now)?),
        // The reference answers at once: a runner calls it with no wait.
        Request::WaitCancelled { ids, .. } => Reply::Ids(m.cancelled_among(&ids)),
        Request::Stats => Reply::Stats(m.stats(now)),
        Request::BacklogByFlow { sample } => Reply::BacklogByFlow(m.backlog_by_flow(sample, now)),
        Request::Peek { count } => Reply::Items(m.peek(count, now)),
        Request::List { query } => Reply::Page(m.list(&query, now)?),
        Request::Find { id } => Reply::Found(m.find(id, now)),
        Request::Now => Reply::Time(now),
        // The memory backend has nothing to compact, and a closed model
        // is the model (the runner never sends either).
        Request::Compact => Reply::Bool(false),
        Request::Close => Reply::Unit,
        // Answered above, by `answer_schedule`.
        Request::UpsertSchedule { .. }
        | Request::RemoveSchedule { .. }
        | Request::PauseSchedule { .. }
        | Request::ResumeSchedule { .. }
        | Request::Schedules
        | Request::PreviewSchedule { .. }
        | Request::FireSchedules => {
            return Err(crate::error::Error::corrupt(
                "a schedule request fell through",
            ));
        }
    })
}

/// The one add of a single-item `add_many`.
fn one(mut added: Vec<crate::item::Added>) -> crate::Result<crate::item::Added> {
    added
        .pop()
        .ok_or_else(|| crate::error::Error::corrupt("add returned no id"))
}
