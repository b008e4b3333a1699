//! The reference side of a run: an [`Op`] resolved against the [`Model`] into a
//! [`Call`], and the call carried out on the model ([`answer`]) for its
//! expected [`Outcome`].

use std::collections::{BTreeMap, HashMap};
use std::time::Duration;

use super::answer::answer;
use super::call::{Call, Outcome, added, claimed, outcome};
use super::{FLOWS, MAX_BATCH, Op, REASONS, START_MS, STEPS, Setup, pick};
use crate::backend::memory::Model;
use crate::browse::ItemState;
use crate::config::Config;
use crate::item::{ClaimFrom, Receipt};
use crate::limit::FlowLimit;
use crate::request::{Reply, Request};

/// Result, progress or chunk bytes: 0 to 19 bytes of one fill byte, so
/// that some are over `max_payload_bytes`.
pub(super) fn bytes_of(v: u8) -> Vec<u8> {
    vec![v; usize::from(v % 20)]
}

pub(super) fn count_of(v: u8) -> usize {
    if v == 0 { 0 } else { 1 + usize::from(v % 4) }
}

pub(super) fn offset_ms(now: u64, v: u8) -> u64 {
    now.saturating_add_signed((i64::from(v) - 32) * 100)
}

/// 2 s to about 1 h, in ms: always more than the step tolerance.
pub(super) fn step_back_ms(v: u8) -> u64 {
    match v {
        0..=199 => 2_000 + u64::from(v) * 100,
        _ => u64::from(v - 199) * 60_000,
    }
}

pub(super) fn advance_ms(v: u8) -> u64 {
    match v {
        0..=127 => u64::from(v) * 25,
        128..=247 => u64::from(v - 127) * 500,
        _ => 3_600_000,
    }
}

/// Done markers are keyed by any id, live or not: three ids make
/// `was_done` meet the markers `mark_done` left.
pub(super) fn done_id(v: u8) -> u64 {
    1 + u64::from(v % 3)
}

pub(super) fn idle_ms(v: u8) -> u64 {
    [0, 1_000, 2_000, 60_000][usize::from(v % 4)]
}

/// A `back_off` duration: 0 to 12.75 s in 50 ms steps.
pub(super) fn back_off_ms(v: u8) -> u64 {
    u64::from(v) * 50
}

/// The reference side of a run: the [`Model`], its clock (`now_ms`), what
/// it has handed out so far, and the last call with its expected outcome.
#[derive(Debug, Clone)]
pub struct Reference {
    model: Model,
    now_ms: u64,
    reopen: bool,
    max_id: u64,
    /// Every receipt handed out, by slot (the order they were handed out).
    receipts: Vec<Receipt>,
    /// The slot of every receipt in `receipts`.
    slots: HashMap<Receipt, usize>,
    /// The slot of each item's latest receipt.
    last_slot: BTreeMap<u64, usize>,
    last: Option<(Call, Outcome)>,
}

impl Reference {
    /// A fresh reference with `setup`'s limits at [`START_MS`]. `durable` is
    /// what the system's `stats().durable` says; `reopen` whether the system
    /// can close and reopen (otherwise [`Op::Reopen`] is a `stats`).
    pub fn new(setup: &Setup, durable: bool, reopen: bool) -> Self {
        Reference {
            model: Model::new(setup.config()).with_durable(durable),
            now_ms: START_MS,
            reopen,
            max_id: 0,
            receipts: Vec::new(),
            slots: HashMap::new(),
            last_slot: BTreeMap::new(),
            last: None,
        }
    }

    /// The configuration of the run, without a clock.
    pub fn config(&self) -> Config {
        self.model.config().clone()
    }

    /// The model.
    pub fn model(&self) -> &Model {
        &self.model
    }

    /// The reference clock, in ms since the Unix epoch.
    pub fn now_ms(&self) -> u64 {
        self.now_ms
    }

    /// The last call applied and its expected outcome.
    pub fn last(&self) -> Option<&(Call, Outcome)> {
        self.last.as_ref()
    }

    /// The slot of `receipt` if the reference handed it out (the n-th
    /// receipt of the run), `None` for a forged one.
    pub fn slot_of(&self, receipt: &Receipt) -> Option<usize> {
        self.slots.get(receipt).copied()
    }

    /// A receipt to name: below 200, the current receipt of an item
    /// pending now; below 240, any receipt handed out so far (likely
    /// stale); else a forged one no claim had.
    fn receipt(&self, v: u8) -> Receipt {
        let locations = self.model.locations();
        let live: Vec<usize> = self
            .last_slot
            .iter()
            .filter(|(id, _)| locations.get(id) == Some(&ItemState::Pending))
            .map(|(_, slot)| *slot)
            .collect();
        let n = usize::from(v);
        if v < 200 && !live.is_empty() {
            self.receipts[live[n % live.len()]]
        } else if v < 240 && !self.receipts.is_empty() {
            self.receipts[n % self.receipts.len()]
        } else {
            let id = if self.max_id > 0 {
                1 + u64::from(v) % self.max_id
            } else {
                1 + u64::from(v % 4)
            };
            Receipt {
                id,
                delivery: 1,
                lease: (1 << 60) + u64::from(v),
            }
        }
    }

    fn receipts_of(&self, picks: &[u8]) -> Vec<Receipt> {
        picks
            .iter()
            .take(MAX_BATCH)
            .map(|r| self.receipt(*r))
            .collect()
    }

    /// Below 224, an id handed out so far; else one never handed out.
    fn id(&self, v: u8) -> u64 {
        if v < 224 && self.max_id > 0 {
            1 + u64::from(v) % self.max_id
        } else {
            self.max_id + 1 + u64::from(v % 4)
        }
    }

    /// Below 200, the id of an item in `state` (any state for `None`) when
    /// there is one; else as [`Reference::id`].
    fn id_in(&self, v: u8, state: Option<ItemState>) -> u64 {
        let ids: Vec<u64> = self
            .model
            .locations()
            .into_iter()
            .filter(|(_, at)| state.is_none_or(|s| *at == s))
            .map(|(id, _)| id)
            .collect();
        if v < 200 && !ids.is_empty() {
            ids[usize::from(v) % ids.len()]
        } else {
            self.id(v)
        }
    }

    fn resolve(&self, op: &Op) -> Call {
        let now = self.now_ms;
        let flow = |f: &u8| pick(&FLOWS, *f).to_string();
        Call::Request(match op {
            Op::Add(i) => Request::Add { item: i.build() },
            Op::AddBatch(v) => Request::AddBatch {
                items: v.iter().take(MAX_BATCH).map(|i| i.build()).collect(),
            },
            Op::AddDelayed(i, d) => Request::AddDelayed {
                item: i.build(),
                not_before_ms: offset_ms(now, *d),
            },
            Op::NextDue => Request::NextDue,
            Op::PromoteDue => Request::PromoteDue,
            Op::Claim { count, due_only } => Request::Claim {
                count: count_of(*count),
                wait: Duration::ZERO,
                from: if *due_only {
                    ClaimFrom::DueOnly
                } else {
                    ClaimFrom::All
                },
            },
            Op::Ack(r) => Request::Ack {
                receipt: self.receipt(*r),
            },
            Op::AckBatch(v) => Request::AckBatch {
                receipts: self.receipts_of(v),
            },
            Op::AckWithResult(r, b) => Request::AckWithResult {
                receipt: self.receipt(*r),
                result: bytes_of(*b),
            },
            Op::Outcome(v) => Request::Outcome { id: self.id(*v) },
            Op::SetProgress(r, b) => Request::SetProgress {
                receipt: self.receipt(*r),
                progress: bytes_of(*b),
            },
            Op::SendChunk(r, b) => Request::SendChunk {
                receipt: self.receipt(*r),
                chunk: bytes_of(*b),
            },
            Op::Progress(v) => Request::Progress { id: self.id(*v) },
            Op::Chunks(v, after) => Request::WaitChunks {
                id: self.id(*v),
                after_seq: u64::from(after % 6),
                wait: Duration::ZERO,
            },
            Op::Touch(v) => Request::Touch {
                receipts: self.receipts_of(v),
            },
            Op::Retry(r, d) => Request::Retry {
                receipt: self.receipt(*r),
                not_before_ms: offset_ms(now, *d),
            },
            Op::Release(r, d) => Request::Release {
                receipt: self.receipt(*r),
                not_before_ms: offset_ms(now, *d),
            },
            Op::DeadLetter(r, w) => Request::DeadLetter {
                receipt: self.receipt(*r),
                reason: pick(&REASONS, *w).to_string(),
            },
            Op::Reclaim { idle, count } => Request::Reclaim {
                min_idle: Duration::from_millis(idle_ms(*idle)),
                count: count_of(*count),
            },
            Op::Pause(f) => Request::Pause { flow: flow(f) },
            Op::Resume(f) => Request::Resume { flow: flow(f) },
            Op::Park(r) => Request::Park {
                receipt: self.receipt(*r),
            },
            Op::Step(f) => Request::Step { flow: flow(f) },
            Op::ClearFlow(f) => Request::ClearFlow { flow: flow(f) },
            Op::Parked(f) => Request::Parked { flow: flow(f) },
            Op::PausedFlows => Request::PausedFlows,
            Op::RateLimit(f, v) => Request::SetFlowLimit {
                flow: flow(f),
                limit: FlowLimit::Rate((v % 4 != 0).then(|| crate::limit::RateLimit {
                    permits: u32::from(v % 3) + 1,
                    period_ms: (u64::from(v / 4 % 8) + 1) * 250,
                })),
            },
            Op::Concurrency(f, v) => Request::SetFlowLimit {
                flow: flow(f),
                limit: FlowLimit::Concurrency((v % 4 != 0).then_some(u32::from(v % 3) + 1)),
            },
            Op::BackOff(f, v) => Request::SetFlowLimit {
                flow: flow(f),
                limit: FlowLimit::BackOffUntil((v % 4 != 0).then(|| offset_ms(now, *v))),
            },
            Op::FlowLimits => Request::FlowLimits,
            Op::MarkDone(i, s) => Request::MarkDone {
                id: done_id(*i),
                step: pick(&STEPS, *s).to_string(),
            },
            Op::WasDone(i, s) => Request::WasDone {
                id: done_id(*i),
                step: pick(&STEPS, *s).to_string(),
            },
            Op::DeadLetters(n) => Request::DeadLetters {
                count: usize::from(n % 8),
            },
            Op::Redrive(v) => Request::Redrive {
                id: self.id_in(*v, Some(ItemState::DeadLetter)),
            },
            Op::PurgeDeadLetters => Request::PurgeDeadLetters,
            Op::Stats => Request::Stats,
            Op::BacklogByFlow(n) => Request::BacklogByFlow {
                sample: usize::from(n % 8),
            },
            Op::Peek(n) => Request::Peek {
                count: usize::from(n % 8),
            },
            Op::Promote(v) => Request::Promote {
                id: self.id_in(*v, Some(ItemState::Delayed)),
            },
            Op::Remove(v) => Request::Remove {
                id: self.id_in(*v, None),
            },
            Op::Cancel(v) => Request::Cancel {
                id: self.id_in(*v, None),
            },
            Op::Update(v, what, d) => {
                let mut update = crate::item::ItemUpdate::new();
                if what & 1 != 0 {
                    update = update.priority((what >> 3) % 3);
                }
                if what & 2 != 0 {
                    update = update.not_before_ms(offset_ms(now, *d));
                }
                if what & 4 != 0 {
                    update = update.payload(vec![*d; usize::from((what >> 3) % 20)]);
                }
                Request::Update {
                    id: self.id_in(*v, None),
                    update,
                }
            }
            Op::WaitCancelled => Request::WaitCancelled {
                ids: self
                    .model
                    .locations()
                    .into_iter()
                    .filter(|(_, at)| *at == ItemState::Pending)
                    .map(|(id, _)| id)
                    .collect(),
                wait: Duration::ZERO,
            },
            Op::BackOffFor(f, d) => Request::BackOff {
                flow: flow(f),
                duration: Duration::from_millis(back_off_ms(*d)),
            },
            Op::UpsertSchedule(n, v) => Request::UpsertSchedule {
                schedule: super::schedule_of(*n, *v),
            },
            Op::FireSchedules => Request::FireSchedules,
            Op::PauseSchedule(n) => Request::PauseSchedule {
                name: pick(&super::SCHEDULE_NAMES, *n).to_string(),
            },
            Op::ResumeSchedule(n) => Request::ResumeSchedule {
                name: pick(&super::SCHEDULE_NAMES, *n).to_string(),
            },
            Op::RemoveSchedule(n) => Request::RemoveSchedule {
                name: pick(&super::SCHEDULE_NAMES, *n).to_string(),
            },
            Op::Schedules => Request::Schedules,
            Op::PreviewSchedule(n, c) => Request::PreviewSchedule {
                name: pick(&super::SCHEDULE_NAMES, *n).to_string(),
                count: usize::from(c % 8),
            },
            Op::Advance(v) => return Call::Advance(advance_ms(*v)),
            Op::StepBack(v) => return Call::StepBack(step_back_ms(*v)),
            Op::Reopen if self.reopen => return Call::Reopen,
            Op::Reopen => Request::Stats,
        })
    }

    fn run(&mut self, call: &Call) -> Outcome {
        match call {
            Call::Request(request) => {
                // Every backend notes the clock at every operation (SPEC 3,
                // Clock steps).
                self.model.observe_clock(self.now_ms);
                outcome(answer(&mut self.model, request.clone(), self.now_ms))
            }
            Call::Advance(by) => {
                self.now_ms = self.now_ms.saturating_add(*by);
                Ok(Reply::Unit)
            }
            Call::StepBack(by) => {
                self.now_ms = self.now_ms.saturating_sub(*by);
                self.model.observe_clock(self.now_ms);
                Ok(Reply::Stats(self.model.stats(self.now_ms)))
            }
            Call::Reopen => {
                self.model.reopen();
                Ok(Reply::Unit)
            }
        }
    }

    /// Resolve `op` against the current state, run it on the model, remember
    /// what it handed out, and return the call with its expected outcome
    /// (also kept as [`Reference::last`]).
    pub fn apply(&mut self, op: &Op) -> (Call, Outcome) {
        let call = self.resolve(op);
        let out = self.run(&call);
        // The system reads `stats` after `Advance` (and every backend
        // notes the clock at every operation): the model notes it too.
        self.model.observe_clock(self.now_ms);
        if let Ok(v) = &out {
            for a in added(v) {
                self.max_id = self.max_id.max(a.id);
            }
            for c in claimed(v) {
                let slot = self.receipts.len();
                self.last_slot.insert(c.receipt.id, slot);
                self.slots.insert(c.receipt, slot);
                self.receipts.push(c.receipt);
            }
        }
        self.last = Some((call.clone(), out.clone()));
        (call, out)
    }
}
