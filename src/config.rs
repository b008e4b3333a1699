//! Configuration shared by every backend, with the defaults of SPEC section 7.

use std::sync::Arc;
use std::time::Duration;

use crate::clock::{Clock, SharedClock};

/// Limits and time rules of a queue (SPEC section 7). Backend-specific
/// settings (file durability, Redis replicas) live in each backend's options.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::Config;
/// let config = Config::default().max_deliveries(5).dedup_window(Duration::from_secs(60));
/// assert_eq!(config.get_max_deliveries(), 5);
/// ```
#[derive(Debug, Clone)]
pub struct Config {
    pub(crate) max_deliveries: u32,
    pub(crate) done_ttl: Duration,
    pub(crate) result_ttl: Duration,
    pub(crate) dedup_window: Duration,
    pub(crate) dead_letter_cap: u64,
    pub(crate) max_backlog: Option<u64>,
    pub(crate) max_payload_bytes: usize,
    pub(crate) aging_step: Duration,
    pub(crate) completed_retention: Retention,
    pub(crate) cancelled_retention: Retention,
    pub(crate) clock: Option<SharedClock>,
}

/// Default of [`Config::max_deliveries`].
pub const DEFAULT_MAX_DELIVERIES: u32 = 3;
/// Default of [`Config::done_ttl`]: 1 hour.
pub const DEFAULT_DONE_TTL: Duration = Duration::from_secs(3600);
/// Default of [`Config::result_ttl`]: 1 hour.
pub const DEFAULT_RESULT_TTL: Duration = Duration::from_secs(3600);
/// Default of [`Config::dedup_window`]: 5 minutes.
pub const DEFAULT_DEDUP_WINDOW: Duration = Duration::from_secs(300);
/// Default of [`Config::dead_letter_cap`], in dead letters.
pub const DEFAULT_DEAD_LETTER_CAP: u64 = 10_000;
/// Default of [`Config::max_payload_bytes`]: 16 MiB.
pub const DEFAULT_MAX_PAYLOAD_BYTES: usize = 16 * 1024 * 1024;
/// Default of [`Config::aging_step`]: 60 s of waiting per priority tier.
pub const DEFAULT_AGING_STEP: Duration = Duration::from_secs(60);
/// Largest [`Config::aging_step`] honoured, about 12 days: tier x step then
/// stays exact in every backend (Redis scores are doubles).
pub const MAX_AGING_STEP: Duration = Duration::from_millis(1 << 30);
/// Default of [`Config::completed_retention`] and
/// [`Config::cancelled_retention`]: the latest 1 000 finished items of
/// each state, for at most 24 hours (SPEC 3, History).
pub const DEFAULT_RETENTION: Retention = Retention::new(1_000, Duration::from_secs(24 * 3600));
/// The most finished items of one state a [`Retention`] keeps: a larger
/// count is lowered to it (SPEC 3, History).
pub const MAX_RETENTION_COUNT: u64 = 1_000_000;

/// How many finished items of one state a queue keeps, and for how long
/// (SPEC 3, History): the latest `count` that finished at most `age` ago,
/// by the queue's clock. Either of them zero keeps none.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::{Config, Retention};
/// let config = Config::default()
///     .completed_retention(Retention::new(100, Duration::from_secs(600)))
///     .cancelled_retention(Retention::none());
/// assert_eq!(config.get_completed_retention().count(), 100);
/// assert!(!config.get_cancelled_retention().keeps());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Retention {
    count: u64,
    age: Duration,
}

impl Retention {
    /// Keep the latest `count` finished items (at most
    /// [`MAX_RETENTION_COUNT`]; a larger count is lowered to it) for `age`
    /// after each finished (whole milliseconds).
    pub const fn new(count: u64, age: Duration) -> Self {
        Retention {
            count: if count > MAX_RETENTION_COUNT {
                MAX_RETENTION_COUNT
            } else {
                count
            },
            age,
        }
    }

    /// Keep no finished item of the state.
    pub const fn none() -> Self {
        Retention::new(0, Duration::ZERO)
    }

    /// How many finished items are kept at most.
    pub fn count(&self) -> u64 {
        self.count
    }

    /// How long each is kept after it finished.
    pub fn age(&self) -> Duration {
        self.age
    }

    /// Whether any finished item is kept (a count and an age of at least
    /// 1 ms).
    pub fn keeps(&self) -> bool {
        self.count > 0 && self.age_ms() > 0
    }

    /// The age in ms, saturating.
    pub(crate) fn age_ms(&self) -> u64 {
        ms(self.age)
    }

    /// How many items past the count a state may hold before a finish
    /// trims it back to the count (1/8 of the count, 16 to 4 096): the
    /// trim then deletes a run of rows at once instead of one row per
    /// finish. Reads show at most the count, so the slack is never seen.
    /// (The memory backend trims exactly.)
    #[cfg(any(feature = "embedded", feature = "redis"))]
    pub(crate) fn slack(&self) -> u64 {
        (self.count / 8).clamp(16, 4096)
    }

    /// Whether an item that finished at `finished_ms` is still kept at
    /// `now_ms`.
    pub(crate) fn alive(&self, finished_ms: u64, now_ms: u64) -> bool {
        finished_ms.saturating_add(self.age_ms()) > now_ms
    }
}

/// How many done markers the memory backend keeps at most (oldest dropped
/// first).
pub const MEMORY_DONE_MARKER_CAP: usize = 10_000;

impl Default for Config {
    fn default() -> Self {
        Config {
            max_deliveries: DEFAULT_MAX_DELIVERIES,
            done_ttl: DEFAULT_DONE_TTL,
            result_ttl: DEFAULT_RESULT_TTL,
            dedup_window: DEFAULT_DEDUP_WINDOW,
            dead_letter_cap: DEFAULT_DEAD_LETTER_CAP,
            max_backlog: None,
            max_payload_bytes: DEFAULT_MAX_PAYLOAD_BYTES,
            aging_step: DEFAULT_AGING_STEP,
            completed_retention: DEFAULT_RETENTION,
            cancelled_retention: DEFAULT_RETENTION,
            clock: None,
        }
    }
}

impl Config {
    /// How many deliveries an item may have before a retry or reclaim
    /// dead-letters it instead. Default: 3. A value of 0 is treated as 1.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = n.max(1);
        self
    }

    /// How long a done marker lives, by the queue's clock. Default: 1 hour.
    pub fn done_ttl(mut self, ttl: Duration) -> Self {
        self.done_ttl = ttl;
        self
    }

    /// How long an item's outcome (and its progress and chunks) is kept
    /// after it was acked or dead-lettered, by the queue's clock (SPEC 3,
    /// Outcomes and progress). Default: 1 hour. Zero keeps no outcomes: waits then run
    /// out. Keep it at least `dedup_window` so that a retried request (a
    /// duplicate add) can still read the first item's outcome.
    pub fn result_ttl(mut self, ttl: Duration) -> Self {
        self.result_ttl = ttl;
        self
    }

    /// How long after the first add a dedup key makes later adds duplicates.
    /// Default: 5 minutes.
    pub fn dedup_window(mut self, window: Duration) -> Self {
        self.dedup_window = window;
        self
    }

    /// How many dead letters are kept; past it the oldest is dropped (and the
    /// drop logged). Default: 10 000.
    pub fn dead_letter_cap(mut self, cap: u64) -> Self {
        self.dead_letter_cap = cap;
        self
    }

    /// Refuse adds that would push backlog + due + delayed past `limit`
    /// items, with `Error::Full`. Default: no limit.
    pub fn max_backlog(mut self, limit: Option<u64>) -> Self {
        self.max_backlog = limit;
        self
    }

    /// Largest payload accepted, in bytes; a larger one is
    /// `Error::InvalidInput`. Default: 16 MiB.
    pub fn max_payload_bytes(mut self, bytes: usize) -> Self {
        self.max_payload_bytes = bytes;
        self
    }

    /// How much waiting one priority tier is worth (SPEC section 3,
    /// Priority): the backlog and the due lane are ordered by (arrival
    /// time - tier x `aging_step`, position), so an item of tier 2 runs
    /// before tier-0 items that arrived up to two steps earlier, and never
    /// before those that waited longer (nothing starves). Zero makes every
    /// tier equal (plain FIFO). Default: 60 s; longer than
    /// [`MAX_AGING_STEP`] is treated as that.
    pub fn aging_step(mut self, step: Duration) -> Self {
        self.aging_step = step.min(MAX_AGING_STEP);
        self
    }

    /// How many acked items the queue keeps, and how long, for `list` and
    /// `find` (state `completed`, SPEC 3, History). Default:
    /// [`DEFAULT_RETENTION`].
    pub fn completed_retention(mut self, retention: Retention) -> Self {
        self.completed_retention = retention;
        self
    }

    /// How many cancelled items the queue keeps, and how long, for `list`
    /// and `find` (state `cancelled`, SPEC 3, History). Default:
    /// [`DEFAULT_RETENTION`].
    pub fn cancelled_retention(mut self, retention: Retention) -> Self {
        self.cancelled_retention = retention;
        self
    }

    /// The configured `completed_retention`.
    pub fn get_completed_retention(&self) -> Retention {
        self.completed_retention
    }

    /// The configured `cancelled_retention`.
    pub fn get_cancelled_retention(&self) -> Retention {
        self.cancelled_retention
    }

    /// The configured `aging_step`.
    pub fn get_aging_step(&self) -> Duration {
        self.aging_step
    }

    /// The clock every time rule reads. Default: the system clock for the
    /// memory and embedded backends, the server's `TIME` for Redis.
    pub fn clock(mut self, clock: impl Clock) -> Self {
        self.clock = Some(Arc::new(clock));
        self
    }

    /// The configured `max_deliveries`.
    pub fn get_max_deliveries(&self) -> u32 {
        self.max_deliveries
    }

    /// The configured `done_ttl`.
    pub fn get_done_ttl(&self) -> Duration {
        self.done_ttl
    }

    /// The configured `result_ttl`.
    pub fn get_result_ttl(&self) -> Duration {
        self.result_ttl
    }

    /// The configured `dedup_window`.
    pub fn get_dedup_window(&self) -> Duration {
        self.dedup_window
    }

    /// The configured `dead_letter_cap`, in dead letters.
    pub fn get_dead_letter_cap(&self) -> u64 {
        self.dead_letter_cap
    }

    /// The configured `max_backlog`, in items.
    pub fn get_max_backlog(&self) -> Option<u64> {
        self.max_backlog
    }

    /// The configured `max_payload_bytes`.
    pub fn get_max_payload_bytes(&self) -> usize {
        self.max_payload_bytes
    }

    /// The injected clock, if any.
    pub fn get_clock(&self) -> Option<&SharedClock> {
        self.clock.as_ref()
    }
}

/// Milliseconds in `d`, saturating.
pub(crate) fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// SPEC section 3, Priority: the rank of an item arriving in the backlog or
/// the due lane at `arrival_ms` with priority `tier`: `arrival - tier x
/// aging_step`, as a signed number so that it never saturates near the
/// epoch. Smaller ranks are claimed first; ties go by position.
pub(crate) fn rank(arrival_ms: u64, tier: u8, aging_step: Duration) -> i64 {
    let arrival = i64::try_from(arrival_ms.min(1 << 52)).unwrap_or(1 << 52);
    let step = i64::try_from(ms(aging_step.min(MAX_AGING_STEP))).unwrap_or(1 << 30);
    arrival - i64::from(tier) * step
}

/// SPEC 3, Updating: lane rank `rank` of an item of tier `old` given tier
/// `new` instead, its arrival unchanged (`rank` is arrival - tier x step).
pub(crate) fn rerank(rank_now: i64, old: u8, new: u8, aging_step: Duration) -> i64 {
    rank_now
        .saturating_sub(rank(0, old, aging_step))
        .saturating_add(rank(0, new, aging_step))
}

/// A lane rank moved back by a clock step of `back_ms` (SPEC 3, Clock
/// steps): the rank `rank` gives an arrival `back_ms` earlier, the tier's
/// share unchanged.
pub(crate) fn rank_back(rank: i64, back_ms: u64) -> i64 {
    rank.saturating_sub(i64::try_from(back_ms.min(1 << 52)).unwrap_or(1 << 52))
}
