//! SPEC 3, Flow limits, in the embedded file: the state moves of rate
//! limits, concurrency caps and back-off.
//!
//! An item of a flow with a limit record waits in the flow's own held lane
//! (`held`, keyed by flow, lane, rank and position, so it keeps its place
//! and tier). `heads` names the first held item of each lane of every flow
//! its limits let run now, so a claim merges the shared lanes with the
//! heads and never walks a held flow's items to get past them;
//! `limit_timers` names when a held flow's back-off or rate window ends.
//! Each flow's record keeps its heads and timer keys so that
//! [`Tables::settle`] can put both indexes right after every change.

use std::collections::HashMap;

use redb::{ReadableTable, ReadableTableMetadata};

use super::{Ctx, Tables};
use crate::backend::embedded::codec::{self, LimitRecord};
use crate::config::rank_back;
use crate::error::Result;
use crate::item::{Claimed, Item, Lane};
use crate::limit::{FlowLimit, FlowLimits, FlowState, check_limit};

/// The lane index of the held lanes and heads: the due lane sorts first.
pub(super) fn lane_index(lane: Lane) -> u8 {
    u8::from(lane != Lane::Due)
}

fn state(rec: &LimitRecord) -> FlowState {
    FlowState::from_fields(rec.state)
}

type HeldKey<'a> = (&'a str, u8, i64, u64);

impl<'t> Tables<'t> {
    /// How many items wait in held lanes.
    pub(super) fn held_len(&self) -> Result<u64> {
        if !self.has_limits()? {
            return Ok(0);
        }
        self.held_t()?.len().ctx("count held")
    }

    /// Whether any flow has a limit record (one O(1) read).
    pub(super) fn has_limits(&self) -> Result<bool> {
        Ok(!self.flow_limits_t()?.is_empty().ctx("read flow limits")?)
    }

    pub(super) fn limit_rec(&self, flow: &str) -> Result<Option<LimitRecord>> {
        match self.flow_limits_t()?.get(flow).ctx("read flow limit")? {
            Some(v) => Ok(Some(codec::decode(
                format_args!("flow_limits[{flow:?}]"),
                v.value(),
            )?)),
            None => Ok(None),
        }
    }

    fn held_first(&self, flow: &str, li: u8) -> Result<Option<(i64, u64)>> {
        let lo: HeldKey<'_> = (flow, li, i64::MIN, 0);
        let hi: HeldKey<'_> = (flow, li, i64::MAX, u64::MAX);
        let mut range = self.held_t()?.range(lo..=hi).ctx("read held")?;
        match range.next() {
            Some(entry) => {
                let (k, _) = entry.ctx("read held")?;
                let k = k.value();
                Ok(Some((k.2, k.3)))
            }
            None => Ok(None),
        }
    }

    /// Put the heads and timer entries of `flow` right for `rec` at `now`
    /// and store it, or drop the record once nothing is set or held.
    pub(super) fn settle(&mut self, flow: &str, rec: LimitRecord, now: u64) -> Result<()> {
        self.settle_record(flow, rec, now, true)
    }

    /// [`Tables::settle`], dropping an idle record only if `drop_idle`: a
    /// clock step keeps every record, as the reference model and the Redis
    /// backend do, so that items added next go where theirs go.
    fn settle_record(
        &mut self,
        flow: &str,
        mut rec: LimitRecord,
        now: u64,
        drop_idle: bool,
    ) -> Result<()> {
        let st = state(&rec);
        let idle = st.idle(now);
        let may = st.claimable(now);
        for li in 0..2u8 {
            let want = if may && !idle {
                self.held_first(flow, li)?
            } else {
                None
            };
            let have = rec.heads[usize::from(li)];
            if want != have {
                if let Some((r, p)) = have {
                    self.heads_mut()?.remove((li, r, p)).ctx("delete head")?;
                }
                if let Some((r, p)) = want {
                    self.heads_mut()?
                        .insert((li, r, p), flow)
                        .ctx("write head")?;
                }
                rec.heads[usize::from(li)] = want;
            }
        }
        let want = if !may && !idle && st.held > 0 {
            st.lifts_at(now)
        } else {
            None
        };
        if want != rec.timer {
            if let Some(t) = rec.timer {
                self.timers_mut()?
                    .remove((t, flow))
                    .ctx("delete limit timer")?;
            }
            if let Some(t) = want {
                self.timers_mut()?
                    .insert((t, flow), ())
                    .ctx("write limit timer")?;
            }
            rec.timer = want;
        }
        if idle && drop_idle {
            self.flow_limits_mut()?
                .remove(flow)
                .ctx("delete flow limit")?;
        } else {
            let bytes = codec::encode(&rec)?;
            self.flow_limits_mut()?
                .insert(flow, bytes.as_slice())
                .ctx("write flow limit")?;
        }
        Ok(())
    }

    /// Settle every flow whose timer has come (its back-off or rate window
    /// ended by `now`): its held items come back to the heads.
    pub(super) fn lift_due(&mut self, now: u64) -> Result<()> {
        let mut due = Vec::new();
        for entry in self
            .timers_t()?
            .range(..(now.saturating_add(1), ""))
            .ctx("read limit timers")?
        {
            due.push(entry.ctx("read limit timers")?.0.value().1.to_string());
        }
        for flow in due {
            if let Some(rec) = self.limit_rec(&flow)? {
                self.settle(&flow, rec, now)?;
            }
        }
        Ok(())
    }

    /// An item entering a ready lane at `key`: into its flow's held lane if
    /// the flow has a limit record. Returns whether it went there.
    pub(super) fn enter_held(
        &mut self,
        lane: Lane,
        id: u64,
        flow: &str,
        key: (i64, u64),
        now: u64,
    ) -> Result<bool> {
        if !self.has_limits()? {
            return Ok(false);
        }
        let Some(mut rec) = self.limit_rec(flow)? else {
            return Ok(false);
        };
        self.hold(lane, id, flow, key, &mut rec)?;
        self.settle(flow, rec, now)?;
        Ok(true)
    }

    fn hold(
        &mut self,
        lane: Lane,
        id: u64,
        flow: &str,
        key: (i64, u64),
        rec: &mut LimitRecord,
    ) -> Result<()> {
        self.held_mut()?
            .insert((flow, lane_index(lane), key.0, key.1), id)
            .ctx("write held")?;
        let mut st = state(rec);
        st.held += 1;
        rec.state = st.to_fields();
        Ok(())
    }

    /// `n` items of `flow` entered (`up`) or left pending.
    pub(super) fn note_pending(&mut self, flow: &str, up: bool, n: u64, now: u64) -> Result<()> {
        if !self.has_limits()? {
            return Ok(());
        }
        let Some(mut rec) = self.limit_rec(flow)? else {
            return Ok(());
        };
        let mut st = state(&rec);
        st.pending = if up {
            st.pending.saturating_add(n)
        } else {
            st.pending.saturating_sub(n)
        };
        rec.state = st.to_fields();
        self.settle(flow, rec, now)
    }

    /// The first head of `lane`: the flow that may run whose held item
    /// ranks first.
    pub(super) fn first_head(&self, lane: Lane) -> Result<Option<((i64, u64), String)>> {
        let li = lane_index(lane);
        let mut range = self
            .heads_t()?
            .range((li, i64::MIN, 0u64)..=(li, i64::MAX, u64::MAX))
            .ctx("read heads")?;
        match range.next() {
            Some(entry) => {
                let (k, v) = entry.ctx("read heads")?;
                let k = k.value();
                Ok(Some(((k.1, k.2), v.value().to_string())))
            }
            None => Ok(None),
        }
    }

    /// Claim the held item at `key` of `flow` (the first head of `lane`):
    /// hand it out, park it (paused flow), or, when it does not fit in
    /// what is left of the rate window, leave it and hold the flow.
    pub(super) fn claim_head(
        &mut self,
        lane: Lane,
        flow: &str,
        key: (i64, u64),
        now: u64,
    ) -> Result<Option<Claimed>> {
        let li = lane_index(lane);
        let held_key: HeldKey<'_> = (flow, li, key.0, key.1);
        let id = self
            .held_t()?
            .get(held_key)
            .ctx("read held")?
            .map(|v| v.value());
        let (Some(mut rec), Some(id)) = (self.limit_rec(flow)?, id) else {
            // A head without its record or item: drop it.
            self.heads_mut()?
                .remove((li, key.0, key.1))
                .ctx("delete head")?;
            return Ok(None);
        };
        let cost = self.record(id)?.cost.max(1);
        let mut st = state(&rec);
        if !st.fits(cost, now) {
            st.forfeit();
            rec.state = st.to_fields();
            self.settle(flow, rec, now)?;
            return Ok(None);
        }
        self.held_mut()?.remove(held_key).ctx("delete held")?;
        st.held = st.held.saturating_sub(1);
        if self.is_paused(flow)? {
            rec.state = st.to_fields();
            self.settle(flow, rec, now)?;
            self.park_id(flow, id)?;
            return Ok(None);
        }
        st.charge(cost, now);
        rec.state = st.to_fields();
        self.settle(flow, rec, now)?;
        Ok(Some(self.hand_out(id, lane, now)?))
    }

    /// An item taken from a shared lane at `key`, of a flow that may have
    /// a limit record: `Some(true)` when the flow's limits hold it (it is
    /// now in the held lane), `Some(false)` when it may run and was
    /// charged, `None` when the flow has no record.
    pub(super) fn limit_shared(
        &mut self,
        lane: Lane,
        id: u64,
        flow: &str,
        cost: u32,
        key: (i64, u64),
        now: u64,
    ) -> Result<Option<bool>> {
        let Some(mut rec) = self.limit_rec(flow)? else {
            return Ok(None);
        };
        let mut st = state(&rec);
        let may = st.claimable(now);
        if !may || !st.fits(cost, now) {
            if may {
                st.forfeit();
                rec.state = st.to_fields();
            }
            self.hold(lane, id, flow, key, &mut rec)?;
            self.settle(flow, rec, now)?;
            return Ok(Some(true));
        }
        if !self.is_paused(flow)? {
            st.charge(cost, now);
            rec.state = st.to_fields();
        }
        self.settle(flow, rec, now)?;
        Ok(Some(false))
    }

    /// SPEC 3, Flow limits: set, change or clear one limit of `flow`.
    pub(in crate::backend::embedded) fn set_flow_limit(
        &mut self,
        flow: &str,
        change: FlowLimit,
        now: u64,
    ) -> Result<()> {
        check_limit(flow, &change)?;
        let mut rec = match self.limit_rec(flow)? {
            Some(rec) => rec,
            None => {
                let mut pending = 0u64;
                let mut ids = Vec::new();
                for entry in self.pending()?.iter().ctx("scan leases")? {
                    ids.push(entry.ctx("scan leases")?.0.value());
                }
                for id in ids {
                    if self.record(id)?.flow == flow {
                        pending += 1;
                    }
                }
                LimitRecord {
                    state: FlowState {
                        pending,
                        ..FlowState::default()
                    }
                    .to_fields(),
                    heads: [None, None],
                    timer: None,
                }
            }
        };
        let mut st = state(&rec);
        st.apply(change, now);
        rec.state = st.to_fields();
        self.settle(flow, rec, now)
    }

    fn limit_records(&self) -> Result<Vec<(String, FlowState)>> {
        let mut out = Vec::new();
        for entry in self.flow_limits_t()?.iter().ctx("scan flow limits")? {
            let (k, v) = entry.ctx("scan flow limits")?;
            let flow = k.value().to_string();
            let rec: LimitRecord = codec::decode(format_args!("flow_limits[{flow:?}]"), v.value())?;
            out.push((flow, state(&rec)));
        }
        Ok(out)
    }

    /// SPEC 3, Flow limits: every flow with a limit in force, by name.
    pub(in crate::backend::embedded) fn flow_limits_list(
        &self,
        now: u64,
    ) -> Result<Vec<FlowLimits>> {
        Ok(self
            .limit_records()?
            .into_iter()
            .filter(|(_, st)| st.in_force(now))
            .map(|(f, st)| st.listing(&f, now))
            .collect())
    }

    /// SPEC 12.1: the ids waiting in the held lanes of lane `li` (0 due,
    /// 1 backlog), flow by flow in name order, each in rank order: one
    /// range read per flow with a limit record, nothing copied.
    ///
    /// # Errors
    ///
    /// Storage failures, as the iterator's items.
    pub(super) fn held_ids<'s>(&'s self, li: u8) -> Result<impl Iterator<Item = Result<u64>> + 's> {
        let what = "list held items";
        let held = self.held_t()?;
        let flows = self.flow_limits_t()?.iter().ctx(what)?;
        Ok(
            flows.flat_map(move |row| -> Box<dyn Iterator<Item = Result<u64>> + 's> {
                let lane = row.ctx(what).and_then(|(k, _)| {
                    let flow = k.value();
                    let lo: HeldKey<'_> = (flow, li, i64::MIN, 0);
                    let hi: HeldKey<'_> = (flow, li, i64::MAX, u64::MAX);
                    held.range(lo..=hi).ctx(what)
                });
                match lane {
                    Ok(r) => Box::new(r.map(move |e| e.ctx(what).map(|(_, v)| v.value()))),
                    Err(e) => Box::new(std::iter::once(Err(e))),
                }
            }),
        )
    }

    /// SPEC 12.1: the held lane (0 due, 1 backlog) of `flow` holding `id`,
    /// if any; walks that flow's held lanes only.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn held_lane_of(&self, flow: &str, id: u64) -> Result<Option<u8>> {
        Ok(self.held_key_of(flow, id)?.map(|(li, _, _)| li))
    }

    /// The key (lane 0 due or 1 backlog, rank, position) under which `id`
    /// waits in `flow`'s held lanes, if it does; walks that flow's held
    /// lanes only.
    ///
    /// # Errors
    ///
    /// Storage failures.
    pub(super) fn held_key_of(&self, flow: &str, id: u64) -> Result<Option<(u8, i64, u64)>> {
        let what = "find a held item";
        if flow.is_empty() || !self.has_limits()? || self.limit_rec(flow)?.is_none() {
            return Ok(None);
        }
        let lo: HeldKey<'_> = (flow, 0, i64::MIN, 0);
        let hi: HeldKey<'_> = (flow, 1, i64::MAX, u64::MAX);
        for entry in self.held_t()?.range(lo..=hi).ctx(what)? {
            let (k, v) = entry.ctx(what)?;
            if v.value() == id {
                let k = k.value();
                return Ok(Some((k.1, k.2, k.3)));
            }
        }
        Ok(None)
    }

    /// Stats: (held items, of them in the due lane, held by limits now).
    pub(super) fn held_counts(&self, now: u64) -> Result<(u64, u64, u64)> {
        if !self.has_limits()? {
            return Ok((0, 0, 0));
        }
        let total = self.held_t()?.len().ctx("count held")?;
        let mut due = 0;
        let mut limited = 0;
        for (flow, st) in self.limit_records()? {
            if st.held > 0 && !st.claimable(now) {
                limited += st.held;
            }
            let lo: HeldKey<'_> = (&flow, 0, i64::MIN, 0);
            let hi: HeldKey<'_> = (&flow, 0, i64::MAX, u64::MAX);
            for entry in self.held_t()?.range(lo..=hi).ctx("count held")? {
                entry.ctx("count held")?;
                due += 1;
            }
        }
        Ok((total, due, limited))
    }

    /// When a claim that found nothing may find something: the next
    /// timer, or the next end of a back-off or rate window holding a flow.
    pub(in crate::backend::embedded) fn next_wake(&self) -> Result<Option<u64>> {
        let due = self.next_due()?;
        let lift = if self.has_limits()? {
            self.next_limit_timer()?
        } else {
            None
        };
        Ok(match (due, lift) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        })
    }

    /// The soonest limit timer (a held flow's back-off or window end).
    pub(super) fn next_limit_timer(&self) -> Result<Option<u64>> {
        Ok(self
            .timers_t()?
            .first()
            .ctx("read limit timers")?
            .map(|(k, _)| k.value().0))
    }

    /// SPEC 3, Clock steps: move the held lanes' ranks and the records'
    /// times back by `back`, then settle each flow again.
    pub(super) fn shift_limits(&mut self, back: u64, now: u64) -> Result<()> {
        if !self.has_limits()? {
            return Ok(());
        }
        let mut held = Vec::new();
        while let Some((k, v)) = self
            .held_mut()?
            .pop_first()
            .ctx("move held")?
            .map(|(k, v)| {
                let k = k.value();
                ((k.0.to_string(), k.1, k.2, k.3), v.value())
            })
        {
            held.push((k, v));
        }
        for ((flow, li, r, p), id) in held {
            self.held_mut()?
                .insert((flow.as_str(), li, rank_back(r, back), p), id)
                .ctx("move held")?;
        }
        while self.heads_mut()?.pop_first().ctx("move heads")?.is_some() {}
        while self
            .timers_mut()?
            .pop_first()
            .ctx("move limit timers")?
            .is_some()
        {}
        for (flow, mut st) in self.limit_records()? {
            st.shift_back(back);
            let rec = LimitRecord {
                state: st.to_fields(),
                heads: [None, None],
                timer: None,
            };
            self.settle_record(&flow, rec, now, false)?;
        }
        Ok(())
    }

    /// Peek and backlog-by-flow with limits (SPEC 3, Flow limits): the
    /// claim order of [`Tables::claim_order`], with the held items of the
    /// flows that may run in their places and the items of flows held now
    /// left out.
    pub(super) fn claim_order_limited(
        &self,
        limit: usize,
        now: u64,
        skip_paused: bool,
        ready: Vec<((i64, u64), Item)>,
    ) -> Result<Vec<Item>> {
        let states: HashMap<String, FlowState> = self.limit_records()?.into_iter().collect();
        let paused = self.paused_flows()?;
        let keep = |item: &Item| {
            states.get(&item.flow).is_none_or(|st| st.claimable(now))
                && !(skip_paused && paused.contains(&item.flow))
        };
        let mut out = Vec::new();
        let mut ready = Some(ready);
        for lane in [Lane::Due, Lane::Backlog] {
            let li = lane_index(lane);
            let mut cands: Vec<((i64, u64), Item)> = Vec::new();
            let table = if lane == Lane::Due {
                self.due()?
            } else {
                self.backlog()?
            };
            let mut kept = 0;
            for entry in table.iter().ctx("scan lane")? {
                if kept >= limit {
                    break;
                }
                let (k, v) = entry.ctx("scan lane")?;
                let item = self.item(v.value())?;
                if keep(&item) {
                    kept += 1;
                    cands.push((k.value(), item));
                }
            }
            if lane == Lane::Due {
                cands.extend(
                    ready
                        .take()
                        .unwrap_or_default()
                        .into_iter()
                        .filter(|(_, i)| keep(i)),
                );
            }
            for (flow, st) in &states {
                if !st.claimable(now) || (skip_paused && paused.contains(flow)) {
                    continue;
                }
                let lo: HeldKey<'_> = (flow, li, i64::MIN, 0);
                let hi: HeldKey<'_> = (flow, li, i64::MAX, u64::MAX);
                for entry in self.held_t()?.range(lo..=hi).ctx("scan held")?.take(limit) {
                    let (k, v) = entry.ctx("scan held")?;
                    let k = k.value();
                    cands.push(((k.2, k.3), self.item(v.value())?));
                }
            }
            cands.sort_by_key(|(k, _)| *k);
            for (_, item) in cands {
                if out.len() >= limit {
                    return Ok(out);
                }
                out.push(item);
            }
        }
        Ok(out)
    }

    /// Test support: every held item, with its lane.
    #[cfg(feature = "testing")]
    pub(super) fn held_items(&self) -> Result<Vec<(u64, Lane)>> {
        let mut out = Vec::new();
        for entry in self.held_t()?.iter().ctx("scan held")? {
            let (k, v) = entry.ctx("scan held")?;
            let lane = if k.value().1 == 0 {
                Lane::Due
            } else {
                Lane::Backlog
            };
            out.push((v.value(), lane));
        }
        Ok(out)
    }
}
