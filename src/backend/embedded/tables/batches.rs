//! The batched forms of an add's writes, a claim's hand-outs and
//! `ack_batch` (SPEC 3): the same state moves as one item at a time, with
//! the deletions of each index done in one pass over the batch's key range
//! and the new records, lane entries, leases and outcomes appended in one
//! run per table.
//!
//! A redb `remove` or `insert` rebuilds the leaf it changes, about 8 000
//! instructions each; an ack made six of them (lease, lease index, orphan,
//! item, payload, outcome) and two inserts. Over a range, `retain_in`
//! rebuilds each leaf once for all the entries it drops, and a cursor at
//! the end of a table buffers a run of appends. A batch whose keys are
//! spread (ids far apart, leases from different claims) takes the one-by-one
//! path for that index, so no pass scans much more than the batch.

use std::collections::BTreeMap;
use std::ops::Bound;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, ItemRecord, LeaseRecord};
use crate::error::Result;
use crate::item::{Claimed, Lane, Receipt};

/// Below this many ids the one-by-one path is as cheap (2, so that the
/// model tests, whose batches hold up to 4, run the batched paths).
const BATCHED_FROM: usize = 2;
/// A range pass is taken when the batch's keys span at most this many
/// times as many ids as the batch holds.
const SPREAD: u64 = 4;

/// The ids an ack run stands for, from its first (the bits of a `u64`).
pub(super) const RUN_IDS: u64 = 64;

/// Write `rows` into `table`: appended in one run through a cursor at the
/// table's end when they are ascending and all sort after its last key (new
/// ids, a FIFO lane), else one insert each.
///
/// The rows' order is checked on their typed keys: every key type written
/// here (ids, `(rank, seq)`, `(time, id)`) orders as redb orders its bytes,
/// and serialising a tuple key to compare its bytes allocated twice per
/// row, 7% of an `add_batch`. Only the table's last key is compared as
/// bytes.
fn put_run<'r, K, V>(
    table: &mut redb::Table<'_, K, V>,
    rows: &[(K::SelfType<'r>, V::SelfType<'r>)],
    what: &str,
) -> Result<()>
where
    K: redb::Key + 'static,
    V: redb::Value + 'static,
    K::SelfType<'r>: Ord,
{
    use std::cmp::Ordering::Less;
    let Some((first, _)) = rows.first() else {
        return Ok(());
    };
    // Short-circuit: a single row (or a run out of order) never pays for
    // the look at the table's last key.
    let appends = rows.len() >= BATCHED_FROM
        && rows.windows(2).all(|w| w[0].0 < w[1].0)
        && match table.last().ctx(what)? {
            Some((k, _)) => {
                K::compare(
                    K::as_bytes(&k.value()).as_ref(),
                    K::as_bytes(first).as_ref(),
                ) == Less
            }
            None => true,
        };
    if appends {
        let mut cursor = table
            .upper_bound_mut(Bound::<K::SelfType<'r>>::Unbounded)
            .ctx(what)?;
        for (k, v) in rows {
            cursor.insert_before(k, v).ctx(what)?;
        }
        cursor.close().ctx(what)?;
    } else {
        for (k, v) in rows {
            table.insert(k, v).ctx(what)?;
        }
    }
    Ok(())
}

/// [`put_run`] for a table of encoded records keyed by id.
fn put_encoded(
    table: &mut redb::Table<'_, u64, &'static [u8]>,
    rows: &[(u64, Vec<u8>)],
    what: &str,
) -> Result<()> {
    let rows: Vec<(u64, &[u8])> = rows.iter().map(|(id, b)| (*id, b.as_slice())).collect();
    put_run(table, &rows, what)
}

impl Tables<'_> {
    /// Write the item records of an add (`(id, encoded record)`).
    pub(super) fn put_records(&mut self, rows: &[(u64, Vec<u8>)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        put_encoded(self.items_mut()?, rows, "write items")
    }

    /// Write the entries `(key, id)` of `lane` (the backlog or the due lane).
    pub(super) fn put_ready(&mut self, lane: Lane, rows: &[((i64, u64), u64)]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let table = if lane == Lane::Due {
            self.due_mut()?
        } else {
            self.backlog_mut()?
        };
        put_run(table, rows, "write ready lane")
    }

    /// Hand out `ids` (taken from `lane`, in order), as `hand_out` does one
    /// at a time, the leases and lease index entries written last (a FIFO
    /// claim appends them in one run each).
    pub(super) fn hand_out_all(
        &mut self,
        ids: &[u64],
        lane: Lane,
        now: u64,
    ) -> Result<Vec<Claimed>> {
        // An empty claim writes nothing (SPEC 6, Idle); one item needs no run.
        if ids.len() < BATCHED_FROM {
            return ids.iter().map(|&id| self.hand_out(id, lane, now)).collect();
        }
        self.hand_out_while(ids, lane, now, |_, _| Ok(true))
    }

    /// [`Tables::hand_out_all`] for the leading `ids` whose records `may`
    /// lets run, stopping at the first it does not (that item and the rest
    /// are left as they are). Each record is read once, for the test and
    /// the hand-out.
    pub(super) fn hand_out_while(
        &mut self,
        ids: &[u64],
        lane: Lane,
        now: u64,
        mut may: impl FnMut(&Self, &ItemRecord) -> Result<bool>,
    ) -> Result<Vec<Claimed>> {
        let mut out = Vec::with_capacity(ids.len());
        let mut leases = Vec::with_capacity(ids.len());
        for (&id, rec) in ids.iter().zip(self.records_of(ids)?) {
            if !may(self, &rec)? {
                break;
            }
            let (claimed, lease) = self.lease_out_record(id, rec, lane, now)?;
            out.push(claimed);
            leases.push((id, codec::encode_lease(&lease)?));
        }
        // Nothing handed out writes nothing (SPEC 6, Idle).
        if leases.is_empty() {
            return Ok(out);
        }
        put_encoded(self.pending_mut()?, &leases, "write leases")?;
        let index: Vec<((u64, u64), ())> = leases.iter().map(|&(id, _)| ((now, id), ())).collect();
        put_run(self.pending_by_time_mut()?, &index, "write lease index")?;
        Ok(out)
    }

    /// The records of `ids`, in their order. Ascending ids that lie close
    /// together (a FIFO claim) are read in one pass over their range, at
    /// a few hundred instructions a record, where a lookup each descended
    /// the tree at about 1 900; others are looked up one by one.
    ///
    /// # Errors
    ///
    /// `Corrupt` if a record is missing; `Decode` for an unreadable one.
    fn records_of(&self, ids: &[u64]) -> Result<Vec<ItemRecord>> {
        let (Some(&lo), Some(&hi)) = (ids.first(), ids.last()) else {
            return Ok(Vec::new());
        };
        let ascending = ids.windows(2).all(|w| w[0] < w[1]);
        if !ascending || hi - lo >= (ids.len() as u64).saturating_mul(SPREAD) {
            return ids.iter().map(|&id| self.record(id)).collect();
        }
        let mut out = Vec::with_capacity(ids.len());
        let mut want = ids.iter().copied().peekable();
        for entry in self.items()?.range(lo..=hi).ctx("read items")? {
            let (k, v) = entry.ctx("read item")?;
            let id = k.value();
            if want.peek() == Some(&id) {
                want.next();
                // The record's name is formatted only for an error.
                out.push(codec::decode_item(format_args!("items[{id}]"), v.value())?);
            }
        }
        match want.next() {
            Some(id) => Err(super::records::missing_record(id)),
            None => Ok(out),
        }
    }

    /// `ack_batch` for a batch the range passes suit: at least
    /// [`BATCHED_FROM`] receipts. Returns `None` when it does not suit.
    /// Same results as acking each receipt in turn: a receipt whose lease
    /// is not current (or whose item an earlier receipt of the batch acked)
    /// is not counted. With flow limits, each flow's pending count (SPEC 3,
    /// Flow limits) goes down once by its items in the batch.
    pub(super) fn ack_batched(&mut self, receipts: &[Receipt], now: u64) -> Result<Option<u64>> {
        if receipts.len() < BATCHED_FROM {
            return Ok(None);
        }
        // Reads first: which receipts hold their lease.
        let mut acked: Vec<(u64, LeaseRecord)> = Vec::with_capacity(receipts.len());
        for r in receipts {
            if let Some(lease) = self.lease(r.id)?
                && lease.lease == r.lease
            {
                if lease.cancelling {
                    // SPEC 3, Cancelling: the receipt-by-receipt path ends
                    // it (nothing is written before this point).
                    return Ok(None);
                }
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
        // SPEC 3, History: the acked items are kept before their records
        // go; of one batch only the newest `count` (the highest ids) can
        // stay. Their records are read in one pass, as a claim reads them.
        let retention = self.limits.completed_retention;
        if retention.keeps() {
            let keep = usize::try_from(retention.count()).unwrap_or(usize::MAX);
            let kept = &acked[acked.len().saturating_sub(keep)..];
            let kept_ids: Vec<u64> = kept.iter().map(|(id, _)| *id).collect();
            let mut records = Vec::with_capacity(kept.len());
            for ((id, lease), mut rec) in kept.iter().zip(self.records_of(&kept_ids)?) {
                rec.deliveries = lease.deliveries;
                records.push(self.history_record(
                    *id,
                    rec,
                    Some(lease.claimed_at_ms),
                    Some(&[]),
                )?);
            }
            self.keep_many(true, &records, now)?;
        } else {
            self.trim_history(true, now)?;
        }
        // With flow limits, how many of the batch each flow had, read from
        // the item records as they are deleted.
        let limited = self.has_limits()?;
        let mut left: BTreeMap<String, u64> = BTreeMap::new();
        let mut flow_err = None;
        let mut count_flow = |bytes: &[u8]| {
            if limited {
                match codec::decode_item_flow("items", bytes) {
                    Ok(flow) => *left.entry(flow).or_default() += 1,
                    Err(e) => flow_err = Some(e),
                }
            }
        };
        let gone = |id: u64| ids.binary_search(&id).is_ok();
        let dense = hi - lo < n.saturating_mul(SPREAD);
        // The leases are few beside the items: however far apart the ids
        // (a claim over priority tiers takes every tenth), a pass over the
        // batch's range of `pending` meets at most every pending item.
        let few_pending = self.pending()?.len().ctx("count leases")? <= n.saturating_mul(SPREAD);
        let one_claim = acked
            .iter()
            .all(|(_, l)| l.touched_at_ms == first.touched_at_ms);

        if dense || few_pending {
            self.pending_mut()?
                .retain_in(lo..=hi, |id, _| !gone(id))
                .ctx("delete leases")?;
        } else {
            for &id in &ids {
                self.pending_mut()?.remove(id).ctx("delete lease")?;
            }
        }
        if dense {
            self.items_mut()?
                .retain_in(lo..=hi, |id, v| {
                    let keep = !gone(id);
                    if !keep {
                        count_flow(v);
                    }
                    keep
                })
                .ctx("delete items")?;
        } else {
            // Ids far apart (a claim over priority tiers): the records are
            // deleted later, in groups (module `deferred`).
            if limited {
                for &id in &ids {
                    if let Some(v) = self.items()?.get(id).ctx("read item")? {
                        count_flow(v.value());
                    }
                }
            }
        }
        if let Some(e) = flow_err {
            return Err(e);
        }
        // One claim's lease index entries share its time: the range of
        // (time, id) holds only that claim's pending items.
        if (dense || few_pending) && one_claim {
            let t = first.touched_at_ms;
            self.pending_by_time_mut()?
                .retain_in((t, lo)..=(t, hi), |(_, id), ()| !gone(id))
                .ctx("delete lease index")?;
        } else {
            for (id, l) in &acked {
                self.pending_by_time_mut()?
                    .remove((l.touched_at_ms, *id))
                    .ctx("delete lease index")?;
            }
        }
        for (flow, k) in &left {
            self.note_pending(flow, false, *k, now)?;
        }
        self.remove_orphans(acked.iter().map(|(id, l)| (l.touched_at_ms, *id)))?;
        if dense {
            self.remove_payloads(ids.iter().copied())?;
            self.sweep_deferred_in(lo, hi)?;
        } else {
            self.defer_deletes(&ids)?;
        }
        self.append_outcomes(&ids, now)?;
        Ok(Some(n))
    }

    /// The outcomes of acks without a result of `ids` (ascending): ack
    /// runs of up to [`RUN_IDS`] ids from each run's first, one row and
    /// one expiry entry per run (SPEC 6, schema 3), where one outcome row
    /// and one expiry entry per id cost two inserts per ack. An earlier
    /// outcome of an acked id (a dead letter, then a redrive) is deleted,
    /// so that the run answers for it; ids past the last kept outcome
    /// cannot have one and are not looked up.
    pub(super) fn append_outcomes(&mut self, ids: &[u64], now: u64) -> Result<()> {
        let last = self
            .outcomes()?
            .last()
            .ctx("read outcomes")?
            .map(|(k, _)| k.value());
        if let Some(last) = last {
            for &id in ids.iter().take_while(|&&id| id <= last) {
                self.forget_outcome(id)?;
            }
        }
        if self.limits.result_ttl_ms == 0 {
            // No outcome is kept, so their progress and chunks go at once
            // (SPEC 3, Outcomes).
            return self.forget_progress_of(ids);
        }
        let expires_at_ms = now.saturating_add(self.limits.result_ttl_ms);
        let mut runs: Vec<(u64, (u64, u64, u64))> = Vec::new();
        for &id in ids {
            match runs.last_mut() {
                Some((first, (bits, _, _))) if id - *first < RUN_IDS => {
                    *bits |= 1 << (id - *first);
                }
                _ => runs.push((id, (1, now, expires_at_ms))),
            }
        }
        put_run(self.ack_runs_mut()?, &runs, "write ack runs")?;
        let expiry: Vec<((u64, u64), ())> = runs
            .iter()
            .map(|&(first, _)| ((expires_at_ms, first), ()))
            .collect();
        put_run(self.ack_run_expiry_mut()?, &expiry, "write ack run expiry")?;
        self.floors.ack_runs = self.floors.ack_runs.min(expires_at_ms);
        Ok(())
    }
}
