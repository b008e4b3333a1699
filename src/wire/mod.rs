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
//! [`Error`](crate::Error) variant both ways.
//!
//! The types live in one file per group of routes: the values requests
//! and replies carry (`items`), the core queue routes (`queue`), outcomes
//! and progress (`outcome`), the forwarding lag (`forward`), listing
//! (`browse`), the error reply (`error`), and the decoding and encoding of
//! a whole request (`request`); all are re-exported here.

use std::time::Duration;

use base64::Engine as _;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

mod browse;
mod convert;
mod error;
mod forward;
mod items;
mod outcome;
mod queue;
mod request;
mod schedule;

pub use browse::*;
pub use convert::*;
pub use error::*;
pub use forward::*;
pub use items::*;
pub use outcome::*;
pub use queue::*;
pub use request::*;
pub use schedule::*;

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

/// The schema of [`Base64`] (SPEC section 10): a string of standard
/// base64 with padding, the only form the server reads.
#[cfg(feature = "server")]
impl schemars::JsonSchema for Base64 {
    fn schema_name() -> std::borrow::Cow<'static, str> {
        "Base64".into()
    }

    fn json_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
        schemars::json_schema!({
            "type": "string",
            "contentEncoding": "base64",
            "pattern": BASE64_PATTERN,
            "description": "Bytes as standard base64 with padding (`aGVsbG8=` is `hello`).",
        })
    }
}

/// What standard base64 with padding looks like: whole groups of four,
/// the last one padded with `=` (SPEC section 10).
#[cfg(feature = "server")]
const BASE64_PATTERN: &str = "^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$";

fn one_permit() -> u32 {
    1
}

fn is_one(n: &u32) -> bool {
    *n == 1
}

/// Milliseconds in `d`, saturating, for `wait_ms` and `min_idle_ms`.
pub fn duration_ms(d: Duration) -> u64 {
    crate::config::ms(d)
}
