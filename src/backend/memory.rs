//! The `memory` backend: the reference model of SPEC.md.
//!
//! Plain collections behind one mutex, no persistence (`stats().durable` is
//! false). [`Model`] is the synchronous state machine; [`MemoryQueue`] wraps
//! it with a clock, a lock and wake-ups for blocking claims. Property tests use
//! [`Model`] directly as the reference every other backend is compared with,
//! so it is written to be obviously right rather than fast. [`Model`] and
//! [`Location`] are public only under the `testing` feature
//! (`workjournal::testing::{Model, Location}`).

// Without `testing`, `Model` and `Location` are crate-private in all but name.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::sync::Notify;

use crate::clock::{SharedClock, SystemClock};
use crate::config::{Config, MEMORY_DONE_MARKER_CAP, ms, rank, rank_back};
use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, Lane, MAX_DELIVERIES_REASON, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats, check_new_item, require_flow,
};
use crate::limit::{FlowLimit, FlowLimits, FlowState, check_limit};
use crate::outcome::{Chunk, Outcome, OutcomeKind, check_size};
use crate::queue::WorkQueue;

mod browse;

/// A pending item's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    claimed_at_ms: u64,
    lease: u64,
    lane: Lane,
    /// Claimed before the last [`Model::reopen`]: stale whatever `min_idle`.
    orphan: bool,
}

/// Where an item is, for invariant checks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Location {
    /// In the backlog.
    Backlog,
    /// In the due lane.
    Due,
    /// Waiting in delayed.
    Delayed,
    /// Claimed, not acknowledged.
    Pending,
    /// Parked for its flow.
    Parked,
    /// A dead letter.
    DeadLetter,
}

impl Location {
    /// Where an item in a flow's held lane counts (SPEC 3, Flow limits):
    /// in the due lane (`due`) or the backlog it was held from.
    pub(crate) fn held(due: bool) -> Location {
        if due {
            Location::Due
        } else {
            Location::Backlog
        }
    }
}

/// The reference state machine: every operation of SPEC section 3 as a plain
/// synchronous method taking `now_ms` (ms since the Unix epoch).
#[derive(Debug, Clone)]
pub struct Model {
    config: Config,
    durable: bool,
    next_id: u64,
    next_lease: u64,
    items: BTreeMap<u64, Item>,
    /// (rank, position) -> id: SPEC 3, Priority.
    backlog: BTreeMap<(i64, u64), u64>,
    /// (rank, position) -> id, ranked by the arrival in the lane.
    due: BTreeMap<(i64, u64), u64>,
    /// The position counter of both lanes.
    next_seq: u64,
    /// The latest arrival time given in the backlog and in the due lane:
    /// arrivals never go back, so a clock that steps back keeps FIFO.
    backlog_clock: u64,
    due_clock: u64,
    delayed: BTreeSet<(u64, u64)>,
    pending: BTreeMap<u64, Lease>,
    parked: BTreeMap<String, VecDeque<u64>>,
    paused: BTreeSet<String>,
    done: BTreeMap<(u64, String), u64>,
    done_order: BTreeSet<(u64, u64, String)>,
    dedup: HashMap<String, (u64, u64)>,
    dead: VecDeque<(u64, String, u64)>,
    /// id -> (outcome, expires_at_ms).
    outcomes: BTreeMap<u64, (Outcome, u64)>,
    /// (expires_at_ms, id) of every outcome.
    outcome_expiry: BTreeSet<(u64, u64)>,
    progress: BTreeMap<u64, Vec<u8>>,
    chunks: BTreeMap<u64, Vec<Chunk>>,
    /// Dead letters dropped past `dead_letter_cap`, ever.
    dead_dropped: u64,
    /// The latest time the queue has seen, for noticing a clock step back.
    latest_ms: u64,
    /// SPEC 3, Flow limits: the record of every flow with limits.
    limits: BTreeMap<String, FlowState>,
    /// Items set aside for their flow's limits, keeping their lane and
    /// place: flow -> (lane: 0 due, 1 backlog; rank; position) -> id.
    held: BTreeMap<String, BTreeMap<(u8, i64, u64), u64>>,
}

/// The lane index of the held lanes: the due lane sorts first.
fn lane_index(lane: Lane) -> u8 {
    u8::from(lane != Lane::Due)
}

impl Model {
    /// An empty queue with `config` (its clock is ignored: callers pass now).
    pub fn new(config: Config) -> Self {
        Model {
            config,
            durable: false,
            next_id: 1,
            next_lease: 1,
            items: BTreeMap::new(),
            backlog: BTreeMap::new(),
            due: BTreeMap::new(),
            next_seq: 1,
            backlog_clock: 0,
            due_clock: 0,
            delayed: BTreeSet::new(),
            pending: BTreeMap::new(),
            parked: BTreeMap::new(),
            paused: BTreeSet::new(),
            done: BTreeMap::new(),
            done_order: BTreeSet::new(),
            dedup: HashMap::new(),
            dead: VecDeque::new(),
            outcomes: BTreeMap::new(),
            outcome_expiry: BTreeSet::new(),
            progress: BTreeMap::new(),
            chunks: BTreeMap::new(),
            dead_dropped: 0,
            latest_ms: 0,
            limits: BTreeMap::new(),
            held: BTreeMap::new(),
        }
    }

    /// Make `stats().durable` report `durable` (a model standing in for a
    /// durable backend in comparisons).
    pub fn with_durable(mut self, durable: bool) -> Self {
        self.durable = durable;
        self
    }

    /// The configuration.
    pub fn config(&self) -> &Config {
        &self.config
    }

    fn waiting(&self) -> u64 {
        (self.backlog.len() + self.due.len() + self.delayed.len()) as u64 + self.held_total()
    }

    fn held_total(&self) -> u64 {
        self.held.values().map(|m| m.len() as u64).sum()
    }

    fn held_due(&self) -> u64 {
        self.held
            .values()
            .map(|m| m.keys().filter(|k| k.0 == 0).count() as u64)
            .sum()
    }

    /// SPEC 3, Priority: put `id` at its place in `lane` (the backlog or
    /// the due lane), arriving at `arrival_ms` or at the lane's latest
    /// arrival so far if that is later (the clock stepped back, or a
    /// promoted timer was older than the last one).
    fn enter(&mut self, lane: Lane, id: u64, arrival_ms: u64) {
        let tier = self.items.get(&id).map_or(0, |i| i.priority);
        let flow = self.flow_of(id).to_string();
        let seq = self.next_seq;
        self.next_seq += 1;
        let (clock, map) = match lane {
            Lane::Due => (&mut self.due_clock, &mut self.due),
            _ => (&mut self.backlog_clock, &mut self.backlog),
        };
        let arrival = arrival_ms.max(*clock);
        *clock = arrival;
        let key = (rank(arrival, tier, self.config.aging_step), seq);
        // SPEC 3, Flow limits: an item of a flow with limits waits in the
        // flow's own held lane, in the same place.
        if let Some(st) = self.limits.get_mut(&flow) {
            st.held += 1;
            self.held
                .entry(flow)
                .or_default()
                .insert((lane_index(lane), key.0, key.1), id);
            return;
        }
        map.insert(key, id);
    }

    fn cost_of(&self, id: u64) -> u32 {
        self.items.get(&id).map_or(1, |i| i.cost.max(1))
    }

    /// SPEC 3, Flow limits: an item of `id`'s flow left pending.
    fn left_pending(&mut self, id: u64, now_ms: u64) {
        let flow = self.flow_of(id).to_string();
        if let Some(st) = self.limits.get_mut(&flow) {
            st.pending = st.pending.saturating_sub(1);
        }
        self.tidy(&flow, now_ms);
    }

    /// Drop `flow`'s record once nothing is set or held.
    fn tidy(&mut self, flow: &str, now_ms: u64) {
        if self.limits.get(flow).is_some_and(|st| st.idle(now_ms)) {
            self.limits.remove(flow);
            self.held.remove(flow);
        }
    }

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
    fn first_held(&self, lane: Lane, now_ms: u64) -> Option<((i64, u64), String, u64)> {
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

    fn expire(&mut self, now_ms: u64) {
        self.dedup.retain(|_, (_, expires)| *expires > now_ms);
        while let Some((expires, id, step)) = self.done_order.first().cloned() {
            if expires > now_ms {
                break;
            }
            self.done_order.pop_first();
            self.done.remove(&(id, step));
        }
        while let Some(&(expires, id)) = self.outcome_expiry.first() {
            if expires > now_ms {
                break;
            }
            self.outcome_expiry.pop_first();
            self.outcomes.remove(&id);
            self.progress.remove(&id);
            self.chunks.remove(&id);
        }
    }

    /// SPEC 3, Outcomes and progress: keep how item `id` finished for `result_ttl`.
    fn finish(&mut self, id: u64, kind: OutcomeKind, now_ms: u64) {
        self.forget_outcome(id);
        let ttl = ms(self.config.result_ttl);
        if ttl == 0 {
            return;
        }
        let expires = now_ms.saturating_add(ttl);
        let outcome = Outcome {
            id,
            kind,
            at_ms: now_ms,
        };
        self.outcomes.insert(id, (outcome, expires));
        self.outcome_expiry.insert((expires, id));
    }

    fn forget_outcome(&mut self, id: u64) {
        if let Some((_, expires)) = self.outcomes.remove(&id) {
            self.outcome_expiry.remove(&(expires, id));
        }
    }

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

    fn hand_out(&mut self, id: u64, lane: Lane, now_ms: u64) -> Option<Claimed> {
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
                lease,
                lane,
                orphan: false,
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

    fn flow_of(&self, id: u64) -> &str {
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

    fn current(&self, r: &Receipt) -> Result<Lease> {
        match self.pending.get(&r.id) {
            Some(l) if l.lease == r.lease => Ok(*l),
            _ => Err(Error::lease_lost(r)),
        }
    }

    /// SPEC 3, Finishing: ack.
    ///
    /// # Errors
    ///
    /// `LeaseLost`.
    pub fn ack(&mut self, r: Receipt, now_ms: u64) -> Result<()> {
        self.ack_with_result(r, Vec::new(), now_ms)
    }

    /// SPEC 3, Outcomes and progress: ack carrying a result.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `InvalidInput` for a result over `max_payload_bytes`.
    pub fn ack_with_result(&mut self, r: Receipt, result: Vec<u8>, now_ms: u64) -> Result<()> {
        check_size("result", result.len(), self.config.max_payload_bytes)?;
        self.current(&r)?;
        self.expire(now_ms);
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        self.items.remove(&r.id);
        self.finish(r.id, OutcomeKind::Done { result }, now_ms);
        Ok(())
    }

    /// SPEC 3, Finishing: ack_batch.
    pub fn ack_batch(&mut self, receipts: &[Receipt], now_ms: u64) -> u64 {
        receipts
            .iter()
            .filter(|r| self.ack(**r, now_ms).is_ok())
            .count() as u64
    }

    /// SPEC 3, Outcomes and progress: the outcome of `id`, unless expired.
    pub fn outcome(&self, id: u64, now_ms: u64) -> Option<Outcome> {
        self.outcomes
            .get(&id)
            .filter(|(_, expires)| *expires > now_ms)
            .map(|(o, _)| o.clone())
    }

    /// SPEC 3, Outcomes and progress: replace the progress of a pending item.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `InvalidInput` over `max_payload_bytes`.
    pub fn set_progress(&mut self, r: Receipt, progress: Vec<u8>) -> Result<()> {
        check_size("progress", progress.len(), self.config.max_payload_bytes)?;
        self.current(&r)?;
        self.progress.insert(r.id, progress);
        Ok(())
    }

    /// SPEC 3, Outcomes and progress: append a chunk to a pending item's stream.
    ///
    /// # Errors
    ///
    /// `LeaseLost`; `InvalidInput` over `max_payload_bytes`.
    pub fn send_chunk(&mut self, r: Receipt, data: Vec<u8>) -> Result<u64> {
        check_size("chunk", data.len(), self.config.max_payload_bytes)?;
        self.current(&r)?;
        let list = self.chunks.entry(r.id).or_default();
        let seq = list.last().map_or(1, |c| c.seq + 1);
        list.push(Chunk { seq, data });
        Ok(seq)
    }

    /// Whether `id` has an outcome that expired by `now_ms` (its progress and
    /// chunks went with it, even before the purge).
    fn expired(&self, id: u64, now_ms: u64) -> bool {
        self.outcomes
            .get(&id)
            .is_some_and(|(_, expires)| *expires <= now_ms)
    }

    /// SPEC 3, Outcomes and progress: the last progress of `id`.
    pub fn progress(&self, id: u64, now_ms: u64) -> Option<Vec<u8>> {
        if self.expired(id, now_ms) {
            return None;
        }
        self.progress.get(&id).cloned()
    }

    /// SPEC 3, Outcomes and progress: the chunks of `id` after `after_seq`.
    pub fn chunks_after(&self, id: u64, after_seq: u64, now_ms: u64) -> Vec<Chunk> {
        if self.expired(id, now_ms) {
            return Vec::new();
        }
        self.chunks
            .get(&id)
            .map(|l| l.iter().filter(|c| c.seq > after_seq).cloned().collect())
            .unwrap_or_default()
    }

    /// SPEC 3, Finishing: touch, all or nothing.
    ///
    /// # Errors
    ///
    /// `LeaseLost` naming the first receipt not current.
    pub fn touch(&mut self, receipts: &[Receipt], now_ms: u64) -> Result<()> {
        for r in receipts {
            self.current(r)?;
        }
        for r in receipts {
            if let Some(l) = self.pending.get_mut(&r.id) {
                l.claimed_at_ms = now_ms;
                l.orphan = false;
            }
        }
        Ok(())
    }

    fn bury(&mut self, id: u64, reason: String, now_ms: u64) {
        self.expire(now_ms);
        self.finish(
            id,
            OutcomeKind::DeadLettered {
                reason: reason.clone(),
            },
            now_ms,
        );
        self.dead.push_back((id, reason, now_ms));
        while self.dead.len() as u64 > self.config.dead_letter_cap {
            if let Some((old, _, _)) = self.dead.pop_front() {
                tracing::warn!(
                    id = old,
                    cap = self.config.dead_letter_cap,
                    "dead letter dropped for good: dead_letter_cap reached"
                );
                self.items.remove(&old);
                self.dead_dropped = self.dead_dropped.saturating_add(1);
            }
        }
    }

    /// SPEC 3, Finishing: retry.
    ///
    /// # Errors
    ///
    /// `LeaseLost`.
    pub fn retry(&mut self, r: Receipt, not_before_ms: u64, now_ms: u64) -> Result<RetryOutcome> {
        self.current(&r)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        let deliveries = self.items.get(&r.id).map(|i| i.deliveries).unwrap_or(0);
        if deliveries >= self.config.max_deliveries {
            self.bury(r.id, MAX_DELIVERIES_REASON.to_string(), now_ms);
            return Ok(RetryOutcome::DeadLettered);
        }
        if let Some(item) = self.items.get_mut(&r.id) {
            item.not_before_ms = Some(not_before_ms);
        }
        self.delayed.insert((not_before_ms, r.id));
        Ok(RetryOutcome::Delayed)
    }

    /// SPEC 3, Finishing: release (give the claim back, `deliveries - 1`).
    ///
    /// # Errors
    ///
    /// `LeaseLost`.
    pub fn release(&mut self, r: Receipt, not_before_ms: u64, now_ms: u64) -> Result<()> {
        self.current(&r)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        let flow = self.flow_of(r.id).to_string();
        let paused = self.paused.contains(&flow);
        if let Some(item) = self.items.get_mut(&r.id) {
            item.deliveries = item.deliveries.saturating_sub(1);
            if !paused {
                item.not_before_ms = Some(not_before_ms);
            }
        }
        if paused {
            self.parked.entry(flow).or_default().push_back(r.id);
        } else {
            self.delayed.insert((not_before_ms, r.id));
        }
        Ok(())
    }

    /// SPEC 3, Finishing: dead_letter.
    ///
    /// # Errors
    ///
    /// `LeaseLost`.
    pub fn dead_letter(&mut self, r: Receipt, reason: &str, now_ms: u64) -> Result<()> {
        self.current(&r)?;
        self.pending.remove(&r.id);
        self.left_pending(r.id, now_ms);
        self.bury(r.id, reason.to_string(), now_ms);
        Ok(())
    }

    /// SPEC 3, Crash recovery: reclaim_stale.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for `count == 0`.
    pub fn reclaim_stale(
        &mut self,
        min_idle: Duration,
        count: usize,
        now_ms: u64,
    ) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let min_idle = ms(min_idle);
        let mut stale: Vec<(u64, u64)> = self
            .pending
            .iter()
            .filter(|(_, l)| l.orphan || now_ms.saturating_sub(l.claimed_at_ms) >= min_idle)
            .map(|(id, l)| (l.claimed_at_ms, *id))
            .collect();
        stale.sort_unstable();
        let mut out = Vec::new();
        let mut dead_lettered = Vec::new();
        for (_, id) in stale {
            if out.len() >= count {
                break;
            }
            let Some(lease) = self.pending.remove(&id) else {
                continue;
            };
            self.left_pending(id, now_ms);
            let deliveries = self.items.get(&id).map(|i| i.deliveries).unwrap_or(0);
            if deliveries >= self.config.max_deliveries {
                self.bury(id, MAX_DELIVERIES_REASON.to_string(), now_ms);
                dead_lettered.push(Receipt {
                    id,
                    delivery: deliveries,
                    lease: lease.lease,
                });
                continue;
            }
            // SPEC 3, Crash recovery: an item of a paused flow is parked
            // (deliveries unchanged, not counted), never handed out.
            let flow = self.flow_of(id).to_string();
            if self.paused.contains(&flow) {
                self.parked.entry(flow).or_default().push_back(id);
                continue;
            }
            if let Some(c) = self.hand_out(id, lease.lane, now_ms) {
                out.push(c);
            }
        }
        Ok(Reclaimed {
            claimed: out,
            dead_lettered,
        })
    }

    /// SPEC 3, Crash recovery, embedded only: the file was closed and opened
    /// again, so every item pending now belongs to a process that is gone and
    /// is stale for `reclaim_stale` whatever `min_idle`, until it is touched
    /// (a touch shows its holder is alive) or leaves pending. The memory
    /// backend never calls this; the model tests of the embedded backend call
    /// it where they close and reopen the file.
    pub fn reopen(&mut self) {
        for l in self.pending.values_mut() {
            l.orphan = true;
        }
    }

    /// SPEC 8, Clock steps: note `now_ms`; if the clock has stepped back
    /// (more than [`CLOCK_STEP_TOLERANCE_MS`](crate::CLOCK_STEP_TOLERANCE_MS)
    /// below the latest time seen), move every timer, claim time and expiry
    /// back by the step, so that waits are measured in elapsed time.
    /// Returns the step, if there was one.
    pub fn observe_clock(&mut self, now_ms: u64) -> Option<u64> {
        let step = crate::clock::step_back(self.latest_ms, now_ms);
        if let Some(back) = step {
            tracing::warn!(
                back_ms = back,
                "the clock stepped back: timers and leases moved with it"
            );
            self.delayed = std::mem::take(&mut self.delayed)
                .into_iter()
                .map(|(nb, id)| (nb.saturating_sub(back), id))
                .collect();
            for (nb, id) in &self.delayed {
                if let Some(item) = self.items.get_mut(id) {
                    item.not_before_ms = Some(*nb);
                }
            }
            for l in self.pending.values_mut() {
                l.claimed_at_ms = l.claimed_at_ms.saturating_sub(back);
            }
            self.done_order = std::mem::take(&mut self.done_order)
                .into_iter()
                .map(|(t, id, s)| (t.saturating_sub(back), id, s))
                .collect();
            for t in self.done.values_mut() {
                *t = t.saturating_sub(back);
            }
            for (_, t) in self.dedup.values_mut() {
                *t = t.saturating_sub(back);
            }
            self.outcome_expiry = std::mem::take(&mut self.outcome_expiry)
                .into_iter()
                .map(|(t, id)| (t.saturating_sub(back), id))
                .collect();
            for (_, t) in self.outcomes.values_mut() {
                *t = t.saturating_sub(back);
            }
            // SPEC 3, Priority: the lanes' arrivals move back too, so that
            // items arriving after the step rank behind those waiting and
            // aging counts elapsed time.
            for lane in [&mut self.backlog, &mut self.due] {
                *lane = std::mem::take(lane)
                    .into_iter()
                    .map(|((r, seq), id)| ((rank_back(r, back), seq), id))
                    .collect();
            }
            self.backlog_clock = self.backlog_clock.saturating_sub(back);
            self.due_clock = self.due_clock.saturating_sub(back);
            // SPEC 3, Flow limits: held lanes, back-offs and rate windows too.
            for lane in self.held.values_mut() {
                *lane = std::mem::take(lane)
                    .into_iter()
                    .map(|((l, r, seq), id)| ((l, rank_back(r, back), seq), id))
                    .collect();
            }
            for st in self.limits.values_mut() {
                st.shift_back(back);
            }
            self.latest_ms = now_ms;
        } else {
            self.latest_ms = self.latest_ms.max(now_ms);
        }
        step
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
        self.current(&r)?;
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

    /// SPEC 3, Idempotency: mark_done.
    pub fn mark_done(&mut self, id: u64, step: &str, now_ms: u64) {
        self.expire(now_ms);
        let expires = now_ms.saturating_add(ms(self.config.done_ttl));
        if let Some(old) = self.done.insert((id, step.to_string()), expires) {
            self.done_order.remove(&(old, id, step.to_string()));
        }
        self.done_order.insert((expires, id, step.to_string()));
        while self.done.len() > MEMORY_DONE_MARKER_CAP {
            if let Some((_, oid, ostep)) = self.done_order.pop_first() {
                self.done.remove(&(oid, ostep));
            }
        }
    }

    /// SPEC 3, Idempotency: was_done.
    pub fn was_done(&self, id: u64, step: &str, now_ms: u64) -> bool {
        self.done
            .get(&(id, step.to_string()))
            .is_some_and(|expires| *expires > now_ms)
    }

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
            durable: self.durable,
            limited: self
                .limits
                .values()
                .filter(|st| st.held > 0 && !st.claimable(now_ms))
                .map(|st| st.held)
                .sum(),
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
    pub fn locations(&self) -> BTreeMap<u64, Location> {
        let mut out = BTreeMap::new();
        out.extend(self.backlog.values().map(|id| (*id, Location::Backlog)));
        out.extend(self.due.values().map(|id| (*id, Location::Due)));
        for m in self.held.values() {
            out.extend(m.iter().map(|(k, id)| (*id, Location::held(k.0 == 0))));
        }
        out.extend(self.delayed.iter().map(|(_, id)| (*id, Location::Delayed)));
        out.extend(self.pending.keys().map(|id| (*id, Location::Pending)));
        for list in self.parked.values() {
            out.extend(list.iter().map(|id| (*id, Location::Parked)));
        }
        out.extend(
            self.dead
                .iter()
                .map(|(id, _, _)| (*id, Location::DeadLetter)),
        );
        out
    }

    /// Every stored item record, by id.
    pub fn items(&self) -> &BTreeMap<u64, Item> {
        &self.items
    }
}

#[derive(Debug)]
struct Shared {
    model: Mutex<Model>,
    wake: Notify,
    /// Woken by every outcome and chunk: what `wait_outcome` and
    /// `wait_chunks` wait on.
    finished: Notify,
    clock: SharedClock,
    closed: AtomicBool,
    max_deliveries: u32,
}

/// The memory backend: [`Model`] behind a mutex, with the queue's clock and
/// wake-ups for blocking claims. Clones share one queue.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::{ClaimFrom, Config, MemoryQueue, NewItem, WorkQueue};
/// # tokio::runtime::Runtime::new().unwrap().block_on(async {
/// let queue = MemoryQueue::new(Config::default());
/// queue.add(NewItem::new(b"job".to_vec())).await?;
/// let claimed = queue.claim(1, Duration::ZERO, ClaimFrom::All).await?;
/// queue.ack(claimed[0].receipt).await?;
/// assert_eq!(queue.stats().await?.pending, 0);
/// # Ok::<(), workjournal::Error>(())
/// # }).unwrap();
/// ```
#[derive(Debug, Clone)]
pub struct MemoryQueue {
    shared: Arc<Shared>,
}

impl MemoryQueue {
    /// A new empty queue. Uses `config`'s clock, or the system clock.
    pub fn new(config: Config) -> Self {
        let clock = config
            .clock
            .clone()
            .unwrap_or_else(|| Arc::new(SystemClock));
        let max_deliveries = config.max_deliveries;
        MemoryQueue {
            shared: Arc::new(Shared {
                max_deliveries,
                model: Mutex::new(Model::new(config)),
                wake: Notify::new(),
                finished: Notify::new(),
                clock,
                closed: AtomicBool::new(false),
            }),
        }
    }

    fn now(&self) -> u64 {
        self.shared.clock.now_ms()
    }

    fn lock(&self) -> MutexGuard<'_, Model> {
        // A poisoned lock means a panic inside the model; the model's state
        // changes are each completed before any call that could panic, so the
        // state is still consistent and can be used.
        self.shared.model.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn with<T>(&self, f: impl FnOnce(&mut Model, u64) -> T) -> T {
        let now = self.now();
        let mut m = self.lock();
        m.observe_clock(now);
        f(&mut m, now)
    }

    /// `Error::Closed` once `close()` was called on this queue.
    fn live(&self) -> Result<()> {
        if self.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        Ok(())
    }

    /// A pending item left: a flow at its concurrency cap may run again
    /// (SPEC 3, Flow limits), so wake the blocked claims.
    fn freed(&self) {
        if self.lock().has_limits() {
            self.changed();
        }
    }

    fn changed(&self) {
        self.shared.wake.notify_waiters();
    }

    fn finished(&self) {
        self.shared.finished.notify_waiters();
    }

    /// Wait up to `wait` until `look` finds something, woken by
    /// [`MemoryQueue::finished`]; `Error::Closed` once the queue is closed.
    async fn wait_for<T>(
        &self,
        wait: Duration,
        look: impl Fn(&Model, u64) -> Option<T>,
    ) -> Result<Option<T>> {
        let look = &look;
        crate::clock::wait_notified(&self.shared.finished, wait, move || async move {
            self.live()?;
            Ok(self.with(|m, now| look(m, now)))
        })
        .await
    }

    /// A copy of the model's current state (test support, feature
    /// `testing`: for tests comparing backends).
    #[cfg(feature = "testing")]
    pub fn snapshot(&self) -> Model {
        self.lock().clone()
    }
}

impl WorkQueue for MemoryQueue {
    async fn add(&self, item: NewItem) -> Result<Added> {
        self.live()?;
        let mut v = self.with(|m, now| m.add_many(vec![(item, None)], now))?;
        self.changed();
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn add_batch(&self, items: Vec<NewItem>) -> Result<Vec<Added>> {
        self.live()?;
        let out =
            self.with(|m, now| m.add_many(items.into_iter().map(|i| (i, None)).collect(), now))?;
        self.changed();
        Ok(out)
    }

    async fn add_delayed(&self, item: NewItem, not_before_ms: u64) -> Result<Added> {
        self.live()?;
        let mut v = self.with(|m, now| m.add_many(vec![(item, Some(not_before_ms))], now))?;
        self.changed();
        v.pop().ok_or_else(|| Error::corrupt("add returned no id"))
    }

    async fn next_due(&self) -> Result<Option<u64>> {
        self.live()?;
        Ok(self.with(|m, _| m.next_due()))
    }

    async fn promote_due(&self) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.promote_due(now));
        if n > 0 {
            self.changed();
        }
        Ok(n)
    }

    async fn claim(&self, count: usize, wait: Duration, from: ClaimFrom) -> Result<Vec<Claimed>> {
        let deadline = crate::clock::wait_deadline(wait);
        loop {
            self.live()?;
            let notified = self.shared.wake.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            let got = self.with(|m, now| m.claim(count, from, now))?;
            if !got.is_empty() || tokio::time::Instant::now() >= deadline {
                return Ok(got);
            }
            let now = self.now();
            let next_due = self.lock().next_wake(now);
            let timer = match next_due {
                Some(t) => self.shared.clock.sleep_until(t),
                None => Box::pin(std::future::pending()),
            };
            tokio::select! {
                _ = &mut notified => {}
                _ = tokio::time::sleep_until(deadline) => {}
                _ = timer => {}
            }
        }
    }

    async fn ack(&self, receipt: Receipt) -> Result<()> {
        self.ack_with_result(receipt, Vec::new()).await
    }

    async fn ack_with_result(&self, receipt: Receipt, result: Vec<u8>) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.ack_with_result(receipt, result, now))?;
        self.freed();
        self.finished();
        Ok(())
    }

    async fn outcome(&self, id: u64) -> Result<Option<Outcome>> {
        self.live()?;
        Ok(self.with(|m, now| m.outcome(id, now)))
    }

    async fn wait_outcome(&self, id: u64, wait: Duration) -> Result<Option<Outcome>> {
        self.wait_for(wait, |m, now| m.outcome(id, now)).await
    }

    async fn set_progress(&self, receipt: Receipt, progress: Vec<u8>) -> Result<()> {
        self.live()?;
        self.with(|m, _| m.set_progress(receipt, progress))?;
        self.finished();
        Ok(())
    }

    async fn send_chunk(&self, receipt: Receipt, chunk: Vec<u8>) -> Result<u64> {
        self.live()?;
        let seq = self.with(|m, _| m.send_chunk(receipt, chunk))?;
        self.finished();
        Ok(seq)
    }

    async fn progress(&self, id: u64) -> Result<Option<Vec<u8>>> {
        self.live()?;
        Ok(self.with(|m, now| m.progress(id, now)))
    }

    async fn wait_chunks(&self, id: u64, after_seq: u64, wait: Duration) -> Result<Vec<Chunk>> {
        let got = self
            .wait_for(wait, |m, now| {
                let got = m.chunks_after(id, after_seq, now);
                (!got.is_empty() || m.outcome(id, now).is_some()).then_some(got)
            })
            .await?;
        Ok(got.unwrap_or_default())
    }

    async fn ack_batch(&self, receipts: Vec<Receipt>) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.ack_batch(&receipts, now));
        self.freed();
        self.finished();
        Ok(n)
    }

    async fn touch(&self, receipts: Vec<Receipt>) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.touch(&receipts, now))
    }

    async fn retry(&self, receipt: Receipt, not_before_ms: u64) -> Result<RetryOutcome> {
        self.live()?;
        let out = self.with(|m, now| m.retry(receipt, not_before_ms, now))?;
        self.changed();
        self.finished();
        Ok(out)
    }

    async fn release(&self, receipt: Receipt, not_before_ms: u64) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.release(receipt, not_before_ms, now))?;
        self.changed();
        Ok(())
    }

    async fn dead_letter(&self, receipt: Receipt, reason: &str) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.dead_letter(receipt, reason, now))?;
        self.freed();
        self.finished();
        Ok(())
    }

    async fn reclaim(&self, min_idle: Duration, count: usize) -> Result<Reclaimed> {
        self.live()?;
        let out = self.with(|m, now| m.reclaim_stale(min_idle, count, now))?;
        self.freed();
        self.finished();
        Ok(out)
    }

    async fn pause(&self, flow: &str) -> Result<()> {
        self.live()?;
        self.with(|m, _| m.pause(flow))
    }

    async fn resume(&self, flow: &str) -> Result<u64> {
        self.live()?;
        let n = self.with(|m, now| m.resume(flow, now))?;
        self.changed();
        Ok(n)
    }

    async fn park(&self, receipt: Receipt) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.park(receipt, now))?;
        self.freed();
        Ok(())
    }

    async fn step(&self, flow: &str) -> Result<Option<Claimed>> {
        self.live()?;
        self.with(|m, now| m.step(flow, now))
    }

    async fn clear_flow(&self, flow: &str) -> Result<u64> {
        self.live()?;
        self.with(|m, _| m.clear_flow(flow))
    }

    async fn parked(&self, flow: &str) -> Result<u64> {
        self.live()?;
        Ok(self.with(|m, _| m.parked(flow)))
    }

    async fn paused_flows(&self) -> Result<Vec<String>> {
        self.live()?;
        Ok(self.with(|m, _| m.paused_flows()))
    }

    async fn set_flow_limit(&self, flow: &str, limit: FlowLimit) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.set_flow_limit(flow, limit, now))?;
        self.changed();
        Ok(())
    }

    async fn flow_limits(&self) -> Result<Vec<FlowLimits>> {
        self.live()?;
        Ok(self.with(|m, now| m.flow_limits(now)))
    }

    async fn mark_done(&self, id: u64, step: &str) -> Result<()> {
        self.live()?;
        self.with(|m, now| m.mark_done(id, step, now));
        Ok(())
    }

    async fn was_done(&self, id: u64, step: &str) -> Result<bool> {
        self.live()?;
        Ok(self.with(|m, now| m.was_done(id, step, now)))
    }

    async fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        self.live()?;
        Ok(self.with(|m, _| m.dead_letters(count)))
    }

    async fn redrive(&self, id: u64) -> Result<bool> {
        self.live()?;
        let ok = self.with(|m, now| m.redrive(id, now));
        if ok {
            self.changed();
        }
        Ok(ok)
    }

    async fn purge_dead_letters(&self) -> Result<u64> {
        self.live()?;
        Ok(self.with(|m, _| m.purge_dead_letters()))
    }

    async fn stats(&self) -> Result<Stats> {
        self.live()?;
        Ok(self.with(|m, now| m.stats(now)))
    }

    async fn backlog_by_flow(&self, sample: usize) -> Result<BTreeMap<String, u64>> {
        self.live()?;
        Ok(self.with(|m, now| m.backlog_by_flow(sample, now)))
    }

    async fn peek(&self, count: usize) -> Result<Vec<Item>> {
        self.live()?;
        Ok(self.with(|m, now| m.peek(count, now)))
    }

    async fn list(&self, query: crate::ListQuery) -> Result<crate::ItemPage> {
        self.live()?;
        self.with(|m, _| m.list(&query))
    }

    async fn find(&self, id: u64) -> Result<Option<crate::ListedItem>> {
        self.live()?;
        Ok(self.with(|m, _| m.find(id)))
    }

    async fn now_ms(&self) -> Result<u64> {
        self.live()?;
        Ok(self.now())
    }

    fn max_deliveries(&self) -> u32 {
        self.shared.max_deliveries
    }

    async fn close(&self) -> Result<()> {
        self.shared.closed.store(true, Ordering::Release);
        // A claim waiting for work wakes up and sees the queue closed.
        self.changed();
        self.finished();
        Ok(())
    }
}
