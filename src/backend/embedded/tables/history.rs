//! SPEC 3, History (schema 8): the finished items (acked or cancelled)
//! kept by their state's retention, written and trimmed in the
//! transaction that finishes them, and read newest first.

use redb::{ReadableTable, ReadableTableMetadata};

use super::batches::{SPREAD, put_encoded, put_run};
use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, HistoryRecord, ItemRecord, LeaseRecord};
use crate::browse::{ItemState, ListedItem};
use crate::config::Retention;
use crate::error::Result;
use crate::item::Item;

impl Tables<'_> {
    fn retention_of(&self, completed: bool) -> Retention {
        if completed {
            self.limits.completed_retention
        } else {
            self.limits.cancelled_retention
        }
    }

    /// The history record of item `id`, finishing at `now` with `rec` (its
    /// delivery count the last lease's) and its payload still in place:
    /// completed with `result`, or cancelled when `result` is `None`;
    /// `claimed_at_ms` is the claim of its last delivery. Encoded, for
    /// [`Tables::keep_many`].
    ///
    /// # Errors
    ///
    /// Storage failures reading a payload; `Decode` never (encoding only).
    pub(super) fn history_row(
        &self,
        id: u64,
        rec: ItemRecord,
        claimed_at_ms: Option<u64>,
        result: Option<&[u8]>,
        now: u64,
    ) -> Result<(u64, Vec<u8>)> {
        let payload = self.payload(id, &rec)?;
        let h = HistoryRecord {
            flow: rec.flow,
            enqueued_at_ms: rec.enqueued_at_ms,
            not_before_ms: rec.not_before_ms,
            deliveries: rec.deliveries,
            priority: rec.priority,
            cost: rec.cost,
            payload,
            result: result.map(<[u8]>::to_vec),
            claimed_at_ms,
            finished_at_ms: now,
        };
        Ok((id, codec::encode(&h)?))
    }

    /// Keep the finished items `rows` (from [`Tables::history_row`], by
    /// ascending id, all finishing `now`) in the completed or the cancelled
    /// state, then trim that state ([`Tables::trim_history`]). New ids at
    /// the tables' ends are appended through one cursor each.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn keep_many(
        &mut self,
        completed: bool,
        rows: &[(u64, Vec<u8>)],
        now: u64,
    ) -> Result<()> {
        if !rows.is_empty() {
            put_encoded(self.history_mut()?, rows, "write history")?;
            let index: Vec<((u64, u64), ())> =
                rows.iter().map(|(id, _)| ((now, *id), ())).collect();
            if completed {
                put_run(self.completed_mut()?, &index, "write completed index")?;
            } else {
                put_run(self.cancelled_mut()?, &index, "write cancelled index")?;
            }
        }
        self.trim_history(completed, now)
    }

    /// Keep item `id`, finishing now with `rec` and its payload still in
    /// place, if its state's retention keeps any (see
    /// [`Tables::history_row`]); trim the state either way. Call before the
    /// item's record and payload are deleted.
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
        let row = self.history_row(id, rec, claimed_at_ms, result, now)?;
        self.keep_many(completed, &[row], now)
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

    /// Drop the oldest finished items of one state that are past the
    /// retention's age, and the oldest past its count, once the state's
    /// oldest item is past the age or the state holds more than the count
    /// plus its slack (`Retention::slack`): a run of rows leaves in one pass
    /// of each table. Reads show at most the count and nothing past the
    /// age, so what waits for the next trim is never seen.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn trim_history(&mut self, completed: bool, now: u64) -> Result<()> {
        let retention = self.retention_of(completed);
        let what = "trim history";
        let (first, len) = if completed {
            let t = self.completed()?;
            (
                t.first().ctx(what)?.map(|(k, _)| k.value()),
                t.len().ctx(what)?,
            )
        } else {
            let t = self.cancelled()?;
            (
                t.first().ctx(what)?.map(|(k, _)| k.value()),
                t.len().ctx(what)?,
            )
        };
        let Some((oldest, _)) = first else {
            return Ok(());
        };
        if retention.alive(oldest, now)
            && len <= retention.count().saturating_add(retention.slack())
        {
            return Ok(());
        }
        // The keys to drop are a prefix of the index: past the count, and
        // past the age (sorted by finish time).
        let excess = len.saturating_sub(retention.count());
        let mut gone: Vec<(u64, u64)> = Vec::new();
        {
            let rows = if completed {
                self.completed()?.iter().ctx(what)?
            } else {
                self.cancelled()?.iter().ctx(what)?
            };
            for row in rows {
                let key = row.ctx(what)?.0.value();
                if (gone.len() as u64) < excess || !retention.alive(key.0, now) {
                    gone.push(key);
                } else {
                    break;
                }
            }
        }
        let Some(&last) = gone.last() else {
            return Ok(());
        };
        let prefix = (0u64, 0u64)..=last;
        if completed {
            self.completed_mut()?
                .retain_in(prefix, |_, ()| false)
                .ctx(what)?;
        } else {
            self.cancelled_mut()?
                .retain_in(prefix, |_, ()| false)
                .ctx(what)?;
        }
        let mut ids: Vec<u64> = gone.iter().map(|(_, id)| *id).collect();
        ids.sort_unstable();
        let (Some(&lo), Some(&hi)) = (ids.first(), ids.last()) else {
            return Ok(());
        };
        let table = self.history_mut()?;
        if hi - lo < (ids.len() as u64).saturating_mul(SPREAD) {
            table
                .retain_in(lo..=hi, |id, _| ids.binary_search(&id).is_err())
                .ctx(what)?;
        } else {
            for id in ids {
                table.remove(id).ctx(what)?;
            }
        }
        Ok(())
    }

    /// The ids of the finished items of `state` shown at `now`, newest
    /// first: at most the retention's count, none past its age.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn history_ids(
        &self,
        state: ItemState,
        now: u64,
    ) -> Result<impl Iterator<Item = Result<u64>> + '_> {
        let completed = state == ItemState::Completed;
        let retention = self.retention_of(completed);
        let count = usize::try_from(retention.count()).unwrap_or(usize::MAX);
        let what = "list history";
        let rows = if completed {
            self.completed()?.iter().ctx(what)?
        } else {
            self.cancelled()?.iter().ctx(what)?
        };
        Ok(rows
            .rev()
            .take(count)
            .map(move |row| -> Result<(u64, u64)> { Ok(row.ctx(what)?.0.value()) })
            .take_while(move |key| match key {
                Ok((at, _)) => retention.alive(*at, now),
                Err(_) => true,
            })
            .map(|key| key.map(|(_, id)| id)))
    }

    /// How many finished items of `state` are shown at `now` (at most the
    /// retention's count are read).
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn history_count(&self, state: ItemState, now: u64) -> Result<u64> {
        let mut n = 0;
        for id in self.history_ids(state, now)? {
            id?;
            n += 1;
        }
        Ok(n)
    }

    /// Finished item `id` as its history record shows it, if one is kept
    /// (shown or not).
    ///
    /// # Errors
    ///
    /// Storage failures; `Decode` for an unreadable record.
    pub(super) fn history_item(&self, id: u64) -> Result<Option<ListedItem>> {
        let Some(g) = self.history()?.get(id).ctx("read history")? else {
            return Ok(None);
        };
        let h: HistoryRecord = codec::decode(format_args!("history[{id}]"), g.value())?;
        Ok(Some(ListedItem::finished(
            Item {
                id,
                flow: h.flow,
                payload: h.payload,
                enqueued_at_ms: h.enqueued_at_ms,
                not_before_ms: h.not_before_ms,
                deliveries: h.deliveries,
                priority: h.priority,
                cost: h.cost.max(1),
            },
            h.result,
            h.claimed_at_ms,
            h.finished_at_ms,
        )))
    }

    /// SPEC 12.1: finished item `id`, while its state shows it at `now`.
    ///
    /// # Errors
    ///
    /// Storage failures; `Decode` for an unreadable record.
    pub(super) fn history_find(&self, id: u64, now: u64) -> Result<Option<ListedItem>> {
        let Some(l) = self.history_item(id)? else {
            return Ok(None);
        };
        let Some(at) = l.finished_at_ms else {
            return Ok(None);
        };
        // Shown: not past the age, and among the newest `count`.
        let retention = self.retention_of(l.state == ItemState::Completed);
        if !retention.alive(at, now) {
            return Ok(None);
        }
        let newer = if l.state == ItemState::Completed {
            self.completed()?
                .range((at, id)..)
                .ctx("find in history")?
                .take(
                    usize::try_from(retention.count())
                        .unwrap_or(usize::MAX)
                        .saturating_add(1),
                )
                .count()
        } else {
            self.cancelled()?
                .range((at, id)..)
                .ctx("find in history")?
                .take(
                    usize::try_from(retention.count())
                        .unwrap_or(usize::MAX)
                        .saturating_add(1),
                )
                .count()
        };
        Ok((newer as u64 <= retention.count()).then_some(l))
    }
}
