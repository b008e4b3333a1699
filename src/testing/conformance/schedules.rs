//! Conformance cases of SPEC 13, schedules: exactly once per slot, the
//! catch-up and overlap policies, DST, clock steps, concurrent firers and
//! upserts, and the operations.

use std::time::Duration;

use super::{Factory, T0, claim, env, invalid};
use crate::queue::WorkQueue;
use crate::schedule::ScheduleQueue;
use crate::schedule::{CatchUp, Overlap, Schedule};

const TEN_S: Duration = Duration::from_secs(10);

fn every_10s(name: &str) -> Schedule {
    Schedule::every(name, TEN_S)
        .unwrap()
        .payload(name.as_bytes().to_vec())
}

/// Claim and ack everything ready, returning each item's slot
/// (`not_before_ms`) and payload, slot order.
async fn take_all(q: &crate::BoxQueue) -> Vec<(u64, String)> {
    let mut out = Vec::new();
    loop {
        let got = claim(q, 100).await;
        if got.is_empty() {
            break;
        }
        for c in got {
            out.push((
                c.item.not_before_ms.unwrap_or(0),
                String::from_utf8_lossy(&c.item.payload).into_owned(),
            ));
            q.ack(c.receipt).await.unwrap();
        }
    }
    out.sort();
    out
}

/// A schedule fires its slot once, into an item delayed until the slot
/// (so `not_before_ms` is the slot time): firing again in the same slot
/// makes nothing, the next slot makes the next item.
pub async fn schedule_fires_each_slot_exactly_once(f: &dyn Factory) {
    let e = env(f).await;
    assert!(e.q.upsert_schedule(every_10s("tick")).await.unwrap());
    let fired = e.q.fire_schedules().await.unwrap();
    assert_eq!(fired.items, 1);
    assert_eq!(fired.next_fire_ms, Some(T0 + 10_000));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    e.clock.advance(Duration::from_millis(9_999));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    e.clock.advance(Duration::from_millis(1));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    assert_eq!(
        take_all(&e.q).await,
        vec![(T0, "tick".to_string()), (T0 + 10_000, "tick".to_string())]
    );
    let listed = e.q.schedules().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].fired, 2);
    assert_eq!(listed[0].last_fired_ms, Some(T0 + 10_000));
    assert_eq!(listed[0].next_fire_ms, Some(T0 + 20_000));
    assert!(listed[0].last_item.is_some());
}

/// Many firers of one queue at once (clones of the handle, each its own
/// call and transaction) make one item per slot between them.
pub async fn concurrent_firers_make_one_item_per_slot(f: &dyn Factory) {
    let e = env(f).await;
    for n in 0..3 {
        e.q.upsert_schedule(every_10s(&format!("s{n}")))
            .await
            .unwrap();
    }
    for round in 0..3u64 {
        let calls: Vec<_> = (0..6)
            .map(|_| {
                let q = e.q.clone();
                tokio::spawn(async move { q.fire_schedules().await.unwrap().items })
            })
            .collect();
        let mut made = 0;
        for c in calls {
            made += c.await.unwrap();
        }
        assert_eq!(made, 3, "round {round}");
        e.clock.advance(TEN_S);
    }
    let got = take_all(&e.q).await;
    assert_eq!(got.len(), 9, "{got:?}");
}

/// Downtime, catch-up `latest` (the default): one item for the latest
/// missed slot; the others count as skipped.
pub async fn catch_up_latest_fires_the_latest_missed_slot(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("l")).await.unwrap();
    e.clock.advance(Duration::from_secs(55));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    assert_eq!(take_all(&e.q).await, vec![(T0 + 50_000, "l".to_string())]);
    let s = &e.q.schedules().await.unwrap()[0];
    assert_eq!((s.fired, s.skipped), (1, 5));
    assert_eq!(s.next_fire_ms, Some(T0 + 60_000));
}

/// Catch-up `skip`: missed slots make nothing; a slot within the grace
/// (1 s) still fires.
pub async fn catch_up_skip_fires_only_on_time_slots(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("s").catch_up(CatchUp::Skip))
        .await
        .unwrap();
    e.clock.advance(Duration::from_secs(55));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    e.clock.advance(Duration::from_millis(5_500));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    assert_eq!(take_all(&e.q).await, vec![(T0 + 60_000, "s".to_string())]);
}

/// Catch-up `all` with a cap: every missed slot, oldest first, at most
/// the cap (the most recent ones).
pub async fn catch_up_all_fires_missed_slots_up_to_the_cap(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("a").catch_up(CatchUp::All { cap: 4 }))
        .await
        .unwrap();
    e.clock.advance(Duration::from_secs(55));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 4);
    let slots: Vec<u64> = take_all(&e.q).await.iter().map(|(t, _)| *t).collect();
    assert_eq!(
        slots,
        vec![T0 + 20_000, T0 + 30_000, T0 + 40_000, T0 + 50_000]
    );
}

/// Overlap `skip`: no new item while the previous one is unfinished.
pub async fn overlap_skip_waits_for_the_previous_item(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("o").overlap(Overlap::Skip))
        .await
        .unwrap();
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    e.clock.advance(TEN_S);
    assert_eq!(
        e.q.fire_schedules().await.unwrap().items,
        0,
        "previous still waiting"
    );
    let held = claim(&e.q, 1).await;
    assert_eq!(held.len(), 1);
    e.clock.advance(TEN_S);
    assert_eq!(
        e.q.fire_schedules().await.unwrap().items,
        0,
        "previous still pending"
    );
    e.q.ack(held[0].receipt).await.unwrap();
    e.clock.advance(TEN_S);
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    let s = &e.q.schedules().await.unwrap()[0];
    assert_eq!((s.fired, s.skipped), (2, 2));
}

/// A clock stepped back never fires a slot again; stepped forward, the
/// catch-up policy applies (SPEC 13, Clock steps).
pub async fn clock_steps_never_fire_a_slot_twice(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("c")).await.unwrap();
    // Each firing's items are taken at once: a clock step back moves the
    // stored times of waiting timers (SPEC 3, Clock steps), and the slots are read
    // from them.
    let mut slots = Vec::new();
    for (at, want) in [
        (T0, 1),
        (T0 + 10_000, 1),
        (T0 - 3_600_000, 0),
        (T0 + 10_000, 0),
        (T0 + 3_600_000 + 5, 1),
    ] {
        e.clock.set(at);
        assert_eq!(e.q.fire_schedules().await.unwrap().items, want, "at {at}");
        slots.extend(take_all(&e.q).await.iter().map(|(t, _)| *t));
    }
    assert_eq!(slots, vec![T0, T0 + 10_000, T0 + 3_600_000]);
}

/// Upserts racing a firer never duplicate or drop the slot in flight: the
/// due slot makes exactly one item, with the old payload or the new.
pub async fn concurrent_upserts_keep_the_slot_in_flight(f: &dyn Factory) {
    let e = env(f).await;
    e.q.upsert_schedule(every_10s("u")).await.unwrap();
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 1);
    e.clock.advance(TEN_S);
    let mut tasks = Vec::new();
    for n in 0..4 {
        let q = e.q.clone();
        tasks.push(tokio::spawn(async move {
            assert!(
                !q.upsert_schedule(every_10s("u").payload(format!("v{n}").into_bytes()))
                    .await
                    .unwrap()
            );
            0u64
        }));
        let q = e.q.clone();
        tasks.push(tokio::spawn(async move {
            q.fire_schedules().await.unwrap().items
        }));
    }
    let mut made = 0;
    for t in tasks {
        made += t.await.unwrap();
    }
    made += e.q.fire_schedules().await.unwrap().items;
    assert_eq!(made, 1);
    let got = take_all(&e.q).await;
    assert_eq!(got.len(), 2, "{got:?}");
    assert_eq!((got[0].0, got[1].0), (T0, T0 + 10_000));
    assert_eq!(
        e.q.schedules().await.unwrap()[0].next_fire_ms,
        Some(T0 + 20_000)
    );
}

/// Pause, resume, list, preview and remove (SPEC 13, Operations).
pub async fn schedule_operations_pause_resume_preview_remove(f: &dyn Factory) {
    let e = env(f).await;
    assert!(e.q.upsert_schedule(every_10s("p")).await.unwrap());
    assert_eq!(
        e.q.preview_schedule("p", 3).await.unwrap(),
        vec![T0, T0 + 10_000, T0 + 20_000]
    );
    assert!(e.q.pause_schedule("p").await.unwrap());
    assert!(!e.q.pause_schedule("nope").await.unwrap());
    e.clock.advance(Duration::from_secs(25));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    assert!(e.q.schedules().await.unwrap()[0].paused);
    // Resumed, it goes on from its next slot after now: the paused slots
    // are not caught up.
    assert!(e.q.resume_schedule("p").await.unwrap());
    let s = &e.q.schedules().await.unwrap()[0];
    assert_eq!((s.paused, s.next_fire_ms), (false, Some(T0 + 30_000)));
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    invalid(e.q.preview_schedule("nope", 1).await);
    assert!(e.q.remove_schedule("p").await.unwrap());
    assert!(!e.q.remove_schedule("p").await.unwrap());
    assert!(e.q.schedules().await.unwrap().is_empty());
    e.clock.advance(TEN_S);
    assert_eq!(e.q.fire_schedules().await.unwrap().items, 0);
    // A run limit ends the schedule.
    e.q.upsert_schedule(every_10s("twice").limit(2))
        .await
        .unwrap();
    for _ in 0..4 {
        e.q.fire_schedules().await.unwrap();
        e.clock.advance(TEN_S);
    }
    let s = &e.q.schedules().await.unwrap()[0];
    assert_eq!((s.fired, s.next_fire_ms), (2, None));
    assert!(e.q.preview_schedule("twice", 5).await.unwrap().is_empty());
}

/// Fire a daily or hourly cron schedule through `instants` (the clock set
/// to each, then a firing) and return the slots that made items.
async fn fire_through(
    f: &dyn Factory,
    expr: &str,
    tz: &str,
    start: u64,
    instants: &[u64],
) -> Vec<u64> {
    let e = env(f).await;
    e.clock.set(start);
    let s = Schedule::cron("dst", expr, tz).unwrap();
    e.q.upsert_schedule(s).await.unwrap();
    for t in instants {
        e.clock.set(*t);
        e.q.fire_schedules().await.unwrap();
    }
    take_all(&e.q).await.iter().map(|(t, _)| *t).collect()
}

/// ms of a UTC date and time.
fn utc(y: i32, mo: u32, d: u32, h: u32, mi: u32) -> u64 {
    // Days from civil (Howard Hinnant's algorithm), to keep the case free
    // of a calendar crate.
    let y = i64::from(if mo <= 2 { y - 1 } else { y });
    let era = (if y >= 0 { y } else { y - 399 }) / 400;
    let yoe = y - era * 400;
    let m = i64::from(mo);
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + i64::from(d) - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 86_400 + i64::from(h) * 3600 + i64::from(mi) * 60) * 1000) as u64
}

/// Every 15 minutes from `from` to `to` (ms).
fn quarter_hours(from: u64, to: u64) -> Vec<u64> {
    (0..)
        .map(|k| from + k * 900_000)
        .take_while(|t| *t <= to)
        .collect()
}

/// SPEC 13, DST: a daily schedule in the hour a spring change skips fires
/// once, at the change (Europe/Berlin and America/New_York), and in the
/// hour an autumn change repeats fires once, at the first pass; never
/// twice, never zero times.
pub async fn dst_changes_fire_each_daily_slot_once(f: &dyn Factory) {
    // Berlin, 2026-03-29: 02:00 CET becomes 03:00 CEST (01:00 UTC).
    let got = fire_through(
        f,
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 3, 27, 12, 0),
        &quarter_hours(utc(2026, 3, 28, 0, 0), utc(2026, 3, 31, 0, 0)),
    )
    .await;
    assert_eq!(
        got,
        vec![
            utc(2026, 3, 28, 1, 30),
            utc(2026, 3, 29, 1, 0),
            utc(2026, 3, 30, 0, 30)
        ]
    );
    // Berlin, 2026-10-25: 03:00 CEST becomes 02:00 CET (01:00 UTC); 02:30
    // happens twice and fires at the first.
    let got = fire_through(
        f,
        "30 2 * * *",
        "Europe/Berlin",
        utc(2026, 10, 23, 12, 0),
        &quarter_hours(utc(2026, 10, 24, 0, 0), utc(2026, 10, 27, 0, 0)),
    )
    .await;
    assert_eq!(
        got,
        vec![
            utc(2026, 10, 24, 0, 30),
            utc(2026, 10, 25, 0, 30),
            utc(2026, 10, 26, 1, 30)
        ]
    );
    // New York, 2026-03-08: 02:00 EST becomes 03:00 EDT (07:00 UTC).
    let got = fire_through(
        f,
        "30 2 * * *",
        "America/New_York",
        utc(2026, 3, 6, 12, 0),
        &quarter_hours(utc(2026, 3, 7, 0, 0), utc(2026, 3, 10, 0, 0)),
    )
    .await;
    assert_eq!(
        got,
        vec![
            utc(2026, 3, 7, 7, 30),
            utc(2026, 3, 8, 7, 0),
            utc(2026, 3, 9, 6, 30)
        ]
    );
    // New York, 2026-11-01: 02:00 EDT becomes 01:00 EST (06:00 UTC); 01:30
    // happens twice and fires at the first.
    let got = fire_through(
        f,
        "30 1 * * *",
        "America/New_York",
        utc(2026, 10, 30, 12, 0),
        &quarter_hours(utc(2026, 10, 31, 0, 0), utc(2026, 11, 3, 0, 0)),
    )
    .await;
    assert_eq!(
        got,
        vec![
            utc(2026, 10, 31, 5, 30),
            utc(2026, 11, 1, 5, 30),
            utc(2026, 11, 2, 6, 30)
        ]
    );
}

/// SPEC 13, DST: an hourly schedule fires once per wall-clock hour
/// through an autumn change (the repeated hour fires at its first pass)
/// and skips nothing through a spring change but the hour that does not
/// exist.
pub async fn dst_changes_fire_hourly_slots_once_per_wall_clock_hour(f: &dyn Factory) {
    let got = fire_through(
        f,
        "0 * * * *",
        "Europe/Berlin",
        utc(2026, 10, 24, 21, 30),
        &quarter_hours(utc(2026, 10, 24, 22, 0), utc(2026, 10, 25, 3, 0)),
    )
    .await;
    // Local 00:00 CEST, 01:00 CEST, 02:00 CEST (first pass), 03:00 CET,
    // 04:00 CET.
    assert_eq!(
        got,
        vec![
            utc(2026, 10, 24, 22, 0),
            utc(2026, 10, 24, 23, 0),
            utc(2026, 10, 25, 0, 0),
            utc(2026, 10, 25, 2, 0),
            utc(2026, 10, 25, 3, 0),
        ]
    );
}
