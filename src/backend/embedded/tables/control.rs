//! Controlling one item, and the atomic back-off (SPEC 3, Timers, Removing,
//! Cancelling, Updating and Flow limits): `promote` (a delayed item becomes
//! due now), `remove` (an item is deleted unrun), `cancel`, `update` (a
//! waiting item's tier, not-before time or payload) and `back_off` (the
//! clock read and the hold set in one operation). Each is one writer
//! operation, so one redo record and one transaction: a crash leaves it
//! whole or not at all.
//!
//! None of them writes anything before it knows it will change something:
//! a `false` answer, or the `InvalidInput` of a pending item, leaves the
//! transaction clean (SPEC 6, Idle).

use redb::ReadableTable;

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, INLINE_PAYLOAD_BYTES};
use crate::config::rerank;
use crate::error::{Error, Result};
use crate::item::{
    CancelOutcome, ItemUpdate, Lane, check_update, finished_not_updatable, not_updatable,
    parked_takes_no_timer,
};
use crate::limit::{FlowLimit, FlowState, check_limit};

impl Tables<'_> {
    /// SPEC 3, Timers: make delayed item `id` due now: its `not_before`
    /// becomes the earlier of its own and `now`, and it enters the due lane
    /// with that arrival, as `promote_due` moves it (tier, cost and
    /// deliveries are kept). False, and nothing written, when no delayed
    /// item is `id`.
    ///
    /// # Errors
    ///
    /// `Decode` for an unreadable record; storage failures.
    pub(in crate::backend::embedded) fn promote_id(&mut self, id: u64, now: u64) -> Result<bool> {
        let Some(nb) = self.delayed_at(id)? else {
            return Ok(false);
        };
        let mut rec = self.record(id)?;
        // Keeps `delayed` consistent: the timer leaves the index it is in.
        self.delayed_mut()?.remove((nb, id)).ctx("delete delayed")?;
        let due_at = nb.min(now);
        rec.not_before_ms = Some(due_at);
        // Keeps the item record consistent with its new `not_before`, which
        // `find` and the delayed lookup above read.
        self.put_record(id, &rec)?;
        // Keeps the ready lanes consistent: `enter` writes `due_ranked` (or
        // the flow's held lane, its record and `heads`/`limit_timers` when
        // the flow has limits) and the due lane's clock. The due lane's
        // arrival is the item's not_before (SPEC 3, Priority), as
        // promote_due gives it.
        self.enter(Lane::Due, id, rec.priority, &rec.flow, due_at, now)?;
        Ok(true)
    }

    /// The `not_before` under which `id` waits in `delayed`, if it does.
    /// A deferred delete's record names no index, so it is never found.
    fn delayed_at(&self, id: u64) -> Result<Option<u64>> {
        if self.items()?.get(id).ctx("read item")?.is_none() {
            return Ok(None);
        }
        let Some(nb) = self.record(id)?.not_before_ms else {
            return Ok(None);
        };
        Ok(self
            .delayed()?
            .get((nb, id))
            .ctx("read delayed")?
            .map(|_| nb))
    }

    /// SPEC 3, Removing: delete item `id` unrun from whatever state it
    /// is in (backlog or due lane, shared or held, delayed, parked, dead
    /// letters), with its record, payload row, progress and chunks. A dead
    /// letter's outcome is kept, as `purge_dead_letters` keeps it; dedup
    /// keys are left to expire. False, and nothing written, when the queue
    /// holds no item `id`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a pending item (nothing written); `Corrupt` for
    /// a record no index names; `Decode` for an unreadable record; storage
    /// failures.
    pub(in crate::backend::embedded) fn remove_id(&mut self, id: u64, now: u64) -> Result<bool> {
        // A deferred delete's record is a finished item's (SPEC 6, schema 4).
        if self.items()?.get(id).ctx("read item")?.is_none() || self.is_deferred(id)? {
            return Ok(false);
        }
        if self.lease(id)?.is_some() {
            return Err(Error::invalid(format!(
                "item {id} is pending: a consumer holds it, so it is finished through its receipt (ack, retry, dead_letter), not removed"
            )));
        }
        let rec = self.record(id)?;
        let found = self.take_dead(id)?
            || self.take_delayed(id, rec.not_before_ms)?
            || self.take_held(id, &rec.flow, now)?
            || self.take_from_lane(Lane::Due, id)?
            || self.take_from_lane(Lane::Backlog, id)?
            || self.take_parked(id, &rec.flow)?;
        if !found {
            return Err(Error::corrupt(format!("item {id} is in no state")));
        }
        // Keeps `items` and `payloads` consistent: no index names the id
        // any more, so its record and its payload row (if it is large) go.
        self.delete_item(id)?;
        // Keeps `progress` and `chunks` consistent: nothing reads them for
        // an item that is gone (a dead letter's outcome stays in
        // `outcomes` or its ack run, as with a purge).
        self.forget_progress(id)?;
        Ok(true)
    }

    /// SPEC 3, Cancelling: end item `id` as cancelled if it waits (backlog
    /// or due lane, shared or held, delayed, parked): it leaves its state
    /// and its record, payload row and dedup key go as in `remove`, and
    /// its outcome is cancelled (its progress and chunks live as long as
    /// the outcome). A pending item's lease gets the cancel mark. Nothing
    /// written for `NotFound` or a mark already there.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a dead letter (nothing written); `Corrupt` for a
    /// record no index names; `Decode` for an unreadable record; storage
    /// failures.
    pub(in crate::backend::embedded) fn cancel(
        &mut self,
        id: u64,
        now: u64,
    ) -> Result<CancelOutcome> {
        if self.items()?.get(id).ctx("read item")?.is_none() || self.is_deferred(id)? {
            return Ok(CancelOutcome::NotFound);
        }
        if let Some(mut lease) = self.lease(id)? {
            if !lease.cancelling {
                lease.cancelling = true;
                // Keeps `pending` consistent: the same lease, marked; the
                // lease index (keyed by the last touch) is unchanged.
                self.pending_mut()?
                    .insert(id, codec::encode_lease(&lease)?.as_slice())
                    .ctx("write lease")?;
            }
            return Ok(CancelOutcome::Marked);
        }
        if self
            .dead_by_id()?
            .get(id)
            .ctx("read dead letter index")?
            .is_some()
        {
            return Err(Error::invalid(format!(
                "item {id} is a dead letter: it has finished, so it cannot be cancelled (remove deletes it, redrive runs it again)"
            )));
        }
        let rec = self.record(id)?;
        let found = self.take_delayed(id, rec.not_before_ms)?
            || self.take_held(id, &rec.flow, now)?
            || self.take_from_lane(Lane::Due, id)?
            || self.take_from_lane(Lane::Backlog, id)?
            || self.take_parked(id, &rec.flow)?;
        if !found {
            return Err(Error::corrupt(format!("item {id} is in no state")));
        }
        // SPEC 3, History: kept, with its payload, before it goes.
        self.keep_finished(id, rec, None, None, now)?;
        // Keeps `items` and `payloads` consistent: no index names the id.
        self.delete_item(id)?;
        // Keeps `outcomes` and `outcome_expiry` consistent: the outcome
        // replaces any earlier one.
        self.finish(id, codec::OUTCOME_CANCELLED, Vec::new(), "", now)?;
        Ok(CancelOutcome::Ended)
    }

    /// SPEC 3, Updating: change waiting item `id`'s tier, not-before time
    /// or payload. A new not-before time takes the item out of its lane
    /// (shared or held) or delayed, and puts it in delayed (after `now`)
    /// or at the due lane's tail with that arrival (at or before `now`); a
    /// new tier alone rewrites its lane key in place, arrival and position
    /// kept. False, and nothing written, when the queue holds no item `id`
    /// and keeps no outcome of it.
    ///
    /// # Errors
    ///
    /// `InvalidInput` (nothing written): an empty update, a payload over
    /// `max_payload_bytes`, a pending item, a dead letter, a finished item
    /// whose outcome is kept, a not-before time for a parked item.
    /// `Corrupt` for a record no index names; `Decode` for an unreadable
    /// record; storage failures.
    pub(in crate::backend::embedded) fn update(
        &mut self,
        id: u64,
        update: &ItemUpdate,
        now: u64,
    ) -> Result<bool> {
        check_update(update, self.limits.max_payload_bytes)?;
        if self.items()?.get(id).ctx("read item")?.is_none() || self.is_deferred(id)? {
            return match self.outcome(id, now)? {
                Some(o) => Err(finished_not_updatable(id, &o.kind)),
                None => Ok(false),
            };
        }
        if self.lease(id)?.is_some() {
            return Err(not_updatable(id, "pending: a consumer holds it"));
        }
        if self
            .dead_by_id()?
            .get(id)
            .ctx("read dead letter index")?
            .is_some()
        {
            return Err(not_updatable(id, "a dead letter"));
        }
        let mut rec = self.record(id)?;
        if update.not_before_ms.is_some() && self.parked_seq(id, &rec.flow)?.is_some() {
            return Err(parked_takes_no_timer(id));
        }
        let old_tier = rec.priority;
        let new_tier = update.priority.unwrap_or(old_tier);
        rec.priority = new_tier;
        // With a new time the item leaves where it waits first: an item
        // in no state is refused before anything is written.
        if update.not_before_ms.is_some() {
            let found = self.take_delayed(id, rec.not_before_ms)?
                || self.take_held(id, &rec.flow, now)?
                || self.take_from_lane(Lane::Due, id)?
                || self.take_from_lane(Lane::Backlog, id)?;
            if !found {
                return Err(Error::corrupt(format!("item {id} is in no state")));
            }
        }
        if let Some(p) = &update.payload {
            // Keeps `payloads` consistent with the record: a payload lives
            // in one of the two, by its size, as an add puts it.
            self.remove_payloads([id])?;
            if p.len() <= INLINE_PAYLOAD_BYTES {
                rec.payload = Some(p.clone());
            } else {
                rec.payload = None;
                self.payloads_mut()?
                    .insert(id, p.as_slice())
                    .ctx("write payload")?;
            }
        }
        if let Some(nb) = update.not_before_ms {
            rec.not_before_ms = Some(nb);
            // Keeps the record consistent with its new timer (`find` and
            // the delayed lookup read it) before `enter` reads its flow.
            self.put_record(id, &rec)?;
            if nb > now {
                // Keeps `delayed` consistent: the timer fires at `nb`.
                self.delayed_mut()?
                    .insert((nb, id), ())
                    .ctx("write delayed")?;
            } else {
                // The due lane's arrival is the item's not_before, as a
                // promotion gives it (SPEC 3, Priority).
                self.enter(Lane::Due, id, new_tier, &rec.flow, nb, now)?;
            }
            return Ok(true);
        }
        self.put_record(id, &rec)?;
        if new_tier != old_tier {
            self.rerank(id, &rec.flow, old_tier, new_tier, now)?;
        }
        Ok(true)
    }

    /// Re-rank `id` where it waits in a ready lane (shared or its flow's
    /// held lane) for tier `new` instead of `old`: its key's rank moves by
    /// the tiers' difference, its arrival and position kept. Nothing for
    /// an item that is delayed or parked (its tier is in its record).
    fn rerank(&mut self, id: u64, flow: &str, old: u8, new: u8, now: u64) -> Result<()> {
        let step = self.limits.aging_step;
        if let Some((li, r, p)) = self.held_key_of(flow, id)? {
            let Some(rec) = self.limit_rec(flow)? else {
                return Ok(());
            };
            // Keeps `held` consistent: the same lane and position, the new
            // rank; `settle` puts the flow's head right (it may be this
            // item now, or no longer).
            self.held_mut()?
                .remove((flow, li, r, p))
                .ctx("delete held")?;
            self.held_mut()?
                .insert((flow, li, rerank(r, old, new, step), p), id)
                .ctx("write held")?;
            return self.settle(flow, rec, now);
        }
        for lane in [Lane::Due, Lane::Backlog] {
            if let Some(key) = self.lane_key_of(lane, id)? {
                // Keeps the ready lane consistent: one entry per item, at
                // its rank for its tier.
                let table = if lane == Lane::Due {
                    self.due_mut()?
                } else {
                    self.backlog_mut()?
                };
                table.remove(key).ctx("delete from lane")?;
                table
                    .insert((rerank(key.0, old, new, step), key.1), id)
                    .ctx("write ready lane")?;
                return Ok(());
            }
        }
        Ok(())
    }

    /// SPEC 3, Cancelling: the ids among `ids` that are pending and marked
    /// cancelled, ascending, each once.
    ///
    /// # Errors
    ///
    /// `Decode` for an unreadable lease; storage failures.
    pub(in crate::backend::embedded) fn cancelled_among(&self, ids: &[u64]) -> Result<Vec<u64>> {
        let mut out = Vec::new();
        for &id in ids {
            if self.lease(id)?.is_some_and(|l| l.cancelling) {
                out.push(id);
            }
        }
        out.sort_unstable();
        out.dedup();
        Ok(out)
    }

    fn take_dead(&mut self, id: u64) -> Result<bool> {
        let Some(seq) = self
            .dead_by_id()?
            .get(id)
            .ctx("read dead letter index")?
            .map(|g| g.value())
        else {
            return Ok(false);
        };
        // Keeps `dead` and `dead_by_id` consistent with each other: the
        // dead letter and its index entry go together.
        self.dead_mut()?.remove(seq).ctx("delete dead letter")?;
        self.dead_by_id_mut()?
            .remove(id)
            .ctx("delete dead letter index")?;
        Ok(true)
    }

    fn take_delayed(&mut self, id: u64, not_before: Option<u64>) -> Result<bool> {
        let Some(nb) = not_before else {
            return Ok(false);
        };
        if self.delayed()?.get((nb, id)).ctx("read delayed")?.is_none() {
            return Ok(false);
        }
        // Keeps `delayed` consistent: the timer of a removed item never
        // fires, and `next_due` no longer names it.
        self.delayed_mut()?.remove((nb, id)).ctx("delete delayed")?;
        Ok(true)
    }

    /// Take `id` out of `flow`'s held lanes, if it waits there: its held
    /// count goes down and [`Tables::settle`] puts the flow's head and
    /// timer right (or drops its record once nothing is set or held).
    fn take_held(&mut self, id: u64, flow: &str, now: u64) -> Result<bool> {
        let Some((li, r, p)) = self.held_key_of(flow, id)? else {
            return Ok(false);
        };
        let Some(mut rec) = self.limit_rec(flow)? else {
            return Ok(false);
        };
        // Keeps `held` consistent: the item leaves its flow's held lane.
        self.held_mut()?
            .remove((flow, li, r, p))
            .ctx("delete held")?;
        let mut st = FlowState::from_fields(rec.state);
        st.held = st.held.saturating_sub(1);
        rec.state = st.to_fields();
        // Keeps the flow's record (its held count, which `stats().limited`
        // and `flow_limits()` read), `heads` (the removed item may have
        // been the flow's head) and `limit_timers` consistent.
        self.settle(flow, rec, now)?;
        Ok(true)
    }

    /// Take `id` out of the shared `lane` (the backlog or the due lane),
    /// if it is there.
    fn take_from_lane(&mut self, lane: Lane, id: u64) -> Result<bool> {
        let Some(key) = self.lane_key_of(lane, id)? else {
            return Ok(false);
        };
        // Keeps the ready lanes (`due_ranked`, `backlog_ranked`)
        // consistent: no claim, peek or count meets the removed item.
        if lane == Lane::Due {
            self.due_mut()?
        } else {
            self.backlog_mut()?
        }
        .remove(key)
        .ctx("delete from lane")?;
        Ok(true)
    }

    /// The key of `id` in the shared `lane` (the backlog or the due lane),
    /// if it is there. The lanes are keyed by rank, so this walks the lane
    /// up to the item (an operator's call, as `find` is).
    fn lane_key_of(&self, lane: Lane, id: u64) -> Result<Option<(i64, u64)>> {
        let table = if lane == Lane::Due {
            self.due()?
        } else {
            self.backlog()?
        };
        for entry in table.iter().ctx("scan lane")? {
            let (k, v) = entry.ctx("scan lane")?;
            if v.value() == id {
                return Ok(Some(k.value()));
            }
        }
        Ok(None)
    }

    /// The position of `id` in `flow`'s parked list, if it is parked.
    fn parked_seq(&self, id: u64, flow: &str) -> Result<Option<u64>> {
        for row in self
            .parked()?
            .range((flow, 0u64)..=(flow, u64::MAX))
            .ctx("scan parked")?
        {
            let (k, v) = row.ctx("scan parked")?;
            if v.value() == id {
                return Ok(Some(k.value().1));
            }
        }
        Ok(None)
    }

    fn take_parked(&mut self, id: u64, flow: &str) -> Result<bool> {
        let Some(seq) = self.parked_seq(id, flow)? else {
            return Ok(false);
        };
        // Keeps `parked` consistent: the flow's parked list (what `step`,
        // `resume` and `parked` read) no longer names the item.
        self.parked_mut()?
            .remove((flow, seq))
            .ctx("delete parked")?;
        Ok(true)
    }

    /// SPEC 3, Flow limits: hold `flow` until `now + duration_ms` by the
    /// writer's clock, read inside this operation, unless a back-off that
    /// lasts at least as long is in force (then nothing is written).
    ///
    /// # Errors
    ///
    /// As [`Tables::set_flow_limit`]: `InvalidInput` for the default flow
    /// or a malformed flow name (nothing written).
    pub(in crate::backend::embedded) fn back_off(
        &mut self,
        flow: &str,
        duration_ms: u64,
        now: u64,
    ) -> Result<()> {
        let until = now.saturating_add(duration_ms);
        let change = FlowLimit::BackOffUntil(Some(until));
        check_limit(flow, &change)?;
        if let Some(rec) = self.limit_rec(flow)?
            && FlowState::from_fields(rec.state).backoff_until >= until
        {
            return Ok(());
        }
        // Keeps `flow_limits`, `heads` and `limit_timers` consistent, as
        // any change of a limit does.
        self.set_flow_limit(flow, change, now)
    }
}
