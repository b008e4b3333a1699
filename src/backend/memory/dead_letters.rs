//! SPEC 3, Dead letters on the reference model: listing, redrive and purge.

use super::Model;
use crate::item::{DeadLetter, Lane};

impl Model {
    /// SPEC 3, Dead letters: newest first.
    pub fn dead_letters(&self, count: usize) -> Vec<DeadLetter> {
        self.dead
            .iter()
            .rev()
            .take(count)
            .filter_map(|(id, reason, at)| {
                Some(DeadLetter {
                    item: self.items.get(id)?.clone(),
                    reason: reason.clone(),
                    failed_at_ms: *at,
                })
            })
            .collect()
    }

    /// SPEC 3, Dead letters: redrive.
    pub fn redrive(&mut self, id: u64, now_ms: u64) -> bool {
        let Some(pos) = self.dead.iter().position(|(d, _, _)| *d == id) else {
            return false;
        };
        self.dead.remove(pos);
        self.forget_outcome(id);
        if let Some(item) = self.items.get_mut(&id) {
            item.deliveries = 0;
            item.not_before_ms = None;
        }
        self.enter(Lane::Backlog, id, now_ms);
        true
    }

    /// SPEC 3, Dead letters: purge.
    pub fn purge_dead_letters(&mut self) -> u64 {
        let n = self.dead.len() as u64;
        for (id, _, _) in std::mem::take(&mut self.dead) {
            self.items.remove(&id);
        }
        n
    }
}
