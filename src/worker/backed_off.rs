//! What a worker remembers of a flow it backed off (SPEC 9, Back-off): its
//! own timer, and whether the queue's hold is in force, so that a
//! prefetched item of the flow is given back only when the queue did not
//! hold it itself.

use std::time::Duration;

use tokio::time::Instant;

/// A flow this worker backed off: until when (the latest of its back-offs),
/// whether the queue holds it too, and `call`, the number of the latest
/// [`WorkQueue::back_off`] call, whose return alone says so.
#[derive(Debug, Clone, Copy)]
pub(super) struct BackedOff {
    pub(super) until: Instant,
    pub(super) hold: QueueHold,
    pub(super) call: u32,
}

/// Whether the queue holds a flow this worker backed off.
#[derive(Debug, Clone, Copy)]
pub(super) enum QueueHold {
    /// The `back_off` call has not returned yet.
    Asked,
    /// It returned at this instant: an item taken by a claim asked after it
    /// was handed out by the queue itself, so the queue's hold had lifted
    /// (its clock may end it a little before this worker's timer does).
    Since(Instant),
    /// It failed: only this worker's timer holds the flow.
    Failed,
}

impl BackedOff {
    /// Whether an item of the flow, taken by a claim asked at `asked`, is
    /// given back at `now` instead of started. `asked` is `None` for an item
    /// the queue hands out without looking at limits (a reclaimed stale
    /// item, a step in one-flow mode: SPEC 3, Flow limits), which only this
    /// worker's timer can hold.
    pub(super) fn gives_back(&self, asked: Option<Instant>, now: Instant) -> bool {
        self.until > now
            && match (asked, self.hold) {
                (Some(asked), QueueHold::Since(held)) => asked < held,
                _ => true,
            }
    }

    /// How long from `now` an item given back waits: not at all while the
    /// queue holds the flow (the hold keeps it, in its place, and lifting
    /// the back-off early frees it at once); to the end of the back-off
    /// when the queue's `back_off` failed, so that it does not go round.
    pub(super) fn give_back_wait(&self, now: Instant) -> Duration {
        match self.hold {
            QueueHold::Failed => self.until.saturating_duration_since(now),
            QueueHold::Asked | QueueHold::Since(_) => Duration::ZERO,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SPEC 9, Back-off: which prefetched items of a backed-off flow go
    /// back, and how long they wait, for each state of the queue's hold.
    #[test]
    fn a_backed_off_flow_gives_back_what_the_queue_did_not_hold() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let b = |hold| BackedOff {
            until: at(1_000),
            hold,
            call: 0,
        };
        let since = b(QueueHold::Since(at(10)));
        // Taken by a claim asked before the hold was in force: back, due at
        // once (the queue's hold keeps it).
        assert!(since.gives_back(Some(at(5)), at(20)));
        assert_eq!(since.give_back_wait(at(20)), Duration::ZERO);
        // Asked after: the queue handed it out itself, so it runs.
        assert!(!since.gives_back(Some(at(15)), at(990)));
        // Handed out without looking at limits: back until the end.
        assert!(since.gives_back(None, at(990)));
        // Nothing is given back once the back-off has ended.
        assert!(!since.gives_back(None, at(1_000)));
        assert!(!b(QueueHold::Failed).gives_back(Some(at(5)), at(1_001)));
        // While the call is out, everything taken goes back, due at once.
        let asked = b(QueueHold::Asked);
        assert!(asked.gives_back(Some(at(500)), at(600)));
        assert_eq!(asked.give_back_wait(at(600)), Duration::ZERO);
        // The call failed: no hold in the queue, so it waits out the rest
        // of the back-off instead of going round.
        let failed = b(QueueHold::Failed);
        assert!(failed.gives_back(Some(at(500)), at(600)));
        assert_eq!(failed.give_back_wait(at(600)), Duration::from_millis(400));
    }
}
