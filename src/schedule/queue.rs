//! The schedule operations of the contract (SPEC section 13), as an
//! extension of [`WorkQueue`]: every queue has them through the blanket
//! implementation, so `use workjournal::ScheduleQueue` is all a caller
//! adds. They build their [`Request`] and go through [`WorkQueue::call`]
//! like the core operations (docs/DESIGN.md, One request type).

use std::future::Future;

use crate::error::Result;
use crate::queue::WorkQueue;
use crate::request::{Request, ask};
use crate::schedule::{Fired, Schedule, ScheduleInfo};

/// The schedule operations (SPEC section 13) of any [`WorkQueue`]: store,
/// remove, pause, resume, list and preview schedules, and fire the due
/// ones. Implemented for every `WorkQueue` (a blanket implementation), so
/// a backend writes nothing for it; bring it into scope to call them.
///
/// # Examples
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> workjournal::Result<()> {
/// use std::time::Duration;
/// use workjournal::{Config, MemoryQueue, Schedule, ScheduleQueue};
///
/// let queue = MemoryQueue::new(Config::default());
/// queue.upsert_schedule(Schedule::every("tick", Duration::from_secs(5))?).await?;
/// assert_eq!(queue.preview_schedule("tick", 2).await?.len(), 2);
/// # Ok(())
/// # }
/// ```
pub trait ScheduleQueue: WorkQueue {
    /// Store `schedule` under its name, replacing one of that name (SPEC
    /// 13, Operations). Returns true when it was created. A replaced
    /// schedule keeps its progress: its next fire time is the new spec's
    /// first slot after the last fired one (or, if none fired yet, at or
    /// after the slot it was waiting for), so a change never fires a slot
    /// twice and never drops the slot in flight.
    ///
    /// # Errors
    ///
    /// `InvalidInput` for a schedule whose spec does not parse (or a cron
    /// spec without the `cron` feature); `Backend` when other writers
    /// changed the same schedule 16 times while this call ran.
    ///
    /// # Cancel safety
    ///
    /// The change is one atomic write: dropped, it happened whole or not
    /// at all.
    fn upsert_schedule(&self, schedule: Schedule) -> impl Future<Output = Result<bool>> + Send {
        ask!(self, Request::UpsertSchedule { schedule }, Bool)
    }

    /// Delete schedule `name` (SPEC 13). Items it already made stay.
    /// Returns false when there is none.
    ///
    /// # Errors
    ///
    /// Storage errors, as for any write.
    fn remove_schedule(&self, name: &str) -> impl Future<Output = Result<bool>> + Send {
        ask!(
            self,
            Request::RemoveSchedule {
                name: name.to_string()
            },
            Bool
        )
    }

    /// Pause schedule `name`: no slot fires until it is resumed (SPEC 13).
    /// Returns false when there is none.
    ///
    /// # Errors
    ///
    /// Storage errors, as for any write.
    fn pause_schedule(&self, name: &str) -> impl Future<Output = Result<bool>> + Send {
        ask!(
            self,
            Request::PauseSchedule {
                name: name.to_string()
            },
            Bool
        )
    }

    /// Resume schedule `name`: it goes on with its first slot at or after
    /// now; the slots of the pause are not caught up (SPEC 13). Returns
    /// false when there is none.
    ///
    /// # Errors
    ///
    /// Storage errors, as for any write.
    fn resume_schedule(&self, name: &str) -> impl Future<Output = Result<bool>> + Send {
        ask!(
            self,
            Request::ResumeSchedule {
                name: name.to_string()
            },
            Bool
        )
    }

    /// Every schedule with its next fire time, last fired slot and counts,
    /// by name (SPEC 13).
    ///
    /// # Errors
    ///
    /// `Decode` for a stored schedule this build cannot read.
    fn schedules(&self) -> impl Future<Output = Result<Vec<ScheduleInfo>>> + Send {
        ask!(self, Request::Schedules, Schedules)
    }

    /// The next `count` fire times of schedule `name` (ms since the Unix
    /// epoch), from its next one; at most
    /// [`MAX_SCHEDULE_PREVIEW`](crate::MAX_SCHEDULE_PREVIEW), fewer when it ends
    /// sooner (SPEC 13).
    ///
    /// # Errors
    ///
    /// `InvalidInput` when there is no schedule `name`.
    fn preview_schedule(
        &self,
        name: &str,
        count: usize,
    ) -> impl Future<Output = Result<Vec<u64>>> + Send {
        ask!(
            self,
            Request::PreviewSchedule {
                name: name.to_string(),
                count
            },
            Times
        )
    }

    /// Fire every due schedule: each one's due slots make their items (by
    /// its catch-up and overlap policies) in the same atomic write that
    /// moves its next fire time past them (SPEC 13, Exactly once). Any
    /// number of handles may call it at once; each slot fires once. A
    /// [`Worker`](crate::Worker) calls it in its claim loop, so a queue
    /// with a worker needs no other firer.
    ///
    /// Returns the items made and the soonest next fire time.
    ///
    /// # Errors
    ///
    /// Storage errors; `Decode` for a stored schedule this build cannot
    /// read.
    ///
    /// # Cancel safety
    ///
    /// Each schedule fires in one atomic write: a dropped call leaves
    /// every schedule either fired or not, never half.
    fn fire_schedules(&self) -> impl Future<Output = Result<Fired>> + Send {
        ask!(self, Request::FireSchedules, Fired)
    }
}

impl<Q: WorkQueue + ?Sized> ScheduleQueue for Q {}
