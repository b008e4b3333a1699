//! SPEC 3, Outcomes and progress on the reference model: results, progress,
//! chunks and done markers, and the expiry of every record with a TTL (dedup
//! keys too).

use super::Model;
use crate::config::{MEMORY_DONE_MARKER_CAP, ms};
use crate::error::Result;
use crate::item::Receipt;
use crate::outcome::{Chunk, Outcome, OutcomeKind, check_size};

impl Model {
    pub(super) fn expire(&mut self, now_ms: u64) {
        self.dedup.retain(|_, (_, expires)| *expires > now_ms);
        while let Some((expires, id, step)) = self.done_order.first().cloned() {
            if expires > now_ms {
                break;
            }
            self.done_order.pop_first();
            self.done.remove(&(id, step));
        }
        while let Some(&(expires, id)) = self.outcome_expiry.first() {
            if expires > now_ms {
                break;
            }
            self.outcome_expiry.pop_first();
            self.outcomes.remove(&id);
            self.progress.remove(&id);
            self.chunks.remove(&id);
        }
    }

    /// SPEC 3, Outcomes and progress: keep how item `id` finished for `result_ttl`.
    pub(super) fn finish(&mut self, id: u64, kind: OutcomeKind, now_ms: u64) {
        self.forget_outcome(id);
        let ttl = ms(self.config.result_ttl);
        if ttl == 0 {
            // No outcome is kept, so its progress and chunks go at once
            // (they live as long as the outcome, SPEC 3, Outcomes).
            self.progress.remove(&id);
            self.chunks.remove(&id);
            return;
        }
        let expires = now_ms.saturating_add(ttl);
        let outcome = Outcome {
            id,
            kind,
            at_ms: now_ms,
        };
        self.outcomes.insert(id, (outcome, expires));
        self.outcome_expiry.insert((expires, id));
    }

    pub(super) fn forget_outcome(&mut self, id: u64) {
        if let Some((_, expires)) = self.outcomes.remove(&id) {
            self.outcome_expiry.remove(&(expires, id));
        }
    }

    /// SPEC 3, Outcomes and progress: the outcome of `id`, unless expired.
    pub fn outcome(&self, id: u64, now_ms: u64) -> Option<Outcome> {
        self.outcomes
            .get(&id)
            .filter(|(_, expires)| *expires > now_ms)
            .map(|(o, _)| o.clone())
    }

    /// SPEC 3, Outcomes and progress: replace the progress of a pending item.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends); `InvalidInput` over
    /// `max_payload_bytes`.
    pub fn set_progress(&mut self, r: Receipt, progress: Vec<u8>, now_ms: u64) -> Result<()> {
        check_size("progress", progress.len(), self.config.max_payload_bytes)?;
        self.fence(&r, now_ms)?;
        self.progress.insert(r.id, progress);
        Ok(())
    }

    /// SPEC 3, Outcomes and progress: append a chunk to a pending item's stream.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends); `InvalidInput` over
    /// `max_payload_bytes`.
    pub fn send_chunk(&mut self, r: Receipt, data: Vec<u8>, now_ms: u64) -> Result<u64> {
        check_size("chunk", data.len(), self.config.max_payload_bytes)?;
        self.fence(&r, now_ms)?;
        let list = self.chunks.entry(r.id).or_default();
        let seq = list.last().map_or(1, |c| c.seq + 1);
        list.push(Chunk { seq, data });
        Ok(seq)
    }

    /// Whether `id` has an outcome that expired by `now_ms` (its progress and
    /// chunks went with it, even before the purge).
    fn expired(&self, id: u64, now_ms: u64) -> bool {
        self.outcomes
            .get(&id)
            .is_some_and(|(_, expires)| *expires <= now_ms)
    }

    /// SPEC 3, Outcomes and progress: the last progress of `id`.
    pub fn progress(&self, id: u64, now_ms: u64) -> Option<Vec<u8>> {
        if self.expired(id, now_ms) {
            return None;
        }
        self.progress.get(&id).cloned()
    }

    /// SPEC 3, Outcomes and progress: the chunks of `id` after `after_seq`.
    pub fn chunks_after(&self, id: u64, after_seq: u64, now_ms: u64) -> Vec<Chunk> {
        if self.expired(id, now_ms) {
            return Vec::new();
        }
        self.chunks
            .get(&id)
            .map(|l| l.iter().filter(|c| c.seq > after_seq).cloned().collect())
            .unwrap_or_default()
    }

    /// SPEC 3, Idempotency: mark_done.
    pub fn mark_done(&mut self, id: u64, step: &str, now_ms: u64) {
        self.expire(now_ms);
        let expires = now_ms.saturating_add(ms(self.config.done_ttl));
        if let Some(old) = self.done.insert((id, step.to_string()), expires) {
            self.done_order.remove(&(old, id, step.to_string()));
        }
        self.done_order.insert((expires, id, step.to_string()));
        while self.done.len() > MEMORY_DONE_MARKER_CAP {
            if let Some((_, oid, ostep)) = self.done_order.pop_first() {
                self.done.remove(&(oid, ostep));
            }
        }
    }

    /// SPEC 3, Idempotency: was_done.
    pub fn was_done(&self, id: u64, step: &str, now_ms: u64) -> bool {
        self.done
            .get(&(id, step.to_string()))
            .is_some_and(|expires| *expires > now_ms)
    }
}
