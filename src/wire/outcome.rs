//! Requests and replies of the outcome and progress routes (SPEC 3,
//! Outcomes and progress).

use serde::{Deserialize, Serialize};

use super::{Base64, WireReceipt};
use crate::outcome::{Chunk, Outcome, OutcomeKind};

/// `ack_with_result`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct AckWithResultRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The result bytes, base64.
    pub result: Base64,
}

/// `set_progress`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SetProgressRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The progress bytes, base64 (the latest is kept).
    pub progress: Base64,
}

/// `send_chunk`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct SendChunkRequest {
    /// The claim's receipt.
    pub receipt: WireReceipt,
    /// The chunk's bytes, base64.
    pub chunk: Base64,
}

/// `wait_outcome`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum WireOutcomeKind {
    /// Acked: `result` holds what the ack carried.
    Done,
    /// Dead-lettered: `reason` holds why.
    DeadLettered,
    /// Cancelled (SPEC 3, Cancelling): neither `result` nor `reason`.
    Cancelled,
}

/// An outcome as on the wire: `result` for a done item, `reason` for a
/// dead-lettered one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
            OutcomeKind::Cancelled => (WireOutcomeKind::Cancelled, None, None),
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
            WireOutcomeKind::Cancelled => OutcomeKind::Cancelled,
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct OutcomeReply {
    /// The outcome, if any.
    pub outcome: Option<WireOutcome>,
}

/// `progress`: the latest progress, or `null`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ProgressReply {
    /// The progress bytes, base64, if any.
    pub progress: Option<Base64>,
}

/// `send_chunk`: the chunk's sequence number.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Seq {
    /// Position in the item's stream, from 1.
    pub seq: u64,
}

/// One chunk as on the wire.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ChunkList {
    /// The chunks, in order.
    pub chunks: Vec<WireChunk>,
    /// Whether the item has finished (an outcome exists).
    #[serde(default)]
    pub finished: bool,
}
