//! Round trips and refusals of the redo log's record encoding.

use super::*;

fn limits() -> Limits {
    Limits {
        max_deliveries: 5,
        done_ttl_ms: 1_000,
        result_ttl_ms: 2_000,
        dedup_window_ms: 3_000,
        dead_letter_cap: 7,
        max_backlog: Some(11),
        max_payload_bytes: 1 << 20,
        aging_step: Duration::from_millis(60_500),
        completed_retention: crate::config::Retention::new(13, Duration::from_millis(17_000)),
        cancelled_retention: crate::config::Retention::new(19, Duration::from_millis(23_500)),
    }
}

fn r(id: u64) -> Receipt {
    Receipt {
        id,
        delivery: 2,
        lease: id + 100,
    }
}

fn every_op() -> Vec<Op> {
    vec![
        Op::Add(vec![
            (
                NewItem::new(b"x".to_vec())
                    .flow("f")
                    .dedup_key("k")
                    .priority(3),
                Some(5),
            ),
            (NewItem::new(vec![0; 600]), None),
        ]),
        Op::Promote,
        Op::Claim {
            count: 3,
            from: ClaimFrom::DueOnly,
        },
        Op::Ack(r(1), b"result".to_vec()),
        Op::SetProgress(r(2), b"half".to_vec()),
        Op::SendChunk(r(3), vec![1, 2, 3]),
        Op::AckBatch(vec![r(4), r(5)]),
        Op::Touch(vec![r(6)]),
        Op::Retry(r(7), 99),
        Op::Release(r(8), 98),
        Op::DeadLetter(r(9), "bad".into()),
        Op::Reclaim {
            min_idle_ms: 500,
            count: 2,
        },
        Op::Pause("p".into()),
        Op::Resume("p".into()),
        Op::Park(r(10)),
        Op::Step("s".into()),
        Op::ClearFlow("c".into()),
        Op::MarkDone(12, "step".into()),
        Op::Redrive(13),
        Op::PurgeDead,
        Op::PromoteId(14),
        Op::Remove(15),
        Op::Cancel(16),
        Op::EndCancelled(r(17)),
        Op::Update(18, crate::item::ItemUpdate::new().priority(9)),
        Op::Update(
            19,
            crate::item::ItemUpdate::new()
                .not_before_ms(5_000)
                .payload(b"p2".to_vec()),
        ),
        Op::BackOff("b".into(), 2_500),
        Op::ScheduleSwap(crate::schedule::fire::ScheduleSwap {
            name: "nightly".into(),
            expect: 4,
            write: Some((Some(1_000), vec![1, 2, 3])),
            items: vec![(NewItem::new(b"s".to_vec()).flow("f").priority(2), 990)],
        }),
        Op::ScheduleSwap(crate::schedule::fire::ScheduleSwap {
            name: "gone".into(),
            expect: 7,
            write: None,
            items: Vec::new(),
        }),
        Op::Add(vec![(NewItem::new(b"c".to_vec()).flow("g").cost(3), None)]),
        Op::SetFlowLimit(
            "g".into(),
            FlowLimit::Rate(Some(RateLimit {
                permits: 10,
                period_ms: 1_000,
            })),
        ),
        Op::SetFlowLimit("g".into(), FlowLimit::Rate(None)),
        Op::SetFlowLimit("g".into(), FlowLimit::Concurrency(Some(2))),
        Op::SetFlowLimit("g".into(), FlowLimit::Concurrency(None)),
        Op::SetFlowLimit("g".into(), FlowLimit::BackOffUntil(Some(77))),
        Op::SetFlowLimit("g".into(), FlowLimit::BackOffUntil(None)),
    ]
}

fn body() -> Vec<u8> {
    let mut buf = Vec::new();
    begin_batch(&mut buf, &limits(), 7, 9);
    for (k, op) in every_op().iter().enumerate() {
        assert!(encode_op(&mut buf, op, 1_000 + k as u64), "{op:?}");
    }
    assert!(!encode_op(&mut buf, &Op::Stats, 1));
    buf
}

#[test]
fn every_logged_operation_decodes_to_itself() {
    let batch = decode_batch(&body()).unwrap();
    assert_eq!(format!("{:?}", batch.limits), format!("{:?}", limits()));
    assert_eq!((batch.latest, batch.now), (7, 9));
    let want: Vec<String> = every_op()
        .iter()
        .enumerate()
        .map(|(k, op)| format!("{op:?} at {}", 1_000 + k))
        .collect();
    let got: Vec<String> = batch
        .ops
        .iter()
        .map(|(op, t)| format!("{op:?} at {t}"))
        .collect();
    assert_eq!(got, want);
}

#[test]
fn a_cut_or_garbled_body_is_an_error_never_a_panic() {
    let body = body();
    for n in 0..body.len() {
        // A prefix may end between two operations and decode fine;
        // it must never panic or allocate past the record.
        let _ = decode_batch(&body[..n]);
    }
    let mut rng = fastrand::Rng::with_seed(7);
    for _ in 0..2000 {
        let mut b = body.clone();
        let at = rng.usize(..b.len());
        b[at] = rng.u8(..);
        let _ = decode_batch(&b);
    }
    assert!(decode_batch(&[3]).is_err(), "a newer format is refused");
}

/// A body of format 1 (a schema-7 build's, without the history's
/// retentions) decodes with its settings and operations, keeping no
/// history, as the build that wrote it did (SPEC 6).
#[test]
fn a_format_1_body_replays_keeping_no_history() {
    let l = limits();
    let mut buf = vec![1u8];
    let mut w = W(&mut buf);
    w.u(u64::from(l.max_deliveries));
    w.u(l.done_ttl_ms);
    w.u(l.result_ttl_ms);
    w.u(l.dedup_window_ms);
    w.u(l.dead_letter_cap);
    w.opt(l.max_backlog);
    w.u(l.max_payload_bytes as u64);
    w.u(l.aging_step.as_secs());
    w.u(u64::from(l.aging_step.subsec_nanos()));
    w.u(7);
    w.u(9);
    let op = every_op().remove(0);
    assert!(encode_op(&mut buf, &op, 1_000));
    let batch = decode_batch(&buf).unwrap();
    let none = crate::config::Retention::none();
    assert_eq!(
        (
            batch.limits.completed_retention,
            batch.limits.cancelled_retention
        ),
        (none, none)
    );
    assert_eq!(
        (batch.limits.max_deliveries, batch.limits.dead_letter_cap),
        (5, 7)
    );
    assert_eq!((batch.latest, batch.now), (7, 9));
    assert_eq!(
        format!("{:?}", batch.ops),
        format!("{:?}", vec![(op, 1_000u64)])
    );
}
