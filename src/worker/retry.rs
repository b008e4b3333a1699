//! What a handler's failure means and how long the item waits before its next
//! attempt: [`HandlerError`] and [`RetryPolicy`] (SPEC 9, Worker).

use std::fmt;
use std::time::Duration;

/// How long a failed item waits before its next attempt: exponential backoff
/// with jitter.
///
/// After failed delivery `n` (1 for the first attempt) the item waits
/// `base * factor^(n-1)`, capped at `max_delay`, then shortened by a random
/// fraction of up to `jitter` of itself, so that items that failed together
/// do not all come back at the same instant. The cap is therefore also the
/// longest wait.
///
/// # Examples
///
/// ```
/// use std::time::Duration;
/// use workjournal::RetryPolicy;
/// let policy = RetryPolicy::default()
///     .base(Duration::from_millis(100))
///     .factor(3.0)
///     .max_delay(Duration::from_secs(1))
///     .jitter(0.0);
/// assert_eq!(policy.delay(1), Duration::from_millis(100));
/// assert_eq!(policy.delay(2), Duration::from_millis(300));
/// assert_eq!(policy.delay(5), Duration::from_secs(1));
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    base: Duration,
    factor: f64,
    max_delay: Duration,
    jitter: f64,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            base: Duration::from_secs(1),
            factor: 2.0,
            max_delay: Duration::from_secs(300),
            jitter: 0.2,
        }
    }
}

impl RetryPolicy {
    /// The wait after the first failed delivery. Default: 1 s.
    pub fn base(mut self, base: Duration) -> Self {
        self.base = base;
        self
    }

    /// How much each further failure multiplies the wait. Values below 1
    /// (and NaN) are treated as 1. Default: 2.
    pub fn factor(mut self, factor: f64) -> Self {
        self.factor = if factor.is_nan() {
            1.0
        } else {
            factor.max(1.0)
        };
        self
    }

    /// The longest wait. Default: 5 min.
    pub fn max_delay(mut self, max_delay: Duration) -> Self {
        self.max_delay = max_delay;
        self
    }

    /// The largest fraction (0 to 1) by which a wait is shortened at random.
    /// Values outside are clamped, NaN is 0. Default: 0.2.
    pub fn jitter(mut self, jitter: f64) -> Self {
        self.jitter = if jitter.is_nan() {
            0.0
        } else {
            jitter.clamp(0.0, 1.0)
        };
        self
    }

    /// The wait after failed delivery `delivery` (1-based), before jitter:
    /// `base * factor^(delivery-1)`, at most `max_delay`.
    pub fn delay(&self, delivery: u32) -> Duration {
        let exponent = i32::try_from(delivery.saturating_sub(1)).unwrap_or(i32::MAX);
        let secs = self.base.as_secs_f64() * self.factor.powi(exponent);
        match Duration::try_from_secs_f64(secs) {
            Ok(d) => d.min(self.max_delay),
            // Overflow or infinity: the cap applies.
            Err(_) => self.max_delay,
        }
    }

    /// [`RetryPolicy::delay`] shortened by `jitter * unit`, where `unit` is
    /// in `0..=1` (clamped). [`RetryPolicy::next_delay`] draws `unit` at
    /// random.
    pub fn delay_with(&self, delivery: u32, unit: f64) -> Duration {
        let unit = if unit.is_nan() {
            0.0
        } else {
            unit.clamp(0.0, 1.0)
        };
        self.delay(delivery).mul_f64(1.0 - self.jitter * unit)
    }

    /// The wait after failed delivery `delivery`, with random jitter.
    pub fn next_delay(&self, delivery: u32) -> Duration {
        self.delay_with(delivery, fastrand::f64())
    }
}

/// A handler's error: a failed attempt (the usual case, made from any
/// `Display` error with `From`/`?`), or a failure of the worker's own
/// side that means the item was never attempted
/// ([`HandlerError::not_attempted`]: the command could not be started, a
/// local resource ran out). SPEC 9, Worker.
///
/// It does not implement `Display` itself, so that every `Display` error
/// converts into it.
///
/// # Examples
///
/// ```
/// use workjournal::HandlerError;
/// let failed: HandlerError = std::io::Error::other("bad input").into();
/// assert!(failed.is_attempt());
/// let not_run = HandlerError::not_attempted("cannot start sh: too many open files");
/// assert!(!not_run.is_attempt());
/// assert_eq!(not_run.text(), "cannot start sh: too many open files");
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HandlerError {
    pub(super) text: String,
    pub(super) attempt: bool,
    pub(super) back_off: Option<Duration>,
}

impl HandlerError {
    /// A failed attempt with `reason` (what `From` makes of any error).
    pub fn failed(reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: true,
            back_off: None,
        }
    }

    /// The item was not attempted because of the worker's own failure: it
    /// is given back with [`WorkQueue::release`](crate::WorkQueue::release) (its delivery not spent)
    /// after a backoff, and the worker pauses its claims for that backoff.
    pub fn not_attempted(reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: false,
            back_off: None,
        }
    }

    /// The upstream asked to slow down ("retry after `duration`", an HTTP
    /// 429): back the item's whole flow off for `duration`, for every
    /// consumer of the queue ([`WorkQueue::back_off`](crate::WorkQueue::back_off), SPEC 3, Flow limits;
    /// on Redis the whole fleet), and give the item back without spending
    /// its delivery, due when the back-off lifts. An item of the default
    /// flow `""` (which has no limits) is only given back, due then.
    ///
    /// ```
    /// use std::time::Duration;
    /// use workjournal::HandlerError;
    /// let slow = HandlerError::back_off(Duration::from_secs(30), "429 from the API");
    /// assert!(!slow.is_attempt());
    /// assert_eq!(slow.back_off_for(), Some(Duration::from_secs(30)));
    /// ```
    pub fn back_off(duration: Duration, reason: impl fmt::Display) -> Self {
        HandlerError {
            text: reason.to_string(),
            attempt: false,
            back_off: Some(duration),
        }
    }

    /// The back-off asked for by [`HandlerError::back_off`], if any.
    pub fn back_off_for(&self) -> Option<Duration> {
        self.back_off
    }

    /// Whether this counts as a failed attempt of the item.
    pub fn is_attempt(&self) -> bool {
        self.attempt
    }

    /// The reason text.
    pub fn text(&self) -> &str {
        &self.text
    }
}

impl<E: fmt::Display> From<E> for HandlerError {
    fn from(e: E) -> Self {
        HandlerError::failed(e)
    }
}
