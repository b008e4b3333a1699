//! The settings of the embedded backend (SPEC section 7).

use std::time::Duration;

use super::redo;

/// How long a full verification of the file holds by default: one day.
const DEFAULT_VERIFY_INTERVAL: Duration = Duration::from_secs(24 * 60 * 60);

/// Settings of the embedded backend only (SPEC section 7). Every write that
/// returns `Ok` has been fsynced (in the redo log); there is no weaker
/// mode.
#[derive(Debug, Clone)]
pub struct EmbeddedOptions {
    /// How often an open verifies the whole file (SPEC 6, Verification):
    /// `Some(ZERO)` at every open, `None` never by schedule.
    pub(super) verify_interval: Option<Duration>,
    pub(super) cache_size_bytes: usize,
    pub(super) read_only: bool,
    pub(super) checkpoint: redo::Policy,
    pub(super) orphan_claims: bool,
    #[cfg(feature = "testing")]
    refuse_hard_links: bool,
}

impl Default for EmbeddedOptions {
    fn default() -> Self {
        EmbeddedOptions {
            verify_interval: Some(DEFAULT_VERIFY_INTERVAL),
            cache_size_bytes: 64 * 1024 * 1024,
            read_only: false,
            checkpoint: redo::Policy::default(),
            orphan_claims: true,
            #[cfg(feature = "testing")]
            refuse_hard_links: false,
        }
    }
}

impl EmbeddedOptions {
    /// Fault hook (test support, feature `testing`): creating a new file
    /// acts as on a file system that refuses hard links (FAT/exFAT, some
    /// FUSE mounts), so that tests reach the fallback on any disk.
    #[cfg(feature = "testing")]
    #[doc(hidden)]
    pub fn refuse_hard_links(mut self, refuse: bool) -> Self {
        self.refuse_hard_links = refuse;
        self
    }

    #[cfg(feature = "testing")]
    pub(super) fn refuses_hard_links(&self) -> bool {
        self.refuse_hard_links
    }

    #[cfg(not(feature = "testing"))]
    pub(super) fn refuses_hard_links(&self) -> bool {
        false
    }

    /// Verify the whole file (every page checksum, and redb's allocator
    /// state rebuilt from the trees) at every open, so that damage made
    /// outside redb fails the open with `Error::Corrupt` (or is repaired)
    /// before any item is read: `true` is [`EmbeddedOptions::verify_interval`]
    /// of zero; `false` never verifies by schedule (only after evidence of
    /// damage). Costs one read of the whole file per open: about 170 ms for
    /// 1M items. Default: neither; the file is verified once a day (SPEC 6,
    /// Verification).
    pub fn verify_on_open(mut self, verify: bool) -> Self {
        self.verify_interval = verify.then_some(Duration::ZERO);
        self
    }

    /// Verify the whole file at the first open once the last full
    /// verification is older than `interval` (or lies ahead of the system
    /// clock, or was never made); between, an open trusts the file and a
    /// page damaged outside redb is found when an operation reads it
    /// (`Error::Corrupt`) or at the next verification (SPEC 6,
    /// Verification). A caught redb panic, and an open that did not finish
    /// (its marker file `NAME-opening` is still there), make the next open
    /// verify whatever the interval. Zero: at every open. Default: 24 h.
    pub fn verify_interval(mut self, interval: Duration) -> Self {
        self.verify_interval = Some(interval);
        self
    }

    /// Checkpoint the redo log once it holds this many bytes (SPEC 6, the
    /// redo log): the log's size bound. At least 1. Default: 4 MiB.
    pub fn checkpoint_bytes(mut self, bytes: u64) -> Self {
        self.checkpoint.bytes = bytes.max(1);
        self
    }

    /// Checkpoint the redo log once it holds this many operations (an add
    /// of n items, an ack or touch of n receipts and a claim of count n
    /// count n each): bounds the replay at an open after a crash, each
    /// costing about as much as the operation did. At least 1. Default:
    /// 8192.
    pub fn checkpoint_ops(mut self, ops: u64) -> Self {
        self.checkpoint.ops = ops.max(1);
        self
    }

    /// Write the redo record of a batch of adds holding at least this many
    /// items (in all, across the callers whose adds share one commit)
    /// before the adds run, and sync it while they apply (SPEC 6, redo
    /// log): the batch then costs about the larger of the two rather than
    /// their sum. The adds must all be able to succeed (valid items, room
    /// under `max_backlog` for every one); a batch that cannot promise that
    /// runs first and is logged after, as a smaller one is. A failed write
    /// or sync fails the adds with `Io` and keeps nothing of them. 0 turns
    /// it off. Default: 32.
    pub fn write_ahead_from(mut self, items: usize) -> Self {
        self.checkpoint.ahead_from = items;
        self
    }

    /// Checkpoint the redo log after a write once the last checkpoint is
    /// this old. Default: 2 s.
    pub fn checkpoint_interval(mut self, interval: Duration) -> Self {
        self.checkpoint.interval = interval;
        self
    }

    /// redb's page cache, in bytes. Default: 64 MiB.
    pub fn cache_size_bytes(mut self, bytes: usize) -> Self {
        self.cache_size_bytes = bytes;
        self
    }

    /// Open an existing file for looking only, never writing it: it needs
    /// only read permission, works on a read-only mount, and is shared with
    /// other read-only handles but not with a writer (`Locked` either way).
    /// Reads (`stats`, `peek`, `dead_letters`, `paused_flows`, `parked`,
    /// `next_due`, `was_done`, `backlog_by_flow`) see the file as it was at
    /// open; every other operation, `compact` and blocking claims included,
    /// fails with `InvalidInput` (SPEC section 9). A missing file is `Io`
    /// (not found), never created. Default: false.
    pub fn read_only(mut self, read_only: bool) -> Self {
        self.read_only = read_only;
        self
    }

    /// Whether this open takes every claim pending in the file for one of
    /// a process that is gone, stale whatever `min_idle` until touched
    /// (SPEC 3, Crash recovery). Default: true. A handle that takes the
    /// file over from the process that served it (SPEC 10, Take-over)
    /// opens with false: that server's clients are alive and keep touching
    /// their claims, which go stale `min_idle` after their last touch like
    /// any other (the old owner's own claims among them).
    pub fn orphan_claims(mut self, orphan: bool) -> Self {
        self.orphan_claims = orphan;
        self
    }
}
