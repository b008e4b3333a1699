//! `Arbitrary` for [`Op`], by hand: the fuzz targets' bytes into ops.

use arbitrary::{Arbitrary, Result, Unstructured};

use super::Op;

/// How many variants `#[derive(Arbitrary)]` drew from before the item and
/// flow controls were added: the committed fuzz inputs were made so.
const BASE_VARIANTS: u64 = 41;

/// With the controls ([`Op::Promote`], [`Op::Remove`], [`Op::BackOffFor`]).
const ALL_VARIANTS: u64 = BASE_VARIANTS + 3;

/// One [`Op`] from `u`, the variant drawn as `#[derive(Arbitrary)]` draws
/// it (a `u32` scaled to the number of variants) and its fields in order.
/// Without `controls` the draw is over the first 41 variants, exactly as
/// the derive decoded `Op` before the three controls were added, so that
/// committed inputs keep their meaning; with it, over all 44.
///
/// # Errors
///
/// As `Arbitrary`: only when `u` runs out in a way the types refuse.
pub fn arbitrary_op(u: &mut Unstructured<'_>, controls: bool) -> Result<Op> {
    let n = if controls {
        ALL_VARIANTS
    } else {
        BASE_VARIANTS
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
        _ => Op::BackOffFor(u.arbitrary()?, u.arbitrary()?),
    })
}

impl<'a> Arbitrary<'a> for Op {
    /// [`arbitrary_op`] over every variant.
    fn arbitrary(u: &mut Unstructured<'a>) -> Result<Self> {
        arbitrary_op(u, true)
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
        arbitrary_op(u, false).map(LegacyOp)
    }
}
