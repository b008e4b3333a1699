//! SPEC 3, Looking on the reference model: `stats`, `peek`, `backlog_by_flow`,
//! and the full recount the model tests compare with.

use std::collections::BTreeMap;

use super::Model;
use crate::browse::ItemState;
use crate::config::rank;
use crate::item::{Item, Stats};

impl Model {
    /// SPEC 3, Looking: exact counts.
    pub fn stats(&self, now_ms: u64) -> Stats {
        Stats {
            backlog: (self.backlog.len() + self.due.len()) as u64 + self.held_total(),
            due: self.due.len() as u64 + self.held_due(),
            pending: self.pending.len() as u64,
            delayed: self.delayed.len() as u64,
            parked: self.parked.values().map(|l| l.len() as u64).sum(),
            dead_letters: self.dead.len() as u64,
            dead_letters_dropped: self.dead_dropped,
            oldest_pending_age_ms: self
                .pending
                .values()
                .map(|l| l.claimed_at_ms)
                .min()
                .map(|t| now_ms.saturating_sub(t)),
            oldest_touch_age_ms: self
                .pending
                .values()
                .map(|l| l.touched_at_ms)
                .min()
                .map(|t| now_ms.saturating_sub(t)),
            durable: self.durable,
            limited: self
                .limits
                .values()
                .filter(|st| st.held > 0 && !st.claimable(now_ms))
                .map(|st| st.held)
                .sum(),
            completed: self.history_count(crate::browse::ItemState::Completed, now_ms),
            cancelled: self.history_count(crate::browse::ItemState::Cancelled, now_ms),
        }
    }

    /// The items in claim order: the due lane with the delayed items
    /// already due ranked into it as a promotion now would, then the
    /// backlog.
    fn claim_order(&self, now_ms: u64) -> Vec<&Item> {
        let mut due: Vec<((i64, u64), u64)> = self.due.iter().map(|(k, v)| (*k, *v)).collect();
        let mut backlog: Vec<((i64, u64), u64)> =
            self.backlog.iter().map(|(k, v)| (*k, *v)).collect();
        // SPEC 3, Flow limits: the held items of flows that may run now
        // are in their places; the items of flows held now are left out.
        for (flow, m) in &self.held {
            if self.limits.get(flow).is_some_and(|st| st.claimable(now_ms)) {
                for (&(l, r, seq), &id) in m {
                    if l == 0 {
                        due.push(((r, seq), id))
                    } else {
                        backlog.push(((r, seq), id))
                    }
                }
            }
        }
        backlog.sort_unstable();
        let mut clock = self.due_clock;
        let ready = self.delayed.iter().take_while(|(t, _)| *t <= now_ms);
        for (seq, &(t, id)) in (self.next_seq..).zip(ready) {
            clock = clock.max(t);
            let tier = self.items.get(&id).map_or(0, |i| i.priority);
            due.push(((rank(clock, tier, self.config.aging_step), seq), id));
        }
        due.sort_unstable();
        due.iter()
            .chain(backlog.iter())
            .map(|(_, id)| id)
            .filter_map(|id| self.items.get(id))
            .filter(|i| {
                self.limits
                    .get(&i.flow)
                    .is_none_or(|st| st.claimable(now_ms))
            })
            .collect()
    }

    /// SPEC 3, Looking: backlog_by_flow.
    pub fn backlog_by_flow(&self, sample: usize, now_ms: u64) -> BTreeMap<String, u64> {
        let mut out = BTreeMap::new();
        for item in self.claim_order(now_ms).into_iter().take(sample) {
            *out.entry(item.flow.clone()).or_insert(0) += 1;
        }
        out
    }

    /// SPEC 3, Looking: peek.
    pub fn peek(&self, count: usize, now_ms: u64) -> Vec<Item> {
        self.claim_order(now_ms)
            .into_iter()
            .filter(|i| !self.paused.contains(&i.flow))
            .take(count)
            .cloned()
            .collect()
    }

    /// Where every item is. Each id appears once by construction; used by
    /// tests to compare with a real backend's recount.
    pub fn locations(&self) -> BTreeMap<u64, ItemState> {
        let mut out = BTreeMap::new();
        out.extend(self.backlog.values().map(|id| (*id, ItemState::Backlog)));
        out.extend(self.due.values().map(|id| (*id, ItemState::Due)));
        for m in self.held.values() {
            out.extend(m.iter().map(|(k, id)| (*id, ItemState::held(k.0 == 0))));
        }
        out.extend(self.delayed.iter().map(|(_, id)| (*id, ItemState::Delayed)));
        out.extend(self.pending.keys().map(|id| (*id, ItemState::Pending)));
        for list in self.parked.values() {
            out.extend(list.iter().map(|id| (*id, ItemState::Parked)));
        }
        out.extend(
            self.dead
                .iter()
                .map(|(id, _, _)| (*id, ItemState::DeadLetter)),
        );
        out
    }

    /// Every stored item record, by id.
    pub fn items(&self) -> &BTreeMap<u64, Item> {
        &self.items
    }
}
