//! The runner with the item and flow controls on: the memory backend
//! against the model; and the fuzz decoding of ops, new and legacy.

use proptest::prelude::*;
use proptest::test_runner::{Config as ProptestConfig, TestRunner};

use super::*;
use crate::clock::ManualClock;
use crate::testing::MemoryFactory;

/// The memory backend through its factory: not durable, no reopen, lease
/// numbers only unique.
const MEMORY: Compare = Compare {
    durable: false,
    reopen: false,
    exact_leases: false,
    check_every: 1,
};

fn runtime() -> tokio::runtime::Runtime {
    #[allow(clippy::expect_used)]
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime")
}

async fn run_memory(setup: &Setup, ops: &[Op], compare: Compare) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let target = FactoryTarget::new(&MemoryFactory, setup.config().clock(clock.clone())).await;
    run_ops(Box::new(target), clock, setup, ops, compare)
        .await
        .map(drop)
}

fn item(flow: u8) -> ItemSpec {
    ItemSpec {
        flow,
        len: 3,
        fill: 7,
        dedup: None,
        tier: 0,
    }
}

#[test]
fn controls_reach_their_items_and_agree_with_the_model() {
    let ops = vec![
        Op::AddDelayed(item(1), 200),
        Op::Add(item(1)),
        Op::Add(item(2)),
        // The delayed item (id 1) becomes due now.
        Op::Promote(0),
        Op::Promote(0),
        Op::Claim {
            count: 1,
            due_only: false,
        },
        // Held ids: the claimed one is refused, the others go.
        Op::Remove(0),
        Op::Remove(1),
        Op::Remove(2),
        Op::BackOffFor(1, 40),
        Op::BackOffFor(1, 10),
        Op::FlowLimits,
        Op::BackOffFor(3, 10),
        Op::Advance(200),
        Op::Remove(250),
        Op::Promote(250),
    ];
    let mut reference = Reference::new(&Setup::default(), false, false);
    let replies: Vec<Outcome> = ops.iter().map(|op| reference.apply(op).1).collect();
    assert_eq!(replies[3], Ok(crate::Reply::Bool(true)), "{replies:?}");
    assert_eq!(replies[4], Ok(crate::Reply::Bool(false)), "{replies:?}");
    assert!(
        replies[6..9].contains(&Err(ErrorKind::InvalidInput)),
        "{replies:?}"
    );
    assert!(
        replies[6..9].contains(&Ok(crate::Reply::Bool(true))),
        "{replies:?}"
    );
    assert_eq!(
        replies[12],
        Err(ErrorKind::InvalidInput),
        "a tab in the flow"
    );
    assert_eq!(replies[14], Ok(crate::Reply::Bool(false)), "an unknown id");
    let rt = runtime();
    if let Err(e) = rt.block_on(run_memory(&Setup::default(), &ops, MEMORY)) {
        panic!("{e}");
    }
}

#[test]
fn random_runs_with_controls_agree_on_the_memory_backend() {
    let rt = runtime();
    let mut runner = TestRunner::new(ProptestConfig {
        cases: 64,
        failure_persistence: None,
        ..ProptestConfig::default()
    });
    let strategy = (
        setup_strategy(),
        proptest::collection::vec(op_strategy_with(true), 1..60),
        1..=20usize,
    );
    let result = runner.run(&strategy, |(setup, ops, every)| {
        let compare = Compare {
            check_every: every,
            ..MEMORY
        };
        rt.block_on(run_memory(&setup, &ops, compare))
            .map_err(TestCaseError::fail)
    });
    if let Err(e) = result {
        panic!("{e}");
    }
}

#[test]
fn fuzz_bytes_decode_each_draw_over_its_own_variants() {
    use arbitrary::Unstructured;
    let control = |op: &Op| matches!(op, Op::Promote(_) | Op::Remove(_) | Op::BackOffFor(..));
    let later = |op: &Op| {
        matches!(
            op,
            Op::Cancel(_)
                | Op::WaitCancelled
                | Op::Update(..)
                | Op::UpsertSchedule(..)
                | Op::FireSchedules
                | Op::PauseSchedule(_)
                | Op::ResumeSchedule(_)
                | Op::RemoveSchedule(_)
                | Op::Schedules
                | Op::PreviewSchedule(..)
        )
    };
    let mut seen = [false; 3];
    for seed in 0..4_000u32 {
        // Tags spread over the whole u32 range.
        let tag = seed.wrapping_mul(2_654_435_761);
        let bytes: Vec<u8> = tag.to_le_bytes().iter().copied().cycle().take(8).collect();
        let base = arbitrary_op(&mut Unstructured::new(&bytes), Draw::Base);
        assert!(
            !base.as_ref().is_ok_and(|op| control(op) || later(op)),
            "{base:?}"
        );
        let controls = arbitrary_op(&mut Unstructured::new(&bytes), Draw::Controls);
        assert!(!controls.as_ref().is_ok_and(later), "{controls:?}");
        seen[0] |= controls.as_ref().is_ok_and(control);
        let all = arbitrary_op(&mut Unstructured::new(&bytes), Draw::All);
        seen[1] |= all.as_ref().is_ok_and(later);
        seen[2] |= all.as_ref().is_ok_and(|op| !control(op) && !later(op));
    }
    assert_eq!(seen, [true, true, true]);
    // The base draw is the derive's: the first variant for a zero tag, the
    // last of the 41 for the top one; the top tag of the controls' draw is
    // the last control, and of the whole draw the last schedule op.
    let top = [0xff, 0xff, 0xff, 0xff];
    assert_eq!(
        arbitrary_op(&mut Unstructured::new(&top), Draw::Base).ok(),
        Some(Op::Reopen)
    );
    let zero = [0, 0, 0, 0, 1, 2, 3, 4, 0, 0];
    assert!(matches!(
        arbitrary_op(&mut Unstructured::new(&zero), Draw::Base),
        Ok(Op::Add(_))
    ));
    use arbitrary::Arbitrary;
    let top_then = [0xff, 0xff, 0xff, 0xff, 1, 2, 3];
    assert!(matches!(
        ControlsOp::arbitrary(&mut Unstructured::new(&top_then)),
        Ok(ControlsOp(Op::BackOffFor(..)))
    ));
    assert!(matches!(
        Op::arbitrary(&mut Unstructured::new(&top_then)),
        Ok(Op::PreviewSchedule(..))
    ));
    assert_eq!(
        LegacyOp::arbitrary(&mut Unstructured::new(&top)).ok(),
        Some(LegacyOp(Op::Reopen))
    );
}

#[test]
fn receipts_are_mapped_slot_for_slot_and_forged_ones_pass() {
    let mut reference = Reference::new(&Setup::default(), false, false);
    let _ = reference.apply(&Op::Add(item(0)));
    let (_, claimed) = reference.apply(&Op::Claim {
        count: 1,
        due_only: false,
    });
    let Ok(crate::Reply::Claimed(c)) = claimed else {
        panic!("{claimed:?}");
    };
    let ours = c[0].receipt;
    assert_eq!(reference.slot_of(&ours), Some(0));
    let forged = crate::Receipt {
        id: 9,
        delivery: 1,
        lease: 1 << 60,
    };
    assert_eq!(reference.slot_of(&forged), None);
    let theirs = crate::Receipt { lease: 77, ..ours };
    let request = crate::Request::AckBatch {
        receipts: vec![ours, forged],
    };
    let mapped = map_receipts(request, |r| {
        if reference.slot_of(&r) == Some(0) {
            theirs
        } else {
            r
        }
    });
    assert_eq!(
        mapped,
        crate::Request::AckBatch {
            receipts: vec![theirs, forged]
        }
    );
}
