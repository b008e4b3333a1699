//! SPEC 3, Adding and Timers on the reference model: items enter the backlog or
//! the delayed set, and timers move to the due lane.

use std::collections::HashMap;

use super::Model;
use crate::config::ms;
use crate::error::{Error, Result};
use crate::item::{Added, Item, Lane, NewItem, check_new_item};

impl Model {
    /// SPEC 3, Adding: `add`, `add_batch` and `add_delayed` in one. Each
    /// entry is an item and its `not_before_ms` (`None`: the backlog). All or
    /// none.
    ///
    /// # Errors
    ///
    /// `InvalidInput`, `Full`.
    pub fn add_many(
        &mut self,
        items: Vec<(NewItem, Option<u64>)>,
        now_ms: u64,
    ) -> Result<Vec<Added>> {
        self.expire(now_ms);
        let window = ms(self.config.dedup_window);
        let mut seen: HashMap<&str, usize> = HashMap::new();
        let mut fresh = 0u64;
        for (index, (item, _)) in items.iter().enumerate() {
            check_new_item(item, self.config.max_payload_bytes)?;
            match item.dedup_key.as_deref() {
                // A key earlier in the same batch makes a duplicate only if
                // its window is still open at `now`: never when the window
                // is 0, which turns deduplication off.
                Some(key)
                    if window > 0 && (self.dedup.contains_key(key) || seen.contains_key(key)) => {}
                Some(key) => {
                    seen.insert(key, index);
                    fresh += 1;
                }
                None => fresh += 1,
            }
        }
        // An add that journals nothing (an empty batch, only duplicates) is
        // never Full, even when retries or redrives have pushed the queue
        // past the limit.
        if let Some(limit) = self.config.max_backlog
            && fresh > 0
            && self.waiting().saturating_add(fresh) > limit
        {
            return Err(Error::Full { limit });
        }
        let mut out = Vec::with_capacity(items.len());
        for (item, not_before_ms) in items {
            if let Some(key) = item.dedup_key.as_deref()
                && let Some((id, expires)) = self.dedup.get(key)
                && *expires > now_ms
            {
                out.push(Added {
                    id: *id,
                    duplicate: true,
                });
                continue;
            }
            let id = self.next_id;
            self.next_id += 1;
            if let Some(key) = item.dedup_key.clone() {
                self.dedup.insert(key, (id, now_ms.saturating_add(window)));
            }
            self.items.insert(
                id,
                Item {
                    id,
                    flow: item.flow,
                    payload: item.payload,
                    enqueued_at_ms: now_ms,
                    not_before_ms,
                    deliveries: 0,
                    priority: item.priority,
                    cost: item.cost.max(1),
                },
            );
            match not_before_ms {
                Some(t) => {
                    self.delayed.insert((t, id));
                }
                None => self.enter(Lane::Backlog, id, now_ms),
            }
            out.push(Added {
                id,
                duplicate: false,
            });
        }
        Ok(out)
    }

    /// SPEC 3, Timers: soonest `not_before_ms` among delayed items.
    pub fn next_due(&self) -> Option<u64> {
        self.delayed.first().map(|(t, _)| *t)
    }

    /// SPEC 3, Timers: move every delayed item due at `now_ms` to the due lane.
    pub fn promote_due(&mut self, now_ms: u64) -> u64 {
        let mut n = 0;
        while let Some(&(t, id)) = self.delayed.first() {
            if t > now_ms {
                break;
            }
            self.delayed.pop_first();
            self.enter(Lane::Due, id, t);
            n += 1;
        }
        n
    }
}
