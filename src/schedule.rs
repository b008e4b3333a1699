//! Schedules: recurring items that fire exactly once per slot, on every
//! backend, with no leader (SPEC section 13).
//!
//! A [`Schedule`] is a name, a [`Spec`] (a cron expression in an IANA
//! time zone, or a fixed interval), an item template and two policies
//! ([`CatchUp`], [`Overlap`]). It is stored in the queue like any other
//! record. Whoever runs the queue's timers fires it
//! ([`ScheduleQueue::fire_schedules`](crate::ScheduleQueue::fire_schedules), which
//! a [`Worker`](crate::Worker) calls in its claim loop): the items of the
//! due slots are added in the same transaction (one Lua script on Redis)
//! that moves the schedule's next fire time past them, and that
//! transaction only commits if the schedule is still the one the firer
//! read, so two firers, or a crash between the two steps, can never make
//! two items for one slot or none.
//!
//! # Examples
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> workjournal::Result<()> {
//! use std::time::Duration;
//! use workjournal::{MemoryQueue, Config, Schedule, ScheduleQueue};
//!
//! let queue = MemoryQueue::new(Config::default());
//! let every_minute = Schedule::every("heartbeat", Duration::from_secs(60))?
//!     .payload(b"ping".to_vec())
//!     .flow("health");
//! assert!(queue.upsert_schedule(every_minute).await?);
//! let listed = queue.schedules().await?;
//! assert_eq!(listed[0].schedule.name(), "heartbeat");
//! # Ok(())
//! # }
//! ```

use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::item::NewItem;

#[cfg(feature = "cron")]
mod cron;
pub(crate) mod fire;
mod queue;

pub use queue::ScheduleQueue;

/// The longest schedule name, in bytes (SPEC 13).
pub const MAX_SCHEDULE_NAME_BYTES: usize = 256;

/// How late a slot may fire under [`CatchUp::Skip`] and still count as on
/// time, in ms (SPEC 13, Catch-up): a slot older than this when the queue
/// gets to it was missed.
pub const SCHEDULE_SKIP_GRACE_MS: u64 = 1_000;

/// The most fire times [`ScheduleQueue::preview_schedule`](crate::ScheduleQueue::preview_schedule)
/// returns in one call.
pub const MAX_SCHEDULE_PREVIEW: usize = 1_000;

/// The shortest interval of [`Spec::Every`], in ms.
pub const MIN_SCHEDULE_EVERY_MS: u64 = 1;

/// When a schedule's slots are (SPEC 13, Specs).
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum Spec {
    /// A cron expression of 5 fields (minute, hour, day of month, month,
    /// day of week) or 6 (seconds first), read as wall-clock time in the
    /// IANA time zone `tz` (`"UTC"`, `"Europe/Berlin"`). Needs the `cron`
    /// feature.
    Cron {
        /// The expression, e.g. `"30 2 * * *"` (02:30 every day).
        expr: String,
        /// The IANA time zone name.
        tz: String,
    },
    /// Every `every_ms` milliseconds, counted from the schedule's start
    /// (or from the Unix epoch without one): `every 30s` fires at :00 and
    /// :30 of every minute.
    Every {
        /// The interval, ms (at least [`MIN_SCHEDULE_EVERY_MS`]).
        every_ms: u64,
    },
}

/// What a schedule does with slots it missed (the queue was down, or
/// nothing ran its timers): SPEC 13, Catch-up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum CatchUp {
    /// Missed slots make nothing: the latest due slot fires only if it is
    /// at most [`SCHEDULE_SKIP_GRACE_MS`] old, and the schedule goes on with the
    /// next future slot.
    Skip,
    /// One item for the latest missed slot (the default).
    #[default]
    Latest,
    /// One item per missed slot, oldest first, at most `cap` of the most
    /// recent ones (older ones are skipped).
    All {
        /// The most items one catch-up makes (at least 1).
        cap: u32,
    },
}

/// What a schedule does when its previous slot's item is not finished
/// yet (SPEC 13, Overlap).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
pub enum Overlap {
    /// Every slot makes its item, whatever the previous one's state (the
    /// default).
    #[default]
    Allow,
    /// A slot whose previous item is still in the queue (not acked, not
    /// dead-lettered, not removed) makes nothing and counts as skipped.
    Skip,
}

/// A recurring item: a name, a [`Spec`], an item template and policies
/// (SPEC 13). Build one with [`Schedule::cron`] or [`Schedule::every`] and
/// the builder methods; store it with
/// [`ScheduleQueue::upsert_schedule`](crate::ScheduleQueue::upsert_schedule).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Schedule {
    name: String,
    spec: Spec,
    flow: String,
    payload: Vec<u8>,
    priority: u8,
    cost: u32,
    catch_up: CatchUp,
    overlap: Overlap,
    start_ms: Option<u64>,
    end_ms: Option<u64>,
    limit: Option<u64>,
}

impl Schedule {
    /// A schedule named `name` firing on the cron expression `expr` (5
    /// fields, or 6 with seconds first) in the IANA time zone `tz`.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or too long name, an
    /// expression or time zone that does not parse, or a build without the
    /// `cron` feature.
    pub fn cron(
        name: impl Into<String>,
        expr: impl Into<String>,
        tz: impl Into<String>,
    ) -> Result<Self> {
        Schedule::new(
            name.into(),
            Spec::Cron {
                expr: expr.into(),
                tz: tz.into(),
            },
        )
    }

    /// A schedule named `name` firing every `every` (whole milliseconds),
    /// counted from its start or from the Unix epoch.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] for an empty or too long name or an interval
    /// under [`MIN_SCHEDULE_EVERY_MS`].
    pub fn every(name: impl Into<String>, every: Duration) -> Result<Self> {
        let every_ms = u64::try_from(every.as_millis()).unwrap_or(u64::MAX);
        Schedule::new(name.into(), Spec::Every { every_ms })
    }

    /// A schedule named `name` with `spec` and its optional start (the
    /// anchor of [`Spec::Every`]); the wire's and the command's way in.
    ///
    /// # Errors
    ///
    /// As [`Schedule::cron`] and [`Schedule::every`].
    pub fn with_spec(name: impl Into<String>, spec: Spec, start_ms: Option<u64>) -> Result<Self> {
        let mut s = Schedule::new(name.into(), spec)?;
        s.start_ms = start_ms;
        s.check()?;
        Ok(s)
    }

    /// A schedule as the wire carries it, not checked: the queue checks
    /// it at upsert, and a list read back from a server of another build
    /// should not fail on a spec this build cannot compute.
    #[cfg_attr(
        not(any(feature = "remote", feature = "server", feature = "testing")),
        allow(dead_code)
    )]
    pub(crate) fn unchecked(name: String, spec: Spec, start_ms: Option<u64>) -> Self {
        Schedule {
            name,
            spec,
            flow: String::new(),
            payload: Vec::new(),
            priority: 0,
            cost: 1,
            catch_up: CatchUp::default(),
            overlap: Overlap::default(),
            start_ms,
            end_ms: None,
            limit: None,
        }
    }

    fn new(name: String, spec: Spec) -> Result<Self> {
        let s = Schedule {
            name,
            spec,
            flow: String::new(),
            payload: Vec::new(),
            priority: 0,
            cost: 1,
            catch_up: CatchUp::default(),
            overlap: Overlap::default(),
            start_ms: None,
            end_ms: None,
            limit: None,
        };
        s.check()?;
        Ok(s)
    }

    /// The payload of every item the schedule makes. Default: empty.
    pub fn payload(mut self, payload: impl Into<Vec<u8>>) -> Self {
        self.payload = payload.into();
        self
    }

    /// The flow of every item the schedule makes. Default: `""`.
    pub fn flow(mut self, flow: impl Into<String>) -> Self {
        self.flow = flow.into();
        self
    }

    /// The priority tier of its items (SPEC 3, Priority). Default: 0.
    pub fn priority(mut self, tier: u8) -> Self {
        self.priority = tier;
        self
    }

    /// The rate-limit cost of its items in permits (SPEC 3, Flow limits).
    /// Default: 1; 0 is taken as 1.
    pub fn cost(mut self, permits: u32) -> Self {
        self.cost = permits.max(1);
        self
    }

    /// The catch-up policy. Default: [`CatchUp::Latest`].
    pub fn catch_up(mut self, policy: CatchUp) -> Self {
        self.catch_up = match policy {
            CatchUp::All { cap } => CatchUp::All { cap: cap.max(1) },
            p => p,
        };
        self
    }

    /// The overlap policy. Default: [`Overlap::Allow`].
    pub fn overlap(mut self, policy: Overlap) -> Self {
        self.overlap = policy;
        self
    }

    /// No slot before `ms` (ms since the Unix epoch); for
    /// [`Spec::Every`] the slots count from it. Default: none.
    pub fn start_ms(mut self, ms: u64) -> Self {
        self.start_ms = Some(ms);
        self
    }

    /// No slot after `ms` (ms since the Unix epoch). Default: none.
    pub fn end_ms(mut self, ms: u64) -> Self {
        self.end_ms = Some(ms);
        self
    }

    /// At most `runs` items in the schedule's life, then it stops.
    /// Default: none.
    pub fn limit(mut self, runs: u64) -> Self {
        self.limit = Some(runs);
        self
    }

    /// The name, unique within the queue.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// When the slots are.
    pub fn spec(&self) -> &Spec {
        &self.spec
    }

    /// The flow of its items.
    pub fn get_flow(&self) -> &str {
        &self.flow
    }

    /// The payload of its items.
    pub fn get_payload(&self) -> &[u8] {
        &self.payload
    }

    /// The priority tier of its items.
    pub fn get_priority(&self) -> u8 {
        self.priority
    }

    /// The cost of its items, in permits.
    pub fn get_cost(&self) -> u32 {
        self.cost.max(1)
    }

    /// The catch-up policy.
    pub fn get_catch_up(&self) -> CatchUp {
        self.catch_up
    }

    /// The overlap policy.
    pub fn get_overlap(&self) -> Overlap {
        self.overlap
    }

    /// The first allowed slot time, if any (ms since the Unix epoch).
    pub fn get_start_ms(&self) -> Option<u64> {
        self.start_ms
    }

    /// The last allowed slot time, if any (ms since the Unix epoch).
    pub fn get_end_ms(&self) -> Option<u64> {
        self.end_ms
    }

    /// The most items the schedule makes in its life, if limited.
    pub fn get_limit(&self) -> Option<u64> {
        self.limit
    }

    /// Check what a builder cannot: the name, the interval, the cron
    /// expression and its time zone.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] saying what is wrong.
    pub(crate) fn check(&self) -> Result<()> {
        if self.name.is_empty() {
            return Err(Error::invalid("a schedule needs a name"));
        }
        if self.name.len() > MAX_SCHEDULE_NAME_BYTES {
            return Err(Error::invalid(format!(
                "schedule name is {} bytes; the most is {MAX_SCHEDULE_NAME_BYTES}",
                self.name.len()
            )));
        }
        // The template must make a valid item (a flow name the queue
        // takes); its payload's size is checked by each firing, against
        // the queue's own limit.
        crate::item::check_new_item(&self.item(), usize::MAX)?;
        self.slots().map(|_| ())
    }

    /// The slot calculator of the spec.
    pub(crate) fn slots(&self) -> Result<Slots> {
        let inner = match &self.spec {
            Spec::Every { every_ms } => {
                if *every_ms < MIN_SCHEDULE_EVERY_MS {
                    return Err(Error::invalid(format!(
                        "a schedule interval must be at least {MIN_SCHEDULE_EVERY_MS} ms"
                    )));
                }
                SlotsInner::Every {
                    every_ms: *every_ms,
                    anchor_ms: self.start_ms.unwrap_or(0),
                }
            }
            #[cfg(feature = "cron")]
            Spec::Cron { expr, tz } => {
                SlotsInner::Cron(Box::new(cron::CronSlots::parse(expr, tz)?))
            }
            #[cfg(not(feature = "cron"))]
            Spec::Cron { .. } => {
                return Err(Error::invalid(
                    "cron schedules need workjournal's `cron` feature",
                ));
            }
        };
        Ok(Slots {
            inner,
            start_ms: self.start_ms.unwrap_or(0),
            end_ms: self.end_ms.unwrap_or(u64::MAX),
        })
    }

    /// The next `count` fire times at or after `from_ms` (ms since the
    /// Unix epoch), at most [`MAX_SCHEDULE_PREVIEW`], ignoring the run limit.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidInput`] as [`Schedule::cron`].
    pub fn fire_times(&self, from_ms: u64, count: usize) -> Result<Vec<u64>> {
        let slots = self.slots()?;
        let mut out = Vec::new();
        let mut at = from_ms;
        while out.len() < count.min(MAX_SCHEDULE_PREVIEW) {
            match slots.first_at_or_after(at)? {
                Some(t) => {
                    out.push(t);
                    at = match t.checked_add(1) {
                        Some(a) => a,
                        None => break,
                    };
                }
                None => break,
            }
        }
        Ok(out)
    }

    /// The item every slot makes (the firer delays it until its slot, so
    /// its `not_before_ms` is the slot time).
    pub(crate) fn item(&self) -> NewItem {
        NewItem::new(self.payload.clone())
            .flow(self.flow.clone())
            .priority(self.priority)
            .cost(self.cost)
    }
}

/// One schedule as the queue holds it, with its progress (SPEC 13,
/// Listing).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[non_exhaustive]
pub struct ScheduleInfo {
    /// The schedule as last upserted.
    pub schedule: Schedule,
    /// The next slot that will fire (ms since the Unix epoch); `None`
    /// once it has ended (end time or run limit passed).
    pub next_fire_ms: Option<u64>,
    /// The latest slot that made an item, if any (ms since the Unix epoch).
    pub last_fired_ms: Option<u64>,
    /// The id of the latest item it made, if any.
    pub last_item: Option<u64>,
    /// Items made, ever.
    pub fired: u64,
    /// Slots that made nothing: missed under the catch-up policy, or
    /// skipped under [`Overlap::Skip`].
    pub skipped: u64,
    /// Paused: no slot fires until it is resumed.
    pub paused: bool,
}

/// What one [`ScheduleQueue::fire_schedules`](crate::ScheduleQueue::fire_schedules)
/// did.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
#[non_exhaustive]
pub struct Fired {
    /// Items made.
    pub items: u64,
    /// The soonest next fire time of any schedule that is not paused (ms
    /// since the Unix epoch), if any: when to call again.
    pub next_fire_ms: Option<u64>,
    /// Each schedule that made items in this call.
    pub schedules: Vec<FiredSchedule>,
}

/// One schedule's part of a [`Fired`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FiredSchedule {
    /// The schedule's name.
    pub name: String,
    /// Items it made.
    pub items: u64,
    /// How late its latest slot fired: the queue's clock at the firing
    /// minus the slot time, ms (SPEC 13; the item is claimable from the
    /// firing's commit on).
    pub lateness_ms: u64,
}

impl FiredSchedule {
    /// A schedule's part of a firing.
    pub fn new(name: String, items: u64, lateness_ms: u64) -> Self {
        FiredSchedule {
            name,
            items,
            lateness_ms,
        }
    }
}

impl Fired {
    /// A report of `items` made and the soonest next fire time.
    pub fn new(items: u64, next_fire_ms: Option<u64>) -> Self {
        Fired {
            items,
            next_fire_ms,
            schedules: Vec::new(),
        }
    }

    /// With each schedule's part.
    pub fn with_schedules(mut self, schedules: Vec<FiredSchedule>) -> Self {
        self.schedules = schedules;
        self
    }
}

/// The longest pause of a firer after failures in a row.
const MAX_FIRE_BACK_OFF: Duration = Duration::from_secs(60);

/// Fire `queue`'s schedules at their slots until the future is dropped
/// (SPEC 13): what a worker and `serve` run. Sleeps until the soonest next
/// fire time (to its instant, on the system clock's precise sleep),
/// re-reading at least every `cap`, so a schedule another handle adds is
/// seen. Any number of firers may run at once: each slot fires once.
/// Errors go to `on_error` with the operation's name, and the loop tries
/// again after `cap`, doubling the pause with each failure in a row up to
/// a minute (a backend without schedules, e.g. an older server, fails
/// every time and is asked once a minute).
pub(crate) async fn fire_loop<Q: crate::WorkQueue>(
    queue: &Q,
    cap: Duration,
    on_error: impl Fn(&'static str, &Error),
) {
    use crate::clock::Clock as _;
    let mut failures: u32 = 0;
    loop {
        let failed = |failures: &mut u32| {
            *failures = failures.saturating_add(1);
            cap.saturating_mul(1 << (*failures).min(16))
                .min(MAX_FIRE_BACK_OFF.max(cap))
        };
        let pause = match queue.fire_schedules().await {
            Ok(fired) => match (fired.next_fire_ms, queue.now_ms().await) {
                // Due already: more was due than one call fires, or a
                // firing lost a race; go again, but never spin.
                (Some(t), Ok(now)) if t <= now => {
                    failures = 0;
                    if fired.items > 0 {
                        continue;
                    }
                    Duration::from_millis(1)
                }
                (Some(t), Ok(now)) => {
                    failures = 0;
                    Duration::from_millis(t - now).min(cap)
                }
                (None, Ok(_)) => {
                    failures = 0;
                    cap
                }
                (_, Err(e)) => {
                    on_error("now", &e);
                    failed(&mut failures)
                }
            },
            Err(e) => {
                on_error("fire_schedules", &e);
                failed(&mut failures)
            }
        };
        // The queue's clock may be another host's (Redis TIME) or a
        // test's: the pause is a span, slept to its instant here.
        let wake_at = crate::clock::system_now_ms()
            .saturating_add(u64::try_from(pause.as_millis()).unwrap_or(u64::MAX));
        crate::clock::SystemClock.sleep_until(wake_at).await;
    }
}

/// The slot times of one spec within a schedule's start and end.
pub(crate) struct Slots {
    inner: SlotsInner,
    start_ms: u64,
    end_ms: u64,
}

enum SlotsInner {
    Every {
        every_ms: u64,
        anchor_ms: u64,
    },
    #[cfg(feature = "cron")]
    Cron(Box<cron::CronSlots>),
}

impl Slots {
    /// The first slot at or after `t` (ms), within start and end.
    pub(crate) fn first_at_or_after(&self, t: u64) -> Result<Option<u64>> {
        let t = t.max(self.start_ms);
        let s = match &self.inner {
            SlotsInner::Every {
                every_ms,
                anchor_ms,
            } => {
                if t <= *anchor_ms {
                    Some(*anchor_ms)
                } else {
                    let k = (t - anchor_ms).div_ceil(*every_ms);
                    k.checked_mul(*every_ms)
                        .and_then(|d| d.checked_add(*anchor_ms))
                }
            }
            #[cfg(feature = "cron")]
            SlotsInner::Cron(c) => c.first_at_or_after(t)?,
        };
        Ok(s.filter(|s| *s <= self.end_ms))
    }

    /// The last slot at or before `t` (ms), within start and end.
    pub(crate) fn last_at_or_before(&self, t: u64) -> Result<Option<u64>> {
        let t = t.min(self.end_ms);
        let s = match &self.inner {
            SlotsInner::Every {
                every_ms,
                anchor_ms,
            } => {
                if t < *anchor_ms {
                    None
                } else {
                    Some(anchor_ms + (t - anchor_ms) / every_ms * every_ms)
                }
            }
            #[cfg(feature = "cron")]
            SlotsInner::Cron(_) => self.last_by_windows(t)?,
        };
        Ok(s.filter(|s| *s >= self.start_ms))
    }

    /// The last slot at or before `t` by forward walks over windows that
    /// end at `t` and double from 2 s (a slot each second is found in one
    /// short walk, a yearly one in a few dozen), back to the start or
    /// about 2 years.
    #[cfg(feature = "cron")]
    fn last_by_windows(&self, t: u64) -> Result<Option<u64>> {
        const MAX_WINDOW_MS: u64 = 1 << 36;
        let mut window: u64 = 2_000;
        loop {
            let from = t.saturating_sub(window).max(self.start_ms);
            let mut last = None;
            let mut at = from;
            while let Some(s) = self.first_at_or_after(at)? {
                if s > t {
                    break;
                }
                last = Some(s);
                at = s + 1;
            }
            if last.is_some() || from <= self.start_ms || window >= MAX_WINDOW_MS {
                return Ok(last);
            }
            window *= 2;
        }
    }
}
