//! The queue's clock (SPEC section 2, clock): milliseconds since the Unix
//! epoch, injectable so tests get the same answers from every backend.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use tokio::sync::watch;

/// A future that resolves when the clock reaches a deadline.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A source of time for every time rule of the queue: delays, idle times,
/// TTLs, ages.
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// Now, in milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;

    /// A future that resolves once [`Clock::now_ms`] is at least
    /// `deadline_ms`. Used by blocking claims to wake when a timer comes due.
    fn sleep_until(&self, deadline_ms: u64) -> Sleep;
}

/// The system clock (`SystemTime`), the default of the memory and embedded
/// backends.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        system_now_ms()
    }

    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        let wait = deadline_ms.saturating_sub(self.now_ms());
        Box::pin(tokio::time::sleep(Duration::from_millis(wait)))
    }
}

/// Milliseconds since the Unix epoch by the system clock (0 before 1970).
pub(crate) fn system_now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// A clock that moves only when told to. Clones share one time.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::{Clock, ManualClock};
/// let clock = ManualClock::new(1_000);
/// clock.advance(Duration::from_secs(2));
/// assert_eq!(clock.now_ms(), 3_000);
/// ```
#[derive(Clone)]
pub struct ManualClock {
    now: Arc<watch::Sender<u64>>,
}

impl fmt::Debug for ManualClock {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("ManualClock")
            .field("now_ms", &self.now_ms())
            .finish()
    }
}

impl ManualClock {
    /// A clock that reads `start_ms` (ms since the Unix epoch) until moved.
    pub fn new(start_ms: u64) -> Self {
        let (tx, _) = watch::channel(start_ms);
        ManualClock { now: Arc::new(tx) }
    }

    /// Move the clock forward by `by` (saturating at `u64::MAX` ms) and wake
    /// every sleeper whose deadline has come.
    pub fn advance(&self, by: Duration) {
        let by = u64::try_from(by.as_millis()).unwrap_or(u64::MAX);
        self.now.send_modify(|t| *t = t.saturating_add(by));
    }

    /// Set the clock to `now_ms`. Moving it backwards is allowed (a test of a
    /// clock that jumps back).
    pub fn set(&self, now_ms: u64) {
        self.now.send_replace(now_ms);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        *self.now.borrow()
    }

    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        let mut rx = self.now.subscribe();
        Box::pin(async move {
            // `wait_for` checks the current value first, so a deadline that has
            // already passed resolves at once. An error means every sender is
            // gone: the clock can never move again, so never wake.
            if rx.wait_for(|t| *t >= deadline_ms).await.is_err() {
                std::future::pending::<()>().await;
            }
        })
    }
}

/// How far back the queue's clock must step (below the latest time the
/// queue has seen) before the queue treats it as a step back and moves its
/// stored times (SPEC 8, Clock steps), in ms. Smaller moves are noise.
pub const CLOCK_STEP_TOLERANCE_MS: u64 = 1_000;

/// The size of a backwards step of the clock: how far `now_ms` is below
/// `latest_ms`, the latest time seen, if more than
/// [`CLOCK_STEP_TOLERANCE_MS`].
pub(crate) fn step_back(latest_ms: u64, now_ms: u64) -> Option<u64> {
    let back = latest_ms.saturating_sub(now_ms);
    (back > CLOCK_STEP_TOLERANCE_MS).then_some(back)
}

/// The clock a queue reads.
pub type SharedClock = Arc<dyn Clock>;

/// The instant a blocking call that may wait `wait` (real time) gives up. A
/// wait too long to represent (such as `Duration::MAX`) waits about a
/// century, which is forever for a caller, instead of overflowing.
pub(crate) fn wait_deadline(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}
