//! Schema migrations of the embedded file (SPEC section 6), run at open in
//! the open's own write transaction, so a migration is one durable
//! transaction: a crash during it leaves the file at the old schema.
//!
//! Schema 1 to 2:
//! - item records gain the priority tier (0 for every migrated item) and,
//!   for payloads of at most [`INLINE_PAYLOAD_BYTES`], the payload itself,
//!   whose row in `payloads` is deleted;
//! - `backlog` and `due` (position -> id) become `backlog_ranked` and
//!   `due_ranked` ((rank, position) -> id). A migrated item keeps its
//!   position; its arrival is its `enqueued_at_ms` (backlog) or its
//!   `not_before_ms` (due lane), raised to the arrival before it so that
//!   the lane stays in its old order, and its rank is that arrival (tier
//!   0). The lane clocks are set to the last arrival.
//!
//! Schema 2 to 3: the version only (the ack runs of schema 3 start
//! empty; older outcomes stay where they are and are still read).
//!
//! Schema 3 to 4: the version only (the deferred deletes of schema 4
//! start empty: a schema-3 file has none). The version moves so that an
//! older build, which would take a deferred delete's record for an item
//! in the backlog, refuses the file.
//!
//! Schema 4 to 5: the version only (no table or record changes). Schema 5
//! adds three redo log operations (`promote`, `remove`, `back_off`: SPEC
//! 3), which a schema-4 build would refuse in the middle of a replay; the
//! version moves so that such a build refuses the file at open instead,
//! by its version, before it reads the log.
//!
//! Schema 5 to 6: the version only. Schema 6 adds the schedules (SPEC
//! 13: tables `schedules` and `schedule_due`, which start empty, and redo
//! log operation 27) and writes lease records of version 3, which keep
//! the claim time apart from the last touch (SPEC 3, Looking:
//! `oldest_pending_age_ms` is measured from the claim); a lease of
//! version 2 is still read, its one time (the last touch) standing for
//! both until the item leaves pending. A schema-5 build would refuse
//! operation 27 in the middle of a replay, never fire the file's
//! schedules and could not read a version-3 lease, so the version moves
//! and such a build refuses the file at open.
//!
//! Schema 6 to 7: the version only. Schema 7 adds cancelling (SPEC 3,
//! Cancelling): lease records of version 4 carry the cancel mark (a lease
//! of version 3 is read unmarked), an outcome record's kind 2 is
//! cancelled, and the redo log gains operations 28 (`cancel`) and 29 (a
//! marked item ended by its holder's call). A schema-6 build would take a
//! cancelled outcome for a decode error, could not read a version-4
//! lease and would refuse operation 28 in the middle of a replay, so the
//! version moves and such a build refuses the file at open.
//!
//! Schema 7 to 8: the version only. Schema 8 adds the history (SPEC 3,
//! History: tables `history`, `completed` and `cancelled`, which start
//! empty) and redo log bodies of format 2, which carry the retentions. A
//! schema-7 build would refuse a body of format 2 in the middle of a
//! replay and would leave the history untrimmed, so the version moves
//! and such a build refuses the file at open.
//!
//! Memory stays bounded: item records are rewritten in chunks of
//! [`CHUNK`] and the lanes are streamed from the old table into the new one.

use std::ops::Bound;
use std::time::Duration;

use redb::{ReadableTable, TableDefinition, WriteTransaction};

use super::tables::{
    self, BACKLOG_CLOCK, Ctx, DUE_CLOCK, ITEMS, META, PAYLOADS, SCHEMA_VERSION_KEY,
};
use crate::backend::embedded::codec::{self, INLINE_PAYLOAD_BYTES, ItemRecord, ItemRecordV1};
use crate::config::rank;
use crate::error::{Error, Result};

/// Schema 1's backlog: position -> id.
pub(crate) const V1_BACKLOG: TableDefinition<u64, u64> = TableDefinition::new("backlog");
/// Schema 1's due lane: position -> id.
pub(crate) const V1_DUE: TableDefinition<u64, u64> = TableDefinition::new("due");

// Schema 1's other tables that the fixture writes, frozen here as schema
// 1 had them (schema 2 kept them as they were; the live list is in
// `tables/schema.rs`).
#[cfg(feature = "testing")]
const V1_DELAYED: TableDefinition<(u64, u64), ()> = TableDefinition::new("delayed");
#[cfg(feature = "testing")]
const V1_DEAD: TableDefinition<u64, &[u8]> = TableDefinition::new("dead");
#[cfg(feature = "testing")]
const V1_DEAD_BY_ID: TableDefinition<u64, u64> = TableDefinition::new("dead_by_id");

/// Item records rewritten per chunk.
const CHUNK: usize = 1024;

/// Migrate a schema-1 file to schema 2 inside `txn` (the caller commits).
///
/// # Errors
///
/// `Decode` for a schema-1 item record this build cannot read (the
/// transaction is then aborted and the file left as it was); storage
/// failures.
pub(super) fn schema1_to_2(txn: &WriteTransaction, aging_step: Duration) -> Result<()> {
    rewrite_items(txn)?;
    rank_lane(
        txn,
        V1_BACKLOG,
        tables::BACKLOG,
        BACKLOG_CLOCK,
        aging_step,
        |r| r.enqueued_at_ms,
    )?;
    rank_lane(txn, V1_DUE, tables::DUE, DUE_CLOCK, aging_step, |r| {
        r.not_before_ms.unwrap_or(r.enqueued_at_ms)
    })?;
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 2)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-2 file to schema 3 inside `txn` (the caller commits).
/// Schema 3 adds the ack runs (`ack_runs`, `ack_run_expiry`), which start
/// empty: the outcomes a schema-2 file holds stay in `outcomes`, where
/// schema 3 still reads them, so only the version changes.
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema2_to_3(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 3)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-3 file to schema 4 inside `txn` (the caller commits).
/// Schema 4 adds the deferred deletes (`deferred`), which start empty.
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema3_to_4(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 4)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-4 file to schema 5 inside `txn` (the caller commits).
/// Schema 5 adds the redo log operations of `promote`, `remove` and the
/// atomic `back_off`; a schema-4 file's log holds none of them and its
/// tables are schema 5's, so only the version changes.
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema4_to_5(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 5)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-5 file to schema 6 inside `txn` (the caller commits).
/// Schema 6 adds the schedules, whose tables start empty, and the claim
/// time to lease records (version 3; the leases of version 2 are read as
/// they are), so only the version changes.
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema5_to_6(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 6)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-6 file to schema 7 inside `txn` (the caller commits):
/// the version only (see the module docs).
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema6_to_7(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 7)
        .ctx("write schema version")?;
    Ok(())
}

/// Migrate a schema-7 file to schema 8 inside `txn` (the caller commits):
/// the version only (see the module docs).
///
/// # Errors
///
/// Storage failures.
pub(super) fn schema7_to_8(txn: &WriteTransaction) -> Result<()> {
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(SCHEMA_VERSION_KEY, 8)
        .ctx("write schema version")?;
    Ok(())
}

fn rewrite_items(txn: &WriteTransaction) -> Result<()> {
    let mut after: Option<u64> = None;
    loop {
        let chunk: Vec<(u64, Vec<u8>)> = {
            let items = txn.open_table(ITEMS).ctx("open table items")?;
            let lower = after.map_or(Bound::Unbounded, Bound::Excluded);
            let mut chunk = Vec::with_capacity(CHUNK);
            for entry in items
                .range::<u64>((lower, Bound::Unbounded))
                .ctx("scan items")?
                .take(CHUNK)
            {
                let (k, v) = entry.ctx("scan items")?;
                chunk.push((k.value(), v.value().to_vec()));
            }
            chunk
        };
        let Some(&(last, _)) = chunk.last() else {
            return Ok(());
        };
        after = Some(last);
        let mut items = txn.open_table(ITEMS).ctx("open table items")?;
        let mut payloads = txn.open_table(PAYLOADS).ctx("open table payloads")?;
        for (id, bytes) in chunk {
            let old: ItemRecordV1 = codec::decode(format_args!("items[{id}]"), &bytes)?;
            let stored = payloads
                .get(id)
                .ctx("read payload")?
                .map(|g| (g.value().len(), g.value().to_vec()));
            let payload = match stored {
                Some((len, bytes)) if len <= INLINE_PAYLOAD_BYTES => Some(bytes),
                Some(_) => None,
                None => Some(Vec::new()),
            };
            if payload.is_some() {
                payloads.remove(id).ctx("delete payload")?;
            }
            let rec = ItemRecord {
                flow: old.flow,
                enqueued_at_ms: old.enqueued_at_ms,
                not_before_ms: old.not_before_ms,
                deliveries: old.deliveries,
                priority: 0,
                cost: 1,
                payload,
            };
            items
                .insert(id, codec::encode_item(&rec)?.as_slice())
                .ctx("write item")?;
        }
    }
}

fn rank_lane(
    txn: &WriteTransaction,
    old: TableDefinition<u64, u64>,
    new: TableDefinition<(i64, u64), u64>,
    clock_key: &str,
    aging_step: Duration,
    arrival_of: impl Fn(&ItemRecord) -> u64,
) -> Result<()> {
    let mut clock = 0u64;
    {
        let from = txn.open_table(old).ctx("open schema-1 lane")?;
        let mut to = txn.open_table(new).ctx("open ranked lane")?;
        let items = txn.open_table(ITEMS).ctx("open table items")?;
        for entry in from.iter().ctx("scan schema-1 lane")? {
            let (k, v) = entry.ctx("scan schema-1 lane")?;
            let (seq, id) = (k.value(), v.value());
            let what = format!("items[{id}]");
            let guard = items
                .get(id)
                .ctx("read item")?
                .ok_or_else(|| Error::corrupt(format!("{what} is missing")))?;
            let rec = codec::decode_item(&what, guard.value())?;
            clock = clock.max(arrival_of(&rec));
            to.insert((rank(clock, 0, aging_step), seq), id)
                .ctx("write ranked lane")?;
        }
    }
    txn.delete_table(old).ctx("delete schema-1 lane")?;
    let mut meta = txn.open_table(META).ctx("open table meta")?;
    meta.insert(clock_key, clock).ctx("write lane clock")?;
    Ok(())
}

/// One item of a schema-1 fixture file (test support).
#[cfg(feature = "testing")]
#[derive(Debug, Clone)]
pub struct V1Item {
    /// The item's flow.
    pub flow: String,
    /// Its payload bytes.
    pub payload: Vec<u8>,
    /// When it was added, ms since the Unix epoch.
    pub enqueued_at_ms: u64,
    /// Its `not_before`, for a delayed or due item.
    pub not_before_ms: Option<u64>,
    /// Where it is: `"backlog"`, `"due"`, `"delayed"` or `"dead"`.
    pub state: &'static str,
}

/// Write a queue file in the layout of schema 1 (the layout of workjournal
/// before priorities), holding `items` with ids 1, 2, ... in order, so that
/// tests can open it with this build and check the migration (test
/// support, feature `testing`). Dead letters get the reason `"old"`.
///
/// # Errors
///
/// Storage failures; `InvalidInput` for an unknown state.
#[cfg(feature = "testing")]
pub fn write_schema1_fixture(path: &std::path::Path, items: &[V1Item]) -> Result<()> {
    use crate::backend::embedded::codec::DeadRecord;
    let db = redb::Database::create(path).ctx("create fixture")?;
    let txn = db.begin_write().ctx("begin fixture")?;
    {
        let mut meta = txn.open_table(META).ctx("open table meta")?;
        let mut records = txn.open_table(ITEMS).ctx("open table items")?;
        let mut payloads = txn.open_table(PAYLOADS).ctx("open table payloads")?;
        let mut backlog = txn.open_table(V1_BACKLOG).ctx("open backlog")?;
        let mut due = txn.open_table(V1_DUE).ctx("open due")?;
        let mut delayed = txn.open_table(V1_DELAYED).ctx("open delayed")?;
        let mut dead = txn.open_table(V1_DEAD).ctx("open dead")?;
        let mut dead_by_id = txn.open_table(V1_DEAD_BY_ID).ctx("open dead_by_id")?;
        let mut seq = 1u64;
        for (i, item) in items.iter().enumerate() {
            let id = i as u64 + 1;
            let rec = ItemRecordV1 {
                flow: item.flow.clone(),
                enqueued_at_ms: item.enqueued_at_ms,
                not_before_ms: item.not_before_ms,
                deliveries: u32::from(item.state == "dead"),
            };
            records
                .insert(id, codec::encode(&rec)?.as_slice())
                .ctx("write item")?;
            payloads
                .insert(id, item.payload.as_slice())
                .ctx("write payload")?;
            match item.state {
                "backlog" => {
                    backlog.insert(seq, id).ctx("write backlog")?;
                }
                "due" => {
                    due.insert(seq, id).ctx("write due")?;
                }
                "delayed" => {
                    delayed
                        .insert((item.not_before_ms.unwrap_or(0), id), ())
                        .ctx("write delayed")?;
                }
                "dead" => {
                    let d = DeadRecord {
                        id,
                        reason: "old".into(),
                        failed_at_ms: item.enqueued_at_ms,
                    };
                    dead.insert(seq, codec::encode(&d)?.as_slice())
                        .ctx("write dead")?;
                    dead_by_id.insert(id, seq).ctx("write dead_by_id")?;
                }
                other => return Err(Error::invalid(format!("unknown fixture state {other}"))),
            }
            seq += 1;
        }
        meta.insert(SCHEMA_VERSION_KEY, 1)
            .ctx("write schema version")?;
        meta.insert(tables::NEXT_ID, items.len() as u64 + 1)
            .ctx("write counter")?;
        meta.insert(tables::NEXT_SEQ, seq).ctx("write counter")?;
    }
    txn.commit().ctx("commit fixture")?;
    Ok(())
}
