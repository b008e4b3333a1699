//! SPEC 12.1 on a partitioned queue: a state is its partitions' states one
//! after the other, in partition order, each in its own order; an offset
//! counts positions across them (each partition's size from its `stats`).

use super::PartitionedQueue;
use crate::browse::{ItemPage, ItemState, ListQuery, ListedItem};
use crate::error::Result;
use crate::item::Stats;
use crate::queue::WorkQueue;

/// How many items `stats` counts in `state`.
fn count_of(s: &Stats, state: ItemState) -> u64 {
    match state {
        ItemState::Backlog => s.backlog.saturating_sub(s.due),
        ItemState::Due => s.due,
        ItemState::Delayed => s.delayed,
        ItemState::Pending => s.pending,
        ItemState::Parked => s.parked,
        ItemState::DeadLetter => s.dead_letters,
        ItemState::Completed => s.completed,
        ItemState::Cancelled => s.cancelled,
    }
}

impl<Q: WorkQueue> PartitionedQueue<Q> {
    /// SPEC 12.1: one page, read from the partition holding `offset` on
    /// (and from the next ones while the page has room, unless searching:
    /// a search reads one partition per call, so it stays bounded).
    pub(super) async fn list_items(&self, query: ListQuery) -> Result<ItemPage> {
        query.check()?;
        let limit = query.effective_limit();
        let mut items: Vec<ListedItem> = Vec::new();
        let mut base = 0u64;
        let mut pos = query.offset;
        for (p, q) in self.parts.iter().enumerate() {
            let count = count_of(&q.stats().await?, query.state);
            if pos >= base.saturating_add(count) {
                base = base.saturating_add(count);
                continue;
            }
            let local = ListQuery {
                offset: pos - base,
                limit: limit - items.len(),
                ..query.clone()
            };
            let page = q.list(local).await?;
            for mut l in page.items {
                l.item = self.lift_item(p, l.item)?;
                items.push(l);
            }
            base = base.saturating_add(count);
            match page.next_offset {
                Some(n) => {
                    let next = base.saturating_sub(count).saturating_add(n);
                    return Ok(ItemPage::new(items, Some(next)));
                }
                None => pos = base,
            }
            let last = p + 1 == self.parts.len();
            if !last && (items.len() >= limit || query.contains.is_some()) {
                return Ok(ItemPage::new(items, Some(pos)));
            }
        }
        Ok(ItemPage::new(items, None))
    }

    /// SPEC 12.1: item `id` on its partition.
    pub(super) async fn find_item(&self, id: u64) -> Result<Option<ListedItem>> {
        let (p, q) = self.part(id);
        match q.find(self.local(id)).await? {
            Some(mut l) => {
                l.item = self.lift_item(p, l.item)?;
                Ok(Some(l))
            }
            None => Ok(None),
        }
    }
}
