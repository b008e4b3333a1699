//! Time in the file: a clock that steps back (SPEC 3, Clock steps) moves
//! every timer, claim time and expiry with it, and expired done markers,
//! dedup keys and outcomes are purged a bounded number per transaction.

use redb::{Key, ReadableTable, Table, Value};

use super::{BACKLOG_CLOCK, CLOCK_HIGH, Ctx, DUE_CLOCK, Tables};
use crate::backend::embedded::codec;
use crate::config::rank_back;
use crate::error::Result;
use crate::item::Lane;

/// How many expired done markers and dedup keys one transaction purges at
/// most, so that a backlog of expiries never makes one commit slow.
const PURGE_PER_TXN: usize = 256;

/// The latest time (ms) of the last clock step back this process warned
/// about, so that one step is told once.
static WARNED_HIGH: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A time index: (time in ms, id) -> (), the shape of `delayed`,
/// `pending_by_time`, `orphans`, `outcome_expiry` and `ack_run_expiry`.
type TimeIndex<'t> = Table<'t, (u64, u64), ()>;

/// For each of the four expiry indexes (`done_expiry`, `dedup_expiry`,
/// `outcome_expiry`, `ack_run_expiry`), a time in ms (queue clock) that no
/// entry of it lies before (SPEC 6, "Expiry floors"): the purge of a
/// transaction at `now` below it cannot find an expired entry there, so it
/// does not open that index. Opening a redb table (and closing it at the
/// end of the batch) costs about 6 000 instructions, and the purge opened
/// all four in every write transaction: with the redo offset's second
/// opening of `meta`, 39% of a single add's instructions.
///
/// A floor is only ever a lower bound: 0 (the default) means "unknown,
/// look", an insert lowers the floor to its time, a clock step back
/// (which moves every entry) resets all four, and a purge that looked sets
/// it to the earliest entry left (`u64::MAX` for an empty index). Skipping
/// a purge below the floor therefore changes nothing the purge would have
/// changed, so the live path and the replay of the redo log (which starts
/// from unknown floors) still write the same. The writer keeps the floors
/// across batches and goes back to the ones it had before a batch whose
/// transaction it did not keep (module `commit`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(in crate::backend::embedded) struct ExpiryFloors {
    pub(super) done: u64,
    pub(super) dedup: u64,
    pub(super) outcomes: u64,
    pub(super) ack_runs: u64,
}

/// The earliest time an expiry index holds (`u64::MAX` when it is empty),
/// read from its first key by `time`.
fn earliest<K: Key + 'static, V: Value + 'static>(
    index: &Table<'_, K, V>,
    time: impl for<'a> Fn(K::SelfType<'a>) -> u64,
    what: &str,
) -> Result<u64> {
    Ok(index
        .first()
        .ctx(what)?
        .map_or(u64::MAX, |(k, _)| time(k.value())))
}

impl ExpiryFloors {
    /// Whether the purge at `now` must look at an index with floor `floor`.
    fn due(floor: u64, now: u64) -> bool {
        floor <= now
    }
}

impl<'t> Tables<'t> {
    /// If the clock reads more than the tolerance below `latest` (the latest
    /// time this process has seen) or below the latest time a commit of the
    /// file saw, move every timer, claim time and expiry back by the step.
    /// Returns whether it moved them.
    pub(in crate::backend::embedded) fn observe_clock(
        &mut self,
        latest: u64,
        now: u64,
    ) -> Result<bool> {
        let high = self.counter(CLOCK_HIGH, 0)?.max(latest);
        let step = crate::clock::step_back(high, now);
        if let Some(back) = step {
            // Once per step: a queue opened read-only moves the times again
            // in every look (it never keeps them), from the same latest time.
            if WARNED_HIGH.swap(high, std::sync::atomic::Ordering::Relaxed) != high {
                tracing::warn!(
                    back_ms = back,
                    "the clock stepped back: timers and leases moved with it"
                );
            }
            self.rebase(back)?;
            self.shift_limits(back, now)?;
            self.set_counter(CLOCK_HIGH, now);
        }
        Ok(step.is_some())
    }

    /// At close: remember `latest`, the latest time this process saw, if
    /// the file's is older. Returns whether it wrote.
    pub(in crate::backend::embedded) fn save_clock(&mut self, latest: u64) -> Result<bool> {
        if self.counter(CLOCK_HIGH, 0)? >= latest {
            return Ok(false);
        }
        self.set_counter(CLOCK_HIGH, latest);
        self.write_counters()?;
        Ok(true)
    }

    /// After the operations of a transaction that writes anyway: remember
    /// the latest time seen.
    pub(in crate::backend::embedded) fn note_clock(&mut self, now: u64) -> Result<()> {
        if self.dirty && self.counter(CLOCK_HIGH, 0)? < now {
            self.set_counter(CLOCK_HIGH, now);
        }
        self.write_counters()
    }

    pub(super) fn rebase(&mut self, back: u64) -> Result<()> {
        // Every expiry moves back: the floors no longer hold.
        self.floors = ExpiryFloors::default();
        // SPEC 3, Priority: the lanes' arrivals move back too, so that
        // items arriving after the step rank behind those waiting and aging
        // counts elapsed time. All entries go before any comes back, so a
        // moved key never meets one not moved yet.
        for lane in [Lane::Backlog, Lane::Due] {
            let table = if lane == Lane::Due {
                self.due_mut()?
            } else {
                self.backlog_mut()?
            };
            let mut entries = Vec::new();
            while let Some((k, v)) = table
                .pop_first()
                .ctx("move ready lane")?
                .map(|(k, v)| (k.value(), v.value()))
            {
                entries.push((k, v));
            }
            for ((r, seq), id) in entries {
                table
                    .insert((rank_back(r, back), seq), id)
                    .ctx("move ready lane")?;
            }
            let key = if lane == Lane::Due {
                DUE_CLOCK
            } else {
                BACKLOG_CLOCK
            };
            let t = self.counter(key, 0)?;
            if t > 0 {
                self.set_counter(key, t.saturating_sub(back));
            }
        }
        for (_, moved, id) in self.shift_index(Self::delayed_mut, "move delayed", back)? {
            let mut rec = self.record(id)?;
            rec.not_before_ms = Some(moved);
            self.put_record(id, &rec)?;
        }
        for (at, moved, id) in
            self.shift_index(Self::pending_by_time_mut, "move lease index", back)?
        {
            if self
                .orphans_mut()?
                .remove((at, id))
                .ctx("move orphan")?
                .is_some()
            {
                self.orphans_mut()?
                    .insert((moved, id), ())
                    .ctx("move orphan")?;
            }
            if let Some(mut l) = self.lease(id)? {
                l.touched_at_ms = moved;
                // The claim time moves back by the same step (SPEC 3,
                // Clock steps), so the claim's age stays elapsed time.
                l.claimed_at_ms = l.claimed_at_ms.saturating_sub(back);
                self.pending_mut()?
                    .insert(id, codec::encode_lease(&l)?.as_slice())
                    .ctx("move lease")?;
            }
        }
        let mut done = Vec::new();
        for entry in self.done_expiry()?.iter().ctx("scan done expiry")? {
            let (k, _) = entry.ctx("scan done expiry")?;
            let (t, id, step) = k.value();
            done.push((t, id, step.to_string()));
        }
        for (t, id, step) in done {
            let moved = t.saturating_sub(back);
            self.done_expiry_mut()?
                .remove((t, id, step.as_str()))
                .ctx("move done expiry")?;
            self.done_expiry_mut()?
                .insert((moved, id, step.as_str()), ())
                .ctx("move done expiry")?;
            self.done_mut()?
                .insert((id, step.as_str()), moved)
                .ctx("move done marker")?;
        }
        let mut keys = Vec::new();
        for entry in self.dedup_expiry()?.iter().ctx("scan dedup expiry")? {
            let (k, _) = entry.ctx("scan dedup expiry")?;
            let (t, key) = k.value();
            keys.push((t, key.to_string()));
        }
        for (t, key) in keys {
            let moved = t.saturating_sub(back);
            self.dedup_expiry_mut()?
                .remove((t, key.as_str()))
                .ctx("move dedup expiry")?;
            self.dedup_expiry_mut()?
                .insert((moved, key.as_str()), ())
                .ctx("move dedup expiry")?;
            let first = self
                .dedup()?
                .get(key.as_str())
                .ctx("read dedup key")?
                .map(|g| g.value().0);
            if let Some(id) = first {
                self.dedup_mut()?
                    .insert(key.as_str(), (id, moved))
                    .ctx("move dedup key")?;
            }
        }
        for (_, moved, id) in
            self.shift_index(Self::outcome_expiry_mut, "move outcome expiry", back)?
        {
            if let Some(mut rec) = self.outcome_record(id)? {
                rec.expires_at_ms = moved;
                self.outcomes_mut()?
                    .insert(id, codec::encode(&rec)?.as_slice())
                    .ctx("move outcome")?;
            }
        }
        for (_, moved, first) in
            self.shift_index(Self::ack_run_expiry_mut, "move ack run expiry", back)?
        {
            let run = self
                .ack_runs()?
                .get(first)
                .ctx("read ack run")?
                .map(|g| g.value());
            if let Some((bits, at_ms, _)) = run {
                self.ack_runs_mut()?
                    .insert(first, (bits, at_ms, moved))
                    .ctx("move ack run")?;
            }
        }
        Ok(())
    }

    /// Move every key `(t, id)` of the time index `index` back by `back`
    /// ms (not below 0); returns each move as (old t, new t, id). All keys
    /// are read before any moves, so a moved key is never met again.
    fn shift_index(
        &mut self,
        index: fn(&mut Self) -> Result<&mut TimeIndex<'t>>,
        what: &str,
        back: u64,
    ) -> Result<Vec<(u64, u64, u64)>> {
        let table = index(self)?;
        let mut keys = Vec::new();
        for entry in table.iter().ctx(what)? {
            keys.push(entry.ctx(what)?.0.value());
        }
        let mut moves = Vec::with_capacity(keys.len());
        for (t, id) in keys {
            let moved = t.saturating_sub(back);
            table.remove((t, id)).ctx(what)?;
            table.insert((moved, id), ()).ctx(what)?;
            moves.push((t, moved, id));
        }
        Ok(moves)
    }

    /// Start a batch on tables that an earlier batch of the same
    /// transaction may have used: nothing written by it yet, and the
    /// expiry floors the writer kept (see [`ExpiryFloors`]; `Tables::open`
    /// starts from unknown ones).
    pub(in crate::backend::embedded) fn begin_batch(&mut self, floors: ExpiryFloors) {
        self.dirty = false;
        self.floors = floors;
    }

    /// The expiry floors as this transaction leaves them.
    pub(in crate::backend::embedded) fn floors(&self) -> ExpiryFloors {
        self.floors
    }

    /// Purge expired done markers, dedup keys, outcomes and ack runs as of
    /// `now`, at most [`PURGE_PER_TXN`] of each; an index whose floor lies
    /// after `now` is not looked at (see [`ExpiryFloors`]).
    pub(in crate::backend::embedded) fn purge_expired(&mut self, now: u64) -> Result<()> {
        if ExpiryFloors::due(self.floors.done, now) {
            self.purge_done_markers(now)?;
            self.floors.done = earliest(self.done_expiry()?, |k| k.0, "scan done expiry")?;
        }
        if ExpiryFloors::due(self.floors.dedup, now) {
            self.purge_dedup_keys(now)?;
            self.floors.dedup = earliest(self.dedup_expiry()?, |k| k.0, "scan dedup expiry")?;
        }
        if ExpiryFloors::due(self.floors.outcomes, now) {
            self.purge_outcomes(now)?;
            self.floors.outcomes =
                earliest(self.outcome_expiry()?, |k| k.0, "scan outcome expiry")?;
        }
        if ExpiryFloors::due(self.floors.ack_runs, now) {
            self.purge_ack_runs(now)?;
            self.floors.ack_runs =
                earliest(self.ack_run_expiry()?, |k| k.0, "scan ack run expiry")?;
        }
        Ok(())
    }

    fn purge_done_markers(&mut self, now: u64) -> Result<()> {
        let mut done = Vec::new();
        for entry in self
            .done_expiry()?
            .range(..(now.saturating_add(1), 0u64, ""))
            .ctx("scan done expiry")?
            .take(PURGE_PER_TXN)
        {
            let (k, _) = entry.ctx("scan done expiry")?;
            let (t, id, step) = k.value();
            done.push((t, id, step.to_string()));
        }
        for (t, id, step) in done {
            self.done_expiry_mut()?
                .remove((t, id, step.as_str()))
                .ctx("purge done marker")?;
            let live = self
                .done()?
                .get((id, step.as_str()))
                .ctx("read done marker")?
                .map(|g| g.value());
            if live == Some(t) {
                self.done_mut()?
                    .remove((id, step.as_str()))
                    .ctx("purge done marker")?;
            }
        }
        Ok(())
    }

    fn purge_dedup_keys(&mut self, now: u64) -> Result<()> {
        let mut keys = Vec::new();
        for entry in self
            .dedup_expiry()?
            .range(..(now.saturating_add(1), ""))
            .ctx("scan dedup expiry")?
            .take(PURGE_PER_TXN)
        {
            let (k, _) = entry.ctx("scan dedup expiry")?;
            let (t, key) = k.value();
            keys.push((t, key.to_string()));
        }
        for (t, key) in keys {
            self.dedup_expiry_mut()?
                .remove((t, key.as_str()))
                .ctx("purge dedup key")?;
            let live = self
                .dedup()?
                .get(key.as_str())
                .ctx("read dedup key")?
                .map(|g| g.value());
            if live.map(|(_, e)| e) == Some(t) {
                self.dedup_mut()?
                    .remove(key.as_str())
                    .ctx("purge dedup key")?;
            }
        }
        Ok(())
    }

    fn purge_outcomes(&mut self, now: u64) -> Result<()> {
        let mut outcomes = Vec::new();
        for entry in self
            .outcome_expiry()?
            .range(..(now.saturating_add(1), 0u64))
            .ctx("scan outcome expiry")?
            .take(PURGE_PER_TXN)
        {
            let (k, _) = entry.ctx("scan outcome expiry")?;
            outcomes.push(k.value());
        }
        for (t, id) in outcomes {
            self.outcome_expiry_mut()?
                .remove((t, id))
                .ctx("purge outcome")?;
            self.outcomes_mut()?.remove(id).ctx("purge outcome")?;
            self.forget_progress(id)?;
        }
        Ok(())
    }

    fn purge_ack_runs(&mut self, now: u64) -> Result<()> {
        let mut runs = Vec::new();
        for entry in self
            .ack_run_expiry()?
            .range(..(now.saturating_add(1), 0u64))
            .ctx("scan ack run expiry")?
            .take(PURGE_PER_TXN)
        {
            let (k, _) = entry.ctx("scan ack run expiry")?;
            runs.push(k.value());
        }
        for (t, first) in runs {
            self.purge_ack_run(t, first)?;
        }
        Ok(())
    }
}
