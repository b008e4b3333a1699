//! The redo log's framing: records appended (each synced before its
//! callers hear back) and read back whole or not at all. A record is a
//! 32-byte header (magic `WJRL`, body length u32, tag u64, the record's own
//! offset u64, xxh3-64 checksum u64 over the header's first 24 bytes and the
//! body; little endian) and the body (module `record`).

use std::io;
use std::sync::{Arc, mpsc};

use super::file::LogFile;
use super::{CHECKPOINT_BYTES, Policy};
use crate::error::{Error, Result};

/// The log grows in steps of this many bytes.
#[cfg(not(fuzzing))]
pub(super) const GROW_BYTES: u64 = 1 << 20;
/// Under cargo-fuzz (`--cfg fuzzing`) the log grows in steps of 64 KiB: the
/// first append of every fuzz input's fresh queue grows its log, and on the
/// simulated disk 1 MiB of zeros (written, kept for a power cut, replayed
/// at the sync) cost more than the rest of a short input. The growth itself
/// (a write of zeros that a power cut may tear) is still there, and a run
/// that logs more than 64 KiB grows the log again.
#[cfg(fuzzing)]
pub(super) const GROW_BYTES: u64 = 64 << 10;
/// A record's header, in bytes.
const HEADER: usize = 32;
const MAGIC: [u8; 4] = *b"WJRL";
/// Largest record body accepted at replay (a header claiming more is torn).
const MAX_BODY: u64 = u32::MAX as u64;

/// The writer's side of the log: where the next record goes and under
/// which tag.
#[derive(Debug)]
pub(in crate::backend::embedded) struct Log {
    file: Arc<dyn LogFile>,
    /// The thread that syncs a record written ahead of its batch's apply
    /// ([`Log::write_ahead`]); started at the first such record.
    syncer: Option<Syncer>,
    /// A record was written by [`Log::write_ahead`] and its sync not yet
    /// collected by [`Log::finish_ahead`].
    ahead: bool,
    /// The tag of the current generation (the `redo_log` of the last
    /// checkpoint); 0 before the first.
    tag: u64,
    /// Where the next record goes.
    pos: u64,
    /// The end of the last record redb's last commit holds (its
    /// `redo_at`): the records from here to `pos` are durable in the log
    /// and applied only in the writer's open transaction, if at all.
    applied: u64,
    /// The file's length as last known.
    len: Option<u64>,
    /// Operations logged since the last checkpoint.
    ops: u64,
    /// An append failed: checkpoint before the next one.
    broken: bool,
    /// A batch of adds of at least this many items is written ahead of its
    /// run ([`Log::write_ahead`]); 0: never.
    ahead_from: usize,
    /// The next record, reused between batches: [`HEADER`] bytes kept for
    /// its header (filled in by the append), then its body. The body is
    /// written in place, so the append copies nothing (a copy into a
    /// fresh vector was 3% of an `add_batch`).
    record: Vec<u8>,
}

/// The thread that syncs the log file for [`Log::write_ahead`]: one `()`
/// asked, one result answered, in order. It ends when the log is dropped
/// (its asking side closes).
#[derive(Debug)]
struct Syncer {
    ask: mpsc::Sender<()>,
    answer: mpsc::Receiver<io::Result<()>>,
}

impl Syncer {
    /// `None` if no thread could be started.
    fn start(file: Arc<dyn LogFile>) -> Option<Self> {
        let (ask, asked) = mpsc::channel::<()>();
        let (answered, answer) = mpsc::channel();
        std::thread::Builder::new()
            .name("workjournal-log-sync".into())
            .spawn(move || {
                for () in asked {
                    if answered.send(file.sync_data()).is_err() {
                        break;
                    }
                }
            })
            .ok()?;
        Some(Syncer { ask, answer })
    }
}

impl Log {
    pub(in crate::backend::embedded) fn new(file: Box<dyn LogFile>) -> Self {
        Log {
            file: Arc::from(file),
            syncer: None,
            ahead: false,
            tag: 0,
            pos: 0,
            applied: 0,
            len: None,
            ops: 0,
            broken: false,
            ahead_from: super::WRITE_AHEAD_FROM,
            record: vec![0; HEADER],
        }
    }

    /// Set [`Log::ahead_from`] (the writer's policy).
    pub(in crate::backend::embedded) fn set_ahead_from(&mut self, items: usize) {
        self.ahead_from = items;
    }

    /// How many items a batch of adds needs to be written ahead of its run.
    pub(in crate::backend::embedded) fn ahead_from(&self) -> usize {
        self.ahead_from
    }

    /// The current generation's tag.
    pub(in crate::backend::embedded) fn tag(&self) -> u64 {
        self.tag
    }

    /// Where the next record goes: the end of the last one appended.
    pub(in crate::backend::embedded) fn pos(&self) -> u64 {
        self.pos
    }

    /// The end of the last record redb has committed (see `applied`).
    pub(in crate::backend::embedded) fn applied(&self) -> u64 {
        self.applied
    }

    /// Whether records were appended that redb has not committed.
    pub(in crate::backend::embedded) fn has_unapplied(&self) -> bool {
        self.applied < self.pos
    }

    /// redb has committed every record appended so far.
    pub(in crate::backend::embedded) fn mark_applied(&mut self) {
        self.applied = self.pos;
    }

    /// After a checkpoint, when nothing has been appended since: give the
    /// file's room back (`compact`, SPEC 3, Removing), so that one large
    /// item does not leave a log of its size behind. Best effort: a log
    /// that cannot shrink keeps its length, and nothing in it is replayed.
    pub(in crate::backend::embedded) fn shrink(&mut self) {
        if self.pos != 0 || self.file.read_only() {
            return;
        }
        match self.file.truncate(0) {
            Ok(()) => self.len = None,
            Err(e) => tracing::debug!(error = %e, "cannot shrink the redo log"),
        }
    }

    /// Whether the log refuses every append (a queue opened read-only).
    pub(in crate::backend::embedded) fn is_read_only(&self) -> bool {
        self.file.read_only()
    }

    /// Whether an append failed since the last checkpoint.
    pub(in crate::backend::embedded) fn is_broken(&self) -> bool {
        self.broken
    }

    /// Begin the next record: its body is what the caller appends to the
    /// vector returned (after the header's room, which it must leave: an
    /// append refuses a record without it).
    pub(in crate::backend::embedded) fn start_record(&mut self) -> &mut Vec<u8> {
        self.record.resize(HEADER, 0);
        &mut self.record
    }

    /// The offset just past the record begun by
    /// [`start_record`](Self::start_record), once appended.
    pub(in crate::backend::embedded) fn record_end(&self) -> u64 {
        self.pos + self.record.len() as u64
    }

    /// Whether a checkpoint is due by size or operation count.
    pub(in crate::backend::embedded) fn checkpoint_due(&self, policy: &Policy) -> bool {
        self.pos >= policy.bytes || self.ops >= policy.ops
    }

    /// Whether anything was logged since the last checkpoint.
    pub(in crate::backend::embedded) fn has_records(&self) -> bool {
        self.pos > 0
    }

    /// A checkpoint under `tag` is durable: write from the start again.
    pub(in crate::backend::embedded) fn reset(&mut self, tag: u64) {
        self.tag = tag;
        self.pos = 0;
        self.applied = 0;
        self.ops = 0;
        self.broken = false;
        if self.record.capacity() > CHECKPOINT_BYTES as usize {
            self.record = vec![0; HEADER];
        }
    }

    /// Append the record begun by [`start_record`](Self::start_record)
    /// (holding operations of [`weight`] `ops` in all) and sync it. On
    /// failure the log is broken until the next checkpoint.
    pub(in crate::backend::embedded) fn append(&mut self, ops: u64) -> io::Result<()> {
        let result = self.try_append();
        match result {
            Ok(()) => {
                self.pos = self.record_end();
                self.ops += ops.max(1);
            }
            Err(_) => self.broken = true,
        }
        result
    }

    /// Write the record begun by [`start_record`](Self::start_record)
    /// and start its sync on the log's sync thread, so that the caller can
    /// apply the record's operations while the disk syncs (SPEC 6,
    /// redo log: a large batch of adds). The record counts as
    /// appended only once [`finish_ahead`](Self::finish_ahead) returns
    /// `Ok`.
    ///
    /// # Errors
    ///
    /// The write's error (the log is then broken, as after a failed
    /// [`append`](Self::append), and no sync is pending).
    pub(in crate::backend::embedded) fn write_ahead(&mut self) -> io::Result<()> {
        // A sync never collected (the batch before panicked between the two
        // calls) must not answer for this record's.
        if std::mem::take(&mut self.ahead)
            && let Some(s) = &self.syncer
            && s.answer.recv().is_err()
        {
            self.syncer = None;
        }
        if let Err(e) = self.try_write() {
            self.broken = true;
            return Err(e);
        }
        self.ahead = true;
        if self.syncer.is_none() {
            // No thread (the system refused one): the sync is made inline
            // by `finish_ahead`.
            self.syncer = Syncer::start(self.file.clone());
        }
        if let Some(s) = &self.syncer
            && s.ask.send(()).is_err()
        {
            self.syncer = None;
        }
        Ok(())
    }

    /// Wait for the sync started by [`write_ahead`](Self::write_ahead):
    /// on `Ok` the record is appended (durable, and counted as `ops`
    /// operations), as by [`append`](Self::append).
    ///
    /// # Errors
    ///
    /// The sync's error; the log is then broken (checkpoint before the
    /// next append), and the record is not counted.
    pub(in crate::backend::embedded) fn finish_ahead(&mut self, ops: u64) -> io::Result<()> {
        if !std::mem::take(&mut self.ahead) {
            return Err(io::Error::other("no redo record was written ahead"));
        }
        let synced = match &self.syncer {
            Some(s) => s.answer.recv().unwrap_or_else(|_| {
                // The thread is gone: sync here (a second sync of the same
                // bytes is harmless).
                self.file.sync_data()
            }),
            None => self.file.sync_data(),
        };
        match synced {
            Ok(()) => {
                self.pos = self.record_end();
                self.ops += ops.max(1);
                Ok(())
            }
            Err(e) => {
                self.broken = true;
                Err(e)
            }
        }
    }

    fn try_append(&mut self) -> io::Result<()> {
        self.try_write()?;
        self.file.sync_data()
    }

    /// Grow the file if the record needs it, then write the record with its
    /// header at `pos` (no sync).
    fn try_write(&mut self) -> io::Result<()> {
        let body = self
            .record
            .len()
            .checked_sub(HEADER)
            .ok_or_else(|| io::Error::other("a redo record without room for its header"))?;
        let body_len =
            u32::try_from(body).map_err(|_| io::Error::other("a redo record over 4 GiB"))?;
        let end = self.record_end();
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
        let (head, body) = self.record.split_at_mut(HEADER);
        head.copy_from_slice(&header(body_len, self.tag, self.pos, body));
        self.file.write(self.pos, &self.record)
    }

    /// The record under `tag` at `offset`, whole, with the offset after
    /// it; `None` where the log ends (a zeroed, torn, bit-flipped or older
    /// record, or the end of the file).
    ///
    /// # Errors
    ///
    /// `Io` if the file cannot be read.
    pub(in crate::backend::embedded) fn read_record(
        &self,
        tag: u64,
        offset: u64,
    ) -> Result<Option<(Vec<u8>, u64)>> {
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
pub(in crate::backend::embedded) fn new_tag() -> u64 {
    fastrand::u64(1..)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::embedded::redo::MemLog;

    /// A log file whose syncs fail while `fail` is set, counting them.
    #[derive(Debug, Default, Clone)]
    struct FailingSync {
        mem: MemLog,
        fail: std::sync::Arc<std::sync::atomic::AtomicBool>,
        syncs: std::sync::Arc<std::sync::atomic::AtomicU64>,
    }

    impl LogFile for FailingSync {
        fn len(&self) -> io::Result<u64> {
            self.mem.len()
        }
        fn read(&self, offset: u64, out: &mut [u8]) -> io::Result<()> {
            self.mem.read(offset, out)
        }
        fn write(&self, offset: u64, data: &[u8]) -> io::Result<()> {
            self.mem.write(offset, data)
        }
        fn sync_data(&self) -> io::Result<()> {
            use std::sync::atomic::Ordering::SeqCst;
            self.syncs.fetch_add(1, SeqCst);
            if self.fail.load(SeqCst) {
                return Err(io::Error::from_raw_os_error(5));
            }
            Ok(())
        }
    }

    // SPEC 6, redo log: a record written ahead counts only once its sync
    // (made on the log's own thread) has answered `Ok`; a failed sync
    // breaks the log and counts nothing.
    #[test]
    fn a_record_written_ahead_counts_once_its_sync_answers() {
        use std::sync::atomic::Ordering::SeqCst;
        let file = FailingSync::default();
        let mut log = Log::new(Box::new(file.clone()));
        log.reset(7);
        log.start_record().extend_from_slice(b"ahead");
        log.write_ahead().unwrap();
        assert_eq!(log.pos(), 0, "not appended before its sync answered");
        log.finish_ahead(3).unwrap();
        let (body, end) = log.read_record(7, 0).unwrap().unwrap();
        assert_eq!(body, b"ahead");
        assert_eq!((log.pos(), log.ops), (end, 3));
        assert_eq!(file.syncs.load(SeqCst), 1);

        file.fail.store(true, SeqCst);
        log.start_record().extend_from_slice(b"lost");
        log.write_ahead().unwrap();
        assert!(log.finish_ahead(1).is_err(), "the sync's error");
        assert!(log.is_broken());
        assert_eq!((log.pos(), log.ops), (end, 3), "nothing counted");
        assert!(log.finish_ahead(1).is_err(), "no second answer");
    }

    // A record written ahead whose sync was never collected (its batch
    // panicked in between) must not lend its answer to the next one.
    #[test]
    fn an_uncollected_sync_does_not_answer_for_the_next_record() {
        use std::sync::atomic::Ordering::SeqCst;
        let file = FailingSync::default();
        let mut log = Log::new(Box::new(file.clone()));
        log.reset(9);
        log.start_record().extend_from_slice(b"abandoned");
        log.write_ahead().unwrap();
        // The first sync answers Ok; the next one must fail.
        while file.syncs.load(SeqCst) == 0 {
            std::thread::yield_now();
        }
        file.fail.store(true, SeqCst);
        log.start_record().extend_from_slice(b"next");
        log.write_ahead().unwrap();
        assert!(
            log.finish_ahead(1).is_err(),
            "the abandoned record's Ok answered for this one"
        );
        assert_eq!(file.syncs.load(SeqCst), 2);
    }

    #[test]
    fn a_record_reads_back_only_whole_and_under_its_tag() {
        let file = MemLog::default();
        let mut log = Log::new(Box::new(file.clone()));
        log.reset(42);
        log.start_record().extend_from_slice(b"first");
        log.append(1).unwrap();
        log.start_record().extend_from_slice(b"second");
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
        log.start_record().extend_from_slice(b"third");
        log.append(1).unwrap();
        assert_eq!(log.read_record(43, 0).unwrap().unwrap().0, b"third");
        assert!(log.read_record(42, 0).unwrap().is_none());
    }

    #[test]
    fn a_record_without_its_header_room_is_refused_and_writes_nothing() {
        let file = MemLog::default();
        let mut log = Log::new(Box::new(file.clone()));
        log.reset(7);
        log.start_record().clear();
        assert!(log.append(1).is_err());
        assert!(log.is_broken(), "a failed append breaks the log");
        assert_eq!(log.pos(), 0);
        assert_eq!(file.len().unwrap(), 0, "nothing written");
        // The next record starts with its room again.
        log.reset(8);
        log.start_record().extend_from_slice(b"next");
        log.append(1).unwrap();
        assert_eq!(log.read_record(8, 0).unwrap().unwrap().0, b"next");
    }
}
