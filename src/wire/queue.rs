//! Requests and replies of the core queue routes: adding, claiming,
//! acking, retrying, flows and their limits, dead letters, stats.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

use super::{
    Base64, WireAdded, WireClaimFrom, WireClaimed, WireDeadLetter, WireItem, WireNewItem,
    WireReceipt, is_one, one_permit,
};
use crate::item::{RetryOutcome, Stats};

/// `set_flow_limit` (SPEC 3, Flow limits): the flow and one change, e.g.
/// `{"flow":"api","limit":{"rate":{"permits":10,"period_ms":1000}}}`,
/// `{"limit":{"concurrency":2}}`, `{"limit":{"back_off_until":1700000000000}}`;
/// `null` in place of the value clears that limit.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SetFlowLimitRequest {
    /// The flow.
    pub flow: String,
    /// The change.
    pub limit: crate::limit::FlowLimit,
}

/// Reply of `flow_limits`: every flow with a limit in force, by name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct LimitsReply {
    /// The flows' limits and state.
    pub limits: Vec<crate::limit::FlowLimits>,
}

/// `add_delayed`: an item and its due time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
    #[cfg_attr(feature = "server", schemars(extend("default" = 1)))]
    pub cost: u32,
    /// Due time, ms since the Unix epoch (queue clock).
    pub not_before_ms: u64,
}

/// `add_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AddBatchRequest {
    /// The items, all or none.
    pub items: Vec<WireNewItem>,
}

/// `claim`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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

/// `ack` and `park`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiptRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
}

/// `ack_batch` and `touch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReceiptsRequest {
    /// The claims' receipts.
    pub receipts: Vec<WireReceipt>,
}

/// `retry` and `release`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct RetryRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// When to run again, ms since the Unix epoch.
    pub not_before_ms: u64,
}

/// `dead_letter`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DeadLetterRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// Why the item is given up on.
    pub reason: String,
}

/// `reclaim_stale`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ReclaimRequest {
    /// Minimum claim age, in ms.
    pub min_idle_ms: u64,
    /// At most this many items.
    pub count: usize,
}

/// `pause`, `resume`, `step`, `clear_flow`, `parked`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct FlowRequest {
    /// The flow name.
    pub flow: String,
}

/// `mark_done` and `was_done`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct DoneRequest {
    /// The item's id.
    pub id: u64,
    /// The step's name.
    pub step: String,
}

/// `dead_letters` and `peek`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct CountRequest {
    /// How many.
    pub count: usize,
}

/// `backlog_by_flow`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SampleRequest {
    /// How many items to sample in claim order.
    pub sample: usize,
}

/// `redrive`, `promote`, `remove`, `outcome`, `progress`, `find`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct IdRequest {
    /// The item's id (`redrive`: the dead letter's).
    pub id: u64,
}

/// `back_off` (SPEC 3, Flow limits): hold the flow for `duration_ms` from
/// now by the queue's clock, keeping a longer hold in force, e.g.
/// `{"flow":"api","duration_ms":30000}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct BackOffRequest {
    /// The flow to hold (not the default flow).
    pub flow: String,
    /// How long, in ms.
    pub duration_ms: u64,
}

/// Reply of `add_batch`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct AddedList {
    /// One result per item, in input order.
    pub added: Vec<WireAdded>,
}

/// Reply of `next_due`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct NextDue {
    /// The soonest due time, ms since the Unix epoch, or null.
    pub not_before_ms: Option<u64>,
}

/// Reply of the operations that return a number (`promote_due`,
/// `ack_batch`, `resume`, `clear_flow`, `parked`, `purge_dead_letters`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Count {
    /// The number, in items.
    pub count: u64,
}

/// Reply of `claim` and `reclaim_stale`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ClaimedList {
    /// The items taken.
    pub claimed: Vec<WireClaimed>,
}

/// Reply of `reclaim`: the items taken over, and the receipts of the stale
/// claims whose items went to the dead letters (SPEC 3, Crash recovery).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ReclaimedList {
    /// The items taken over, each with a new receipt.
    pub claimed: Vec<WireClaimed>,
    /// The stale receipts whose items were dead-lettered.
    pub dead_lettered: Vec<WireReceipt>,
    /// The stale receipts whose items had been cancelled and ended so
    /// (SPEC 3, Cancelling). Absent from a server that predates it.
    #[serde(default)]
    pub cancelled: Vec<WireReceipt>,
}

/// `wait_cancelled`: which of the items `ids` are marked cancelled (SPEC 3,
/// Cancelling).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WaitCancelledRequest {
    /// The items to watch, by id.
    pub ids: Vec<u64>,
    /// How long to wait while none is marked, in ms (long poll; the server
    /// may answer earlier, after its own `max_wait`). Default 0.
    #[serde(default)]
    pub wait_ms: u64,
}

/// `update` (SPEC 3, Updating): change a waiting item's tier, not-before
/// time or payload; at least one is given, e.g.
/// `{"id":7,"priority":5,"not_before_ms":1796668800000}`. Answered by a
/// [`Flag`](crate::wire::Flag): false when no item `id` is held.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UpdateRequest {
    /// The item's id.
    pub id: u64,
    /// The new priority tier, 0 to 255.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<u8>,
    /// The new not-before time, ms since the Unix epoch (queue clock).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub not_before_ms: Option<u64>,
    /// The new payload bytes, base64.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub payload: Option<Base64>,
}

/// What `cancel` did (SPEC 3, Cancelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WireCancel {
    /// It was waiting and has ended as cancelled.
    Ended,
    /// It is pending: marked, its holder's next call ends it.
    Marked,
    /// The queue holds no such item.
    NotFound,
}

/// Reply of `cancel`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct CancelReply {
    /// What happened.
    pub cancel: WireCancel,
}

/// Reply of `wait_cancelled`: the marked ids, ascending.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct IdList {
    /// Item ids, ascending.
    pub ids: Vec<u64>,
}

impl From<crate::item::CancelOutcome> for WireCancel {
    fn from(c: crate::item::CancelOutcome) -> Self {
        match c {
            crate::item::CancelOutcome::Ended => WireCancel::Ended,
            crate::item::CancelOutcome::Marked => WireCancel::Marked,
            crate::item::CancelOutcome::NotFound => WireCancel::NotFound,
        }
    }
}

impl From<WireCancel> for crate::item::CancelOutcome {
    fn from(c: WireCancel) -> Self {
        match c {
            WireCancel::Ended => crate::item::CancelOutcome::Ended,
            WireCancel::Marked => crate::item::CancelOutcome::Marked,
            WireCancel::NotFound => crate::item::CancelOutcome::NotFound,
        }
    }
}

/// Reply of `step`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Stepped {
    /// The item taken, or null when nothing was parked.
    pub claimed: Option<WireClaimed>,
}

/// Reply of operations that return nothing: `{}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Done {}

/// What `retry` did, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[allow(missing_docs)]
pub enum WireRetryOutcome {
    Delayed,
    DeadLettered,
}

/// Reply of `retry`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Flows {
    /// The paused flows, sorted.
    pub flows: Vec<String>,
}

/// Reply of `was_done`, `redrive` and `compact`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Flag {
    /// `was_done`: marked within `done_ttl`; `redrive`: the dead letter
    /// existed and moved; `compact`: space was given back.
    pub value: bool,
}

/// Reply of `dead_letters`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct DeadLetterList {
    /// Newest first.
    pub dead_letters: Vec<WireDeadLetter>,
}

/// Reply of `stats`: [`Stats`] itself.
pub type WireStats = Stats;

/// Reply of `backlog_by_flow`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct FlowCounts {
    /// Items per flow in the sample.
    pub flows: BTreeMap<String, u64>,
}

/// Reply of `peek`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ItemList {
    /// The next items a claim would hand out.
    pub items: Vec<WireItem>,
}

/// Reply of `now`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Now {
    /// The queue's clock, ms since the Unix epoch.
    pub now_ms: u64,
}
