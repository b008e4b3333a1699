//! The data types every backend speaks (SPEC section 2).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A piece of work to add: its flow, its payload bytes and an optional
/// deduplication key (SPEC section 3, Adding).
///
/// # Examples
///
/// ```
/// use workjournal::NewItem;
/// let item = NewItem::new(b"resize photo 7".to_vec()).flow("images").dedup_key("photo-7");
/// assert_eq!(item.get_flow(), "images");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NewItem {
    pub(crate) flow: String,
    pub(crate) payload: Vec<u8>,
    pub(crate) dedup_key: Option<String>,
    pub(crate) priority: u8,
    pub(crate) cost: u32,
}

impl NewItem {
    /// An item in the default flow (`""`) carrying `payload` as opaque bytes.
    pub fn new(payload: impl Into<Vec<u8>>) -> Self {
        NewItem {
            flow: String::new(),
            payload: payload.into(),
            dedup_key: None,
            priority: 0,
            cost: 1,
        }
    }

    /// An item whose payload is `value` encoded with bincode 2 (standard
    /// configuration, through serde). Read it back with [`Item::decode`].
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] if serde refuses the value.
    pub fn encode<T: Serialize + ?Sized>(value: &T) -> Result<Self> {
        let payload = bincode::serde::encode_to_vec(value, bincode::config::standard())
            .map_err(|e| Error::invalid(format!("payload does not encode: {e}")))?;
        Ok(NewItem::new(payload))
    }

    /// Put the item in `flow` (groups items for pause, park, step and
    /// backlog-by-flow). Default: `""`.
    pub fn flow(mut self, flow: impl Into<String>) -> Self {
        self.flow = flow.into();
        self
    }

    /// Ask for deduplication: an add whose key was added within
    /// `dedup_window` journals nothing and returns the first item's id
    /// flagged as a duplicate. Default: none (identical payloads are two
    /// items).
    pub fn dedup_key(mut self, key: impl Into<String>) -> Self {
        self.dedup_key = Some(key.into());
        self
    }

    /// Give the item a priority tier (SPEC section 3, Priority): higher
    /// tiers run earlier, each tier worth `aging_step` of waiting, so an
    /// item of a low tier that has waited long enough still overtakes fresh
    /// items of higher tiers. Default: 0. With every item at tier 0 the
    /// order is plain FIFO.
    pub fn priority(mut self, tier: u8) -> Self {
        self.priority = tier;
        self
    }

    /// The priority tier, 0 to 255 (SPEC section 3, Priority).
    pub fn get_priority(&self) -> u8 {
        self.priority
    }

    /// How many permits of its flow's rate limit the item takes when it
    /// is claimed (SPEC section 3, Flow limits). Default: 1. Zero is taken
    /// as 1. Kept through every move, like the tier.
    pub fn cost(mut self, permits: u32) -> Self {
        self.cost = permits.max(1);
        self
    }

    /// The item's cost in rate-limit permits (SPEC section 3, Flow limits).
    pub fn get_cost(&self) -> u32 {
        self.cost.max(1)
    }

    /// The flow this item will join.
    pub fn get_flow(&self) -> &str {
        &self.flow
    }

    /// The payload bytes.
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// The deduplication key, if any.
    pub fn get_dedup_key(&self) -> Option<&str> {
        self.dedup_key.as_deref()
    }
}

/// One unit of work as the queue holds it (SPEC section 2). Made by the
/// queue only; `#[non_exhaustive]` so that a field can be added.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Item {
    /// Assigned by the queue, unique and increasing within one queue, never
    /// reused; the idempotency key for side effects.
    pub id: u64,
    /// The flow the item belongs to (`""` by default).
    pub flow: String,
    /// Opaque payload bytes.
    pub payload: Vec<u8>,
    /// When the item was added, in ms since the Unix epoch (queue clock).
    pub enqueued_at_ms: u64,
    /// For a delayed or retried item, the time before which it must not run,
    /// in ms since the Unix epoch; `None` for an item added to the backlog.
    pub not_before_ms: Option<u64>,
    /// How many times the item has been handed out (claim, reclaim, step).
    /// Reset to 0 by a redrive.
    pub deliveries: u32,
    /// The priority tier given at add (0 by default; higher runs earlier),
    /// kept through every move (SPEC section 3, Priority).
    pub priority: u8,
    /// The permits of its flow's rate limit a claim of the item takes (1
    /// by default; SPEC section 3, Flow limits).
    #[serde(default = "one_permit")]
    pub cost: u32,
}

fn one_permit() -> u32 {
    1
}

impl Item {
    /// Decode a payload written by [`NewItem::encode`].
    ///
    /// # Errors
    ///
    /// [`Error::Decode`] if the bytes are not a bincode encoding of `T`.
    pub fn decode<T: serde::de::DeserializeOwned>(&self) -> Result<T> {
        let (value, _) =
            bincode::serde::decode_from_slice(&self.payload, bincode::config::standard()).map_err(
                |e| Error::Decode {
                    what: format!("payload of item {}", self.id),
                    detail: e.to_string(),
                },
            )?;
        Ok(value)
    }
}

/// Where a claimed item was taken from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Lane {
    /// The backlog: items ready to run, in add order.
    Backlog,
    /// The due lane: delayed items whose time has come, claimed first.
    Due,
    /// A paused flow's parked list, handed out by `step`.
    Parked,
}

/// Which lanes a claim may take from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum ClaimFrom {
    /// The due lane first, then the backlog.
    #[default]
    All,
    /// Only the due lane (timers whose time has come).
    DueOnly,
}

/// Proof of one claim, needed to ack, touch, retry, park or dead-letter the
/// item (SPEC section 2, receipt).
///
/// The operation takes effect only if the item is still pending under this
/// very claim; otherwise it is [`Error::LeaseLost`]. `lease` is the fencing
/// token: unique per claim within one queue and never reused, so a receipt
/// issued before a redrive (which resets `deliveries` to 0, so the next
/// claim's `delivery` is 1 again) cannot match a later claim.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct Receipt {
    /// The item's id.
    pub id: u64,
    /// The item's delivery count at this claim (first claim: 1).
    pub delivery: u32,
    /// The claim's lease number, unique within the queue.
    pub lease: u64,
}

/// What a claim, a reclaim or a step hands back. Made by the queue only.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Claimed {
    /// The item, with `deliveries` already counting this claim.
    pub item: Item,
    /// The lane it was first claimed from (kept through reclaims).
    pub lane: Lane,
    /// When this claim (or reclaim) happened, in ms since the Unix epoch.
    pub claimed_at_ms: u64,
    /// The receipt for ack, touch, retry, park and dead_letter.
    pub receipt: Receipt,
}

/// The result of an add: the id and whether it was a duplicate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Added {
    /// The new item's id, or for a duplicate the first item's id.
    pub id: u64,
    /// True when the dedup key was seen within `dedup_window` and nothing was
    /// journaled.
    pub duplicate: bool,
}

/// What a reclaim did (SPEC 3, Crash recovery): the items it took over,
/// and the stale claims whose items it dead-lettered instead because they
/// had had `max_deliveries` deliveries.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Reclaimed {
    /// The items taken over, each with a new receipt, oldest claim first.
    pub claimed: Vec<Claimed>,
    /// The receipts of the stale claims whose items went to the dead
    /// letters (reason `"max deliveries exceeded"`), in the order met; the
    /// receipt's `delivery` is the delivery that went stale.
    pub dead_lettered: Vec<Receipt>,
    /// The receipts of the stale claims of items that were cancelled while
    /// they ran (SPEC 3, Cancelling): they ended as cancelled here, never
    /// to run again. In the order met.
    pub cancelled: Vec<Receipt>,
}

/// What `cancel` did (SPEC 3, Cancelling).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum CancelOutcome {
    /// The item was waiting (backlog, due lane, held by a flow limit,
    /// delayed or parked) and has ended as cancelled.
    Ended,
    /// The item is pending: it is marked, and its holder's next call with
    /// its receipt (or a reclaim of it) ends it as cancelled, answering
    /// [`Error::Cancelled`](crate::Error::Cancelled).
    Marked,
    /// The queue holds no item of that id: never added, already finished
    /// (acked, cancelled) or removed.
    NotFound,
}

/// What [`WorkQueue::update`](crate::WorkQueue::update) changes in a
/// waiting item (SPEC 3, Updating): each part left unset stays as it is.
///
/// ```
/// use workjournal::ItemUpdate;
/// let u = ItemUpdate::new().priority(7).payload(b"resize photo 7 at 2x".to_vec());
/// assert_eq!(u.get_priority(), Some(7));
/// assert!(u.get_not_before_ms().is_none());
/// assert!(!u.is_empty());
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ItemUpdate {
    pub(crate) priority: Option<u8>,
    pub(crate) not_before_ms: Option<u64>,
    pub(crate) payload: Option<Vec<u8>>,
}

impl ItemUpdate {
    /// An update that changes nothing yet (the queue refuses it as it is).
    pub fn new() -> Self {
        ItemUpdate::default()
    }

    /// Set the priority tier, 0 to 255 (SPEC 3, Priority). A waiting item
    /// keeps its arrival and its position in its lane and is ranked again
    /// with the new tier.
    pub fn priority(mut self, tier: u8) -> Self {
        self.priority = Some(tier);
        self
    }

    /// Set the not-before time, in ms since the Unix epoch by the queue's
    /// clock (SPEC 3, Timers): a time after now makes the item delayed
    /// until then; now or earlier makes it due, entering the due lane's
    /// tail with that time as its arrival, as a promotion would. Not for a
    /// parked item (`InvalidInput`).
    pub fn not_before_ms(mut self, not_before_ms: u64) -> Self {
        self.not_before_ms = Some(not_before_ms);
        self
    }

    /// Replace the payload (at most `max_payload_bytes`, SPEC 5).
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = Some(payload.into());
        self
    }

    /// The new priority tier, if set.
    pub fn get_priority(&self) -> Option<u8> {
        self.priority
    }

    /// The new not-before time (ms since the Unix epoch), if set.
    pub fn get_not_before_ms(&self) -> Option<u64> {
        self.not_before_ms
    }

    /// The new payload, if set.
    pub fn get_payload(&self) -> Option<&[u8]> {
        self.payload.as_deref()
    }

    /// True when nothing is set.
    pub fn is_empty(&self) -> bool {
        self.priority.is_none() && self.not_before_ms.is_none() && self.payload.is_none()
    }
}

/// SPEC 3, Updating: an update must change something, and a new payload
/// is held to `max_payload_bytes` as an add's is.
///
/// # Errors
///
/// `InvalidInput` for an empty update or a payload over the limit (both
/// sizes in bytes).
pub(crate) fn check_update(update: &ItemUpdate, max_payload_bytes: usize) -> Result<()> {
    if update.is_empty() {
        return Err(Error::invalid(
            "an update must set at least one of priority, not_before and payload",
        ));
    }
    match &update.payload {
        Some(p) => crate::outcome::check_size("payload", p.len(), max_payload_bytes),
        None => Ok(()),
    }
}

/// SPEC 3, Updating: the error for a finished item whose outcome of
/// `kind` is kept.
pub(crate) fn finished_not_updatable(id: u64, kind: &crate::outcome::OutcomeKind) -> Error {
    use crate::outcome::OutcomeKind;
    let how = match kind {
        OutcomeKind::Done { .. } => "finished (acked)",
        OutcomeKind::DeadLettered { .. } => "finished (dead-lettered)",
        OutcomeKind::Cancelled => "finished (cancelled)",
    };
    not_updatable(id, how)
}

/// SPEC 3, Updating: the error for a parked item given a not-before time.
pub(crate) fn parked_takes_no_timer(id: u64) -> Error {
    Error::invalid(format!(
        "item {id} is parked: it waits for step or resume, not for a time, so an update of it takes no not_before (priority and payload can change)"
    ))
}

/// SPEC 3, Updating: the error for an item that is not waiting: `what`
/// says what it is ("pending: a consumer holds it", "a dead letter", ...).
pub(crate) fn not_updatable(id: u64, what: &str) -> Error {
    Error::invalid(format!(
        "item {id} is {what}, so it cannot be updated: only a waiting item (backlog, due, held, delayed or parked) can"
    ))
}

/// What `retry` did with the item.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RetryOutcome {
    /// The item waits in delayed until its `not_before`.
    Delayed,
    /// The item had used up `max_deliveries` and went to the dead letters
    /// with reason `"max deliveries exceeded"`.
    DeadLettered,
}

/// Exact counts of every state (SPEC section 3, Looking). Made by the queue
/// only; `#[non_exhaustive]` so that a count can be added.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct Stats {
    /// Items ready to run: backlog plus due lane.
    pub backlog: u64,
    /// Of those, items in the due lane.
    pub due: u64,
    /// Claimed and not yet acknowledged.
    pub pending: u64,
    /// Waiting for their `not_before` (not yet promoted).
    pub delayed: u64,
    /// Held in parked lists of paused flows.
    pub parked: u64,
    /// Dead letters kept.
    pub dead_letters: u64,
    /// Dead letters dropped for good because `dead_letter_cap` was
    /// reached (the oldest go first), over the queue's whole life: never
    /// reset, not even by `purge_dead_letters` (SPEC 3, Dead letters). A
    /// dropped letter is not counted in `dead_letters`.
    #[serde(default)]
    pub dead_letters_dropped: u64,
    /// Age of the oldest pending claim in ms, by the queue's clock: since
    /// the claim that handed the item out, whatever heartbeats (`touch`)
    /// came after (SPEC 3, Looking); `None` when nothing is pending.
    pub oldest_pending_age_ms: Option<u64>,
    /// Time since the stalest pending item's last touch (its claim or its
    /// latest `touch`), in ms by the queue's clock: how long the least
    /// recently heard-of holder has been silent (SPEC 3, Looking). `None`
    /// when nothing is pending.
    #[serde(default)]
    pub oldest_touch_age_ms: Option<u64>,
    /// False only for the memory backend.
    pub durable: bool,
    /// Of `backlog`, the items a claim has set aside for their flow's
    /// limits while the flow is held by them now (SPEC 3, Flow limits):
    /// rate limit used up, concurrency cap reached, or backed off.
    #[serde(default)]
    pub limited: u64,
    /// Acked items kept by `completed_retention` and not past its age
    /// (SPEC 3, History): what `list` shows in state `completed`.
    #[serde(default)]
    pub completed: u64,
    /// Cancelled items kept by `cancelled_retention` and not past its age
    /// (SPEC 3, History): what `list` shows in state `cancelled`.
    #[serde(default)]
    pub cancelled: u64,
}

/// An item given up on (SPEC section 3, Dead letters). Made by the queue
/// only.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The item as it was when it failed.
    pub item: Item,
    /// Why it was given up on.
    pub reason: String,
    /// When, in ms since the Unix epoch.
    pub failed_at_ms: u64,
}

/// The reason given when a retry or reclaim passes `max_deliveries`.
pub const MAX_DELIVERIES_REASON: &str = "max deliveries exceeded";

/// The longest flow name, in bytes (SPEC section 5): flow names appear in
/// every text output and, on Redis, in key names.
pub const MAX_FLOW_NAME_BYTES: usize = 256;

/// SPEC section 5: a flow name (the default flow `""` included) has at most
/// [`MAX_FLOW_NAME_BYTES`] bytes and no control characters (tabs, newlines),
/// which would break the line- and tab-separated outputs. The one check of
/// every backend, for adds and flow operations alike.
///
/// # Errors
///
/// `InvalidInput` naming what is wrong.
pub(crate) fn check_flow_name(flow: &str) -> Result<()> {
    if flow.len() > MAX_FLOW_NAME_BYTES {
        return Err(Error::invalid(format!(
            "flow name of {} bytes is over the limit of {MAX_FLOW_NAME_BYTES} bytes",
            flow.len()
        )));
    }
    if flow.chars().any(char::is_control) {
        return Err(Error::invalid(format!(
            "flow name {flow:?} has control characters (tabs, newlines)"
        )));
    }
    Ok(())
}

/// SPEC section 3, Flows: pause, resume, park, step and clear_flow need a
/// flow name; the default flow `""` cannot be paused or parked. The name is
/// checked as [`check_flow_name`] does.
///
/// # Errors
///
/// `InvalidInput` for an empty or malformed flow name.
pub(crate) fn require_flow(flow: &str) -> Result<()> {
    if flow.is_empty() {
        return Err(Error::invalid(
            "a flow name is required here (the default flow \"\" cannot be paused or parked)",
        ));
    }
    check_flow_name(flow)
}

/// SPEC section 3, Adding, and section 5: a payload over
/// `max_payload_bytes` is refused, and so is a malformed flow name
/// ([`check_flow_name`]).
///
/// # Errors
///
/// `InvalidInput` naming both sizes, in bytes, or what is wrong with the
/// flow name.
pub(crate) fn check_new_item(item: &NewItem, max_payload_bytes: usize) -> Result<()> {
    check_flow_name(&item.flow)?;
    if item.payload.len() > max_payload_bytes {
        return Err(Error::invalid(format!(
            "payload of {} bytes is over max_payload_bytes ({} bytes)",
            item.payload.len(),
            max_payload_bytes
        )));
    }
    Ok(())
}
