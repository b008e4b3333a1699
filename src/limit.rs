//! Flow limits (SPEC section 3, Flow limits): rate limits, concurrency caps
//! and timed back-off, the types every backend speaks and the one rule
//! they all evaluate ([`FlowState`]).

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};

/// A flow's rate limit (SPEC 3, Flow limits): at most `permits` permits
/// in each window of `period_ms` milliseconds, by the queue's clock. A
/// window opens at the first claim after the previous one ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct RateLimit {
    /// Permits per window, at least 1.
    pub permits: u32,
    /// The window, in ms, at least 1.
    pub period_ms: u64,
}

impl RateLimit {
    /// `permits` per `period`.
    pub fn new(permits: u32, period: std::time::Duration) -> Self {
        RateLimit {
            permits,
            period_ms: crate::config::ms(period),
        }
    }
}

/// One change to a flow's limits, for
/// [`WorkQueue::set_flow_limit`](crate::WorkQueue::set_flow_limit) (SPEC 3,
/// Flow limits). Each kind is set, changed and cleared on its own; the
/// others stay as they are.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum FlowLimit {
    /// Set (or change) the rate limit; `None` clears it.
    Rate(Option<RateLimit>),
    /// At most this many items of the flow pending at once, across every
    /// consumer; `None` clears the cap.
    Concurrency(Option<u32>),
    /// Hold the flow until this time (ms since the Unix epoch, queue
    /// clock); it lifts itself then. `None`, or a time not after now,
    /// lifts it at once.
    #[serde(rename = "back_off_until")]
    BackOffUntil(Option<u64>),
}

/// A flow's limits and their state, from
/// [`WorkQueue::flow_limits`](crate::WorkQueue::flow_limits) (SPEC 3, Flow
/// limits).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[non_exhaustive]
pub struct FlowLimits {
    /// The flow.
    pub flow: String,
    /// Its rate limit, if any.
    pub rate: Option<RateLimit>,
    /// Its concurrency cap, if any.
    pub concurrency: Option<u32>,
    /// The end of its back-off (ms since the Unix epoch), while in force.
    pub backoff_until_ms: Option<u64>,
    /// Permits taken in the current window (0 when none is open).
    pub permits_used: u64,
    /// Items of the flow pending now.
    pub pending: u64,
    /// Items of the flow set aside for its limits (they keep their place
    /// and tier).
    pub held: u64,
    /// Whether the limits hold the flow now (a claim skips its items).
    pub blocked: bool,
}

/// A flow's limit record, the same in every backend: the limits, the rate
/// window, and how many of its items are pending and held.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct FlowState {
    pub(crate) rate: Option<RateLimit>,
    pub(crate) cap: Option<u32>,
    /// 0: no back-off.
    pub(crate) backoff_until: u64,
    pub(crate) window_start: u64,
    pub(crate) used: u64,
    pub(crate) pending: u64,
    pub(crate) held: u64,
}

impl FlowState {
    /// Whether the current window has ended at `now` (a claim opens a new
    /// one).
    fn fresh(&self, rate: &RateLimit, now: u64) -> bool {
        now >= self.window_start.saturating_add(rate.period_ms)
    }

    /// Permits taken in the window open at `now`.
    pub(crate) fn used_now(&self, now: u64) -> u64 {
        match &self.rate {
            Some(r) if !self.fresh(r, now) => self.used,
            _ => 0,
        }
    }

    /// Whether a claim may hand out an item of the flow at `now` (before
    /// looking at the item's cost).
    pub(crate) fn claimable(&self, now: u64) -> bool {
        if self.backoff_until > now {
            return false;
        }
        if let Some(k) = self.cap
            && self.pending >= u64::from(k)
        {
            return false;
        }
        match &self.rate {
            Some(r) => self.used_now(now) < u64::from(r.permits),
            None => true,
        }
    }

    /// Whether an item costing `cost` fits in what is left of the window
    /// (an item always fits a window nothing has been taken from).
    pub(crate) fn fits(&self, cost: u32, now: u64) -> bool {
        match &self.rate {
            Some(r) => {
                let used = self.used_now(now);
                used == 0 || used.saturating_add(u64::from(cost)) <= u64::from(r.permits)
            }
            None => true,
        }
    }

    /// An item that does not fit: the rest of the window goes unused, so
    /// the flow's later items wait behind it.
    pub(crate) fn forfeit(&mut self) {
        if let Some(r) = &self.rate {
            self.used = self.used.max(u64::from(r.permits));
        }
    }

    /// A claim handed out an item costing `cost` at `now`.
    pub(crate) fn charge(&mut self, cost: u32, now: u64) {
        if let Some(r) = self.rate {
            if self.fresh(&r, now) {
                self.window_start = now;
                self.used = 0;
            }
            self.used = self.used.saturating_add(u64::from(cost.max(1)));
        }
    }

    /// When a hold by time ends (back-off, or the rate window), if one
    /// holds the flow at `now`.
    pub(crate) fn lifts_at(&self, now: u64) -> Option<u64> {
        if self.backoff_until > now {
            return Some(self.backoff_until);
        }
        match &self.rate {
            Some(r) if self.used_now(now) >= u64::from(r.permits) => {
                Some(self.window_start.saturating_add(r.period_ms))
            }
            _ => None,
        }
    }

    /// Nothing set, nothing held: the record can go.
    pub(crate) fn idle(&self, now: u64) -> bool {
        self.rate.is_none() && self.cap.is_none() && self.backoff_until <= now && self.held == 0
    }

    /// Whether any limit is in force at `now` (listed by `flow_limits`).
    pub(crate) fn in_force(&self, now: u64) -> bool {
        self.rate.is_some() || self.cap.is_some() || self.backoff_until > now
    }

    /// Apply one change at `now`.
    pub(crate) fn apply(&mut self, change: FlowLimit, now: u64) {
        match change {
            FlowLimit::Rate(r) => {
                if r.is_none() {
                    self.window_start = 0;
                    self.used = 0;
                }
                self.rate = r;
            }
            FlowLimit::Concurrency(k) => self.cap = k,
            FlowLimit::BackOffUntil(t) => {
                self.backoff_until = t.filter(|t| *t > now).unwrap_or(0);
            }
        }
    }

    /// The listing of this record for `flow` at `now`.
    pub(crate) fn listing(&self, flow: &str, now: u64) -> FlowLimits {
        FlowLimits {
            flow: flow.to_string(),
            rate: self.rate,
            concurrency: self.cap,
            backoff_until_ms: (self.backoff_until > now).then_some(self.backoff_until),
            permits_used: self.used_now(now),
            pending: self.pending,
            held: self.held,
            blocked: !self.claimable(now),
        }
    }

    /// Move the record's times back by a clock step of `back` ms (SPEC 3,
    /// Clock steps).
    pub(crate) fn shift_back(&mut self, back: u64) {
        if self.backoff_until > 0 {
            self.backoff_until = self.backoff_until.saturating_sub(back).max(1);
        }
        self.window_start = self.window_start.saturating_sub(back);
    }

    /// The record as integers (the embedded record; the Redis hash holds
    /// the same fields by name): rate permits (0: none), rate period, cap
    /// (0: none), back-off end, window start, permits used, pending, held.
    #[cfg(feature = "embedded")]
    pub(crate) fn to_fields(self) -> [u64; 8] {
        let (n, p) = self
            .rate
            .map_or((0, 0), |r| (u64::from(r.permits), r.period_ms));
        [
            n,
            p,
            self.cap.map_or(0, u64::from),
            self.backoff_until,
            self.window_start,
            self.used,
            self.pending,
            self.held,
        ]
    }

    /// The inverse of [`FlowState::to_fields`].
    #[cfg(feature = "embedded")]
    pub(crate) fn from_fields(f: [u64; 8]) -> Self {
        let rate = match (u32::try_from(f[0]), f[1]) {
            (Ok(permits), period_ms) if permits > 0 && period_ms > 0 => {
                Some(RateLimit { permits, period_ms })
            }
            _ => None,
        };
        FlowState {
            rate,
            cap: u32::try_from(f[2]).ok().filter(|k| *k > 0),
            backoff_until: f[3],
            window_start: f[4],
            used: f[5],
            pending: f[6],
            held: f[7],
        }
    }
}

/// SPEC 3, Flow limits: a change must name a flow (not the default `""`)
/// and ask for a limit that lets something through.
///
/// # Errors
///
/// `InvalidInput` for a bad flow name, a rate of 0 permits or a 0 period,
/// or a concurrency cap of 0 (pause the flow instead).
pub(crate) fn check_limit(flow: &str, change: &FlowLimit) -> Result<()> {
    if flow.is_empty() {
        return Err(Error::invalid(
            "a flow name is required: the default flow \"\" carries no limits (no rate limit, concurrency cap or back-off)",
        ));
    }
    crate::item::check_flow_name(flow)?;
    match change {
        FlowLimit::Rate(Some(r)) if r.permits == 0 || r.period_ms == 0 => Err(Error::invalid(
            "a rate limit needs at least 1 permit per period of at least 1 ms",
        )),
        FlowLimit::Concurrency(Some(0)) => Err(Error::invalid(
            "a concurrency cap must be at least 1 (pause the flow to hold it)",
        )),
        _ => Ok(()),
    }
}
