//! The reference side of a run: an [`Op`] resolved against the [`Model`] into a
//! [`Call`] and its expected [`Outcome`].

use std::collections::BTreeMap;
use std::time::Duration;

use super::call::{Call, Outcome, ReceiptRef, Value, added, claimed, outcome};
use super::{FLOWS, MAX_BATCH, Op, REASONS, START_MS, STEPS, Setup, pick};
use crate::backend::memory::Model;
use crate::browse::ItemState;
use crate::config::Config;
use crate::item::{ClaimFrom, Receipt};
use crate::limit::FlowLimit;

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

/// The reference side of a run: the [`Model`], its clock (`now_ms`), what
/// it has handed out so far, and the last call with its expected outcome.
#[derive(Debug, Clone)]
pub struct Reference {
    model: Model,
    now_ms: u64,
    reopen: bool,
    /// Whether [`Op::Promote`], [`Op::Remove`] and [`Op::BackOffFor`] run
    /// as themselves (else as `stats`): off until every backend under
    /// model test has them.
    item_control: bool,
    max_id: u64,
    receipts: Vec<Receipt>,
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
            item_control: false,
            max_id: 0,
            receipts: Vec::new(),
            last_slot: BTreeMap::new(),
            last: None,
        }
    }

    /// With `on`, [`Op::Promote`], [`Op::Remove`] and [`Op::BackOffFor`]
    /// run `promote`, `remove` and `back_off` (SPEC 3); without (the
    /// default), each is a `stats`, for the backends that have not got
    /// them yet.
    #[must_use]
    pub fn with_item_control(mut self, on: bool) -> Self {
        self.item_control = on;
        self
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

    fn receipt(&self, r: &ReceiptRef) -> Receipt {
        match r {
            ReceiptRef::Slot(i) => self.receipts.get(*i).copied().unwrap_or(Receipt {
                id: 0,
                delivery: 0,
                lease: u64::MAX,
            }),
            ReceiptRef::Forged(r) => *r,
        }
    }

    fn receipt_ref(&self, v: u8) -> ReceiptRef {
        let locations = self.model.locations();
        let live: Vec<usize> = self
            .last_slot
            .iter()
            .filter(|(id, _)| locations.get(id) == Some(&ItemState::Pending))
            .map(|(_, slot)| *slot)
            .collect();
        let n = usize::from(v);
        if v < 200 && !live.is_empty() {
            ReceiptRef::Slot(live[n % live.len()])
        } else if v < 240 && !self.receipts.is_empty() {
            ReceiptRef::Slot(n % self.receipts.len())
        } else {
            let id = if self.max_id > 0 {
                1 + u64::from(v) % self.max_id
            } else {
                1 + u64::from(v % 4)
            };
            ReceiptRef::Forged(Receipt {
                id,
                delivery: 1,
                lease: (1 << 60) + u64::from(v),
            })
        }
    }

    /// Below 200, the id of an item whose location passes `want`, when
    /// there is one; otherwise [`Reference::id`].
    fn id_at(&self, v: u8, want: impl Fn(ItemState) -> bool) -> u64 {
        let ids: Vec<u64> = self
            .model
            .locations()
            .into_iter()
            .filter(|(_, at)| want(*at))
            .map(|(id, _)| id)
            .collect();
        if v < 200 && !ids.is_empty() {
            ids[usize::from(v) % ids.len()]
        } else {
            self.id(v)
        }
    }

    fn id(&self, v: u8) -> u64 {
        if v < 224 && self.max_id > 0 {
            1 + u64::from(v) % self.max_id
        } else {
            self.max_id + 1 + u64::from(v % 4)
        }
    }

    fn resolve(&self, op: &Op) -> Call {
        let now = self.now_ms;
        match op {
            Op::Add(i) => Call::Add(i.build()),
            Op::AddBatch(v) => {
                Call::AddBatch(v.iter().take(MAX_BATCH).map(|i| i.build()).collect())
            }
            Op::AddDelayed(i, d) => Call::AddDelayed(i.build(), offset_ms(now, *d)),
            Op::NextDue => Call::NextDue,
            Op::PromoteDue => Call::PromoteDue,
            Op::Claim { count, due_only } => Call::Claim(
                count_of(*count),
                if *due_only {
                    ClaimFrom::DueOnly
                } else {
                    ClaimFrom::All
                },
            ),
            Op::Ack(r) => Call::Ack(self.receipt_ref(*r)),
            Op::AckBatch(v) => Call::AckBatch(
                v.iter()
                    .take(MAX_BATCH)
                    .map(|r| self.receipt_ref(*r))
                    .collect(),
            ),
            Op::AckWithResult(r, b) => Call::AckWithResult(self.receipt_ref(*r), bytes_of(*b)),
            Op::Outcome(v) => Call::Outcome(self.id(*v)),
            Op::SetProgress(r, b) => Call::SetProgress(self.receipt_ref(*r), bytes_of(*b)),
            Op::SendChunk(r, b) => Call::SendChunk(self.receipt_ref(*r), bytes_of(*b)),
            Op::Progress(v) => Call::Progress(self.id(*v)),
            Op::Chunks(v, after) => Call::Chunks(self.id(*v), u64::from(after % 6)),
            Op::Touch(v) => Call::Touch(
                v.iter()
                    .take(MAX_BATCH)
                    .map(|r| self.receipt_ref(*r))
                    .collect(),
            ),
            Op::Retry(r, d) => Call::Retry(self.receipt_ref(*r), offset_ms(now, *d)),
            Op::Release(r, d) => Call::Release(self.receipt_ref(*r), offset_ms(now, *d)),
            Op::DeadLetter(r, w) => {
                Call::DeadLetter(self.receipt_ref(*r), pick(&REASONS, *w).to_string())
            }
            Op::Reclaim { idle, count } => Call::Reclaim(idle_ms(*idle), count_of(*count)),
            Op::Pause(f) => Call::Pause(pick(&FLOWS, *f).to_string()),
            Op::Resume(f) => Call::Resume(pick(&FLOWS, *f).to_string()),
            Op::Park(r) => Call::Park(self.receipt_ref(*r)),
            Op::Step(f) => Call::Step(pick(&FLOWS, *f).to_string()),
            Op::ClearFlow(f) => Call::ClearFlow(pick(&FLOWS, *f).to_string()),
            Op::Parked(f) => Call::Parked(pick(&FLOWS, *f).to_string()),
            Op::PausedFlows => Call::PausedFlows,
            Op::RateLimit(f, v) => Call::SetFlowLimit(
                pick(&FLOWS, *f).to_string(),
                FlowLimit::Rate((v % 4 != 0).then(|| crate::limit::RateLimit {
                    permits: u32::from(v % 3) + 1,
                    period_ms: (u64::from(v / 4 % 8) + 1) * 250,
                })),
            ),
            Op::Concurrency(f, v) => Call::SetFlowLimit(
                pick(&FLOWS, *f).to_string(),
                FlowLimit::Concurrency((v % 4 != 0).then_some(u32::from(v % 3) + 1)),
            ),
            Op::BackOff(f, v) => Call::SetFlowLimit(
                pick(&FLOWS, *f).to_string(),
                FlowLimit::BackOffUntil((v % 4 != 0).then(|| offset_ms(now, *v))),
            ),
            Op::FlowLimits => Call::FlowLimits,
            Op::MarkDone(i, s) => Call::MarkDone(done_id(*i), pick(&STEPS, *s).to_string()),
            Op::WasDone(i, s) => Call::WasDone(done_id(*i), pick(&STEPS, *s).to_string()),
            Op::DeadLetters(n) => Call::DeadLetters(usize::from(n % 8)),
            Op::Redrive(v) => {
                let dead: Vec<u64> = self
                    .model
                    .locations()
                    .into_iter()
                    .filter(|(_, at)| *at == ItemState::DeadLetter)
                    .map(|(id, _)| id)
                    .collect();
                if *v < 200 && !dead.is_empty() {
                    Call::Redrive(dead[usize::from(*v) % dead.len()])
                } else {
                    Call::Redrive(self.id(*v))
                }
            }
            Op::PurgeDeadLetters => Call::PurgeDeadLetters,
            Op::Stats => Call::Stats,
            Op::BacklogByFlow(n) => Call::BacklogByFlow(usize::from(n % 8)),
            Op::Peek(n) => Call::Peek(usize::from(n % 8)),
            Op::Advance(v) => Call::Advance(advance_ms(*v)),
            Op::StepBack(v) => Call::StepBack(step_back_ms(*v)),
            Op::Reopen if self.reopen => Call::Reopen,
            Op::Reopen => Call::Stats,
            Op::Promote(_) | Op::Remove(_) | Op::BackOffFor(..) if !self.item_control => {
                Call::Stats
            }
            Op::Promote(v) => Call::Promote(self.id_at(*v, |at| at == ItemState::Delayed)),
            Op::Remove(v) => Call::Remove(self.id_at(*v, |_| true)),
            Op::BackOffFor(f, v) => {
                Call::BackOff(pick(&FLOWS, *f).to_string(), u64::from(v % 32) * 250)
            }
        }
    }

    fn run(&mut self, call: &Call) -> Outcome {
        let now = self.now_ms;
        // Every backend notes the clock at every operation (SPEC 8, Clock
        // steps); only `StepBack` moves it back.
        if !matches!(call, Call::Advance(_) | Call::StepBack(_)) {
            self.model.observe_clock(now);
        }
        let m = &mut self.model;
        match call {
            Call::Add(i) => outcome(m.add_many(vec![(i.clone(), None)], now), Value::Added),
            Call::AddBatch(v) => outcome(
                m.add_many(v.iter().map(|i| (i.clone(), None)).collect(), now),
                Value::Added,
            ),
            Call::AddDelayed(i, t) => {
                outcome(m.add_many(vec![(i.clone(), Some(*t))], now), Value::Added)
            }
            Call::NextDue => Ok(Value::Due(m.next_due())),
            Call::PromoteDue => Ok(Value::Count(m.promote_due(now))),
            Call::Claim(n, from) => outcome(m.claim(*n, *from, now), Value::Claimed),
            Call::Ack(r) => {
                let r = self.receipt(r);
                outcome(self.model.ack(r, now), |()| Value::Unit)
            }
            Call::AckBatch(v) => {
                let rs: Vec<Receipt> = v.iter().map(|r| self.receipt(r)).collect();
                Ok(Value::Count(self.model.ack_batch(&rs, now)))
            }
            Call::AckWithResult(r, b) => {
                let r = self.receipt(r);
                outcome(self.model.ack_with_result(r, b.clone(), now), |()| {
                    Value::Unit
                })
            }
            Call::Outcome(id) => Ok(Value::Outcome(self.model.outcome(*id, now))),
            Call::SetProgress(r, b) => {
                let r = self.receipt(r);
                outcome(self.model.set_progress(r, b.clone()), |()| Value::Unit)
            }
            Call::SendChunk(r, b) => {
                let r = self.receipt(r);
                outcome(self.model.send_chunk(r, b.clone()), Value::Count)
            }
            Call::Progress(id) => Ok(Value::Bytes(self.model.progress(*id, now))),
            Call::Chunks(id, after) => Ok(Value::Chunks(self.model.chunks_after(*id, *after, now))),
            Call::Touch(v) => {
                let rs: Vec<Receipt> = v.iter().map(|r| self.receipt(r)).collect();
                outcome(self.model.touch(&rs, now), |()| Value::Unit)
            }
            Call::Retry(r, t) => {
                let r = self.receipt(r);
                outcome(self.model.retry(r, *t, now), Value::Retry)
            }
            Call::Release(r, t) => {
                let r = self.receipt(r);
                outcome(self.model.release(r, *t, now), |()| Value::Unit)
            }
            Call::DeadLetter(r, why) => {
                let r = self.receipt(r);
                outcome(self.model.dead_letter(r, why, now), |()| Value::Unit)
            }
            Call::Reclaim(idle, n) => outcome(
                m.reclaim_stale(Duration::from_millis(*idle), *n, now)
                    .map(|r| r.claimed),
                Value::Claimed,
            ),
            Call::Pause(f) => outcome(m.pause(f), |()| Value::Unit),
            Call::Resume(f) => outcome(m.resume(f, now), Value::Count),
            Call::Park(r) => {
                let r = self.receipt(r);
                outcome(self.model.park(r, now), |()| Value::Unit)
            }
            Call::Step(f) => outcome(m.step(f, now), Value::Step),
            Call::ClearFlow(f) => outcome(m.clear_flow(f), Value::Count),
            Call::Parked(f) => Ok(Value::Count(m.parked(f))),
            Call::PausedFlows => Ok(Value::Flows(m.paused_flows())),
            Call::SetFlowLimit(f, l) => outcome(m.set_flow_limit(f, *l, now), |()| Value::Unit),
            Call::FlowLimits => Ok(Value::Limits(m.flow_limits(now))),
            Call::MarkDone(id, s) => {
                m.mark_done(*id, s, now);
                Ok(Value::Unit)
            }
            Call::WasDone(id, s) => Ok(Value::Bool(m.was_done(*id, s, now))),
            Call::DeadLetters(n) => Ok(Value::Dead(m.dead_letters(*n))),
            Call::Redrive(id) => Ok(Value::Bool(m.redrive(*id, now))),
            Call::PurgeDeadLetters => Ok(Value::Count(m.purge_dead_letters())),
            Call::Stats => Ok(Value::Stats(m.stats(now))),
            Call::BacklogByFlow(n) => Ok(Value::ByFlow(m.backlog_by_flow(*n, now))),
            Call::Peek(n) => Ok(Value::Items(m.peek(*n, now))),
            Call::Advance(by) => {
                self.now_ms = self.now_ms.saturating_add(*by);
                Ok(Value::Unit)
            }
            Call::StepBack(by) => {
                self.now_ms = self.now_ms.saturating_sub(*by);
                let now = self.now_ms;
                self.model.observe_clock(now);
                Ok(Value::Stats(self.model.stats(now)))
            }
            Call::Reopen => {
                m.reopen();
                Ok(Value::Unit)
            }
            Call::Promote(id) => Ok(Value::Bool(m.promote(*id, now))),
            Call::Remove(id) => outcome(m.remove(*id, now), Value::Bool),
            Call::BackOff(f, d) => outcome(m.back_off(f, *d, now), |()| Value::Unit),
        }
    }

    /// Resolve `op` against the current state, run it on the model, remember
    /// what it handed out, and return the call with its expected outcome
    /// (also kept as [`Reference::last`]).
    pub fn apply(&mut self, op: &Op) -> (Call, Outcome) {
        let call = self.resolve(op);
        let out = self.run(&call);
        // The check after every step reads `stats`, which notes the clock
        // on every backend: so does the model.
        self.model.observe_clock(self.now_ms);
        if let Ok(v) = &out {
            for a in added(v) {
                self.max_id = self.max_id.max(a.id);
            }
            for c in claimed(v) {
                self.last_slot.insert(c.receipt.id, self.receipts.len());
                self.receipts.push(c.receipt);
            }
        }
        self.last = Some((call.clone(), out.clone()));
        (call, out)
    }
}
