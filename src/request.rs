//! The whole contract as data: one [`Request`] per operation of SPEC
//! section 3 and the [`Reply`] it gets (docs/DESIGN.md, One request type).
//!
//! Every layer that only passes operations on (boxing, metering, the
//! server, the remote client, the test op runner) is written once over
//! these two types; a new operation is a variant here, a typed method on
//! [`WorkQueue`](crate::WorkQueue), and each backend's own code.

use std::collections::BTreeMap;
use std::time::Duration;

use crate::browse::{ItemPage, ListQuery, ListedItem};
use crate::error::Error;
use crate::item::{
    Added, CancelOutcome, ClaimFrom, Claimed, DeadLetter, Item, ItemUpdate, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats,
};
use crate::limit::{FlowLimit, FlowLimits};
use crate::outcome::{Chunk, Outcome};
use crate::schedule::{Fired, Schedule, ScheduleInfo};

/// One operation of the contract with its arguments (SPEC section 3). Each
/// variant is the typed method of [`WorkQueue`](crate::WorkQueue) of the
/// same name, which documents its arguments (units: ms since the Unix
/// epoch for times named `_ms`, real time for a `Duration`), its reply and
/// its errors.
///
/// New operations are added as the contract grows, so a `match` outside
/// this crate needs a `_` arm (answer it with
/// [`Error::InvalidInput`]).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
#[allow(missing_docs)] // each field is the typed method's argument of that name
pub enum Request {
    /// [`WorkQueue::add`](crate::WorkQueue::add) → [`Reply::Added`].
    Add { item: NewItem },
    /// [`WorkQueue::add_batch`](crate::WorkQueue::add_batch) → [`Reply::AddedList`].
    AddBatch { items: Vec<NewItem> },
    /// [`WorkQueue::add_delayed`](crate::WorkQueue::add_delayed) → [`Reply::Added`].
    AddDelayed { item: NewItem, not_before_ms: u64 },
    /// [`WorkQueue::next_due`](crate::WorkQueue::next_due) → [`Reply::NextDue`].
    NextDue,
    /// [`WorkQueue::promote_due`](crate::WorkQueue::promote_due) → [`Reply::Count`].
    PromoteDue,
    /// [`WorkQueue::promote`](crate::WorkQueue::promote) → [`Reply::Bool`].
    Promote { id: u64 },
    /// [`WorkQueue::claim`](crate::WorkQueue::claim) → [`Reply::Claimed`].
    Claim {
        count: usize,
        wait: Duration,
        from: ClaimFrom,
    },
    /// [`WorkQueue::ack`](crate::WorkQueue::ack) → [`Reply::Unit`].
    Ack { receipt: Receipt },
    /// [`WorkQueue::ack_with_result`](crate::WorkQueue::ack_with_result) → [`Reply::Unit`].
    AckWithResult { receipt: Receipt, result: Vec<u8> },
    /// [`WorkQueue::outcome`](crate::WorkQueue::outcome) → [`Reply::Outcome`].
    Outcome { id: u64 },
    /// [`WorkQueue::wait_outcome`](crate::WorkQueue::wait_outcome) → [`Reply::Outcome`].
    WaitOutcome { id: u64, wait: Duration },
    /// [`WorkQueue::set_progress`](crate::WorkQueue::set_progress) → [`Reply::Unit`].
    SetProgress { receipt: Receipt, progress: Vec<u8> },
    /// [`WorkQueue::send_chunk`](crate::WorkQueue::send_chunk) → [`Reply::Seq`].
    SendChunk { receipt: Receipt, chunk: Vec<u8> },
    /// [`WorkQueue::progress`](crate::WorkQueue::progress) → [`Reply::Progress`].
    Progress { id: u64 },
    /// [`WorkQueue::wait_chunks`](crate::WorkQueue::wait_chunks) → [`Reply::Chunks`].
    WaitChunks {
        id: u64,
        after_seq: u64,
        wait: Duration,
    },
    /// [`WorkQueue::ack_batch`](crate::WorkQueue::ack_batch) → [`Reply::Count`].
    AckBatch { receipts: Vec<Receipt> },
    /// [`WorkQueue::touch`](crate::WorkQueue::touch) → [`Reply::Unit`].
    Touch { receipts: Vec<Receipt> },
    /// [`WorkQueue::retry`](crate::WorkQueue::retry) → [`Reply::Retried`].
    Retry {
        receipt: Receipt,
        not_before_ms: u64,
    },
    /// [`WorkQueue::release`](crate::WorkQueue::release) → [`Reply::Unit`].
    Release {
        receipt: Receipt,
        not_before_ms: u64,
    },
    /// [`WorkQueue::dead_letter`](crate::WorkQueue::dead_letter) → [`Reply::Unit`].
    DeadLetter { receipt: Receipt, reason: String },
    /// [`WorkQueue::reclaim`](crate::WorkQueue::reclaim) → [`Reply::Reclaimed`].
    Reclaim { min_idle: Duration, count: usize },
    /// [`WorkQueue::pause`](crate::WorkQueue::pause) → [`Reply::Unit`].
    Pause { flow: String },
    /// [`WorkQueue::resume`](crate::WorkQueue::resume) → [`Reply::Count`].
    Resume { flow: String },
    /// [`WorkQueue::park`](crate::WorkQueue::park) → [`Reply::Unit`].
    Park { receipt: Receipt },
    /// [`WorkQueue::step`](crate::WorkQueue::step) → [`Reply::Stepped`].
    Step { flow: String },
    /// [`WorkQueue::clear_flow`](crate::WorkQueue::clear_flow) → [`Reply::Count`].
    ClearFlow { flow: String },
    /// [`WorkQueue::parked`](crate::WorkQueue::parked) → [`Reply::Count`].
    Parked { flow: String },
    /// [`WorkQueue::paused_flows`](crate::WorkQueue::paused_flows) → [`Reply::Flows`].
    PausedFlows,
    /// [`WorkQueue::set_flow_limit`](crate::WorkQueue::set_flow_limit) → [`Reply::Unit`].
    SetFlowLimit { flow: String, limit: FlowLimit },
    /// [`WorkQueue::back_off`](crate::WorkQueue::back_off) → [`Reply::Unit`].
    BackOff { flow: String, duration: Duration },
    /// [`WorkQueue::flow_limits`](crate::WorkQueue::flow_limits) → [`Reply::FlowLimits`].
    FlowLimits,
    /// [`WorkQueue::mark_done`](crate::WorkQueue::mark_done) → [`Reply::Unit`].
    MarkDone { id: u64, step: String },
    /// [`WorkQueue::was_done`](crate::WorkQueue::was_done) → [`Reply::Bool`].
    WasDone { id: u64, step: String },
    /// [`WorkQueue::dead_letters`](crate::WorkQueue::dead_letters) → [`Reply::DeadLetters`].
    DeadLetters { count: usize },
    /// [`WorkQueue::redrive`](crate::WorkQueue::redrive) → [`Reply::Bool`].
    Redrive { id: u64 },
    /// [`WorkQueue::purge_dead_letters`](crate::WorkQueue::purge_dead_letters) → [`Reply::Count`].
    PurgeDeadLetters,
    /// [`WorkQueue::remove`](crate::WorkQueue::remove) → [`Reply::Bool`].
    Remove { id: u64 },
    /// [`WorkQueue::cancel`](crate::WorkQueue::cancel) → [`Reply::Cancel`].
    Cancel { id: u64 },
    /// [`WorkQueue::wait_cancelled`](crate::WorkQueue::wait_cancelled) → [`Reply::Ids`].
    WaitCancelled { ids: Vec<u64>, wait: Duration },
    /// [`WorkQueue::update`](crate::WorkQueue::update) → [`Reply::Bool`].
    Update { id: u64, update: ItemUpdate },
    /// [`WorkQueue::stats`](crate::WorkQueue::stats) → [`Reply::Stats`].
    Stats,
    /// [`WorkQueue::backlog_by_flow`](crate::WorkQueue::backlog_by_flow) → [`Reply::BacklogByFlow`].
    BacklogByFlow { sample: usize },
    /// [`WorkQueue::peek`](crate::WorkQueue::peek) → [`Reply::Items`].
    Peek { count: usize },
    /// [`WorkQueue::list`](crate::WorkQueue::list) → [`Reply::Page`].
    List { query: ListQuery },
    /// [`WorkQueue::find`](crate::WorkQueue::find) → [`Reply::Found`].
    Find { id: u64 },
    /// [`WorkQueue::now_ms`](crate::WorkQueue::now_ms) → [`Reply::Time`].
    Now,
    /// [`WorkQueue::compact`](crate::WorkQueue::compact) → [`Reply::Bool`].
    Compact,
    /// [`WorkQueue::close`](crate::WorkQueue::close) → [`Reply::Unit`].
    Close,
    /// [`ScheduleQueue::upsert_schedule`](crate::ScheduleQueue::upsert_schedule) → [`Reply::Bool`].
    UpsertSchedule { schedule: Schedule },
    /// [`ScheduleQueue::remove_schedule`](crate::ScheduleQueue::remove_schedule) → [`Reply::Bool`].
    RemoveSchedule { name: String },
    /// [`ScheduleQueue::pause_schedule`](crate::ScheduleQueue::pause_schedule) → [`Reply::Bool`].
    PauseSchedule { name: String },
    /// [`ScheduleQueue::resume_schedule`](crate::ScheduleQueue::resume_schedule) → [`Reply::Bool`].
    ResumeSchedule { name: String },
    /// [`ScheduleQueue::schedules`](crate::ScheduleQueue::schedules) → [`Reply::Schedules`].
    Schedules,
    /// [`ScheduleQueue::preview_schedule`](crate::ScheduleQueue::preview_schedule) → [`Reply::Times`].
    PreviewSchedule { name: String, count: usize },
    /// [`ScheduleQueue::fire_schedules`](crate::ScheduleQueue::fire_schedules) → [`Reply::Fired`].
    FireSchedules,
}

impl Request {
    /// The operation's name: the typed method's name, the server's route
    /// (`POST /v1/<name>`, docs/API.md) and the `op` label of the metrics
    /// (SPEC 12.3).
    pub fn name(&self) -> &'static str {
        match self {
            Request::Add { .. } => "add",
            Request::AddBatch { .. } => "add_batch",
            Request::AddDelayed { .. } => "add_delayed",
            Request::NextDue => "next_due",
            Request::PromoteDue => "promote_due",
            Request::Promote { .. } => "promote",
            Request::Claim { .. } => "claim",
            Request::Ack { .. } => "ack",
            Request::AckWithResult { .. } => "ack_with_result",
            Request::Outcome { .. } => "outcome",
            Request::WaitOutcome { .. } => "wait_outcome",
            Request::SetProgress { .. } => "set_progress",
            Request::SendChunk { .. } => "send_chunk",
            Request::Progress { .. } => "progress",
            Request::WaitChunks { .. } => "wait_chunks",
            Request::AckBatch { .. } => "ack_batch",
            Request::Touch { .. } => "touch",
            Request::Retry { .. } => "retry",
            Request::Release { .. } => "release",
            Request::DeadLetter { .. } => "dead_letter",
            Request::Reclaim { .. } => "reclaim",
            Request::Pause { .. } => "pause",
            Request::Resume { .. } => "resume",
            Request::Park { .. } => "park",
            Request::Step { .. } => "step",
            Request::ClearFlow { .. } => "clear_flow",
            Request::Parked { .. } => "parked",
            Request::PausedFlows => "paused_flows",
            Request::SetFlowLimit { .. } => "set_flow_limit",
            Request::BackOff { .. } => "back_off",
            Request::FlowLimits => "flow_limits",
            Request::MarkDone { .. } => "mark_done",
            Request::WasDone { .. } => "was_done",
            Request::DeadLetters { .. } => "dead_letters",
            Request::Redrive { .. } => "redrive",
            Request::PurgeDeadLetters => "purge_dead_letters",
            Request::Remove { .. } => "remove",
            Request::Cancel { .. } => "cancel",
            Request::WaitCancelled { .. } => "wait_cancelled",
            Request::Update { .. } => "update",
            Request::Stats => "stats",
            Request::BacklogByFlow { .. } => "backlog_by_flow",
            Request::Peek { .. } => "peek",
            Request::List { .. } => "list",
            Request::Find { .. } => "find",
            Request::Now => "now",
            Request::Compact => "compact",
            Request::Close => "close",
            Request::UpsertSchedule { .. } => "upsert_schedule",
            Request::RemoveSchedule { .. } => "remove_schedule",
            Request::PauseSchedule { .. } => "pause_schedule",
            Request::ResumeSchedule { .. } => "resume_schedule",
            Request::Schedules => "schedules",
            Request::PreviewSchedule { .. } => "preview_schedule",
            Request::FireSchedules => "fire_schedules",
        }
    }

    /// Whether the operation only reads: it changes no item, marker or
    /// flow state (SPEC 12.1; a read-only server answers only these).
    pub fn is_read(&self) -> bool {
        matches!(
            self,
            Request::NextDue
                | Request::Outcome { .. }
                | Request::WaitOutcome { .. }
                | Request::Progress { .. }
                | Request::WaitChunks { .. }
                | Request::Parked { .. }
                | Request::PausedFlows
                | Request::FlowLimits
                | Request::WasDone { .. }
                | Request::DeadLetters { .. }
                | Request::WaitCancelled { .. }
                | Request::Stats
                | Request::BacklogByFlow { .. }
                | Request::Peek { .. }
                | Request::List { .. }
                | Request::Find { .. }
                | Request::Now
                | Request::Schedules
                | Request::PreviewSchedule { .. }
        )
    }
}

/// What a [`Request`] returned on success: one variant per return type of
/// the typed methods of [`WorkQueue`](crate::WorkQueue) (each variant of
/// [`Request`] names the one it gets).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Reply {
    /// Nothing to say: the operation happened.
    Unit,
    /// One add.
    Added(Added),
    /// A batch of adds, in input order.
    AddedList(Vec<Added>),
    /// The soonest timer (ms since the Unix epoch), if any.
    NextDue(Option<u64>),
    /// How many items the operation moved, counted or deleted.
    Count(u64),
    /// A yes or no (see the operation).
    Bool(bool),
    /// Items handed out by a claim.
    Claimed(Vec<Claimed>),
    /// What `step` handed out.
    Stepped(Option<Claimed>),
    /// What `retry` did.
    Retried(RetryOutcome),
    /// What `reclaim` took over and dead-lettered.
    Reclaimed(Reclaimed),
    /// An item's outcome, if it has one.
    Outcome(Option<Outcome>),
    /// An item's last progress, if any.
    Progress(Option<Vec<u8>>),
    /// A chunk's sequence number.
    Seq(u64),
    /// Chunks, in order.
    Chunks(Vec<Chunk>),
    /// Flow names, sorted.
    Flows(Vec<String>),
    /// Flow limits, by flow.
    FlowLimits(Vec<FlowLimits>),
    /// Dead letters, newest first.
    DeadLetters(Vec<DeadLetter>),
    /// Exact counts of every state.
    Stats(Stats),
    /// Items per flow.
    BacklogByFlow(BTreeMap<String, u64>),
    /// Items in claim order.
    Items(Vec<Item>),
    /// One page of a listing.
    Page(ItemPage),
    /// One item with its state, if the queue holds it.
    Found(Option<ListedItem>),
    /// Now by the queue's clock, ms since the Unix epoch.
    Time(u64),
    /// Every schedule with its progress, by name.
    Schedules(Vec<ScheduleInfo>),
    /// Times, ms since the Unix epoch, in order.
    Times(Vec<u64>),
    /// What firing the schedules did.
    Fired(Fired),
    /// What `cancel` did.
    Cancel(CancelOutcome),
    /// Item ids, ascending.
    Ids(Vec<u64>),
}

impl Reply {
    /// The variant's name, for the error when an operation got another
    /// reply than its own.
    fn kind(&self) -> &'static str {
        match self {
            Reply::Unit => "unit",
            Reply::Added(_) => "added",
            Reply::AddedList(_) => "added list",
            Reply::NextDue(_) => "next due",
            Reply::Count(_) => "count",
            Reply::Bool(_) => "bool",
            Reply::Claimed(_) => "claimed",
            Reply::Stepped(_) => "stepped",
            Reply::Retried(_) => "retried",
            Reply::Reclaimed(_) => "reclaimed",
            Reply::Outcome(_) => "outcome",
            Reply::Progress(_) => "progress",
            Reply::Seq(_) => "seq",
            Reply::Chunks(_) => "chunks",
            Reply::Flows(_) => "flows",
            Reply::FlowLimits(_) => "flow limits",
            Reply::DeadLetters(_) => "dead letters",
            Reply::Stats(_) => "stats",
            Reply::BacklogByFlow(_) => "backlog by flow",
            Reply::Items(_) => "items",
            Reply::Page(_) => "page",
            Reply::Found(_) => "found",
            Reply::Time(_) => "time",
            Reply::Schedules(_) => "schedules",
            Reply::Times(_) => "times",
            Reply::Fired(_) => "fired",
            Reply::Cancel(_) => "cancel",
            Reply::Ids(_) => "ids",
        }
    }

    /// The error for a reply that is not the operation's own: a backend
    /// (or a server) that answered another operation's reply.
    pub(crate) fn mismatch(self, op: &str) -> Error {
        Error::Decode {
            what: format!("the reply to {op}"),
            detail: format!("a {} reply is not this operation's", self.kind()),
        }
    }
}

/// The body of a typed method of `WorkQueue`: call `$request` on `$queue`
/// and take the one reply variant the operation gets apart (`Unit` when
/// none is named); another variant is [`Reply::mismatch`].
macro_rules! ask {
    ($queue:expr, $request:expr, $variant:ident) => {{
        let request: $crate::request::Request = $request;
        let op = request.name();
        async move {
            match $queue.call(request).await? {
                $crate::request::Reply::$variant(v) => Ok(v),
                other => Err(other.mismatch(op)),
            }
        }
    }};
    ($queue:expr, $request:expr) => {{
        let request: $crate::request::Request = $request;
        let op = request.name();
        async move {
            match $queue.call(request).await? {
                $crate::request::Reply::Unit => Ok(()),
                other => Err(other.mismatch(op)),
            }
        }
    }};
}
pub(crate) use ask;
