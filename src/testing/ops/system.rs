//! The system side of a run: the same [`Call`] on a real backend, compared with
//! the reference after every step (values, `stats`, recount, `list` and
//! `find`).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use super::call::{Call, Outcome, ReceiptRef, Value, claimed, outcome};
use super::reference::Reference;
#[cfg(feature = "embedded")]
use super::target::EmbeddedTarget;
use super::target::Target;
#[cfg(feature = "embedded")]
use super::{Op, START_MS, Setup};
use crate::backend::memory::Model;
use crate::browse::ItemState;
use crate::clock::ManualClock;
use crate::item::{Claimed, Receipt, Stats};
use crate::queue::{BoxQueue, WorkQueue};

/// The system side of a run: a backend on a [`ManualClock`], its own
/// receipts (slot for slot with the reference's), and the comparison.
pub struct System {
    target: Box<dyn Target>,
    clock: ManualClock,
    receipts: Vec<Receipt>,
    leases: BTreeSet<u64>,
    reused_lease: Option<u64>,
    exact_leases: bool,
}

impl fmt::Debug for System {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("System")
            .field("now_ms", &crate::Clock::now_ms(&self.clock))
            .field("receipts", &self.receipts.len())
            .finish_non_exhaustive()
    }
}

impl System {
    /// A system over `target`, whose queue must read `clock` (started at
    /// [`START_MS`]). With `exact_leases`, receipts' lease numbers must equal
    /// the model's; otherwise they only have to be unique.
    pub fn new(target: Box<dyn Target>, clock: ManualClock, exact_leases: bool) -> Self {
        System {
            target,
            clock,
            receipts: Vec::new(),
            leases: BTreeSet::new(),
            reused_lease: None,
            exact_leases,
        }
    }

    /// The queue under test.
    pub fn queue(&self) -> &BoxQueue {
        self.target.queue()
    }

    fn receipt(&self, r: &ReceiptRef) -> Receipt {
        match r {
            // A slot the system never got (the outcomes already differed)
            // becomes a receipt that matches nothing.
            ReceiptRef::Slot(i) => self.receipts.get(*i).copied().unwrap_or(Receipt {
                id: 0,
                delivery: 0,
                lease: u64::MAX,
            }),
            ReceiptRef::Forged(r) => *r,
        }
    }

    /// Run `call` on the backend, keeping the receipts it hands out (slot
    /// for slot with the reference's).
    pub async fn run(&mut self, call: &Call) -> Outcome {
        let got = self.run_call(call).await;
        if let Ok(v) = &got {
            for c in claimed(v) {
                if !self.leases.insert(c.receipt.lease) {
                    self.reused_lease.get_or_insert(c.receipt.lease);
                }
                self.receipts.push(c.receipt);
            }
        }
        got
    }

    async fn run_call(&mut self, call: &Call) -> Outcome {
        let q = self.target.queue().clone();
        match call {
            Call::Add(i) => outcome(q.add(i.clone()).await, |a| Value::Added(vec![a])),
            Call::AddBatch(v) => outcome(q.add_batch(v.clone()).await, Value::Added),
            Call::AddDelayed(i, t) => outcome(q.add_delayed(i.clone(), *t).await, |a| {
                Value::Added(vec![a])
            }),
            Call::NextDue => outcome(q.next_due().await, Value::Due),
            Call::PromoteDue => outcome(q.promote_due().await, Value::Count),
            Call::Claim(n, from) => {
                outcome(q.claim(*n, Duration::ZERO, *from).await, Value::Claimed)
            }
            Call::Ack(r) => outcome(q.ack(self.receipt(r)).await, |()| Value::Unit),
            Call::AckBatch(v) => {
                let rs = v.iter().map(|r| self.receipt(r)).collect();
                outcome(q.ack_batch(rs).await, Value::Count)
            }
            Call::AckWithResult(r, b) => {
                outcome(q.ack_with_result(self.receipt(r), b.clone()).await, |()| {
                    Value::Unit
                })
            }
            Call::Outcome(id) => outcome(q.outcome(*id).await, Value::Outcome),
            Call::SetProgress(r, b) => {
                outcome(q.set_progress(self.receipt(r), b.clone()).await, |()| {
                    Value::Unit
                })
            }
            Call::SendChunk(r, b) => {
                outcome(q.send_chunk(self.receipt(r), b.clone()).await, Value::Count)
            }
            Call::Progress(id) => outcome(q.progress(*id).await, Value::Bytes),
            Call::Chunks(id, after) => outcome(
                q.wait_chunks(*id, *after, Duration::ZERO).await,
                Value::Chunks,
            ),
            Call::Touch(v) => {
                let rs = v.iter().map(|r| self.receipt(r)).collect();
                outcome(q.touch(rs).await, |()| Value::Unit)
            }
            Call::Retry(r, t) => outcome(q.retry(self.receipt(r), *t).await, Value::Retry),
            Call::Release(r, t) => outcome(q.release(self.receipt(r), *t).await, |()| Value::Unit),
            Call::DeadLetter(r, why) => {
                outcome(q.dead_letter(self.receipt(r), why).await, |()| Value::Unit)
            }
            Call::Reclaim(idle, n) => outcome(
                q.reclaim_stale(Duration::from_millis(*idle), *n).await,
                Value::Claimed,
            ),
            Call::Pause(f) => outcome(q.pause(f).await, |()| Value::Unit),
            Call::Resume(f) => outcome(q.resume(f).await, Value::Count),
            Call::Park(r) => outcome(q.park(self.receipt(r)).await, |()| Value::Unit),
            Call::Step(f) => outcome(q.step(f).await, Value::Step),
            Call::ClearFlow(f) => outcome(q.clear_flow(f).await, Value::Count),
            Call::Parked(f) => outcome(q.parked(f).await, Value::Count),
            Call::PausedFlows => outcome(q.paused_flows().await, Value::Flows),
            Call::SetFlowLimit(f, l) => outcome(q.set_flow_limit(f, *l).await, |()| Value::Unit),
            Call::FlowLimits => outcome(q.flow_limits().await, Value::Limits),
            Call::MarkDone(id, s) => outcome(q.mark_done(*id, s).await, |()| Value::Unit),
            Call::WasDone(id, s) => outcome(q.was_done(*id, s).await, Value::Bool),
            Call::DeadLetters(n) => outcome(q.dead_letters(*n).await, Value::Dead),
            Call::Redrive(id) => outcome(q.redrive(*id).await, Value::Bool),
            Call::PurgeDeadLetters => outcome(q.purge_dead_letters().await, Value::Count),
            Call::Stats => outcome(q.stats().await, Value::Stats),
            Call::BacklogByFlow(n) => outcome(q.backlog_by_flow(*n).await, Value::ByFlow),
            Call::Peek(n) => outcome(q.peek(*n).await, Value::Items),
            Call::Advance(by) => {
                self.clock.advance(Duration::from_millis(*by));
                // The model notes the clock after every step
                // (`Reference::apply`): so must the backend, or a step back
                // that follows is measured from an older time than the
                // model's. A read at a later time than any before it: it
                // finds no step back and commits nothing. (The model
                // tests' check after every step reads `stats` anyway; the
                // `crash_recovery` target runs no check and found this.)
                let _ = q.stats().await;
                Ok(Value::Unit)
            }
            Call::StepBack(by) => {
                let now = crate::clock::Clock::now_ms(&self.clock);
                self.clock.set(now.saturating_sub(*by));
                outcome(q.stats().await, Value::Stats)
            }
            Call::Reopen => {
                drop(q);
                outcome(self.target.reopen().await, |()| Value::Unit)
            }
            Call::Promote(id) => outcome(q.promote(*id).await, Value::Bool),
            Call::Remove(id) => outcome(q.remove(*id).await, Value::Bool),
            Call::BackOff(f, d) => outcome(q.back_off(f, Duration::from_millis(*d)).await, |()| {
                Value::Unit
            }),
        }
    }

    /// `v` as compared: lease numbers blanked unless they must be exact.
    pub fn normalise(&self, v: &Outcome) -> Outcome {
        let mut v = v.clone();
        if !self.exact_leases {
            let blank = |c: &mut Claimed| c.receipt.lease = 0;
            match &mut v {
                Ok(Value::Claimed(cs)) => cs.iter_mut().for_each(blank),
                Ok(Value::Step(Some(c))) => blank(c),
                _ => {}
            }
        }
        v
    }

    /// Run the reference's last call on the backend and compare: the
    /// outcome, then `stats()`, then (where the backend offers one) the full
    /// recount against the model's locations.
    ///
    /// # Errors
    ///
    /// A description of the first difference.
    pub async fn verify(&mut self, reference: &Reference) -> Result<(), String> {
        let Some((call, expected)) = reference.last() else {
            return Ok(());
        };
        let got = self.run(call).await;
        if let Some(lease) = self.reused_lease {
            return Err(format!(
                "{call:?}: lease {lease} handed out twice ({got:?})"
            ));
        }
        if self.normalise(&got) != self.normalise(expected) {
            return Err(format!(
                "{call:?}\n  model:  {expected:?}\n  system: {got:?}"
            ));
        }
        self.check(reference).await
    }

    /// Compare `stats()` and the recount with the model (the invariants
    /// checked after every step).
    ///
    /// # Errors
    ///
    /// A description of the first difference.
    pub async fn check(&self, reference: &Reference) -> Result<(), String> {
        let model = reference.model();
        let want = model.stats(reference.now_ms());
        let stats = self
            .queue()
            .stats()
            .await
            .map_err(|e| format!("stats failed: {e}"))?;
        if stats != want {
            return Err(format!("stats\n  model:  {want:?}\n  system: {stats:?}"));
        }
        if let Some(recount) = self.target.recount().await {
            let located = recount.map_err(|e| format!("recount failed: {e}"))?;
            let expected = model.locations();
            if located != expected {
                return Err(format!(
                    "locations\n  model:  {expected:?}\n  system: {located:?}"
                ));
            }
            let count = |at: ItemState| located.values().filter(|l| **l == at).count() as u64;
            let recounted = Stats {
                backlog: count(ItemState::Backlog) + count(ItemState::Due),
                due: count(ItemState::Due),
                pending: count(ItemState::Pending),
                delayed: count(ItemState::Delayed),
                parked: count(ItemState::Parked),
                dead_letters: count(ItemState::DeadLetter),
                ..stats
            };
            if recounted != stats {
                return Err(format!(
                    "stats {stats:?} disagree with the recount {recounted:?}"
                ));
            }
        }
        compare_lists(self.queue(), model).await
    }
}

/// Run `ops` from `setup` on the embedded backend and on the model in lock
/// step (the `ops_vs_model` fuzz target and its replays).
///
/// # Errors
///
/// A description of the first difference, with the step number.
#[cfg(feature = "embedded")]
pub async fn run_embedded(setup: &Setup, ops: &[Op]) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let target = EmbeddedTarget::new(setup.config().clock(clock.clone()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    run_on(Box::new(target), clock, setup, ops).await
}

/// As [`run_embedded`], on [`EmbeddedTarget::in_memory`] named `name`
/// (unique in the process): the same comparison without the file system.
///
/// # Errors
///
/// As [`run_embedded`].
#[cfg(feature = "embedded")]
pub async fn run_embedded_in_memory(name: String, setup: &Setup, ops: &[Op]) -> Result<(), String> {
    run_embedded_on_disk(name, crate::testing::faults::SimDisk::new(), setup, ops).await
}

/// As [`run_embedded_in_memory`], on `disk`, which must hold nothing or a
/// fresh, empty queue (a copy of one's
/// [`image`](crate::testing::faults::SimDisk::image): the model starts
/// empty).
///
/// # Errors
///
/// As [`run_embedded`].
#[cfg(feature = "embedded")]
pub async fn run_embedded_on_disk(
    name: String,
    disk: crate::testing::faults::SimDisk,
    setup: &Setup,
    ops: &[Op],
) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let target = EmbeddedTarget::on_disk(name, disk, setup.config().clock(clock.clone()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    run_on(Box::new(target), clock, setup, ops).await
}

#[cfg(feature = "embedded")]
pub(super) async fn run_on(
    target: Box<dyn Target>,
    clock: ManualClock,
    setup: &Setup,
    ops: &[Op],
) -> Result<(), String> {
    let mut reference = Reference::new(setup, true, true);
    let mut system = System::new(target, clock, true);
    system.check(&reference).await?;
    for (n, op) in ops.iter().enumerate() {
        let _ = reference.apply(op);
        system
            .verify(&reference)
            .await
            .map_err(|e| format!("step {n} ({op:?}): {e}"))?;
    }
    Ok(())
}

/// SPEC 12.1 after every step: each state read page by page through `list`
/// equals the model's, in order, and `find` names every item's state.
///
/// # Errors
///
/// A description of the first difference.
pub(super) async fn compare_lists(q: &BoxQueue, model: &Model) -> Result<(), String> {
    use crate::browse::{ItemState, ListQuery, ListedItem};
    // What every backend must agree on (the consumer name is Redis' own).
    type Key = (
        crate::item::Item,
        ItemState,
        Option<u64>,
        Option<String>,
        Option<u64>,
        bool,
    );
    let key = |l: ListedItem| {
        (
            l.item,
            l.state,
            l.claimed_at_ms,
            l.reason,
            l.failed_at_ms,
            l.held,
        )
    };
    // Every item `stats` counts is listed in its state (held ones too).
    let stats = q.stats().await.map_err(|e| format!("stats failed: {e}"))?;
    let mut listed = std::collections::BTreeMap::new();
    for state in ItemState::ALL {
        let want: Vec<Key> = model
            .list(&ListQuery::new(state).limit(crate::MAX_LIST_LIMIT))
            .map_err(|e| format!("model list failed: {e}"))?
            .items
            .into_iter()
            .map(key)
            .collect();
        let mut got: Vec<Key> = Vec::new();
        let mut offset = 0;
        for _ in 0..10_000 {
            let page = q
                .list(ListQuery::new(state).offset(offset).limit(3))
                .await
                .map_err(|e| format!("list {state:?} failed: {e}"))?;
            got.extend(page.items.into_iter().map(key));
            match page.next_offset {
                Some(n) => offset = n,
                None => break,
            }
        }
        if got != want {
            return Err(format!(
                "list {state:?}\n  model:  {want:?}\n  system: {got:?}"
            ));
        }
        listed.insert(state, got.len() as u64);
        for (item, _, _, _, _, held) in &want {
            let found = q
                .find(item.id)
                .await
                .map_err(|e| format!("find {} failed: {e}", item.id))?
                .map(|l| (l.state, l.held));
            if found != Some((state, *held)) {
                return Err(format!(
                    "find {}: {found:?}, model: {:?}",
                    item.id,
                    (state, *held)
                ));
            }
        }
    }
    let n = |s: ItemState| listed.get(&s).copied().unwrap_or(0);
    let counted = (
        stats.backlog,
        stats.due,
        stats.delayed,
        stats.pending,
        stats.parked,
        stats.dead_letters,
    );
    let shown = (
        n(ItemState::Backlog) + n(ItemState::Due),
        n(ItemState::Due),
        n(ItemState::Delayed),
        n(ItemState::Pending),
        n(ItemState::Parked),
        n(ItemState::DeadLetter),
    );
    if counted != shown {
        return Err(format!(
            "listed per state {shown:?}, stats count {counted:?} (backlog, due, delayed, pending, parked, dead letters)"
        ));
    }
    Ok(())
}
