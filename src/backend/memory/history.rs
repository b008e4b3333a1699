//! SPEC 3, History on the reference model: finished items (acked or
//! cancelled) kept by their state's retention, newest first.

use std::collections::BTreeSet;

use super::Model;
use crate::browse::{ItemState, ListedItem};
use crate::config::Retention;
use crate::item::Item;

/// One finished item as the history keeps it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Finished {
    item: Item,
    /// The ack's result (`Some`, possibly empty) for a completed item;
    /// `None` for a cancelled one.
    result: Option<Vec<u8>>,
    claimed_at_ms: Option<u64>,
    finished_at_ms: u64,
}

impl Model {
    fn retention_of(&self, completed: bool) -> Retention {
        if completed {
            self.config.completed_retention
        } else {
            self.config.cancelled_retention
        }
    }

    fn history_index(&self, completed: bool) -> &BTreeSet<(u64, u64)> {
        if completed {
            &self.completed
        } else {
            &self.cancelled
        }
    }

    /// Keep `item`, which just finished at `now_ms` (completed with
    /// `result`, or cancelled when `result` is `None`), if its state's
    /// retention keeps any, then trim that state: past its age, then past
    /// its count, oldest first (SPEC 3, History).
    pub(super) fn keep_finished(
        &mut self,
        item: Item,
        claimed_at_ms: Option<u64>,
        result: Option<Vec<u8>>,
        now_ms: u64,
    ) {
        let completed = result.is_some();
        let retention = self.retention_of(completed);
        if retention.keeps() {
            let id = item.id;
            let index = if completed {
                &mut self.completed
            } else {
                &mut self.cancelled
            };
            index.insert((now_ms, id));
            self.history.insert(
                id,
                Finished {
                    item,
                    result,
                    claimed_at_ms,
                    finished_at_ms: now_ms,
                },
            );
        }
        let index = if completed {
            &mut self.completed
        } else {
            &mut self.cancelled
        };
        while let Some(&(at, id)) = index.first() {
            if retention.alive(at, now_ms) && index.len() as u64 <= retention.count() {
                break;
            }
            index.pop_first();
            self.history.remove(&id);
        }
    }

    /// The finished items of `state` shown at `now_ms`, newest first: at
    /// most the retention's count, none past its age.
    pub(super) fn history_of(
        &self,
        state: ItemState,
        now_ms: u64,
    ) -> impl Iterator<Item = ListedItem> + '_ {
        let completed = state == ItemState::Completed;
        let retention = self.retention_of(completed);
        let count = usize::try_from(retention.count()).unwrap_or(usize::MAX);
        self.history_index(completed)
            .iter()
            .rev()
            .take(count)
            .take_while(move |(at, _)| retention.alive(*at, now_ms))
            .filter_map(|(_, id)| self.history.get(id).map(Finished::listed))
    }

    /// How many finished items of `state` are shown at `now_ms`.
    pub(super) fn history_count(&self, state: ItemState, now_ms: u64) -> u64 {
        self.history_of(state, now_ms).count() as u64
    }

    /// Finished item `id`, if it is shown at `now_ms`.
    pub(super) fn history_find(&self, id: u64, now_ms: u64) -> Option<ListedItem> {
        let f = self.history.get(&id)?;
        let state = if f.result.is_some() {
            ItemState::Completed
        } else {
            ItemState::Cancelled
        };
        self.history_of(state, now_ms).find(|l| l.item.id == id)
    }
}

impl Finished {
    fn listed(&self) -> ListedItem {
        ListedItem::finished(
            self.item.clone(),
            self.result.clone(),
            self.claimed_at_ms,
            self.finished_at_ms,
        )
    }
}
