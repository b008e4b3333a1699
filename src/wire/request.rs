//! A whole request: every operation's route name, decoding a route and
//! body into a [`Request`], and encoding one back.

use serde::{Deserialize, Serialize};

use super::{
    AckWithResultRequest, AddBatchRequest, AddDelayedRequest, BackOffRequest, ClaimRequest,
    CountRequest, DeadLetterRequest, DoneRequest, FlowRequest, ForwardLagRequest, IdRequest,
    ListRequest, PreviewScheduleRequest, ReceiptRequest, ReceiptsRequest, ReclaimRequest,
    RetryRequest, SampleRequest, ScheduleNameRequest, SendChunkRequest, SetFlowLimitRequest,
    SetProgressRequest, UpdateRequest, UpsertScheduleRequest, WaitCancelledRequest,
    WaitChunksRequest, WaitOutcomeRequest, WireNewItem,
};

/// Operations without arguments: `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct EmptyRequest {}

/// One decoded request: the route's operation and its arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
#[allow(missing_docs)]
pub enum Request {
    Add(WireNewItem),
    AddBatch(AddBatchRequest),
    AddDelayed(AddDelayedRequest),
    NextDue,
    PromoteDue,
    Claim(ClaimRequest),
    Ack(ReceiptRequest),
    AckBatch(ReceiptsRequest),
    Touch(ReceiptsRequest),
    Retry(RetryRequest),
    Release(RetryRequest),
    DeadLetter(DeadLetterRequest),
    Reclaim(ReclaimRequest),
    ReclaimStale(ReclaimRequest),
    Pause(FlowRequest),
    Resume(FlowRequest),
    Park(ReceiptRequest),
    Step(FlowRequest),
    ClearFlow(FlowRequest),
    Parked(FlowRequest),
    PausedFlows,
    MarkDone(DoneRequest),
    WasDone(DoneRequest),
    DeadLetters(CountRequest),
    Redrive(IdRequest),
    PurgeDeadLetters,
    Stats,
    BacklogByFlow(SampleRequest),
    Peek(CountRequest),
    Now,
    Compact,
    MaxDeliveries,
    AckWithResult(AckWithResultRequest),
    Outcome(IdRequest),
    WaitOutcome(WaitOutcomeRequest),
    SetProgress(SetProgressRequest),
    SendChunk(SendChunkRequest),
    Progress(IdRequest),
    WaitChunks(WaitChunksRequest),
    ForwardLag(ForwardLagRequest),
    SetFlowLimit(SetFlowLimitRequest),
    FlowLimits,
    List(ListRequest),
    Find(IdRequest),
    Promote(IdRequest),
    Remove(IdRequest),
    BackOff(BackOffRequest),
    Cancel(IdRequest),
    WaitCancelled(WaitCancelledRequest),
    Update(UpdateRequest),
    UpsertSchedule(Box<UpsertScheduleRequest>),
    RemoveSchedule(ScheduleNameRequest),
    PauseSchedule(ScheduleNameRequest),
    ResumeSchedule(ScheduleNameRequest),
    Schedules,
    PreviewSchedule(PreviewScheduleRequest),
    FireSchedules,
}

/// Every operation's route name (`POST /v1/<op>`): the trait's methods in
/// trait order, then `forward_lag`, then the flow limits.
pub const OPS: &[&str] = &[
    "add",
    "add_batch",
    "add_delayed",
    "next_due",
    "promote_due",
    "claim",
    "ack",
    "ack_batch",
    "touch",
    "retry",
    "release",
    "dead_letter",
    "reclaim",
    "reclaim_stale",
    "pause",
    "resume",
    "park",
    "step",
    "clear_flow",
    "parked",
    "paused_flows",
    "mark_done",
    "was_done",
    "dead_letters",
    "redrive",
    "purge_dead_letters",
    "stats",
    "backlog_by_flow",
    "peek",
    "now",
    "compact",
    "max_deliveries",
    // Outcomes and progress (SPEC 3), after the rest so that the fuzz
    // corpus's first byte keeps naming the same operation.
    "ack_with_result",
    "outcome",
    "wait_outcome",
    "set_progress",
    "send_chunk",
    "progress",
    "wait_chunks",
    // Not a trait method: the forwarding lag of a served queue file
    // (SPEC 11), last for the same reason.
    "forward_lag",
    // Flow limits (SPEC 3), after the rest for the same reason.
    "set_flow_limit",
    "flow_limits",
    // Listing (SPEC 12.1).
    "list",
    "find",
    // Item control (SPEC 3) and the atomic back-off.
    "promote",
    "remove",
    "back_off",
    // Schedules (SPEC 13).
    "upsert_schedule",
    "remove_schedule",
    "pause_schedule",
    "resume_schedule",
    "schedules",
    "preview_schedule",
    "fire_schedules",
    // Cancelling (SPEC 3).
    "cancel",
    "wait_cancelled",
    // Updating (SPEC 3).
    "update",
];

/// Why a request could not be decoded: always a 400 (or 404 for an
/// unknown operation), one line of text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// No such operation.
    UnknownOp(String),
    /// The body is not the operation's JSON object.
    BadBody(String),
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            DecodeError::UnknownOp(op) => write!(f, "no operation named {op:?}"),
            DecodeError::BadBody(why) => f.write_str(why),
        }
    }
}

fn body<'a, T: Deserialize<'a>>(op: &str, bytes: &'a [u8]) -> Result<T, DecodeError> {
    // An empty body means `{}` for operations whose fields all have defaults
    // or that take none, so `curl -X POST .../v1/stats` works.
    let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
        b"{}"
    } else {
        bytes
    };
    serde_json::from_slice(bytes).map_err(|e| {
        DecodeError::BadBody(format!("bad request body for {op}: {e}").replace(['\n', '\r'], " "))
    })
}

impl Request {
    /// Decode the body of `POST /v1/<op>`. Never panics, whatever the bytes.
    ///
    /// # Errors
    ///
    /// [`DecodeError`] naming the first problem: unknown operation,
    /// malformed JSON, unknown or missing fields, wrong types, numbers out
    /// of range, bad base64.
    pub fn decode(op: &str, bytes: &[u8]) -> Result<Request, DecodeError> {
        let empty = |op: &str| body::<EmptyRequest>(op, bytes).map(|_| ());
        Ok(match op {
            "add" => Request::Add(body(op, bytes)?),
            "add_batch" => Request::AddBatch(body(op, bytes)?),
            "add_delayed" => Request::AddDelayed(body(op, bytes)?),
            "next_due" => empty(op).map(|()| Request::NextDue)?,
            "promote_due" => empty(op).map(|()| Request::PromoteDue)?,
            "claim" => Request::Claim(body(op, bytes)?),
            "ack" => Request::Ack(body(op, bytes)?),
            "ack_batch" => Request::AckBatch(body(op, bytes)?),
            "touch" => Request::Touch(body(op, bytes)?),
            "retry" => Request::Retry(body(op, bytes)?),
            "release" => Request::Release(body(op, bytes)?),
            "reclaim" => Request::Reclaim(body(op, bytes)?),
            "dead_letter" => Request::DeadLetter(body(op, bytes)?),
            "reclaim_stale" => Request::ReclaimStale(body(op, bytes)?),
            "pause" => Request::Pause(body(op, bytes)?),
            "resume" => Request::Resume(body(op, bytes)?),
            "park" => Request::Park(body(op, bytes)?),
            "step" => Request::Step(body(op, bytes)?),
            "clear_flow" => Request::ClearFlow(body(op, bytes)?),
            "parked" => Request::Parked(body(op, bytes)?),
            "paused_flows" => empty(op).map(|()| Request::PausedFlows)?,
            "mark_done" => Request::MarkDone(body(op, bytes)?),
            "was_done" => Request::WasDone(body(op, bytes)?),
            "dead_letters" => Request::DeadLetters(body(op, bytes)?),
            "redrive" => Request::Redrive(body(op, bytes)?),
            "purge_dead_letters" => empty(op).map(|()| Request::PurgeDeadLetters)?,
            "stats" => empty(op).map(|()| Request::Stats)?,
            "backlog_by_flow" => Request::BacklogByFlow(body(op, bytes)?),
            "peek" => Request::Peek(body(op, bytes)?),
            "now" => empty(op).map(|()| Request::Now)?,
            "compact" => empty(op).map(|()| Request::Compact)?,
            "max_deliveries" => empty(op).map(|()| Request::MaxDeliveries)?,
            "ack_with_result" => Request::AckWithResult(body(op, bytes)?),
            "outcome" => Request::Outcome(body(op, bytes)?),
            "wait_outcome" => Request::WaitOutcome(body(op, bytes)?),
            "set_progress" => Request::SetProgress(body(op, bytes)?),
            "send_chunk" => Request::SendChunk(body(op, bytes)?),
            "progress" => Request::Progress(body(op, bytes)?),
            "wait_chunks" => Request::WaitChunks(body(op, bytes)?),
            "forward_lag" => Request::ForwardLag(body(op, bytes)?),
            "set_flow_limit" => Request::SetFlowLimit(body(op, bytes)?),
            "flow_limits" => empty(op).map(|()| Request::FlowLimits)?,
            "list" => Request::List(body(op, bytes)?),
            "find" => Request::Find(body(op, bytes)?),
            "promote" => Request::Promote(body(op, bytes)?),
            "remove" => Request::Remove(body(op, bytes)?),
            "cancel" => Request::Cancel(body(op, bytes)?),
            "wait_cancelled" => Request::WaitCancelled(body(op, bytes)?),
            "update" => Request::Update(body(op, bytes)?),
            "back_off" => Request::BackOff(body(op, bytes)?),
            "upsert_schedule" => Request::UpsertSchedule(body(op, bytes)?),
            "remove_schedule" => Request::RemoveSchedule(body(op, bytes)?),
            "pause_schedule" => Request::PauseSchedule(body(op, bytes)?),
            "resume_schedule" => Request::ResumeSchedule(body(op, bytes)?),
            "schedules" => empty(op).map(|()| Request::Schedules)?,
            "preview_schedule" => Request::PreviewSchedule(body(op, bytes)?),
            "fire_schedules" => empty(op).map(|()| Request::FireSchedules)?,
            other => return Err(DecodeError::UnknownOp(other.chars().take(64).collect())),
        })
    }

    /// The route name and JSON body of this request, as a client sends
    /// it; [`Request::decode`] of the two gives the request back.
    pub fn encode(&self) -> (&'static str, Vec<u8>) {
        fn json<T: Serialize>(op: &'static str, v: &T) -> (&'static str, Vec<u8>) {
            (op, serde_json::to_vec(v).unwrap_or_else(|_| b"{}".to_vec()))
        }
        let empty = EmptyRequest {};
        match self {
            Request::Add(r) => json("add", r),
            Request::AddBatch(r) => json("add_batch", r),
            Request::AddDelayed(r) => json("add_delayed", r),
            Request::NextDue => json("next_due", &empty),
            Request::PromoteDue => json("promote_due", &empty),
            Request::Claim(r) => json("claim", r),
            Request::Ack(r) => json("ack", r),
            Request::AckBatch(r) => json("ack_batch", r),
            Request::Touch(r) => json("touch", r),
            Request::Retry(r) => json("retry", r),
            Request::Release(r) => json("release", r),
            Request::Reclaim(r) => json("reclaim", r),
            Request::DeadLetter(r) => json("dead_letter", r),
            Request::ReclaimStale(r) => json("reclaim_stale", r),
            Request::Pause(r) => json("pause", r),
            Request::Resume(r) => json("resume", r),
            Request::Park(r) => json("park", r),
            Request::Step(r) => json("step", r),
            Request::ClearFlow(r) => json("clear_flow", r),
            Request::Parked(r) => json("parked", r),
            Request::PausedFlows => json("paused_flows", &empty),
            Request::MarkDone(r) => json("mark_done", r),
            Request::WasDone(r) => json("was_done", r),
            Request::DeadLetters(r) => json("dead_letters", r),
            Request::Redrive(r) => json("redrive", r),
            Request::PurgeDeadLetters => json("purge_dead_letters", &empty),
            Request::Stats => json("stats", &empty),
            Request::BacklogByFlow(r) => json("backlog_by_flow", r),
            Request::Peek(r) => json("peek", r),
            Request::Now => json("now", &empty),
            Request::Compact => json("compact", &empty),
            Request::MaxDeliveries => json("max_deliveries", &empty),
            Request::AckWithResult(r) => json("ack_with_result", r),
            Request::Outcome(r) => json("outcome", r),
            Request::WaitOutcome(r) => json("wait_outcome", r),
            Request::SetProgress(r) => json("set_progress", r),
            Request::SendChunk(r) => json("send_chunk", r),
            Request::Progress(r) => json("progress", r),
            Request::WaitChunks(r) => json("wait_chunks", r),
            Request::ForwardLag(r) => json("forward_lag", r),
            Request::SetFlowLimit(r) => json("set_flow_limit", r),
            Request::FlowLimits => json("flow_limits", &empty),
            Request::List(r) => json("list", r),
            Request::Find(r) => json("find", r),
            Request::Promote(r) => json("promote", r),
            Request::Remove(r) => json("remove", r),
            Request::Cancel(r) => json("cancel", r),
            Request::WaitCancelled(r) => json("wait_cancelled", r),
            Request::Update(r) => json("update", r),
            Request::BackOff(r) => json("back_off", r),
            Request::UpsertSchedule(r) => json("upsert_schedule", r),
            Request::RemoveSchedule(r) => json("remove_schedule", r),
            Request::PauseSchedule(r) => json("pause_schedule", r),
            Request::ResumeSchedule(r) => json("resume_schedule", r),
            Request::Schedules => json("schedules", &empty),
            Request::PreviewSchedule(r) => json("preview_schedule", r),
            Request::FireSchedules => json("fire_schedules", &empty),
        }
    }

    /// Whether the operation only reads (and may also be sent as `GET`).
    pub fn is_read_only_op(op: &str) -> bool {
        matches!(
            op,
            "next_due"
                | "paused_flows"
                | "flow_limits"
                | "stats"
                | "now"
                | "dead_letters"
                | "peek"
                | "parked"
                | "max_deliveries"
                | "forward_lag"
                | "schedules"
        )
    }
}
