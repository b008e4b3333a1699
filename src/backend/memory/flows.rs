//! SPEC 3, Flows and Flow limits on the reference model: pause, park, step,
//! clear, and the limits that hold a flow's items aside.

use super::{Model, lane_index};
use crate::error::Result;
use crate::item::{Claimed, Lane, Receipt, require_flow};
use crate::limit::{FlowLimit, FlowLimits, FlowState, check_limit};

impl Model {
    /// SPEC 3, Flow limits: set, change or clear one limit of `flow`.
    ///
    /// # Errors
    ///
    /// `InvalidInput`: the default flow, a malformed name, a rate of 0
    /// permits or period, a cap of 0.
    pub fn set_flow_limit(&mut self, flow: &str, limit: FlowLimit, now_ms: u64) -> Result<()> {
        check_limit(flow, &limit)?;
        if !self.limits.contains_key(flow) {
            let pending = self
                .pending
                .keys()
                .filter(|id| self.flow_of(**id) == flow)
                .count() as u64;
            self.limits.insert(
                flow.to_string(),
                FlowState {
                    pending,
                    ..FlowState::default()
                },
            );
        }
        if let Some(st) = self.limits.get_mut(flow) {
            st.apply(limit, now_ms);
        }
        self.tidy(flow, now_ms);
        Ok(())
    }

    /// SPEC 3, Flow limits: hold `flow` until `now_ms + duration_ms`,
    /// unless a longer back-off is in force (then nothing changes).
    ///
    /// # Errors
    ///
    /// As [`Model::set_flow_limit`].
    pub fn back_off(&mut self, flow: &str, duration_ms: u64, now_ms: u64) -> Result<()> {
        let until = now_ms.saturating_add(duration_ms);
        check_limit(flow, &FlowLimit::BackOffUntil(Some(until)))?;
        let current = self.limits.get(flow).map_or(0, |st| st.backoff_until);
        if current >= until {
            return Ok(());
        }
        self.set_flow_limit(flow, FlowLimit::BackOffUntil(Some(until)), now_ms)
    }

    /// Whether any flow has a limit record.
    pub fn has_limits(&self) -> bool {
        !self.limits.is_empty()
    }

    /// SPEC 3, Flow limits: every flow with a limit in force.
    pub fn flow_limits(&self, now_ms: u64) -> Vec<FlowLimits> {
        self.limits
            .iter()
            .filter(|(_, st)| st.in_force(now_ms))
            .map(|(f, st)| st.listing(f, now_ms))
            .collect()
    }

    /// The soonest time a claim may find more than now: the next timer, or
    /// the end of a back-off or rate window holding a flow with held items.
    pub fn next_wake(&self, now_ms: u64) -> Option<u64> {
        let lifts = self
            .limits
            .values()
            .filter(|st| st.held > 0 && !st.claimable(now_ms))
            .filter_map(|st| st.lifts_at(now_ms))
            .min();
        match (self.next_due(), lifts) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// The first held item of a flow that may run now, in `lane`.
    pub(super) fn first_held(&self, lane: Lane, now_ms: u64) -> Option<((i64, u64), String, u64)> {
        let li = lane_index(lane);
        self.held
            .iter()
            .filter(|(f, _)| self.limits.get(*f).is_some_and(|st| st.claimable(now_ms)))
            .filter_map(|(f, m)| {
                m.range((li, i64::MIN, 0)..=(li, i64::MAX, u64::MAX))
                    .next()
                    .map(|(k, id)| ((k.1, k.2), f.clone(), *id))
            })
            .min()
    }

    /// SPEC 3, Flows: pause.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow.
    pub fn pause(&mut self, flow: &str) -> Result<()> {
        require_flow(flow)?;
        self.paused.insert(flow.to_string());
        Ok(())
    }

    /// SPEC 3, Flows: resume.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow.
    pub fn resume(&mut self, flow: &str, now_ms: u64) -> Result<u64> {
        require_flow(flow)?;
        self.paused.remove(flow);
        let ids = self.parked.remove(flow).unwrap_or_default();
        let n = ids.len() as u64;
        for id in ids {
            self.enter(Lane::Backlog, id, now_ms);
        }
        Ok(n)
    }

    /// SPEC 3, Flows: park.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `InvalidInput` for an item of the default flow.
    pub fn park(&mut self, r: Receipt, now_ms: u64) -> Result<()> {
        self.fence(&r, now_ms)?;
        let flow = self.flow_of(r.id).to_string();
        require_flow(&flow)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        self.parked.entry(flow).or_default().push_back(r.id);
        Ok(())
    }

    /// SPEC 3, Flows: step.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow.
    pub fn step(&mut self, flow: &str, now_ms: u64) -> Result<Option<Claimed>> {
        require_flow(flow)?;
        let Some(list) = self.parked.get_mut(flow) else {
            return Ok(None);
        };
        let Some(id) = list.pop_front() else {
            return Ok(None);
        };
        if list.is_empty() {
            self.parked.remove(flow);
        }
        Ok(self.hand_out(id, Lane::Parked, now_ms))
    }

    /// SPEC 3, Flows: clear_flow.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for an empty flow.
    pub fn clear_flow(&mut self, flow: &str) -> Result<u64> {
        require_flow(flow)?;
        self.paused.remove(flow);
        let ids = self.parked.remove(flow).unwrap_or_default();
        for id in &ids {
            self.items.remove(id);
            self.progress.remove(id);
            self.chunks.remove(id);
        }
        Ok(ids.len() as u64)
    }

    /// SPEC 3, Flows: parked count of one flow.
    pub fn parked(&self, flow: &str) -> u64 {
        self.parked.get(flow).map_or(0, |l| l.len() as u64)
    }

    /// SPEC 3, Flows: the paused flows, sorted.
    pub fn paused_flows(&self) -> Vec<String> {
        self.paused.iter().cloned().collect()
    }
}
