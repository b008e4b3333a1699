//! SPEC 13, Schedules on the reference model: the two storage primitives
//! the schedule operations are written over (`schedule::fire`).

use super::Model;
use crate::error::Result;
#[cfg(feature = "testing")]
use crate::request::{Reply, Request};
#[cfg(feature = "testing")]
use crate::schedule::fire::{self, Store};
use crate::schedule::fire::{ScheduleRows, ScheduleScan, ScheduleSwap, StoredSchedule};

impl Model {
    /// Stored schedules: every one, one by name, or the due ones (not
    /// paused, next fire time at or before `now_ms`, soonest first) with
    /// the soonest later fire time.
    pub(crate) fn schedule_load(&self, scan: &ScheduleScan) -> ScheduleRows {
        let row = |name: &String, r: &super::StoredRow| StoredSchedule {
            name: name.clone(),
            generation: r.0,
            last_item: r.2,
            record: r.3.clone(),
        };
        match scan {
            ScheduleScan::All => ScheduleRows {
                rows: self.schedules.iter().map(|(n, r)| row(n, r)).collect(),
                later_ms: None,
            },
            ScheduleScan::One(name) => ScheduleRows {
                rows: self
                    .schedules
                    .get_key_value(name)
                    .map(|(n, r)| row(n, r))
                    .into_iter()
                    .collect(),
                later_ms: None,
            },
            ScheduleScan::Due { now_ms, limit } => {
                let mut due: Vec<(u64, &String)> = self
                    .schedules
                    .iter()
                    .filter_map(|(n, r)| r.1.map(|t| (t, n)))
                    .collect();
                due.sort();
                let later_ms = due.iter().map(|(t, _)| *t).find(|t| t > now_ms);
                ScheduleRows {
                    rows: due
                        .into_iter()
                        .filter(|(t, _)| t <= now_ms)
                        .take(*limit)
                        .filter_map(|(_, n)| self.schedules.get_key_value(n))
                        .map(|(n, r)| row(n, r))
                        .collect(),
                    later_ms,
                }
            }
        }
    }

    /// One compare-and-swap of a schedule with the items of its slots:
    /// `None` (nothing changed) when the stored generation is not
    /// `swap.expect` (0: absent).
    ///
    /// # Errors
    ///
    /// The adds' errors (`InvalidInput`, `Full`); nothing changes.
    pub(crate) fn schedule_swap(
        &mut self,
        swap: ScheduleSwap,
        now_ms: u64,
    ) -> Result<Option<Vec<u64>>> {
        let current = self.schedules.get(&swap.name);
        if current.map_or(0, |r| r.0) != swap.expect {
            return Ok(None);
        }
        let last_before = current.and_then(|r| r.2);
        let added = self.add_many(
            swap.items
                .into_iter()
                .map(|(item, slot)| (item, Some(slot)))
                .collect(),
            now_ms,
        )?;
        let ids: Vec<u64> = added.iter().map(|a| a.id).collect();
        match swap.write {
            Some((index, record)) => {
                self.schedule_generation += 1;
                let last = ids.last().copied().or(last_before);
                self.schedules
                    .insert(swap.name, (self.schedule_generation, index, last, record));
            }
            None => {
                self.schedules.remove(&swap.name);
            }
        }
        Ok(Some(ids))
    }
}

/// The reference model as a schedule store at a fixed time, for the op
/// runner (`testing::ops`): its futures are ready at once.
#[cfg(feature = "testing")]
struct ModelStore<'a> {
    model: std::sync::Mutex<&'a mut Model>,
    now_ms: u64,
}

#[cfg(feature = "testing")]
impl ModelStore<'_> {
    fn with<T>(&self, f: impl FnOnce(&mut Model) -> T) -> Result<T> {
        let mut m = self
            .model
            .lock()
            .map_err(|_| crate::error::Error::corrupt("the model's lock was poisoned"))?;
        Ok(f(&mut m))
    }
}

#[cfg(feature = "testing")]
impl Store for ModelStore<'_> {
    async fn now(&self) -> Result<u64> {
        Ok(self.now_ms)
    }
    async fn load(&self, scan: ScheduleScan) -> Result<ScheduleRows> {
        self.with(|m| m.schedule_load(&scan))
    }
    async fn swap(&self, swap: ScheduleSwap) -> Result<Option<Vec<u64>>> {
        let now = self.now_ms;
        self.with(|m| m.schedule_swap(swap, now))?
    }
    async fn find_item(&self, id: u64) -> Result<Option<crate::browse::ListedItem>> {
        let now = self.now_ms;
        self.with(|m| m.find(id, now))
    }
}

/// Run a future that never waits (the model's) to its end.
#[cfg(feature = "testing")]
fn ready<T>(f: impl std::future::Future<Output = Result<T>>) -> Result<T> {
    use std::task::{Context, Poll, Waker};
    let mut f = std::pin::pin!(f);
    let mut cx = Context::from_waker(Waker::noop());
    match f.as_mut().poll(&mut cx) {
        Poll::Ready(v) => v,
        Poll::Pending => Err(crate::error::Error::corrupt(
            "a schedule operation on the model waited",
        )),
    }
}

/// SPEC 13 on the reference model: the schedule requests, carried out by
/// the same code as every backend's (`schedule::fire`) over the model's
/// primitives at `now_ms`. `None` for any other request.
#[cfg(feature = "testing")]
pub(crate) fn answer_schedule(
    model: &mut Model,
    request: &Request,
    now_ms: u64,
) -> Option<Result<Reply>> {
    let store = ModelStore {
        model: std::sync::Mutex::new(model),
        now_ms,
    };
    let s = &store;
    Some(match request.clone() {
        Request::UpsertSchedule { schedule } => ready(fire::upsert(s, schedule)).map(Reply::Bool),
        Request::RemoveSchedule { name } => ready(fire::remove(s, &name)).map(Reply::Bool),
        Request::PauseSchedule { name } => ready(fire::set_paused(s, &name, true)).map(Reply::Bool),
        Request::ResumeSchedule { name } => {
            ready(fire::set_paused(s, &name, false)).map(Reply::Bool)
        }
        Request::Schedules => ready(fire::list(s)).map(Reply::Schedules),
        Request::PreviewSchedule { name, count } => {
            ready(fire::preview(s, &name, count)).map(Reply::Times)
        }
        Request::FireSchedules => ready(fire::fire(s)).map(Reply::Fired),
        _ => return None,
    })
}
