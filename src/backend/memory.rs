//! The `memory` backend: the reference model of SPEC.md.
//!
//! Plain collections behind one mutex, no persistence (`stats().durable` is
//! false). [`Model`] is the synchronous state machine; [`MemoryQueue`] wraps
//! it with a clock, a lock and wake-ups for blocking claims. Property tests use
//! [`Model`] directly as the reference every other backend is compared with,
//! so it is written to be obviously right rather than fast. [`Model`] and
//! [`ItemState`] are public only under the `testing` feature
//! (`workjournal::testing::{Model, ItemState}`).

// Without `testing`, `Model` and `ItemState` are crate-private in all but name.
#![cfg_attr(not(feature = "testing"), allow(unreachable_pub, dead_code))]

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};

use crate::config::{Config, rank, rank_back};
use crate::item::{Item, Lane};
use crate::limit::FlowState;
use crate::outcome::{Chunk, Outcome};

mod adding;
mod browse;
mod claiming;
mod control;
mod dead_letters;
mod finishing;
mod flows;
mod history;
mod outcomes;
mod queue;
mod reads;
mod schedules;

pub use queue::MemoryQueue;
#[cfg(feature = "testing")]
pub(crate) use schedules::answer_schedule;

/// A pending item's lease.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Lease {
    /// The claim that handed the item out (SPEC 3, Claiming).
    claimed_at_ms: u64,
    /// The claim or the latest touch: the lease is stale `min_idle` after.
    touched_at_ms: u64,
    lease: u64,
    lane: Lane,
    /// Claimed before the last [`Model::reopen`]: stale whatever `min_idle`.
    orphan: bool,
    /// Marked by `cancel` (SPEC 3, Cancelling): the holder's next call
    /// ends the item.
    cancelling: bool,
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
    /// SPEC 13: name -> (generation, due-index time, last item, record).
    schedules: BTreeMap<String, StoredRow>,
    /// SPEC 3, History: the finished items kept, by id.
    history: BTreeMap<u64, history::Finished>,
    /// (finished_at_ms, id) of the completed and of the cancelled items
    /// in `history`.
    completed: BTreeSet<(u64, u64)>,
    cancelled: BTreeSet<(u64, u64)>,
    /// The schedule generation counter: every write takes the next one.
    schedule_generation: u64,
}

/// One stored schedule: (generation, due-index time, last item, record).
type StoredRow = (u64, Option<u64>, Option<u64>, Vec<u8>);

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
            schedules: BTreeMap::new(),
            schedule_generation: 0,
            history: BTreeMap::new(),
            completed: BTreeSet::new(),
            cancelled: BTreeSet::new(),
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

    /// SPEC 3, Crash recovery, embedded only: the file was closed and opened
    /// again, so every item pending now belongs to a process that is gone and
    /// is stale for `reclaim` whatever `min_idle`, until it is touched
    /// (a touch shows its holder is alive) or leaves pending. The memory
    /// backend never calls this; the model tests of the embedded backend call
    /// it where they close and reopen the file.
    pub fn reopen(&mut self) {
        for l in self.pending.values_mut() {
            l.orphan = true;
        }
    }

    /// SPEC 3, Clock steps: note `now_ms`; if the clock has stepped back
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
                l.touched_at_ms = l.touched_at_ms.saturating_sub(back);
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

    /// SPEC 3, Clock steps: [`Model::observe_clock`] at the reading
    /// `now_ms`, and the queue's time that follows: the reading, or the
    /// latest time seen when the reading is below it by no more than the
    /// tolerance (the queue's time never runs backward by noise, so no
    /// operation acts at a time before one that ran ahead of it).
    pub(crate) fn observe_clock_at(&mut self, now_ms: u64) -> u64 {
        self.observe_clock(now_ms);
        self.latest_ms
    }
}
