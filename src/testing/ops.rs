//! Every operation of SPEC section 3 as data, applied in lock step to the
//! reference [`Model`] and to a real backend, with every return value,
//! `stats()` and (where the backend offers one) a full recount compared after
//! each step.
//!
//! An [`Op`] is bounded and cheap to generate: it names items, receipts,
//! flows and dedup keys through small indexes into what the reference knows
//! (ids handed out so far, receipts of items pending now), so most steps hit
//! live items instead of missing. [`Reference::apply`] resolves an `Op`
//! against the model into a concrete [`Call`] and its expected [`Outcome`];
//! [`System::verify`] runs the same call on the backend and compares. Both
//! proptest ([`op_strategy`], used by `tests/model.rs` with
//! proptest-state-machine) and cargo-fuzz (`Arbitrary`, used by the
//! `ops_vs_model` target) drive this one code path.
//!
//! Not part of the stable API.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::time::Duration;

use arbitrary::Arbitrary;
use proptest::prelude::*;

use crate::backend::memory::{Location, Model};
use crate::clock::ManualClock;
use crate::config::Config;
use crate::error::Error;
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, NewItem, Receipt, RetryOutcome, Stats,
};
use crate::limit::FlowLimit;
use crate::queue::{BoxFuture, BoxQueue, WorkQueue};
use crate::testing::Factory;

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
    /// `dead_letter_cap`: 1 to 4 dead letters.
    pub dead_letter_cap: u8,
    /// `max_deliveries`: 1 to 3.
    pub max_deliveries: u8,
    /// `dedup_window`: 0 to 6.3 s in 100 ms steps.
    pub dedup_window: u8,
    /// `done_ttl`: 0 to 6.3 s in 100 ms steps.
    pub done_ttl: u8,
    /// `max_payload_bytes`: 8 to 23 bytes (payloads are 0 to 19 bytes).
    pub max_payload_bytes: u8,
    /// `result_ttl`: 0 to 6.3 s in 100 ms steps.
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
        Config::default()
            .max_backlog(self.max_backlog.map(|b| u64::from(b % 10) + 1))
            .dead_letter_cap(u64::from(self.dead_letter_cap % 4) + 1)
            .max_deliveries(u32::from(self.max_deliveries % 3) + 1)
            .dedup_window(Duration::from_millis(
                u64::from(self.dedup_window % 64) * 100,
            ))
            .done_ttl(Duration::from_millis(u64::from(self.done_ttl % 64) * 100))
            .max_payload_bytes(usize::from(self.max_payload_bytes % 16) + 8)
            .result_ttl(Duration::from_millis(u64::from(self.result_ttl % 64) * 100))
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
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
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
    /// `reclaim_stale`.
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
    /// then `stats`, which notices the step on every backend (SPEC 8,
    /// Clock steps).
    StepBack(u8),
    /// Close the queue and open it again (backends that support it; a
    /// `stats` elsewhere).
    Reopen,
}

fn pick<'a>(list: &[&'a str], v: u8) -> &'a str {
    list[usize::from(v) % list.len()]
}

/// Result, progress or chunk bytes: 0 to 19 bytes of one fill byte, so
/// that some are over `max_payload_bytes`.
fn bytes_of(v: u8) -> Vec<u8> {
    vec![v; usize::from(v % 20)]
}

fn count_of(v: u8) -> usize {
    if v == 0 { 0 } else { 1 + usize::from(v % 4) }
}

fn offset_ms(now: u64, v: u8) -> u64 {
    now.saturating_add_signed((i64::from(v) - 32) * 100)
}

/// 2 s to about 1 h, in ms: always more than the step tolerance.
fn step_back_ms(v: u8) -> u64 {
    match v {
        0..=199 => 2_000 + u64::from(v) * 100,
        _ => u64::from(v - 199) * 60_000,
    }
}

fn advance_ms(v: u8) -> u64 {
    match v {
        0..=127 => u64::from(v) * 25,
        128..=247 => u64::from(v - 127) * 500,
        _ => 3_600_000,
    }
}

/// Done markers are keyed by any id, live or not: three ids make
/// `was_done` meet the markers `mark_done` left.
fn done_id(v: u8) -> u64 {
    1 + u64::from(v % 3)
}

fn idle_ms(v: u8) -> u64 {
    [0, 1_000, 2_000, 60_000][usize::from(v % 4)]
}

/// A proptest strategy for one [`Op`], weighted so that sequences add,
/// claim and finish items often and look or reopen now and then.
pub fn op_strategy() -> BoxedStrategy<Op> {
    let item = (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<Option<u8>>(),
        any::<u8>(),
    )
        .prop_map(|(flow, len, fill, dedup, tier)| ItemSpec {
            flow,
            len: len % 12,
            fill,
            dedup: dedup.filter(|k| k % 2 == 0),
            tier,
        });
    let byte = any::<u8>;
    prop_oneof![
        8 => item.clone().prop_map(Op::Add),
        2 => proptest::collection::vec(item.clone(), 0..=MAX_BATCH).prop_map(Op::AddBatch),
        4 => (item, byte()).prop_map(|(i, d)| Op::AddDelayed(i, d)),
        1 => Just(Op::NextDue),
        1 => Just(Op::PromoteDue),
        8 => (byte(), any::<bool>()).prop_map(|(count, d)| Op::Claim { count, due_only: d && count % 4 == 0 }),
        5 => byte().prop_map(Op::Ack),
        2 => proptest::collection::vec(byte(), 0..=MAX_BATCH).prop_map(Op::AckBatch),
        3 => (byte(), byte()).prop_map(|(r, b)| Op::AckWithResult(r, b)),
        2 => byte().prop_map(Op::Outcome),
        2 => (byte(), byte()).prop_map(|(r, b)| Op::SetProgress(r, b)),
        2 => (byte(), byte()).prop_map(|(r, b)| Op::SendChunk(r, b)),
        1 => byte().prop_map(Op::Progress),
        2 => (byte(), byte()).prop_map(|(i, a)| Op::Chunks(i, a)),
        2 => proptest::collection::vec(byte(), 0..=MAX_BATCH).prop_map(Op::Touch),
        4 => (byte(), byte()).prop_map(|(r, d)| Op::Retry(r, d)),
        2 => (byte(), byte()).prop_map(|(r, d)| Op::Release(r, d)),
        2 => (byte(), byte()).prop_map(|(r, w)| Op::DeadLetter(r, w)),
        3 => (byte(), byte()).prop_map(|(idle, count)| Op::Reclaim { idle, count }),
        2 => byte().prop_map(Op::Pause),
        2 => byte().prop_map(Op::Resume),
        2 => byte().prop_map(Op::Park),
        2 => byte().prop_map(Op::Step),
        1 => byte().prop_map(Op::ClearFlow),
        1 => byte().prop_map(Op::Parked),
        1 => Just(Op::PausedFlows),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::RateLimit(f, v)),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::Concurrency(f, v)),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::BackOff(f, v)),
        1 => Just(Op::FlowLimits),
        2 => (byte(), byte()).prop_map(|(i, s)| Op::MarkDone(i, s)),
        2 => (byte(), byte()).prop_map(|(i, s)| Op::WasDone(i, s)),
        1 => byte().prop_map(Op::DeadLetters),
        2 => byte().prop_map(Op::Redrive),
        1 => Just(Op::PurgeDeadLetters),
        1 => Just(Op::Stats),
        1 => byte().prop_map(Op::BacklogByFlow),
        1 => byte().prop_map(Op::Peek),
        5 => byte().prop_map(Op::Advance),
        1 => byte().prop_map(Op::StepBack),
        1 => Just(Op::Reopen),
    ]
    .boxed()
}

/// A proptest strategy for a [`Setup`].
pub fn setup_strategy() -> BoxedStrategy<Setup> {
    (
        any::<Option<u8>>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(
            |(
                max_backlog,
                dead_letter_cap,
                max_deliveries,
                dedup_window,
                done_ttl,
                payload,
                result_ttl,
                aging,
            )| {
                Setup {
                    max_backlog,
                    dead_letter_cap,
                    max_deliveries,
                    dedup_window,
                    done_ttl,
                    max_payload_bytes: payload,
                    result_ttl,
                    aging_step: aging,
                }
            },
        )
        .boxed()
}

/// Which receipt an operation names: one the reference handed out (the
/// system uses its own receipt of the same claim), or a forged one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReceiptRef {
    /// The n-th receipt handed out in this sequence.
    Slot(usize),
    /// A receipt no claim handed out.
    Forged(Receipt),
}

/// An [`Op`] resolved against the reference: concrete arguments.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Call {
    /// `add` of the item.
    Add(NewItem),
    /// `add_batch` of the items.
    AddBatch(Vec<NewItem>),
    /// `add_delayed` of the item with `not_before` in ms since the epoch.
    AddDelayed(NewItem, u64),
    /// `next_due`.
    NextDue,
    /// `promote_due`.
    PromoteDue,
    /// `claim` of `count` from the lanes, with no wait.
    Claim(usize, ClaimFrom),
    /// `ack`.
    Ack(ReceiptRef),
    /// `ack_batch`.
    AckBatch(Vec<ReceiptRef>),
    /// `ack_with_result` with the result.
    AckWithResult(ReceiptRef, Vec<u8>),
    /// `outcome` of the id.
    Outcome(u64),
    /// `set_progress` with the bytes.
    SetProgress(ReceiptRef, Vec<u8>),
    /// `send_chunk` with the bytes.
    SendChunk(ReceiptRef, Vec<u8>),
    /// `progress` of the id.
    Progress(u64),
    /// `wait_chunks` of the id after the sequence number, no wait.
    Chunks(u64, u64),
    /// `touch`.
    Touch(Vec<ReceiptRef>),
    /// `retry` with `not_before` in ms since the epoch.
    Retry(ReceiptRef, u64),
    /// `release` with `not_before` in ms since the epoch.
    Release(ReceiptRef, u64),
    /// `dead_letter` with the reason.
    DeadLetter(ReceiptRef, String),
    /// `reclaim_stale` of `min_idle` (ms) and `count`.
    Reclaim(u64, usize),
    /// `pause` of the flow.
    Pause(String),
    /// `resume` of the flow.
    Resume(String),
    /// `park`.
    Park(ReceiptRef),
    /// `step` of the flow.
    Step(String),
    /// `clear_flow` of the flow.
    ClearFlow(String),
    /// `parked` of the flow.
    Parked(String),
    /// `paused_flows`.
    PausedFlows,
    /// `set_flow_limit`.
    SetFlowLimit(String, FlowLimit),
    /// `flow_limits`.
    FlowLimits,
    /// `mark_done` of the id and step.
    MarkDone(u64, String),
    /// `was_done` of the id and step.
    WasDone(u64, String),
    /// `dead_letters` of at most this many.
    DeadLetters(usize),
    /// `redrive` of the id.
    Redrive(u64),
    /// `purge_dead_letters`.
    PurgeDeadLetters,
    /// `stats`.
    Stats,
    /// `backlog_by_flow` over this many items.
    BacklogByFlow(usize),
    /// `peek` of at most this many.
    Peek(usize),
    /// Move the clock forward by this many ms.
    Advance(u64),
    /// Step the clock back by this many ms, then `stats`.
    StepBack(u64),
    /// Close and reopen.
    Reopen,
}

/// A successful return value of any operation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    /// An operation that returns nothing.
    Unit,
    /// The adds (one for `add`).
    Added(Vec<Added>),
    /// A count.
    Count(u64),
    /// Claimed or reclaimed items.
    Claimed(Vec<Claimed>),
    /// What `step` handed out.
    Step(Option<Claimed>),
    /// What `retry` did.
    Retry(RetryOutcome),
    /// A yes or no.
    Bool(bool),
    /// The next `not_before`, ms since the epoch.
    Due(Option<u64>),
    /// Flow names.
    Flows(Vec<String>),
    /// Dead letters, newest first.
    Dead(Vec<DeadLetter>),
    /// Counts.
    Stats(Stats),
    /// Items per flow.
    ByFlow(BTreeMap<String, u64>),
    /// Items, in claim order.
    Items(Vec<Item>),
    /// An item's outcome.
    Outcome(Option<crate::outcome::Outcome>),
    /// Progress bytes.
    Bytes(Option<Vec<u8>>),
    /// Chunks, in order.
    Chunks(Vec<crate::outcome::Chunk>),
    /// Flow limits, by flow.
    Limits(Vec<crate::limit::FlowLimits>),
}

/// An error reduced to what two backends must agree on: its kind and the
/// ids it names (messages and sources may differ).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ErrorKind {
    /// `Error::Full` with its limit.
    Full {
        /// The limit, in items.
        limit: u64,
    },
    /// `Error::LeaseLost` with the receipt it names.
    LeaseLost {
        /// The item.
        id: u64,
        /// The delivery the receipt named.
        delivery: u32,
    },
    /// `Error::Locked`.
    Locked,
    /// `Error::Corrupt`.
    Corrupt,
    /// `Error::Io`.
    Io,
    /// `Error::Storage`.
    Storage,
    /// `Error::Backend`.
    Backend,
    /// `Error::Decode`.
    Decode,
    /// `Error::InvalidInput`.
    InvalidInput,
    /// `Error::Closed`.
    Closed,
}

impl From<&Error> for ErrorKind {
    fn from(e: &Error) -> Self {
        match e {
            Error::Full { limit } => ErrorKind::Full { limit: *limit },
            Error::LeaseLost { id, delivery, .. } => ErrorKind::LeaseLost {
                id: *id,
                delivery: *delivery,
            },
            Error::Locked { .. } => ErrorKind::Locked,
            Error::Corrupt { .. } => ErrorKind::Corrupt,
            Error::Io { .. } => ErrorKind::Io,
            Error::Storage { .. } => ErrorKind::Storage,
            Error::Backend { .. } => ErrorKind::Backend,
            Error::Decode { .. } => ErrorKind::Decode,
            Error::InvalidInput(_) => ErrorKind::InvalidInput,
            Error::Closed => ErrorKind::Closed,
        }
    }
}

/// What one call returned.
pub type Outcome = Result<Value, ErrorKind>;

fn outcome<T>(r: crate::Result<T>, f: impl FnOnce(T) -> Value) -> Outcome {
    r.map(f).map_err(|e| ErrorKind::from(&e))
}

/// The reference side of a run: the [`Model`], its clock (`now_ms`), what
/// it has handed out so far, and the last call with its expected outcome.
#[derive(Debug, Clone)]
pub struct Reference {
    model: Model,
    now_ms: u64,
    reopen: bool,
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
            max_id: 0,
            receipts: Vec::new(),
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
            .filter(|(id, _)| locations.get(id) == Some(&Location::Pending))
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
                    .filter(|(_, at)| *at == Location::DeadLetter)
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

fn added(v: &Value) -> &[Added] {
    match v {
        Value::Added(a) => a,
        _ => &[],
    }
}

fn claimed(v: &Value) -> Vec<&Claimed> {
    match v {
        Value::Claimed(c) => c.iter().collect(),
        Value::Step(Some(c)) => vec![c],
        _ => Vec::new(),
    }
}

/// A backend under test, with what it offers beyond the trait.
pub trait Target: Send {
    /// The queue.
    fn queue(&self) -> &BoxQueue;

    /// Whether [`Target::reopen`] is supported.
    fn can_reopen(&self) -> bool {
        false
    }

    /// Close the queue and open it again on the same storage.
    fn reopen(&mut self) -> BoxFuture<'_, crate::Result<()>> {
        Box::pin(async { Err(Error::invalid("this backend cannot be reopened")) })
    }

    /// Where every item is, by a full scan of the backend's storage, if the
    /// backend offers such a recount (`None` otherwise).
    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, Location>>>> {
        Box::pin(async { None })
    }
}

/// A backend made by a [`Factory`]: the trait only, no reopen, no recount.
pub struct FactoryTarget {
    subject: crate::testing::Subject,
}

impl fmt::Debug for FactoryTarget {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("FactoryTarget").finish_non_exhaustive()
    }
}

impl FactoryTarget {
    /// A fresh queue of `factory` with `config`.
    pub async fn new(factory: &dyn Factory, config: Config) -> Self {
        FactoryTarget {
            subject: factory.make(config).await,
        }
    }
}

impl Target for FactoryTarget {
    fn queue(&self) -> &BoxQueue {
        &self.subject.queue
    }
}

/// Where an [`EmbeddedTarget`] keeps its file.
#[cfg(feature = "embedded")]
#[derive(Debug)]
enum Storage {
    /// A real file in its own temp dir.
    File(tempfile::TempDir),
    /// A [`SimDisk`](crate::testing::faults::SimDisk) (a file in memory) and
    /// the name that stands for its path in the in-process lock.
    Sim(crate::testing::faults::SimDisk, String),
}

#[cfg(feature = "embedded")]
impl Storage {
    async fn open(&self, config: Config) -> crate::Result<crate::EmbeddedQueue> {
        match self {
            Storage::File(dir) => {
                crate::EmbeddedQueue::open(dir.path().join("queue.redb"), config).await
            }
            // No whole-file integrity check at open: this file is never
            // damaged (`open_damaged_file` fuzzes that check).
            Storage::Sim(disk, name) => {
                crate::EmbeddedQueue::open_on_backend(name, disk.backend(), config, false).await
            }
        }
    }
}

/// The embedded backend with reopen on the same storage and the file's
/// recount ([`EmbeddedQueue::audit`](crate::EmbeddedQueue::audit)): on a
/// real file in its own temp dir ([`EmbeddedTarget::new`]), or on a
/// simulated disk ([`EmbeddedTarget::in_memory`]), free of file-system
/// calls and fsyncs, so that a fuzz execution costs what the queue costs.
#[cfg(feature = "embedded")]
#[derive(Debug)]
pub struct EmbeddedTarget {
    storage: Storage,
    config: Config,
    queue: crate::EmbeddedQueue,
    boxed: BoxQueue,
}

#[cfg(feature = "embedded")]
impl EmbeddedTarget {
    /// A fresh queue file in a new temp dir (under `TMPDIR`).
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`](crate::EmbeddedQueue::open), and `Io` if
    /// the temp dir cannot be made.
    pub async fn new(config: Config) -> crate::Result<Self> {
        let dir = tempfile::tempdir().map_err(|source| Error::Io {
            context: "make a temp dir".into(),
            source,
        })?;
        Self::on(Storage::File(dir), config).await
    }

    /// A fresh queue on an empty simulated disk; `name` must be unique in
    /// the process (it stands for the path in the in-process lock).
    ///
    /// # Errors
    ///
    /// As [`EmbeddedQueue::open`](crate::EmbeddedQueue::open).
    pub async fn in_memory(name: String, config: Config) -> crate::Result<Self> {
        let disk = crate::testing::faults::SimDisk::new();
        Self::on(Storage::Sim(disk, name), config).await
    }

    async fn on(storage: Storage, config: Config) -> crate::Result<Self> {
        let queue = storage.open(config.clone()).await?;
        Ok(EmbeddedTarget {
            storage,
            config,
            boxed: BoxQueue::new(queue.clone()),
            queue,
        })
    }

    /// The queue file, for a target on a real file.
    pub fn path(&self) -> Option<std::path::PathBuf> {
        match &self.storage {
            Storage::File(dir) => Some(dir.path().join("queue.redb")),
            Storage::Sim(..) => None,
        }
    }
}

#[cfg(feature = "embedded")]
impl Target for EmbeddedTarget {
    fn queue(&self) -> &BoxQueue {
        &self.boxed
    }

    fn can_reopen(&self) -> bool {
        true
    }

    fn reopen(&mut self) -> BoxFuture<'_, crate::Result<()>> {
        Box::pin(async move {
            self.queue.close().await?;
            let queue = self.storage.open(self.config.clone()).await?;
            self.boxed = BoxQueue::new(queue.clone());
            self.queue = queue;
            Ok(())
        })
    }

    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, Location>>>> {
        Box::pin(async move { Some(self.queue.audit().await) })
    }
}

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
            let count = |at: Location| located.values().filter(|l| **l == at).count() as u64;
            let recounted = Stats {
                backlog: count(Location::Backlog) + count(Location::Due),
                due: count(Location::Due),
                pending: count(Location::Pending),
                delayed: count(Location::Delayed),
                parked: count(Location::Parked),
                dead_letters: count(Location::DeadLetter),
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
    let clock = ManualClock::new(START_MS);
    let target = EmbeddedTarget::in_memory(name, setup.config().clock(clock.clone()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    run_on(Box::new(target), clock, setup, ops).await
}

#[cfg(feature = "embedded")]
async fn run_on(
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
async fn compare_lists(q: &BoxQueue, model: &Model) -> Result<(), String> {
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
