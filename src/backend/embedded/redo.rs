//! The redo log: how a commit of the embedded backend becomes durable with
//! one sequential append and one `fdatasync` (SPEC sections 4 and 6).
//!
//! # Design
//!
//! The queue file `NAME` has a companion log `NAME-redo`. Each group commit
//! of the writer thread (one write transaction over a batch of callers'
//! operations) is made durable like this:
//!
//! 1. the batch runs in a redb write transaction, which also records in
//!    `meta` (`redo_at`) the log offset just past this batch's record;
//! 2. the batch's record (the operations that changed something, with
//!    their times, the batch time, the latest clock reading and the
//!    settings the operations read) is appended to the log and the log is
//!    `fdatasync`ed: from here on the batch is durable;
//! 3. the transaction commits with `Durability::None` (no fsync: redb
//!    keeps the new root in memory, writes its pages without syncing them,
//!    and keeps every page it frees until the next durable commit);
//! 4. only then do the callers get their replies.
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
//! nothing (SPEC 8, Idle).
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
//! 1, then varints and length-prefixed bytes, see [`encode_batch`]). The
//! log grows in steps of [`GROW_BYTES`] written as zeros, so that an
//! append's `fdatasync` rarely has file metadata to write, and the file
//! keeps its size across checkpoints.

use std::fmt::Debug;
use std::io;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::tables::Limits;
use super::writer::Op;
use crate::error::{Error, Result};
use crate::item::{ClaimFrom, NewItem, Receipt};
use crate::limit::{FlowLimit, RateLimit};

/// Default of [`Policy::bytes`]: 4 MiB.
pub(super) const CHECKPOINT_BYTES: u64 = 4 << 20;
/// Default of [`Policy::ops`].
pub(super) const CHECKPOINT_OPS: u64 = 8192;
/// Default of [`Policy::interval`].
pub(super) const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(2);

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
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            bytes: CHECKPOINT_BYTES,
            ops: CHECKPOINT_OPS,
            interval: CHECKPOINT_INTERVAL,
        }
    }
}
/// The log grows in steps of this many bytes.
pub(super) const GROW_BYTES: u64 = 1 << 20;
/// A record's header, in bytes.
const HEADER: usize = 32;
const MAGIC: [u8; 4] = *b"WJRL";
/// The body's format version.
const BODY_VERSION: u8 = 1;
/// Largest record body accepted at replay (a header claiming more is torn).
const MAX_BODY: u64 = u32::MAX as u64;

/// Where the log's bytes live: a file, or a test's simulated disk.
pub(crate) trait LogFile: Debug + Send + Sync + 'static {
    /// The file's length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Read exactly `out.len()` bytes at `offset`.
    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()>;
    /// Write all of `data` at `offset`, growing the file if needed.
    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()>;
    /// Make every write so far durable (`fdatasync`).
    fn sync_data(&self) -> io::Result<()>;
}

/// The log as a file on disk.
#[derive(Debug)]
pub(super) struct FileLog {
    file: std::fs::File,
    writable: bool,
}

impl FileLog {
    /// Open (and with `writable`, create) the log of the queue file `path`.
    /// A read-only open of a missing log gives `None`: there is nothing to
    /// replay.
    pub(super) fn open(path: &std::path::Path, writable: bool) -> io::Result<Option<Self>> {
        let log = log_path(path);
        if !writable {
            return match std::fs::File::open(&log) {
                Ok(file) => Ok(Some(FileLog { file, writable })),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
                Err(e) => Err(e),
            };
        }
        let existed = log.exists();
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&log)?;
        if !existed {
            // The new name must survive a power cut before a record in it
            // is relied on.
            file.sync_all()?;
            if let Some(dir) = log.parent() {
                #[cfg(unix)]
                std::fs::File::open(dir)?.sync_all()?;
            }
        }
        Ok(Some(FileLog { file, writable }))
    }
}

/// The log of the queue file `path`: `path` with `-redo` appended.
pub(super) fn log_path(path: &std::path::Path) -> std::path::PathBuf {
    let mut name = path.as_os_str().to_os_string();
    name.push("-redo");
    std::path::PathBuf::from(name)
}

impl LogFile for FileLog {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        self.file.read_exact_at(out, offset)
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        use std::os::unix::fs::FileExt;
        if !self.writable {
            return Err(io::Error::new(
                io::ErrorKind::PermissionDenied,
                "the redo log was opened read-only",
            ));
        }
        self.file.write_all_at(data, offset)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.file.sync_data()
    }
}

/// A log in memory: for a caller-supplied redb backend (tests) and for a
/// read-only open without a log file. Clones share the bytes.
#[derive(Debug, Default, Clone)]
pub(super) struct MemLog {
    bytes: Arc<Mutex<Vec<u8>>>,
}

impl LogFile for MemLog {
    fn len(&self) -> io::Result<u64> {
        Ok(self.bytes.lock().unwrap_or_else(|e| e.into_inner()).len() as u64)
    }

    fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
        let b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let src = start
            .checked_add(out.len())
            .and_then(|end| b.get(start..end))
            .ok_or_else(|| io::Error::from(io::ErrorKind::UnexpectedEof))?;
        out.copy_from_slice(src);
        Ok(())
    }

    fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
        let mut b = self.bytes.lock().unwrap_or_else(|e| e.into_inner());
        let start = usize::try_from(offset).map_err(io::Error::other)?;
        let end = start + data.len();
        if b.len() < end {
            b.resize(end, 0);
        }
        b[start..end].copy_from_slice(data);
        Ok(())
    }

    fn sync_data(&self) -> io::Result<()> {
        Ok(())
    }
}

/// The writer's side of the log: where the next record goes and under
/// which tag.
#[derive(Debug)]
pub(super) struct Log {
    file: Box<dyn LogFile>,
    /// The tag of the current generation (the `redo_log` of the last
    /// checkpoint); 0 before the first.
    tag: u64,
    /// Where the next record goes.
    pos: u64,
    /// The file's length as last known.
    len: Option<u64>,
    /// Operations logged since the last checkpoint.
    ops: u64,
    /// An append failed: checkpoint before the next one.
    broken: bool,
    /// The next record, reused between batches.
    pub(super) buf: Vec<u8>,
}

impl Log {
    pub(super) fn new(file: Box<dyn LogFile>) -> Self {
        Log {
            file,
            tag: 0,
            pos: 0,
            len: None,
            ops: 0,
            broken: false,
            buf: Vec::new(),
        }
    }

    /// Whether an append failed since the last checkpoint.
    pub(super) fn is_broken(&self) -> bool {
        self.broken
    }

    /// The offset just past a record with a body of `body` bytes appended
    /// now.
    pub(super) fn end_after(&self, body: usize) -> u64 {
        self.pos + (HEADER + body) as u64
    }

    /// Whether a checkpoint is due by size or operation count.
    pub(super) fn checkpoint_due(&self, policy: &Policy) -> bool {
        self.pos >= policy.bytes || self.ops >= policy.ops
    }

    /// Whether anything was logged since the last checkpoint.
    pub(super) fn has_records(&self) -> bool {
        self.pos > 0
    }

    /// A checkpoint under `tag` is durable: write from the start again.
    pub(super) fn reset(&mut self, tag: u64) {
        self.tag = tag;
        self.pos = 0;
        self.ops = 0;
        self.broken = false;
        if self.buf.capacity() > CHECKPOINT_BYTES as usize {
            self.buf = Vec::new();
        }
    }

    /// Append the record whose body is `self.buf` (holding operations of
    /// [`weight`] `ops` in all) and sync it. On failure the log is broken until the
    /// next checkpoint.
    pub(super) fn append(&mut self, ops: u64) -> io::Result<()> {
        let result = self.try_append();
        match result {
            Ok(()) => {
                self.pos = self.end_after(self.buf.len());
                self.ops += ops.max(1);
            }
            Err(_) => self.broken = true,
        }
        result
    }

    fn try_append(&mut self) -> io::Result<()> {
        let body_len = u32::try_from(self.buf.len())
            .map_err(|_| io::Error::other("a redo record over 4 GiB"))?;
        let end = self.end_after(self.buf.len());
        let len = match self.len {
            Some(l) => l,
            None => self.file.len()?,
        };
        self.len = Some(len);
        if end > len {
            // Grow with zeros, so the appends that follow overwrite
            // allocated blocks and their syncs have no metadata to write.
            let target = end.div_ceil(GROW_BYTES) * GROW_BYTES;
            let zeros = vec![0u8; 64 * 1024];
            let mut at = len;
            while at < target {
                let n = (target - at).min(zeros.len() as u64) as usize;
                self.file.write(at, &zeros[..n])?;
                at += n as u64;
            }
            self.len = Some(target);
        }
        let mut record = Vec::with_capacity(HEADER + self.buf.len());
        record.extend_from_slice(&header(body_len, self.tag, self.pos, &self.buf));
        record.extend_from_slice(&self.buf);
        self.file.write(self.pos, &record)?;
        self.file.sync_data()
    }

    /// The record under `tag` at `offset`, whole, with the offset after
    /// it; `None` where the log ends (a zeroed, torn, bit-flipped or older
    /// record, or the end of the file).
    ///
    /// # Errors
    ///
    /// `Io` if the file cannot be read.
    pub(super) fn read_record(&self, tag: u64, offset: u64) -> Result<Option<(Vec<u8>, u64)>> {
        let io_err = |source| Error::Io {
            context: "read the redo log".into(),
            source,
        };
        let len = self.file.len().map_err(io_err)?;
        if offset.checked_add(HEADER as u64).is_none_or(|e| e > len) {
            return Ok(None);
        }
        let mut head = [0u8; HEADER];
        self.file.read(offset, &mut head).map_err(io_err)?;
        let word = |r: std::ops::Range<usize>| {
            let mut b = [0u8; 8];
            b[..r.len()].copy_from_slice(&head[r]);
            u64::from_le_bytes(b)
        };
        let body_len = word(4..8);
        if head[0..4] != MAGIC
            || word(8..16) != tag
            || word(16..24) != offset
            || body_len > MAX_BODY
            || offset + HEADER as u64 + body_len > len
        {
            return Ok(None);
        }
        let mut body = vec![0u8; body_len as usize];
        self.file
            .read(offset + HEADER as u64, &mut body)
            .map_err(io_err)?;
        if checksum(&head[..24], &body) != word(24..32) {
            return Ok(None);
        }
        Ok(Some((body, offset + HEADER as u64 + body_len)))
    }
}

fn checksum(head: &[u8], body: &[u8]) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    h.update(head);
    h.update(body);
    h.digest()
}

fn header(body_len: u32, tag: u64, offset: u64, body: &[u8]) -> [u8; HEADER] {
    let mut head = [0u8; HEADER];
    head[0..4].copy_from_slice(&MAGIC);
    head[4..8].copy_from_slice(&body_len.to_le_bytes());
    head[8..16].copy_from_slice(&tag.to_le_bytes());
    head[16..24].copy_from_slice(&offset.to_le_bytes());
    let sum = checksum(&head[..24], body);
    head[24..32].copy_from_slice(&sum.to_le_bytes());
    head
}

/// A fresh, non-zero log tag.
pub(super) fn new_tag() -> u64 {
    fastrand::u64(1..)
}

// ---- record bodies ------------------------------------------------------

/// What one batch's record holds.
#[derive(Debug)]
pub(super) struct Batch {
    pub(super) limits: Limits,
    /// The latest clock reading before the batch (SPEC 8, Clock steps).
    pub(super) latest: u64,
    /// The batch's time: the latest of its operations' times.
    pub(super) now: u64,
    /// The operations that changed something, in order, each with its time.
    pub(super) ops: Vec<(Op, u64)>,
}

struct W<'a>(&'a mut Vec<u8>);

impl W<'_> {
    fn u(&mut self, mut v: u64) {
        while v >= 0x80 {
            self.0.push((v as u8) | 0x80);
            v >>= 7;
        }
        self.0.push(v as u8);
    }
    fn b(&mut self, bytes: &[u8]) {
        self.u(bytes.len() as u64);
        self.0.extend_from_slice(bytes);
    }
    fn opt(&mut self, v: Option<u64>) {
        match v {
            None => self.u(0),
            Some(v) => {
                self.u(1);
                self.u(v);
            }
        }
    }
    fn receipt(&mut self, r: &Receipt) {
        self.u(r.id);
        self.u(u64::from(r.delivery));
        self.u(r.lease);
    }
    fn receipts(&mut self, rs: &[Receipt]) {
        self.u(rs.len() as u64);
        for r in rs {
            self.receipt(r);
        }
    }
}

/// Encode a batch's header fields into `out` (cleared first); the
/// operations follow with [`encode_op`], and [`finish_batch`] writes their
/// count.
pub(super) fn begin_batch(out: &mut Vec<u8>, limits: &Limits, latest: u64, now: u64) {
    out.clear();
    out.push(BODY_VERSION);
    let mut w = W(out);
    w.u(u64::from(limits.max_deliveries));
    w.u(limits.done_ttl_ms);
    w.u(limits.result_ttl_ms);
    w.u(limits.dedup_window_ms);
    w.u(limits.dead_letter_cap);
    w.opt(limits.max_backlog);
    w.u(limits.max_payload_bytes as u64);
    w.u(limits.aging_step.as_secs());
    w.u(u64::from(limits.aging_step.subsec_nanos()));
    w.u(latest);
    w.u(now);
}

/// What replaying `op` costs, in single-item operations: the items of an
/// add, the receipts of a batch ack or touch, the count of a claim or
/// reclaim; 1 for the rest. [`Policy::ops`] counts these, so that a few
/// large batches cannot leave a long replay.
pub(super) fn weight(op: &Op) -> u64 {
    let n = match op {
        Op::Add(items) => items.len(),
        Op::AckBatch(rs) | Op::Touch(rs) => rs.len(),
        Op::Claim { count, .. } | Op::Reclaim { count, .. } => *count,
        #[cfg(feature = "forward")]
        Op::ForwardDone { ids, .. } => ids.len(),
        _ => 1,
    };
    n.max(1) as u64
}

/// Append one operation (with its time) to a batch body; false (and
/// nothing appended) for an operation that never writes.
pub(super) fn encode_op(out: &mut Vec<u8>, op: &Op, now: u64) -> bool {
    if op.is_read() {
        return false;
    }
    let mut w = W(out);
    w.u(now);
    match op {
        Op::Add(items) => {
            w.u(1);
            w.u(items.len() as u64);
            for (item, nb) in items {
                new_item(&mut w, item);
                w.opt(*nb);
            }
        }
        Op::Promote => w.u(2),
        Op::Claim { count, from } => {
            w.u(3);
            w.u(*count as u64);
            w.u(match from {
                ClaimFrom::All => 0,
                ClaimFrom::DueOnly => 1,
            });
        }
        Op::Ack(r, result) => {
            w.u(4);
            w.receipt(r);
            w.b(result);
        }
        Op::SetProgress(r, progress) => {
            w.u(21);
            w.receipt(r);
            w.b(progress);
        }
        Op::SendChunk(r, chunk) => {
            w.u(22);
            w.receipt(r);
            w.b(chunk);
        }
        Op::AckBatch(rs) => {
            w.u(5);
            w.receipts(rs);
        }
        Op::Touch(rs) => {
            w.u(6);
            w.receipts(rs);
        }
        Op::Retry(r, nb) => {
            w.u(7);
            w.receipt(r);
            w.u(*nb);
        }
        Op::Release(r, nb) => {
            w.u(8);
            w.receipt(r);
            w.u(*nb);
        }
        Op::DeadLetter(r, reason) => {
            w.u(9);
            w.receipt(r);
            w.b(reason.as_bytes());
        }
        Op::Reclaim { min_idle_ms, count } => {
            w.u(10);
            w.u(*min_idle_ms);
            w.u(*count as u64);
        }
        Op::Pause(f) => {
            w.u(11);
            w.b(f.as_bytes());
        }
        Op::Resume(f) => {
            w.u(12);
            w.b(f.as_bytes());
        }
        Op::Park(r) => {
            w.u(13);
            w.receipt(r);
        }
        Op::Step(f) => {
            w.u(14);
            w.b(f.as_bytes());
        }
        Op::ClearFlow(f) => {
            w.u(15);
            w.b(f.as_bytes());
        }
        Op::MarkDone(id, step) => {
            w.u(16);
            w.u(*id);
            w.b(step.as_bytes());
        }
        Op::Redrive(id) => {
            w.u(17);
            w.u(*id);
        }
        Op::PurgeDead => w.u(18),
        #[cfg(feature = "forward")]
        Op::ForwardJournal(candidate) => {
            w.u(19);
            w.u(*candidate);
        }
        #[cfg(feature = "forward")]
        Op::ForwardDone { key, ids, mark } => {
            w.u(20);
            w.b(key.as_bytes());
            w.u(ids.len() as u64);
            for id in ids {
                w.u(*id);
            }
            w.u(*mark);
        }
        Op::SetFlowLimit(flow, limit) => {
            w.u(23);
            w.b(flow.as_bytes());
            match limit {
                FlowLimit::Rate(rate) => {
                    w.u(0);
                    match rate {
                        None => w.u(0),
                        Some(rate) => {
                            w.u(1);
                            w.u(u64::from(rate.permits));
                            w.u(rate.period_ms);
                        }
                    }
                }
                FlowLimit::Concurrency(cap) => {
                    w.u(1);
                    w.opt(cap.map(u64::from));
                }
                FlowLimit::BackOffUntil(until) => {
                    w.u(2);
                    w.opt(*until);
                }
            }
        }
        // Reads are never logged (`is_read` above). Listed one by one, not
        // with `_`, so that a new operation that writes cannot be left out
        // of the log without the compiler saying so.
        Op::Outcome(_)
        | Op::Progress(_)
        | Op::Chunks(..)
        | Op::NextDue
        | Op::Parked(_)
        | Op::PausedFlows
        | Op::FlowLimits
        | Op::WasDone(..)
        | Op::DeadLetters(_)
        | Op::Stats
        | Op::BacklogByFlow(_)
        | Op::Peek(_)
        | Op::List(_)
        | Op::Find(_) => return false,
        #[cfg(feature = "forward")]
        Op::ForwardRead { .. } | Op::ForwardLag(_) => return false,
        #[cfg(feature = "testing")]
        Op::Locations | Op::Dump | Op::Audit => return false,
    }
    true
}

fn new_item(w: &mut W<'_>, item: &NewItem) {
    w.b(item.flow.as_bytes());
    w.b(&item.payload);
    match &item.dedup_key {
        None => w.u(0),
        Some(k) => {
            w.u(1);
            w.b(k.as_bytes());
        }
    }
    w.u(u64::from(item.priority));
    w.u(u64::from(item.cost));
}

struct R<'a> {
    bytes: &'a [u8],
    at: usize,
}

fn bad(detail: impl Into<String>) -> Error {
    Error::Decode {
        what: "a redo log record".into(),
        detail: detail.into(),
    }
}

impl<'a> R<'a> {
    fn byte(&mut self) -> Result<u8> {
        let b = *self
            .bytes
            .get(self.at)
            .ok_or_else(|| bad("the record ends early"))?;
        self.at += 1;
        Ok(b)
    }
    fn u(&mut self) -> Result<u64> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f)
                .checked_shl(shift)
                .ok_or_else(|| bad("a number overflows"))?;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(bad("a number is too long"))
    }
    fn u32(&mut self) -> Result<u32> {
        u32::try_from(self.u()?).map_err(|_| bad("a number overflows"))
    }
    fn usize(&mut self) -> Result<usize> {
        usize::try_from(self.u()?).map_err(|_| bad("a number overflows"))
    }
    fn b(&mut self) -> Result<&'a [u8]> {
        let n = self.usize()?;
        let end = self
            .at
            .checked_add(n)
            .filter(|e| *e <= self.bytes.len())
            .ok_or_else(|| bad("a field runs past the record"))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }
    fn s(&mut self) -> Result<String> {
        String::from_utf8(self.b()?.to_vec()).map_err(|_| bad("a text field is not UTF-8"))
    }
    fn opt(&mut self) -> Result<Option<u64>> {
        match self.u()? {
            0 => Ok(None),
            1 => Ok(Some(self.u()?)),
            t => Err(bad(format!("option tag {t}"))),
        }
    }
    fn receipt(&mut self) -> Result<Receipt> {
        Ok(Receipt {
            id: self.u()?,
            delivery: self.u32()?,
            lease: self.u()?,
        })
    }
    /// A count of things of at least `min` bytes each, checked against the
    /// bytes left, so that a length never allocates more than the record.
    fn count(&mut self, min: usize) -> Result<usize> {
        let n = self.usize()?;
        if n.saturating_mul(min) > self.bytes.len() - self.at {
            return Err(bad("a count exceeds the record"));
        }
        Ok(n)
    }
    fn receipts(&mut self) -> Result<Vec<Receipt>> {
        let n = self.count(3)?;
        (0..n).map(|_| self.receipt()).collect()
    }
}

/// Decode a record body written by [`begin_batch`] and [`encode_op`].
///
/// # Errors
///
/// `Decode` for a body this build cannot read (a newer format, an unknown
/// operation, a malformed field).
pub(super) fn decode_batch(body: &[u8]) -> Result<Batch> {
    let mut r = R { bytes: body, at: 0 };
    let version = r.byte()?;
    if version != BODY_VERSION {
        return Err(bad(format!(
            "record format {version}; this build reads {BODY_VERSION}: upgrade workjournal"
        )));
    }
    let limits = Limits {
        max_deliveries: r.u32()?,
        done_ttl_ms: r.u()?,
        result_ttl_ms: r.u()?,
        dedup_window_ms: r.u()?,
        dead_letter_cap: r.u()?,
        max_backlog: r.opt()?,
        max_payload_bytes: r.usize()?,
        aging_step: {
            let secs = r.u()?;
            let nanos = r.u32()?;
            if nanos >= 1_000_000_000 {
                return Err(bad("aging step nanoseconds out of range"));
            }
            Duration::new(secs, nanos)
        },
    };
    let latest = r.u()?;
    let now = r.u()?;
    let mut ops = Vec::new();
    while r.at < body.len() {
        let t = r.u()?;
        ops.push((decode_op(&mut r)?, t));
    }
    Ok(Batch {
        limits,
        latest,
        now,
        ops,
    })
}

fn decode_op(r: &mut R<'_>) -> Result<Op> {
    let code = r.u()?;
    Ok(match code {
        1 => {
            let n = r.count(5)?;
            let mut items = Vec::with_capacity(n);
            for _ in 0..n {
                let flow = r.s()?;
                let payload = r.b()?.to_vec();
                let dedup_key = match r.u()? {
                    0 => None,
                    1 => Some(r.s()?),
                    t => return Err(bad(format!("option tag {t}"))),
                };
                let priority =
                    u8::try_from(r.u()?).map_err(|_| bad("priority tier out of range"))?;
                let cost = u32::try_from(r.u()?).map_err(|_| bad("item cost out of range"))?;
                let item = NewItem {
                    flow,
                    payload,
                    dedup_key,
                    priority,
                    cost,
                };
                items.push((item, r.opt()?));
            }
            Op::Add(items)
        }
        2 => Op::Promote,
        3 => Op::Claim {
            count: r.usize()?,
            from: match r.u()? {
                0 => ClaimFrom::All,
                1 => ClaimFrom::DueOnly,
                t => return Err(bad(format!("claim lane {t}"))),
            },
        },
        4 => Op::Ack(r.receipt()?, r.b()?.to_vec()),
        21 => Op::SetProgress(r.receipt()?, r.b()?.to_vec()),
        22 => Op::SendChunk(r.receipt()?, r.b()?.to_vec()),
        5 => Op::AckBatch(r.receipts()?),
        6 => Op::Touch(r.receipts()?),
        7 => Op::Retry(r.receipt()?, r.u()?),
        8 => Op::Release(r.receipt()?, r.u()?),
        9 => Op::DeadLetter(r.receipt()?, r.s()?),
        10 => Op::Reclaim {
            min_idle_ms: r.u()?,
            count: r.usize()?,
        },
        11 => Op::Pause(r.s()?),
        12 => Op::Resume(r.s()?),
        13 => Op::Park(r.receipt()?),
        14 => Op::Step(r.s()?),
        15 => Op::ClearFlow(r.s()?),
        16 => Op::MarkDone(r.u()?, r.s()?),
        17 => Op::Redrive(r.u()?),
        18 => Op::PurgeDead,
        23 => {
            let flow = r.s()?;
            let limit = match r.u()? {
                0 => FlowLimit::Rate(match r.u()? {
                    0 => None,
                    1 => Some(RateLimit {
                        permits: r.u32()?,
                        period_ms: r.u()?,
                    }),
                    t => return Err(bad(format!("option tag {t}"))),
                }),
                1 => FlowLimit::Concurrency(
                    r.opt()?
                        .map(|k| u32::try_from(k).map_err(|_| bad("concurrency cap out of range")))
                        .transpose()?,
                ),
                2 => FlowLimit::BackOffUntil(r.opt()?),
                t => return Err(bad(format!("flow limit kind {t}"))),
            };
            Op::SetFlowLimit(flow, limit)
        }
        #[cfg(feature = "forward")]
        19 => Op::ForwardJournal(r.u()?),
        #[cfg(feature = "forward")]
        20 => {
            let key = r.s()?;
            let n = r.count(1)?;
            let ids = (0..n).map(|_| r.u()).collect::<Result<Vec<u64>>>()?;
            Op::ForwardDone {
                key,
                ids,
                mark: r.u()?,
            }
        }
        #[cfg(not(feature = "forward"))]
        19 | 20 => {
            return Err(bad(
                "a store-and-forward operation: open the file with a build that has the `forward` feature",
            ));
        }
        other => return Err(bad(format!("unknown operation {other}"))),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits() -> Limits {
        Limits {
            max_deliveries: 5,
            done_ttl_ms: 1_000,
            result_ttl_ms: 2_000,
            dedup_window_ms: 3_000,
            dead_letter_cap: 7,
            max_backlog: Some(11),
            max_payload_bytes: 1 << 20,
            aging_step: Duration::from_millis(60_500),
        }
    }

    fn r(id: u64) -> Receipt {
        Receipt {
            id,
            delivery: 2,
            lease: id + 100,
        }
    }

    fn every_op() -> Vec<Op> {
        vec![
            Op::Add(vec![
                (
                    NewItem::new(b"x".to_vec())
                        .flow("f")
                        .dedup_key("k")
                        .priority(3),
                    Some(5),
                ),
                (NewItem::new(vec![0; 600]), None),
            ]),
            Op::Promote,
            Op::Claim {
                count: 3,
                from: ClaimFrom::DueOnly,
            },
            Op::Ack(r(1), b"result".to_vec()),
            Op::SetProgress(r(2), b"half".to_vec()),
            Op::SendChunk(r(3), vec![1, 2, 3]),
            Op::AckBatch(vec![r(4), r(5)]),
            Op::Touch(vec![r(6)]),
            Op::Retry(r(7), 99),
            Op::Release(r(8), 98),
            Op::DeadLetter(r(9), "bad".into()),
            Op::Reclaim {
                min_idle_ms: 500,
                count: 2,
            },
            Op::Pause("p".into()),
            Op::Resume("p".into()),
            Op::Park(r(10)),
            Op::Step("s".into()),
            Op::ClearFlow("c".into()),
            Op::MarkDone(12, "step".into()),
            Op::Redrive(13),
            Op::PurgeDead,
            Op::Add(vec![(NewItem::new(b"c".to_vec()).flow("g").cost(3), None)]),
            Op::SetFlowLimit(
                "g".into(),
                FlowLimit::Rate(Some(RateLimit {
                    permits: 10,
                    period_ms: 1_000,
                })),
            ),
            Op::SetFlowLimit("g".into(), FlowLimit::Rate(None)),
            Op::SetFlowLimit("g".into(), FlowLimit::Concurrency(Some(2))),
            Op::SetFlowLimit("g".into(), FlowLimit::Concurrency(None)),
            Op::SetFlowLimit("g".into(), FlowLimit::BackOffUntil(Some(77))),
            Op::SetFlowLimit("g".into(), FlowLimit::BackOffUntil(None)),
        ]
    }

    fn body() -> Vec<u8> {
        let mut buf = Vec::new();
        begin_batch(&mut buf, &limits(), 7, 9);
        for (k, op) in every_op().iter().enumerate() {
            assert!(encode_op(&mut buf, op, 1_000 + k as u64), "{op:?}");
        }
        assert!(!encode_op(&mut buf, &Op::Stats, 1));
        buf
    }

    #[test]
    fn every_logged_operation_decodes_to_itself() {
        let batch = decode_batch(&body()).unwrap();
        assert_eq!(format!("{:?}", batch.limits), format!("{:?}", limits()));
        assert_eq!((batch.latest, batch.now), (7, 9));
        let want: Vec<String> = every_op()
            .iter()
            .enumerate()
            .map(|(k, op)| format!("{op:?} at {}", 1_000 + k))
            .collect();
        let got: Vec<String> = batch
            .ops
            .iter()
            .map(|(op, t)| format!("{op:?} at {t}"))
            .collect();
        assert_eq!(got, want);
    }

    #[test]
    fn a_cut_or_garbled_body_is_an_error_never_a_panic() {
        let body = body();
        for n in 0..body.len() {
            // A prefix may end between two operations and decode fine;
            // it must never panic or allocate past the record.
            let _ = decode_batch(&body[..n]);
        }
        let mut rng = fastrand::Rng::with_seed(7);
        for _ in 0..2000 {
            let mut b = body.clone();
            let at = rng.usize(..b.len());
            b[at] = rng.u8(..);
            let _ = decode_batch(&b);
        }
        assert!(decode_batch(&[2]).is_err(), "a newer format is refused");
    }

    #[test]
    fn a_record_reads_back_only_whole_and_under_its_tag() {
        let file = MemLog::default();
        let mut log = Log::new(Box::new(file.clone()));
        log.reset(42);
        log.buf = b"first".to_vec();
        log.append(1).unwrap();
        log.buf = b"second".to_vec();
        log.append(1).unwrap();
        let (first, end) = log.read_record(42, 0).unwrap().unwrap();
        assert_eq!(first, b"first");
        let (second, end2) = log.read_record(42, end).unwrap().unwrap();
        assert_eq!(second, b"second");
        assert!(
            log.read_record(42, end2).unwrap().is_none(),
            "zeros end the log"
        );
        assert!(log.read_record(41, 0).unwrap().is_none(), "another tag");
        assert!(
            log.read_record(42, 1).unwrap().is_none(),
            "not a record start"
        );
        assert_eq!(file.len().unwrap(), GROW_BYTES, "grown in one step");
        for at in 0..end2 as usize {
            let copy = MemLog::default();
            let mut bytes = vec![0u8; end2 as usize];
            file.read(0, &mut bytes).unwrap();
            bytes[at] ^= 0x10;
            copy.write(0, &bytes).unwrap();
            let damaged = Log::new(Box::new(copy));
            let whole = |o| damaged.read_record(42, o).unwrap();
            if at < end as usize {
                assert!(whole(0).is_none(), "flip at {at} in the first record");
            } else {
                assert!(whole(0).is_some());
                assert!(whole(end).is_none(), "flip at {at} in the second record");
            }
        }
        // After a checkpoint the log starts over, under the new tag.
        log.reset(43);
        log.buf = b"third".to_vec();
        log.append(1).unwrap();
        assert_eq!(log.read_record(43, 0).unwrap().unwrap().0, b"third");
        assert!(log.read_record(42, 0).unwrap().is_none());
    }
}
