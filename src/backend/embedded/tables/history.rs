//! SPEC 3, History (schema 8): the finished items (acked or cancelled)
//! kept by their state's retention, written and trimmed in the
//! transaction that finishes them, and read newest first.
//!
//! Each state's table holds runs: the items one commit finishes, up to
//! [`RUN_RECORDS`] a row (an `ack_batch` of 100 is two rows), keyed by
//! (finish time, first id), its value a header (how many, last id) and
//! the records. A row per item and an index beside it made an ack of 100
//! write and later delete 400 rows; claim + ack ran 27% slower than
//! keeping nothing. A run leaves whole: a trim drops the oldest runs while
//! the rest still hold the count, so the file holds at most the count,
//! the slack and one run. Runs of a whole batch of 1 000 (1 MiB of
//! payloads) took twice their size in redb's page orders: the churn
//! bench's file was 1.5x the one keeping nothing.

use redb::ReadableTable;

use super::{CANCELLED_KEPT, COMPLETED_KEPT, Ctx, Tables};
use crate::backend::embedded::codec::{self, HistoryRecord, ItemRecord, LeaseRecord};
use crate::browse::{ItemState, ListedItem};
use crate::config::Retention;
use crate::error::{Error, Result};
use crate::item::Item;

/// One run's key and header: (finish time, first id), items, last id.
type RunHead = ((u64, u64), u64, u64);

/// The most records one run row holds.
const RUN_RECORDS: usize = 64;

impl Tables<'_> {
    fn retention_of(&self, completed: bool) -> Retention {
        if completed {
            self.limits.completed_retention
        } else {
            self.limits.cancelled_retention
        }
    }

    fn kept_counter(completed: bool) -> &'static str {
        if completed {
            COMPLETED_KEPT
        } else {
            CANCELLED_KEPT
        }
    }

    /// The history record of item `id`, finishing with `rec` (its delivery
    /// count the last lease's) and its payload still in place: completed
    /// with `result`, or cancelled when `result` is `None`; `claimed_at_ms`
    /// is the claim of its last delivery.
    ///
    /// # Errors
    ///
    /// Storage failures reading a payload.
    pub(super) fn history_record(
        &self,
        id: u64,
        rec: ItemRecord,
        claimed_at_ms: Option<u64>,
        result: Option<&[u8]>,
    ) -> Result<HistoryRecord> {
        let payload = self.payload(id, &rec)?;
        Ok(HistoryRecord {
            id,
            flow: rec.flow,
            enqueued_at_ms: rec.enqueued_at_ms,
            not_before_ms: rec.not_before_ms,
            deliveries: rec.deliveries,
            priority: rec.priority,
            cost: rec.cost,
            payload,
            result: result.map(<[u8]>::to_vec),
            claimed_at_ms,
        })
    }

    /// Keep `records` (ascending ids), all finishing `now`, as one run of
    /// the completed or the cancelled state, then trim that state
    /// ([`Tables::trim_history`]).
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn keep_many(
        &mut self,
        completed: bool,
        records: &[HistoryRecord],
        now: u64,
    ) -> Result<()> {
        for run in records.chunks(RUN_RECORDS) {
            let Some(first) = run.first() else {
                continue;
            };
            let bytes = codec::encode_history_run(run)?;
            let key = (now, first.id);
            if completed {
                self.completed_mut()?
                    .insert(key, bytes.as_slice())
                    .ctx("write completed")?;
            } else {
                self.cancelled_mut()?
                    .insert(key, bytes.as_slice())
                    .ctx("write cancelled")?;
            }
        }
        if !records.is_empty() {
            let counter = Self::kept_counter(completed);
            let kept = self.counter(counter, 0)?;
            self.set_counter(counter, kept.saturating_add(records.len() as u64));
        }
        self.trim_history(completed, now)
    }

    /// Keep item `id`, finishing now with `rec` and its payload still in
    /// place, if its state's retention keeps any (see
    /// [`Tables::history_record`]); trim the state either way. Call before
    /// the item's record and payload are deleted.
    ///
    /// # Errors
    ///
    /// Storage failures; `Decode` for an unreadable record.
    pub(super) fn keep_finished(
        &mut self,
        id: u64,
        rec: ItemRecord,
        claimed_at_ms: Option<u64>,
        result: Option<&[u8]>,
        now: u64,
    ) -> Result<()> {
        let completed = result.is_some();
        if !self.retention_of(completed).keeps() {
            return self.trim_history(completed, now);
        }
        let record = self.history_record(id, rec, claimed_at_ms, result)?;
        self.keep_many(completed, &[record], now)
    }

    /// Keep the pending item `id` that `lease` held, finishing now (see
    /// [`Tables::keep_finished`]).
    ///
    /// # Errors
    ///
    /// As [`Tables::keep_finished`]; `Corrupt` for a missing record.
    pub(super) fn keep_finished_pending(
        &mut self,
        id: u64,
        lease: &LeaseRecord,
        result: Option<&[u8]>,
        now: u64,
    ) -> Result<()> {
        if !self.retention_of(result.is_some()).keeps() {
            return self.trim_history(result.is_some(), now);
        }
        let rec = self.record_leaving(id, lease)?;
        self.keep_finished(id, rec, Some(lease.claimed_at_ms), result, now)
    }

    /// The runs of one state, oldest first, with their headers.
    fn run_heads(&self, completed: bool) -> Result<Vec<RunHead>> {
        let what = "read history";
        let rows = if completed {
            self.completed()?.iter().ctx(what)?
        } else {
            self.cancelled()?.iter().ctx(what)?
        };
        let mut out = Vec::new();
        for row in rows {
            let (k, v) = row.ctx(what)?;
            let key = k.value();
            let (n, last) =
                codec::history_run_header(format_args!("history run {key:?}"), v.value())?;
            out.push((key, n, last));
        }
        Ok(out)
    }

    /// The records of run `key` of one state.
    fn run_records(&self, completed: bool, key: (u64, u64)) -> Result<Vec<HistoryRecord>> {
        let what = "read history";
        let got = if completed {
            self.completed()?.get(key).ctx(what)?
        } else {
            self.cancelled()?.get(key).ctx(what)?
        };
        match got {
            Some(v) => codec::decode_history_run(format_args!("history run {key:?}"), v.value()),
            None => Err(Error::corrupt(format!("history run {key:?} is missing"))),
        }
    }

    /// Drop the oldest runs of one state once its oldest run is past the
    /// retention's age or the state holds more than the count plus its
    /// slack (`Retention::slack`): a run past the age, or one whose items
    /// the newer runs outnumber the count without, leaves whole. Reads
    /// show at most the count and nothing past the age, so what waits for
    /// a trim is never seen.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn trim_history(&mut self, completed: bool, now: u64) -> Result<()> {
        let retention = self.retention_of(completed);
        let what = "trim history";
        let oldest = if completed {
            self.completed()?.first().ctx(what)?.map(|(k, _)| k.value())
        } else {
            self.cancelled()?.first().ctx(what)?.map(|(k, _)| k.value())
        };
        let Some((oldest_at, _)) = oldest else {
            return Ok(());
        };
        let counter = Self::kept_counter(completed);
        let mut kept = self.counter(counter, 0)?;
        if retention.alive(oldest_at, now)
            && kept <= retention.count().saturating_add(retention.slack())
        {
            return Ok(());
        }
        let mut gone = Vec::new();
        for (key, n, _) in self.run_heads(completed)? {
            if !retention.alive(key.0, now) || kept.saturating_sub(n) >= retention.count() {
                gone.push(key);
                kept = kept.saturating_sub(n);
            } else {
                break;
            }
        }
        for key in gone {
            if completed {
                self.completed_mut()?.remove(key).ctx(what)?;
            } else {
                self.cancelled_mut()?.remove(key).ctx(what)?;
            }
        }
        self.set_counter(counter, kept);
        Ok(())
    }

    /// The finished items of `state` shown at `now`, newest first (latest
    /// finish, then highest id): at most the retention's count, none past
    /// its age; `skip` positions are passed over (whole runs unread) and
    /// at most `take` items returned.
    ///
    /// # Errors
    ///
    /// Storage failures; `Decode` for an unreadable run.
    pub(super) fn history_page(
        &self,
        state: ItemState,
        now: u64,
        skip: u64,
        take: u64,
    ) -> Result<Vec<ListedItem>> {
        let completed = state == ItemState::Completed;
        let retention = self.retention_of(completed);
        let shown = if retention.keeps() {
            retention.count()
        } else {
            0
        };
        let heads = self.run_heads(completed)?;
        let mut out = Vec::new();
        let mut pos = 0u64;
        // Runs of one finish time form a group, merged by id (highest
        // first); groups come newest first.
        let mut end = heads.len();
        while end > 0 && pos < shown && (out.len() as u64) < take {
            let at = heads[end - 1].0.0;
            if !retention.alive(at, now) {
                break;
            }
            let mut start = end - 1;
            while start > 0 && heads[start - 1].0.0 == at {
                start -= 1;
            }
            let group = &heads[start..end];
            end = start;
            let n: u64 = group.iter().map(|(_, n, _)| *n).sum();
            if pos.saturating_add(n) <= skip {
                pos = pos.saturating_add(n);
                continue;
            }
            let mut records = Vec::new();
            for (key, _, _) in group {
                records.extend(self.run_records(completed, *key)?);
            }
            records.sort_unstable_by_key(|r| std::cmp::Reverse(r.id));
            for r in records {
                if pos >= shown || (out.len() as u64) >= take {
                    break;
                }
                if pos >= skip {
                    out.push(listed(r, at));
                }
                pos += 1;
            }
        }
        Ok(out)
    }

    /// How many finished items of `state` are shown at `now` (run headers
    /// only are read).
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn history_count(&self, state: ItemState, now: u64) -> Result<u64> {
        let completed = state == ItemState::Completed;
        let retention = self.retention_of(completed);
        if !retention.keeps() {
            return Ok(0);
        }
        let mut n = 0u64;
        for (key, k, _) in self.run_heads(completed)?.into_iter().rev() {
            if !retention.alive(key.0, now) {
                break;
            }
            n = n.saturating_add(k);
        }
        Ok(n.min(retention.count()))
    }

    /// SPEC 12.1: finished item `id`, while its state shows it at `now`:
    /// the runs whose ids span it are read, then its position is counted
    /// from the run headers.
    ///
    /// # Errors
    ///
    /// Storage failures; `Decode` for an unreadable run.
    pub(super) fn history_find(&self, id: u64, now: u64) -> Result<Option<ListedItem>> {
        for completed in [true, false] {
            let retention = self.retention_of(completed);
            let heads = self.run_heads(completed)?;
            for (i, &(key, _, last)) in heads.iter().enumerate() {
                if id < key.1 || id > last {
                    continue;
                }
                let Some(r) = self
                    .run_records(completed, key)?
                    .into_iter()
                    .find(|r| r.id == id)
                else {
                    continue;
                };
                if !retention.keeps() || !retention.alive(key.0, now) {
                    return Ok(None);
                }
                // Newer: the runs of later finish times, and the items of
                // this finish time with higher ids.
                let mut newer = 0u64;
                for &(k, n, _) in &heads[i + 1..] {
                    if k.0 > key.0 {
                        newer = newer.saturating_add(n);
                    }
                }
                for &(k, _, l) in &heads {
                    if k.0 == key.0 && l > id {
                        newer = newer.saturating_add(
                            self.run_records(completed, k)?
                                .iter()
                                .filter(|x| x.id > id)
                                .count() as u64,
                        );
                    }
                }
                return Ok((newer < retention.count()).then(|| listed(r, key.0)));
            }
        }
        Ok(None)
    }

    /// Every finished item kept (shown or not), by state: for the audit.
    #[cfg(feature = "testing")]
    pub(super) fn history_all(&self) -> Result<Vec<(bool, u64, HistoryRecord)>> {
        let mut out = Vec::new();
        for completed in [true, false] {
            for (key, n, last) in self.run_heads(completed)? {
                let records = self.run_records(completed, key)?;
                let ascending = records.windows(2).all(|w| w[0].id < w[1].id);
                if records.len() as u64 != n
                    || records.first().map(|r| r.id) != Some(key.1)
                    || records.last().map(|r| r.id) != Some(last)
                    || !ascending
                {
                    return Err(Error::corrupt(format!(
                        "history run {key:?} disagrees with its header"
                    )));
                }
                out.extend(records.into_iter().map(|r| (completed, key.0, r)));
            }
        }
        Ok(out)
    }
}

/// A history record finished at `at` as `list` and `find` show it.
fn listed(r: HistoryRecord, at: u64) -> ListedItem {
    ListedItem::finished(
        Item {
            id: r.id,
            flow: r.flow,
            payload: r.payload,
            enqueued_at_ms: r.enqueued_at_ms,
            not_before_ms: r.not_before_ms,
            deliveries: r.deliveries,
            priority: r.priority,
            cost: r.cost.max(1),
        },
        r.result,
        r.claimed_at_ms,
        at,
    )
}
