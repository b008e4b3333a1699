//! SPEC 3, Finishing and Crash recovery on the reference model: ack, touch,
//! retry, release, dead-letter and `reclaim`, each fenced by the
//! receipt's lease.

use std::time::Duration;

use super::{Lease, Model};
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{MAX_DELIVERIES_REASON, Receipt, Reclaimed, RetryOutcome};
use crate::outcome::{OutcomeKind, check_size};

impl Model {
    pub(super) fn current(&self, r: &Receipt) -> Result<Lease> {
        match self.pending.get(&r.id) {
            Some(l) if l.lease == r.lease => Ok(*l),
            _ => Err(Error::lease_lost(r)),
        }
    }

    /// The fence of every call a holder makes with its receipt (SPEC 3,
    /// Finishing; Cancelling): the lease when the receipt is current;
    /// `LeaseLost` when it is not; when its item is marked cancelled, the
    /// item ends as cancelled here and the answer is `Cancelled`.
    pub(super) fn fence(&mut self, r: &Receipt, now_ms: u64) -> Result<Lease> {
        let lease = self.current(r)?;
        if lease.cancelling {
            self.end_cancelled(r.id, now_ms);
            return Err(Error::cancelled(r));
        }
        Ok(lease)
    }

    /// End pending item `id` as cancelled (SPEC 3, Cancelling): out of
    /// pending, gone, its outcome `Cancelled`.
    pub(super) fn end_cancelled(&mut self, id: u64, now_ms: u64) {
        self.expire(now_ms);
        let lease = self.pending.remove(&id);
        self.left_pending(id, now_ms);
        let item = self.items.remove(&id);
        self.finish(id, OutcomeKind::Cancelled, now_ms);
        if let Some(item) = item {
            self.keep_finished(item, lease.map(|l| l.claimed_at_ms), None, now_ms);
        }
    }

    /// SPEC 3, Finishing: ack.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends).
    pub fn ack(&mut self, r: Receipt, now_ms: u64) -> Result<()> {
        self.ack_with_result(r, Vec::new(), now_ms)
    }

    /// SPEC 3, Outcomes and progress: ack carrying a result.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `InvalidInput` for a result over `max_payload_bytes`.
    pub fn ack_with_result(&mut self, r: Receipt, result: Vec<u8>, now_ms: u64) -> Result<()> {
        check_size("result", result.len(), self.config.max_payload_bytes)?;
        let lease = self.fence(&r, now_ms)?;
        self.expire(now_ms);
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        let item = self.items.remove(&r.id);
        self.finish(
            r.id,
            OutcomeKind::Done {
                result: result.clone(),
            },
            now_ms,
        );
        if let Some(item) = item {
            self.keep_finished(item, Some(lease.claimed_at_ms), Some(result), now_ms);
        }
        Ok(())
    }

    /// SPEC 3, Finishing: ack_batch.
    pub fn ack_batch(&mut self, receipts: &[Receipt], now_ms: u64) -> u64 {
        receipts
            .iter()
            .filter(|r| self.ack(**r, now_ms).is_ok())
            .count() as u64
    }

    /// SPEC 3, Finishing: touch, all or nothing. The receipts are looked
    /// at in order, and the first that is not current decides.
    ///
    /// # Errors
    ///
    /// `LeaseLost` naming the first receipt not current; `Cancelled`
    /// naming the first of an item marked cancelled, which ends (no lease
    /// is extended).
    pub fn touch(&mut self, receipts: &[Receipt], now_ms: u64) -> Result<()> {
        for r in receipts {
            self.fence(r, now_ms)?;
        }
        for r in receipts {
            if let Some(l) = self.pending.get_mut(&r.id) {
                l.touched_at_ms = now_ms;
                l.orphan = false;
            }
        }
        Ok(())
    }

    fn bury(&mut self, id: u64, reason: String, now_ms: u64) {
        self.expire(now_ms);
        self.finish(
            id,
            OutcomeKind::DeadLettered {
                reason: reason.clone(),
            },
            now_ms,
        );
        self.dead.push_back((id, reason, now_ms));
        while self.dead.len() as u64 > self.config.dead_letter_cap {
            if let Some((old, _, _)) = self.dead.pop_front() {
                tracing::warn!(
                    id = old,
                    cap = self.config.dead_letter_cap,
                    "dead letter dropped for good: dead_letter_cap reached"
                );
                self.items.remove(&old);
                self.dead_dropped = self.dead_dropped.saturating_add(1);
            }
        }
    }

    /// SPEC 3, Finishing: retry.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends).
    pub fn retry(&mut self, r: Receipt, not_before_ms: u64, now_ms: u64) -> Result<RetryOutcome> {
        self.fence(&r, now_ms)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        let deliveries = self.items.get(&r.id).map(|i| i.deliveries).unwrap_or(0);
        if deliveries >= self.config.max_deliveries {
            self.bury(r.id, MAX_DELIVERIES_REASON.to_string(), now_ms);
            return Ok(RetryOutcome::DeadLettered);
        }
        if let Some(item) = self.items.get_mut(&r.id) {
            item.not_before_ms = Some(not_before_ms);
        }
        self.delayed.insert((not_before_ms, r.id));
        Ok(RetryOutcome::Delayed)
    }

    /// SPEC 3, Finishing: release (give the claim back, `deliveries - 1`).
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends).
    pub fn release(&mut self, r: Receipt, not_before_ms: u64, now_ms: u64) -> Result<()> {
        self.fence(&r, now_ms)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        let flow = self.flow_of(r.id).to_string();
        let paused = self.paused.contains(&flow);
        if let Some(item) = self.items.get_mut(&r.id) {
            item.deliveries = item.deliveries.saturating_sub(1);
            if !paused {
                item.not_before_ms = Some(not_before_ms);
            }
        }
        if paused {
            self.parked.entry(flow).or_default().push_back(r.id);
        } else {
            self.delayed.insert((not_before_ms, r.id));
        }
        Ok(())
    }

    /// SPEC 3, Finishing: dead_letter.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `Cancelled` (the item ends).
    pub fn dead_letter(&mut self, r: Receipt, reason: &str, now_ms: u64) -> Result<()> {
        self.fence(&r, now_ms)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        self.bury(r.id, reason.to_string(), now_ms);
        Ok(())
    }

    /// SPEC 3, Crash recovery: reclaim.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `count == 0`.
    pub fn reclaim(&mut self, min_idle: Duration, count: usize, now_ms: u64) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let min_idle = ms(min_idle);
        let mut stale: Vec<(u64, u64)> = self
            .pending
            .iter()
            .filter(|(_, l)| l.orphan || now_ms.saturating_sub(l.touched_at_ms) >= min_idle)
            .map(|(id, l)| (l.touched_at_ms, *id))
            .collect();
        stale.sort_unstable();
        let mut out = Vec::new();
        let mut dead_lettered = Vec::new();
        let mut cancelled = Vec::new();
        for (_, id) in stale {
            if out.len() >= count {
                break;
            }
            // SPEC 3, Cancelling: a stale claim of a cancelled item ends
            // it; it never runs again.
            if let Some(lease) = self.pending.get(&id).copied()
                && lease.cancelling
            {
                let delivery = self.items.get(&id).map(|i| i.deliveries).unwrap_or(0);
                self.end_cancelled(id, now_ms);
                cancelled.push(Receipt {
                    id,
                    delivery,
                    lease: lease.lease,
                });
                continue;
            }
            let Some(lease) = self.pending.remove(&id) else {
                continue;
            };
            self.left_pending(id, now_ms);
            let deliveries = self.items.get(&id).map(|i| i.deliveries).unwrap_or(0);
            if deliveries >= self.config.max_deliveries {
                self.bury(id, MAX_DELIVERIES_REASON.to_string(), now_ms);
                dead_lettered.push(Receipt {
                    id,
                    delivery: deliveries,
                    lease: lease.lease,
                });
                continue;
            }
            // SPEC 3, Crash recovery: an item of a paused flow is parked
            // (deliveries unchanged, not counted), never handed out.
            let flow = self.flow_of(id).to_string();
            if self.paused.contains(&flow) {
                self.parked.entry(flow).or_default().push_back(id);
                continue;
            }
            if let Some(c) = self.hand_out(id, lease.lane, now_ms) {
                out.push(c);
            }
        }
        Ok(Reclaimed {
            claimed: out,
            dead_lettered,
            cancelled,
        })
    }
}
