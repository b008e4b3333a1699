//! The wire format of `workjournal serve` (docs/API.md, SPEC section 10),
//! shared by the server ([`crate::server`]) and the client
//! ([`RemoteQueue`](crate::RemoteQueue)) so the two cannot drift apart.
//!
//! Every operation is `POST /v1/<op>` with a JSON object body and a JSON
//! object reply. Payloads are standard base64 (with padding), so bytes stay
//! bytes. Request types refuse unknown fields; reply types ignore them, so
//! a newer server can add fields. Errors are one JSON object
//! `{"error": {"kind", "message", ...}}` with an HTTP status; the table
//! [`ErrorBody::from_error`] / [`ErrorBody::into_error`] maps each
//! [`Error`] variant both ways.

use std::collections::BTreeMap;
use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Error;
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, Lane, NewItem, Receipt, RetryOutcome, Stats,
};
use crate::outcome::{Chunk, Outcome, OutcomeKind};

/// The version prefix of every route.
pub const PREFIX: &str = "/v1";

/// Bytes carried as standard base64 text.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Base64(pub Vec<u8>);

impl Serialize for Base64 {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&base64::engine::general_purpose::STANDARD.encode(&self.0))
    }
}

impl<'de> Deserialize<'de> for Base64 {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let text = String::deserialize(d)?;
        base64::engine::general_purpose::STANDARD
            .decode(text.as_bytes())
            .map(Base64)
            .map_err(|e| serde::de::Error::custom(format!("payload is not standard base64: {e}")))
    }
}

/// An item to add.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireNewItem {
    /// The flow; default `""`.
    #[serde(default)]
    pub flow: String,
    /// The payload bytes, base64.
    pub payload: Base64,
    /// The deduplication key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The priority tier, 0 to 255 (higher runs earlier; SPEC section 3,
    /// Priority). Default 0.
    #[serde(default)]
    pub priority: u8,
    /// Rate-limit permits a claim of the item takes (SPEC section 3, Flow
    /// limits). Default 1.
    #[serde(default = "one_permit", skip_serializing_if = "is_one")]
    pub cost: u32,
}

impl From<NewItem> for WireNewItem {
    fn from(n: NewItem) -> Self {
        WireNewItem {
            flow: n.flow,
            payload: Base64(n.payload),
            dedup_key: n.dedup_key,
            priority: n.priority,
            cost: n.cost.max(1),
        }
    }
}

impl From<WireNewItem> for NewItem {
    fn from(w: WireNewItem) -> Self {
        NewItem {
            flow: w.flow,
            payload: w.payload.0,
            dedup_key: w.dedup_key,
            priority: w.priority,
            cost: w.cost.max(1),
        }
    }
}

fn one_permit() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// `set_flow_limit` (SPEC 3, Flow limits): the flow and one change, e.g.
/// `{"flow":"api","limit":{"rate":{"permits":10,"period_ms":1000}}}`,
/// `{"limit":{"concurrency":2}}`, `{"limit":{"back_off_until":1700000000000}}`;
/// `null` in place of the value clears that limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetFlowLimitRequest {
    /// The flow.
    pub flow: String,
    /// The change.
    pub limit: crate::limit::FlowLimit,
}

/// Reply of `flow_limits`: every flow with a limit in force, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LimitsReply {
    /// The flows' limits and state.
    pub limits: Vec<crate::limit::FlowLimits>,
}

/// `add_delayed`: an item and its due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddDelayedRequest {
    /// The flow; default `""`.
    #[serde(default)]
    pub flow: String,
    /// The payload bytes, base64.
    pub payload: Base64,
    /// The deduplication key, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dedup_key: Option<String>,
    /// The priority tier, 0 to 255 (higher runs earlier; SPEC section 3,
    /// Priority). Default 0.
    #[serde(default)]
    pub priority: u8,
    /// Rate-limit permits a claim of the item takes (SPEC section 3, Flow
    /// limits). Default 1.
    #[serde(default = "one_permit", skip_serializing_if = "is_one")]
    pub cost: u32,
    /// Due time, ms since the Unix epoch (queue clock).
    pub not_before_ms: u64,
}

/// `add_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddBatchRequest {
    /// The items, all or none.
    pub items: Vec<WireNewItem>,
}

/// Which lanes a claim may take from, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireClaimFrom {
    /// Due lane, then backlog.
    #[default]
    All,
    /// Due lane only.
    DueOnly,
}

/// `claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ClaimRequest {
    /// At most this many items.
    pub count: usize,
    /// How long to wait for work, in ms (long poll; the server may answer
    /// empty earlier, after its own `max_wait`). Default 0.
    #[serde(default)]
    pub wait_ms: u64,
    /// Which lanes. Default `all`.
    #[serde(default)]
    pub from: WireClaimFrom,
}

/// A receipt as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WireReceipt {
    /// The item's id.
    pub id: u64,
    /// The delivery number of the claim.
    pub delivery: u32,
    /// The claim's lease number.
    pub lease: u64,
}

impl From<Receipt> for WireReceipt {
    fn from(r: Receipt) -> Self {
        WireReceipt {
            id: r.id,
            delivery: r.delivery,
            lease: r.lease,
        }
    }
}

impl From<WireReceipt> for Receipt {
    fn from(r: WireReceipt) -> Self {
        Receipt {
            id: r.id,
            delivery: r.delivery,
            lease: r.lease,
        }
    }
}

/// `ack` and `park`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
}

/// `ack_batch` and `touch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReceiptsRequest {
    /// The claims' receipts.
    pub receipts: Vec<WireReceipt>,
}

/// `retry` and `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// When to run again, ms since the Unix epoch.
    pub not_before_ms: u64,
}

/// `dead_letter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeadLetterRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// Why the item is given up on.
    pub reason: String,
}

/// `reclaim_stale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ReclaimRequest {
    /// Minimum claim age, in ms.
    pub min_idle_ms: u64,
    /// At most this many items.
    pub count: usize,
}

/// `pause`, `resume`, `step`, `clear_flow`, `parked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FlowRequest {
    /// The flow name.
    pub flow: String,
}

/// `mark_done` and `was_done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DoneRequest {
    /// The item's id.
    pub id: u64,
    /// The step's name.
    pub step: String,
}

/// `dead_letters` and `peek`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct CountRequest {
    /// How many.
    pub count: usize,
}

/// `backlog_by_flow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SampleRequest {
    /// How many items to sample in claim order.
    pub sample: usize,
}

/// `redrive`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    /// The item's id (`redrive`: the dead letter's).
    pub id: u64,
}

// ---- outcomes and progress (SPEC 3, Outcomes and progress) ---------------

/// `ack_with_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AckWithResultRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The result bytes, base64.
    pub result: Base64,
}

/// `set_progress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetProgressRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The progress bytes, base64 (the latest is kept).
    pub progress: Base64,
}

/// `send_chunk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SendChunkRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The chunk's bytes, base64.
    pub chunk: Base64,
}

/// `wait_outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitOutcomeRequest {
    /// The item's id.
    pub id: u64,
    /// How long to wait for the outcome, in ms (long poll; the server may
    /// answer `null` earlier, after its own `max_wait`). Default 0.
    #[serde(default)]
    pub wait_ms: u64,
}

/// `wait_chunks`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct WaitChunksRequest {
    /// The item's id.
    pub id: u64,
    /// Only chunks after this sequence number. Default 0 (from the first).
    #[serde(default)]
    pub after_seq: u64,
    /// How long to wait for a chunk or the outcome, in ms (long poll; the
    /// server may answer empty earlier, after its own `max_wait`). Default 0.
    #[serde(default)]
    pub wait_ms: u64,
}

/// How an item finished, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WireOutcomeKind {
    /// Acked: `result` holds what the ack carried.
    Done,
    /// Dead-lettered: `reason` holds why.
    DeadLettered,
}

/// An outcome as on the wire: `result` for a done item, `reason` for a
/// dead-lettered one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireOutcome {
    /// The item's id.
    pub id: u64,
    /// Done or dead-lettered.
    pub kind: WireOutcomeKind,
    /// A done item's result bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result: Option<Base64>,
    /// A dead-lettered item's reason.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// When it finished, ms since the Unix epoch (queue clock).
    pub at_ms: u64,
}

impl From<Outcome> for WireOutcome {
    fn from(o: Outcome) -> Self {
        let (kind, result, reason) = match o.kind {
            OutcomeKind::Done { result } => (WireOutcomeKind::Done, Some(Base64(result)), None),
            OutcomeKind::DeadLettered { reason } => {
                (WireOutcomeKind::DeadLettered, None, Some(reason))
            }
        };
        WireOutcome {
            id: o.id,
            kind,
            result,
            reason,
            at_ms: o.at_ms,
        }
    }
}

impl From<WireOutcome> for Outcome {
    fn from(w: WireOutcome) -> Self {
        let kind = match w.kind {
            WireOutcomeKind::Done => OutcomeKind::Done {
                result: w.result.unwrap_or_default().0,
            },
            WireOutcomeKind::DeadLettered => OutcomeKind::DeadLettered {
                reason: w.reason.unwrap_or_default(),
            },
        };
        Outcome {
            id: w.id,
            kind,
            at_ms: w.at_ms,
        }
    }
}

/// `outcome` and `wait_outcome`: the outcome, or `null` when there is none
/// (yet, or any more).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutcomeReply {
    /// The outcome, if any.
    pub outcome: Option<WireOutcome>,
}

/// `progress`: the latest progress, or `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProgressReply {
    /// The progress bytes, base64, if any.
    pub progress: Option<Base64>,
}

/// `send_chunk`: the chunk's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Seq {
    /// Position in the item's stream, from 1.
    pub seq: u64,
}

/// One chunk as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireChunk {
    /// Position in the item's stream, from 1.
    pub seq: u64,
    /// The chunk's bytes, base64.
    pub data: Base64,
}

impl From<Chunk> for WireChunk {
    fn from(c: Chunk) -> Self {
        WireChunk {
            seq: c.seq,
            data: Base64(c.data),
        }
    }
}

impl From<WireChunk> for Chunk {
    fn from(w: WireChunk) -> Self {
        Chunk {
            seq: w.seq,
            data: w.data.0,
        }
    }
}

/// `wait_chunks`: the chunks after `after_seq` in order, and whether the
/// item has an outcome (then no chunk follows the last one given).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ChunkList {
    /// The chunks, in order.
    pub chunks: Vec<WireChunk>,
    /// Whether the item has finished (an outcome exists).
    #[serde(default)]
    pub finished: bool,
}

// ---- store and forward (SPEC 11, Lag in `stats`) -------------------------

/// `forward_lag`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ForwardLagRequest {
    /// Count these flows only (`""` is the default flow). Absent, `null`
    /// or empty: the flows the serving forwarder forwards, else every flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Vec<String>>,
}

/// The forwarding lag of a served queue file, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireForwardLag {
    /// Items of the counted flows waiting to be handed over (backlog, due,
    /// delayed).
    pub count: u64,
    /// Age of the oldest of them by the file's clock, in ms; `null` exactly
    /// when `count` is 0.
    #[serde(deserialize_with = "Option::deserialize")]
    pub oldest_age_ms: Option<u64>,
    /// Whether a forwarder was ever set up on the file.
    pub forwarded: bool,
    /// Whether the serving process is a forwarder of the file.
    pub forwarding: bool,
}

/// Reply of `forward_lag`: the lag, or `null` when the served queue cannot
/// know (it is not a queue file: Redis, say). The field is required, so a
/// reply without it is unreadable rather than "cannot know".
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ForwardLagReply {
    /// The lag, if the served queue is a queue file.
    #[serde(deserialize_with = "Option::deserialize")]
    pub lag: Option<WireForwardLag>,
}

/// Operations without arguments: `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
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
        )
    }
}

/// An item as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireItem {
    /// The item's id.
    pub id: u64,
    /// Its flow.
    pub flow: String,
    /// Its payload, base64.
    pub payload: Base64,
    /// When it was added, ms since the Unix epoch.
    pub enqueued_at_ms: u64,
    /// Its due time, ms since the Unix epoch, if delayed or retried.
    pub not_before_ms: Option<u64>,
    /// How many times it was handed out.
    pub deliveries: u32,
    /// Its priority tier (SPEC section 3, Priority); 0 when a server too old
    /// to send it leaves it out.
    #[serde(default)]
    pub priority: u8,
    /// Its cost in rate-limit permits (SPEC section 3, Flow limits); 1 when
    /// left out.
    #[serde(default = "one_permit")]
    pub cost: u32,
}

impl From<Item> for WireItem {
    fn from(i: Item) -> Self {
        WireItem {
            id: i.id,
            flow: i.flow,
            payload: Base64(i.payload),
            enqueued_at_ms: i.enqueued_at_ms,
            not_before_ms: i.not_before_ms,
            deliveries: i.deliveries,
            priority: i.priority,
            cost: i.cost.max(1),
        }
    }
}

impl From<WireItem> for Item {
    fn from(w: WireItem) -> Self {
        Item {
            id: w.id,
            flow: w.flow,
            payload: w.payload.0,
            enqueued_at_ms: w.enqueued_at_ms,
            not_before_ms: w.not_before_ms,
            deliveries: w.deliveries,
            priority: w.priority,
            cost: w.cost.max(1),
        }
    }
}

/// A lane as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum WireLane {
    Backlog,
    Due,
    Parked,
}

/// A claimed item as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireClaimed {
    /// The item.
    pub item: WireItem,
    /// The lane it was first claimed from.
    pub lane: WireLane,
    /// When this claim happened, ms since the Unix epoch.
    pub claimed_at_ms: u64,
    /// The receipt for ack, touch, retry, park and dead_letter.
    pub receipt: WireReceipt,
}

impl From<Claimed> for WireClaimed {
    fn from(c: Claimed) -> Self {
        WireClaimed {
            item: c.item.into(),
            lane: match c.lane {
                Lane::Backlog => WireLane::Backlog,
                Lane::Due => WireLane::Due,
                Lane::Parked => WireLane::Parked,
            },
            claimed_at_ms: c.claimed_at_ms,
            receipt: c.receipt.into(),
        }
    }
}

impl From<WireClaimed> for Claimed {
    fn from(w: WireClaimed) -> Self {
        Claimed {
            item: w.item.into(),
            lane: match w.lane {
                WireLane::Backlog => Lane::Backlog,
                WireLane::Due => Lane::Due,
                WireLane::Parked => Lane::Parked,
            },
            claimed_at_ms: w.claimed_at_ms,
            receipt: w.receipt.into(),
        }
    }
}

/// A dead letter as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireDeadLetter {
    /// The item as it was when it failed.
    pub item: WireItem,
    /// Why it was given up on.
    pub reason: String,
    /// When, ms since the Unix epoch.
    pub failed_at_ms: u64,
}

impl From<DeadLetter> for WireDeadLetter {
    fn from(d: DeadLetter) -> Self {
        WireDeadLetter {
            item: d.item.into(),
            reason: d.reason,
            failed_at_ms: d.failed_at_ms,
        }
    }
}

impl From<WireDeadLetter> for DeadLetter {
    fn from(w: WireDeadLetter) -> Self {
        DeadLetter {
            item: w.item.into(),
            reason: w.reason,
            failed_at_ms: w.failed_at_ms,
        }
    }
}

/// The result of an add.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireAdded {
    /// The item's id (the first item's for a duplicate).
    pub id: u64,
    /// Whether nothing was journaled because of the dedup key.
    pub duplicate: bool,
}

impl From<Added> for WireAdded {
    fn from(a: Added) -> Self {
        WireAdded {
            id: a.id,
            duplicate: a.duplicate,
        }
    }
}

impl From<WireAdded> for Added {
    fn from(a: WireAdded) -> Self {
        Added {
            id: a.id,
            duplicate: a.duplicate,
        }
    }
}

/// Reply of `add_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedList {
    /// One result per item, in input order.
    pub added: Vec<WireAdded>,
}

/// Reply of `next_due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct NextDue {
    /// The soonest due time, ms since the Unix epoch, or null.
    pub not_before_ms: Option<u64>,
}

/// Reply of the operations that return a number (`promote_due`,
/// `ack_batch`, `resume`, `clear_flow`, `parked`, `purge_dead_letters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Count {
    /// The number, in items.
    pub count: u64,
}

/// Reply of `claim` and `reclaim_stale`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClaimedList {
    /// The items taken.
    pub claimed: Vec<WireClaimed>,
}

/// Reply of `reclaim`: the items taken over, and the receipts of the stale
/// claims whose items went to the dead letters (SPEC 3, Crash recovery).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ReclaimedList {
    /// The items taken over, each with a new receipt.
    pub claimed: Vec<WireClaimed>,
    /// The stale receipts whose items were dead-lettered.
    pub dead_lettered: Vec<WireReceipt>,
}

/// Reply of `step`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stepped {
    /// The item taken, or null when nothing was parked.
    pub claimed: Option<WireClaimed>,
}

/// Reply of operations that return nothing: `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Done {}

/// What `retry` did, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum WireRetryOutcome {
    Delayed,
    DeadLettered,
}

/// Reply of `retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Retried {
    /// What happened to the item.
    pub outcome: WireRetryOutcome,
}

impl From<RetryOutcome> for Retried {
    fn from(o: RetryOutcome) -> Self {
        Retried {
            outcome: match o {
                RetryOutcome::Delayed => WireRetryOutcome::Delayed,
                RetryOutcome::DeadLettered => WireRetryOutcome::DeadLettered,
            },
        }
    }
}

impl From<Retried> for RetryOutcome {
    fn from(r: Retried) -> Self {
        match r.outcome {
            WireRetryOutcome::Delayed => RetryOutcome::Delayed,
            WireRetryOutcome::DeadLettered => RetryOutcome::DeadLettered,
        }
    }
}

/// Reply of `paused_flows`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flows {
    /// The paused flows, sorted.
    pub flows: Vec<String>,
}

/// Reply of `was_done`, `redrive` and `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Flag {
    /// `was_done`: marked within `done_ttl`; `redrive`: the dead letter
    /// existed and moved; `compact`: space was given back.
    pub value: bool,
}

/// Reply of `dead_letters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DeadLetterList {
    /// Newest first.
    pub dead_letters: Vec<WireDeadLetter>,
}

/// Reply of `stats`: [`Stats`] itself.
pub type WireStats = Stats;

/// Reply of `backlog_by_flow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FlowCounts {
    /// Items per flow in the sample.
    pub flows: BTreeMap<String, u64>,
}

/// Reply of `peek`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemList {
    /// The next items a claim would hand out.
    pub items: Vec<WireItem>,
}

/// Reply of `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Now {
    /// The queue's clock, ms since the Unix epoch.
    pub now_ms: u64,
}

/// The error reply: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What went wrong.
    pub error: ErrorBody,
}

/// What went wrong, with the fields of the [`Error`] variant it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorBody {
    /// One of: `full`, `lease_lost`, `locked`, `corrupt`, `io`, `storage`,
    /// `backend`, `decode`, `invalid_input`, `closed`, `bad_request`,
    /// `payload_too_large`, `unauthorized`, `forbidden`, `not_found`,
    /// `timeout`.
    pub kind: String,
    /// The error in one line.
    pub message: String,
    /// `full`: the configured `max_backlog`, in items.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// `lease_lost`: the item's id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<u64>,
    /// `lease_lost`: the receipt's delivery number.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delivery: Option<u32>,
    /// `lease_lost`: the receipt's lease number (SPEC 8, Receipt).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lease: Option<u64>,
    /// `decode`: which record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub what: Option<String>,
    /// `decode`, `corrupt`, `io`, `storage`, `backend`, `invalid_input`:
    /// the variant's own text, without the prefix `message` adds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub detail: Option<String>,
}

impl ErrorBody {
    /// A body of `kind` with `message` and no variant fields.
    pub fn plain(kind: &str, message: impl Into<String>) -> Self {
        ErrorBody {
            kind: kind.to_string(),
            message: message.into(),
            limit: None,
            id: None,
            delivery: None,
            lease: None,
            what: None,
            detail: None,
        }
    }

    /// The HTTP status of this kind: 400 for refused input, 401/403 for
    /// authentication, 404, 409 for `lease_lost`, 413, 423 for `locked`,
    /// 429 for `full`, 502 for `backend`, 503 for `closed` (the server is
    /// shutting down), 408 for `timeout` (the body came too slowly), 500
    /// for storage failures.
    pub fn status(&self) -> u16 {
        match self.kind.as_str() {
            "invalid_input" | "bad_request" => 400,
            "unauthorized" => 401,
            "forbidden" => 403,
            "not_found" => 404,
            "lease_lost" => 409,
            "payload_too_large" => 413,
            "locked" => 423,
            "full" => 429,
            "backend" => 502,
            "closed" => 503,
            "timeout" => 408,
            _ => 500,
        }
    }

    /// The wire form of `e` (server side).
    pub fn from_error(e: &Error) -> Self {
        let message = one_line(e);
        let mut b = ErrorBody::plain("", message);
        b.kind = match e {
            Error::Full { limit } => {
                b.limit = Some(*limit);
                "full"
            }
            Error::LeaseLost {
                id,
                delivery,
                lease,
            } => {
                b.id = Some(*id);
                b.delivery = Some(*delivery);
                b.lease = Some(*lease);
                "lease_lost"
            }
            Error::Locked { .. } => "locked",
            Error::Corrupt { .. } => "corrupt",
            Error::Io { .. } => "io",
            Error::Storage { .. } => "storage",
            Error::Backend { .. } => "backend",
            Error::Decode { what, detail } => {
                b.what = Some(what.clone());
                b.detail = Some(detail.clone());
                "decode"
            }
            Error::InvalidInput(detail) => {
                b.detail = Some(detail.clone());
                "invalid_input"
            }
            Error::Closed => "closed",
        }
        .to_string();
        b
    }

    /// The [`Error`] a client returns for this body (client side). The
    /// queue's own refusals come back as the same variant; a request the
    /// server could not read is `InvalidInput`; a server shutting down, a
    /// refused token and anything unknown are `Backend`.
    pub fn into_error(self) -> Error {
        let detail = self.detail.unwrap_or_else(|| self.message.clone());
        match self.kind.as_str() {
            "full" => Error::Full {
                limit: self.limit.unwrap_or_default(),
            },
            "lease_lost" => Error::LeaseLost {
                id: self.id.unwrap_or_default(),
                delivery: self.delivery.unwrap_or_default(),
                lease: self.lease.unwrap_or_default(),
            },
            "corrupt" => Error::Corrupt {
                detail: format!("on the server: {}", self.message),
                source: None,
            },
            "io" => Error::Io {
                context: format!("on the server: {}", self.message),
                source: std::io::Error::other(detail),
            },
            "storage" => Error::Storage {
                context: format!("on the server: {}", self.message),
                source: detail.into(),
            },
            "decode" => Error::Decode {
                what: self.what.unwrap_or_default(),
                detail,
            },
            "invalid_input" => Error::InvalidInput(detail),
            "bad_request" | "payload_too_large" | "not_found" => Error::InvalidInput(self.message),
            _ => Error::backend(format!(
                "server refused the call ({}): {}",
                self.kind, self.message
            )),
        }
    }
}

impl From<WireClaimFrom> for ClaimFrom {
    fn from(w: WireClaimFrom) -> Self {
        match w {
            WireClaimFrom::All => ClaimFrom::All,
            WireClaimFrom::DueOnly => ClaimFrom::DueOnly,
        }
    }
}

impl From<ClaimFrom> for WireClaimFrom {
    fn from(c: ClaimFrom) -> Self {
        match c {
            ClaimFrom::All => WireClaimFrom::All,
            ClaimFrom::DueOnly => WireClaimFrom::DueOnly,
        }
    }
}

/// Milliseconds in `d`, saturating, for `wait_ms` and `min_idle_ms`.
pub fn duration_ms(d: Duration) -> u64 {
    crate::config::ms(d)
}

/// The error and its sources on one line, each cause added once.
pub fn one_line(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let part = s.to_string();
        if !text.contains(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        source = s.source();
    }
    text.replace(['\n', '\r'], " ")
}

// ---- listing and finding items (SPEC 12.1) --------------------------------

/// `list`: one page of one state.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListRequest {
    /// The state to list.
    pub state: crate::browse::ItemState,
    /// Positions to skip (the previous page's `next_offset`).
    #[serde(default)]
    pub offset: u64,
    /// The most items to return (at least 1; lowered to
    /// [`MAX_LIST_LIMIT`](crate::MAX_LIST_LIMIT)).
    pub limit: usize,
    /// Keep only items whose payload holds these bytes, base64.
    #[serde(default)]
    pub contains: Option<Base64>,
}

impl From<&crate::browse::ListQuery> for ListRequest {
    fn from(q: &crate::browse::ListQuery) -> Self {
        ListRequest {
            state: q.state,
            offset: q.offset,
            limit: q.limit,
            contains: q.contains.clone().map(Base64),
        }
    }
}

impl From<ListRequest> for crate::browse::ListQuery {
    fn from(r: ListRequest) -> Self {
        let q = crate::browse::ListQuery::new(r.state)
            .offset(r.offset)
            .limit(r.limit);
        match r.contains {
            Some(c) => q.contains(c.0),
            None => q,
        }
    }
}

/// An item with its state, as `list` and `find` answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct WireListedItem {
    /// The item.
    pub item: WireItem,
    /// Its state.
    pub state: crate::browse::ItemState,
    /// Pending: when claimed, ms since the Unix epoch.
    pub claimed_at_ms: Option<u64>,
    /// Pending: the consumer holding it, where known.
    pub consumer: Option<String>,
    /// Dead letter: why.
    pub reason: Option<String>,
    /// Dead letter: when, ms since the Unix epoch.
    pub failed_at_ms: Option<u64>,
    /// Backlog or due: waits in its flow's held lane (SPEC 3, Flow limits;
    /// SPEC 12.1). Absent reads as `false`.
    #[serde(default)]
    pub held: bool,
}

impl From<crate::browse::ListedItem> for WireListedItem {
    fn from(l: crate::browse::ListedItem) -> Self {
        WireListedItem {
            item: l.item.into(),
            state: l.state,
            claimed_at_ms: l.claimed_at_ms,
            consumer: l.consumer,
            reason: l.reason,
            failed_at_ms: l.failed_at_ms,
            held: l.held,
        }
    }
}

impl From<WireListedItem> for crate::browse::ListedItem {
    fn from(w: WireListedItem) -> Self {
        crate::browse::ListedItem {
            item: w.item.into(),
            state: w.state,
            claimed_at_ms: w.claimed_at_ms,
            consumer: w.consumer,
            reason: w.reason,
            failed_at_ms: w.failed_at_ms,
            held: w.held,
        }
    }
}

/// Reply of `list`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ItemPageReply {
    /// The items, in the state's order.
    pub items: Vec<WireListedItem>,
    /// Where to read on, or `null` at the end of the state.
    pub next_offset: Option<u64>,
}

impl From<crate::browse::ItemPage> for ItemPageReply {
    fn from(p: crate::browse::ItemPage) -> Self {
        ItemPageReply {
            items: p.items.into_iter().map(Into::into).collect(),
            next_offset: p.next_offset,
        }
    }
}

impl From<ItemPageReply> for crate::browse::ItemPage {
    fn from(r: ItemPageReply) -> Self {
        crate::browse::ItemPage::new(r.items.into_iter().map(Into::into).collect(), r.next_offset)
    }
}

/// Reply of `find`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FoundReply {
    /// The item with its state, or `null`.
    pub item: Option<WireListedItem>,
}
