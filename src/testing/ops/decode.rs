//! `Arbitrary` for [`Op`], by hand: the fuzz targets' bytes into ops.

use arbitrary::{Arbitrary, Result, Unstructured};

use super::Op;

/// How many variants `#[derive(Arbitrary)]` drew from before the item and
/// flow controls were added: the committed fuzz inputs were made so.
const BASE_VARIANTS: u64 = 41;

/// With the controls ([`Op::Promote`], [`Op::Remove`], [`Op::BackOffFor`]).
const CONTROL_VARIANTS: u64 = BASE_VARIANTS + 3;

/// With cancelling, updating and the schedules: every variant.
const ALL_VARIANTS: u64 = CONTROL_VARIANTS + 10;

/// Which of [`Op`]'s variants a decode draws from: each is a decode that
/// committed fuzz inputs were made with, kept so that they replay as the
/// sequences they were found as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// The first 41 variants, as `#[derive(Arbitrary)]` decoded `Op`
    /// before the item and flow controls ([`LegacyOp`]).
    Base,
    /// The first 44: with [`Op::Promote`], [`Op::Remove`] and
    /// [`Op::BackOffFor`], before cancelling, updating and the schedules
    /// ([`ControlsOp`]).
    Controls,
    /// Every variant (`Op`'s own `Arbitrary`).
    All,
}

/// One [`Op`] from `u`, the variant drawn as `#[derive(Arbitrary)]` draws
/// it (a `u32` scaled to the number of variants `draw` allows) and its
/// fields in order. [`Draw::Base`] and [`Draw::Controls`] decode exactly
/// as `Op` was decoded when they were all there was, so that committed
/// inputs keep their meaning.
///
/// # Errors
///
/// As `Arbitrary`: only when `u` runs out in a way the types refuse.
pub fn arbitrary_op(u: &mut Unstructured<'_>, draw: Draw) -> Result<Op> {
    let n = match draw {
        Draw::Base => BASE_VARIANTS,
        Draw::Controls => CONTROL_VARIANTS,
        Draw::All => ALL_VARIANTS,
    };
    let tag = (u64::from(u32::arbitrary(u)?) * n) >> 32;
    Ok(match tag {
        0 => Op::Add(u.arbitrary()?),
        1 => Op::AddBatch(u.arbitrary()?),
        2 => Op::AddDelayed(u.arbitrary()?, u.arbitrary()?),
        3 => Op::NextDue,
        4 => Op::PromoteDue,
        5 => Op::Claim {
            count: u.arbitrary()?,
            due_only: u.arbitrary()?,
        },
        6 => Op::Ack(u.arbitrary()?),
        7 => Op::AckBatch(u.arbitrary()?),
        8 => Op::AckWithResult(u.arbitrary()?, u.arbitrary()?),
        9 => Op::Outcome(u.arbitrary()?),
        10 => Op::SetProgress(u.arbitrary()?, u.arbitrary()?),
        11 => Op::SendChunk(u.arbitrary()?, u.arbitrary()?),
        12 => Op::Progress(u.arbitrary()?),
        13 => Op::Chunks(u.arbitrary()?, u.arbitrary()?),
        14 => Op::Touch(u.arbitrary()?),
        15 => Op::Retry(u.arbitrary()?, u.arbitrary()?),
        16 => Op::Release(u.arbitrary()?, u.arbitrary()?),
        17 => Op::DeadLetter(u.arbitrary()?, u.arbitrary()?),
        18 => Op::Reclaim {
            idle: u.arbitrary()?,
            count: u.arbitrary()?,
        },
        19 => Op::Pause(u.arbitrary()?),
        20 => Op::Resume(u.arbitrary()?),
        21 => Op::Park(u.arbitrary()?),
        22 => Op::Step(u.arbitrary()?),
        23 => Op::ClearFlow(u.arbitrary()?),
        24 => Op::Parked(u.arbitrary()?),
        25 => Op::PausedFlows,
        26 => Op::RateLimit(u.arbitrary()?, u.arbitrary()?),
        27 => Op::Concurrency(u.arbitrary()?, u.arbitrary()?),
        28 => Op::BackOff(u.arbitrary()?, u.arbitrary()?),
        29 => Op::FlowLimits,
        30 => Op::MarkDone(u.arbitrary()?, u.arbitrary()?),
        31 => Op::WasDone(u.arbitrary()?, u.arbitrary()?),
        32 => Op::DeadLetters(u.arbitrary()?),
        33 => Op::Redrive(u.arbitrary()?),
        34 => Op::PurgeDeadLetters,
        35 => Op::Stats,
        36 => Op::BacklogByFlow(u.arbitrary()?),
        37 => Op::Peek(u.arbitrary()?),
        38 => Op::Advance(u.arbitrary()?),
        39 => Op::StepBack(u.arbitrary()?),
        40 => Op::Reopen,
        41 => Op::Promote(u.arbitrary()?),
        42 => Op::Remove(u.arbitrary()?),
        43 => Op::BackOffFor(u.arbitrary()?, u.arbitrary()?),
        44 => Op::Cancel(u.arbitrary()?),
        45 => Op::WaitCancelled,
        46 => Op::Update(u.arbitrary()?, u.arbitrary()?, u.arbitrary()?),
        47 => Op::UpsertSchedule(u.arbitrary()?, u.arbitrary()?),
        48 => Op::FireSchedules,
        49 => Op::PauseSchedule(u.arbitrary()?),
        50 => Op::ResumeSchedule(u.arbitrary()?),
        51 => Op::RemoveSchedule(u.arbitrary()?),
        52 => Op::Schedules,
        _ => Op::PreviewSchedule(u.arbitrary()?, u.arbitrary()?),
    })
}

impl<'a> Arbitrary<'a> for Op {
    /// [`arbitrary_op`] over every variant.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        arbitrary_op(u, Draw::All)
    }
}

/// An [`Op`] decoded as the fuzz inputs committed before [`Op::Promote`],
/// [`Op::Remove`] and [`Op::BackOffFor`] were made ([`arbitrary_op`]
/// without the controls): the regression tests replay every committed
/// input both ways, so that an old finding still means what it meant.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyOp(pub Op);

impl<'a> Arbitrary<'a> for LegacyOp {
    /// [`arbitrary_op`] over the first 41 variants.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        arbitrary_op(u, Draw::Base).map(LegacyOp)
    }
}

/// An [`Op`] decoded as the fuzz inputs committed after the item and flow
/// controls and before cancelling, updating and the schedules were drawn
/// ([`arbitrary_op`] with [`Draw::Controls`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControlsOp(pub Op);

impl<'a> Arbitrary<'a> for ControlsOp {
    /// [`arbitrary_op`] over the first 44 variants.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        arbitrary_op(u, Draw::Controls).map(ControlsOp)
    }
}
