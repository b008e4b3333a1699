//! The system side of a run: the same [`Call`] on a real backend through
//! [`WorkQueue::call`], its reply compared with the reference's after every
//! step, and the whole state (`stats`, recount, `list` and `find`)
//! compared when asked ([`System::check`]).

use std::collections::BTreeSet;
use std::fmt;
use std::time::Duration;

use super::call::{Call, NO_RECEIPT, Outcome, claimed, claimed_mut, map_receipts, outcome};
use super::reference::Reference;
use super::target::Target;
use crate::backend::memory::Model;
use crate::browse::ItemState;
use crate::clock::ManualClock;
use crate::item::{Receipt, Stats};
use crate::queue::{BoxQueue, WorkQueue};
use crate::request::{Reply, Request};

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
    /// [`START_MS`](super::START_MS)). With `exact_leases`, receipts' lease numbers must equal
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

    /// The system's receipt for the reference's `r`: its own receipt of
    /// the same slot (one that matches nothing if it never got that slot),
    /// or `r` itself if the reference never handed it out (a forged one).
    fn receipt(&self, reference: &Reference, r: Receipt) -> Receipt {
        match reference.slot_of(&r) {
            Some(slot) => self.receipts.get(slot).copied().unwrap_or(NO_RECEIPT),
            None => r,
        }
    }

    /// Run `call` (resolved against `reference`) on the backend, keeping
    /// the receipts it hands out (slot for slot with the reference's).
    pub async fn run(&mut self, call: &Call, reference: &Reference) -> Outcome {
        let got = self.run_call(call, reference).await;
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

    async fn run_call(&mut self, call: &Call, reference: &Reference) -> Outcome {
        let q = self.target.queue().clone();
        match call {
            Call::Request(request) => {
                let request = map_receipts(request.clone(), |r| self.receipt(reference, r));
                outcome(q.call(request).await)
            }
            Call::Advance(by) => {
                self.clock.advance(Duration::from_millis(*by));
                // The model notes the clock after every step
                // (`Reference::apply`): so must the backend, or a step back
                // that follows is measured from an older time than the
                // model's. A read at a later time than any before it: it
                // finds no step back and commits nothing. (The
                // `crash_recovery` target runs no check and found this.)
                // `next_due`, not `stats`: on Redis `stats` writes nothing,
                // so that it runs on a read-only replica, and notes no time.
                let _ = q.call(Request::NextDue).await;
                Ok(Reply::Unit)
            }
            Call::StepBack(by) => {
                let now = crate::clock::Clock::now_ms(&self.clock);
                self.clock.set(now.saturating_sub(*by));
                // The model moves its times at the step: `next_due` makes
                // every backend meet it (Redis's `stats` only looks).
                let _ = q.call(Request::NextDue).await;
                outcome(q.call(Request::Stats).await)
            }
            Call::Reopen => {
                drop(q);
                self.target
                    .reopen()
                    .await
                    .map(|()| Reply::Unit)
                    .map_err(|e| (&e).into())
            }
        }
    }

    /// `v` as compared: lease numbers blanked unless they must be exact.
    pub fn normalise(&self, v: &Outcome) -> Outcome {
        let mut v = v.clone();
        if !self.exact_leases
            && let Ok(reply) = &mut v
        {
            for c in claimed_mut(reply) {
                c.receipt.lease = 0;
            }
        }
        v
    }

    /// Run the reference's last call on the backend and compare its reply
    /// with the reference's (the oracle of every step).
    ///
    /// # Errors
    ///
    /// A description of the difference.
    pub async fn step(&mut self, reference: &Reference) -> Result<(), String> {
        let Some((call, expected)) = reference.last() else {
            return Ok(());
        };
        let got = self.run(call, reference).await;
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
        Ok(())
    }

    /// [`System::step`], then [`System::check`]: the reply and the whole
    /// state.
    ///
    /// # Errors
    ///
    /// A description of the first difference.
    pub async fn verify(&mut self, reference: &Reference) -> Result<(), String> {
        self.step(reference).await?;
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
        compare_lists(self.queue(), model, reference.now_ms()).await
    }
}

/// SPEC 12.1 at every check: each state read page by page through `list`
/// equals the model's, in order, and `find` names every item's state.
///
/// # Errors
///
/// A description of the first difference.
pub(super) async fn compare_lists(q: &BoxQueue, model: &Model, now: u64) -> Result<(), String> {
    use crate::browse::{ItemState, ListQuery, ListedItem};
    // What every backend must agree on (the consumer name is Redis' own).
    type Key = (
        crate::item::Item,
        ItemState,
        Option<u64>,
        Option<String>,
        Option<u64>,
        bool,
        (Option<u64>, Option<Vec<u8>>),
    );
    let key = |l: ListedItem| {
        (
            l.item,
            l.state,
            l.claimed_at_ms,
            l.reason,
            l.failed_at_ms,
            l.held,
            (l.finished_at_ms, l.result),
        )
    };
    // Every item `stats` counts is listed in its state (held ones too).
    let stats = q.stats().await.map_err(|e| format!("stats failed: {e}"))?;
    let mut listed = std::collections::BTreeMap::new();
    for state in ItemState::ALL {
        let want: Vec<Key> = model
            .list(&ListQuery::new(state).limit(crate::MAX_LIST_LIMIT), now)
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
        for (item, _, _, _, _, held, _) in &want {
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
        (stats.completed, stats.cancelled),
    );
    let shown = (
        n(ItemState::Backlog) + n(ItemState::Due),
        n(ItemState::Due),
        n(ItemState::Delayed),
        n(ItemState::Pending),
        n(ItemState::Parked),
        n(ItemState::DeadLetter),
        (n(ItemState::Completed), n(ItemState::Cancelled)),
    );
    if counted != shown {
        return Err(format!(
            "listed per state {shown:?}, stats count {counted:?} (backlog, due, delayed, pending, parked, dead letters, (completed, cancelled))"
        ));
    }
    Ok(())
}
