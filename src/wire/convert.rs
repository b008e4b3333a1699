//! Between the contract's [`crate::Request`] / [`crate::Reply`] and the
//! wire's JSON types: the one place each operation gets its route, its
//! body and its reply body, for the server and the client alike.

use std::time::Duration;

use serde::Serialize;
use serde::de::DeserializeOwned;

use super::{
    AckWithResultRequest, AddBatchRequest, AddDelayedRequest, AddedList, BackOffRequest,
    CancelReply, ChunkList, ClaimRequest, ClaimedList, Count, CountRequest, DeadLetterList,
    DeadLetterRequest, Done, DoneRequest, FiredReply, Flag, FlowCounts, FlowRequest, Flows,
    FoundReply, IdList, IdRequest, ItemList, ItemPageReply, LimitsReply, ListRequest, NextDue, Now,
    OutcomeReply, PreviewScheduleRequest, ProgressReply, ReceiptRequest, ReceiptsRequest,
    ReclaimRequest, ReclaimedList, Request, Retried, RetryRequest, SampleRequest, ScheduleList,
    ScheduleNameRequest, SendChunkRequest, Seq, SetFlowLimitRequest, SetProgressRequest, Stepped,
    Times, UpdateRequest, UpsertScheduleRequest, WaitCancelledRequest, WaitChunksRequest,
    WaitOutcomeRequest, WireAdded, WireNewItem, WireScheduleInfo, duration_ms,
};
use crate::request::{Reply as Q, Request as R};

impl Request {
    /// The wire form of a request of the contract: its route and body.
    /// `None` for [`crate::Request::Close`], which has no route (a client
    /// closes itself; the served queue stays open).
    pub fn from_queue(request: R) -> Option<Request> {
        Some(match request {
            R::Add { item } => Request::Add(item.into()),
            R::AddBatch { items } => Request::AddBatch(AddBatchRequest {
                items: items.into_iter().map(Into::into).collect(),
            }),
            R::AddDelayed {
                item,
                not_before_ms,
            } => {
                let w = WireNewItem::from(item);
                Request::AddDelayed(AddDelayedRequest {
                    flow: w.flow,
                    payload: w.payload,
                    dedup_key: w.dedup_key,
                    priority: w.priority,
                    cost: w.cost,
                    not_before_ms,
                })
            }
            R::NextDue => Request::NextDue,
            R::PromoteDue => Request::PromoteDue,
            R::Promote { id } => Request::Promote(IdRequest { id }),
            R::Claim { count, wait, from } => Request::Claim(ClaimRequest {
                count,
                wait_ms: duration_ms(wait),
                from: from.into(),
            }),
            R::Ack { receipt } => Request::Ack(ReceiptRequest {
                receipt: receipt.into(),
            }),
            R::AckWithResult { receipt, result } => Request::AckWithResult(AckWithResultRequest {
                receipt: receipt.into(),
                result: super::Base64(result),
            }),
            R::Outcome { id } => Request::Outcome(IdRequest { id }),
            R::WaitOutcome { id, wait } => Request::WaitOutcome(WaitOutcomeRequest {
                id,
                wait_ms: duration_ms(wait),
            }),
            R::SetProgress { receipt, progress } => Request::SetProgress(SetProgressRequest {
                receipt: receipt.into(),
                progress: super::Base64(progress),
            }),
            R::SendChunk { receipt, chunk } => Request::SendChunk(SendChunkRequest {
                receipt: receipt.into(),
                chunk: super::Base64(chunk),
            }),
            R::Progress { id } => Request::Progress(IdRequest { id }),
            R::WaitChunks {
                id,
                after_seq,
                wait,
            } => Request::WaitChunks(WaitChunksRequest {
                id,
                after_seq,
                wait_ms: duration_ms(wait),
            }),
            R::AckBatch { receipts } => Request::AckBatch(ReceiptsRequest {
                receipts: receipts.into_iter().map(Into::into).collect(),
            }),
            R::Touch { receipts } => Request::Touch(ReceiptsRequest {
                receipts: receipts.into_iter().map(Into::into).collect(),
            }),
            R::Retry {
                receipt,
                not_before_ms,
            } => Request::Retry(RetryRequest {
                receipt: receipt.into(),
                not_before_ms,
            }),
            R::Release {
                receipt,
                not_before_ms,
            } => Request::Release(RetryRequest {
                receipt: receipt.into(),
                not_before_ms,
            }),
            R::DeadLetter { receipt, reason } => Request::DeadLetter(DeadLetterRequest {
                receipt: receipt.into(),
                reason,
            }),
            R::Reclaim { min_idle, count } => Request::Reclaim(ReclaimRequest {
                min_idle_ms: duration_ms(min_idle),
                count,
            }),
            R::Pause { flow } => Request::Pause(FlowRequest { flow }),
            R::Resume { flow } => Request::Resume(FlowRequest { flow }),
            R::Park { receipt } => Request::Park(ReceiptRequest {
                receipt: receipt.into(),
            }),
            R::Step { flow } => Request::Step(FlowRequest { flow }),
            R::ClearFlow { flow } => Request::ClearFlow(FlowRequest { flow }),
            R::Parked { flow } => Request::Parked(FlowRequest { flow }),
            R::PausedFlows => Request::PausedFlows,
            R::SetFlowLimit { flow, limit } => {
                Request::SetFlowLimit(SetFlowLimitRequest { flow, limit })
            }
            R::BackOff { flow, duration } => Request::BackOff(BackOffRequest {
                flow,
                duration_ms: duration_ms(duration),
            }),
            R::FlowLimits => Request::FlowLimits,
            R::MarkDone { id, step } => Request::MarkDone(DoneRequest { id, step }),
            R::WasDone { id, step } => Request::WasDone(DoneRequest { id, step }),
            R::DeadLetters { count } => Request::DeadLetters(CountRequest { count }),
            R::Redrive { id } => Request::Redrive(IdRequest { id }),
            R::PurgeDeadLetters => Request::PurgeDeadLetters,
            R::Remove { id } => Request::Remove(IdRequest { id }),
            R::Cancel { id } => Request::Cancel(IdRequest { id }),
            R::Update { id, update } => Request::Update(UpdateRequest {
                id,
                priority: update.priority,
                not_before_ms: update.not_before_ms,
                payload: update.payload.map(super::Base64),
            }),
            R::WaitCancelled { ids, wait } => Request::WaitCancelled(WaitCancelledRequest {
                ids,
                wait_ms: duration_ms(wait),
            }),
            R::Stats => Request::Stats,
            R::BacklogByFlow { sample } => Request::BacklogByFlow(SampleRequest { sample }),
            R::Peek { count } => Request::Peek(CountRequest { count }),
            R::List { query } => Request::List(ListRequest::from(&query)),
            R::Find { id } => Request::Find(IdRequest { id }),
            R::Now => Request::Now,
            R::Compact => Request::Compact,
            R::UpsertSchedule { schedule } => {
                Request::UpsertSchedule(Box::new(UpsertScheduleRequest {
                    schedule: schedule.into(),
                }))
            }
            R::RemoveSchedule { name } => Request::RemoveSchedule(ScheduleNameRequest { name }),
            R::PauseSchedule { name } => Request::PauseSchedule(ScheduleNameRequest { name }),
            R::ResumeSchedule { name } => Request::ResumeSchedule(ScheduleNameRequest { name }),
            R::Schedules => Request::Schedules,
            R::PreviewSchedule { name, count } => {
                Request::PreviewSchedule(PreviewScheduleRequest { name, count })
            }
            R::FireSchedules => Request::FireSchedules,
            R::Close => return None,
        })
    }

    /// The request of the contract this wire request carries, with every
    /// wait capped at `max_wait` (the server's long-poll bound, SPEC 10).
    /// The routes that are not an operation of the contract
    /// (`max_deliveries`, `forward_lag`, and `reclaim_stale`, which answers
    /// `reclaim` without its dead letters) come back as `Err(self)`.
    pub fn into_queue(self, max_wait: Duration) -> Result<R, Request> {
        let wait = |ms: u64| Duration::from_millis(ms).min(max_wait);
        Ok(match self {
            Request::Add(item) => R::Add { item: item.into() },
            Request::AddBatch(b) => R::AddBatch {
                items: b.items.into_iter().map(Into::into).collect(),
            },
            Request::AddDelayed(d) => R::AddDelayed {
                item: WireNewItem {
                    flow: d.flow,
                    payload: d.payload,
                    dedup_key: d.dedup_key,
                    priority: d.priority,
                    cost: d.cost,
                }
                .into(),
                not_before_ms: d.not_before_ms,
            },
            Request::NextDue => R::NextDue,
            Request::PromoteDue => R::PromoteDue,
            Request::Promote(i) => R::Promote { id: i.id },
            Request::Claim(c) => R::Claim {
                count: c.count,
                wait: wait(c.wait_ms),
                from: c.from.into(),
            },
            Request::Ack(r) => R::Ack {
                receipt: r.receipt.into(),
            },
            Request::AckBatch(r) => R::AckBatch {
                receipts: r.receipts.into_iter().map(Into::into).collect(),
            },
            Request::Touch(r) => R::Touch {
                receipts: r.receipts.into_iter().map(Into::into).collect(),
            },
            Request::Retry(r) => R::Retry {
                receipt: r.receipt.into(),
                not_before_ms: r.not_before_ms,
            },
            Request::Release(r) => R::Release {
                receipt: r.receipt.into(),
                not_before_ms: r.not_before_ms,
            },
            Request::DeadLetter(r) => R::DeadLetter {
                receipt: r.receipt.into(),
                reason: r.reason,
            },
            Request::Reclaim(r) => R::Reclaim {
                min_idle: Duration::from_millis(r.min_idle_ms),
                count: r.count,
            },
            Request::Pause(f) => R::Pause { flow: f.flow },
            Request::Resume(f) => R::Resume { flow: f.flow },
            Request::Park(r) => R::Park {
                receipt: r.receipt.into(),
            },
            Request::Step(f) => R::Step { flow: f.flow },
            Request::ClearFlow(f) => R::ClearFlow { flow: f.flow },
            Request::Parked(f) => R::Parked { flow: f.flow },
            Request::PausedFlows => R::PausedFlows,
            Request::MarkDone(d) => R::MarkDone {
                id: d.id,
                step: d.step,
            },
            Request::WasDone(d) => R::WasDone {
                id: d.id,
                step: d.step,
            },
            Request::DeadLetters(c) => R::DeadLetters { count: c.count },
            Request::Redrive(i) => R::Redrive { id: i.id },
            Request::PurgeDeadLetters => R::PurgeDeadLetters,
            Request::Remove(i) => R::Remove { id: i.id },
            Request::Cancel(i) => R::Cancel { id: i.id },
            Request::Update(u) => R::Update {
                id: u.id,
                update: crate::item::ItemUpdate {
                    priority: u.priority,
                    not_before_ms: u.not_before_ms,
                    payload: u.payload.map(|p| p.0),
                },
            },
            Request::WaitCancelled(w) => R::WaitCancelled {
                ids: w.ids,
                wait: wait(w.wait_ms),
            },
            Request::UpsertSchedule(r) => R::UpsertSchedule {
                schedule: r.schedule.into_schedule(),
            },
            Request::RemoveSchedule(r) => R::RemoveSchedule { name: r.name },
            Request::PauseSchedule(r) => R::PauseSchedule { name: r.name },
            Request::ResumeSchedule(r) => R::ResumeSchedule { name: r.name },
            Request::Schedules => R::Schedules,
            Request::PreviewSchedule(r) => R::PreviewSchedule {
                name: r.name,
                count: r.count,
            },
            Request::FireSchedules => R::FireSchedules,
            Request::Stats => R::Stats,
            Request::BacklogByFlow(s) => R::BacklogByFlow { sample: s.sample },
            Request::Peek(c) => R::Peek { count: c.count },
            Request::Now => R::Now,
            Request::Compact => R::Compact,
            Request::AckWithResult(r) => R::AckWithResult {
                receipt: r.receipt.into(),
                result: r.result.0,
            },
            Request::Outcome(i) => R::Outcome { id: i.id },
            Request::WaitOutcome(w) => R::WaitOutcome {
                id: w.id,
                wait: wait(w.wait_ms),
            },
            Request::SetProgress(r) => R::SetProgress {
                receipt: r.receipt.into(),
                progress: r.progress.0,
            },
            Request::SendChunk(r) => R::SendChunk {
                receipt: r.receipt.into(),
                chunk: r.chunk.0,
            },
            Request::Progress(i) => R::Progress { id: i.id },
            Request::WaitChunks(w) => R::WaitChunks {
                id: w.id,
                after_seq: w.after_seq,
                wait: wait(w.wait_ms),
            },
            Request::SetFlowLimit(r) => R::SetFlowLimit {
                flow: r.flow,
                limit: r.limit,
            },
            Request::BackOff(r) => R::BackOff {
                flow: r.flow,
                duration: Duration::from_millis(r.duration_ms),
            },
            Request::FlowLimits => R::FlowLimits,
            Request::List(r) => R::List { query: r.into() },
            Request::Find(i) => R::Find { id: i.id },
            other
            @ (Request::MaxDeliveries | Request::ForwardLag(_) | Request::ReclaimStale(_)) => {
                return Err(other);
            }
        })
    }
}

/// A reply of the contract in its wire form: the JSON object the server
/// answers (one shape per [`crate::Reply`] variant, docs/API.md).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(untagged)]
#[allow(missing_docs)] // each variant is the wire type of its name
pub enum WireReply {
    Done(Done),
    Added(WireAdded),
    AddedList(AddedList),
    NextDue(NextDue),
    Count(Count),
    Flag(Flag),
    Claimed(ClaimedList),
    Stepped(Stepped),
    Retried(Retried),
    Reclaimed(ReclaimedList),
    Outcome(OutcomeReply),
    Progress(ProgressReply),
    Seq(Seq),
    Chunks(ChunkList),
    Flows(Flows),
    Limits(LimitsReply),
    DeadLetters(DeadLetterList),
    Stats(crate::item::Stats),
    FlowCounts(FlowCounts),
    Items(ItemList),
    Page(ItemPageReply),
    Found(FoundReply),
    Now(Now),
    Schedules(ScheduleList),
    Times(Times),
    Fired(FiredReply),
    Cancel(CancelReply),
    Ids(IdList),
}

impl From<Q> for WireReply {
    fn from(reply: Q) -> Self {
        match reply {
            Q::Unit => WireReply::Done(Done {}),
            Q::Added(a) => WireReply::Added(a.into()),
            Q::AddedList(v) => WireReply::AddedList(AddedList {
                added: v.into_iter().map(Into::into).collect(),
            }),
            Q::NextDue(not_before_ms) => WireReply::NextDue(NextDue { not_before_ms }),
            Q::Count(count) => WireReply::Count(Count { count }),
            Q::Bool(value) => WireReply::Flag(Flag { value }),
            Q::Claimed(v) => WireReply::Claimed(ClaimedList {
                claimed: v.into_iter().map(Into::into).collect(),
            }),
            Q::Stepped(c) => WireReply::Stepped(Stepped {
                claimed: c.map(Into::into),
            }),
            Q::Retried(r) => WireReply::Retried(r.into()),
            Q::Reclaimed(r) => WireReply::Reclaimed(ReclaimedList {
                claimed: r.claimed.into_iter().map(Into::into).collect(),
                dead_lettered: r.dead_lettered.into_iter().map(Into::into).collect(),
                cancelled: r.cancelled.into_iter().map(Into::into).collect(),
            }),
            Q::Outcome(o) => WireReply::Outcome(OutcomeReply {
                outcome: o.map(Into::into),
            }),
            Q::Progress(p) => WireReply::Progress(ProgressReply {
                progress: p.map(super::Base64),
            }),
            Q::Seq(seq) => WireReply::Seq(Seq { seq }),
            Q::Chunks(c) => WireReply::Chunks(ChunkList {
                chunks: c.into_iter().map(Into::into).collect(),
                finished: false,
            }),
            Q::Flows(flows) => WireReply::Flows(Flows { flows }),
            Q::FlowLimits(limits) => WireReply::Limits(LimitsReply { limits }),
            Q::DeadLetters(d) => WireReply::DeadLetters(DeadLetterList {
                dead_letters: d.into_iter().map(Into::into).collect(),
            }),
            Q::Stats(s) => WireReply::Stats(s),
            Q::BacklogByFlow(flows) => WireReply::FlowCounts(FlowCounts { flows }),
            Q::Items(items) => WireReply::Items(ItemList {
                items: items.into_iter().map(Into::into).collect(),
            }),
            Q::Page(p) => WireReply::Page(p.into()),
            Q::Found(f) => WireReply::Found(FoundReply {
                item: f.map(Into::into),
            }),
            Q::Time(now_ms) => WireReply::Now(Now { now_ms }),
            Q::Schedules(list) => WireReply::Schedules(ScheduleList {
                schedules: list.into_iter().map(Into::into).collect(),
            }),
            Q::Times(times_ms) => WireReply::Times(Times { times_ms }),
            Q::Fired(f) => WireReply::Fired(f.into()),
            Q::Cancel(c) => WireReply::Cancel(CancelReply { cancel: c.into() }),
            Q::Ids(ids) => WireReply::Ids(IdList { ids }),
        }
    }
}

fn json<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, String> {
    serde_json::from_slice(bytes).map_err(|e| e.to_string())
}

/// Read the server's reply to route `op` (a [`crate::Request::name`]) as
/// the contract's reply. Never panics, whatever the bytes.
///
/// # Errors
///
/// Why the bytes are not that route's reply, in words: malformed JSON,
/// missing fields, wrong types, bad base64, or a route without a reply of
/// the contract.
pub fn decode_reply(op: &str, bytes: &[u8]) -> Result<Q, String> {
    Ok(match op {
        "ack" | "ack_with_result" | "set_progress" | "touch" | "release" | "dead_letter"
        | "pause" | "park" | "set_flow_limit" | "back_off" | "mark_done" => {
            json::<Done>(bytes).map(|_| Q::Unit)?
        }
        "add" | "add_delayed" => Q::Added(json::<WireAdded>(bytes)?.into()),
        "add_batch" => Q::AddedList(
            json::<AddedList>(bytes)?
                .added
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        "next_due" => Q::NextDue(json::<NextDue>(bytes)?.not_before_ms),
        "promote_due" | "ack_batch" | "resume" | "clear_flow" | "parked" | "purge_dead_letters" => {
            Q::Count(json::<Count>(bytes)?.count)
        }
        "promote" | "was_done" | "redrive" | "remove" | "update" | "compact"
        | "upsert_schedule" | "remove_schedule" | "pause_schedule" | "resume_schedule" => {
            Q::Bool(json::<Flag>(bytes)?.value)
        }
        "schedules" => Q::Schedules(
            json::<ScheduleList>(bytes)?
                .schedules
                .into_iter()
                .map(WireScheduleInfo::into_info)
                .collect(),
        ),
        "preview_schedule" => Q::Times(json::<Times>(bytes)?.times_ms),
        "fire_schedules" => Q::Fired(json::<FiredReply>(bytes)?.into()),
        "claim" => Q::Claimed(
            json::<ClaimedList>(bytes)?
                .claimed
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        "step" => Q::Stepped(json::<Stepped>(bytes)?.claimed.map(Into::into)),
        "retry" => Q::Retried(json::<Retried>(bytes)?.into()),
        "reclaim" => {
            let r = json::<ReclaimedList>(bytes)?;
            Q::Reclaimed(crate::item::Reclaimed {
                claimed: r.claimed.into_iter().map(Into::into).collect(),
                dead_lettered: r.dead_lettered.into_iter().map(Into::into).collect(),
                cancelled: r.cancelled.into_iter().map(Into::into).collect(),
            })
        }
        "cancel" => Q::Cancel(json::<CancelReply>(bytes)?.cancel.into()),
        "wait_cancelled" => Q::Ids(json::<IdList>(bytes)?.ids),
        "outcome" | "wait_outcome" => {
            Q::Outcome(json::<OutcomeReply>(bytes)?.outcome.map(Into::into))
        }
        "progress" => Q::Progress(json::<ProgressReply>(bytes)?.progress.map(|b| b.0)),
        "send_chunk" => Q::Seq(json::<Seq>(bytes)?.seq),
        "wait_chunks" => Q::Chunks(
            json::<ChunkList>(bytes)?
                .chunks
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        "paused_flows" => Q::Flows(json::<Flows>(bytes)?.flows),
        "flow_limits" => Q::FlowLimits(json::<LimitsReply>(bytes)?.limits),
        "dead_letters" => Q::DeadLetters(
            json::<DeadLetterList>(bytes)?
                .dead_letters
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        "stats" => Q::Stats(json(bytes)?),
        "backlog_by_flow" => Q::BacklogByFlow(json::<FlowCounts>(bytes)?.flows),
        "peek" => Q::Items(
            json::<ItemList>(bytes)?
                .items
                .into_iter()
                .map(Into::into)
                .collect(),
        ),
        "list" => Q::Page(json::<ItemPageReply>(bytes)?.into()),
        "find" => Q::Found(json::<FoundReply>(bytes)?.item.map(Into::into)),
        "now" => Q::Time(json::<Now>(bytes)?.now_ms),
        other => return Err(format!("{other} has no reply of the contract")),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::item::{Added, RetryOutcome, Stats};

    /// Every reply the server sends reads back as the same reply of the
    /// contract on the client.
    #[test]
    fn replies_round_trip_through_their_routes() {
        let cases = [
            ("ack", Q::Unit),
            (
                "add",
                Q::Added(Added {
                    id: 7,
                    duplicate: true,
                }),
            ),
            (
                "add_batch",
                Q::AddedList(vec![Added {
                    id: 1,
                    duplicate: false,
                }]),
            ),
            ("next_due", Q::NextDue(Some(5))),
            ("promote_due", Q::Count(3)),
            ("promote", Q::Bool(true)),
            ("remove", Q::Bool(false)),
            ("update", Q::Bool(true)),
            ("cancel", Q::Cancel(crate::item::CancelOutcome::Marked)),
            ("wait_cancelled", Q::Ids(vec![3, 4])),
            ("back_off", Q::Unit),
            ("claim", Q::Claimed(Vec::new())),
            ("step", Q::Stepped(None)),
            ("retry", Q::Retried(RetryOutcome::DeadLettered)),
            ("reclaim", Q::Reclaimed(crate::item::Reclaimed::default())),
            ("outcome", Q::Outcome(None)),
            ("progress", Q::Progress(Some(b"half".to_vec()))),
            ("send_chunk", Q::Seq(9)),
            ("wait_chunks", Q::Chunks(Vec::new())),
            ("paused_flows", Q::Flows(vec!["a".into()])),
            ("flow_limits", Q::FlowLimits(Vec::new())),
            ("dead_letters", Q::DeadLetters(Vec::new())),
            ("stats", Q::Stats(Stats::default())),
            ("backlog_by_flow", Q::BacklogByFlow(Default::default())),
            ("peek", Q::Items(Vec::new())),
            ("list", Q::Page(crate::browse::ItemPage::default())),
            ("find", Q::Found(None)),
            ("now", Q::Time(1_700_000_000_000)),
        ];
        for (op, reply) in cases {
            let bytes = serde_json::to_vec(&WireReply::from(reply.clone())).unwrap();
            assert_eq!(decode_reply(op, &bytes), Ok(reply), "{op}");
        }
        assert!(decode_reply("stats", b"[]").is_err());
        assert!(decode_reply("close", b"{}").is_err());
    }
}
