//! The writer thread: owns the redb `Database`, batches concurrent
//! operations into one write transaction and one fsync (group commit), and
//! hands each caller its own result.
//!
//! This file is the request protocol (the operations a handle sends and
//! what each returns); the writer's other jobs live in submodules:
//!
//! - `open`: the process-wide claim on a file, opening it, recovery (schema
//!   check and migration, the replay of the redo log's tail);
//! - `commit`: one batch as one write transaction and one redo record (the
//!   transaction body shared by the live path and the replay), and the
//!   checkpoint;
//! - `thread`: the writer loop, its batching of requests, and how it
//!   carries on after an I/O error.

mod apply;
mod commit;
mod open;
mod thread;

use std::collections::BTreeMap;

use tokio::sync::oneshot;

#[cfg(feature = "forward")]
use super::tables;
use crate::error::Result;
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt, Reclaimed,
    RetryOutcome, Stats,
};
use crate::outcome::{Chunk, Outcome};

pub(super) use open::{Build, PathClaim, Verify, open_database};
pub(super) use thread::run;

/// One operation of the contract, with its arguments.
#[derive(Debug)]
pub(super) enum Op {
    Add(Vec<(NewItem, Option<u64>)>),
    Promote,
    /// SPEC 3, Timers: `promote(id)`, one delayed item due now.
    PromoteId(u64),
    /// SPEC 3, Removing: `remove(id)`, one item deleted unrun.
    Remove(u64),
    /// SPEC 3, Cancelling: `cancel(id)`, a waiting item ended or a pending
    /// one marked.
    Cancel(u64),
    /// SPEC 3, Cancelling: end a marked item whose holder's call (with
    /// this receipt) was answered `Cancelled`.
    EndCancelled(Receipt),
    /// SPEC 3, Cancelling: which of these ids are marked (a read).
    Cancelling(Vec<u64>),
    /// SPEC 3, Updating: `update(id, update)`, a waiting item's tier,
    /// not-before time or payload changed.
    Update(u64, ItemUpdate),
    /// SPEC 3, Flow limits: `back_off(flow, duration)`, the duration in
    /// ms; the hold's end is read from the writer's clock inside the op.
    BackOff(String, u64),
    /// SPEC 13: stored schedules (a read).
    ScheduleLoad(crate::schedule::fire::ScheduleScan),
    /// SPEC 13: one compare-and-swap of a schedule with its slots' items.
    ScheduleSwap(crate::schedule::fire::ScheduleSwap),
    Claim {
        count: usize,
        from: ClaimFrom,
    },
    Ack(Receipt, Vec<u8>),
    Outcome(u64),
    SetProgress(Receipt, Vec<u8>),
    SendChunk(Receipt, Vec<u8>),
    Progress(u64),
    Chunks(u64, u64),
    AckBatch(Vec<Receipt>),
    Touch(Vec<Receipt>),
    Retry(Receipt, u64),
    Release(Receipt, u64),
    DeadLetter(Receipt, String),
    Reclaim {
        min_idle_ms: u64,
        count: usize,
    },
    Pause(String),
    Resume(String),
    Park(Receipt),
    Step(String),
    ClearFlow(String),
    MarkDone(u64, String),
    Redrive(u64),
    PurgeDead,
    NextDue,
    Parked(String),
    PausedFlows,
    SetFlowLimit(String, crate::limit::FlowLimit),
    FlowLimits,
    WasDone(u64, String),
    DeadLetters(usize),
    Stats,
    BacklogByFlow(usize),
    Peek(usize),
    /// SPEC 12.1: one page of a state.
    List(crate::browse::ListQuery),
    /// SPEC 12.1: one item by id.
    Find(u64),
    /// Store and forward (SPEC section 11): the file's journal id, made
    /// from the candidate (random, drawn by the caller) on first use.
    #[cfg(feature = "forward")]
    ForwardJournal(u64),
    /// The next items to hand over under a mark key.
    #[cfg(feature = "forward")]
    ForwardRead {
        key: String,
        flows: Option<Vec<String>>,
        max_items: usize,
        max_bytes: usize,
        late: bool,
    },
    /// Remove items Redis has taken and raise the mark.
    #[cfg(feature = "forward")]
    ForwardDone {
        key: String,
        ids: Vec<u64>,
        mark: u64,
    },
    /// What waits to be handed over.
    #[cfg(feature = "forward")]
    ForwardLag(Option<Vec<String>>),
    #[cfg(feature = "testing")]
    Locations,
    #[cfg(feature = "testing")]
    Dump,
    #[cfg(feature = "testing")]
    Audit,
}

impl Op {
    /// Operations that only read: a batch of nothing else never commits,
    /// even when the housekeeping of its transaction (purging expired
    /// markers) wrote something.
    pub(super) fn is_read(&self) -> bool {
        matches!(
            self,
            Op::NextDue
                | Op::Parked(_)
                | Op::PausedFlows
                | Op::FlowLimits
                | Op::WasDone(..)
                | Op::DeadLetters(_)
                | Op::Stats
                | Op::BacklogByFlow(_)
                | Op::Peek(_)
                | Op::Outcome(_)
                | Op::Progress(_)
                | Op::Chunks(..)
                | Op::List(_)
                | Op::Find(_)
                | Op::ScheduleLoad(_)
                | Op::Cancelling(_)
        ) || self.is_test_read()
            || self.is_forward_read()
    }

    #[cfg(feature = "forward")]
    fn is_forward_read(&self) -> bool {
        matches!(self, Op::ForwardRead { .. } | Op::ForwardLag(_))
    }

    #[cfg(not(feature = "forward"))]
    fn is_forward_read(&self) -> bool {
        false
    }

    /// The items of an add; `None` for every other operation.
    pub(super) fn added(&self) -> Option<&[(NewItem, Option<u64>)]> {
        match self {
            Op::Add(items) => Some(items),
            _ => None,
        }
    }

    /// The operation's name, for errors.
    pub(super) fn name(&self) -> &'static str {
        match self {
            Op::Add(_) => "add",
            Op::Promote => "promote_due",
            Op::PromoteId(_) => "promote",
            Op::Remove(_) => "remove",
            Op::Cancel(_) | Op::EndCancelled(_) => "cancel",
            Op::Update(..) => "update",
            Op::BackOff(..) => "back_off",
            Op::ScheduleSwap(_) => "schedule",
            Op::Claim { .. } => "claim",
            Op::Ack(..) | Op::AckBatch(_) => "ack",
            Op::SetProgress(..) => "set_progress",
            Op::SendChunk(..) => "send_chunk",
            Op::Release(..) => "release",
            Op::Touch(_) => "touch",
            Op::Retry(..) => "retry",
            Op::DeadLetter(..) => "dead_letter",
            Op::Reclaim { .. } => "reclaim",
            Op::Pause(_) => "pause",
            Op::Resume(_) => "resume",
            Op::Park(_) => "park",
            Op::Step(_) => "step",
            Op::ClearFlow(_) => "clear_flow",
            Op::MarkDone(..) => "mark_done",
            Op::Redrive(_) => "redrive",
            Op::PurgeDead => "purge_dead_letters",
            Op::SetFlowLimit(..) => "set_flow_limit",
            _ => "read",
        }
    }

    #[cfg(feature = "testing")]
    fn is_test_read(&self) -> bool {
        matches!(self, Op::Locations | Op::Dump | Op::Audit)
    }

    #[cfg(not(feature = "testing"))]
    fn is_test_read(&self) -> bool {
        false
    }

    /// Operations whose only effect is to hand items to the caller: if the
    /// caller has gone, running them would strand items in pending.
    fn hands_out(&self) -> bool {
        matches!(self, Op::Claim { .. } | Op::Reclaim { .. } | Op::Step(_))
    }
}

/// What an operation returns.
#[derive(Debug)]
pub(super) enum Reply {
    /// A claim's items and, when it took none, the soonest timer.
    Claim {
        claimed: Vec<Claimed>,
        next_due: Option<u64>,
    },
    Added(Vec<Added>),
    Count(u64),
    Reclaimed(Reclaimed),
    Unit,
    Retry(RetryOutcome),
    Step(Option<Claimed>),
    Bool(bool),
    Due(Option<u64>),
    Flows(Vec<String>),
    Dead(Vec<DeadLetter>),
    Stats(Stats),
    ByFlow(BTreeMap<String, u64>),
    Items(Vec<Item>),
    Outcome(Option<Outcome>),
    Bytes(Option<Vec<u8>>),
    /// Chunks after a sequence number, and whether the item has finished.
    Chunks(Vec<Chunk>, bool),
    Limits(Vec<crate::limit::FlowLimits>),
    Page(crate::browse::ItemPage),
    Found(Option<crate::browse::ListedItem>),
    Schedules(crate::schedule::fire::ScheduleRows),
    Swapped(Option<Vec<u64>>),
    Cancel(crate::item::CancelOutcome),
    Ids(Vec<u64>),
    #[cfg(feature = "forward")]
    Outgoing(Vec<tables::Outgoing>),
    #[cfg(feature = "forward")]
    Lag(tables::Unforwarded),
    #[cfg(feature = "testing")]
    Locations(BTreeMap<u64, Vec<crate::browse::ItemState>>),
    #[cfg(feature = "testing")]
    Dump(BTreeMap<String, Vec<String>>),
    #[cfg(feature = "testing")]
    Audit(BTreeMap<u64, crate::browse::ItemState>),
}

pub(super) struct Request {
    pub(super) op: Op,
    pub(super) now: u64,
    pub(super) reply: oneshot::Sender<Result<Reply>>,
}

pub(super) enum Msg {
    Req(Request),
    Compact(oneshot::Sender<Result<bool>>),
    Close(oneshot::Sender<()>),
}
