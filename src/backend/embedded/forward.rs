//! The embedded side of store and forward (SPEC section 11): the reads and
//! the removal a [`Forwarder`](crate::forward::Forwarder) needs, which the
//! `WorkQueue` trait does not offer. `claim` hands out only ready items, due
//! lane first, and makes them pending; a forwarder must take every waiting
//! item in id order, delayed ones included (they keep their `not_before`),
//! without a lease, and remove it only once Redis holds it.
//!
//! Each forwarding target has a mark in the file's meta table (key
//! `forward_mark:<namespace>:<origin>`): the highest local id handed over.
//! The removal of a batch and the raise of the mark are one transaction,
//! so after a crash the next read starts right after the last removed
//! batch, and Redis (which keeps its own mark) skips what it already took.

use std::time::Duration;

use super::tables::{Outgoing, Unforwarded};
use super::writer::{Op, Reply};
use super::{EmbeddedQueue, unexpected};
use crate::error::Result;

impl EmbeddedQueue {
    /// This file's forwarding journal id (random, made on first use).
    pub(crate) async fn forward_journal(&self) -> Result<u64> {
        expect_reply!(self, Op::ForwardJournal(fastrand::u64(1..)), Reply::Count(n) => n)
    }

    /// The next items to hand over under mark `key`, in id order, bounded
    /// by `max_items` and `max_bytes` (at least one item). With `late`,
    /// the items at or below the mark instead.
    pub(crate) async fn forward_read(
        &self,
        key: &str,
        flows: Option<&[String]>,
        max_items: usize,
        max_bytes: usize,
        late: bool,
    ) -> Result<Vec<Outgoing>> {
        expect_reply!(self, Op::ForwardRead {
            key: key.to_string(),
            flows: flows.map(<[String]>::to_vec),
            max_items,
            max_bytes,
            late,
        }, Reply::Outgoing(v) => v)
    }

    /// Remove `ids` (taken by Redis) and raise mark `key` to `mark`.
    pub(crate) async fn forward_done(&self, key: &str, ids: Vec<u64>, mark: u64) -> Result<u64> {
        expect_reply!(self, Op::ForwardDone { key: key.to_string(), ids, mark }, Reply::Count(n) => n)
    }

    /// What waits to be handed over in `flows` (`None`: all).
    pub(crate) async fn forward_lag(&self, flows: Option<&[String]>) -> Result<Unforwarded> {
        expect_reply!(self, Op::ForwardLag(flows.map(<[String]>::to_vec)), Reply::Lag(l) => l)
    }

    /// Wait until the file changes (a write by any handle of this process)
    /// or `timeout` passes.
    pub(crate) async fn changed(&self, timeout: Duration) {
        let _ = tokio::time::timeout(timeout, self.inner.wake.notified()).await;
    }
}
