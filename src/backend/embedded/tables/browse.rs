//! SPEC 12.1 on the embedded file: `list` walks one state's index table
//! from the offset (no copy of the table), `find` looks an id up in the
//! id-keyed indexes and, for the lanes keyed by position, in the item's
//! flow's held lanes, the due lane and the flow's parked list before
//! settling on the backlog.

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, DeadRecord};
use crate::browse::{ItemPage, ItemState, ListQuery, ListedItem, Pager};
use crate::error::Result;

impl Tables<'_> {
    /// SPEC 12.1: one page of `query`'s state, in the state's order.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a limit of 0; `Corrupt` for an index naming a
    /// missing item; `Decode` for an unreadable record; storage failures.
    pub(in crate::backend::embedded) fn list(
        &self,
        query: &ListQuery,
        now: u64,
    ) -> Result<ItemPage> {
        let pager = Pager::new(query)?;
        let skip = usize::try_from(query.offset).unwrap_or(usize::MAX);
        let what = "list items";
        match query.state {
            ItemState::Backlog | ItemState::Due => {
                let (table, li) = if query.state == ItemState::Backlog {
                    (self.backlog()?, 1u8)
                } else {
                    (self.due()?, 0u8)
                };
                // SPEC 12.1: the shared lane in rank order, then the held
                // lanes flow by flow; an offset past the shared lane skips
                // it whole (its length is one read).
                let shared_len = usize::try_from(table.len().ctx(what)?).unwrap_or(usize::MAX);
                let shared = table
                    .iter()
                    .ctx(what)?
                    .map(|row| -> Result<(u64, bool)> { Ok((row.ctx(what)?.1.value(), false)) });
                let held = self
                    .held_ids(li)?
                    .map(|id| -> Result<(u64, bool)> { Ok((id?, true)) });
                let positions: Box<dyn Iterator<Item = Result<(u64, bool)>>> = if skip >= shared_len
                {
                    Box::new(held.skip(skip - shared_len))
                } else {
                    Box::new(shared.skip(skip).chain(held))
                };
                pager.fill(positions.map(|p| -> Result<Option<ListedItem>> {
                    let (id, held) = p?;
                    Ok(Some(ListedItem::ready(self.item(id)?, query.state, held)))
                }))
            }
            ItemState::Delayed => {
                let rows = self.delayed()?.iter().ctx(what)?.skip(skip);
                pager.fill(rows.map(|row| -> Result<Option<ListedItem>> {
                    let (_, id) = row.ctx(what)?.0.value();
                    Ok(Some(ListedItem::new(self.item(id)?, ItemState::Delayed)))
                }))
            }
            ItemState::Pending => {
                let rows = self.pending_by_time()?.iter().ctx(what)?.skip(skip);
                pager.fill(rows.map(|row| -> Result<Option<ListedItem>> {
                    let (at, id) = row.ctx(what)?.0.value();
                    let (item, claimed_at, marked) = match self.lease(id)? {
                        Some(lease) => (
                            self.pending_item(id, &lease)?,
                            lease.claimed_at_ms,
                            lease.cancelling,
                        ),
                        None => (self.item(id)?, at, false),
                    };
                    Ok(Some(
                        ListedItem::pending(item, claimed_at, at, None).cancelling(marked),
                    ))
                }))
            }
            ItemState::Parked => {
                let rows = self.parked()?.iter().ctx(what)?.skip(skip);
                pager.fill(rows.map(|row| -> Result<Option<ListedItem>> {
                    let id = row.ctx(what)?.1.value();
                    Ok(Some(ListedItem::new(self.item(id)?, ItemState::Parked)))
                }))
            }
            ItemState::DeadLetter => {
                let rows = self.dead()?.iter().ctx(what)?.rev().skip(skip);
                pager.fill(rows.map(|row| -> Result<Option<ListedItem>> {
                    let (k, v) = row.ctx(what)?;
                    let rec: DeadRecord =
                        codec::decode(format_args!("dead[{}]", k.value()), v.value())?;
                    Ok(Some(ListedItem::dead(
                        self.item(rec.id)?,
                        rec.reason,
                        rec.failed_at_ms,
                    )))
                }))
            }
            ItemState::Completed | ItemState::Cancelled => {
                // At most a page's budget of positions is read.
                let take = query.budget() as u64;
                let items = self.history_page(query.state, now, query.offset, take)?;
                pager.fill(items.into_iter().map(|l| Ok(Some(l))))
            }
        }
    }

    /// SPEC 12.1: item `id` and its state (a finished one while its
    /// state's retention shows it at `now`, SPEC 3, History).
    ///
    /// # Errors
    ///
    /// `Decode` for an unreadable record; storage failures.
    pub(in crate::backend::embedded) fn find(
        &self,
        id: u64,
        now: u64,
    ) -> Result<Option<ListedItem>> {
        let what = "find an item";
        // A deferred delete's record is a finished item's (SPEC 6, schema 4).
        if self.items()?.get(id).ctx(what)?.is_none() || self.is_deferred(id)? {
            return self.history_find(id, now);
        }
        if let Some(lease) = self.lease(id)? {
            let item = self.pending_item(id, &lease)?;
            return Ok(Some(
                ListedItem::pending(item, lease.claimed_at_ms, lease.touched_at_ms, None)
                    .cancelling(lease.cancelling),
            ));
        }
        let item = self.item(id)?;
        if let Some(seq) = self.dead_by_id()?.get(id).ctx(what)? {
            let seq = seq.value();
            if let Some(v) = self.dead()?.get(seq).ctx(what)? {
                let rec: DeadRecord = codec::decode(format_args!("dead[{seq}]"), v.value())?;
                return Ok(Some(ListedItem::dead(item, rec.reason, rec.failed_at_ms)));
            }
        }
        if let Some(nb) = item.not_before_ms
            && self.delayed()?.get((nb, id)).ctx(what)?.is_some()
        {
            return Ok(Some(ListedItem::new(item, ItemState::Delayed)));
        }
        // SPEC 3, Flow limits: an item in its flow's held lane.
        if let Some(li) = self.held_lane_of(&item.flow, id)? {
            let state = if li == 0 {
                ItemState::Due
            } else {
                ItemState::Backlog
            };
            return Ok(Some(ListedItem::ready(item, state, true)));
        }
        for row in self.due()?.iter().ctx(what)? {
            if row.ctx(what)?.1.value() == id {
                return Ok(Some(ListedItem::new(item, ItemState::Due)));
            }
        }
        let flow = item.flow.clone();
        for row in self
            .parked()?
            .range((flow.as_str(), 0u64)..=(flow.as_str(), u64::MAX))
            .ctx(what)?
        {
            if row.ctx(what)?.1.value() == id {
                return Ok(Some(ListedItem::new(item, ItemState::Parked)));
            }
        }
        // Every stored item is in exactly one state: the backlog is what
        // is left.
        Ok(Some(ListedItem::new(item, ItemState::Backlog)))
    }
}
