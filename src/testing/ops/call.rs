//! What the runner runs ([`Call`]: a [`Request`] of the contract or one of
//! the runner's own controls) and what it got back ([`Outcome`]: a
//! [`Reply`] or the error's kind), in the form the reference and the
//! system compare.

use crate::error::Error;
use crate::item::{Added, Claimed, Receipt};
use crate::request::{Reply, Request};

/// One step of a run, resolved against the reference: an operation of the
/// contract as a [`Request`] whose receipts are the reference's own (the
/// system swaps each for its receipt of the same slot, see
/// [`map_receipts`]), or a control of the runner that is no operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// An operation of the contract.
    Request(Request),
    /// Move the clock forward by this many ms (then `stats`, whose reply
    /// is not compared: it makes every backend note the clock).
    Advance(u64),
    /// Step the clock back by this many ms, then `stats` (compared).
    StepBack(u64),
    /// Close the queue and open it again on the same storage.
    Reopen,
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
    /// `Error::Cancelled` with the receipt it names.
    Cancelled {
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
            Error::Cancelled { id, delivery, .. } => ErrorKind::Cancelled {
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

/// What one call returned: the reply, or the error's kind.
pub type Outcome = Result<Reply, ErrorKind>;

/// `r` as an [`Outcome`].
pub(super) fn outcome(r: crate::Result<Reply>) -> Outcome {
    r.map_err(|e| ErrorKind::from(&e))
}

/// The adds a reply reports (none for other replies).
pub(super) fn added(v: &Reply) -> &[Added] {
    match v {
        Reply::Added(a) => std::slice::from_ref(a),
        Reply::AddedList(a) => a,
        _ => &[],
    }
}

/// The claims a reply hands out, each with a new receipt (none for other
/// replies): a claim's, a step's and a reclaim's.
pub(super) fn claimed(v: &Reply) -> Vec<&Claimed> {
    match v {
        Reply::Claimed(c) => c.iter().collect(),
        Reply::Stepped(Some(c)) => vec![c],
        Reply::Reclaimed(r) => r.claimed.iter().collect(),
        _ => Vec::new(),
    }
}

/// The claims of a reply, mutable (for blanking lease numbers).
pub(super) fn claimed_mut(v: &mut Reply) -> Vec<&mut Claimed> {
    match v {
        Reply::Claimed(c) => c.iter_mut().collect(),
        Reply::Stepped(Some(c)) => vec![c],
        Reply::Reclaimed(r) => r.claimed.iter_mut().collect(),
        _ => Vec::new(),
    }
}

/// `request` with every receipt it carries replaced by `f` of it: how a
/// request resolved against the reference becomes the system's (each side
/// names a claim by its own receipt). Requests without receipts pass
/// unchanged.
pub fn map_receipts(request: Request, mut f: impl FnMut(Receipt) -> Receipt) -> Request {
    match request {
        Request::Ack { receipt } => Request::Ack {
            receipt: f(receipt),
        },
        Request::AckWithResult { receipt, result } => Request::AckWithResult {
            receipt: f(receipt),
            result,
        },
        Request::SetProgress { receipt, progress } => Request::SetProgress {
            receipt: f(receipt),
            progress,
        },
        Request::SendChunk { receipt, chunk } => Request::SendChunk {
            receipt: f(receipt),
            chunk,
        },
        Request::AckBatch { receipts } => Request::AckBatch {
            receipts: receipts.into_iter().map(f).collect(),
        },
        Request::Touch { receipts } => Request::Touch {
            receipts: receipts.into_iter().map(f).collect(),
        },
        Request::Retry {
            receipt,
            not_before_ms,
        } => Request::Retry {
            receipt: f(receipt),
            not_before_ms,
        },
        Request::Release {
            receipt,
            not_before_ms,
        } => Request::Release {
            receipt: f(receipt),
            not_before_ms,
        },
        Request::DeadLetter { receipt, reason } => Request::DeadLetter {
            receipt: f(receipt),
            reason,
        },
        Request::Park { receipt } => Request::Park {
            receipt: f(receipt),
        },
        other => other,
    }
}

/// A receipt that matches no claim: what a slot the system never got (the
/// replies already differed) becomes.
pub(super) const NO_RECEIPT: Receipt = Receipt {
    id: 0,
    delivery: 0,
    lease: u64::MAX,
};
