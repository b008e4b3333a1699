//! Deferred deletes (SPEC 6, schema 4; docs/DESIGN.md, "Deferred
//! deletes"): the item records of an `ack_batch` whose ids lie far apart
//! stay in `items` for a while, named in `deferred`, and are deleted later
//! in groups.
//!
//! A claim over priority tiers takes ids in rank order, not id order (ten
//! tiers mixed: every tenth id). Deleting each of those records at once
//! rebuilt a leaf of `items` per record (about 9 400 instructions each, and
//! one more dirty page for the next checkpoint), where a FIFO batch
//! rebuilds one leaf per dozen records. Deferred, the ids of a batch set
//! bits in a few buckets of 64 ids; a bucket is swept (its records deleted
//! in one range pass, which rebuilds each leaf once) when 7/8 of its ids
//! wait, by which time the later tiers' acks have made the bucket's leaves
//! nearly all finished records. A batch of dense ids sweeps the buckets of
//! its range as it deletes its own records there.
//!
//! A deferred record belongs to no state: no index names it, so claims,
//! lists and counts never meet it. The readers that look at `items` by id
//! alone (`find`, store and forward, the test audits) ask
//! [`Tables::is_deferred`]. The file holds at most
//! `max(DEFERRED_FLOOR, PER_LIVE * live records)` deferred records: past
//! that, the lowest buckets are swept whatever their count. `compact`
//! sweeps them all.

#[cfg(feature = "testing")]
use std::collections::BTreeSet;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, DEFERRED_RECORDS, Tables};
use crate::error::Result;

/// Ids per bucket of `deferred`: one bit each in a `u64`.
const BUCKET_IDS: u64 = 64;
/// A bucket is swept once this many of its ids wait (7/8 of it): its
/// leaves are then nearly all finished records, so the range pass deletes
/// whole leaves or most of each (at 32 it visited two records per delete).
const SWEEP_AT: u32 = 56;
/// Deferred records a file may hold whatever its live records.
const DEFERRED_FLOOR: u64 = 4096;
/// Deferred records a file may hold per live record. A drain over ten
/// tiers has four deferred records per live one at 80% done; at 1 the
/// bound swept buckets half full from 50% done on, at 8% more instructions
/// per claim + ack round.
const PER_LIVE: u64 = 4;

/// The ids a bucket's bits stand for, ascending.
fn ids_of(bucket: u64, bits: u64) -> impl Iterator<Item = u64> {
    (0..BUCKET_IDS)
        .filter(move |b| (bits >> b) & 1 == 1)
        .map(move |b| bucket * BUCKET_IDS + b)
}

impl Tables<'_> {
    /// Leave the records (and payload rows) of the finished items `ids`
    /// (ascending, each with a record, none deferred already) for a later
    /// sweep; sweep every bucket that reaches [`SWEEP_AT`], and the lowest
    /// buckets while the file holds more deferred records than its bound.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn defer_deletes(&mut self, ids: &[u64]) -> Result<()> {
        let mut rest = ids;
        while let Some(&first) = rest.first() {
            let bucket = first / BUCKET_IDS;
            let n = rest
                .iter()
                .take_while(|&&id| id / BUCKET_IDS == bucket)
                .count();
            let (these, after) = rest.split_at(n);
            rest = after;
            let bits = these
                .iter()
                .fold(0u64, |acc, id| acc | 1 << (id % BUCKET_IDS));
            let old = self
                .deferred()?
                .get(bucket)
                .ctx("read deferred deletes")?
                .map_or(0, |v| v.value());
            let new = old | bits;
            if new.count_ones() >= SWEEP_AT {
                if old != 0 {
                    self.deferred_mut()?
                        .remove(bucket)
                        .ctx("delete deferred deletes")?;
                }
                // The batch's own ids were never counted.
                self.sweep(bucket, new, old)?;
            } else {
                self.deferred_mut()?
                    .insert(bucket, new)
                    .ctx("write deferred deletes")?;
                let waiting = self.counter(DEFERRED_RECORDS, 0)?;
                let added = u64::from(new.count_ones() - old.count_ones());
                self.set_counter(DEFERRED_RECORDS, waiting + added);
            }
        }
        self.bound_deferred()
    }

    /// Sweep the lowest buckets while the file holds more deferred records
    /// than `max(DEFERRED_FLOOR, PER_LIVE * live records)`. Every
    /// `ack_batch` calls it (a batch of dense ids too, whose eager deletes
    /// lower the live count), so the bound holds from one batch to the
    /// next.
    ///
    /// # Errors
    ///
    /// Storage failures.
    fn bound_deferred(&mut self) -> Result<()> {
        let waiting = self.counter(DEFERRED_RECORDS, 0)?;
        if waiting <= DEFERRED_FLOOR {
            return Ok(());
        }
        let records = self.items()?.len().ctx("count items")?;
        let live = records.saturating_sub(waiting);
        self.sweep_lowest(DEFERRED_FLOOR.max(PER_LIVE.saturating_mul(live)))
    }

    /// After an `ack_batch` of dense ids, which has just deleted its
    /// records in `lo..=hi`: sweep every bucket that shares ids with that
    /// range (its leaves are being rebuilt already, and a bucket whose
    /// other ids go by FIFO acks, one item in five at a higher tier, say,
    /// would otherwise never fill up), then keep the bound.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn sweep_deferred_in(&mut self, lo: u64, hi: u64) -> Result<()> {
        if self.counter(DEFERRED_RECORDS, 0)? == 0 {
            return Ok(());
        }
        let mut found = Vec::new();
        for entry in self
            .deferred()?
            .range(lo / BUCKET_IDS..=hi / BUCKET_IDS)
            .ctx("read deferred deletes")?
        {
            let (k, v) = entry.ctx("read deferred deletes")?;
            found.push((k.value(), v.value()));
        }
        for (bucket, bits) in found {
            self.deferred_mut()?
                .remove(bucket)
                .ctx("delete deferred deletes")?;
            self.sweep(bucket, bits, bits)?;
        }
        self.bound_deferred()
    }

    /// Sweep every bucket (`compact`, which gives their space back).
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(in crate::backend::embedded) fn sweep_all_deferred(&mut self) -> Result<()> {
        self.sweep_lowest(0)
    }

    /// Sweep the lowest buckets while more than `bound` records wait.
    fn sweep_lowest(&mut self, bound: u64) -> Result<()> {
        while self.counter(DEFERRED_RECORDS, 0)? > bound {
            let popped = self
                .deferred_mut()?
                .pop_first()
                .ctx("read deferred deletes")?
                .map(|(k, v)| (k.value(), v.value()));
            let Some((bucket, bits)) = popped else {
                break;
            };
            self.sweep(bucket, bits, bits)?;
        }
        Ok(())
    }

    /// Delete the records and payload rows of a bucket's ids `bits` (its
    /// entry in `deferred` already gone), of which `counted` were in the
    /// count of deferred records: one range pass over the bucket's 64 ids,
    /// which rebuilds each leaf once for all its deletes (a `remove` each
    /// rebuilt or merged a leaf per id).
    fn sweep(&mut self, bucket: u64, bits: u64, counted: u64) -> Result<()> {
        if counted != 0 {
            let waiting = self.counter(DEFERRED_RECORDS, 0)?;
            let left = waiting.saturating_sub(u64::from(counted.count_ones()));
            self.set_counter(DEFERRED_RECORDS, left);
        }
        let lo = bucket * BUCKET_IDS;
        let hi = lo + (BUCKET_IDS - 1);
        let keep = |id: u64| (bits >> (id % BUCKET_IDS)) & 1 == 0;
        self.items_mut()?
            .retain_in(lo..=hi, |id, _| keep(id))
            .ctx("delete items")?;
        self.remove_payloads(ids_of(bucket, bits))
    }

    /// Whether `id`'s record is a deferred delete: its item has finished,
    /// and the record only waits for a sweep.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn is_deferred(&self, id: u64) -> Result<bool> {
        let t = self.deferred()?;
        if t.is_empty().ctx("read deferred deletes")? {
            return Ok(false);
        }
        Ok(t.get(id / BUCKET_IDS)
            .ctx("read deferred deletes")?
            .is_some_and(|v| (v.value() >> (id % BUCKET_IDS)) & 1 == 1))
    }

    /// Every deferred id (test support: the audits and the dump).
    ///
    /// # Errors
    ///
    /// Storage failures.
    #[cfg(feature = "testing")]
    pub(super) fn deferred_ids(&self) -> Result<BTreeSet<u64>> {
        let mut out = BTreeSet::new();
        for entry in self.deferred()?.iter().ctx("scan deferred deletes")? {
            let (k, v) = entry.ctx("scan deferred deletes")?;
            out.extend(ids_of(k.value(), v.value()));
        }
        Ok(out)
    }
}
