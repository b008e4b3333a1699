//! Cron slots in a time zone (SPEC 13, Daylight saving time), on croner
//! and chrono-tz.
//!
//! croner walks wall-clock (naive local) time: each expression's
//! occurrences there are strictly increasing and each wall-clock time
//! occurs once. This module maps each one to an instant itself, so the
//! DST rule is ours and not the parser's:
//!
//! - a wall-clock time that happens once is that instant;
//! - one the autumn change repeats is its first instant (the earlier
//!   offset), and the repeat is never a slot: a wall-clock time fires once;
//! - one the spring change skips is the first instant after the gap (the
//!   change itself: 02:30 in Europe/Berlin on the last Sunday of March
//!   fires at 03:00 CEST), so a daily schedule never loses its day; several
//!   skipped times fall on that one instant and make one slot.
//!
//! So the instants of the slots never decrease as the wall-clock times
//! increase, and a search for "the first slot at or after t" walks the
//! wall-clock occurrences from just before local(t). (croner 2 walks
//! forward only; the last slot before a time is found by `Slots` with
//! forward walks over growing windows.)

use chrono::{
    DateTime, Duration as ChronoDuration, LocalResult, NaiveDateTime, TimeZone, Timelike, Utc,
};
use chrono_tz::Tz;
use croner::Cron;

use crate::error::{Error, Result};

/// The most wall-clock occurrences one search walks before it gives up
/// (an expression that never matches, like 30 February, finds nothing).
const MAX_STEPS: usize = 20_000;

/// The longest daylight-saving change any zone makes, as a bound on how
/// far local time can go back at an autumn change.
const MAX_FALL_BACK_MINUTES: i64 = 180;

pub(super) struct CronSlots {
    cron: Cron,
    tz: Tz,
}

impl CronSlots {
    pub(super) fn parse(expr: &str, tz: &str) -> Result<Self> {
        let tz: Tz = tz.parse().map_err(|_| {
            Error::invalid(format!(
                "unknown time zone {tz:?} (an IANA name such as Europe/Berlin)"
            ))
        })?;
        let fields = expr.split_whitespace().count();
        if fields != 5 && fields != 6 {
            return Err(Error::invalid(format!(
                "cron expression {expr:?} has {fields} fields; it needs 5 (minute hour day month weekday) or 6 (seconds first)"
            )));
        }
        let cron = parse_cron(expr)
            .map_err(|e| Error::invalid(format!("cron expression {expr:?} does not parse: {e}")))?;
        Ok(CronSlots { cron, tz })
    }

    /// Wall-clock time at instant `t_ms`, truncated to the second.
    fn local(&self, t_ms: u64) -> Result<NaiveDateTime> {
        let ms = i64::try_from(t_ms).map_err(|_| Error::invalid("time out of range"))?;
        let utc = Utc
            .timestamp_millis_opt(ms)
            .single()
            .ok_or_else(|| Error::invalid("time out of range"))?;
        let local = utc.with_timezone(&self.tz).naive_local();
        Ok(local.with_nanosecond(0).unwrap_or(local))
    }

    /// The instant of wall-clock time `n` by the rule of the module doc.
    fn instant(&self, n: NaiveDateTime) -> Option<u64> {
        let at = |d: DateTime<Tz>| u64::try_from(d.timestamp_millis()).ok();
        match self.tz.from_local_datetime(&n) {
            LocalResult::Single(d) => at(d),
            LocalResult::Ambiguous(a, b) => at(a.min(b)),
            LocalResult::None => {
                // In a gap: the first wall-clock minute after it is the
                // change's instant.
                let mut m = n.with_second(0).unwrap_or(n);
                for _ in 0..MAX_FALL_BACK_MINUTES {
                    m += ChronoDuration::minutes(1);
                    match self.tz.from_local_datetime(&m) {
                        LocalResult::Single(d) => return at(d),
                        LocalResult::Ambiguous(a, b) => return at(a.min(b)),
                        LocalResult::None => {}
                    }
                }
                None
            }
        }
    }

    fn next_local(&self, n: NaiveDateTime) -> Option<NaiveDateTime> {
        let d = Utc.from_utc_datetime(&n);
        self.cron
            .find_next_occurrence(&d, false)
            .ok()
            .map(|d| d.naive_utc())
    }

    pub(super) fn first_at_or_after(&self, t: u64) -> Result<Option<u64>> {
        // From just before local(t): a slot whose wall-clock time was
        // skipped by a spring change falls on the change's instant, which
        // may be t itself.
        let mut n = self.local(t.saturating_sub(1))?;
        for _ in 0..MAX_STEPS {
            let Some(m) = self.next_local(n) else {
                return Ok(None);
            };
            if let Some(i) = self.instant(m)
                && i >= t
            {
                return Ok(Some(i));
            }
            n = m;
        }
        Ok(None)
    }
}

fn parse_cron(expr: &str) -> std::result::Result<Cron, croner::errors::CronError> {
    Cron::new(expr).with_seconds_optional().parse()
}
