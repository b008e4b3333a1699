//! Request and reply of the `forward_lag` route (SPEC 11, Lag in
//! `stats`).

use serde::{Deserialize, Serialize};

/// `forward_lag`.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ForwardLagRequest {
    /// Count these flows only (`""` is the default flow). Absent, `null`
    /// or empty: the flows the serving forwarder forwards, else every flow.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flows: Option<Vec<String>>,
}

/// The forwarding lag of a served queue file, as on the wire.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
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
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ForwardLagReply {
    /// The lag, if the served queue is a queue file.
    #[serde(deserialize_with = "Option::deserialize")]
    pub lag: Option<WireForwardLag>,
}
