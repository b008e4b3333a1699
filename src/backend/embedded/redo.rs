//! The redo log: how a commit of the embedded backend becomes durable with
//! one sequential append and one `fdatasync` (SPEC sections 4 and 6).
//!
//! # Design
//!
//! The queue file `NAME` has a companion log `NAME-redo`. Each group commit
//! of the writer thread (one write transaction over a batch of callers'
//! operations) is made durable like this:
//!
//! 1. the batch runs in the writer's open redb write transaction (begun
//!    by the first batch after redb's last commit), which also records in
//!    `meta` (`redo_at`) the log offset just past this batch's record;
//! 2. the batch's record (the operations that changed something, with
//!    their times, the batch time, the latest clock reading and the
//!    settings the operations read) is appended to the log and the log is
//!    `fdatasync`ed: from here on the batch is durable;
//! 3. the callers get their replies; the transaction stays open for the
//!    next batches.
//!
//! The open transaction commits at the next checkpoint, which it becomes,
//! or with `Durability::None` (no fsync: redb keeps the new root in memory,
//! writes its pages without syncing them, and keeps every page it frees
//! until the next durable commit) before a batch of reads alone, whose
//! housekeeping must not join it. So redb pays one commit per checkpoint
//! rather than one per batch. If the transaction must be aborted (an
//! operation failed after it wrote, a log append failed), the batches it
//! held are applied again from the log first (`abandon` in the writer), so
//! redb is never left behind the log in the running process.
//!
//! A checkpoint is a redb commit with `Durability::Immediate` (and redb's
//! quick repair, so that an open after a crash need not walk the file)
//! that stores a fresh random log tag in `meta` (`redo_log`) and
//! `redo_at = 0`. Records carry the tag they were written under, so once the
//! checkpoint is durable every record before it is dead at once, and the
//! log is written again from offset 0: this is the log's truncation, and it
//! happens only after a durable checkpoint. A checkpoint runs after a batch
//! that wrote (before its replies, which it does not change) once the log
//! holds 4 MiB or 8192 operations or the last checkpoint is 2 s old
//! ([`Policy`]), at every open (after the replay) and at close. An idle
//! queue does not checkpoint until it writes again or closes, so it writes
//! nothing (SPEC 6, Idle).
//!
//! # Replay
//!
//! At open, redb comes back at its last durable commit (or, after a clean
//! close, at its last commit). Its `meta` names the log tag and the offset
//! of the first record it does not hold; the open reads records from there
//! while each is whole (magic, length within the file, tag, its own
//! offset, and an xxh3 checksum over header and body all match) and runs
//! each through the same transaction body as the live path (`run_txn` in
//! the writer), one non-durable commit per record, then checkpoints. A torn
//! or bit-flipped record, and everything after it, is dropped, never
//! replayed in part: records are appended one at a time and each is synced
//! before the next is written, so only the last one can be torn by a power
//! cut, and its callers never got `Ok`. Replay reads only the log after the
//! last checkpoint, which the checkpoint policy bounds.
//!
//! Replay is exact because the transaction body is a function of the file's
//! state and of what the record carries: operations, each one's time, the
//! batch time (which housekeeping purges by), the latest clock reading (for
//! clock steps) and the settings. The one random choice (the forwarding
//! journal id) is drawn by the caller and carried by the operation.
//!
//! # Faults
//!
//! A failed log write or sync fails the batch (its transaction is aborted,
//! so redb never holds what the log may lack) and marks the log broken:
//! before the next operation the writer checkpoints, which makes the state
//! without the failed batch durable under a new tag, so the failed record
//! (whole or not on the disk) can never be replayed after later ones. A
//! failed redb commit, or a failed checkpoint, makes the writer drop the
//! database and open it again with a replay before the next operation
//! (redb may then be behind the log, never ahead of it).
//!
//! # Format
//!
//! A record is a 32-byte header (magic `WJRL`, body length u32, tag u64,
//! the record's own offset u64, xxh3-64 checksum u64 over the header's
//! first 24 bytes and the body; little endian) and the body (version byte
//! 1, then varints and length-prefixed bytes, module `record`). The
//! log grows in steps of `GROW_BYTES` (1 MiB; 64 KiB under cargo-fuzz)
//! written as zeros, so that an append's `fdatasync` rarely has file
//! metadata to write, and the file keeps its size across checkpoints.
//!
//! # Layout
//!
//! This file is the checkpoint policy; `file` is where the log's bytes
//! live (a file, memory, a test's simulated disk), `log` the record
//! framing (append, read back, checksum) and `record` the record bodies
//! (the operations of a batch, encoded and decoded).

mod file;
mod log;
mod record;

use std::time::Duration;

pub(crate) use file::LogFile;
pub(super) use file::{FileLog, MemLog};
pub(super) use log::{Log, new_tag};
pub(super) use record::{begin_batch, decode_batch, encode_op, weight};

/// Default of [`Policy::bytes`]: 4 MiB.
pub(super) const CHECKPOINT_BYTES: u64 = 4 << 20;
/// Default of [`Policy::ops`].
pub(super) const CHECKPOINT_OPS: u64 = 8192;
/// Default of [`Policy::interval`].
pub(super) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);

/// Default of [`Policy::ahead_from`]: a batch of adds of 32 items or more
/// is written to the log before it runs. Below that the adds run faster
/// than the sync thread wakes.
pub(super) const WRITE_AHEAD_FROM: usize = 32;

/// When the writer checkpoints (SPEC 7, embedded checkpoints): after a
/// batch, once the log holds `bytes` bytes or `ops` operations since the
/// last checkpoint, or the last one is `interval` old.
#[derive(Debug, Clone, Copy)]
pub(super) struct Policy {
    /// Log bytes since the last checkpoint (default 4 MiB): bounds the log.
    pub(super) bytes: u64,
    /// Operations logged since the last checkpoint (default 8192): bounds
    /// the replay work at open, each costing about one live apply.
    pub(super) ops: u64,
    /// Age of the last checkpoint (default 2 s).
    pub(super) interval: Duration,
    /// Items from which a batch of adds has its record written and synced
    /// while it runs (default [`WRITE_AHEAD_FROM`]; 0: never).
    pub(super) ahead_from: usize,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            bytes: CHECKPOINT_BYTES,
            ops: CHECKPOINT_OPS,
            interval: CHECKPOINT_INTERVAL,
            ahead_from: WRITE_AHEAD_FROM,
        }
    }
}
