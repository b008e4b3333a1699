//! The charts' history: `stats` and the call totals sampled every
//! [`SAMPLE_INTERVAL`], the last [`HISTORY_SAMPLES`] of them kept.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex, MutexGuard};

use tokio::sync::watch;

use super::scrape::prometheus;
use super::{Dash, HISTORY_SAMPLES, SAMPLE_INTERVAL, stopped};
use crate::item::Stats;
use crate::metered::Totals;
use crate::queue::WorkQueue;

/// One sample of the charts.
#[derive(Debug, Clone, Copy)]
pub(super) struct Sample {
    /// The queue's clock when it was taken.
    pub(super) at_ms: u64,
    /// The counts per state.
    pub(super) stats: Stats,
    /// The running totals of added, acked and failed items.
    pub(super) totals: Totals,
}

impl Sample {
    /// `[at_ms, backlog, pending, delayed, dead_letters, added, acked,
    /// failed]`, as `/ui/overview` sends it.
    pub(super) fn row(&self) -> [u64; 8] {
        [
            self.at_ms,
            self.stats.backlog,
            self.stats.pending,
            self.stats.delayed,
            self.stats.dead_letters,
            self.totals.added,
            self.totals.acked,
            self.totals.failed,
        ]
    }
}

/// The last [`HISTORY_SAMPLES`] samples, oldest first.
#[derive(Debug)]
pub(super) struct History(Mutex<VecDeque<Sample>>);

impl Default for History {
    fn default() -> Self {
        History(Mutex::new(VecDeque::with_capacity(HISTORY_SAMPLES)))
    }
}

impl History {
    /// A poisoned lock still holds whole samples: go on with them.
    fn lock(&self) -> MutexGuard<'_, VecDeque<Sample>> {
        match self.0.lock() {
            Ok(h) => h,
            Err(p) => p.into_inner(),
        }
    }

    /// The samples kept, oldest first.
    pub(super) fn samples(&self) -> Vec<Sample> {
        self.lock().iter().copied().collect()
    }

    /// Keep `s`, dropping the oldest sample when full.
    pub(super) fn push(&self, s: Sample) {
        let mut h = self.lock();
        if h.len() >= HISTORY_SAMPLES {
            h.pop_front();
        }
        h.push_back(s);
    }
}

/// Sample `stats` every [`SAMPLE_INTERVAL`] until `stop` (which also sets
/// the state gauges of `/metrics`).
pub(in crate::server) async fn sample(dash: Arc<Dash>, mut stop: watch::Receiver<bool>) {
    let mut tick = tokio::time::interval(SAMPLE_INTERVAL);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    loop {
        tokio::select! {
            () = stopped(&mut stop) => return,
            _ = tick.tick() => {}
        }
        if let Some(h) = prometheus() {
            h.run_upkeep();
        }
        let (Ok(stats), Ok(now)) = (dash.queue.stats().await, dash.queue.now_ms().await) else {
            continue;
        };
        dash.history.push(Sample {
            at_ms: now,
            stats,
            totals: dash.metered.totals(),
        });
    }
}
