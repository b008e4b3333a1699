//! The crate's one error type (SPEC section 5).

use std::path::PathBuf;

/// A boxed error from a storage engine or client library, kept as `source()`.
pub(crate) type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// The error and its sources on one line, each cause added once (a
/// `Display` of [`Error`] leaves the source out, STYLE: the cause of a
/// Redis failure is its source).
pub(crate) fn one_line(e: &dyn std::error::Error) -> String {
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

/// Result alias used by every fallible operation of the crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Everything that can go wrong, each variant saying what to do next (SPEC section 5).
///
/// A failed operation leaves the queue exactly as it was. Errors of redb or
/// redis never appear in public signatures: they are the
/// [`source`](std::error::Error::source) of [`Error::Storage`] or
/// [`Error::Backend`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The add would push backlog + due + delayed past `max_backlog`; nothing
    /// was journaled. Wait for consumers to drain the queue, then add again.
    #[error("queue is full: backlog + due + delayed would pass the limit of {limit} items")]
    Full {
        /// The configured `max_backlog`, in items.
        limit: u64,
    },
    /// The receipt's claim is no longer current: the item was acked, reclaimed
    /// by another consumer, retried, parked or dead-lettered. Nothing changed;
    /// drop the work for this item (another consumer owns it now).
    #[error(
        "lease lost for item {id} (delivery {delivery}, lease {lease}): the claim is no longer current"
    )]
    LeaseLost {
        /// The item's id.
        id: u64,
        /// The delivery number the receipt named.
        delivery: u32,
        /// The lease number the receipt named: the one field that tells two
        /// receipts of one item apart when a redrive repeats a delivery
        /// number (SPEC section 2, receipt).
        lease: u64,
    },
    /// The receipt's item was cancelled while it ran (SPEC 3, Cancelling):
    /// the call that got this changed nothing it asked for, and the item
    /// has ended as cancelled (its outcome says so; it is neither retried
    /// nor dead-lettered). Stop working on it.
    #[error(
        "item {id} was cancelled (delivery {delivery}, lease {lease}): stop working on it; it has ended as cancelled"
    )]
    Cancelled {
        /// The item's id.
        id: u64,
        /// The delivery number the receipt named.
        delivery: u32,
        /// The lease number the receipt named.
        lease: u64,
    },
    /// Another process (or another handle in this process) holds the queue
    /// file. Close the other one, or point this one at another file.
    #[error("queue file {} is locked by another process or handle", path.display())]
    Locked {
        /// The file that is locked.
        path: PathBuf,
    },
    /// The file is not a queue, or is damaged beyond repair. Restore it from a
    /// copy or move it aside; the library never deletes it.
    #[error("queue file is corrupt: {detail}")]
    Corrupt {
        /// What was found wrong, in words.
        detail: String,
        /// The storage engine's own error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// An operating system error (disk full, permission denied). Fix the cause
    /// and try again; nothing of the failed operation was kept. The message
    /// names the OS cause too (`i/o error: commit: No space left on device
    /// (os error 28)`), which is also the `source`.
    #[error("i/o error: {context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The operating system's error.
        #[source]
        source: std::io::Error,
    },
    /// The storage engine failed (a write, a commit, a transaction). Nothing of
    /// the failed operation was kept; trying again may work.
    #[error("storage error: {context}")]
    Storage {
        /// What was being done.
        context: String,
        /// The storage engine's error.
        #[source]
        source: BoxError,
    },
    /// The Redis server was unreachable, timed out, refused a script, or
    /// acknowledged fewer replicas than asked. Trying again may work.
    #[error("backend error: {detail}")]
    Backend {
        /// What failed, in words.
        detail: String,
        /// The client library's error, when there is one.
        #[source]
        source: Option<BoxError>,
    },
    /// A stored record this version cannot read. The record is kept, never
    /// deleted; upgrade the program or inspect the record.
    #[error("cannot decode {what}: {detail}")]
    Decode {
        /// Which record (table and key).
        what: String,
        /// Why it could not be read.
        detail: String,
    },
    /// The caller passed something the queue refuses: an empty flow name where
    /// one is required, a flow name with control characters or over
    /// [`MAX_FLOW_NAME_BYTES`](crate::MAX_FLOW_NAME_BYTES), `count == 0`, a
    /// payload over `max_payload_bytes`, a time that overflows, a write on a
    /// queue opened read-only. Nothing changed; fix the call.
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// The queue handle was closed; open a new one.
    #[error("queue handle is closed")]
    Closed,
}

impl Error {
    /// True when the same call may succeed if tried again later unchanged:
    /// [`Error::Full`], [`Error::Io`], [`Error::Storage`], [`Error::Backend`]
    /// and [`Error::Locked`].
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            Error::Full { .. }
                | Error::Io { .. }
                | Error::Storage { .. }
                | Error::Backend { .. }
                | Error::Locked { .. }
        )
    }

    /// The error's kind in one word: `full`, `lease_lost`, `cancelled`, `locked`,
    /// `corrupt`, `io`, `storage`, `backend`, `decode`, `invalid_input` or
    /// `closed`. The wire's error kinds (SPEC 10) and the `outcome` label
    /// of the metrics (SPEC 12.3) are these names.
    pub fn kind(&self) -> &'static str {
        match self {
            Error::Full { .. } => "full",
            Error::LeaseLost { .. } => "lease_lost",
            Error::Cancelled { .. } => "cancelled",
            Error::Locked { .. } => "locked",
            Error::Corrupt { .. } => "corrupt",
            Error::Io { .. } => "io",
            Error::Storage { .. } => "storage",
            Error::Backend { .. } => "backend",
            Error::Decode { .. } => "decode",
            Error::InvalidInput(_) => "invalid_input",
            Error::Closed => "closed",
        }
    }

    /// True for [`Error::LeaseLost`].
    pub fn is_lease_lost(&self) -> bool {
        matches!(self, Error::LeaseLost { .. })
    }

    /// True for [`Error::Cancelled`].
    pub fn is_cancelled(&self) -> bool {
        matches!(self, Error::Cancelled { .. })
    }

    /// [`Error::LeaseLost`] naming every field of `receipt`.
    pub(crate) fn lease_lost(receipt: &crate::item::Receipt) -> Self {
        Error::LeaseLost {
            id: receipt.id,
            delivery: receipt.delivery,
            lease: receipt.lease,
        }
    }

    /// [`Error::Cancelled`] naming every field of `receipt`.
    pub(crate) fn cancelled(receipt: &crate::item::Receipt) -> Self {
        Error::Cancelled {
            id: receipt.id,
            delivery: receipt.delivery,
            lease: receipt.lease,
        }
    }

    pub(crate) fn invalid(msg: impl Into<String>) -> Self {
        Error::InvalidInput(msg.into())
    }

    #[cfg_attr(not(feature = "embedded"), allow(dead_code))]
    pub(crate) fn storage(context: impl Into<String>, source: impl Into<BoxError>) -> Self {
        Error::Storage {
            context: context.into(),
            source: source.into(),
        }
    }

    pub(crate) fn corrupt(detail: impl Into<String>) -> Self {
        Error::Corrupt {
            detail: detail.into(),
            source: None,
        }
    }

    #[allow(dead_code)] // used by the redis backend
    pub(crate) fn backend(detail: impl Into<String>) -> Self {
        Error::Backend {
            detail: detail.into(),
            source: None,
        }
    }

    /// A copy for handing one failure to several waiting callers. Sources that
    /// cannot be cloned are folded into the text.
    #[cfg_attr(not(any(feature = "embedded", feature = "redis")), allow(dead_code))]
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            Error::Full { limit } => Error::Full { limit: *limit },
            Error::LeaseLost {
                id,
                delivery,
                lease,
            } => Error::LeaseLost {
                id: *id,
                delivery: *delivery,
                lease: *lease,
            },
            Error::Cancelled {
                id,
                delivery,
                lease,
            } => Error::Cancelled {
                id: *id,
                delivery: *delivery,
                lease: *lease,
            },
            Error::Locked { path } => Error::Locked { path: path.clone() },
            Error::Corrupt { detail, source } => Error::Corrupt {
                detail: join(detail, source.as_deref()),
                source: None,
            },
            Error::Io { context, source } => Error::Io {
                context: context.clone(),
                source: std::io::Error::new(source.kind(), source.to_string()),
            },
            Error::Storage { context, source } => Error::Storage {
                context: context.clone(),
                source: source.to_string().into(),
            },
            Error::Backend { detail, source } => Error::Backend {
                detail: join(detail, source.as_deref()),
                source: None,
            },
            Error::Decode { what, detail } => Error::Decode {
                what: what.clone(),
                detail: detail.clone(),
            },
            Error::InvalidInput(m) => Error::InvalidInput(m.clone()),
            Error::Closed => Error::Closed,
        }
    }
}

fn join(detail: &str, source: Option<&(dyn std::error::Error + Send + Sync + 'static)>) -> String {
    match source {
        Some(s) => format!("{detail}: {s}"),
        None => detail.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // Failed: the writer's I/O errors read "i/o error: commit", without the
    // OS cause, wherever only the message is shown (worker events, logs).
    #[test]
    fn an_io_error_names_its_os_cause() {
        let e = Error::Io {
            context: "commit".into(),
            source: std::io::Error::from_raw_os_error(1),
        };
        let text = e.to_string();
        assert!(text.starts_with("i/o error: commit: "), "{text}");
        assert!(text.contains("(os error 1)"), "{text}");
        assert!(e.duplicate().to_string().contains("(os error 1)"));
    }
}
