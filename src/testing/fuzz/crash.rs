//! Target `crash_recovery`: ops on a disk whose power is cut, then the
//! reopened file against the model.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use std::collections::BTreeMap;

use arbitrary::{Arbitrary, Unstructured};

use super::{MAX_OPS, disk_name, fresh_image, runtime};
use crate::EmbeddedQueue;
use crate::browse::ItemState;
use crate::clock::ManualClock;
use crate::item::Stats;
use crate::queue::{BoxFuture, BoxQueue, WorkQueue};
use crate::testing::faults::{DiskImage, SimDisk};
use crate::testing::ops::{ControlsOp, LegacyOp, Op, Reference, START_MS, Setup, System, Target};

/// A crash run: the limits, the sequence, when the process dies (after how
/// many mutating disk calls), and which unsynced writes survive the cut.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct CrashInput {
    /// The limits.
    pub setup: Setup,
    /// The sequence (at most [`MAX_OPS`] are run; reopen steps are stats).
    pub ops: Vec<Op>,
    /// Writes and syncs allowed after the open (taken modulo 400); `None`:
    /// the power goes after the last op.
    pub fail_after: Option<u16>,
    /// Seeds what the power cut keeps of the unsynced writes (whole, lost
    /// or torn at 512 B or 4 KiB; [`SimDisk::after_power_loss`]).
    pub keep_seed: u64,
}

/// [`CrashInput`] with its ops decoded by an earlier draw, as inputs
/// committed then were made: `T` is [`LegacyOp`] or [`ControlsOp`]. Same
/// fields, same order.
#[derive(Arbitrary)]
struct CrashInputAs<T> {
    setup: Setup,
    ops: Vec<T>,
    fail_after: Option<u16>,
    keep_seed: u64,
}

struct OnDisk {
    queue: EmbeddedQueue,
    boxed: BoxQueue,
}

impl Target for OnDisk {
    fn queue(&self) -> &BoxQueue {
        &self.boxed
    }

    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, ItemState>>>> {
        Box::pin(async move { Some(self.queue.audit().await) })
    }
}

/// Target `crash_recovery`: ops on the embedded backend over a [`SimDisk`]
/// whose power is cut after N writes and syncs; the cut keeps a random part
/// of the unsynced writes (some torn), the file is opened again, and its
/// state must be the model's after the last acknowledged operation, or
/// after the one in flight when the process died (SPEC section 4).
///
/// # Panics
///
/// When the results before the crash differ from the model, the reopened
/// file cannot be opened, or its state is neither of the two allowed.
pub fn crash_recovery(data: &[u8]) {
    let Ok(input) = CrashInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    crash_recovery_with(&input);
}

/// [`crash_recovery`] with `data` decoded as before the item and flow
/// controls were drawn ([`LegacyOp`]), so that an input committed then
/// replays as the sequence it was found with.
///
/// # Panics
///
/// As [`crash_recovery`].
pub fn crash_recovery_legacy(data: &[u8]) {
    crash_recovery_as(data, |op: LegacyOp| op.0);
}

/// [`crash_recovery`] with `data` decoded as before cancelling, updating
/// and the schedules were drawn ([`ControlsOp`]).
///
/// # Panics
///
/// As [`crash_recovery`].
pub fn crash_recovery_controls(data: &[u8]) {
    crash_recovery_as(data, |op: ControlsOp| op.0);
}

/// `data` decoded as a [`CrashInputAs`], its ops mapped to [`Op`], run.
fn crash_recovery_as<T: for<'a> Arbitrary<'a>>(data: &[u8], op: fn(T) -> Op) {
    let Ok(input) = CrashInputAs::<T>::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    crash_recovery_with(&CrashInput {
        setup: input.setup,
        ops: input.ops.into_iter().map(op).collect(),
        fail_after: input.fail_after,
        keep_seed: input.keep_seed,
    });
}

/// The body of [`crash_recovery`] for an input built by hand.
///
/// # Panics
///
/// As [`crash_recovery`].
pub fn crash_recovery_with(input: &CrashInput) {
    // Built outside the runtime: building it blocks on the runtime.
    let image = fresh_image();
    if let Err(e) = runtime().block_on(crash_run(input, image)) {
        panic!("crash recovery: {e}");
    }
}

/// A queue on `backend` (opened once), with adds of `ahead` items or more
/// written ahead of their run; with `verify`, redb's whole-file check runs
/// at the open (as `open_on_backend` does): the open after the power cut
/// verifies, the first open (of a fresh image nothing damaged) need not.
async fn open_once(
    backend: crate::testing::faults::SimBackend,
    config: crate::Config,
    ahead: usize,
    verify: bool,
) -> crate::Result<EmbeddedQueue> {
    EmbeddedQueue::open_on_backend_with_options(
        &disk_name(),
        crate::backend::embedded::opened_once(backend),
        config,
        crate::EmbeddedOptions::default()
            .verify_on_open(verify)
            .write_ahead_from(ahead),
    )
    .await
}

async fn crash_run(input: &CrashInput, fresh: &DiskImage) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let config = input.setup.config().clock(clock.clone());
    // A copy of a fresh queue: what a create leaves, without creating.
    let disk = SimDisk::from_image(fresh.clone());
    // Half the inputs have every add's redo record written ahead of its
    // run (SPEC 6, redo log), half only the default's large batches.
    let ahead = if input.keep_seed.is_multiple_of(2) {
        1
    } else {
        32
    };
    let queue = open_once(disk.backend(), config.clone(), ahead, false)
        .await
        .map_err(|e| format!("open a fresh queue: {e}"))?;
    if let Some(n) = input.fail_after {
        // A run of MAX_OPS ops makes a few hundred writes and syncs: fold
        // the fault point into that range so most inputs crash mid-run.
        disk.cut_power_after(u64::from(n % 400));
    }
    let target = OnDisk {
        boxed: BoxQueue::new(queue.clone()),
        queue: queue.clone(),
    };
    let mut reference = Reference::new(&input.setup, true, false);
    let mut system = System::new(Box::new(target), clock.clone(), true);
    // The states the disk may hold after the cut: the last acknowledged one,
    // and the one of the operation in flight when the power went.
    let mut allowed = vec![reference.clone()];
    for op in input.ops.iter().take(MAX_OPS) {
        let before = reference.clone();
        let (call, expected) = reference.apply(op);
        let got = system.run(&call, &reference).await;
        if system.normalise(&got) == system.normalise(&expected) {
            continue;
        }
        if disk.is_dead() {
            allowed = vec![before, reference.clone()];
            break;
        }
        return Err(format!(
            "before any fault, {call:?}\n  model:  {expected:?}\n  system: {got:?}"
        ));
    }
    if !disk.is_dead() {
        allowed = vec![reference.clone()];
        // The power goes now: nothing the queue does from here on reaches
        // the disk.
        disk.cut_power_after(0);
    }
    let _ = queue.close().await;
    drop(system);
    let (image, _) = disk.after_power_loss(input.keep_seed);
    let after = SimDisk::from_image(image);
    let reopened = open_once(after.backend(), config, ahead, true)
        .await
        .map_err(|e| format!("the file does not open after the cut: {e}"))?;
    let located = reopened
        .audit()
        .await
        .map_err(|e| format!("recount after the cut: {e}"))?;
    let stats = reopened
        .stats()
        .await
        .map_err(|e| format!("stats after the cut: {e}"))?;
    let paused = reopened
        .paused_flows()
        .await
        .map_err(|e| format!("paused flows after the cut: {e}"))?;
    // All is read: the close's writes are never looked at, so the power
    // goes first and a failed write skips them (and redb's record of its
    // allocator state).
    after.cut_power_after(0);
    let _ = reopened.close().await;
    let now = crate::Clock::now_ms(&clock);
    let matches = |r: &Reference| {
        let m = r.model();
        m.locations() == located && m.stats(now) == stats && m.paused_flows() == paused
    };
    if allowed.iter().any(matches) {
        return Ok(());
    }
    let want: Vec<(BTreeMap<u64, ItemState>, Stats)> = allowed
        .iter()
        .map(|r| (r.model().locations(), r.model().stats(now)))
        .collect();
    Err(format!(
        "state after the cut is none of the allowed ones\n  allowed: {want:?}\n  found:   {located:?} {stats:?}"
    ))
}
