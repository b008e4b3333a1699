//! The batched forms of a claim's hand-outs and of `ack_batch` (SPEC 3):
//! the same state moves as one item at a time, with the deletions of each
//! index done in one pass over the batch's key range and the new leases
//! and outcomes appended in one run.
//!
//! A redb `remove` or `insert` rebuilds the leaf it changes, about 8 000
//! instructions each; an ack made six of them (lease, lease index, orphan,
//! item, payload, outcome) and two inserts. Over a range, `retain_in`
//! rebuilds each leaf once for all the entries it drops, and a cursor at
//! the end of a table buffers a run of appends. A batch whose keys are
//! spread (ids far apart, leases from different claims) takes the one-by-one
//! path for that index, so no pass scans much more than the batch.

use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, LeaseRecord, OutcomeRecord};
use crate::error::Result;
use crate::item::{Claimed, Lane, Receipt};

/// Below this many ids the one-by-one path is as cheap (2, so that the
/// model tests, whose batches hold up to 4, run the batched paths).
const BATCHED_FROM: usize = 2;
/// A range pass is taken when the batch's keys span at most this many
/// times as many ids as the batch holds.
const SPREAD: u64 = 4;

impl Tables<'_> {
    /// Hand out `ids` (taken from `lane`, in order), as `hand_out` does one
    /// at a time: a run of ids past the last pending one, ascending (a
    /// FIFO claim), has its leases and lease index entries appended in one
    /// run each.
    pub(super) fn hand_out_all(
        &mut self,
        ids: &[u64],
        lane: Lane,
        now: u64,
    ) -> Result<Vec<Claimed>> {
        let last = self
            .pending()?
            .last()
            .ctx("read leases")?
            .map(|(k, _)| k.value());
        let ascending = ids.windows(2).all(|w| w[0] < w[1]);
        let appends = ids.len() >= BATCHED_FROM
            && ascending
            && ids
                .first()
                .is_some_and(|&first| last.is_none_or(|l| first > l));
        if !appends {
            return ids.iter().map(|&id| self.hand_out(id, lane, now)).collect();
        }
        let after_last = match self.pending_by_time()?.last().ctx("read lease index")? {
            Some((k, _)) => ids.first().is_some_and(|&first| k.value() < (now, first)),
            None => true,
        };
        let mut out = Vec::with_capacity(ids.len());
        let mut leases = Vec::with_capacity(ids.len());
        for &id in ids {
            let (claimed, lease) = self.lease_out(id, lane, now)?;
            out.push(claimed);
            leases.push(codec::encode(&lease)?);
        }
        {
            let mut cursor = self
                .pending_mut()?
                .upper_bound_mut(Bound::<u64>::Unbounded)
                .ctx("write leases")?;
            for (&id, bytes) in ids.iter().zip(&leases) {
                cursor
                    .insert_before(id, bytes.as_slice())
                    .ctx("write lease")?;
            }
            cursor.close().ctx("write leases")?;
        }
        let index = self.pending_by_time_mut()?;
        if after_last {
            let mut cursor = index
                .upper_bound_mut(Bound::<(u64, u64)>::Unbounded)
                .ctx("write lease index")?;
            for &id in ids {
                cursor
                    .insert_before((now, id), ())
                    .ctx("write lease index")?;
            }
            cursor.close().ctx("write lease index")?;
        } else {
            for &id in ids {
                index.insert((now, id), ()).ctx("write lease index")?;
            }
        }
        Ok(out)
    }

    /// `ack_batch` for a batch the range passes suit: at least
    /// [`BATCHED_FROM`] receipts and no flow limits (whose pending counts
    /// take the one-by-one path). Returns `None` when they do not suit.
    /// Same results as acking each receipt in turn: a receipt whose lease
    /// is not current (or whose item an earlier receipt of the batch acked)
    /// is not counted.
    pub(super) fn ack_batched(&mut self, receipts: &[Receipt], now: u64) -> Result<Option<u64>> {
        if receipts.len() < BATCHED_FROM || self.has_limits()? {
            return Ok(None);
        }
        // Reads first: which receipts hold their lease.
        let mut acked: Vec<(u64, LeaseRecord)> = Vec::with_capacity(receipts.len());
        for r in receipts {
            if let Some(lease) = self.lease(r.id)?
                && lease.lease == r.lease
            {
                acked.push((r.id, lease));
            }
        }
        acked.sort_unstable_by_key(|(id, _)| *id);
        acked.dedup_by_key(|(id, _)| *id);
        let Some((&(lo, first), &(hi, _))) = acked.first().zip(acked.last()) else {
            return Ok(Some(0));
        };
        let n = acked.len() as u64;
        let ids: Vec<u64> = acked.iter().map(|(id, _)| *id).collect();
        let gone = |id: u64| ids.binary_search(&id).is_ok();
        let dense = hi - lo < n.saturating_mul(SPREAD);
        let one_claim = acked
            .iter()
            .all(|(_, l)| l.claimed_at_ms == first.claimed_at_ms);

        if dense {
            self.pending_mut()?
                .retain_in(lo..=hi, |id, _| !gone(id))
                .ctx("delete leases")?;
            self.items_mut()?
                .retain_in(lo..=hi, |id, _| !gone(id))
                .ctx("delete items")?;
        } else {
            for &id in &ids {
                self.pending_mut()?.remove(id).ctx("delete lease")?;
                self.items_mut()?.remove(id).ctx("delete item")?;
            }
        }
        if dense && one_claim {
            let t = first.claimed_at_ms;
            self.pending_by_time_mut()?
                .retain_in((t, lo)..=(t, hi), |(_, id), ()| !gone(id))
                .ctx("delete lease index")?;
        } else {
            for (id, l) in &acked {
                self.pending_by_time_mut()?
                    .remove((l.claimed_at_ms, *id))
                    .ctx("delete lease index")?;
            }
        }
        if !self.orphans()?.is_empty().ctx("read orphans")? {
            for (id, l) in &acked {
                self.orphans_mut()?
                    .remove((l.claimed_at_ms, *id))
                    .ctx("delete orphan")?;
            }
        }
        if !self.payloads()?.is_empty().ctx("read payloads")? {
            for &id in &ids {
                self.payloads_mut()?.remove(id).ctx("delete payload")?;
            }
        }
        self.append_outcomes(&ids, now)?;
        Ok(Some(n))
    }

    /// The outcomes of acks without a result of `ids` (ascending), as
    /// `finish` writes them: ids past the last kept outcome cannot have an
    /// earlier one to replace and are appended in one run; the others go
    /// through `finish`.
    fn append_outcomes(&mut self, ids: &[u64], now: u64) -> Result<()> {
        if self.limits.result_ttl_ms == 0 {
            for &id in ids {
                self.forget_outcome(id)?;
            }
            return Ok(());
        }
        let last = self
            .outcomes()?
            .last()
            .ctx("read outcomes")?
            .map(|(k, _)| k.value());
        let split = match last {
            Some(last) => ids.partition_point(|&id| id <= last),
            None => 0,
        };
        let (old, new) = ids.split_at(split);
        for &id in old {
            self.finish(id, false, Vec::new(), "", now)?;
        }
        if new.is_empty() {
            return Ok(());
        }
        let expires_at_ms = now.saturating_add(self.limits.result_ttl_ms);
        let bytes = codec::encode(&OutcomeRecord {
            dead: false,
            result: Vec::new(),
            reason: String::new(),
            at_ms: now,
            expires_at_ms,
        })?;
        {
            let mut cursor = self
                .outcomes_mut()?
                .upper_bound_mut(Bound::<u64>::Unbounded)
                .ctx("write outcomes")?;
            for &id in new {
                cursor
                    .insert_before(id, bytes.as_slice())
                    .ctx("write outcome")?;
            }
            cursor.close().ctx("write outcomes")?;
        }
        // The expiry index: after its last entry when the whole run sorts
        // there (the same expiry time for all, ids ascending).
        let after_last = match self.outcome_expiry()?.last().ctx("read outcome expiry")? {
            Some((k, _)) => k.value() < (expires_at_ms, new[0]),
            None => true,
        };
        let expiry = self.outcome_expiry_mut()?;
        if after_last {
            let mut cursor = expiry
                .upper_bound_mut(Bound::<(u64, u64)>::Unbounded)
                .ctx("write outcome expiry")?;
            for &id in new {
                cursor
                    .insert_before((expires_at_ms, id), ())
                    .ctx("write outcome expiry")?;
            }
            cursor.close().ctx("write outcome expiry")?;
        } else {
            for &id in new {
                expiry
                    .insert((expires_at_ms, id), ())
                    .ctx("write outcome expiry")?;
            }
        }
        Ok(())
    }
}
