//! The file's tables, listed once, and its meta keys and counters.
//!
//! [`tables!`] turns the list into the table definitions, the fields of
//! [`Tables`] (each table opened on first use), the read and write accessor
//! of each table, and the table dump of the test support, so that a table
//! added here is opened, written and dumped everywhere.

use std::cell::OnceCell;
#[cfg(feature = "testing")]
use std::collections::BTreeMap;

use redb::{Key, ReadableTable, Table, TableDefinition, Value, WriteTransaction};

use super::{Ctx, ExpiryFloors, Limits};
use crate::error::{Error, Result};

/// The table list: for each table its definition's name, its name in the
/// file, its key and value types, its field in [`Tables`] (also its name in
/// errors) and its read and write accessors.
macro_rules! tables {
    ($(
        $(#[$doc:meta])*
        $konst:ident = $name:literal: $k:ty => $v:ty, $field:ident, $read:ident, $write:ident;
    )*) => {
        $(
            $(#[$doc])*
            pub(in crate::backend::embedded) const $konst: TableDefinition<'static, $k, $v> =
                TableDefinition::new($name);
        )*

        /// Every table of the file, each opened on first use in the
        /// transaction.
        ///
        /// Opening a redb table and closing it again at commit costs two
        /// lookups in the table tree; an operation touches a few of the
        /// tables, so opening them all per transaction was a third of the
        /// instructions of a single add.
        pub(in crate::backend::embedded) struct Tables<'t> {
            pub(super) txn: &'t WriteTransaction,
            $(pub(super) $field: Lazy<'t, $k, $v>,)*
            pub(super) limits: Limits,
            /// Whether anything asked for a table to write in. An operation
            /// asks only once it knows it will change something, so a
            /// transaction that stays clean changed nothing and is not
            /// committed (SPEC 6, Idle).
            pub(super) dirty: bool,
            /// Meta counters written in this batch and not yet put into
            /// the `meta` table (see [`Tables::set_counter`]).
            pub(super) counters: Vec<(&'static str, u64)>,
            /// Lower bounds of the expiry indexes' earliest times, so that
            /// the purge opens no index that cannot hold an expired entry
            /// (module `clock`).
            pub(super) floors: ExpiryFloors,
        }

        impl<'t> Tables<'t> {
            /// The tables of `txn`, none opened yet (each opens on first
            /// use, and an error opening it comes from that use).
            pub(in crate::backend::embedded) fn open(
                txn: &'t WriteTransaction,
                limits: Limits,
            ) -> Self {
                Tables {
                    txn,
                    $($field: Lazy::new($konst, concat!("open table ", stringify!($field))),)*
                    limits,
                    dirty: false,
                    counters: Vec::new(),
                    floors: ExpiryFloors::default(),
                }
            }

            $(
                pub(super) fn $read(&self) -> Result<&Table<'t, $k, $v>> {
                    self.$field.get(self.txn)
                }

                pub(super) fn $write(&mut self) -> Result<&mut Table<'t, $k, $v>> {
                    self.dirty = true;
                    self.$field.get_mut(self.txn)
                }
            )*

            /// Every table's entries as text, by table name (test support).
            #[cfg(feature = "testing")]
            pub(super) fn dump_all(&self) -> Result<BTreeMap<String, Vec<String>>> {
                let mut out = BTreeMap::new();
                $(out.insert($name.to_string(), dump_rows(self.$read()?)?);)*
                Ok(out)
            }
        }
    };
}

tables! {
    /// Counters and the schema version.
    META = "meta": &'static str => u64, meta, meta, meta_mut;
    /// id -> versioned [`ItemRecord`](crate::backend::embedded::codec::ItemRecord).
    ITEMS = "items": u64 => &'static [u8], items, items, items_mut;
    /// id -> raw payload bytes, for payloads over
    /// [`INLINE_PAYLOAD_BYTES`](crate::backend::embedded::codec::INLINE_PAYLOAD_BYTES).
    PAYLOADS = "payloads": u64 => &'static [u8], payloads, payloads, payloads_mut;
    /// (rank, seq) -> id: claim order (SPEC 3, Priority). Schema 1 had
    /// `backlog` (seq -> id).
    BACKLOG = "backlog_ranked": (i64, u64) => u64, backlog, backlog, backlog_mut;
    /// (rank, seq) -> id, ranked by the arrival in the lane. Schema 1 had
    /// `due` (seq -> id).
    DUE = "due_ranked": (i64, u64) => u64, due, due, due_mut;
    /// (not_before_ms, id) -> ().
    DELAYED = "delayed": (u64, u64) => (), delayed, delayed, delayed_mut;
    /// id -> versioned [`LeaseRecord`](crate::backend::embedded::codec::LeaseRecord).
    PENDING = "pending": u64 => &'static [u8], pending, pending, pending_mut;
    /// (last touch ms, id) -> (): pending items stalest first (the lease's
    /// `touched_at_ms`; schema 6 keeps the claim time in the lease).
    PENDING_BY_TIME = "pending_by_time": (u64, u64) => (),
        pending_by_time, pending_by_time, pending_by_time_mut;
    /// (last touch ms, id) -> (): pending items claimed before the current
    /// open.
    ORPHANS = "orphans": (u64, u64) => (), orphans, orphans, orphans_mut;
    /// (flow, seq) -> id.
    PARKED = "parked": (&'static str, u64) => u64, parked, parked, parked_mut;
    /// flow -> ().
    PAUSED = "paused": &'static str => (), paused, paused, paused_mut;
    /// (id, step) -> expires_at_ms.
    DONE = "done": (u64, &'static str) => u64, done, done, done_mut;
    /// (expires_at_ms, id, step) -> ().
    DONE_EXPIRY = "done_expiry": (u64, u64, &'static str) => (),
        done_expiry, done_expiry, done_expiry_mut;
    /// dedup key -> (id, expires_at_ms).
    DEDUP = "dedup": &'static str => (u64, u64), dedup, dedup, dedup_mut;
    /// (expires_at_ms, key) -> ().
    DEDUP_EXPIRY = "dedup_expiry": (u64, &'static str) => (),
        dedup_expiry, dedup_expiry, dedup_expiry_mut;
    /// seq -> versioned [`DeadRecord`](crate::backend::embedded::codec::DeadRecord),
    /// oldest first.
    DEAD = "dead": u64 => &'static [u8], dead, dead, dead_mut;
    /// id -> seq in `DEAD`.
    DEAD_BY_ID = "dead_by_id": u64 => u64, dead_by_id, dead_by_id, dead_by_id_mut;
    /// id -> versioned [`OutcomeRecord`](crate::backend::embedded::codec::OutcomeRecord)
    /// (SPEC 3, Outcomes and progress).
    OUTCOMES = "outcomes": u64 => &'static [u8], outcomes, outcomes, outcomes_mut;
    /// (expires_at_ms, id) -> (): outcomes by expiry.
    OUTCOME_EXPIRY = "outcome_expiry": (u64, u64) => (),
        outcome_expiry, outcome_expiry, outcome_expiry_mut;
    /// first id -> (bits, at_ms, expires_at_ms): the outcomes of plain acks
    /// (an empty result) of one commit, up to 64 ids from the first: bit
    /// `i` stands for id `first + i` (SPEC 6, schema 3).
    ACK_RUNS = "ack_runs": u64 => (u64, u64, u64), ack_runs, ack_runs, ack_runs_mut;
    /// (expires_at_ms, first id) -> (): ack runs by expiry.
    ACK_RUN_EXPIRY = "ack_run_expiry": (u64, u64) => (),
        ack_run_expiry, ack_run_expiry, ack_run_expiry_mut;
    /// id -> the last progress bytes.
    PROGRESS = "progress": u64 => &'static [u8], progress, progress_table, progress_mut;
    /// (id, seq) -> chunk bytes.
    CHUNKS = "chunks": (u64, u64) => &'static [u8], chunks, chunks, chunks_mut;
    /// SPEC 3, Flow limits: each limited flow's record
    /// ([`LimitRecord`](crate::backend::embedded::codec::LimitRecord)).
    FLOW_LIMITS = "flow_limits": &'static str => &'static [u8],
        flow_limits, flow_limits_t, flow_limits_mut;
    /// Items set aside for their flow's limits, in their places: (flow,
    /// lane 0 due or 1 backlog, rank, position) -> id.
    HELD = "held": (&'static str, u8, i64, u64) => u64, held, held_t, held_mut;
    /// The first held item of each lane of every limited flow that may run
    /// now: (lane, rank, position) -> flow.
    HEADS = "heads": (u8, i64, u64) => &'static str, heads, heads_t, heads_mut;
    /// When a held flow's back-off or rate window ends: (ms, flow).
    LIMIT_TIMERS = "limit_timers": (u64, &'static str) => (),
        limit_timers, timers_t, timers_mut;
    /// Deferred deletes (SPEC 6, schema 4): bucket (id / 64) -> bits; bit
    /// `i` names id `bucket * 64 + i`, a finished item whose record (and
    /// payload row) is still in `items` until a sweep (module `deferred`).
    DEFERRED = "deferred": u64 => u64, deferred, deferred, deferred_mut;
    /// SPEC 13, Schedules (schema 6): name -> generation u64, due-index
    /// time u64 (`u64::MAX`: paused or ended), last item id u64 (0: none),
    /// all little endian, then the schedule's record.
    SCHEDULES = "schedules": &'static str => &'static [u8],
        schedules, schedules_t, schedules_mut;
    /// (next fire ms, name) -> (): the schedules that may fire, soonest
    /// first.
    SCHEDULE_DUE = "schedule_due": (u64, &'static str) => (),
        schedule_due, schedule_due_t, schedule_due_mut;
    /// SPEC 3, History (schema 8): the completed items kept by their
    /// retention, in runs: (finished_at_ms, first id) -> the run's header
    /// and records ([`encode_history_run`](crate::backend::embedded::codec::encode_history_run)):
    /// one row per commit that finishes items, not one per item.
    COMPLETED = "completed": (u64, u64) => &'static [u8], completed, completed, completed_mut;
    /// The cancelled items kept, as `completed` keeps the completed ones.
    CANCELLED = "cancelled": (u64, u64) => &'static [u8], cancelled, cancelled, cancelled_mut;
}

pub(in crate::backend::embedded) const SCHEMA_VERSION_KEY: &str = "schema_version";
/// The schema this build writes (SPEC section 6).
pub(in crate::backend::embedded) const SCHEMA_VERSION: u64 = 8;
/// The tag of the redo log generation the file's records go under: random,
/// new at every checkpoint (module `redo`, SPEC section 6).
pub(in crate::backend::embedded) const REDO_LOG_KEY: &str = "redo_log";
/// The offset in the redo log of the first record this file does not hold.
pub(in crate::backend::embedded) const REDO_AT_KEY: &str = "redo_at";
/// When the whole file was last verified (ms since the Unix epoch, system
/// clock; SPEC 6, Verification).
pub(in crate::backend::embedded) const VERIFIED_AT_KEY: &str = "verified_at_ms";
pub(in crate::backend::embedded) const NEXT_ID: &str = "next_id";
pub(in crate::backend::embedded) const NEXT_SEQ: &str = "next_seq";
pub(super) const NEXT_LEASE: &str = "next_lease";
/// The latest arrival time given in the backlog and in the due lane
/// (SPEC 3, Priority: arrivals never go back, so FIFO survives a clock
/// that steps back).
pub(in crate::backend::embedded) const BACKLOG_CLOCK: &str = "backlog_clock";
pub(in crate::backend::embedded) const DUE_CLOCK: &str = "due_clock";
/// Dead letters dropped past `dead_letter_cap`, ever (`Stats::dead_letters_dropped`).
pub(super) const DEAD_DROPPED: &str = "dead_dropped";
/// The latest time (ms, queue clock) a committed transaction saw: how a
/// clock step back during a restart is noticed (SPEC 3, Clock steps).
pub(super) const CLOCK_HIGH: &str = "clock_high";
/// How many finished items the `completed` and the `cancelled` runs hold
/// (SPEC 3, History).
pub(super) const COMPLETED_KEPT: &str = "completed_kept";
pub(super) const CANCELLED_KEPT: &str = "cancelled_kept";
/// How many ids the `deferred` table names (module `deferred`).
pub(super) const DEFERRED_RECORDS: &str = "deferred_records";

/// One table of a write transaction, opened when first asked for.
pub(super) struct Lazy<'t, K: Key + 'static, V: Value + 'static> {
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

/// One table's entries as text, in key order (test support).
#[cfg(feature = "testing")]
fn dump_rows<K, V>(t: &Table<'_, K, V>) -> Result<Vec<String>>
where
    K: Key + 'static,
    V: Value + 'static,
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

impl Tables<'_> {
    /// Whether this transaction has written anything (see `dirty`).
    pub(in crate::backend::embedded) fn is_dirty(&self) -> bool {
        self.dirty
    }

    /// The meta counter `key` (`start` if it was never written), as this
    /// batch last set it.
    pub(super) fn counter(&self, key: &str, start: u64) -> Result<u64> {
        if let Some(&(_, v)) = self.counters.iter().find(|(k, _)| *k == key) {
            return Ok(v);
        }
        Ok(self
            .meta()?
            .get(key)
            .ctx("read counter")?
            .map_or(start, |v| v.value()))
    }

    /// Set the meta counter `key` to `v`. The value is kept in memory and
    /// put into the `meta` table once per batch ([`Tables::write_counters`]):
    /// an add moves three counters (id, position, lane clock), and a
    /// B-tree insert per move and item was a fifth of an add's
    /// instructions. Every write of these keys goes through here, so a
    /// read ([`Tables::counter`]) never sees an older value.
    pub(super) fn set_counter(&mut self, key: &'static str, v: u64) {
        self.dirty = true;
        match self.counters.iter_mut().find(|(k, _)| *k == key) {
            Some(slot) => slot.1 = v,
            None => self.counters.push((key, v)),
        }
    }

    /// Put the counters set in this batch into the `meta` table. Called at
    /// the end of every transaction body that may have set one (and, as a
    /// fallback, when the tables are dropped).
    pub(in crate::backend::embedded) fn write_counters(&mut self) -> Result<()> {
        if self.counters.is_empty() {
            return Ok(());
        }
        let counters = std::mem::take(&mut self.counters);
        let meta = self.meta_mut()?;
        for (key, v) in counters {
            meta.insert(key, v).ctx("write counter")?;
        }
        Ok(())
    }

    pub(super) fn bump(&mut self, key: &'static str, start: u64) -> Result<u64> {
        let v = self.counter(key, start)?;
        let next = v
            .checked_add(1)
            .ok_or_else(|| Error::corrupt(format!("counter {key} overflowed")))?;
        self.set_counter(key, next);
        Ok(v)
    }

    pub(super) fn next_seq(&mut self) -> Result<u64> {
        self.bump(NEXT_SEQ, 1)
    }

    pub(in crate::backend::embedded) fn schema_version(&self) -> Result<Option<u64>> {
        Ok(self
            .meta()?
            .get(SCHEMA_VERSION_KEY)
            .ctx("read schema version")?
            .map(|v| v.value()))
    }

    pub(in crate::backend::embedded) fn set_schema_version(&mut self, v: u64) -> Result<()> {
        self.meta_mut()?
            .insert(SCHEMA_VERSION_KEY, v)
            .ctx("write schema version")?;
        Ok(())
    }

    /// The redo log's tag and the offset of the first record this file
    /// does not hold; `None` for a file never written through the log.
    pub(in crate::backend::embedded) fn redo_state(&self) -> Result<Option<(u64, u64)>> {
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
    pub(in crate::backend::embedded) fn set_redo(&mut self, tag: u64, at: u64) -> Result<()> {
        let meta = self.meta_mut()?;
        meta.insert(REDO_LOG_KEY, tag).ctx("write redo log tag")?;
        meta.insert(REDO_AT_KEY, at).ctx("write redo log offset")?;
        Ok(())
    }

    /// The whole file was verified at `at` (ms since the epoch).
    pub(in crate::backend::embedded) fn set_verified_at(&mut self, at: u64) -> Result<()> {
        self.meta_mut()?
            .insert(VERIFIED_AT_KEY, at)
            .ctx("write verification time")?;
        Ok(())
    }

    /// This transaction holds the log up to `at` (its own record's end).
    pub(in crate::backend::embedded) fn set_redo_at(&mut self, at: u64) -> Result<()> {
        self.meta_mut()?
            .insert(REDO_AT_KEY, at)
            .ctx("write redo log offset")?;
        Ok(())
    }
}

impl Drop for Tables<'_> {
    /// A transaction body that forgot [`Tables::write_counters`] must not
    /// lose a counter (a reused id would be a lost item): write them here.
    /// An error here comes with a poisoned transaction, which is aborted.
    fn drop(&mut self) {
        if let Err(e) = self.write_counters() {
            tracing::warn!(error = %crate::error::one_line(&e), "writing the queue's counters failed");
        }
    }
}
