//! What store and forward (SPEC section 11) hands from one layer to
//! another: the items an embedded file gives up ([`Outgoing`]), which the
//! Redis backend takes in, and the lag a served file reports
//! ([`LocalLag`]), which the remote client reads. Below the backends, so
//! that none of them imports another backend or `forward`.

/// One item on its way to Redis, as the local queue holds it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Outgoing {
    /// The local id: the origin id in Redis.
    pub(crate) id: u64,
    pub(crate) flow: String,
    pub(crate) payload: Vec<u8>,
    /// When it was added locally, ms since the Unix epoch (local clock).
    pub(crate) enqueued_at_ms: u64,
    /// Its not-before time, for an item that is delayed or in the due lane.
    pub(crate) not_before_ms: Option<u64>,
    /// Its priority tier (SPEC 3, Priority), kept in Redis.
    pub(crate) priority: u8,
    /// Its cost in rate-limit permits (SPEC 3, Flow limits), kept in Redis.
    pub(crate) cost: u32,
    /// Its dedup key, while the key's local window is open.
    pub(crate) dedup_key: Option<String>,
    /// True for an item at or below the forwarding mark: it was held
    /// locally (pending, parked, dead) when the forwarder passed its id.
    pub(crate) late: bool,
}

/// What the local queue has not handed over yet (SPEC section 11, lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Lag {
    /// Items of the forwarded flows waiting locally (backlog, due, delayed).
    pub count: u64,
    /// Age of the oldest of them by the local clock, in ms; `None` when
    /// nothing waits.
    pub oldest_age_ms: Option<u64>,
}

/// What a queue file holds for forwarding, read from the file alone: see
/// [`local_lag`](crate::forward::local_lag).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub struct LocalLag {
    /// What waits to be handed over (of the flows asked for).
    pub lag: Lag,
    /// Whether a [`Forwarder`](crate::forward::Forwarder) was ever set up on this file (it made the
    /// file's forwarding journal id), whatever it has forwarded since.
    pub forwarded: bool,
    /// Whether a forwarder runs on this file now: true only when read
    /// through a [`LagSource::forwarder`](crate::forward::LagSource::forwarder) (the socket `workjournal forward`
    /// serves), also before its first batch reached Redis.
    pub forwarding: bool,
}
