//! Reads that change nothing: `next_due`, `stats`, and the claim order
//! that `peek` and `backlog_by_flow` show.

use std::collections::BTreeMap;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, DEAD_DROPPED, DUE_CLOCK, NEXT_SEQ, Tables};
use crate::backend::embedded::codec;
use crate::config::rank;
use crate::error::Result;
use crate::item::{Item, Stats};

impl Tables<'_> {
    pub(in crate::backend::embedded) fn next_due(&self) -> Result<Option<u64>> {
        Ok(self
            .delayed()?
            .first()
            .ctx("read delayed")?
            .map(|(k, _)| k.value().0))
    }

    pub(in crate::backend::embedded) fn stats(&self, now: u64) -> Result<Stats> {
        let due = self.due()?.len().ctx("count due")?;
        let stalest = self
            .pending_by_time()?
            .first()
            .ctx("read lease index")?
            .map(|(k, _)| now.saturating_sub(k.value().0));
        // The oldest claim: leases are indexed by their last touch, so the
        // claim times are read from the leases (as many as are pending:
        // the claims in flight, not the backlog).
        let mut oldest_claim: Option<u64> = None;
        for entry in self.pending()?.iter().ctx("scan leases")? {
            let (k, v) = entry.ctx("scan leases")?;
            let (lease, _) =
                codec::decode_lease(format_args!("pending[{}]", k.value()), v.value())?;
            oldest_claim =
                Some(oldest_claim.map_or(lease.claimed_at_ms, |t| t.min(lease.claimed_at_ms)));
        }
        let (held, held_due, limited) = self.held_counts(now)?;
        let due = due + held_due;
        Ok(Stats {
            backlog: self.backlog()?.len().ctx("count backlog")? + due + (held - held_due),
            due,
            pending: self.pending()?.len().ctx("count pending")?,
            delayed: self.delayed()?.len().ctx("count delayed")?,
            parked: self.parked()?.len().ctx("count parked")?,
            dead_letters: self.dead()?.len().ctx("count dead letters")?,
            dead_letters_dropped: self.counter(DEAD_DROPPED, 0)?,
            oldest_pending_age_ms: oldest_claim.map(|t| now.saturating_sub(t)),
            oldest_touch_age_ms: stalest,
            durable: true,
            limited,
            completed: self.history_count(crate::browse::ItemState::Completed, now)?,
            cancelled: self.history_count(crate::browse::ItemState::Cancelled, now)?,
        })
    }

    /// Items in claim order: the due lane with the delayed items already
    /// due ranked into it as a promotion now would (SPEC 3, Priority), then
    /// the backlog; at most `limit`, skipping paused flows when
    /// `skip_paused`. Reads every delayed item already due (a claim or the
    /// worker's timer promotes them, so there are few).
    pub(super) fn claim_order(
        &self,
        limit: usize,
        now: u64,
        skip_paused: bool,
    ) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let paused = self.paused_flows()?;
        let mut push = |item: Item| -> bool {
            if !(skip_paused && paused.contains(&item.flow)) {
                out.push(item);
            }
            out.len() >= limit
        };
        // The delayed items a promotion now would move, ranked as it would.
        let mut ready: Vec<((i64, u64), Item)> = Vec::new();
        let mut clock = self.counter(DUE_CLOCK, 0)?;
        let mut seq = self.counter(NEXT_SEQ, 1)?;
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            let (nb, id) = entry.ctx("scan delayed")?.0.value();
            if nb > now {
                break;
            }
            clock = clock.max(nb);
            let item = self.item(id)?;
            ready.push((
                (rank(clock, item.priority, self.limits.aging_step), seq),
                item,
            ));
            seq = seq.saturating_add(1);
        }
        ready.sort_unstable_by_key(|(k, _)| *k);
        if self.has_limits()? {
            return self.claim_order_limited(limit, now, skip_paused, ready);
        }
        let mut ready = ready.into_iter().peekable();
        for entry in self.due()?.iter().ctx("scan due")? {
            let (k, v) = entry.ctx("scan due")?;
            let key = k.value();
            while let Some((_, item)) = ready.next_if(|(r, _)| *r < key) {
                if push(item) {
                    return Ok(out);
                }
            }
            if push(self.item(v.value())?) {
                return Ok(out);
            }
        }
        for (_, item) in ready {
            if push(item) {
                return Ok(out);
            }
        }
        for entry in self.backlog()?.iter().ctx("scan backlog")? {
            if push(self.item(entry.ctx("scan backlog")?.1.value())?) {
                return Ok(out);
            }
        }
        Ok(out)
    }

    pub(in crate::backend::embedded) fn peek(&self, count: usize, now: u64) -> Result<Vec<Item>> {
        self.claim_order(count, now, true)
    }

    pub(in crate::backend::embedded) fn backlog_by_flow(
        &self,
        sample: usize,
        now: u64,
    ) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for item in self.claim_order(sample, now, false)? {
            *out.entry(item.flow).or_insert(0) += 1;
        }
        Ok(out)
    }
}
