//! Test support (feature `testing`): where every item is, by a full scan
//! of the state indexes, checked loosely (`locations`, for crash tests that
//! look for an item in two states or in none) or strictly (`audit`, for the
//! model tests), and every table as text (`dump`, for power-loss tests).
//! Both checks walk the indexes with one [`Tables::each_location`].

use std::collections::{BTreeMap, BTreeSet};

use redb::{ReadableTable, ReadableTableMetadata, TableHandle};

use super::{
    CANCELLED_KEPT, COMPLETED_KEPT, Ctx, DEFERRED_RECORDS, ITEMS, META, ORPHANS, PAYLOADS,
    REDO_AT_KEY, REDO_LOG_KEY, Tables, VERIFIED_AT_KEY,
};
use crate::backend::embedded::codec::{self, DeadRecord};
use crate::browse::ItemState;
use crate::error::{Error, Result};
use crate::item::Lane;

impl Tables<'_> {
    /// Call `at` with every (id, state) an index names, state by state:
    /// the backlog and the due lane (shared and held lanes), delayed,
    /// pending, parked and the dead letters (by their records). An id comes
    /// as often as indexes name it.
    fn each_location(&self, mut at: impl FnMut(u64, ItemState) -> Result<()>) -> Result<()> {
        for entry in self.backlog()?.iter().ctx("scan backlog")? {
            at(entry.ctx("scan backlog")?.1.value(), ItemState::Backlog)?;
        }
        for entry in self.due()?.iter().ctx("scan due")? {
            at(entry.ctx("scan due")?.1.value(), ItemState::Due)?;
        }
        for (id, lane) in self.held_items()? {
            at(id, ItemState::held(lane == Lane::Due))?;
        }
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            at(entry.ctx("scan delayed")?.0.value().1, ItemState::Delayed)?;
        }
        for entry in self.pending()?.iter().ctx("scan leases")? {
            at(entry.ctx("scan leases")?.0.value(), ItemState::Pending)?;
        }
        for entry in self.parked()?.iter().ctx("scan parked")? {
            at(entry.ctx("scan parked")?.1.value(), ItemState::Parked)?;
        }
        for (id, _) in self.dead_records()? {
            at(id, ItemState::DeadLetter)?;
        }
        Ok(())
    }

    /// SPEC 3, History: every run agrees with its header, the counters
    /// are the runs' items, each state holds at most the retention's count,
    /// its slack and one run of 64 (a trim drops whole runs), no item is kept
    /// twice, and no kept item is in a state (`located`).
    fn audit_history(&self, located: &BTreeMap<u64, ItemState>) -> Result<()> {
        let mut seen = BTreeSet::new();
        let mut kept = [0u64, 0u64];
        for (completed, _, r) in self.history_all()? {
            if !seen.insert(r.id) {
                return Err(Error::corrupt(format!("history keeps item {} twice", r.id)));
            }
            if let Some(at) = located.get(&r.id) {
                return Err(Error::corrupt(format!(
                    "finished item {} is also {at:?}",
                    r.id
                )));
            }
            kept[usize::from(completed)] += 1;
        }
        for (completed, key) in [(false, CANCELLED_KEPT), (true, COMPLETED_KEPT)] {
            let n = kept[usize::from(completed)];
            if self.counter(key, 0)? != n {
                return Err(Error::corrupt(format!(
                    "{key} is {}, the runs hold {n}",
                    self.counter(key, 0)?
                )));
            }
            let r = if completed {
                self.limits.completed_retention
            } else {
                self.limits.cancelled_retention
            };
            let bound = r.count().saturating_add(r.slack()).saturating_add(64);
            if n > bound {
                return Err(Error::corrupt(format!(
                    "history keeps {n} items of a state whose retention keeps {} (bound {bound})",
                    r.count()
                )));
            }
        }
        Ok(())
    }

    /// (item id, position) of every dead letter, oldest first.
    fn dead_records(&self) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for entry in self.dead()?.iter().ctx("scan dead letters")? {
            let (k, v) = entry.ctx("scan dead letters")?;
            let rec: DeadRecord = codec::decode(format_args!("dead[{}]", k.value()), v.value())?;
            out.push((rec.id, k.value()));
        }
        Ok(out)
    }

    /// Where every id is, by a full scan of the state indexes (test
    /// support). An id listed twice is in two states; an item record that
    /// no index names is listed with no location; an index entry naming an
    /// id without an item record is `Corrupt`.
    pub(in crate::backend::embedded) fn locations(
        &self,
    ) -> Result<BTreeMap<u64, Vec<crate::browse::ItemState>>> {
        let mut out: BTreeMap<u64, Vec<ItemState>> = BTreeMap::new();
        self.each_location(|id, at| {
            out.entry(id).or_default().push(at);
            Ok(())
        })?;
        let deferred = self.deferred_ids()?;
        for id in out.keys() {
            if self.items()?.get(*id).ctx("read item")?.is_none() {
                return Err(Error::corrupt(format!(
                    "an index names item {id}, which has no record"
                )));
            }
        }
        // A deferred delete's record is a finished item's, in no state.
        for entry in self.items()?.iter().ctx("scan items")? {
            let id = entry.ctx("scan items")?.0.value();
            if !deferred.contains(&id) {
                out.entry(id).or_default();
            }
        }
        Ok(out)
    }

    /// Test support: where every item is, by a scan of every index table,
    /// checking on the way that no id is in two states and that the indexes
    /// agree with each other and with the item records.
    pub(in crate::backend::embedded) fn audit(&self) -> Result<BTreeMap<u64, ItemState>> {
        let mut out: BTreeMap<u64, ItemState> = BTreeMap::new();
        self.each_location(|id, at| match out.insert(id, at) {
            Some(before) => Err(Error::corrupt(format!(
                "item {id} is in two states: {before:?} and {at:?}"
            ))),
            None => Ok(()),
        })?;
        // The lease index is the leases, and every orphan is a lease.
        let mut by_time = BTreeSet::new();
        for entry in self.pending()?.iter().ctx("scan leases")? {
            let (k, v) = entry.ctx("scan leases")?;
            let id = k.value();
            let (lease, _) = codec::decode_lease(format_args!("pending[{id}]"), v.value())?;
            by_time.insert((lease.touched_at_ms, id));
        }
        let mut indexed = BTreeSet::new();
        for entry in self.pending_by_time()?.iter().ctx("scan lease index")? {
            indexed.insert(entry.ctx("scan lease index")?.0.value());
        }
        if indexed != by_time {
            return Err(Error::corrupt(format!(
                "lease index {indexed:?} disagrees with the leases {by_time:?}"
            )));
        }
        for entry in self.orphans()?.iter().ctx("scan orphans")? {
            let k = entry.ctx("scan orphans")?.0.value();
            if !by_time.contains(&k) {
                return Err(Error::corrupt(format!("orphan {k:?} has no lease")));
            }
        }
        // The dead-letter index is the dead letters (each named once above).
        let dead_seqs: BTreeMap<u64, u64> = self.dead_records()?.into_iter().collect();
        for entry in self.dead_by_id()?.iter().ctx("scan dead letter index")? {
            let (k, v) = entry.ctx("scan dead letter index")?;
            if dead_seqs.get(&k.value()) != Some(&v.value()) {
                return Err(Error::corrupt(format!(
                    "dead letter index names item {} at {}, the dead letters disagree",
                    k.value(),
                    v.value()
                )));
            }
        }
        if dead_seqs.len() as u64 != self.dead_by_id()?.len().ctx("count dead letters")? {
            return Err(Error::corrupt("a dead letter is missing from its index"));
        }
        self.audit_history(&out)?;
        let mut records = BTreeSet::new();
        for entry in self.items()?.iter().ctx("scan items")? {
            records.insert(entry.ctx("scan items")?.0.value());
        }
        // Every deferred delete names a record, of an item in no state.
        let deferred = self.deferred_ids()?;
        if let Some(id) = deferred.difference(&records).next() {
            return Err(Error::corrupt(format!(
                "deferred delete {id} names no item record"
            )));
        }
        if deferred.len() as u64 != self.counter(DEFERRED_RECORDS, 0)? {
            return Err(Error::corrupt(format!(
                "{} deferred deletes, the counter says {}",
                deferred.len(),
                self.counter(DEFERRED_RECORDS, 0)?
            )));
        }
        let live: BTreeSet<u64> = records.difference(&deferred).copied().collect();
        let located: BTreeSet<u64> = out.keys().copied().collect();
        if live != located {
            return Err(Error::corrupt(format!(
                "item records {live:?} and located items {located:?} differ"
            )));
        }
        for entry in self.payloads()?.iter().ctx("scan payloads")? {
            let id = entry.ctx("scan payloads")?.0.value();
            if !records.contains(&id) {
                return Err(Error::corrupt(format!("payload {id} has no item record")));
            }
        }
        Ok(out)
    }

    /// Every table's entries as text, table by table (test support):
    /// two files hold the same queue state exactly when their dumps are
    /// equal. `orphans` is left out: each open rewrites it from `pending`.
    /// The records of deferred deletes are left out of `items` and
    /// `payloads` (the `deferred` table names them), and so is their count.
    pub(in crate::backend::embedded) fn dump(&self) -> Result<BTreeMap<String, Vec<String>>> {
        let mut out = self.dump_all()?;
        out.remove(ORPHANS.name());
        // The redo log's tag and offset differ between two files of one
        // state (they depend on when each checkpointed): left out.
        if let Some(meta) = out.get_mut(META.name()) {
            meta.retain(|r| {
                !r.starts_with(&format!("{REDO_LOG_KEY:?} ="))
                    && !r.starts_with(&format!("{REDO_AT_KEY:?} ="))
                    && !r.starts_with(&format!("{DEFERRED_RECORDS:?} ="))
                    && !r.starts_with(&format!("{VERIFIED_AT_KEY:?} ="))
            });
        }
        // Deferred deletes are finished items whose records wait for a
        // sweep (SPEC 6, schema 4): their rows are left out of `items` and
        // `payloads`, and the `deferred` table names them.
        let deferred = self.deferred_ids()?;
        for table in [ITEMS.name(), PAYLOADS.name()] {
            if let Some(rows) = out.get_mut(table) {
                rows.retain(|r| {
                    r.split_once(" = ")
                        .and_then(|(k, _)| k.parse::<u64>().ok())
                        .is_none_or(|id| !deferred.contains(&id))
                });
            }
        }
        Ok(out)
    }
}
