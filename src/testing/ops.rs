//! Every operation of SPEC section 3 as data, applied in lock step to the
//! reference [`Model`](crate::testing::Model) and to a real backend, with every return value,
//! `stats()` and (where the backend offers one) a full recount compared after
//! each step.
//!
//! An [`Op`] is bounded and cheap to generate: it names items, receipts,
//! flows and dedup keys through small indexes into what the reference knows
//! (ids handed out so far, receipts of items pending now), so most steps hit
//! live items instead of missing. [`Reference::apply`] resolves an `Op`
//! against the model into a [`Call`] (a [`Request`](crate::Request) of the
//! contract, or one of the runner's controls: move the clock, step it
//! back, reopen) and carries it out on the model ([`answer`]) for its
//! expected [`Outcome`] (a [`Reply`](crate::Reply) or an error's kind);
//! [`System::step`] sends the same request to the backend through
//! [`WorkQueue::call`](crate::WorkQueue::call), with each receipt swapped
//! for the system's receipt of the same claim, and compares the replies;
//! [`System::check`] compares the whole state. Both proptest
//! ([`op_strategy`], used by `tests/model.rs` with proptest-state-machine)
//! and cargo-fuzz (`Arbitrary`, used by the `ops_vs_model` and
//! `crash_recovery` targets) drive this one code path.
//!
//! Not part of the stable API.

use std::time::Duration;

use arbitrary::Arbitrary;

use crate::config::{Config, Retention};
use crate::item::NewItem;

mod answer;
mod call;
mod decode;
mod reference;
mod run;
mod strategy;
mod system;
mod target;
#[cfg(test)]
mod tests;

pub use answer::answer;
pub use call::{Call, ErrorKind, Outcome, map_receipts};
pub use decode::{ControlsOp, Draw, LegacyOp, arbitrary_op};
pub use reference::Reference;
pub use run::{CHECK_EVERY, Compare, run_ops};
#[cfg(feature = "embedded")]
pub use run::{run_embedded, run_embedded_in_memory, run_embedded_on_disk};
pub use strategy::{op_strategy, op_strategy_with, setup_strategy};
pub use system::System;
#[cfg(feature = "embedded")]
pub use target::EmbeddedTarget;
pub use target::{FactoryTarget, Target};

/// The flows ops draw from; `""` is the default flow (pause, park and step
/// refuse it), and a name with a tab, which every add and flow operation
/// refuses (SPEC section 5).
pub const FLOWS: [&str; 4] = ["", "a", "b", "bad\tflow"];
/// The idempotency step names ops draw from.
pub const STEPS: [&str; 2] = ["send", "charge"];
/// The dedup keys ops draw from.
pub const DEDUP_KEYS: [&str; 3] = ["k1", "k2", "k3"];
/// The dead-letter reasons ops draw from.
pub const REASONS: [&str; 2] = ["bad input", "gave up"];
/// Where the manual clock starts, in ms since the Unix epoch.
pub const START_MS: u64 = 1_700_000_000_000;
/// Most items one `add_batch`, ids one `ack_batch` or receipts one `touch`
/// takes.
pub const MAX_BATCH: usize = 4;

/// The limits of one run, chosen small so that every limit is reached
/// (SPEC section 7). Each field is reduced into a small range by
/// [`Setup::config`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub struct Setup {
    /// `max_backlog`: none, or 1 to 10 items.
    pub max_backlog: Option<u8>,
    /// `dead_letter_cap`: 1 to 4 dead letters. Also the counts of the
    /// history's retentions (SPEC 3, History): 2 to 5 completed items, 1
    /// to 4 cancelled ones (drawn from fields that exist, so that the
    /// fuzzers' saved inputs keep their meaning).
    pub dead_letter_cap: u8,
    /// `max_deliveries`: 1 to 3.
    pub max_deliveries: u8,
    /// `dedup_window`: 0 to 6.3 s in 100 ms steps.
    pub dedup_window: u8,
    /// `done_ttl`: 0 to 6.3 s in 100 ms steps; also the age of
    /// `cancelled_retention` (0 keeps none).
    pub done_ttl: u8,
    /// `max_payload_bytes`: 8 to 23 bytes (payloads are 0 to 19 bytes).
    pub max_payload_bytes: u8,
    /// `result_ttl`: 0 to 6.3 s in 100 ms steps; also the age of
    /// `completed_retention` (0 keeps none).
    pub result_ttl: u8,
    /// `aging_step`: 0 to 3.1 s in 100 ms steps (SPEC section 3, Priority).
    pub aging_step: u8,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            max_backlog: Some(7),
            dead_letter_cap: 2,
            max_deliveries: 1,
            dedup_window: 10,
            done_ttl: 20,
            max_payload_bytes: 8,
            result_ttl: 30,
            aging_step: 10,
        }
    }
}

impl Setup {
    /// The queue configuration these limits stand for (without a clock).
    pub fn config(&self) -> Config {
        let cap = u64::from(self.dead_letter_cap % 4) + 1;
        let done_ttl = Duration::from_millis(u64::from(self.done_ttl % 64) * 100);
        let result_ttl = Duration::from_millis(u64::from(self.result_ttl % 64) * 100);
        Config::default()
            .max_backlog(self.max_backlog.map(|b| u64::from(b % 10) + 1))
            .dead_letter_cap(cap)
            .completed_retention(Retention::new(cap + 1, result_ttl))
            .cancelled_retention(Retention::new(cap, done_ttl))
            .max_deliveries(u32::from(self.max_deliveries % 3) + 1)
            .dedup_window(Duration::from_millis(
                u64::from(self.dedup_window % 64) * 100,
            ))
            .done_ttl(done_ttl)
            .max_payload_bytes(usize::from(self.max_payload_bytes % 16) + 8)
            .result_ttl(result_ttl)
            .aging_step(Duration::from_millis(u64::from(self.aging_step % 32) * 100))
    }
}

/// An item to add, as small numbers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Arbitrary)]
pub struct ItemSpec {
    /// Index into [`FLOWS`].
    pub flow: u8,
    /// Payload length, 0 to 19 bytes.
    pub len: u8,
    /// The byte the payload is filled with.
    pub fill: u8,
    /// Index into [`DEDUP_KEYS`], if the item asks for deduplication.
    pub dedup: Option<u8>,
    /// Priority tier, 0 to 2 (SPEC section 3, Priority).
    pub tier: u8,
}

impl ItemSpec {
    /// The item this spec stands for.
    pub fn build(&self) -> NewItem {
        let item = NewItem::new(vec![self.fill; usize::from(self.len % 20)])
            .flow(pick(&FLOWS, self.flow))
            .priority(self.tier % 3)
            .cost(u32::from(self.fill % 3) + 1);
        match self.dedup {
            Some(k) => item.dedup_key(pick(&DEDUP_KEYS, k)),
            None => item,
        }
    }
}

/// One step of a sequence: an operation of SPEC section 3 (or a clock move,
/// or a close-and-reopen), naming what it acts on by small indexes.
///
/// Receipt picks: below 200, a receipt of an item pending now (the model's
/// current claim of it); 200 to 239, any receipt handed out so far, likely
/// stale; 240 and up, a forged receipt no claim ever had. Id picks: below
/// 224, an id handed out so far; above, an id never handed out.
///
/// `Arbitrary` is written by hand ([`arbitrary_op`]) and draws every
/// variant; [`LegacyOp`] and [`ControlsOp`] decode bytes as `Op` was
/// decoded before later variants were added, so that fuzz inputs
/// committed before them keep their meaning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// `add`.
    Add(ItemSpec),
    /// `add_batch` of up to [`MAX_BATCH`] items.
    AddBatch(Vec<ItemSpec>),
    /// `add_delayed`, `not_before` = now + (delay - 32) x 100 ms (may be
    /// in the past).
    AddDelayed(ItemSpec, u8),
    /// `next_due`.
    NextDue,
    /// `promote_due`.
    PromoteDue,
    /// `claim` of `count` (0 is refused) with no wait.
    Claim {
        /// 0, or 1 to 4.
        count: u8,
        /// `ClaimFrom::DueOnly` instead of `All`.
        due_only: bool,
    },
    /// `ack`.
    Ack(u8),
    /// `ack_batch`.
    AckBatch(Vec<u8>),
    /// `ack_with_result`, the result 0 to 19 bytes of one fill byte.
    AckWithResult(u8, u8),
    /// `outcome` of an id.
    Outcome(u8),
    /// `set_progress`, bytes as for [`Op::AckWithResult`].
    SetProgress(u8, u8),
    /// `send_chunk`, bytes as for [`Op::AckWithResult`].
    SendChunk(u8, u8),
    /// `progress` of an id.
    Progress(u8),
    /// `wait_chunks` of an id after 0 to 5, with no wait.
    Chunks(u8, u8),
    /// `touch`.
    Touch(Vec<u8>),
    /// `retry`, `not_before` = now + (delay - 32) x 100 ms.
    Retry(u8, u8),
    /// `release`, `not_before` = now + (delay - 32) x 100 ms.
    Release(u8, u8),
    /// `dead_letter` with a reason from [`REASONS`].
    DeadLetter(u8, u8),
    /// `reclaim`.
    Reclaim {
        /// `min_idle`: one of 0, 1 s, 2 s, 60 s.
        idle: u8,
        /// 0, or 1 to 4.
        count: u8,
    },
    /// `pause` of a flow from [`FLOWS`].
    Pause(u8),
    /// `resume`.
    Resume(u8),
    /// `park`.
    Park(u8),
    /// `step`.
    Step(u8),
    /// `clear_flow`.
    ClearFlow(u8),
    /// `parked`.
    Parked(u8),
    /// `paused_flows`.
    PausedFlows,
    /// `set_flow_limit` of a rate limit of the flow (SPEC 3, Flow limits):
    /// 0 mod 4 clears it, else 1 to 3 permits per 250 ms to 2 s.
    RateLimit(u8, u8),
    /// `set_flow_limit` of a concurrency cap: 0 mod 4 clears it, else 1
    /// to 3.
    Concurrency(u8, u8),
    /// `set_flow_limit` of a back-off: 0 mod 4 lifts it, else until an
    /// offset from now.
    BackOff(u8, u8),
    /// `flow_limits`.
    FlowLimits,
    /// `mark_done` of id 1, 2 or 3 and a step from [`STEPS`].
    MarkDone(u8, u8),
    /// `was_done`.
    WasDone(u8, u8),
    /// `dead_letters` of 0 to 7.
    DeadLetters(u8),
    /// `redrive`: below 200, a dead letter's id when there is one.
    Redrive(u8),
    /// `purge_dead_letters`.
    PurgeDeadLetters,
    /// `stats`.
    Stats,
    /// `backlog_by_flow` of 0 to 7.
    BacklogByFlow(u8),
    /// `peek` of 0 to 7.
    Peek(u8),
    /// Move the clock: below 128, x 25 ms; 128 to 247, (v - 127) x 500 ms;
    /// above, one hour.
    Advance(u8),
    /// Step the clock back by 2 s to 1 h (a wall clock corrected by NTP),
    /// then `stats`, which notices the step on every backend (SPEC 3,
    /// Clock steps).
    StepBack(u8),
    /// Close the queue and open it again (backends that support it; a
    /// `stats` elsewhere).
    Reopen,
    /// `promote`: below 200, a delayed item's id when there is one, else
    /// as any id pick.
    Promote(u8),
    /// `remove`: below 200, the id of an item the queue holds (a pending
    /// one is refused) when there is one, else as any id pick.
    Remove(u8),
    /// `back_off` of a flow from [`FLOWS`] for 0 to 12.75 s in 50 ms steps
    /// (the longer back-off wins).
    BackOffFor(u8, u8),
    /// `cancel` (SPEC 3, Cancelling): below 200, the id of an item the
    /// queue holds (a pending one is marked, a dead letter refused) when
    /// there is one, else as any id pick.
    Cancel(u8),
    /// `wait_cancelled` with no wait, of every pending item's id (the
    /// marked ones answer).
    WaitCancelled,
    /// `update` (SPEC 3, Updating) of an id picked as for [`Op::Cancel`]:
    /// the second byte's bit 0 sets the tier to (byte >> 3) % 3, bit 1
    /// the not-before time to now + (third byte - 32) x 100 ms (may be in
    /// the past), bit 2 the payload to (byte >> 3) % 20 bytes of the third
    /// byte (may be over `max_payload_bytes`); none of them is an empty
    /// update, which is refused.
    Update(u8, u8, u8),
    /// SPEC 13: `upsert_schedule` of one of three names, its interval,
    /// catch-up, overlap and flow drawn from the second byte
    /// ([`schedule_of`]).
    UpsertSchedule(u8, u8),
    /// `fire_schedules`.
    FireSchedules,
    /// `pause_schedule` of one of three names.
    PauseSchedule(u8),
    /// `resume_schedule` of one of three names.
    ResumeSchedule(u8),
    /// `remove_schedule` of one of three names.
    RemoveSchedule(u8),
    /// `schedules`.
    Schedules,
    /// `preview_schedule` of one of three names, 0 to 7 times.
    PreviewSchedule(u8, u8),
}

/// The schedule names the schedule ops draw from.
pub const SCHEDULE_NAMES: [&str; 3] = ["s0", "s1", "s2"];

/// The schedule an [`Op::UpsertSchedule`] stores: every 100, 250 or
/// 1000 ms; catch-up latest, skip or all (cap 3); overlap allow or skip;
/// flow `""`, `a` or `b`; the payload its name.
pub fn schedule_of(name: u8, v: u8) -> crate::Schedule {
    use crate::schedule::{CatchUp, Overlap, Schedule, Spec};
    let name = pick(&SCHEDULE_NAMES, name);
    let every_ms = [100, 250, 1000][usize::from(v % 3)];
    let catch_up =
        [CatchUp::Latest, CatchUp::Skip, CatchUp::All { cap: 3 }][usize::from(v / 3 % 3)];
    let overlap = if (v / 9).is_multiple_of(2) {
        Overlap::Allow
    } else {
        Overlap::Skip
    };
    // Every spec here is valid, so `with_spec` cannot fail; a fallback
    // keeps this free of `expect`.
    Schedule::with_spec(name, Spec::Every { every_ms }, None)
        .unwrap_or_else(|_| Schedule::unchecked(name.to_string(), Spec::Every { every_ms }, None))
        .payload(name.as_bytes().to_vec())
        .flow(["", "a", "b"][usize::from(v / 18 % 3)])
        .catch_up(catch_up)
        .overlap(overlap)
}

fn pick<'a>(list: &[&'a str], v: u8) -> &'a str {
    list[usize::from(v) % list.len()]
}
