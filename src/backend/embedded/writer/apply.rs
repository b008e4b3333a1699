//! One writer operation on the tables of the open transaction: the match
//! from [`Op`] to the table code that carries it out, shared by the live
//! path and the redo log's replay.

use super::{Op, Reply};
use crate::backend::embedded::tables::Tables;
use crate::error::Result;

/// Carry out `op` at `now` (ms since the Unix epoch, the writer's clock)
/// on `t`. An error leaves the tables as they were when it is one that
/// changed nothing (`commit::changed_nothing`); any other poisons the
/// transaction.
pub(super) fn apply(t: &mut Tables<'_>, op: &Op, now: u64) -> Result<Reply> {
    Ok(match op {
        Op::Add(items) => Reply::Added(t.add(items, now)?),
        Op::Promote => Reply::Count(t.promote_due(now)?),
        Op::PromoteId(id) => Reply::Bool(t.promote_id(*id, now)?),
        Op::Remove(id) => Reply::Bool(t.remove_id(*id, now)?),
        Op::Cancel(id) => Reply::Cancel(t.cancel(*id, now)?),
        Op::Update(id, update) => Reply::Bool(t.update(*id, update, now)?),
        Op::EndCancelled(r) => Reply::Bool(t.end_cancelled(r, now)?),
        Op::Cancelling(ids) => Reply::Ids(t.cancelled_among(ids)?),
        Op::BackOff(f, d) => {
            t.back_off(f, *d, now)?;
            Reply::Unit
        }
        Op::ScheduleLoad(scan) => Reply::Schedules(t.schedule_load(scan)?),
        Op::ScheduleSwap(swap) => Reply::Swapped(t.schedule_swap(swap, now)?),
        Op::Claim { count, from } => {
            let claimed = t.claim(*count, *from, now)?;
            // An empty claim is followed by a wait until the next timer:
            // read it in this transaction rather than in another one.
            let next_due = if claimed.is_empty() {
                t.next_wake()?
            } else {
                None
            };
            Reply::Claim { claimed, next_due }
        }
        Op::Ack(r, result) => {
            t.ack(r, result, now)?;
            Reply::Unit
        }
        Op::Outcome(id) => Reply::Outcome(t.outcome(*id, now)?),
        Op::SetProgress(r, p) => {
            t.set_progress(r, p)?;
            Reply::Unit
        }
        Op::SendChunk(r, c) => Reply::Count(t.send_chunk(r, c)?),
        Op::Progress(id) => Reply::Bytes(t.progress(*id, now)?),
        Op::Chunks(id, after) => {
            let (chunks, finished) = t.chunks_after(*id, *after, now)?;
            Reply::Chunks(chunks, finished)
        }
        Op::AckBatch(rs) => Reply::Count(t.ack_batch(rs, now)?),
        Op::Touch(rs) => {
            t.touch(rs, now)?;
            Reply::Unit
        }
        Op::Retry(r, nb) => Reply::Retry(t.retry(r, *nb, now)?),
        Op::Release(r, nb) => {
            t.release(r, *nb, now)?;
            Reply::Unit
        }
        Op::DeadLetter(r, reason) => {
            t.dead_letter(r, reason, now)?;
            Reply::Unit
        }
        Op::Reclaim { min_idle_ms, count } => {
            Reply::Reclaimed(t.reclaim(*min_idle_ms, *count, now)?)
        }
        Op::Pause(f) => {
            t.pause(f)?;
            Reply::Unit
        }
        Op::Resume(f) => Reply::Count(t.resume(f, now)?),
        Op::Park(r) => {
            t.park(r, now)?;
            Reply::Unit
        }
        Op::Step(f) => Reply::Step(t.step(f, now)?),
        Op::ClearFlow(f) => Reply::Count(t.clear_flow(f)?),
        Op::MarkDone(id, step) => {
            t.mark_done(*id, step, now)?;
            Reply::Unit
        }
        Op::Redrive(id) => Reply::Bool(t.redrive(*id, now)?),
        Op::PurgeDead => Reply::Count(t.purge_dead_letters()?),
        Op::NextDue => Reply::Due(t.next_due()?),
        Op::Parked(f) => Reply::Count(t.parked_count(f)?),
        Op::PausedFlows => Reply::Flows(t.paused_flows()?),
        Op::SetFlowLimit(f, l) => {
            t.set_flow_limit(f, *l, now)?;
            Reply::Unit
        }
        Op::FlowLimits => Reply::Limits(t.flow_limits_list(now)?),
        Op::WasDone(id, step) => Reply::Bool(t.was_done(*id, step, now)?),
        Op::DeadLetters(n) => Reply::Dead(t.dead_letters(*n)?),
        Op::Stats => Reply::Stats(t.stats(now)?),
        Op::BacklogByFlow(n) => Reply::ByFlow(t.backlog_by_flow(*n, now)?),
        Op::Peek(n) => Reply::Items(t.peek(*n, now)?),
        Op::List(q) => Reply::Page(t.list(q, now)?),
        Op::Find(id) => Reply::Found(t.find(*id, now)?),
        #[cfg(feature = "forward")]
        Op::ForwardJournal(candidate) => Reply::Count(t.forward_journal(*candidate)?),
        #[cfg(feature = "forward")]
        Op::ForwardRead {
            key,
            flows,
            max_items,
            max_bytes,
            late,
        } => Reply::Outgoing(t.forward_read(
            key,
            flows.as_deref(),
            *max_items,
            *max_bytes,
            *late,
            now,
        )?),
        #[cfg(feature = "forward")]
        Op::ForwardDone { key, ids, mark } => Reply::Count(t.forward_done(key, ids, *mark)?),
        #[cfg(feature = "forward")]
        Op::ForwardLag(flows) => Reply::Lag(t.forward_lag(flows.as_deref())?),
        #[cfg(feature = "testing")]
        Op::Locations => Reply::Locations(t.locations()?),
        #[cfg(feature = "testing")]
        Op::Dump => Reply::Dump(t.dump()?),
        #[cfg(feature = "testing")]
        Op::Audit => Reply::Audit(t.audit()?),
    })
}
