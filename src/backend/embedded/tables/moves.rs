//! The state moves of SPEC section 3 into pending: add, promote and
//! claim (finishing and reclaim are in `finishing.rs`). Each move deletes an id
//! from one index and inserts it into another in the same transaction.

use std::collections::HashMap;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{BACKLOG_CLOCK, Ctx, DUE_CLOCK, NEXT_ID, NEXT_LEASE, Tables};
use crate::backend::embedded::codec::{
    self, INLINE_PAYLOAD_BYTES, ItemRecord, ItemRecordRef, LeaseRecord,
};
use crate::config::rank;
use crate::error::{Error, Result};
use crate::item::{Added, ClaimFrom, Claimed, Lane, NewItem, Receipt, check_new_item};

impl Tables<'_> {
    pub(super) fn waiting(&self) -> Result<u64> {
        Ok(self.backlog()?.len().ctx("count backlog")?
            + self.due()?.len().ctx("count due")?
            + self.delayed()?.len().ctx("count delayed")?
            + self.held_len()?)
    }

    pub(super) fn live_dedup(&self, key: &str, now: u64) -> Result<Option<u64>> {
        Ok(self
            .dedup()?
            .get(key)
            .ctx("read dedup key")?
            .map(|g| g.value())
            .filter(|(_, expires)| *expires > now)
            .map(|(id, _)| id))
    }

    /// Whether the adds `adds` (each one call's items) all pass
    /// [`Tables::add`]'s checks whatever the others do: every item valid,
    /// and the backlog limit not reached even if every item is fresh. A
    /// batch of adds that fits has its redo record written before it runs
    /// (SPEC 6, redo log).
    ///
    /// # Errors
    ///
    /// `Storage` if the lanes cannot be counted.
    pub(in crate::backend::embedded) fn adds_fit<'a>(
        &self,
        adds: impl Iterator<Item = &'a [(NewItem, Option<u64>)]>,
    ) -> Result<bool> {
        let mut items = 0u64;
        for add in adds {
            for (item, _) in add {
                if check_new_item(item, self.limits.max_payload_bytes).is_err() {
                    return Ok(false);
                }
                items += 1;
            }
        }
        Ok(match self.limits.max_backlog {
            Some(limit) => self.waiting()?.saturating_add(items) <= limit,
            None => true,
        })
    }

    pub(in crate::backend::embedded) fn add(
        &mut self,
        items: &[(NewItem, Option<u64>)],
        now: u64,
    ) -> Result<Vec<Added>> {
        // Validate the whole batch before touching anything.
        let mut fresh = 0u64;
        let mut seen = std::collections::HashSet::new();
        for (item, _) in items {
            check_new_item(item, self.limits.max_payload_bytes)?;
            match item.dedup_key.as_deref() {
                // A key earlier in the batch is live only while its window
                // is open: never with a window of 0 (deduplication off).
                Some(k)
                    if self.live_dedup(k, now)?.is_some()
                        || (self.limits.dedup_window_ms > 0 && seen.contains(k)) => {}
                Some(k) => {
                    seen.insert(k);
                    fresh += 1;
                }
                None => fresh += 1,
            }
        }
        // An add that journals nothing (only duplicates) is never Full.
        if let Some(limit) = self.limits.max_backlog
            && fresh > 0
            && self.waiting()?.saturating_add(fresh) > limit
        {
            return Err(Error::Full { limit });
        }
        let mut out = Vec::with_capacity(items.len());
        let mut records = Vec::with_capacity(items.len());
        let mut ready = Vec::with_capacity(items.len());
        for (item, not_before) in items {
            if let Some(k) = item.dedup_key.as_deref()
                && let Some(id) = self.live_dedup(k, now)?
            {
                out.push(Added {
                    id,
                    duplicate: true,
                });
                continue;
            }
            let id = self.bump(NEXT_ID, 1)?;
            if let Some(k) = item.dedup_key.as_deref() {
                let expires = now.saturating_add(self.limits.dedup_window_ms);
                let replaced = self
                    .dedup_mut()?
                    .insert(k, (id, expires))
                    .ctx("write dedup key")?
                    .map(|g| g.value());
                if let Some((_, old)) = replaced {
                    self.dedup_expiry_mut()?
                        .remove((old, k))
                        .ctx("purge dedup key")?;
                }
                self.dedup_expiry_mut()?
                    .insert((expires, k), ())
                    .ctx("write dedup expiry")?;
                self.floors.dedup = self.floors.dedup.min(expires);
            }
            let inline = item.payload.len() <= INLINE_PAYLOAD_BYTES;
            records.push((
                id,
                codec::encode_item_ref(&ItemRecordRef {
                    flow: &item.flow,
                    enqueued_at_ms: now,
                    not_before_ms: *not_before,
                    deliveries: 0,
                    priority: item.priority,
                    cost: item.cost.max(1),
                    payload: inline.then_some(item.payload.as_slice()),
                })?,
            ));
            if !inline {
                self.payloads_mut()?
                    .insert(id, item.payload.as_slice())
                    .ctx("write payload")?;
            }
            match not_before {
                Some(t) => {
                    self.delayed_mut()?
                        .insert((*t, id), ())
                        .ctx("write delayed")?;
                }
                None => {
                    if let Some(key) =
                        self.lane_key(Lane::Backlog, id, item.priority, &item.flow, now, now)?
                    {
                        ready.push((key, id));
                    }
                }
            }
            out.push(Added {
                id,
                duplicate: false,
            });
        }
        // Nothing in this add reads the new records or lane entries back:
        // they are written last, each table's run in one pass.
        self.put_records(&records)?;
        self.put_ready(Lane::Backlog, &ready)?;
        Ok(out)
    }

    pub(in crate::backend::embedded) fn promote_due(&mut self, now: u64) -> Result<u64> {
        let mut n = 0;
        loop {
            let Some((nb, id)) = self
                .delayed()?
                .first()
                .ctx("read delayed")?
                .map(|(k, _)| k.value())
            else {
                break;
            };
            if nb > now {
                break;
            }
            self.delayed_mut()?.remove((nb, id)).ctx("delete delayed")?;
            let rec = self.record(id)?;
            self.enter(Lane::Due, id, rec.priority, &rec.flow, nb, now)?;
            n += 1;
        }
        Ok(n)
    }

    /// SPEC 3, Priority: put `id` (of tier `tier`) into `lane` (the
    /// backlog or the due lane), arriving at `arrival` or at the lane's
    /// latest arrival so far if that is later (the clock stepped back, or a
    /// promoted timer was older than the last one).
    pub(super) fn enter(
        &mut self,
        lane: Lane,
        id: u64,
        tier: u8,
        flow: &str,
        arrival: u64,
        now: u64,
    ) -> Result<()> {
        match self.lane_key(lane, id, tier, flow, arrival, now)? {
            Some(key) => self.put_ready(lane, &[(key, id)]),
            None => Ok(()),
        }
    }

    /// [`Tables::enter`] up to the lane's own table: the key `id` takes in
    /// `lane`, or `None` when its flow's limits hold it (it is then in the
    /// flow's held lane).
    fn lane_key(
        &mut self,
        lane: Lane,
        id: u64,
        tier: u8,
        flow: &str,
        arrival: u64,
        now: u64,
    ) -> Result<Option<(i64, u64)>> {
        let clock_key = if lane == Lane::Due {
            DUE_CLOCK
        } else {
            BACKLOG_CLOCK
        };
        let arrival = arrival.max(self.counter(clock_key, 0)?);
        self.set_counter(clock_key, arrival);
        let seq = self.next_seq()?;
        let key = (rank(arrival, tier, self.limits.aging_step), seq);
        // SPEC 3, Flow limits: a limited flow's items wait in its held lane.
        if self.enter_held(lane, id, flow, key, now)? {
            return Ok(None);
        }
        Ok(Some(key))
    }

    pub(in crate::backend::embedded) fn claim(
        &mut self,
        count: usize,
        from: ClaimFrom,
        now: u64,
    ) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        self.promote_due(now)?;
        let any_paused = !self.paused()?.is_empty().ctx("read paused")?;
        let limited = self.has_limits()?;
        if limited {
            self.lift_due(now)?;
        }
        let mut out = Vec::new();
        let lanes: &[Lane] = match from {
            ClaimFrom::All => &[Lane::Due, Lane::Backlog],
            ClaimFrom::DueOnly => &[Lane::Due],
        };
        for &lane in lanes {
            if !limited && !any_paused {
                // Nothing holds or parks an item: the lane's first items
                // are handed out in order, taken in one pass.
                let ids = self.take_first(lane, count - out.len())?;
                out.extend(self.hand_out_all(&ids, lane, now)?);
                continue;
            }
            let mut free_flows = HashMap::new();
            while out.len() < count {
                // SPEC 3, Flow limits: merge in the heads of the limited
                // flows that may run, in rank order.
                let held = if limited {
                    self.first_head(lane)?
                } else {
                    None
                };
                // The lane's first items that rank before that head and
                // whose flows no limit or pause touches are handed out in
                // one pass, as without limits.
                let run = self.lane_run(lane, count - out.len(), held.as_ref().map(|(k, _)| *k))?;
                if run.len() >= 2 {
                    let got = self.hand_out_while(&run, lane, now, |t, rec| {
                        t.flow_is_free(&rec.flow, any_paused, &mut free_flows)
                    })?;
                    if !got.is_empty() {
                        self.take_first(lane, got.len())?;
                        out.extend(got);
                        continue;
                    }
                }
                // Look before taking: an empty lane is not written to.
                let head = if lane == Lane::Due {
                    self.due()?
                } else {
                    self.backlog()?
                }
                .first()
                .ctx("read lane")?
                .map(|(k, v)| (k.value(), v.value()));
                let from_held = match (&head, &held) {
                    (None, None) => break,
                    (Some((ks, _)), Some((kh, _))) => kh < ks,
                    (None, Some(_)) => true,
                    (Some(_), None) => false,
                };
                if let (true, Some((key, flow))) = (from_held, held) {
                    if let Some(c) = self.claim_head(lane, &flow, key, now)? {
                        out.push(c);
                    }
                    continue;
                }
                let Some((seq, id)) = head else {
                    break;
                };
                if lane == Lane::Due {
                    self.due_mut()?
                } else {
                    self.backlog_mut()?
                }
                .remove(seq)
                .ctx("take from lane")?;
                if limited {
                    let rec = self.record(id)?;
                    // Held by its flow's limits: now in the flow's held lane.
                    if self.limit_shared(lane, id, &rec.flow, rec.cost.max(1), seq, now)?
                        == Some(true)
                    {
                        continue;
                    }
                }
                if any_paused {
                    let flow = self.record(id)?.flow;
                    if self.is_paused(&flow)? {
                        self.park_id(&flow, id)?;
                        continue;
                    }
                }
                out.push(self.hand_out(id, lane, now)?);
            }
        }
        Ok(out)
    }

    /// The ids of the first entries of `lane` (at most `max`) that rank
    /// before `before` (the first head of a limited flow, if any).
    fn lane_run(&self, lane: Lane, max: usize, before: Option<(i64, u64)>) -> Result<Vec<u64>> {
        let table = if lane == Lane::Due {
            self.due()?
        } else {
            self.backlog()?
        };
        let mut ids = Vec::new();
        for entry in table.iter().ctx("read lane")? {
            if ids.len() >= max {
                break;
            }
            let (k, v) = entry.ctx("read lane")?;
            if before.is_some_and(|h| h < k.value()) {
                break;
            }
            ids.push(v.value());
        }
        Ok(ids)
    }

    /// Whether `flow` has no limit record and, when `any_paused`, is not
    /// paused: its items are handed out in lane order whatever the limits.
    /// `free` caches each flow's answer for one claim (a claim creates no
    /// limit record and pauses no flow).
    fn flow_is_free(
        &self,
        flow: &str,
        any_paused: bool,
        free: &mut HashMap<String, bool>,
    ) -> Result<bool> {
        if let Some(&f) = free.get(flow) {
            return Ok(f);
        }
        let f = self.limit_rec(flow)?.is_none() && !(any_paused && self.is_paused(flow)?);
        free.insert(flow.to_string(), f);
        Ok(f)
    }

    /// Take up to `n` ids from the front of `lane` (the backlog or the due
    /// lane), in rank order. An empty lane is not written to.
    fn take_first(&mut self, lane: Lane, n: usize) -> Result<Vec<u64>> {
        let empty = if lane == Lane::Due {
            self.due()?.is_empty()
        } else {
            self.backlog()?.is_empty()
        }
        .ctx("read lane")?;
        if empty || n == 0 {
            return Ok(Vec::new());
        }
        let table = if lane == Lane::Due {
            self.due_mut()?
        } else {
            self.backlog_mut()?
        };
        if n == 1 {
            let first = table.pop_first().ctx("take from lane")?;
            return Ok(first.map(|(_, id)| id.value()).into_iter().collect());
        }
        let mut ids = Vec::with_capacity(n.min(1024));
        for entry in table
            .extract_from_if::<(i64, u64), _>(.., |_, _| true)
            .ctx("take from lane")?
            .take(n)
        {
            ids.push(entry.ctx("take from lane")?.1.value());
        }
        Ok(ids)
    }

    pub(super) fn hand_out(&mut self, id: u64, lane: Lane, now: u64) -> Result<Claimed> {
        let (claimed, lease) = self.lease_out(id, lane, now)?;
        self.pending_mut()?
            .insert(id, codec::encode_lease(&lease)?.as_slice())
            .ctx("write lease")?;
        self.pending_by_time_mut()?
            .insert((now, id), ())
            .ctx("write lease index")?;
        Ok(claimed)
    }

    /// The lease side of a hand-out (a new lease number carrying the
    /// delivery count plus one, the flow's pending count): the lease to
    /// write into the pending index and its lease index is returned, not
    /// written. The item record is not written: while the item is pending
    /// its count is the lease's (SPEC section 6).
    pub(super) fn lease_out(
        &mut self,
        id: u64,
        lane: Lane,
        now: u64,
    ) -> Result<(Claimed, LeaseRecord)> {
        let rec = self.record(id)?;
        self.lease_out_record(id, rec, lane, now)
    }

    /// [`Tables::lease_out`] of item `id` whose record `rec` the caller has
    /// read.
    pub(super) fn lease_out_record(
        &mut self,
        id: u64,
        mut rec: ItemRecord,
        lane: Lane,
        now: u64,
    ) -> Result<(Claimed, LeaseRecord)> {
        self.note_pending(&rec.flow, true, 1, now)?;
        let lease = self.bump(NEXT_LEASE, 1)?;
        rec.deliveries = rec.deliveries.saturating_add(1);
        let l = LeaseRecord {
            touched_at_ms: now,
            lease,
            lane: codec::lane_to_u8(lane),
            deliveries: rec.deliveries,
            claimed_at_ms: now,
            cancelling: false,
        };
        let delivery = rec.deliveries;
        let claimed = Claimed {
            item: self.to_item(id, rec)?,
            lane,
            claimed_at_ms: now,
            receipt: Receipt {
                id,
                delivery,
                lease,
            },
        };
        Ok((claimed, l))
    }
}
