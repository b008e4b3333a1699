//! The state moves of SPEC section 3 out of pending: finishing (ack,
//! touch, retry, release, dead letter) and reclaim. Each move deletes an
//! id from one index and inserts it into another in the same transaction.

use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, LeaseRecord};
use crate::error::{Error, Result};
use crate::item::{MAX_DELIVERIES_REASON, Receipt, Reclaimed, RetryOutcome};
use crate::outcome::check_size;

impl Tables<'_> {
    pub(in crate::backend::embedded) fn ack(
        &mut self,
        r: &Receipt,
        result: &[u8],
        now: u64,
    ) -> Result<()> {
        check_size("result", result.len(), self.limits.max_payload_bytes)?;
        let lease = self.current(r)?;
        self.keep_finished_pending(r.id, &lease, Some(result), now)?;
        self.remove_pending(r.id, &lease, now)?;
        self.delete_item(r.id)?;
        self.finish(r.id, codec::OUTCOME_DONE, result.to_vec(), "", now)
    }

    pub(in crate::backend::embedded) fn ack_batch(
        &mut self,
        receipts: &[Receipt],
        now: u64,
    ) -> Result<u64> {
        if let Some(n) = self.ack_batched(receipts, now)? {
            return Ok(n);
        }
        let mut n = 0;
        for r in receipts {
            match self.ack(r, &[], now) {
                Ok(()) => n += 1,
                Err(Error::LeaseLost { .. }) => {}
                // SPEC 3, Cancelling: the item ends, and is not counted.
                Err(Error::Cancelled { .. }) => {
                    self.end_cancelled(r, now)?;
                }
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    pub(in crate::backend::embedded) fn touch(
        &mut self,
        receipts: &[Receipt],
        now: u64,
    ) -> Result<()> {
        for r in receipts {
            self.current(r)?;
        }
        for r in receipts {
            // Read the lease again: a receipt named twice was moved already.
            let mut l = self.current(r)?;
            let old = (l.touched_at_ms, r.id);
            self.pending_by_time_mut()?
                .remove(old)
                .ctx("move lease index")?;
            self.orphans_mut()?.remove(old).ctx("delete orphan")?;
            l.touched_at_ms = now;
            self.pending_mut()?
                .insert(r.id, codec::encode_lease(&l)?.as_slice())
                .ctx("write lease")?;
            self.pending_by_time_mut()?
                .insert((now, r.id), ())
                .ctx("write lease index")?;
        }
        Ok(())
    }

    pub(in crate::backend::embedded) fn retry(
        &mut self,
        r: &Receipt,
        not_before: u64,
        now: u64,
    ) -> Result<RetryOutcome> {
        let lease = self.current(r)?;
        let mut rec = self.record_leaving(r.id, &lease)?;
        self.remove_pending(r.id, &lease, now)?;
        if rec.deliveries >= self.limits.max_deliveries {
            self.put_record(r.id, &rec)?;
            self.bury(r.id, MAX_DELIVERIES_REASON, now)?;
            return Ok(RetryOutcome::DeadLettered);
        }
        rec.not_before_ms = Some(not_before);
        self.put_record(r.id, &rec)?;
        self.delayed_mut()?
            .insert((not_before, r.id), ())
            .ctx("write delayed")?;
        Ok(RetryOutcome::Delayed)
    }

    /// SPEC 3, Finishing: release. Back to delayed (or the parked tail of
    /// a paused flow) with `deliveries - 1`.
    pub(in crate::backend::embedded) fn release(
        &mut self,
        r: &Receipt,
        not_before: u64,
        now: u64,
    ) -> Result<()> {
        let lease = self.current(r)?;
        let mut rec = self.record_leaving(r.id, &lease)?;
        self.remove_pending(r.id, &lease, now)?;
        rec.deliveries = rec.deliveries.saturating_sub(1);
        let paused = self.is_paused(&rec.flow)?;
        if !paused {
            rec.not_before_ms = Some(not_before);
        }
        self.put_record(r.id, &rec)?;
        if paused {
            self.park_id(&rec.flow, r.id)
        } else {
            self.delayed_mut()?
                .insert((not_before, r.id), ())
                .ctx("write delayed")?;
            Ok(())
        }
    }

    pub(in crate::backend::embedded) fn dead_letter(
        &mut self,
        r: &Receipt,
        reason: &str,
        now: u64,
    ) -> Result<()> {
        let lease = self.current(r)?;
        self.remove_pending(r.id, &lease, now)?;
        self.keep_deliveries(r.id, &lease)?;
        self.bury(r.id, reason, now)
    }

    pub(super) fn remove_pending(&mut self, id: u64, lease: &LeaseRecord, now: u64) -> Result<()> {
        if self.has_limits()? {
            let flow = self.record(id)?.flow;
            self.note_pending(&flow, false, 1, now)?;
        }
        self.pending_mut()?.remove(id).ctx("delete lease")?;
        self.pending_by_time_mut()?
            .remove((lease.touched_at_ms, id))
            .ctx("delete lease index")?;
        self.remove_orphans([(lease.touched_at_ms, id)])
    }

    pub(in crate::backend::embedded) fn reclaim(
        &mut self,
        min_idle_ms: u64,
        count: usize,
        now: u64,
    ) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let mut out = Vec::new();
        let mut dead_lettered = Vec::new();
        let mut cancelled = Vec::new();
        // Claims this call made are re-indexed at (now, id), possibly ahead of
        // the scan: skip them, and resume each scan after the last key seen.
        let mut handed: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut after: Option<(u64, u64)> = None;
        let any_paused = !self.paused()?.is_empty().ctx("read paused")?;
        while out.len() < count {
            // The next stale item is the smaller of the oldest idle claim and
            // the oldest orphan of an earlier open.
            let mut by_time = None;
            let lower = match after {
                Some(k) => Bound::Excluded(k),
                None => Bound::Unbounded,
            };
            for entry in self
                .pending_by_time()?
                .range::<(u64, u64)>((lower, Bound::Unbounded))
                .ctx("scan lease index")?
            {
                let key = entry.ctx("scan lease index")?.0.value();
                if now.saturating_sub(key.0) < min_idle_ms {
                    break;
                }
                if !handed.contains(&key.1) {
                    by_time = Some(key);
                    break;
                }
            }
            let orphan = self
                .orphans()?
                .first()
                .ctx("read orphans")?
                .map(|(k, _)| k.value());
            let next = match (by_time, orphan) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if Some(next) == by_time {
                after = Some(next);
            }
            let id = next.1;
            let Some(lease) = self.lease(id)? else {
                // An index entry without a lease: drop the stray entry.
                self.pending_by_time_mut()?
                    .remove(next)
                    .ctx("delete stray lease index")?;
                self.orphans_mut()?
                    .remove(next)
                    .ctx("delete stray orphan")?;
                continue;
            };
            // SPEC 3, Cancelling: a stale claim of a cancelled item ends
            // it; it never runs again.
            if lease.cancelling {
                self.end_marked(id, &lease, now)?;
                cancelled.push(Receipt {
                    id,
                    delivery: lease.deliveries,
                    lease: lease.lease,
                });
                continue;
            }
            self.remove_pending(id, &lease, now)?;
            let rec = self.keep_deliveries(id, &lease)?;
            if rec.deliveries >= self.limits.max_deliveries {
                self.bury(id, MAX_DELIVERIES_REASON, now)?;
                dead_lettered.push(Receipt {
                    id,
                    delivery: rec.deliveries,
                    lease: lease.lease,
                });
                continue;
            }
            // SPEC 3, Crash recovery: an item of a paused flow is parked
            // (deliveries unchanged, not counted), never handed out.
            if any_paused && self.is_paused(&rec.flow)? {
                self.park_id(&rec.flow, id)?;
                continue;
            }
            let lane = codec::lane_from_u8(lease.lane, format_args!("pending[{id}]"))?;
            handed.insert(id);
            out.push(self.hand_out(id, lane, now)?);
        }
        Ok(Reclaimed {
            claimed: out,
            dead_lettered,
            cancelled,
        })
    }

    /// SPEC 3, Cancelling: end pending item `r.id` as cancelled if `r`
    /// holds its lease and the item is marked; false, and nothing
    /// written, otherwise (the holder's call that found the mark is
    /// followed by this one, from the handle).
    pub(in crate::backend::embedded) fn end_cancelled(
        &mut self,
        r: &Receipt,
        now: u64,
    ) -> Result<bool> {
        match self.lease(r.id)? {
            Some(l) if l.lease == r.lease && l.cancelling => {
                self.end_marked(r.id, &l, now)?;
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    /// End marked pending item `id` (under `lease`): out of pending, its
    /// record and payload gone, its outcome cancelled.
    fn end_marked(&mut self, id: u64, lease: &LeaseRecord, now: u64) -> Result<()> {
        self.keep_finished_pending(id, lease, None, now)?;
        self.remove_pending(id, lease, now)?;
        self.delete_item(id)?;
        self.finish(id, codec::OUTCOME_CANCELLED, Vec::new(), "", now)
    }

    /// At open: every pending item belongs to a process that is gone.
    pub(in crate::backend::embedded) fn orphan_all_pending(&mut self) -> Result<u64> {
        let mut keys = Vec::new();
        for entry in self.pending_by_time()?.iter().ctx("scan leases")? {
            let (k, _) = entry.ctx("scan leases")?;
            keys.push(k.value());
        }
        for k in &keys {
            self.orphans_mut()?.insert(*k, ()).ctx("write orphan")?;
        }
        Ok(keys.len() as u64)
    }
}
