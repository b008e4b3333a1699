//! The error reply and its mapping onto [`Error`] both ways.

use serde::{Deserialize, Serialize};

use crate::error::Error;

/// The error reply: `{"error": {...}}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ErrorReply {
    /// What went wrong.
    pub error: ErrorBody,
}

/// What went wrong, with the fields of the [`Error`] variant it stands for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
    /// `lease_lost`: the receipt's lease number (SPEC 2, Receipt).
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
            "lease_lost" | "cancelled" => 409,
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
        let mut b = ErrorBody::plain(e.kind(), message);
        match e {
            Error::Full { limit } => b.limit = Some(*limit),
            Error::LeaseLost {
                id,
                delivery,
                lease,
            }
            | Error::Cancelled {
                id,
                delivery,
                lease,
            } => {
                b.id = Some(*id);
                b.delivery = Some(*delivery);
                b.lease = Some(*lease);
            }
            Error::Decode { what, detail } => {
                b.what = Some(what.clone());
                b.detail = Some(detail.clone());
            }
            Error::InvalidInput(detail) => b.detail = Some(detail.clone()),
            Error::Locked { .. }
            | Error::Corrupt { .. }
            | Error::Io { .. }
            | Error::Storage { .. }
            | Error::Backend { .. }
            | Error::Closed => {}
        }
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
            "cancelled" => Error::Cancelled {
                id: self.id.unwrap_or_default(),
                delivery: self.delivery.unwrap_or_default(),
                lease: self.lease.unwrap_or_default(),
            },
            "corrupt" => Error::Corrupt {
                detail: format!("on the server: {}", self.message),
                source: None,
            },
            // The message is the server's whole `i/o error: ...` line:
            // it is the source, said once (it was the context and the
            // source both, so the text appeared twice).
            "io" => Error::Io {
                context: "on the server".into(),
                source: std::io::Error::other(
                    self.message
                        .strip_prefix("i/o error: ")
                        .unwrap_or(&self.message)
                        .to_string(),
                ),
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
            // The server's queue is closing: it refused the call before
            // doing anything, so the outcome is known (SPEC 10, Take-over).
            "closed" => Error::Backend {
                detail: format!(
                    "server refused the call (closed): {}; nothing was done",
                    self.message
                ),
                source: Some(Box::new(Unanswered::Closing)),
            },
            _ => Error::backend(format!(
                "server refused the call ({}): {}",
                self.kind, self.message
            )),
        }
    }
}

/// Why a call to a server got no answer from its queue while nothing
/// happened there: the `source` of such a [`Error::Backend`], read by the
/// take-over of a queue file (SPEC 10, Take-over) through [`unanswered`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Unanswered {
    /// The connection was refused or the socket is missing: nothing was
    /// sent.
    #[cfg_attr(not(feature = "remote"), allow(dead_code))]
    NotSent,
    /// The server answered `closed` (503): it is shutting down and did
    /// nothing.
    Closing,
}

impl std::fmt::Display for Unanswered {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Words the error's own text already holds, so a one-line message
        // never says them twice.
        f.write_str(match self {
            Unanswered::NotSent => "nothing was sent",
            Unanswered::Closing => "nothing was done",
        })
    }
}

impl std::error::Error for Unanswered {}

/// Whether `e` is a call a server never carried out because it could not
/// be reached or is shutting down (see [`Unanswered`]).
#[cfg_attr(not(feature = "remote"), allow(dead_code))]
pub(crate) fn unanswered(e: &Error) -> Option<Unanswered> {
    match e {
        Error::Backend {
            source: Some(source),
            ..
        } => source.downcast_ref::<Unanswered>().copied(),
        _ => None,
    }
}

/// The error and its sources on one line, each cause added once.
pub fn one_line(e: &dyn std::error::Error) -> String {
    crate::error::one_line(e)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC 10, Errors. Regression: a server's i/o error came back to the
    /// client with its text twice (`i/o error: on the server: i/o error:
    /// append ...: X: i/o error: append ...: X`).
    #[test]
    fn a_server_io_error_reads_once_on_the_client() {
        let on_server = Error::Io {
            context: "append to the redo log".into(),
            source: std::io::Error::other("the redo log was opened read-only"),
        };
        let client = ErrorBody::from_error(&on_server).into_error();
        let text = one_line(&client);
        assert_eq!(
            text,
            "i/o error: on the server: append to the redo log: the redo log was opened read-only"
        );
        assert_eq!(client.kind(), "io");
    }
}
