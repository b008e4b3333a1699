//! SPEC 12.1 on the reference model: `list` and `find`, read straight from
//! the model's collections.

use super::Model;
use crate::browse::{ItemPage, ItemState, ListQuery, ListedItem, Pager};
use crate::error::Result;

impl Model {
    /// SPEC 12.1: one page of `query`'s state, in the state's order.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a limit of 0.
    pub fn list(&self, query: &ListQuery) -> Result<ItemPage> {
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
            ItemState::Backlog => pager.fill(
                self.backlog
                    .iter()
                    .skip(skip)
                    .map(|(_, id)| plain(id, ItemState::Backlog)),
            ),
            ItemState::Due => pager.fill(
                self.due
                    .iter()
                    .skip(skip)
                    .map(|(_, id)| plain(id, ItemState::Due)),
            ),
            ItemState::Delayed => pager.fill(
                self.delayed
                    .iter()
                    .skip(skip)
                    .map(|(_, id)| plain(id, ItemState::Delayed)),
            ),
            ItemState::Pending => {
                // The model keeps leases by id: sort a copy of the keys by
                // claim time (the model is written to be obviously right).
                let mut by_time: Vec<(u64, u64)> = self
                    .pending
                    .iter()
                    .map(|(id, l)| (l.claimed_at_ms, *id))
                    .collect();
                by_time.sort_unstable();
                pager.fill(by_time.into_iter().skip(skip).map(
                    |(at, id)| -> Result<Option<ListedItem>> {
                        Ok(self
                            .items
                            .get(&id)
                            .cloned()
                            .map(|i| ListedItem::pending(i, at, None)))
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
        }
    }

    /// SPEC 12.1: item `id` and its state.
    pub fn find(&self, id: u64) -> Option<ListedItem> {
        let item = self.items.get(&id)?.clone();
        if let Some(l) = self.pending.get(&id) {
            return Some(ListedItem::pending(item, l.claimed_at_ms, None));
        }
        if let Some((_, reason, at)) = self.dead.iter().find(|(d, _, _)| *d == id) {
            return Some(ListedItem::dead(item, reason.clone(), *at));
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
