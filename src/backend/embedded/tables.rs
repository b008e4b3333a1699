//! Table layout of the embedded file and every state move on it.
//!
//! Each item's metadata and payload are stored once (`items`, and
//! `payloads` for payloads over [`INLINE_PAYLOAD_BYTES`]); every state is
//! an index table naming ids, so a move between states is a delete from one
//! index and an insert into another inside one write transaction. Lanes
//! that keep an order (parked lists, dead letters) are keyed by one
//! file-wide position counter `seq`; the backlog and the due lane by
//! (rank, seq), the rank being SPEC 3's priority rank. The tables are
//! listed once, in [`schema`]; docs/DESIGN.md, "Embedded file", has the
//! whole design.
//!
//! One file per job, each an `impl Tables` block:
//! - [`schema`]: the table list, the meta keys and counters;
//! - [`records`]: item records, payloads and leases;
//! - [`moves`]: add, claim, finish and reclaim (SPEC section 3);
//! - [`batches`]: the batched forms of an add's writes, a claim's
//!   hand-outs and `ack_batch`;
//! - [`flows`]: paused flows and their parked lists;
//! - [`control`]: one item's `promote` and `remove`, and the atomic
//!   `back_off` (SPEC 3);
//! - [`dead`]: dead letters and redrive;
//! - [`deferred`]: deferred deletes of finished items' records;
//! - [`outcomes`]: outcomes, progress, chunks and done markers;
//! - [`limits`]: rate limits, concurrency caps and back-off;
//! - [`clock`]: clock steps (SPEC 3) and the purge of expired entries;
//! - [`reads`]: stats and the claim order of `peek`;
//! - [`browse`]: `list` and `find` (SPEC 12.1);
//! - `forward`: the table side of store and forward;
//! - [`audit`]: test support (where every item is, table dumps).
//!
//! [`INLINE_PAYLOAD_BYTES`]: crate::backend::embedded::codec::INLINE_PAYLOAD_BYTES

#[cfg(feature = "testing")]
mod audit;
mod batches;
mod browse;
mod clock;
mod control;
mod dead;
mod deferred;
mod finishing;
mod flows;
#[cfg(feature = "forward")]
mod forward;
mod history;
mod limits;
mod moves;
mod outcomes;
mod reads;
mod records;
mod schedules;
mod schema;

use crate::error::{Error, Result};
pub(super) use clock::ExpiryFloors;
#[cfg(feature = "forward")]
pub(crate) use forward::{Outgoing, Unforwarded};
pub(super) use schema::*;

/// Map any redb error to the crate's error, naming what was being done.
pub(super) fn db_err(e: impl Into<redb::Error>, what: &str) -> Error {
    match e.into() {
        redb::Error::Corrupted(detail) => Error::Corrupt {
            detail: format!("{what}: {detail}"),
            source: None,
        },
        redb::Error::Io(source) => Error::Io {
            context: what.to_string(),
            source,
        },
        other => Error::storage(what.to_string(), other),
    }
}

/// Name what was being done on a redb error (see [`db_err`]).
pub(super) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T>;
}

impl<T, E: Into<redb::Error>> Ctx<T> for std::result::Result<T, E> {
    fn ctx(self, what: &str) -> Result<T> {
        self.map_err(|e| db_err(e, what))
    }
}

/// The settings the table operations need.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_deliveries: u32,
    pub(super) done_ttl_ms: u64,
    pub(super) result_ttl_ms: u64,
    pub(super) dedup_window_ms: u64,
    pub(super) dead_letter_cap: u64,
    pub(super) max_backlog: Option<u64>,
    pub(super) max_payload_bytes: usize,
    pub(super) aging_step: std::time::Duration,
    /// SPEC 3, History: the finished items kept of each state.
    pub(super) completed_retention: crate::config::Retention,
    pub(super) cancelled_retention: crate::config::Retention,
}
