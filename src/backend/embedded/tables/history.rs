//! SPEC 3, History (schema 8): the finished items (acked or cancelled)
//! kept by their state's retention, written and trimmed in the
//! transaction that finishes them, and read newest first.

use redb::{ReadableTable, ReadableTableMetadata};

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

    /// Keep item `id`, finishing at `now` with `rec` (its delivery count
    /// the last lease's) and its payload still in place: completed with
    /// `result`, or cancelled when `result` is `None`; `claimed_at_ms` is
    /// the claim of its last delivery. Then trim the state (see
    /// [`Tables::trim_history`]). Call before the item's record and
    /// payload are deleted.
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
        if self.retention_of(completed).keeps() {
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
            self.history_mut()?
                .insert(id, codec::encode(&h)?.as_slice())
                .ctx("write history")?;
            if completed {
                self.completed_mut()?
                    .insert((now, id), ())
                    .ctx("write completed index")?;
            } else {
                self.cancelled_mut()?
                    .insert((now, id), ())
                    .ctx("write cancelled index")?;
            }
        }
        self.trim_history(completed, now)
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

    /// Drop the oldest finished items of one state while they are past the
    /// retention's age or more than its count (SPEC 3, History). Each
    /// finish adds at most one, so this deletes what became too old since
    /// the state's last finish, and at most one more.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn trim_history(&mut self, completed: bool, now: u64) -> Result<()> {
        let retention = self.retention_of(completed);
        let what = "trim history";
        loop {
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
            let Some((at, id)) = first else {
                return Ok(());
            };
            if retention.alive(at, now) && len <= retention.count() {
                return Ok(());
            }
            if completed {
                self.completed_mut()?.remove((at, id)).ctx(what)?;
            } else {
                self.cancelled_mut()?.remove((at, id)).ctx(what)?;
            }
            self.history_mut()?.remove(id).ctx(what)?;
        }
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
