//! SPEC 3, Controlling one item on the reference model: `promote` (a
//! delayed item becomes due now), `remove` (an item is deleted unrun) and
//! `cancel` (an item ends as cancelled, or is marked for its holder) and
//! `update` (a waiting item's tier, not-before time or payload changes).

use super::Model;
use crate::config::rerank;
use crate::error::{Error, Result};
use crate::item::{
    CancelOutcome, ItemUpdate, Lane, check_update, finished_not_updatable, not_updatable,
    parked_takes_no_timer,
};
use crate::outcome::OutcomeKind;

impl Model {
    /// SPEC 3, Timers: make delayed item `id` due now: its `not_before`
    /// becomes the earlier of its own and `now_ms`, and it enters the due
    /// lane with that arrival, as `promote_due` would move it. False when
    /// no delayed item is `id`.
    pub fn promote(&mut self, id: u64, now_ms: u64) -> bool {
        let Some(&(t, _)) = self.delayed.iter().find(|(_, d)| *d == id) else {
            return false;
        };
        self.delayed.remove(&(t, id));
        let due_at = t.min(now_ms);
        if let Some(item) = self.items.get_mut(&id) {
            item.not_before_ms = Some(due_at);
        }
        // The due lane's arrival is the item's not_before (SPEC 3,
        // Priority), as for a promotion by promote_due.
        self.enter(Lane::Due, id, due_at);
        true
    }

    /// SPEC 3, Removing: delete item `id` from the backlog, the due lane,
    /// a flow's held items, delayed, parked or the dead letters. False
    /// when the queue holds no item `id`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a pending item; nothing changes.
    pub fn remove(&mut self, id: u64, now_ms: u64) -> Result<bool> {
        if !self.items.contains_key(&id) {
            return Ok(false);
        }
        if self.pending.contains_key(&id) {
            return Err(Error::invalid(format!(
                "item {id} is pending: a consumer holds it, so it is finished through its receipt (ack, retry, dead_letter), not removed"
            )));
        }
        let found = self.take_from_lanes(id, now_ms)
            || self.take_delayed(id)
            || self.take_parked(id)
            || self.take_dead(id);
        if !found {
            return Err(Error::corrupt(format!("item {id} is in no state")));
        }
        self.items.remove(&id);
        self.progress.remove(&id);
        self.chunks.remove(&id);
        Ok(true)
    }

    /// SPEC 3, Cancelling: end a waiting, delayed or parked item `id` as
    /// cancelled, or mark a pending one for its holder.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a dead letter; nothing changes.
    pub fn cancel(&mut self, id: u64, now_ms: u64) -> Result<CancelOutcome> {
        if !self.items.contains_key(&id) {
            return Ok(CancelOutcome::NotFound);
        }
        if let Some(lease) = self.pending.get_mut(&id) {
            lease.cancelling = true;
            return Ok(CancelOutcome::Marked);
        }
        if self.dead.iter().any(|(d, _, _)| *d == id) {
            return Err(Error::invalid(format!(
                "item {id} is a dead letter: it has finished, so it cannot be cancelled (remove deletes it, redrive runs it again)"
            )));
        }
        let found =
            self.take_from_lanes(id, now_ms) || self.take_delayed(id) || self.take_parked(id);
        if !found {
            return Err(Error::corrupt(format!("item {id} is in no state")));
        }
        self.expire(now_ms);
        let item = self.items.remove(&id);
        self.finish(id, OutcomeKind::Cancelled, now_ms);
        if let Some(item) = item {
            self.keep_finished(item, None, None, now_ms);
        }
        Ok(CancelOutcome::Ended)
    }

    /// SPEC 3, Cancelling: the ids among `ids` that are pending and marked
    /// cancelled, ascending, each once.
    pub fn cancelled_among(&self, ids: &[u64]) -> Vec<u64> {
        let mut out: Vec<u64> = ids
            .iter()
            .copied()
            .filter(|id| self.pending.get(id).is_some_and(|l| l.cancelling))
            .collect();
        out.sort_unstable();
        out.dedup();
        out
    }

    /// SPEC 3, Updating: change waiting item `id`'s tier, not-before time
    /// or payload. A new not-before time takes the item out of its lane
    /// (or delayed) and puts it in delayed (after `now_ms`) or at the due
    /// lane's tail (at or before); a new tier alone re-ranks it in place,
    /// its arrival and position kept. False when the queue holds no item
    /// `id` and keeps no outcome of it.
    ///
    /// # Errors
    ///
    /// `InvalidInput`, nothing changed: an empty update, a payload over
    /// `max_payload_bytes`, a pending item, a dead letter, a finished item
    /// whose outcome is kept, a not-before time for a parked item.
    pub fn update(&mut self, id: u64, update: &ItemUpdate, now_ms: u64) -> Result<bool> {
        check_update(update, self.config.max_payload_bytes)?;
        self.expire(now_ms);
        let Some(old_tier) = self.items.get(&id).map(|i| i.priority) else {
            return match self.outcomes.get(&id) {
                Some((o, _)) => Err(finished_not_updatable(id, &o.kind)),
                None => Ok(false),
            };
        };
        if self.pending.contains_key(&id) {
            return Err(not_updatable(id, "pending: a consumer holds it"));
        }
        if self.dead.iter().any(|(d, _, _)| *d == id) {
            return Err(not_updatable(id, "a dead letter"));
        }
        let parked = self.parked.values().any(|l| l.contains(&id));
        if parked && update.not_before_ms.is_some() {
            return Err(parked_takes_no_timer(id));
        }
        let new_tier = update.priority.unwrap_or(old_tier);
        if let Some(item) = self.items.get_mut(&id) {
            if let Some(p) = &update.payload {
                item.payload.clone_from(p);
            }
            item.priority = new_tier;
        }
        if let Some(nb) = update.not_before_ms {
            if !(self.take_from_lanes(id, now_ms) || self.take_delayed(id)) {
                return Err(Error::corrupt(format!("item {id} is in no state")));
            }
            if let Some(item) = self.items.get_mut(&id) {
                item.not_before_ms = Some(nb);
            }
            if nb > now_ms {
                self.delayed.insert((nb, id));
            } else {
                // The due lane's arrival is the item's not_before, as a
                // promotion gives it (SPEC 3, Priority).
                self.enter(Lane::Due, id, nb);
            }
        } else if new_tier != old_tier {
            self.rerank(id, old_tier, new_tier);
        }
        Ok(true)
    }

    /// Re-rank `id` where it waits in a ready lane (shared or held) for
    /// tier `new` instead of `old`: same arrival, same position.
    fn rerank(&mut self, id: u64, old: u8, new: u8) {
        let step = self.config.aging_step;
        for lane in [&mut self.backlog, &mut self.due] {
            if let Some(key) = lane.iter().find(|(_, v)| **v == id).map(|(k, _)| *k) {
                lane.remove(&key);
                lane.insert((rerank(key.0, old, new, step), key.1), id);
                return;
            }
        }
        for lane in self.held.values_mut() {
            if let Some(key) = lane.iter().find(|(_, v)| **v == id).map(|(k, _)| *k) {
                lane.remove(&key);
                lane.insert((key.0, rerank(key.1, old, new, step), key.2), id);
                return;
            }
        }
    }

    fn take_from_lanes(&mut self, id: u64, now_ms: u64) -> bool {
        for lane in [&mut self.backlog, &mut self.due] {
            if let Some(key) = lane.iter().find(|(_, v)| **v == id).map(|(k, _)| *k) {
                lane.remove(&key);
                return true;
            }
        }
        let held = self.held.iter_mut().find_map(|(flow, lane)| {
            let key = lane.iter().find(|(_, v)| **v == id).map(|(k, _)| *k)?;
            lane.remove(&key);
            Some(flow.clone())
        });
        let Some(flow) = held else {
            return false;
        };
        if let Some(st) = self.limits.get_mut(&flow) {
            st.held = st.held.saturating_sub(1);
        }
        self.tidy(&flow, now_ms);
        true
    }

    fn take_delayed(&mut self, id: u64) -> bool {
        let Some(&key) = self.delayed.iter().find(|(_, d)| *d == id) else {
            return false;
        };
        self.delayed.remove(&key)
    }

    fn take_parked(&mut self, id: u64) -> bool {
        for list in self.parked.values_mut() {
            if let Some(pos) = list.iter().position(|p| *p == id) {
                list.remove(pos);
                return true;
            }
        }
        false
    }

    fn take_dead(&mut self, id: u64) -> bool {
        let Some(pos) = self.dead.iter().position(|(d, _, _)| *d == id) else {
            return false;
        };
        self.dead.remove(pos);
        true
    }
}
