//! Table layout of the embedded file and every state move on it.
//!
//! Each item's metadata and payload are stored once (`items`, and
//! `payloads` for payloads over [`INLINE_PAYLOAD_BYTES`]); every state is
//! an index table naming ids, so a move between states is a delete from one
//! index and an insert into another inside one write transaction. Lanes
//! that keep an order (parked lists, dead letters) are keyed by one
//! file-wide position counter `seq`; the backlog and the due lane by
//! (rank, seq), the rank being SPEC 3's priority rank.

mod browse;
#[cfg(feature = "forward")]
mod forward;
mod limits;

use std::collections::BTreeMap;
use std::ops::Bound;

use std::cell::OnceCell;

#[cfg(feature = "testing")]
use redb::TableHandle;
use redb::{
    Key, ReadableTable, ReadableTableMetadata, Table, TableDefinition, Value, WriteTransaction,
};

use crate::codec::{
    self, DeadRecord, INLINE_PAYLOAD_BYTES, ItemRecord, LeaseRecord, OutcomeRecord,
};
use crate::config::{rank, rank_back};
use crate::error::{Error, Result};
use crate::item::{
    Added, ClaimFrom, Claimed, DeadLetter, Item, Lane, MAX_DELIVERIES_REASON, NewItem, Receipt,
    Reclaimed, RetryOutcome, Stats, check_new_item, require_flow,
};
use crate::outcome::{Chunk, Outcome, OutcomeKind, check_size};
#[cfg(feature = "forward")]
pub(crate) use forward::{Outgoing, Unforwarded};

/// Counters and the schema version.
pub(super) const META: TableDefinition<&str, u64> = TableDefinition::new("meta");
/// id -> versioned [`ItemRecord`].
pub(super) const ITEMS: TableDefinition<u64, &[u8]> = TableDefinition::new("items");
/// id -> raw payload bytes, for payloads over [`INLINE_PAYLOAD_BYTES`].
pub(super) const PAYLOADS: TableDefinition<u64, &[u8]> = TableDefinition::new("payloads");
/// (rank, seq) -> id: claim order (SPEC 3, Priority). Schema 1 had
/// `backlog` (seq -> id).
pub(super) const BACKLOG: TableDefinition<(i64, u64), u64> = TableDefinition::new("backlog_ranked");
/// (rank, seq) -> id, ranked by the arrival in the lane. Schema 1 had
/// `due` (seq -> id).
pub(super) const DUE: TableDefinition<(i64, u64), u64> = TableDefinition::new("due_ranked");
/// (not_before_ms, id) -> ().
pub(super) const DELAYED: TableDefinition<(u64, u64), ()> = TableDefinition::new("delayed");
/// id -> versioned [`LeaseRecord`].
pub(super) const PENDING: TableDefinition<u64, &[u8]> = TableDefinition::new("pending");
/// (claimed_at_ms, id) -> (): pending items oldest claim first.
pub(super) const PENDING_BY_TIME: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("pending_by_time");
/// (claimed_at_ms, id) -> (): pending items claimed before the current open.
pub(super) const ORPHANS: TableDefinition<(u64, u64), ()> = TableDefinition::new("orphans");
/// (flow, seq) -> id.
pub(super) const PARKED: TableDefinition<(&str, u64), u64> = TableDefinition::new("parked");
/// flow -> ().
pub(super) const PAUSED: TableDefinition<&str, ()> = TableDefinition::new("paused");
/// (id, step) -> expires_at_ms.
pub(super) const DONE: TableDefinition<(u64, &str), u64> = TableDefinition::new("done");
/// (expires_at_ms, id, step) -> ().
pub(super) const DONE_EXPIRY: TableDefinition<(u64, u64, &str), ()> =
    TableDefinition::new("done_expiry");
/// dedup key -> (id, expires_at_ms).
pub(super) const DEDUP: TableDefinition<&str, (u64, u64)> = TableDefinition::new("dedup");
/// (expires_at_ms, key) -> ().
pub(super) const DEDUP_EXPIRY: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("dedup_expiry");
/// seq -> versioned [`DeadRecord`], oldest first.
pub(super) const DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");
/// id -> seq in `DEAD`.
pub(super) const DEAD_BY_ID: TableDefinition<u64, u64> = TableDefinition::new("dead_by_id");

/// id -> versioned [`OutcomeRecord`] (SPEC 3, Outcomes and progress).
pub(super) const OUTCOMES: TableDefinition<u64, &[u8]> = TableDefinition::new("outcomes");
/// (expires_at_ms, id) -> (): outcomes by expiry.
pub(super) const OUTCOME_EXPIRY: TableDefinition<(u64, u64), ()> =
    TableDefinition::new("outcome_expiry");
/// id -> the last progress bytes.
pub(super) const PROGRESS: TableDefinition<u64, &[u8]> = TableDefinition::new("progress");
/// (id, seq) -> chunk bytes.
pub(super) const CHUNKS: TableDefinition<(u64, u64), &[u8]> = TableDefinition::new("chunks");

/// SPEC 3, Flow limits: each limited flow's record ([`codec::LimitRecord`]).
pub(super) const FLOW_LIMITS: TableDefinition<&str, &[u8]> = TableDefinition::new("flow_limits");
/// Items set aside for their flow's limits, in their places: (flow, lane
/// 0 due or 1 backlog, rank, position) -> id.
pub(super) const HELD: TableDefinition<(&str, u8, i64, u64), u64> = TableDefinition::new("held");
/// The first held item of each lane of every limited flow that may run
/// now: (lane, rank, position) -> flow.
pub(super) const HEADS: TableDefinition<(u8, i64, u64), &str> = TableDefinition::new("heads");
/// When a held flow's back-off or rate window ends: (ms, flow).
pub(super) const LIMIT_TIMERS: TableDefinition<(u64, &str), ()> =
    TableDefinition::new("limit_timers");
pub(super) const SCHEMA_VERSION_KEY: &str = "schema_version";
pub(super) const SCHEMA_VERSION: u64 = 2;
/// The tag of the redo log generation the file's records go under: random,
/// new at every checkpoint (module `redo`, SPEC section 6).
pub(super) const REDO_LOG_KEY: &str = "redo_log";
/// The offset in the redo log of the first record this file does not hold.
pub(super) const REDO_AT_KEY: &str = "redo_at";
pub(super) const NEXT_ID: &str = "next_id";
pub(super) const NEXT_SEQ: &str = "next_seq";
const NEXT_LEASE: &str = "next_lease";
/// The latest arrival time given in the backlog and in the due lane
/// (SPEC 3, Priority: arrivals never go back, so FIFO survives a clock
/// that steps back).
pub(super) const BACKLOG_CLOCK: &str = "backlog_clock";
pub(super) const DUE_CLOCK: &str = "due_clock";
/// Dead letters dropped past `dead_letter_cap`, ever (`Stats::dead_letters_dropped`).
const DEAD_DROPPED: &str = "dead_dropped";
/// The latest time (ms, queue clock) a committed transaction saw: how a
/// clock step back during a restart is noticed (SPEC 8, Clock steps).
const CLOCK_HIGH: &str = "clock_high";

/// How many expired done markers and dedup keys one transaction purges at
/// most, so that a backlog of expiries never makes one commit slow.
const PURGE_PER_TXN: usize = 256;

/// Map any redb error to the crate's error, naming what was being done.
pub(super) fn db_err(e: impl Into<redb::Error>, what: &str) -> Error {
    match e.into() {
        redb::Error::Corrupted(detail) => Error::Corrupt {
            detail: format!("{what}: {detail}"),
            source: None,
        },
        redb::Error::Io(source) => Error::Io {
            context: what.to_string(),
            source,
        },
        other => Error::storage(what.to_string(), other),
    }
}

pub(super) trait Ctx<T> {
    fn ctx(self, what: &str) -> Result<T>;
}

impl<T, E: Into<redb::Error>> Ctx<T> for std::result::Result<T, E> {
    fn ctx(self, what: &str) -> Result<T> {
        self.map_err(|e| db_err(e, what))
    }
}

/// The settings the table operations need.
#[derive(Debug, Clone, Copy)]
pub(super) struct Limits {
    pub(super) max_deliveries: u32,
    pub(super) done_ttl_ms: u64,
    pub(super) result_ttl_ms: u64,
    pub(super) dedup_window_ms: u64,
    pub(super) dead_letter_cap: u64,
    pub(super) max_backlog: Option<u64>,
    pub(super) max_payload_bytes: usize,
    pub(super) aging_step: std::time::Duration,
}

/// Every table of the file, each opened on first use in the transaction.
///
/// Opening a redb table and closing it again at commit costs two lookups in
/// the table tree; an operation touches a few of the 17 tables, so opening
/// them all per transaction was a third of the instructions of a single add.
pub(super) struct Tables<'t> {
    txn: &'t WriteTransaction,
    meta: Lazy<'t, &'static str, u64>,
    items: Lazy<'t, u64, &'static [u8]>,
    payloads: Lazy<'t, u64, &'static [u8]>,
    backlog: Lazy<'t, (i64, u64), u64>,
    due: Lazy<'t, (i64, u64), u64>,
    delayed: Lazy<'t, (u64, u64), ()>,
    pending: Lazy<'t, u64, &'static [u8]>,
    pending_by_time: Lazy<'t, (u64, u64), ()>,
    orphans: Lazy<'t, (u64, u64), ()>,
    parked: Lazy<'t, (&'static str, u64), u64>,
    paused: Lazy<'t, &'static str, ()>,
    done: Lazy<'t, (u64, &'static str), u64>,
    done_expiry: Lazy<'t, (u64, u64, &'static str), ()>,
    dedup: Lazy<'t, &'static str, (u64, u64)>,
    dedup_expiry: Lazy<'t, (u64, &'static str), ()>,
    dead: Lazy<'t, u64, &'static [u8]>,
    dead_by_id: Lazy<'t, u64, u64>,
    outcomes: Lazy<'t, u64, &'static [u8]>,
    outcome_expiry: Lazy<'t, (u64, u64), ()>,
    progress: Lazy<'t, u64, &'static [u8]>,
    chunks: Lazy<'t, (u64, u64), &'static [u8]>,
    flow_limits: Lazy<'t, &'static str, &'static [u8]>,
    held: Lazy<'t, (&'static str, u8, i64, u64), u64>,
    heads: Lazy<'t, (u8, i64, u64), &'static str>,
    limit_timers: Lazy<'t, (u64, &'static str), ()>,
    limits: Limits,
    /// Whether anything asked for a table to write in. An operation asks
    /// only once it knows it will change something, so a transaction that
    /// stays clean changed nothing and is not committed (SPEC 8, Idle).
    dirty: bool,
}

/// One table of a write transaction, opened when first asked for.
struct Lazy<'t, K: Key + 'static, V: Value + 'static> {
    def: TableDefinition<'static, K, V>,
    what: &'static str,
    cell: OnceCell<Result<Table<'t, K, V>>>,
}

impl<'t, K: Key + 'static, V: Value + 'static> Lazy<'t, K, V> {
    fn new(def: TableDefinition<'static, K, V>, what: &'static str) -> Self {
        Lazy {
            def,
            what,
            cell: OnceCell::new(),
        }
    }

    fn get(&self, txn: &'t WriteTransaction) -> Result<&Table<'t, K, V>> {
        match self
            .cell
            .get_or_init(|| txn.open_table(self.def).ctx(self.what))
        {
            Ok(t) => Ok(t),
            Err(e) => Err(e.duplicate()),
        }
    }

    fn get_mut(&mut self, txn: &'t WriteTransaction) -> Result<&mut Table<'t, K, V>> {
        self.get(txn)?;
        match self.cell.get_mut() {
            Some(Ok(t)) => Ok(t),
            Some(Err(e)) => Err(e.duplicate()),
            None => Err(Error::corrupt(format!("{} was not opened", self.what))),
        }
    }
}

impl<'t> Tables<'t> {
    pub(super) fn open(txn: &'t WriteTransaction, limits: Limits) -> Result<Self> {
        Ok(Tables {
            txn,
            meta: Lazy::new(META, "open table meta"),
            items: Lazy::new(ITEMS, "open table items"),
            payloads: Lazy::new(PAYLOADS, "open table payloads"),
            backlog: Lazy::new(BACKLOG, "open table backlog"),
            due: Lazy::new(DUE, "open table due"),
            delayed: Lazy::new(DELAYED, "open table delayed"),
            pending: Lazy::new(PENDING, "open table pending"),
            pending_by_time: Lazy::new(PENDING_BY_TIME, "open table pending_by_time"),
            orphans: Lazy::new(ORPHANS, "open table orphans"),
            parked: Lazy::new(PARKED, "open table parked"),
            paused: Lazy::new(PAUSED, "open table paused"),
            done: Lazy::new(DONE, "open table done"),
            done_expiry: Lazy::new(DONE_EXPIRY, "open table done_expiry"),
            dedup: Lazy::new(DEDUP, "open table dedup"),
            dedup_expiry: Lazy::new(DEDUP_EXPIRY, "open table dedup_expiry"),
            dead: Lazy::new(DEAD, "open table dead"),
            outcomes: Lazy::new(OUTCOMES, "open table outcomes"),
            outcome_expiry: Lazy::new(OUTCOME_EXPIRY, "open table outcome_expiry"),
            progress: Lazy::new(PROGRESS, "open table progress"),
            chunks: Lazy::new(CHUNKS, "open table chunks"),
            dead_by_id: Lazy::new(DEAD_BY_ID, "open table dead_by_id"),
            flow_limits: Lazy::new(FLOW_LIMITS, "open table flow_limits"),
            held: Lazy::new(HELD, "open table held"),
            heads: Lazy::new(HEADS, "open table heads"),
            limit_timers: Lazy::new(LIMIT_TIMERS, "open table limit_timers"),
            limits,
            dirty: false,
        })
    }

    /// Whether this transaction has written anything (see `dirty`).
    pub(super) fn is_dirty(&self) -> bool {
        self.dirty
    }

    fn meta(&self) -> Result<&Table<'t, &'static str, u64>> {
        self.meta.get(self.txn)
    }

    fn meta_mut(&mut self) -> Result<&mut Table<'t, &'static str, u64>> {
        self.dirty = true;
        self.meta.get_mut(self.txn)
    }

    fn items(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.items.get(self.txn)
    }

    fn items_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.items.get_mut(self.txn)
    }

    fn payloads(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.payloads.get(self.txn)
    }

    fn payloads_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.payloads.get_mut(self.txn)
    }

    fn backlog(&self) -> Result<&Table<'t, (i64, u64), u64>> {
        self.backlog.get(self.txn)
    }

    fn backlog_mut(&mut self) -> Result<&mut Table<'t, (i64, u64), u64>> {
        self.dirty = true;
        self.backlog.get_mut(self.txn)
    }

    fn due(&self) -> Result<&Table<'t, (i64, u64), u64>> {
        self.due.get(self.txn)
    }

    fn due_mut(&mut self) -> Result<&mut Table<'t, (i64, u64), u64>> {
        self.dirty = true;
        self.due.get_mut(self.txn)
    }

    fn delayed(&self) -> Result<&Table<'t, (u64, u64), ()>> {
        self.delayed.get(self.txn)
    }

    fn delayed_mut(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        self.dirty = true;
        self.delayed.get_mut(self.txn)
    }

    fn pending(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.pending.get(self.txn)
    }

    fn pending_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.pending.get_mut(self.txn)
    }

    fn pending_by_time(&self) -> Result<&Table<'t, (u64, u64), ()>> {
        self.pending_by_time.get(self.txn)
    }

    fn pending_by_time_mut(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        self.dirty = true;
        self.pending_by_time.get_mut(self.txn)
    }

    fn orphans(&self) -> Result<&Table<'t, (u64, u64), ()>> {
        self.orphans.get(self.txn)
    }

    fn orphans_mut(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        self.dirty = true;
        self.orphans.get_mut(self.txn)
    }

    fn parked(&self) -> Result<&Table<'t, (&'static str, u64), u64>> {
        self.parked.get(self.txn)
    }

    fn parked_mut(&mut self) -> Result<&mut Table<'t, (&'static str, u64), u64>> {
        self.dirty = true;
        self.parked.get_mut(self.txn)
    }

    fn paused(&self) -> Result<&Table<'t, &'static str, ()>> {
        self.paused.get(self.txn)
    }

    fn paused_mut(&mut self) -> Result<&mut Table<'t, &'static str, ()>> {
        self.dirty = true;
        self.paused.get_mut(self.txn)
    }

    fn done(&self) -> Result<&Table<'t, (u64, &'static str), u64>> {
        self.done.get(self.txn)
    }

    fn done_mut(&mut self) -> Result<&mut Table<'t, (u64, &'static str), u64>> {
        self.dirty = true;
        self.done.get_mut(self.txn)
    }

    fn done_expiry(&self) -> Result<&Table<'t, (u64, u64, &'static str), ()>> {
        self.done_expiry.get(self.txn)
    }

    fn done_expiry_mut(&mut self) -> Result<&mut Table<'t, (u64, u64, &'static str), ()>> {
        self.dirty = true;
        self.done_expiry.get_mut(self.txn)
    }

    fn dedup(&self) -> Result<&Table<'t, &'static str, (u64, u64)>> {
        self.dedup.get(self.txn)
    }

    fn dedup_mut(&mut self) -> Result<&mut Table<'t, &'static str, (u64, u64)>> {
        self.dirty = true;
        self.dedup.get_mut(self.txn)
    }

    fn dedup_expiry(&self) -> Result<&Table<'t, (u64, &'static str), ()>> {
        self.dedup_expiry.get(self.txn)
    }

    fn dedup_expiry_mut(&mut self) -> Result<&mut Table<'t, (u64, &'static str), ()>> {
        self.dirty = true;
        self.dedup_expiry.get_mut(self.txn)
    }

    fn dead(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.dead.get(self.txn)
    }

    fn dead_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.dead.get_mut(self.txn)
    }

    fn outcomes(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.outcomes.get(self.txn)
    }

    fn outcomes_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.outcomes.get_mut(self.txn)
    }

    fn outcome_expiry(&self) -> Result<&Table<'t, (u64, u64), ()>> {
        self.outcome_expiry.get(self.txn)
    }

    fn outcome_expiry_mut(&mut self) -> Result<&mut Table<'t, (u64, u64), ()>> {
        self.dirty = true;
        self.outcome_expiry.get_mut(self.txn)
    }

    fn progress_table(&self) -> Result<&Table<'t, u64, &'static [u8]>> {
        self.progress.get(self.txn)
    }

    fn progress_mut(&mut self) -> Result<&mut Table<'t, u64, &'static [u8]>> {
        self.dirty = true;
        self.progress.get_mut(self.txn)
    }

    fn chunks(&self) -> Result<&Table<'t, (u64, u64), &'static [u8]>> {
        self.chunks.get(self.txn)
    }

    fn chunks_mut(&mut self) -> Result<&mut Table<'t, (u64, u64), &'static [u8]>> {
        self.dirty = true;
        self.chunks.get_mut(self.txn)
    }

    fn dead_by_id(&self) -> Result<&Table<'t, u64, u64>> {
        self.dead_by_id.get(self.txn)
    }

    fn dead_by_id_mut(&mut self) -> Result<&mut Table<'t, u64, u64>> {
        self.dirty = true;
        self.dead_by_id.get_mut(self.txn)
    }

    // ---- counters -------------------------------------------------------

    fn counter(&self, key: &str, start: u64) -> Result<u64> {
        Ok(self
            .meta()?
            .get(key)
            .ctx("read counter")?
            .map_or(start, |v| v.value()))
    }

    fn bump(&mut self, key: &str, start: u64) -> Result<u64> {
        let v = self.counter(key, start)?;
        let next = v
            .checked_add(1)
            .ok_or_else(|| Error::corrupt(format!("counter {key} overflowed")))?;
        self.meta_mut()?.insert(key, next).ctx("write counter")?;
        Ok(v)
    }

    fn next_seq(&mut self) -> Result<u64> {
        self.bump(NEXT_SEQ, 1)
    }

    pub(super) fn schema_version(&self) -> Result<Option<u64>> {
        Ok(self
            .meta()?
            .get(SCHEMA_VERSION_KEY)
            .ctx("read schema version")?
            .map(|v| v.value()))
    }

    /// The redo log's tag and the offset of the first record this file
    /// does not hold; `None` for a file never written through the log.
    pub(super) fn redo_state(&self) -> Result<Option<(u64, u64)>> {
        let meta = self.meta()?;
        let Some(tag) = meta.get(REDO_LOG_KEY).ctx("read redo log tag")? else {
            return Ok(None);
        };
        let at = meta
            .get(REDO_AT_KEY)
            .ctx("read redo log offset")?
            .map_or(0, |v| v.value());
        Ok(Some((tag.value(), at)))
    }

    /// A checkpoint: the log's new tag, and nothing of it held yet.
    pub(super) fn set_redo(&mut self, tag: u64, at: u64) -> Result<()> {
        let meta = self.meta_mut()?;
        meta.insert(REDO_LOG_KEY, tag).ctx("write redo log tag")?;
        meta.insert(REDO_AT_KEY, at).ctx("write redo log offset")?;
        Ok(())
    }

    /// This transaction holds the log up to `at` (its own record's end).
    pub(super) fn set_redo_at(&mut self, at: u64) -> Result<()> {
        self.meta_mut()?
            .insert(REDO_AT_KEY, at)
            .ctx("write redo log offset")?;
        Ok(())
    }

    /// SPEC 3, Priority: put `id` (of tier `tier`) into `lane` (the
    /// backlog or the due lane), arriving at `arrival` or at the lane's
    /// latest arrival so far if that is later (the clock stepped back, or a
    /// promoted timer was older than the last one).
    fn enter(
        &mut self,
        lane: Lane,
        id: u64,
        tier: u8,
        flow: &str,
        arrival: u64,
        now: u64,
    ) -> Result<()> {
        let clock_key = if lane == Lane::Due {
            DUE_CLOCK
        } else {
            BACKLOG_CLOCK
        };
        let arrival = arrival.max(self.counter(clock_key, 0)?);
        self.meta_mut()?
            .insert(clock_key, arrival)
            .ctx("write lane clock")?;
        let seq = self.next_seq()?;
        let key = (rank(arrival, tier, self.limits.aging_step), seq);
        // SPEC 3, Flow limits: a limited flow's items wait in its held lane.
        if self.enter_held(lane, id, flow, key, now)? {
            return Ok(());
        }
        let table = if lane == Lane::Due {
            self.due_mut()?
        } else {
            self.backlog_mut()?
        };
        table.insert(key, id).ctx("write ready lane")?;
        Ok(())
    }

    pub(super) fn set_schema_version(&mut self, v: u64) -> Result<()> {
        self.meta_mut()?
            .insert(SCHEMA_VERSION_KEY, v)
            .ctx("write schema version")?;
        Ok(())
    }

    // ---- records --------------------------------------------------------

    fn record(&self, id: u64) -> Result<ItemRecord> {
        let what = format!("items[{id}]");
        let guard = self
            .items()?
            .get(id)
            .ctx("read item")?
            .ok_or_else(|| Error::corrupt(format!("{what} is missing")))?;
        codec::decode_item(&what, guard.value())
    }

    fn put_record(&mut self, id: u64, rec: &ItemRecord) -> Result<()> {
        let bytes = codec::encode_item(rec)?;
        self.items_mut()?
            .insert(id, bytes.as_slice())
            .ctx("write item")?;
        Ok(())
    }

    /// The payload of `id`: inline in its record, or in the payloads table.
    fn payload(&self, id: u64, rec: &ItemRecord) -> Result<Vec<u8>> {
        if let Some(p) = &rec.payload {
            return Ok(p.clone());
        }
        Ok(self
            .payloads()?
            .get(id)
            .ctx("read payload")?
            .map(|g| g.value().to_vec())
            .unwrap_or_default())
    }

    fn to_item(&self, id: u64, rec: ItemRecord) -> Result<Item> {
        Ok(Item {
            id,
            payload: self.payload(id, &rec)?,
            flow: rec.flow,
            enqueued_at_ms: rec.enqueued_at_ms,
            not_before_ms: rec.not_before_ms,
            deliveries: rec.deliveries,
            priority: rec.priority,
            cost: rec.cost.max(1),
        })
    }

    fn item(&self, id: u64) -> Result<Item> {
        let rec = self.record(id)?;
        self.to_item(id, rec)
    }

    fn delete_item(&mut self, id: u64) -> Result<()> {
        self.items_mut()?.remove(id).ctx("delete item")?;
        self.payloads_mut()?.remove(id).ctx("delete payload")?;
        Ok(())
    }

    fn lease(&self, id: u64) -> Result<Option<LeaseRecord>> {
        let what = format!("pending[{id}]");
        match self.pending()?.get(id).ctx("read lease")? {
            Some(g) => Ok(Some(codec::decode(&what, g.value())?)),
            None => Ok(None),
        }
    }

    fn current(&self, r: &Receipt) -> Result<LeaseRecord> {
        match self.lease(r.id)? {
            Some(l) if l.lease == r.lease => Ok(l),
            _ => Err(Error::lease_lost(r)),
        }
    }

    fn remove_pending(&mut self, id: u64, lease: &LeaseRecord, now: u64) -> Result<()> {
        if self.has_limits()? {
            let flow = self.record(id)?.flow;
            self.note_pending(&flow, false, now)?;
        }
        self.pending_mut()?.remove(id).ctx("delete lease")?;
        self.pending_by_time_mut()?
            .remove((lease.claimed_at_ms, id))
            .ctx("delete lease index")?;
        self.orphans_mut()?
            .remove((lease.claimed_at_ms, id))
            .ctx("delete orphan")?;
        Ok(())
    }

    fn hand_out(&mut self, id: u64, lane: Lane, now: u64) -> Result<Claimed> {
        let mut rec = self.record(id)?;
        self.note_pending(&rec.flow, true, now)?;
        let lease = self.bump(NEXT_LEASE, 1)?;
        rec.deliveries = rec.deliveries.saturating_add(1);
        self.put_record(id, &rec)?;
        let l = LeaseRecord {
            claimed_at_ms: now,
            lease,
            lane: codec::lane_to_u8(lane),
        };
        self.pending_mut()?
            .insert(id, codec::encode(&l)?.as_slice())
            .ctx("write lease")?;
        self.pending_by_time_mut()?
            .insert((now, id), ())
            .ctx("write lease index")?;
        let delivery = rec.deliveries;
        Ok(Claimed {
            item: self.to_item(id, rec)?,
            lane,
            claimed_at_ms: now,
            receipt: Receipt {
                id,
                delivery,
                lease,
            },
        })
    }

    fn bury(&mut self, id: u64, reason: &str, now: u64) -> Result<()> {
        self.finish(id, true, Vec::new(), reason, now)?;
        let seq = self.next_seq()?;
        let rec = DeadRecord {
            id,
            reason: reason.to_string(),
            failed_at_ms: now,
        };
        self.dead_mut()?
            .insert(seq, codec::encode(&rec)?.as_slice())
            .ctx("write dead letter")?;
        self.dead_by_id_mut()?
            .insert(id, seq)
            .ctx("write dead letter index")?;
        while self.dead()?.len().ctx("count dead letters")? > self.limits.dead_letter_cap {
            let Some((_, bytes)) = self
                .dead_mut()?
                .pop_first()
                .ctx("drop dead letter")?
                .map(|(k, v)| (k.value(), v.value().to_vec()))
            else {
                break;
            };
            let old: DeadRecord = codec::decode("dead letter", &bytes)?;
            self.dead_by_id_mut()?
                .remove(old.id)
                .ctx("drop dead letter index")?;
            self.delete_item(old.id)?;
            self.bump(DEAD_DROPPED, 0)?;
            tracing::warn!(
                id = old.id,
                cap = self.limits.dead_letter_cap,
                "dead letter dropped for good: dead_letter_cap reached"
            );
        }
        Ok(())
    }

    fn is_paused(&self, flow: &str) -> Result<bool> {
        Ok(self.paused()?.get(flow).ctx("read paused")?.is_some())
    }

    fn park_id(&mut self, flow: &str, id: u64) -> Result<()> {
        let seq = self.next_seq()?;
        self.parked_mut()?
            .insert((flow, seq), id)
            .ctx("write parked")?;
        Ok(())
    }

    // ---- outcomes and progress (SPEC 3, Outcomes and progress) -------------

    /// Keep how item `id` finished for `result_ttl`, replacing an earlier
    /// outcome.
    fn finish(
        &mut self,
        id: u64,
        dead: bool,
        result: Vec<u8>,
        reason: &str,
        now: u64,
    ) -> Result<()> {
        self.forget_outcome(id)?;
        if self.limits.result_ttl_ms == 0 {
            return Ok(());
        }
        let rec = OutcomeRecord {
            dead,
            result,
            reason: reason.to_string(),
            at_ms: now,
            expires_at_ms: now.saturating_add(self.limits.result_ttl_ms),
        };
        self.outcomes_mut()?
            .insert(id, codec::encode(&rec)?.as_slice())
            .ctx("write outcome")?;
        self.outcome_expiry_mut()?
            .insert((rec.expires_at_ms, id), ())
            .ctx("write outcome expiry")?;
        Ok(())
    }

    fn outcome_record(&self, id: u64) -> Result<Option<OutcomeRecord>> {
        match self.outcomes()?.get(id).ctx("read outcome")? {
            Some(g) => Ok(Some(codec::decode(&format!("outcomes[{id}]"), g.value())?)),
            None => Ok(None),
        }
    }

    fn forget_outcome(&mut self, id: u64) -> Result<()> {
        let expires = self
            .outcomes_mut()?
            .remove(id)
            .ctx("delete outcome")?
            .map(|g| g.value().to_vec());
        if let Some(bytes) = expires {
            let rec: OutcomeRecord = codec::decode(&format!("outcomes[{id}]"), &bytes)?;
            self.outcome_expiry_mut()?
                .remove((rec.expires_at_ms, id))
                .ctx("delete outcome expiry")?;
        }
        Ok(())
    }

    /// Delete the progress and chunks of item `id`.
    fn forget_progress(&mut self, id: u64) -> Result<()> {
        self.progress_mut()?.remove(id).ctx("delete progress")?;
        self.chunks_mut()?
            .retain_in((id, 0)..=(id, u64::MAX), |_, _| false)
            .ctx("delete chunks")?;
        Ok(())
    }

    pub(super) fn outcome(&self, id: u64, now: u64) -> Result<Option<Outcome>> {
        Ok(self
            .outcome_record(id)?
            .filter(|r| r.expires_at_ms > now)
            .map(|r| Outcome {
                id,
                kind: if r.dead {
                    OutcomeKind::DeadLettered { reason: r.reason }
                } else {
                    OutcomeKind::Done { result: r.result }
                },
                at_ms: r.at_ms,
            }))
    }

    pub(super) fn set_progress(&mut self, r: &Receipt, progress: &[u8]) -> Result<()> {
        check_size("progress", progress.len(), self.limits.max_payload_bytes)?;
        self.current(r)?;
        self.progress_mut()?
            .insert(r.id, progress)
            .ctx("write progress")?;
        Ok(())
    }

    pub(super) fn send_chunk(&mut self, r: &Receipt, data: &[u8]) -> Result<u64> {
        check_size("chunk", data.len(), self.limits.max_payload_bytes)?;
        self.current(r)?;
        let last = self
            .chunks()?
            .range((r.id, 0)..=(r.id, u64::MAX))
            .ctx("read chunks")?
            .next_back()
            .transpose()
            .ctx("read chunks")?
            .map(|(k, _)| k.value().1);
        let seq = last.map_or(1, |s| s.saturating_add(1));
        self.chunks_mut()?
            .insert((r.id, seq), data)
            .ctx("write chunk")?;
        Ok(seq)
    }

    /// Whether `id` has an outcome that expired by `now` (its progress and
    /// chunks went with it, even before the purge).
    fn expired(&self, id: u64, now: u64) -> Result<bool> {
        Ok(self
            .outcome_record(id)?
            .is_some_and(|r| r.expires_at_ms <= now))
    }

    pub(super) fn progress(&self, id: u64, now: u64) -> Result<Option<Vec<u8>>> {
        if self.expired(id, now)? {
            return Ok(None);
        }
        Ok(self
            .progress_table()?
            .get(id)
            .ctx("read progress")?
            .map(|g| g.value().to_vec()))
    }

    /// The chunks of `id` after `after_seq`, and whether it has an outcome.
    pub(super) fn chunks_after(
        &self,
        id: u64,
        after_seq: u64,
        now: u64,
    ) -> Result<(Vec<Chunk>, bool)> {
        let mut out = Vec::new();
        if after_seq < u64::MAX && !self.expired(id, now)? {
            for entry in self
                .chunks()?
                .range((id, after_seq + 1)..=(id, u64::MAX))
                .ctx("read chunks")?
            {
                let (k, v) = entry.ctx("read chunks")?;
                out.push(Chunk {
                    seq: k.value().1,
                    data: v.value().to_vec(),
                });
            }
        }
        Ok((out, self.outcome(id, now)?.is_some()))
    }

    // ---- clock steps (SPEC 8) -------------------------------------------

    /// If the clock reads more than the tolerance below `latest` (the latest
    /// time this process has seen) or below the latest time a commit of the
    /// file saw, move every timer, claim time and expiry back by the step.
    /// Returns whether it moved them.
    pub(super) fn observe_clock(&mut self, latest: u64, now: u64) -> Result<bool> {
        let high = self.counter(CLOCK_HIGH, 0)?.max(latest);
        let step = crate::clock::step_back(high, now);
        if let Some(back) = step {
            tracing::warn!(
                back_ms = back,
                "the clock stepped back: timers and leases moved with it"
            );
            self.rebase(back)?;
            self.shift_limits(back, now)?;
            self.meta_mut()?
                .insert(CLOCK_HIGH, now)
                .ctx("write clock")?;
        }
        Ok(step.is_some())
    }

    /// At close: remember `latest`, the latest time this process saw, if
    /// the file's is older. Returns whether it wrote.
    pub(super) fn save_clock(&mut self, latest: u64) -> Result<bool> {
        if self.counter(CLOCK_HIGH, 0)? >= latest {
            return Ok(false);
        }
        self.meta_mut()?
            .insert(CLOCK_HIGH, latest)
            .ctx("write clock")?;
        Ok(true)
    }

    /// After the operations of a transaction that writes anyway: remember
    /// the latest time seen.
    pub(super) fn note_clock(&mut self, now: u64) -> Result<()> {
        if self.dirty && self.counter(CLOCK_HIGH, 0)? < now {
            self.meta_mut()?
                .insert(CLOCK_HIGH, now)
                .ctx("write clock")?;
        }
        Ok(())
    }

    fn rebase(&mut self, back: u64) -> Result<()> {
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
                self.meta_mut()?
                    .insert(key, t.saturating_sub(back))
                    .ctx("move lane clock")?;
            }
        }
        let mut delayed = Vec::new();
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            delayed.push(entry.ctx("scan delayed")?.0.value());
        }
        for (nb, id) in delayed {
            let moved = nb.saturating_sub(back);
            self.delayed_mut()?.remove((nb, id)).ctx("move delayed")?;
            self.delayed_mut()?
                .insert((moved, id), ())
                .ctx("move delayed")?;
            let mut rec = self.record(id)?;
            rec.not_before_ms = Some(moved);
            self.put_record(id, &rec)?;
        }
        let mut leases = Vec::new();
        for entry in self.pending_by_time()?.iter().ctx("scan lease index")? {
            leases.push(entry.ctx("scan lease index")?.0.value());
        }
        for (at, id) in leases {
            let moved = at.saturating_sub(back);
            self.pending_by_time_mut()?
                .remove((at, id))
                .ctx("move lease index")?;
            self.pending_by_time_mut()?
                .insert((moved, id), ())
                .ctx("move lease index")?;
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
                l.claimed_at_ms = moved;
                self.pending_mut()?
                    .insert(id, codec::encode(&l)?.as_slice())
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
        let mut outcomes = Vec::new();
        for entry in self.outcome_expiry()?.iter().ctx("scan outcome expiry")? {
            outcomes.push(entry.ctx("scan outcome expiry")?.0.value());
        }
        for (t, id) in outcomes {
            let moved = t.saturating_sub(back);
            self.outcome_expiry_mut()?
                .remove((t, id))
                .ctx("move outcome expiry")?;
            self.outcome_expiry_mut()?
                .insert((moved, id), ())
                .ctx("move outcome expiry")?;
            if let Some(mut rec) = self.outcome_record(id)? {
                rec.expires_at_ms = moved;
                self.outcomes_mut()?
                    .insert(id, codec::encode(&rec)?.as_slice())
                    .ctx("move outcome")?;
            }
        }
        Ok(())
    }

    // ---- expiry ---------------------------------------------------------

    pub(super) fn purge_expired(&mut self, now: u64) -> Result<()> {
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

    // ---- operations (SPEC section 3) -------------------------------------

    fn waiting(&self) -> Result<u64> {
        Ok(self.backlog()?.len().ctx("count backlog")?
            + self.due()?.len().ctx("count due")?
            + self.delayed()?.len().ctx("count delayed")?
            + self.held_len()?)
    }

    fn live_dedup(&self, key: &str, now: u64) -> Result<Option<u64>> {
        Ok(self
            .dedup()?
            .get(key)
            .ctx("read dedup key")?
            .map(|g| g.value())
            .filter(|(_, expires)| *expires > now)
            .map(|(id, _)| id))
    }

    pub(super) fn add(&mut self, items: &[(NewItem, Option<u64>)], now: u64) -> Result<Vec<Added>> {
        // Validate the whole batch before touching anything.
        let mut fresh = 0u64;
        let mut seen = std::collections::HashSet::new();
        for (item, _) in items {
            check_new_item(item, self.limits.max_payload_bytes)?;
            match item.dedup_key.as_deref() {
                // A key earlier in the batch is live only while its window
                // is open: never with a window of 0 (deduplication off).
                Some(k)
                    if self.live_dedup(k, now)?.is_some()
                        || (self.limits.dedup_window_ms > 0 && seen.contains(k)) => {}
                Some(k) => {
                    seen.insert(k);
                    fresh += 1;
                }
                None => fresh += 1,
            }
        }
        // An add that journals nothing (only duplicates) is never Full.
        if let Some(limit) = self.limits.max_backlog
            && fresh > 0
            && self.waiting()?.saturating_add(fresh) > limit
        {
            return Err(Error::Full { limit });
        }
        let mut out = Vec::with_capacity(items.len());
        for (item, not_before) in items {
            if let Some(k) = item.dedup_key.as_deref()
                && let Some(id) = self.live_dedup(k, now)?
            {
                out.push(Added {
                    id,
                    duplicate: true,
                });
                continue;
            }
            let id = self.bump(NEXT_ID, 1)?;
            if let Some(k) = item.dedup_key.as_deref() {
                let expires = now.saturating_add(self.limits.dedup_window_ms);
                let replaced = self
                    .dedup_mut()?
                    .insert(k, (id, expires))
                    .ctx("write dedup key")?
                    .map(|g| g.value());
                if let Some((_, old)) = replaced {
                    self.dedup_expiry_mut()?
                        .remove((old, k))
                        .ctx("purge dedup key")?;
                }
                self.dedup_expiry_mut()?
                    .insert((expires, k), ())
                    .ctx("write dedup expiry")?;
            }
            let inline = item.payload.len() <= INLINE_PAYLOAD_BYTES;
            self.put_record(
                id,
                &ItemRecord {
                    flow: item.flow.clone(),
                    enqueued_at_ms: now,
                    not_before_ms: *not_before,
                    deliveries: 0,
                    priority: item.priority,
                    cost: item.cost.max(1),
                    payload: inline.then(|| item.payload.clone()),
                },
            )?;
            if !inline {
                self.payloads_mut()?
                    .insert(id, item.payload.as_slice())
                    .ctx("write payload")?;
            }
            match not_before {
                Some(t) => {
                    self.delayed_mut()?
                        .insert((*t, id), ())
                        .ctx("write delayed")?;
                }
                None => self.enter(Lane::Backlog, id, item.priority, &item.flow, now, now)?,
            }
            out.push(Added {
                id,
                duplicate: false,
            });
        }
        Ok(out)
    }

    pub(super) fn promote_due(&mut self, now: u64) -> Result<u64> {
        let mut n = 0;
        loop {
            let Some((nb, id)) = self
                .delayed()?
                .first()
                .ctx("read delayed")?
                .map(|(k, _)| k.value())
            else {
                break;
            };
            if nb > now {
                break;
            }
            self.delayed_mut()?.remove((nb, id)).ctx("delete delayed")?;
            let rec = self.record(id)?;
            self.enter(Lane::Due, id, rec.priority, &rec.flow, nb, now)?;
            n += 1;
        }
        Ok(n)
    }

    pub(super) fn claim(
        &mut self,
        count: usize,
        from: ClaimFrom,
        now: u64,
    ) -> Result<Vec<Claimed>> {
        if count == 0 {
            return Err(Error::invalid("claim count must be at least 1"));
        }
        self.promote_due(now)?;
        let any_paused = !self.paused()?.is_empty().ctx("read paused")?;
        let limited = self.has_limits()?;
        if limited {
            self.lift_due(now)?;
        }
        let mut out = Vec::new();
        let lanes: &[Lane] = match from {
            ClaimFrom::All => &[Lane::Due, Lane::Backlog],
            ClaimFrom::DueOnly => &[Lane::Due],
        };
        for &lane in lanes {
            while out.len() < count {
                // Look before taking: an empty lane is not written to.
                let head = if lane == Lane::Due {
                    self.due()?
                } else {
                    self.backlog()?
                }
                .first()
                .ctx("read lane")?
                .map(|(k, v)| (k.value(), v.value()));
                // SPEC 3, Flow limits: merge in the heads of the limited
                // flows that may run, in rank order.
                let held = if limited {
                    self.first_head(lane)?
                } else {
                    None
                };
                let from_held = match (&head, &held) {
                    (None, None) => break,
                    (Some((ks, _)), Some((kh, _))) => kh < ks,
                    (None, Some(_)) => true,
                    (Some(_), None) => false,
                };
                if let (true, Some((key, flow))) = (from_held, held) {
                    if let Some(c) = self.claim_head(lane, &flow, key, now)? {
                        out.push(c);
                    }
                    continue;
                }
                let Some((seq, id)) = head else {
                    break;
                };
                if lane == Lane::Due {
                    self.due_mut()?
                } else {
                    self.backlog_mut()?
                }
                .remove(seq)
                .ctx("take from lane")?;
                if limited {
                    let rec = self.record(id)?;
                    // Held by its flow's limits: now in the flow's held lane.
                    if self.limit_shared(lane, id, &rec.flow, rec.cost.max(1), seq, now)?
                        == Some(true)
                    {
                        continue;
                    }
                }
                if any_paused {
                    let flow = self.record(id)?.flow;
                    if self.is_paused(&flow)? {
                        self.park_id(&flow, id)?;
                        continue;
                    }
                }
                out.push(self.hand_out(id, lane, now)?);
            }
        }
        Ok(out)
    }

    pub(super) fn ack(&mut self, r: &Receipt, result: &[u8], now: u64) -> Result<()> {
        check_size("result", result.len(), self.limits.max_payload_bytes)?;
        let lease = self.current(r)?;
        self.remove_pending(r.id, &lease, now)?;
        self.delete_item(r.id)?;
        self.finish(r.id, false, result.to_vec(), "", now)
    }

    pub(super) fn ack_batch(&mut self, receipts: &[Receipt], now: u64) -> Result<u64> {
        let mut n = 0;
        for r in receipts {
            match self.ack(r, &[], now) {
                Ok(()) => n += 1,
                Err(Error::LeaseLost { .. }) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(n)
    }

    pub(super) fn touch(&mut self, receipts: &[Receipt], now: u64) -> Result<()> {
        for r in receipts {
            self.current(r)?;
        }
        for r in receipts {
            // Read the lease again: a receipt named twice was moved already.
            let mut l = self.current(r)?;
            let old = (l.claimed_at_ms, r.id);
            self.pending_by_time_mut()?
                .remove(old)
                .ctx("move lease index")?;
            self.orphans_mut()?.remove(old).ctx("delete orphan")?;
            l.claimed_at_ms = now;
            self.pending_mut()?
                .insert(r.id, codec::encode(&l)?.as_slice())
                .ctx("write lease")?;
            self.pending_by_time_mut()?
                .insert((now, r.id), ())
                .ctx("write lease index")?;
        }
        Ok(())
    }

    pub(super) fn retry(&mut self, r: &Receipt, not_before: u64, now: u64) -> Result<RetryOutcome> {
        let lease = self.current(r)?;
        let mut rec = self.record(r.id)?;
        self.remove_pending(r.id, &lease, now)?;
        if rec.deliveries >= self.limits.max_deliveries {
            self.bury(r.id, MAX_DELIVERIES_REASON, now)?;
            return Ok(RetryOutcome::DeadLettered);
        }
        rec.not_before_ms = Some(not_before);
        self.put_record(r.id, &rec)?;
        self.delayed_mut()?
            .insert((not_before, r.id), ())
            .ctx("write delayed")?;
        Ok(RetryOutcome::Delayed)
    }

    /// SPEC 3, Finishing: release. Back to delayed (or the parked tail of
    /// a paused flow) with `deliveries - 1`.
    pub(super) fn release(&mut self, r: &Receipt, not_before: u64, now: u64) -> Result<()> {
        let lease = self.current(r)?;
        let mut rec = self.record(r.id)?;
        self.remove_pending(r.id, &lease, now)?;
        rec.deliveries = rec.deliveries.saturating_sub(1);
        let paused = self.is_paused(&rec.flow)?;
        if !paused {
            rec.not_before_ms = Some(not_before);
        }
        self.put_record(r.id, &rec)?;
        if paused {
            self.park_id(&rec.flow, r.id)
        } else {
            self.delayed_mut()?
                .insert((not_before, r.id), ())
                .ctx("write delayed")?;
            Ok(())
        }
    }

    pub(super) fn dead_letter(&mut self, r: &Receipt, reason: &str, now: u64) -> Result<()> {
        let lease = self.current(r)?;
        self.remove_pending(r.id, &lease, now)?;
        self.bury(r.id, reason, now)
    }

    pub(super) fn reclaim_stale(
        &mut self,
        min_idle_ms: u64,
        count: usize,
        now: u64,
    ) -> Result<Reclaimed> {
        if count == 0 {
            return Err(Error::invalid("reclaim count must be at least 1"));
        }
        let mut out = Vec::new();
        let mut dead_lettered = Vec::new();
        // Claims this call made are re-indexed at (now, id), possibly ahead of
        // the scan: skip them, and resume each scan after the last key seen.
        let mut handed: std::collections::HashSet<u64> = std::collections::HashSet::new();
        let mut after: Option<(u64, u64)> = None;
        let any_paused = !self.paused()?.is_empty().ctx("read paused")?;
        while out.len() < count {
            // The next stale item is the smaller of the oldest idle claim and
            // the oldest orphan of an earlier open.
            let mut by_time = None;
            let lower = match after {
                Some(k) => Bound::Excluded(k),
                None => Bound::Unbounded,
            };
            for entry in self
                .pending_by_time()?
                .range::<(u64, u64)>((lower, Bound::Unbounded))
                .ctx("scan lease index")?
            {
                let key = entry.ctx("scan lease index")?.0.value();
                if now.saturating_sub(key.0) < min_idle_ms {
                    break;
                }
                if !handed.contains(&key.1) {
                    by_time = Some(key);
                    break;
                }
            }
            let orphan = self
                .orphans()?
                .first()
                .ctx("read orphans")?
                .map(|(k, _)| k.value());
            let next = match (by_time, orphan) {
                (Some(a), Some(b)) => a.min(b),
                (Some(a), None) => a,
                (None, Some(b)) => b,
                (None, None) => break,
            };
            if Some(next) == by_time {
                after = Some(next);
            }
            let id = next.1;
            let Some(lease) = self.lease(id)? else {
                // An index entry without a lease: drop the stray entry.
                self.pending_by_time_mut()?
                    .remove(next)
                    .ctx("delete stray lease index")?;
                self.orphans_mut()?
                    .remove(next)
                    .ctx("delete stray orphan")?;
                continue;
            };
            self.remove_pending(id, &lease, now)?;
            let rec = self.record(id)?;
            if rec.deliveries >= self.limits.max_deliveries {
                self.bury(id, MAX_DELIVERIES_REASON, now)?;
                dead_lettered.push(Receipt {
                    id,
                    delivery: rec.deliveries,
                    lease: lease.lease,
                });
                continue;
            }
            // SPEC 3, Crash recovery: an item of a paused flow is parked
            // (deliveries unchanged, not counted), never handed out.
            if any_paused && self.is_paused(&rec.flow)? {
                self.park_id(&rec.flow, id)?;
                continue;
            }
            let lane = codec::lane_from_u8(lease.lane, &format!("pending[{id}]"))?;
            handed.insert(id);
            out.push(self.hand_out(id, lane, now)?);
        }
        Ok(Reclaimed {
            claimed: out,
            dead_lettered,
        })
    }

    /// At open: every pending item belongs to a process that is gone.
    pub(super) fn orphan_all_pending(&mut self) -> Result<u64> {
        let mut keys = Vec::new();
        for entry in self.pending_by_time()?.iter().ctx("scan leases")? {
            let (k, _) = entry.ctx("scan leases")?;
            keys.push(k.value());
        }
        for k in &keys {
            self.orphans_mut()?.insert(*k, ()).ctx("write orphan")?;
        }
        Ok(keys.len() as u64)
    }

    pub(super) fn pause(&mut self, flow: &str) -> Result<()> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            return Ok(());
        }
        self.paused_mut()?.insert(flow, ()).ctx("write paused")?;
        Ok(())
    }

    fn parked_ids(&self, flow: &str) -> Result<Vec<(u64, u64)>> {
        let mut out = Vec::new();
        for entry in self
            .parked()?
            .range((flow, 0u64)..=(flow, u64::MAX))
            .ctx("scan parked")?
        {
            let (k, v) = entry.ctx("scan parked")?;
            out.push((k.value().1, v.value()));
        }
        Ok(out)
    }

    pub(super) fn resume(&mut self, flow: &str, now: u64) -> Result<u64> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            self.paused_mut()?.remove(flow).ctx("delete paused")?;
        }
        let ids = self.parked_ids(flow)?;
        for (seq, id) in &ids {
            self.parked_mut()?
                .remove((flow, *seq))
                .ctx("delete parked")?;
            let tier = self.record(*id)?.priority;
            self.enter(Lane::Backlog, *id, tier, flow, now, now)?;
        }
        Ok(ids.len() as u64)
    }

    pub(super) fn park(&mut self, r: &Receipt, now: u64) -> Result<()> {
        let lease = self.current(r)?;
        let flow = self.record(r.id)?.flow;
        require_flow(&flow)?;
        self.remove_pending(r.id, &lease, now)?;
        self.park_id(&flow, r.id)
    }

    pub(super) fn step(&mut self, flow: &str, now: u64) -> Result<Option<Claimed>> {
        require_flow(flow)?;
        let first = self
            .parked()?
            .range((flow, 0u64)..=(flow, u64::MAX))
            .ctx("scan parked")?
            .next()
            .transpose()
            .ctx("scan parked")?
            .map(|(k, v)| (k.value().1, v.value()));
        let Some((seq, id)) = first else {
            return Ok(None);
        };
        self.parked_mut()?
            .remove((flow, seq))
            .ctx("delete parked")?;
        Ok(Some(self.hand_out(id, Lane::Parked, now)?))
    }

    pub(super) fn clear_flow(&mut self, flow: &str) -> Result<u64> {
        require_flow(flow)?;
        if self.is_paused(flow)? {
            self.paused_mut()?.remove(flow).ctx("delete paused")?;
        }
        let ids = self.parked_ids(flow)?;
        for (seq, id) in &ids {
            self.parked_mut()?
                .remove((flow, *seq))
                .ctx("delete parked")?;
            self.delete_item(*id)?;
            self.forget_progress(*id)?;
        }
        Ok(ids.len() as u64)
    }

    pub(super) fn mark_done(&mut self, id: u64, step: &str, now: u64) -> Result<()> {
        let expires = now.saturating_add(self.limits.done_ttl_ms);
        let replaced = self
            .done_mut()?
            .insert((id, step), expires)
            .ctx("write done marker")?
            .map(|g| g.value());
        if let Some(old) = replaced {
            self.done_expiry_mut()?
                .remove((old, id, step))
                .ctx("move done expiry")?;
        }
        self.done_expiry_mut()?
            .insert((expires, id, step), ())
            .ctx("write done expiry")?;
        Ok(())
    }

    pub(super) fn redrive(&mut self, id: u64, now: u64) -> Result<bool> {
        let Some(seq) = self
            .dead_by_id()?
            .get(id)
            .ctx("read dead letter index")?
            .map(|g| g.value())
        else {
            return Ok(false);
        };
        self.dead_by_id_mut()?
            .remove(id)
            .ctx("delete dead letter index")?;
        self.dead_mut()?.remove(seq).ctx("delete dead letter")?;
        self.forget_outcome(id)?;
        let mut rec = self.record(id)?;
        rec.deliveries = 0;
        rec.not_before_ms = None;
        self.put_record(id, &rec)?;
        self.enter(Lane::Backlog, id, rec.priority, &rec.flow, now, now)?;
        Ok(true)
    }

    pub(super) fn purge_dead_letters(&mut self) -> Result<u64> {
        let mut ids = Vec::new();
        for entry in self.dead_by_id()?.iter().ctx("scan dead letters")? {
            let (k, _) = entry.ctx("scan dead letters")?;
            ids.push(k.value());
        }
        if ids.is_empty() && self.dead()?.is_empty().ctx("count dead letters")? {
            return Ok(0);
        }
        for id in &ids {
            self.delete_item(*id)?;
        }
        self.dead_mut()?
            .retain(|_, _| false)
            .ctx("purge dead letters")?;
        self.dead_by_id_mut()?
            .retain(|_, _| false)
            .ctx("purge dead letters")?;
        Ok(ids.len() as u64)
    }

    // ---- reads -----------------------------------------------------------

    pub(super) fn next_due(&self) -> Result<Option<u64>> {
        Ok(self
            .delayed()?
            .first()
            .ctx("read delayed")?
            .map(|(k, _)| k.value().0))
    }

    pub(super) fn parked_count(&self, flow: &str) -> Result<u64> {
        Ok(self.parked_ids(flow)?.len() as u64)
    }

    pub(super) fn paused_flows(&self) -> Result<Vec<String>> {
        let mut out = Vec::new();
        for entry in self.paused()?.iter().ctx("scan paused")? {
            let (k, _) = entry.ctx("scan paused")?;
            out.push(k.value().to_string());
        }
        Ok(out)
    }

    pub(super) fn was_done(&self, id: u64, step: &str, now: u64) -> Result<bool> {
        Ok(self
            .done()?
            .get((id, step))
            .ctx("read done marker")?
            .is_some_and(|g| g.value() > now))
    }

    pub(super) fn dead_letters(&self, count: usize) -> Result<Vec<DeadLetter>> {
        let mut recs = Vec::new();
        for entry in self
            .dead()?
            .iter()
            .ctx("scan dead letters")?
            .rev()
            .take(count)
        {
            let (k, v) = entry.ctx("scan dead letters")?;
            recs.push(codec::decode::<DeadRecord>(
                &format!("dead[{}]", k.value()),
                v.value(),
            )?);
        }
        let mut out = Vec::with_capacity(recs.len());
        for r in recs {
            out.push(DeadLetter {
                item: self.item(r.id)?,
                reason: r.reason,
                failed_at_ms: r.failed_at_ms,
            });
        }
        Ok(out)
    }

    /// Test support: where every item is, by a scan of every index table,
    /// checking on the way that no id is in two states and that the indexes
    /// agree with each other and with the item records.
    #[cfg(feature = "testing")]
    pub(super) fn audit(&self) -> Result<BTreeMap<u64, crate::backend::memory::Location>> {
        use crate::backend::memory::Location;
        let mut out: BTreeMap<u64, Location> = BTreeMap::new();
        let mut place = |id: u64, at: Location| -> Result<()> {
            match out.insert(id, at) {
                Some(before) => Err(Error::corrupt(format!(
                    "item {id} is in two states: {before:?} and {at:?}"
                ))),
                None => Ok(()),
            }
        };
        for entry in self.backlog()?.iter().ctx("scan backlog")? {
            place(entry.ctx("scan backlog")?.1.value(), Location::Backlog)?;
        }
        for entry in self.due()?.iter().ctx("scan due")? {
            place(entry.ctx("scan due")?.1.value(), Location::Due)?;
        }
        for (id, lane) in self.held_items()? {
            let at = if lane == Lane::Due {
                Location::Due
            } else {
                Location::Backlog
            };
            place(id, at)?;
        }
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            place(entry.ctx("scan delayed")?.0.value().1, Location::Delayed)?;
        }
        let mut by_time = std::collections::BTreeSet::new();
        for entry in self.pending()?.iter().ctx("scan leases")? {
            let (k, v) = entry.ctx("scan leases")?;
            let id = k.value();
            let lease: LeaseRecord = codec::decode(&format!("pending[{id}]"), v.value())?;
            by_time.insert((lease.claimed_at_ms, id));
            place(id, Location::Pending)?;
        }
        let mut indexed = std::collections::BTreeSet::new();
        for entry in self.pending_by_time()?.iter().ctx("scan lease index")? {
            indexed.insert(entry.ctx("scan lease index")?.0.value());
        }
        if indexed != by_time {
            return Err(Error::corrupt(format!(
                "lease index {indexed:?} disagrees with the leases {by_time:?}"
            )));
        }
        for entry in self.orphans()?.iter().ctx("scan orphans")? {
            let k = entry.ctx("scan orphans")?.0.value();
            if !by_time.contains(&k) {
                return Err(Error::corrupt(format!("orphan {k:?} has no lease")));
            }
        }
        for entry in self.parked()?.iter().ctx("scan parked")? {
            place(entry.ctx("scan parked")?.1.value(), Location::Parked)?;
        }
        let mut dead_seqs = BTreeMap::new();
        for entry in self.dead()?.iter().ctx("scan dead letters")? {
            let (k, v) = entry.ctx("scan dead letters")?;
            let rec: DeadRecord = codec::decode(&format!("dead[{}]", k.value()), v.value())?;
            dead_seqs.insert(rec.id, k.value());
        }
        for entry in self.dead_by_id()?.iter().ctx("scan dead letter index")? {
            let (k, v) = entry.ctx("scan dead letter index")?;
            if dead_seqs.get(&k.value()) != Some(&v.value()) {
                return Err(Error::corrupt(format!(
                    "dead letter index names item {} at {}, the dead letters disagree",
                    k.value(),
                    v.value()
                )));
            }
            place(k.value(), Location::DeadLetter)?;
        }
        if dead_seqs.len() as u64 != self.dead()?.len().ctx("count dead letters")? {
            return Err(Error::corrupt("two dead letters name one item"));
        }
        let mut records = std::collections::BTreeSet::new();
        for entry in self.items()?.iter().ctx("scan items")? {
            records.insert(entry.ctx("scan items")?.0.value());
        }
        let located: std::collections::BTreeSet<u64> = out.keys().copied().collect();
        if records != located {
            return Err(Error::corrupt(format!(
                "item records {records:?} and located items {located:?} differ"
            )));
        }
        for entry in self.payloads()?.iter().ctx("scan payloads")? {
            let id = entry.ctx("scan payloads")?.0.value();
            if !records.contains(&id) {
                return Err(Error::corrupt(format!("payload {id} has no item record")));
            }
        }
        Ok(out)
    }

    pub(super) fn stats(&self, now: u64) -> Result<Stats> {
        let due = self.due()?.len().ctx("count due")?;
        let oldest = self
            .pending_by_time()?
            .first()
            .ctx("read lease index")?
            .map(|(k, _)| now.saturating_sub(k.value().0));
        let (held, held_due, limited) = self.held_counts(now)?;
        let due = due + held_due;
        Ok(Stats {
            backlog: self.backlog()?.len().ctx("count backlog")? + due + (held - held_due),
            due,
            pending: self.pending()?.len().ctx("count pending")?,
            delayed: self.delayed()?.len().ctx("count delayed")?,
            parked: self.parked()?.len().ctx("count parked")?,
            dead_letters: self.dead()?.len().ctx("count dead letters")?,
            dead_letters_dropped: self.counter(DEAD_DROPPED, 0)?,
            oldest_pending_age_ms: oldest,
            durable: true,
            limited,
        })
    }

    /// Where every id is, by a full scan of the state indexes (test support).
    /// An id listed twice is in two states; an item record that no index
    /// names is listed with no location; an index entry naming an id
    /// without an item record is `Corrupt`.
    #[cfg(feature = "testing")]
    pub(super) fn locations(&self) -> Result<BTreeMap<u64, Vec<crate::testing::Location>>> {
        use crate::testing::Location;
        let mut out: BTreeMap<u64, Vec<Location>> = BTreeMap::new();
        for entry in self.backlog()?.iter().ctx("scan backlog")? {
            let id = entry.ctx("scan backlog")?.1.value();
            out.entry(id).or_default().push(Location::Backlog);
        }
        for entry in self.due()?.iter().ctx("scan due")? {
            let id = entry.ctx("scan due")?.1.value();
            out.entry(id).or_default().push(Location::Due);
        }
        for (id, lane) in self.held_items()? {
            let at = if lane == Lane::Due {
                Location::Due
            } else {
                Location::Backlog
            };
            out.entry(id).or_default().push(at);
        }
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            let (_, id) = entry.ctx("scan delayed")?.0.value();
            out.entry(id).or_default().push(Location::Delayed);
        }
        for entry in self.pending()?.iter().ctx("scan leases")? {
            let id = entry.ctx("scan leases")?.0.value();
            out.entry(id).or_default().push(Location::Pending);
        }
        for entry in self.parked()?.iter().ctx("scan parked")? {
            let id = entry.ctx("scan parked")?.1.value();
            out.entry(id).or_default().push(Location::Parked);
        }
        for entry in self.dead()?.iter().ctx("scan dead letters")? {
            let (k, v) = entry.ctx("scan dead letters")?;
            let rec: DeadRecord = codec::decode(&format!("dead[{}]", k.value()), v.value())?;
            out.entry(rec.id).or_default().push(Location::DeadLetter);
        }
        for id in out.keys() {
            if self.items()?.get(*id).ctx("read item")?.is_none() {
                return Err(Error::corrupt(format!(
                    "an index names item {id}, which has no record"
                )));
            }
        }
        for entry in self.items()?.iter().ctx("scan items")? {
            let id = entry.ctx("scan items")?.0.value();
            out.entry(id).or_default();
        }
        Ok(out)
    }

    /// Every table's entries as text, table by table (test support):
    /// two files hold the same queue state exactly when their dumps are
    /// equal. `orphans` is left out: each open rewrites it from `pending`.
    #[cfg(feature = "testing")]
    pub(super) fn dump(&self) -> Result<BTreeMap<String, Vec<String>>> {
        fn rows<K, V>(t: &Table<'_, K, V>) -> Result<Vec<String>>
        where
            K: redb::Key + 'static,
            V: redb::Value + 'static,
            for<'a> K::SelfType<'a>: std::fmt::Debug,
            for<'a> V::SelfType<'a>: std::fmt::Debug,
        {
            let mut out = Vec::new();
            for entry in t.iter().ctx("dump table")? {
                let (k, v) = entry.ctx("dump table")?;
                out.push(format!("{:?} = {:?}", k.value(), v.value()));
            }
            Ok(out)
        }
        let mut out = BTreeMap::new();
        // The redo log's tag and offset differ between two files of one
        // state (they depend on when each checkpointed): left out.
        let meta = rows(self.meta()?)?
            .into_iter()
            .filter(|r| {
                !r.starts_with(&format!("{REDO_LOG_KEY:?} ="))
                    && !r.starts_with(&format!("{REDO_AT_KEY:?} ="))
            })
            .collect();
        out.insert(META.name().to_string(), meta);
        out.insert(ITEMS.name().to_string(), rows(self.items()?)?);
        out.insert(PAYLOADS.name().to_string(), rows(self.payloads()?)?);
        out.insert(BACKLOG.name().to_string(), rows(self.backlog()?)?);
        out.insert(DUE.name().to_string(), rows(self.due()?)?);
        out.insert(DELAYED.name().to_string(), rows(self.delayed()?)?);
        out.insert(PENDING.name().to_string(), rows(self.pending()?)?);
        out.insert(
            PENDING_BY_TIME.name().to_string(),
            rows(self.pending_by_time()?)?,
        );
        out.insert(PARKED.name().to_string(), rows(self.parked()?)?);
        out.insert(PAUSED.name().to_string(), rows(self.paused()?)?);
        out.insert(DONE.name().to_string(), rows(self.done()?)?);
        out.insert(DONE_EXPIRY.name().to_string(), rows(self.done_expiry()?)?);
        out.insert(DEDUP.name().to_string(), rows(self.dedup()?)?);
        out.insert(DEDUP_EXPIRY.name().to_string(), rows(self.dedup_expiry()?)?);
        out.insert(DEAD.name().to_string(), rows(self.dead()?)?);
        out.insert(DEAD_BY_ID.name().to_string(), rows(self.dead_by_id()?)?);
        out.insert(OUTCOMES.name().to_string(), rows(self.outcomes()?)?);
        out.insert(
            OUTCOME_EXPIRY.name().to_string(),
            rows(self.outcome_expiry()?)?,
        );
        out.insert(PROGRESS.name().to_string(), rows(self.progress_table()?)?);
        out.insert(CHUNKS.name().to_string(), rows(self.chunks()?)?);
        Ok(out)
    }

    /// Items in claim order: the due lane with the delayed items already
    /// due ranked into it as a promotion now would (SPEC 3, Priority), then
    /// the backlog; at most `limit`, skipping paused flows when
    /// `skip_paused`. Reads every delayed item already due (a claim or the
    /// worker's timer promotes them, so there are few).
    fn claim_order(&self, limit: usize, now: u64, skip_paused: bool) -> Result<Vec<Item>> {
        let mut out = Vec::new();
        if limit == 0 {
            return Ok(out);
        }
        let paused = self.paused_flows()?;
        let mut push = |item: Item| -> bool {
            if !(skip_paused && paused.contains(&item.flow)) {
                out.push(item);
            }
            out.len() >= limit
        };
        // The delayed items a promotion now would move, ranked as it would.
        let mut ready: Vec<((i64, u64), Item)> = Vec::new();
        let mut clock = self.counter(DUE_CLOCK, 0)?;
        let mut seq = self.counter(NEXT_SEQ, 1)?;
        for entry in self.delayed()?.iter().ctx("scan delayed")? {
            let (nb, id) = entry.ctx("scan delayed")?.0.value();
            if nb > now {
                break;
            }
            clock = clock.max(nb);
            let item = self.item(id)?;
            ready.push((
                (rank(clock, item.priority, self.limits.aging_step), seq),
                item,
            ));
            seq = seq.saturating_add(1);
        }
        ready.sort_unstable_by_key(|(k, _)| *k);
        if self.has_limits()? {
            return self.claim_order_limited(limit, now, skip_paused, ready);
        }
        let mut ready = ready.into_iter().peekable();
        for entry in self.due()?.iter().ctx("scan due")? {
            let (k, v) = entry.ctx("scan due")?;
            let key = k.value();
            while let Some((_, item)) = ready.next_if(|(r, _)| *r < key) {
                if push(item) {
                    return Ok(out);
                }
            }
            if push(self.item(v.value())?) {
                return Ok(out);
            }
        }
        for (_, item) in ready {
            if push(item) {
                return Ok(out);
            }
        }
        for entry in self.backlog()?.iter().ctx("scan backlog")? {
            if push(self.item(entry.ctx("scan backlog")?.1.value())?) {
                return Ok(out);
            }
        }
        Ok(out)
    }

    pub(super) fn peek(&self, count: usize, now: u64) -> Result<Vec<Item>> {
        self.claim_order(count, now, true)
    }

    pub(super) fn backlog_by_flow(&self, sample: usize, now: u64) -> Result<BTreeMap<String, u64>> {
        let mut out = BTreeMap::new();
        for item in self.claim_order(sample, now, false)? {
            *out.entry(item.flow).or_insert(0) += 1;
        }
        Ok(out)
    }
}
