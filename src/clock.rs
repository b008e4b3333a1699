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
    /// A clock stepped back meanwhile may wake it before: its callers look
    /// at the time again and sleep anew (SPEC 3, Clock steps).
    fn sleep_until(&self, deadline_ms: u64) -> Sleep;

    /// Whether this is a test's clock, one that moves only when the test
    /// moves it and that every handle of the queue shares
    /// ([`ManualClock`]). A Redis queue keeps time by the Redis server's
    /// `TIME`, the one clock all its hosts share, and by a clock given in
    /// [`Config::clock`](crate::Config::clock) only when this is true; it
    /// ignores any other (with a warning at connect), so that a host whose
    /// own clock is off cannot make timers fire early or late for the
    /// fleet (SPEC 3, Clock steps). The memory and embedded backends keep
    /// time by any clock given. Default: false.
    fn is_test_clock(&self) -> bool {
        false
    }
}

/// The system clock (`SystemTime`), the default of the memory and embedded
/// backends.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        system_now_ms()
    }

    /// Sleeps until the system clock reads `deadline_ms` (SPEC 3, Timers):
    /// to the deadline's exact instant, not from the truncated
    /// [`Clock::now_ms`] (which overslept by the part of the current
    /// millisecond already past), and the last 2 ms (`PRECISE_TAIL`) on the
    /// operating system's timer on one of tokio's blocking threads. Must be
    /// polled inside a tokio runtime, as any tokio timer.
    fn sleep_until(&self, deadline_ms: u64) -> Sleep {
        // A deadline past what `SystemTime` holds here never comes.
        let Some(deadline) = UNIX_EPOCH.checked_add(Duration::from_millis(deadline_ms)) else {
            return Box::pin(std::future::pending());
        };
        let left = move || {
            deadline
                .duration_since(SystemTime::now())
                .unwrap_or(Duration::ZERO)
        };
        Box::pin(async move {
            let coarse = left().saturating_sub(PRECISE_TAIL);
            if !coarse.is_zero() {
                tokio::time::sleep(coarse).await;
            }
            // More than the tail left means the wall clock stepped back:
            // return, and the caller looks again and sleeps anew.
            let rest = left().min(PRECISE_TAIL);
            if !rest.is_zero() {
                // Cannot fail but by a panic in `sleep`; either way the
                // deadline is near, and the caller checks the time again.
                let _ = tokio::task::spawn_blocking(move || std::thread::sleep(rest)).await;
            }
        })
    }
}

/// The last part of a [`SystemClock::sleep_until`] slept by the operating
/// system's timer on a blocking thread (precise to tens of microseconds)
/// instead of tokio's, which fires on millisecond ticks and so wakes up to
/// a millisecond or two late.
const PRECISE_TAIL: Duration = Duration::from_millis(2);

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

    /// True: a Redis queue keeps time by a manual clock (SPEC 3, Clock
    /// steps).
    fn is_test_clock(&self) -> bool {
        true
    }
}

/// How far back the queue's clock must step (below the latest time the
/// queue has seen) before the queue treats it as a step back and moves its
/// stored times (SPEC 3, Clock steps), in ms. Smaller moves are noise.
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

/// The timer of a blocking claim's loop (SPEC 3, Timers): one
/// [`Clock::sleep_until`] per due time, kept across the loop's turns while
/// the next due time stays the same. Every commit wakes a waiting claim for
/// another look; a new sleep each time would put a new blocking thread to
/// sleep each time within [`PRECISE_TAIL`] of the deadline.
pub(crate) struct DueTimer {
    at: Option<u64>,
    sleep: Sleep,
}

impl DueTimer {
    /// A timer that never fires until [`DueTimer::until`] sets a time.
    pub(crate) fn new() -> Self {
        Self {
            at: None,
            sleep: Box::pin(std::future::pending()),
        }
    }

    /// The sleep until `next` ms by `clock` (never, for `None`): the one of
    /// the turn before when its time is the same and it has not fired.
    pub(crate) fn until(&mut self, clock: &dyn Clock, next: Option<u64>) -> &mut Sleep {
        if next != self.at {
            self.sleep = match next {
                Some(t) => clock.sleep_until(t),
                None => Box::pin(std::future::pending()),
            };
            self.at = next;
        }
        &mut self.sleep
    }

    /// The sleep has fired: the next turn makes a new one (a finished
    /// future must not be polled again).
    pub(crate) fn fired(&mut self) {
        *self = Self::new();
    }
}

/// The instant a blocking call that may wait `wait` (real time) gives up. A
/// wait too long to represent (such as `Duration::MAX`) waits about a
/// century, which is forever for a caller, instead of overflowing.
pub(crate) fn wait_deadline(wait: Duration) -> tokio::time::Instant {
    let now = tokio::time::Instant::now();
    now.checked_add(wait)
        .unwrap_or_else(|| now + Duration::from_secs(100 * 365 * 24 * 3600))
}

/// Wait up to `wait` (real time) until `look` finds something, looking
/// again each time `notify` fires (no polling). The wake-up is armed before
/// each look, so a change between the look and the wait is never missed.
/// `None` when the wait runs out.
///
/// # Errors
///
/// The first error of `look`.
pub(crate) async fn wait_notified<T, Fut>(
    notify: &tokio::sync::Notify,
    wait: Duration,
    mut look: impl FnMut() -> Fut,
) -> crate::Result<Option<T>>
where
    Fut: Future<Output = crate::Result<Option<T>>>,
{
    let deadline = wait_deadline(wait);
    loop {
        let notified = notify.notified();
        tokio::pin!(notified);
        notified.as_mut().enable();
        if let Some(found) = look().await? {
            return Ok(Some(found));
        }
        if tokio::time::Instant::now() >= deadline {
            return Ok(None);
        }
        tokio::select! {
            _ = &mut notified => {}
            _ = tokio::time::sleep_until(deadline) => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The system clock's sleep resolves only once `now_ms` has reached the
    /// deadline (a blocking claim that woke early would find nothing due and
    /// sleep again), and at once for a deadline already past.
    #[tokio::test]
    async fn system_clock_sleep_until_never_wakes_before_its_deadline() {
        let clock = SystemClock;
        for step in 0..20 {
            let deadline = clock.now_ms() + 1 + step % 3;
            clock.sleep_until(deadline).await;
            let now = clock.now_ms();
            assert!(now >= deadline, "woke at {now} ms for {deadline} ms");
        }
        clock.sleep_until(clock.now_ms().saturating_sub(10)).await;
        clock.sleep_until(0).await;
        // The farthest deadline there is: never, and no overflow.
        let never = clock.sleep_until(u64::MAX);
        assert!(
            tokio::time::timeout(Duration::from_millis(5), never)
                .await
                .is_err()
        );
    }

    /// A claim loop's timer is one sleep per due time: the same time keeps
    /// the same sleep, a new time or a fired sleep makes a new one, and a
    /// fired sleep is never polled again.
    #[tokio::test]
    async fn a_due_timer_keeps_its_sleep_while_the_due_time_stays() {
        let clock = ManualClock::new(1_000);
        let mut due = DueTimer::new();
        let first: *const _ = &**due.until(&clock, Some(2_000));
        let again: *const _ = &**due.until(&clock, Some(2_000));
        assert!(std::ptr::addr_eq(first, again));
        let other: *const _ = &**due.until(&clock, Some(1_500));
        assert!(!std::ptr::addr_eq(first, other));
        clock.advance(Duration::from_millis(500));
        due.until(&clock, Some(1_500)).await;
        due.fired();
        // The same time again, after it fired: a new sleep, already due.
        due.until(&clock, Some(1_500)).await;
        due.fired();
        // No time: never fires.
        let never = due.until(&clock, None);
        assert!(
            tokio::time::timeout(Duration::from_millis(5), never)
                .await
                .is_err()
        );
    }

    /// The wall clock behind tokio's after the coarse part of the sleep (a
    /// step back; here tokio's time is paused and jumps ahead): the precise
    /// tail sleeps at most `PRECISE_TAIL` on its blocking thread, so a
    /// dropped claim or a runtime shutting down does not wait out the rest.
    /// Regression (found in review): it slept the whole rest, 3 s here.
    #[test]
    fn the_precise_tail_of_a_sleep_is_bounded() {
        let rt = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .start_paused(true)
            .build()
            .unwrap();
        let t0 = std::time::Instant::now();
        rt.block_on(async {
            let clock = SystemClock;
            let task = tokio::spawn(clock.sleep_until(clock.now_ms() + 3_000));
            tokio::time::sleep(Duration::from_millis(2_999)).await;
            task.abort();
        });
        drop(rt);
        let took = t0.elapsed();
        assert!(took < Duration::from_millis(500), "blocked {took:?}");
    }
}
