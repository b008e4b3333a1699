//! Whole runs: a sequence of [`Op`]s on a target and on the reference in
//! lock step, each reply compared at once and the whole state every
//! [`CHECK_EVERY`] steps and at the end.

#[cfg(feature = "embedded")]
use super::START_MS;
use super::reference::Reference;
#[cfg(feature = "embedded")]
use super::target::EmbeddedTarget;
use super::target::Target;
use super::{Op, Setup, System};
use crate::clock::ManualClock;

/// How many steps a run takes between two comparisons of the whole state
/// ([`System::check`]: `stats`, the recount, every state listed page by
/// page, a `find` per item). Every step's reply is compared at once (that
/// is the oracle); the whole state, which costs some 10 calls plus one per
/// item, is compared every 16 steps and after the last, so that a fuzz
/// execution spends its time on the operations (a state that went wrong
/// shows in the replies that follow, or at the next check).
pub const CHECK_EVERY: usize = 16;

/// How a backend is compared with the model in a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Compare {
    /// What the backend's `stats().durable` says.
    pub durable: bool,
    /// Whether the backend can close and reopen ([`Op::Reopen`] is a
    /// `stats` otherwise).
    pub reopen: bool,
    /// Whether its lease numbers must equal the model's (otherwise they
    /// only have to be unique).
    pub exact_leases: bool,
    /// Steps between two comparisons of the whole state (at least 1; the
    /// last step is always followed by one).
    pub check_every: usize,
}

impl Compare {
    /// The embedded backend: durable, reopened, exact leases, the whole
    /// state every [`CHECK_EVERY`] steps.
    pub const EMBEDDED: Compare = Compare {
        durable: true,
        reopen: true,
        exact_leases: true,
        check_every: CHECK_EVERY,
    };
}

/// Run `ops` from `setup` on `target` (whose queue reads `clock`, started
/// at [`START_MS`](super::START_MS)) and on the model in lock step: every
/// reply compared at once, the whole state every `compare.check_every`
/// steps and after the last.
///
/// Gives the system back, its queue still open, so that the caller decides
/// how it ends (a fuzz target cuts the simulated disk's power first: the
/// close's writes are never looked at).
///
/// # Errors
///
/// A description of the first difference, with the step number.
pub async fn run_ops(
    target: Box<dyn Target>,
    clock: ManualClock,
    setup: &Setup,
    ops: &[Op],
    compare: Compare,
) -> Result<System, String> {
    let mut reference = Reference::new(setup, compare.durable, compare.reopen);
    let mut system = System::new(target, clock, compare.exact_leases);
    let every = compare.check_every.max(1);
    for (n, op) in ops.iter().enumerate() {
        let _ = reference.apply(op);
        system
            .step(&reference)
            .await
            .map_err(|e| format!("step {n} ({op:?}): {e}"))?;
        if (n + 1) % every == 0 || n + 1 == ops.len() {
            system
                .check(&reference)
                .await
                .map_err(|e| format!("after step {n} ({op:?}): {e}"))?;
        }
    }
    if ops.is_empty() {
        system.check(&reference).await?;
    }
    Ok(system)
}

/// Run `ops` from `setup` on the embedded backend (a fresh file in a temp
/// dir) and on the model, as [`run_ops`] with [`Compare::EMBEDDED`].
///
/// # Errors
///
/// As [`run_ops`], and a failed open.
#[cfg(feature = "embedded")]
pub async fn run_embedded(setup: &Setup, ops: &[Op]) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let target = EmbeddedTarget::new(setup.config().clock(clock.clone()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    run_ops(Box::new(target), clock, setup, ops, Compare::EMBEDDED)
        .await
        .map(drop)
}

/// As [`run_embedded`], on [`EmbeddedTarget::in_memory`] named `name`
/// (unique in the process): the same comparison without the file system.
///
/// # Errors
///
/// As [`run_embedded`].
#[cfg(feature = "embedded")]
pub async fn run_embedded_in_memory(name: String, setup: &Setup, ops: &[Op]) -> Result<(), String> {
    run_embedded_on_disk(name, crate::testing::faults::SimDisk::new(), setup, ops).await
}

/// As [`run_embedded_in_memory`], on `disk`, which must hold nothing or a
/// fresh, empty queue (a copy of one's
/// [`image`](crate::testing::faults::SimDisk::image): the model starts
/// empty). Once the run is checked, the disk's power is cut before the
/// queue closes: the close's last checkpoint and redb's record of its
/// allocator state (a third of an execution's CPU in a fuzz build) are
/// never looked at, and a write that fails skips both.
///
/// # Errors
///
/// As [`run_embedded`].
#[cfg(feature = "embedded")]
pub async fn run_embedded_on_disk(
    name: String,
    disk: crate::testing::faults::SimDisk,
    setup: &Setup,
    ops: &[Op],
) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let power = disk.clone();
    let target = EmbeddedTarget::on_disk(name, disk, setup.config().clock(clock.clone()))
        .await
        .map_err(|e| format!("open: {e}"))?;
    let system = run_ops(Box::new(target), clock, setup, ops, Compare::EMBEDDED).await?;
    power.cut_power_after(0);
    drop(system);
    Ok(())
}
