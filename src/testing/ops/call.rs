//! A resolved operation ([`Call`]) and what it returned ([`Outcome`]), in a
//! form the reference and the system compare.

use std::collections::BTreeMap;

use crate::error::Error;
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, RetryOutcome, Stats,
};
use crate::limit::FlowLimit;

/// Which receipt an operation names: one the reference handed out (the
/// system uses its own receipt of the same claim), or a forged one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptRef {
    /// The n-th receipt handed out in this sequence.
    Slot(usize),
    /// A receipt no claim handed out.
    Forged(Receipt),
}

/// An [`Op`](super::Op) resolved against the reference: concrete arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `add` of the item.
    Add(NewItem),
    /// `add_batch` of the items.
    AddBatch(Vec<NewItem>),
    /// `add_delayed` of the item with `not_before` in ms since the epoch.
    AddDelayed(NewItem, u64),
    /// `next_due`.
    NextDue,
    /// `promote_due`.
    PromoteDue,
    /// `claim` of `count` from the lanes, with no wait.
    Claim(usize, ClaimFrom),
    /// `ack`.
    Ack(ReceiptRef),
    /// `ack_batch`.
    AckBatch(Vec<ReceiptRef>),
    /// `ack_with_result` with the result.
    AckWithResult(ReceiptRef, Vec<u8>),
    /// `outcome` of the id.
    Outcome(u64),
    /// `set_progress` with the bytes.
    SetProgress(ReceiptRef, Vec<u8>),
    /// `send_chunk` with the bytes.
    SendChunk(ReceiptRef, Vec<u8>),
    /// `progress` of the id.
    Progress(u64),
    /// `wait_chunks` of the id after the sequence number, no wait.
    Chunks(u64, u64),
    /// `touch`.
    Touch(Vec<ReceiptRef>),
    /// `retry` with `not_before` in ms since the epoch.
    Retry(ReceiptRef, u64),
    /// `release` with `not_before` in ms since the epoch.
    Release(ReceiptRef, u64),
    /// `dead_letter` with the reason.
    DeadLetter(ReceiptRef, String),
    /// `reclaim_stale` of `min_idle` (ms) and `count`.
    Reclaim(u64, usize),
    /// `pause` of the flow.
    Pause(String),
    /// `resume` of the flow.
    Resume(String),
    /// `park`.
    Park(ReceiptRef),
    /// `step` of the flow.
    Step(String),
    /// `clear_flow` of the flow.
    ClearFlow(String),
    /// `parked` of the flow.
    Parked(String),
    /// `paused_flows`.
    PausedFlows,
    /// `set_flow_limit`.
    SetFlowLimit(String, FlowLimit),
    /// `flow_limits`.
    FlowLimits,
    /// `mark_done` of the id and step.
    MarkDone(u64, String),
    /// `was_done` of the id and step.
    WasDone(u64, String),
    /// `dead_letters` of at most this many.
    DeadLetters(usize),
    /// `redrive` of the id.
    Redrive(u64),
    /// `purge_dead_letters`.
    PurgeDeadLetters,
    /// `stats`.
    Stats,
    /// `backlog_by_flow` over this many items.
    BacklogByFlow(usize),
    /// `peek` of at most this many.
    Peek(usize),
    /// Move the clock forward by this many ms.
    Advance(u64),
    /// Step the clock back by this many ms, then `stats`.
    StepBack(u64),
    /// Close and reopen.
    Reopen,
    /// `promote` of the id.
    Promote(u64),
    /// `remove` of the id.
    Remove(u64),
    /// `back_off` of the flow for this many ms.
    BackOff(String, u64),
}

/// A successful return value of any operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An operation that returns nothing.
    Unit,
    /// The adds (one for `add`).
    Added(Vec<Added>),
    /// A count.
    Count(u64),
    /// Claimed or reclaimed items.
    Claimed(Vec<Claimed>),
    /// What `step` handed out.
    Step(Option<Claimed>),
    /// What `retry` did.
    Retry(RetryOutcome),
    /// A yes or no.
    Bool(bool),
    /// The next `not_before`, ms since the epoch.
    Due(Option<u64>),
    /// Flow names.
    Flows(Vec<String>),
    /// Dead letters, newest first.
    Dead(Vec<DeadLetter>),
    /// Counts.
    Stats(Stats),
    /// Items per flow.
    ByFlow(BTreeMap<String, u64>),
    /// Items, in claim order.
    Items(Vec<Item>),
    /// An item's outcome.
    Outcome(Option<crate::outcome::Outcome>),
    /// Progress bytes.
    Bytes(Option<Vec<u8>>),
    /// Chunks, in order.
    Chunks(Vec<crate::outcome::Chunk>),
    /// Flow limits, by flow.
    Limits(Vec<crate::limit::FlowLimits>),
}

/// An error reduced to what two backends must agree on: its kind and the
/// ids it names (messages and sources may differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Error::Full` with its limit.
    Full {
        /// The limit, in items.
        limit: u64,
    },
    /// `Error::LeaseLost` with the receipt it names.
    LeaseLost {
        /// The item.
        id: u64,
        /// The delivery the receipt named.
        delivery: u32,
    },
    /// `Error::Locked`.
    Locked,
    /// `Error::Corrupt`.
    Corrupt,
    /// `Error::Io`.
    Io,
    /// `Error::Storage`.
    Storage,
    /// `Error::Backend`.
    Backend,
    /// `Error::Decode`.
    Decode,
    /// `Error::InvalidInput`.
    InvalidInput,
    /// `Error::Closed`.
    Closed,
}

impl From<&Error> for ErrorKind {
    fn from(e: &Error) -> Self {
        match e {
            Error::Full { limit } => ErrorKind::Full { limit: *limit },
            Error::LeaseLost { id, delivery, .. } => ErrorKind::LeaseLost {
                id: *id,
                delivery: *delivery,
            },
            Error::Locked { .. } => ErrorKind::Locked,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Io { .. } => ErrorKind::Io,
            Error::Storage { .. } => ErrorKind::Storage,
            Error::Backend { .. } => ErrorKind::Backend,
            Error::Decode { .. } => ErrorKind::Decode,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::Closed => ErrorKind::Closed,
        }
    }
}

/// What one call returned.
pub type Outcome = Result<Value, ErrorKind>;

pub(super) fn outcome<T>(r: crate::Result<T>, f: impl FnOnce(T) -> Value) -> Outcome {
    r.map(f).map_err(|e| ErrorKind::from(&e))
}

pub(super) fn added(v: &Value) -> &[Added] {
    match v {
        Value::Added(a) => a,
        _ => &[],
    }
}

pub(super) fn claimed(v: &Value) -> Vec<&Claimed> {
    match v {
        Value::Claimed(c) => c.iter().collect(),
        Value::Step(Some(c)) => vec![c],
        _ => Vec::new(),
    }
}
