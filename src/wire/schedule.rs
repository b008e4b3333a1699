//! The schedule routes (SPEC 13): `upsert_schedule`, `remove_schedule`,
//! `pause_schedule`, `resume_schedule`, `schedules`, `preview_schedule`
//! and `fire_schedules`.

use serde::{Deserialize, Serialize};

use super::Base64;
use crate::schedule::{CatchUp, Fired, FiredSchedule, Overlap, Schedule, ScheduleInfo, Spec};

fn one() -> u32 {
    1
}

/// A schedule on the wire: [`Schedule`] with its payload as base64.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct WireSchedule {
    /// The name, unique within the queue.
    pub name: String,
    /// When its slots are: `{"cron": {"expr", "tz"}}` or `{"every":
    /// {"every_ms"}}`.
    pub spec: Spec,
    /// The flow of its items (default `""`).
    #[serde(default)]
    pub flow: String,
    /// The payload of its items, base64 (default empty).
    #[serde(default)]
    #[cfg_attr(feature = "server", schemars(with = "String"))]
    pub payload: Base64,
    /// The priority tier of its items (default 0).
    #[serde(default)]
    pub priority: u8,
    /// The rate-limit cost of its items (default 1).
    #[serde(default = "one")]
    pub cost: u32,
    /// `"skip"`, `"latest"` (default) or `{"all": {"cap": N}}`.
    #[serde(default)]
    pub catch_up: CatchUp,
    /// `"allow"` (default) or `"skip"`.
    #[serde(default)]
    pub overlap: Overlap,
    /// No slot before this time (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_ms: Option<u64>,
    /// No slot after this time (ms since the Unix epoch).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub end_ms: Option<u64>,
    /// At most this many items in its life.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
}

impl From<Schedule> for WireSchedule {
    fn from(s: Schedule) -> Self {
        WireSchedule {
            name: s.name().to_string(),
            spec: s.spec().clone(),
            flow: s.get_flow().to_string(),
            payload: Base64(s.get_payload().to_vec()),
            priority: s.get_priority(),
            cost: s.get_cost(),
            catch_up: s.get_catch_up(),
            overlap: s.get_overlap(),
            start_ms: s.get_start_ms(),
            end_ms: s.get_end_ms(),
            limit: s.get_limit(),
        }
    }
}

impl WireSchedule {
    /// The schedule this describes, not checked yet: the queue checks it
    /// at upsert (an invalid one is `InvalidInput` there).
    pub fn into_schedule(self) -> Schedule {
        let mut s = Schedule::unchecked(self.name, self.spec, self.start_ms)
            .flow(self.flow)
            .payload(self.payload.0)
            .priority(self.priority)
            .cost(self.cost)
            .catch_up(self.catch_up)
            .overlap(self.overlap);
        if let Some(t) = self.end_ms {
            s = s.end_ms(t);
        }
        if let Some(n) = self.limit {
            s = s.limit(n);
        }
        s
    }
}

/// `upsert_schedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct UpsertScheduleRequest {
    /// The schedule to create or replace.
    pub schedule: WireSchedule,
}

/// `remove_schedule`, `pause_schedule`, `resume_schedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct ScheduleNameRequest {
    /// The schedule's name.
    pub name: String,
}

/// `preview_schedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
#[serde(deny_unknown_fields)]
pub struct PreviewScheduleRequest {
    /// The schedule's name.
    pub name: String,
    /// How many fire times (at most 1000).
    pub count: usize,
}

/// One schedule of the `schedules` reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct WireScheduleInfo {
    /// The schedule as last upserted.
    pub schedule: WireSchedule,
    /// The next slot that will fire (ms); absent once it has ended.
    #[serde(default)]
    pub next_fire_ms: Option<u64>,
    /// The latest slot that made an item (ms).
    #[serde(default)]
    pub last_fired_ms: Option<u64>,
    /// The id of the latest item it made.
    #[serde(default)]
    pub last_item: Option<u64>,
    /// Items made, ever.
    pub fired: u64,
    /// Slots that made nothing (missed or overlapping).
    #[serde(default)]
    pub skipped: u64,
    /// Paused.
    pub paused: bool,
}

impl From<ScheduleInfo> for WireScheduleInfo {
    fn from(i: ScheduleInfo) -> Self {
        WireScheduleInfo {
            schedule: i.schedule.into(),
            next_fire_ms: i.next_fire_ms,
            last_fired_ms: i.last_fired_ms,
            last_item: i.last_item,
            fired: i.fired,
            skipped: i.skipped,
            paused: i.paused,
        }
    }
}

impl WireScheduleInfo {
    /// The contract's value.
    pub fn into_info(self) -> ScheduleInfo {
        ScheduleInfo {
            schedule: self.schedule.into_schedule(),
            next_fire_ms: self.next_fire_ms,
            last_fired_ms: self.last_fired_ms,
            last_item: self.last_item,
            fired: self.fired,
            skipped: self.skipped,
            paused: self.paused,
        }
    }
}

/// Reply of `schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct ScheduleList {
    /// Every schedule, by name.
    pub schedules: Vec<WireScheduleInfo>,
}

/// Reply of `preview_schedule`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct Times {
    /// Fire times, ms since the Unix epoch, in order.
    pub times_ms: Vec<u64>,
}

/// Reply of `fire_schedules`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[cfg_attr(feature = "server", derive(schemars::JsonSchema))]
pub struct FiredReply {
    /// Items made.
    pub items: u64,
    /// The soonest next fire time of any schedule not paused (ms).
    #[serde(default)]
    pub next_fire_ms: Option<u64>,
    /// Each schedule that made items, with its lateness.
    #[serde(default)]
    pub schedules: Vec<FiredSchedule>,
}

impl From<Fired> for FiredReply {
    fn from(f: Fired) -> Self {
        FiredReply {
            items: f.items,
            next_fire_ms: f.next_fire_ms,
            schedules: f.schedules,
        }
    }
}

impl From<FiredReply> for Fired {
    fn from(f: FiredReply) -> Self {
        Fired::new(f.items, f.next_fire_ms).with_schedules(f.schedules)
    }
}
