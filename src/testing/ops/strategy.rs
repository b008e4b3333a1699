//! Proptest strategies for [`Op`]s and [`Setup`]s (`tests/model.rs`).

use proptest::prelude::*;

use super::{ItemSpec, MAX_BATCH, Op, Setup};

/// A proptest strategy for one [`Op`], weighted so that sequences add,
/// claim and finish items often and look or reopen now and then, with the
/// item and flow controls.
pub fn op_strategy() -> BoxedStrategy<Op> {
    op_strategy_with(true)
}

/// As [`op_strategy`], with the item and flow controls ([`Op::Promote`],
/// [`Op::Remove`], [`Op::Cancel`], [`Op::WaitCancelled`], [`Op::Update`],
/// [`Op::BackOffFor`]) if `controls`.
pub fn op_strategy_with(controls: bool) -> BoxedStrategy<Op> {
    let base = base_strategy();
    if !controls {
        return base;
    }
    let byte = any::<u8>;
    prop_oneof![
        90 => base,
        3 => byte().prop_map(Op::Promote),
        3 => byte().prop_map(Op::Remove),
        3 => byte().prop_map(Op::Cancel),
        1 => Just(Op::WaitCancelled),
        3 => (byte(), byte(), byte()).prop_map(|(i, w, d)| Op::Update(i, w, d)),
        3 => (byte(), byte()).prop_map(|(f, d)| Op::BackOffFor(f, d)),
        2 => (byte(), byte()).prop_map(|(n, v)| Op::UpsertSchedule(n, v)),
        4 => Just(Op::FireSchedules),
        1 => byte().prop_map(Op::PauseSchedule),
        1 => byte().prop_map(Op::ResumeSchedule),
        1 => byte().prop_map(Op::RemoveSchedule),
        1 => Just(Op::Schedules),
        1 => (byte(), byte()).prop_map(|(n, c)| Op::PreviewSchedule(n, c)),
    ]
    .boxed()
}

/// Every op but the controls.
fn base_strategy() -> BoxedStrategy<Op> {
    let item = (
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<Option<u8>>(),
        any::<u8>(),
    )
        .prop_map(|(flow, len, fill, dedup, tier)| ItemSpec {
            flow,
            len: len % 12,
            fill,
            dedup: dedup.filter(|k| k % 2 == 0),
            tier,
        });
    let byte = any::<u8>;
    prop_oneof![
        8 => item.clone().prop_map(Op::Add),
        2 => proptest::collection::vec(item.clone(), 0..=MAX_BATCH).prop_map(Op::AddBatch),
        4 => (item, byte()).prop_map(|(i, d)| Op::AddDelayed(i, d)),
        1 => Just(Op::NextDue),
        1 => Just(Op::PromoteDue),
        8 => (byte(), any::<bool>()).prop_map(|(count, d)| Op::Claim { count, due_only: d && count % 4 == 0 }),
        5 => byte().prop_map(Op::Ack),
        2 => proptest::collection::vec(byte(), 0..=MAX_BATCH).prop_map(Op::AckBatch),
        3 => (byte(), byte()).prop_map(|(r, b)| Op::AckWithResult(r, b)),
        2 => byte().prop_map(Op::Outcome),
        2 => (byte(), byte()).prop_map(|(r, b)| Op::SetProgress(r, b)),
        2 => (byte(), byte()).prop_map(|(r, b)| Op::SendChunk(r, b)),
        1 => byte().prop_map(Op::Progress),
        2 => (byte(), byte()).prop_map(|(i, a)| Op::Chunks(i, a)),
        2 => proptest::collection::vec(byte(), 0..=MAX_BATCH).prop_map(Op::Touch),
        4 => (byte(), byte()).prop_map(|(r, d)| Op::Retry(r, d)),
        2 => (byte(), byte()).prop_map(|(r, d)| Op::Release(r, d)),
        2 => (byte(), byte()).prop_map(|(r, w)| Op::DeadLetter(r, w)),
        3 => (byte(), byte()).prop_map(|(idle, count)| Op::Reclaim { idle, count }),
        2 => byte().prop_map(Op::Pause),
        2 => byte().prop_map(Op::Resume),
        2 => byte().prop_map(Op::Park),
        2 => byte().prop_map(Op::Step),
        1 => byte().prop_map(Op::ClearFlow),
        1 => byte().prop_map(Op::Parked),
        1 => Just(Op::PausedFlows),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::RateLimit(f, v)),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::Concurrency(f, v)),
        2 => (byte(), byte()).prop_map(|(f, v)| Op::BackOff(f, v)),
        1 => Just(Op::FlowLimits),
        2 => (byte(), byte()).prop_map(|(i, s)| Op::MarkDone(i, s)),
        2 => (byte(), byte()).prop_map(|(i, s)| Op::WasDone(i, s)),
        1 => byte().prop_map(Op::DeadLetters),
        2 => byte().prop_map(Op::Redrive),
        1 => Just(Op::PurgeDeadLetters),
        1 => Just(Op::Stats),
        1 => byte().prop_map(Op::BacklogByFlow),
        1 => byte().prop_map(Op::Peek),
        5 => byte().prop_map(Op::Advance),
        1 => byte().prop_map(Op::StepBack),
        1 => Just(Op::Reopen),
    ]
    .boxed()
}

/// A proptest strategy for a [`Setup`].
pub fn setup_strategy() -> BoxedStrategy<Setup> {
    (
        any::<Option<u8>>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
        any::<u8>(),
    )
        .prop_map(
            |(
                max_backlog,
                dead_letter_cap,
                max_deliveries,
                dedup_window,
                done_ttl,
                payload,
                result_ttl,
                aging,
            )| {
                Setup {
                    max_backlog,
                    dead_letter_cap,
                    max_deliveries,
                    dedup_window,
                    done_ttl,
                    max_payload_bytes: payload,
                    result_ttl,
                    aging_step: aging,
                }
            },
        )
        .boxed()
}
