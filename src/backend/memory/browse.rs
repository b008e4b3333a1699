//! SPEC 12.1 on the reference model: `list` and `find`, read straight from
//! the model's collections (the ready lanes followed by the flows' held
//! lanes).

use super::Model;
use crate::browse::{ItemPage, ItemState, ListQuery, ListedItem, Pager};
use crate::error::Result;

impl Model {
    /// SPEC 12.1: one page of `query`'s state, in the state's order.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a limit of 0.
    pub fn list(&self, query: &ListQuery, now_ms: u64) -> Result<ItemPage> {
        let pager = Pager::new(query)?;
        let skip = usize::try_from(query.offset).unwrap_or(usize::MAX);
        let plain = |id: &u64, state: ItemState| -> Result<Option<ListedItem>> {
            Ok(self
                .items
                .get(id)
                .cloned()
                .map(|i| ListedItem::new(i, state)))
        };
        match query.state {
            ItemState::Backlog | ItemState::Due => {
                let (shared, li) = if query.state == ItemState::Backlog {
                    (&self.backlog, 1u8)
                } else {
                    (&self.due, 0u8)
                };
                // SPEC 12.1: the shared lane in rank order, then the held
                // lanes flow by flow (name order), each in rank order.
                let held = self.held.values().flat_map(move |m| {
                    m.range((li, i64::MIN, 0)..=(li, i64::MAX, u64::MAX))
                        .map(|(_, id)| (*id, true))
                });
                pager.fill(
                    shared
                        .values()
                        .map(|id| (*id, false))
                        .chain(held)
                        .skip(skip)
                        .map(|(id, held)| -> Result<Option<ListedItem>> {
                            Ok(self
                                .items
                                .get(&id)
                                .cloned()
                                .map(|i| ListedItem::ready(i, query.state, held)))
                        }),
                )
            }
            ItemState::Delayed => pager.fill(
                self.delayed
                    .iter()
                    .skip(skip)
                    .map(|(_, id)| plain(id, ItemState::Delayed)),
            ),
            ItemState::Pending => {
                // The model keeps leases by id: sort a copy of the keys by
                // last touch (the model is written to be obviously right).
                let mut by_time: Vec<(u64, u64, u64)> = self
                    .pending
                    .iter()
                    .map(|(id, l)| (l.touched_at_ms, *id, l.claimed_at_ms))
                    .collect();
                by_time.sort_unstable();
                pager.fill(by_time.into_iter().skip(skip).map(
                    |(touched, id, claimed)| -> Result<Option<ListedItem>> {
                        let marked = self.pending.get(&id).is_some_and(|l| l.cancelling);
                        Ok(self.items.get(&id).cloned().map(|i| {
                            ListedItem::pending(i, claimed, touched, None).cancelling(marked)
                        }))
                    },
                ))
            }
            ItemState::Parked => pager.fill(
                self.parked
                    .values()
                    .flatten()
                    .skip(skip)
                    .map(|id| plain(id, ItemState::Parked)),
            ),
            ItemState::DeadLetter => pager.fill(self.dead.iter().rev().skip(skip).map(
                |(id, reason, at)| -> Result<Option<ListedItem>> {
                    Ok(self
                        .items
                        .get(id)
                        .cloned()
                        .map(|i| ListedItem::dead(i, reason.clone(), *at)))
                },
            )),
            ItemState::Completed | ItemState::Cancelled => pager.fill(
                self.history_of(query.state, now_ms)
                    .skip(skip)
                    .map(|l| -> Result<Option<ListedItem>> { Ok(Some(l)) }),
            ),
        }
    }

    /// SPEC 12.1: item `id` and its state (a finished one while its
    /// state's retention shows it at `now_ms`, SPEC 3, History).
    pub fn find(&self, id: u64, now_ms: u64) -> Option<ListedItem> {
        let Some(item) = self.items.get(&id).cloned() else {
            return self.history_find(id, now_ms);
        };
        if let Some(l) = self.pending.get(&id) {
            return Some(
                ListedItem::pending(item, l.claimed_at_ms, l.touched_at_ms, None)
                    .cancelling(l.cancelling),
            );
        }
        if let Some((_, reason, at)) = self.dead.iter().find(|(d, _, _)| *d == id) {
            return Some(ListedItem::dead(item, reason.clone(), *at));
        }
        // SPEC 3, Flow limits: an item in its flow's held lane.
        if let Some((k, _)) = self
            .held
            .get(&item.flow)
            .and_then(|m| m.iter().find(|(_, d)| **d == id))
        {
            let state = if k.0 == 0 {
                ItemState::Due
            } else {
                ItemState::Backlog
            };
            return Some(ListedItem::ready(item, state, true));
        }
        let state = if self.backlog.values().any(|d| *d == id) {
            ItemState::Backlog
        } else if self.due.values().any(|d| *d == id) {
            ItemState::Due
        } else if self.delayed.iter().any(|(_, d)| *d == id) {
            ItemState::Delayed
        } else if self.parked.values().any(|l| l.contains(&id)) {
            ItemState::Parked
        } else {
            return None;
        };
        Some(ListedItem::new(item, state))
    }
}
