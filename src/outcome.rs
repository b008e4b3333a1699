//! What finishing an item leaves behind for its producer (SPEC section 3,
//! Outcomes and progress): the [`Outcome`] of an item, and the progress and
//! [`Chunk`]s its consumer published while it ran.

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// How an item finished (SPEC 3, Outcomes and progress; Cancelling).
///
/// New kinds may come as the contract grows, so a `match` outside this
/// crate needs a `_` arm.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum OutcomeKind {
    /// Acked; `result` is what the ack carried (empty for a plain `ack`).
    Done {
        /// The result bytes, opaque; [`Outcome::decode`] reads a typed one.
        result: Vec<u8>,
    },
    /// Dead-lettered (by `dead_letter`, or past `max_deliveries`).
    DeadLettered {
        /// The dead letter's reason.
        reason: String,
    },
    /// Cancelled (SPEC 3, Cancelling): by `cancel` while it waited, or
    /// by its holder's next call after a `cancel` while it ran. It never
    /// runs again.
    Cancelled,
}

/// The outcome of one item, kept for `result_ttl` after it finished, by the
/// queue's clock (SPEC 3, Outcomes and progress).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Outcome {
    /// The item's id.
    pub id: u64,
    /// Done with a result, or dead-lettered with a reason.
    pub kind: OutcomeKind,
    /// When it finished, ms since the Unix epoch (queue clock).
    pub at_ms: u64,
}

impl Outcome {
    /// The result bytes of a done item; `None` for a dead-lettered or
    /// cancelled one.
    pub fn result(&self) -> Option<&[u8]> {
        match &self.kind {
            OutcomeKind::Done { result } => Some(result),
            OutcomeKind::DeadLettered { .. } | OutcomeKind::Cancelled => None,
        }
    }

    /// The reason of a dead-lettered item; `None` for a done or cancelled
    /// one.
    pub fn reason(&self) -> Option<&str> {
        match &self.kind {
            OutcomeKind::DeadLettered { reason } => Some(reason),
            OutcomeKind::Done { .. } | OutcomeKind::Cancelled => None,
        }
    }

    /// Whether the item was cancelled (SPEC 3, Cancelling).
    pub fn is_cancelled(&self) -> bool {
        self.kind == OutcomeKind::Cancelled
    }

    /// Decode a done item's result written with [`encode_result`] (bincode 2,
    /// standard configuration, as payloads).
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] if the item was dead-lettered or the bytes do not
    /// decode as `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let Some(bytes) = self.result() else {
            return Err(Error::Decode {
                what: format!("result of item {}", self.id),
                detail: if self.is_cancelled() {
                    "the item was cancelled and has no result".to_string()
                } else {
                    "the item was dead-lettered and has no result".to_string()
                },
            });
        };
        bincode::serde::decode_from_slice(bytes, bincode::config::standard())
            .map(|(v, _)| v)
            .map_err(|e| Error::Decode {
                what: format!("result of item {}", self.id),
                detail: e.to_string(),
            })
    }
}

/// Encode `value` as result bytes for
/// [`WorkQueue::ack_with_result`](crate::WorkQueue::ack_with_result), the
/// way [`NewItem::encode`](crate::NewItem::encode) encodes payloads.
///
/// # Errors
///
/// [`Error::InvalidInput`] if serde refuses the value.
pub fn encode_result<T: Serialize + ?Sized>(value: &T) -> Result<Vec<u8>> {
    bincode::serde::encode_to_vec(value, bincode::config::standard())
        .map_err(|e| Error::invalid(format!("result does not encode: {e}")))
}

/// One chunk of an item's stream (SPEC 3, Outcomes and progress): `seq` counts from 1 per
/// item and never repeats, across deliveries too.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Chunk {
    /// Position in the item's stream, from 1.
    pub seq: u64,
    /// The chunk's bytes, opaque.
    pub data: Vec<u8>,
}

/// Refuse a result, progress or chunk over `max_payload_bytes`.
pub(crate) fn check_size(what: &str, len: usize, max: usize) -> Result<()> {
    if len > max {
        return Err(Error::invalid(format!(
            "{what} of {len} bytes is over max_payload_bytes ({max})"
        )));
    }
    Ok(())
}
