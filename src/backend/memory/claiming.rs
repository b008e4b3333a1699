//! SPEC 3, Claiming on the reference model: which item is handed out next, and
//! the lease it gets.

use super::{Lease, Model, lane_index};
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, Claimed, Lane, Receipt};

impl Model {
    pub(super) fn hand_out(&mut self, id: u64, lane: Lane, now_ms: u64) -> Option<Claimed> {
        let lease = self.next_lease;
        self.next_lease += 1;
        let item = self.items.get_mut(&id)?;
        item.deliveries = item.deliveries.saturating_add(1);
        let flow = item.flow.clone();
        if let Some(st) = self.limits.get_mut(&flow) {
            st.pending += 1;
        }
        self.tidy(&flow, now_ms);
        let item = self.items.get_mut(&id)?;
        self.pending.insert(
            id,
            Lease {
                claimed_at_ms: now_ms,
                touched_at_ms: now_ms,
                lease,
                lane,
                orphan: false,
                cancelling: false,
            },
        );
        Some(Claimed {
            item: item.clone(),
            lane,
            claimed_at_ms: now_ms,
            receipt: Receipt {
                id,
                delivery: item.deliveries,
                lease,
            },
        })
    }

    pub(super) fn flow_of(&self, id: u64) -> &str {
        self.items.get(&id).map(|i| i.flow.as_str()).unwrap_or("")
    }

    /// SPEC 3, Claiming, without the wait: promote, then take up to `count`.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `count == 0`.
    pub fn claim(&mut self, count: usize, from: ClaimFrom, now_ms: u64) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        self.promote_due(now_ms);
        let mut out = Vec::new();
        let lanes: &[Lane] = match from {
            ClaimFrom::All => &[Lane::Due, Lane::Backlog],
            ClaimFrom::DueOnly => &[Lane::Due],
        };
        for &lane in lanes {
            while out.len() < count {
                let shared = match lane {
                    Lane::Due => self.due.first_key_value(),
                    _ => self.backlog.first_key_value(),
                }
                .map(|(k, id)| (*k, *id));
                let held = self.first_held(lane, now_ms);
                // SPEC 3, Flow limits: the lanes and the held lanes of the
                // flows that may run, merged in rank order.
                let from_held = match (&shared, &held) {
                    (None, None) => break,
                    (Some((ks, _)), Some((kh, _, _))) => kh < ks,
                    (None, Some(_)) => true,
                    (Some(_), None) => false,
                };
                if let (true, Some((key, flow, id))) = (from_held, held) {
                    let cost = self.cost_of(id);
                    let Some(st) = self.limits.get_mut(&flow) else {
                        break;
                    };
                    if !st.fits(cost, now_ms) {
                        st.forfeit();
                        continue;
                    }
                    st.held = st.held.saturating_sub(1);
                    if let Some(m) = self.held.get_mut(&flow) {
                        m.remove(&(lane_index(lane), key.0, key.1));
                        if m.is_empty() {
                            self.held.remove(&flow);
                        }
                    }
                    if self.paused.contains(&flow) {
                        self.parked.entry(flow.clone()).or_default().push_back(id);
                    } else {
                        if let Some(st) = self.limits.get_mut(&flow) {
                            st.charge(cost, now_ms);
                        }
                        if let Some(c) = self.hand_out(id, lane, now_ms) {
                            out.push(c);
                        }
                    }
                    self.tidy(&flow, now_ms);
                    continue;
                }
                let Some((key, id)) = shared else { break };
                match lane {
                    Lane::Due => self.due.remove(&key),
                    _ => self.backlog.remove(&key),
                };
                let flow = self.flow_of(id).to_string();
                let cost = self.cost_of(id);
                if let Some(st) = self.limits.get_mut(&flow) {
                    let may = st.claimable(now_ms);
                    if !may || !st.fits(cost, now_ms) {
                        if may {
                            st.forfeit();
                        }
                        // Set aside in its place until the flow may run.
                        st.held += 1;
                        self.held
                            .entry(flow)
                            .or_default()
                            .insert((lane_index(lane), key.0, key.1), id);
                        continue;
                    }
                }
                if self.paused.contains(&flow) {
                    self.parked.entry(flow.clone()).or_default().push_back(id);
                } else {
                    if let Some(st) = self.limits.get_mut(&flow) {
                        st.charge(cost, now_ms);
                    }
                    if let Some(c) = self.hand_out(id, lane, now_ms) {
                        out.push(c);
                    }
                }
                self.tidy(&flow, now_ms);
            }
        }
        Ok(out)
    }
}
