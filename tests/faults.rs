//! Power loss and disk faults under the embedded backend, on the simulated
//! disk of `workjournal::testing::faults`.
//!
//! Power loss: a queue and a twin (same operations, same manual clock, a
//! disk that never fails) run one random workload; at a random write or
//! sync the queue's disk loses power, keeping only part of what was not yet
//! synced. The file reopened from those bytes must hold exactly the twin's
//! state after the last acknowledged operation, or after the one in
//! flight. redb commits with one fsync and checksummed commit slots: a
//! commit whose pages did not all survive fails its checksum at open and
//! redb falls back to the previous commit, so nothing else is acceptable.
//! `WORKJOURNAL_CUT_POINTS` sets how many cut points (default 200);
//! `WORKJOURNAL_CUT_SEED` replays one run.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use workjournal::testing::faults::{EIO, ENOSPC, SimDisk};
use workjournal::{
    ClaimFrom, Claimed, Clock, Config, EmbeddedQueue, Error, Location, ManualClock, NewItem,
    Receipt, WorkQueue,
};

/// splitmix64.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
}

fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

const FLOWS: [&str; 3] = ["", "a", "b"];

/// One operation of the workload, with its arguments drawn already, so
/// that the queue and its twin get exactly the same call.
#[derive(Debug, Clone)]
enum Op {
    Add(String, Option<String>, usize),
    AddBatch(usize),
    AddDelayed(u64),
    Claim(usize),
    Ack(Receipt),
    AckBatch(Vec<Receipt>),
    Touch(Vec<Receipt>),
    Retry(Receipt, u64),
    DeadLetter(Receipt),
    Reclaim(u64, usize),
    Pause(&'static str),
    Resume(&'static str),
    Park(Receipt),
    Step(&'static str),
    ClearFlow(&'static str),
    MarkDone(u64),
    Redrive(u64),
    PurgeDead,
    Promote,
    Compact,
    Advance(u64),
}

/// Draw the next operation; `held` are receipts from earlier claims.
fn draw(rng: &mut Rng, held: &mut Vec<Receipt>, max_id: u64, now: u64) -> Op {
    let take = |rng: &mut Rng, held: &mut Vec<Receipt>| {
        let i = rng.below(held.len() as u64) as usize;
        held.swap_remove(i)
    };
    let flow = FLOWS[rng.below(3) as usize];
    let named = FLOWS[1 + rng.below(2) as usize];
    match rng.below(100) {
        0..=17 => {
            let dedup = (rng.below(6) == 0).then(|| format!("k{}", rng.below(8)));
            // Now and then a payload of several pages, so commits span
            // more than one page write.
            let size = if rng.below(8) == 0 { 9000 } else { 16 };
            Op::Add(flow.to_string(), dedup, size)
        }
        18..=22 => Op::AddBatch(1 + rng.below(5) as usize),
        23..=27 => Op::AddDelayed(now + rng.below(50)),
        28..=41 => Op::Claim(1 + rng.below(3) as usize),
        42..=45 => Op::Reclaim(rng.below(100), 1 + rng.below(3) as usize),
        46..=47 => Op::Pause(named),
        48..=49 => Op::Resume(named),
        50..=51 => Op::Step(named),
        52 => Op::ClearFlow(named),
        53..=54 => Op::MarkDone(1 + rng.below(max_id + 1)),
        55..=56 => Op::Redrive(1 + rng.below(max_id + 1)),
        57 => Op::PurgeDead,
        58..=59 => Op::Promote,
        60 => Op::Compact,
        61..=65 => Op::Advance(rng.below(40)),
        _ if held.is_empty() => Op::Advance(1),
        66..=79 => Op::Ack(take(rng, held)),
        80..=82 => {
            let n = (1 + rng.below(3) as usize).min(held.len());
            Op::AckBatch(held.drain(..n).collect())
        }
        83..=85 => Op::Touch(held.clone()),
        86..=90 => Op::Retry(take(rng, held), now + rng.below(50)),
        91..=94 => Op::DeadLetter(take(rng, held)),
        _ => Op::Park(take(rng, held)),
    }
}

/// A reply as text (so that two queues' replies compare), with the
/// receipts and ids it hands out.
#[derive(Debug, Default, PartialEq, Eq)]
struct Reply {
    text: String,
    receipts: Vec<Receipt>,
    max_id: u64,
}

fn text(v: &dyn std::fmt::Debug) -> Reply {
    Reply {
        text: format!("{v:?}"),
        ..Reply::default()
    }
}

fn claimed(v: Vec<Claimed>) -> Reply {
    Reply {
        text: format!("{v:?}"),
        receipts: v.iter().map(|c| c.receipt).collect(),
        max_id: 0,
    }
}

/// Run `op` on `q`.
async fn apply(q: &EmbeddedQueue, op: &Op) -> Result<Reply, Error> {
    let s = text;
    Ok(match op {
        Op::Add(flow, dedup, size) => {
            let mut it = NewItem::new(vec![b'x'; *size]).flow(flow.as_str());
            if let Some(k) = dedup {
                it = it.dedup_key(k.as_str());
            }
            let a = q.add(it).await?;
            Reply {
                max_id: a.id,
                ..s(&a)
            }
        }
        Op::AddBatch(n) => {
            let items = (0..*n)
                .map(|i| NewItem::new(format!("b{i}").into_bytes()).flow(FLOWS[i % 3]))
                .collect();
            let v = q.add_batch(items).await?;
            Reply {
                max_id: v.iter().map(|a| a.id).max().unwrap_or(0),
                ..s(&v)
            }
        }
        Op::AddDelayed(at) => {
            let a = q.add_delayed(NewItem::new(b"d".to_vec()), *at).await?;
            Reply {
                max_id: a.id,
                ..s(&a)
            }
        }
        Op::Claim(n) => claimed(q.claim(*n, Duration::ZERO, ClaimFrom::All).await?),
        Op::Ack(r) => s(&q.ack(*r).await?),
        Op::AckBatch(rs) => s(&q.ack_batch(rs.clone()).await?),
        Op::Touch(rs) => s(&q.touch(rs.clone()).await?),
        Op::Retry(r, at) => s(&q.retry(*r, *at).await?),
        Op::DeadLetter(r) => s(&q.dead_letter(*r, "failed").await?),
        Op::Reclaim(idle, n) => claimed(q.reclaim_stale(Duration::from_millis(*idle), *n).await?),
        Op::Pause(f) => s(&q.pause(f).await?),
        Op::Resume(f) => s(&q.resume(f).await?),
        Op::Park(r) => s(&q.park(*r).await?),
        Op::Step(f) => claimed(q.step(f).await?.into_iter().collect()),
        Op::ClearFlow(f) => s(&q.clear_flow(f).await?),
        Op::MarkDone(id) => s(&q.mark_done(*id, "sent").await?),
        Op::Redrive(id) => s(&q.redrive(*id).await?),
        Op::PurgeDead => s(&q.purge_dead_letters().await?),
        Op::Promote => s(&q.promote_due().await?),
        Op::Compact => s(&q.compact().await?),
        // The caller moved the clock already, once for both queues.
        Op::Advance(_) => s(&q.stats().await?),
    })
}

fn config(clock: &ManualClock) -> Config {
    Config::default()
        .clock(clock.clone())
        .max_deliveries(3)
        .dead_letter_cap(6)
        .max_backlog(Some(40))
        .done_ttl(Duration::from_millis(200))
        .dedup_window(Duration::from_millis(150))
}

async fn open(name: &str, disk: &SimDisk, clock: &ManualClock, verify: bool) -> EmbeddedQueue {
    EmbeddedQueue::open_on_backend(name, disk.backend(), config(clock), verify)
        .await
        .unwrap_or_else(|e| panic!("open {name}: {e:?}"))
}

/// Recount invariants: every id in one state, stats equal to a recount.
async fn check_invariants(q: &EmbeddedQueue, what: &str) {
    let locs = q.locations().await.unwrap();
    let mut count: BTreeMap<Location, u64> = BTreeMap::new();
    for (id, places) in &locs {
        assert_eq!(places.len(), 1, "{what}: item {id} is in {places:?}");
        *count.entry(places[0]).or_default() += 1;
    }
    let st = q.stats().await.unwrap();
    let n = |l: Location| count.get(&l).copied().unwrap_or(0);
    assert_eq!(
        (
            st.backlog,
            st.due,
            st.pending,
            st.delayed,
            st.parked,
            st.dead_letters
        ),
        (
            n(Location::Backlog) + n(Location::Due),
            n(Location::Due),
            n(Location::Pending),
            n(Location::Delayed),
            n(Location::Parked),
            n(Location::DeadLetter)
        ),
        "{what}: stats do not match a recount"
    );
}

/// Tallies of a power-loss run.
#[derive(Debug, Default)]
struct Tally {
    cuts: u64,
    /// Reopened at the last acknowledged commit.
    at_last_ack: u64,
    /// Reopened with the operation in flight committed.
    with_in_flight: u64,
    /// Reopened where both are the same (the op in flight changed nothing).
    same: u64,
    writes_lost_or_torn: u64,
    operations: u64,
}

/// Cut the power `cuts` times on one evolving file.
async fn power_loss_run(cuts: u64, seed: u64) -> Tally {
    let mut rng = Rng(seed);
    let clock = ManualClock::new(1_000_000);
    let mut tally = Tally::default();
    let tag = format!("pl{seed}");
    let mut generation = 0u64;
    let mut disk = SimDisk::new();
    let mut twin_disk = SimDisk::new();
    let mut q = open(&format!("{tag}-q{generation}"), &disk, &clock, true).await;
    let mut twin = open(&format!("{tag}-t{generation}"), &twin_disk, &clock, true).await;
    let mut held: Vec<Receipt> = Vec::new();
    let mut max_id = 0u64;
    let mut last = None;
    while tally.cuts < cuts {
        disk.cut_power_after(rng.below(60));
        loop {
            let now = clock.now_ms();
            let op = draw(&mut rng, &mut held, max_id, now);
            if let Op::Advance(ms) = op {
                clock.advance(Duration::from_millis(ms));
            }
            // A dump changes nothing, so the state before this operation
            // is the one after the previous operation.
            let before = match last.take() {
                Some(d) => d,
                None => twin.dump_tables().await.unwrap(),
            };
            let want = apply(&twin, &op).await;
            let after = twin.dump_tables().await.unwrap();
            let got = apply(&q, &op).await;
            last = Some(after.clone());
            tally.operations += 1;
            if let Ok(reply) = &want {
                held.extend(reply.receipts.iter().copied());
                max_id = max_id.max(reply.max_id);
            }
            if !disk.is_dead() {
                assert_eq!(
                    got.as_ref().map_err(|e| e.to_string()),
                    want.as_ref().map_err(|e| e.to_string()),
                    "seed {seed}: {op:?}: the queue and its twin disagree"
                );
                continue;
            }
            let err = got.expect_err("the power was cut during the operation, yet it returned Ok");
            assert!(
                matches!(err, Error::Io { .. } | Error::Storage { .. }),
                "seed {seed}: {op:?} during a power cut failed with {err:?}, not an I/O error"
            );
            q.close().await.unwrap();
            drop(q);
            let (image, summary) = disk.after_power_loss(rng.next());
            tally.writes_lost_or_torn += (summary.writes - summary.kept) as u64;
            generation += 1;
            disk = SimDisk::from_image(image.clone());
            let verify = rng.below(2) == 0;
            q = EmbeddedQueue::open_on_backend(
                &format!("{tag}-q{generation}"),
                disk.backend(),
                config(&clock),
                verify,
            )
            .await
            .unwrap_or_else(|e| {
                panic!(
                    "seed {seed}, cut {}: reopen after power loss ({summary:?}) failed: {e:?}",
                    tally.cuts
                )
            });
            let found = q.dump_tables().await.unwrap();
            if found == before && found == after {
                tally.same += 1;
            } else if found == before {
                tally.at_last_ack += 1;
            } else if found == after {
                tally.with_in_flight += 1;
            } else {
                panic!(
                    "seed {seed}, cut {}: after {op:?} and a power cut ({summary:?}) the file holds \
                     neither the state before it nor after it.\nfound:  {found:?}\nbefore: {before:?}\nafter:  {after:?}",
                    tally.cuts
                );
            }
            check_invariants(&q, &format!("seed {seed}, cut {}", tally.cuts)).await;
            // The twin continues from the same bytes.
            twin.close().await.unwrap();
            twin_disk = SimDisk::from_image(image);
            twin = open(&format!("{tag}-t{generation}"), &twin_disk, &clock, true).await;
            last = None;
            tally.cuts += 1;
            break;
        }
    }
    q.close().await.unwrap();
    twin.close().await.unwrap();
    tally
}

#[tokio::test]
async fn power_loss_leaves_the_last_acknowledged_commit_or_the_one_in_flight() {
    let cuts: u64 = std::env::var("WORKJOURNAL_CUT_POINTS")
        .map(|s| s.parse().unwrap())
        .unwrap_or(200);
    let seed = seed_from_env("WORKJOURNAL_CUT_SEED");
    eprintln!("cut points: {cuts}, WORKJOURNAL_CUT_SEED={seed}");
    let started = Instant::now();
    let tally = power_loss_run(cuts, seed).await;
    eprintln!("{tally:?} in {:.1} s", started.elapsed().as_secs_f64());
    assert_eq!(tally.cuts, cuts);
}

/// Open a queue on `disk` that can reopen itself on the same disk.
async fn open_reopenable(name: &str, disk: &SimDisk, clock: &ManualClock) -> EmbeddedQueue {
    let d = disk.clone();
    EmbeddedQueue::open_on_backend_with(name, move || Ok(d.backend()), config(clock), true)
        .await
        .unwrap()
}

fn os_error_of(e: &Error) -> String {
    let mut out = e.to_string();
    let mut src = std::error::Error::source(e);
    while let Some(s) = src {
        out.push_str(": ");
        out.push_str(&s.to_string());
        src = s.source();
    }
    out
}

// Regression: after one failed write (ENOSPC or EIO) redb poisons its
// Database and answers PreviousIo to every later call, so the queue failed
// every operation, with a retryable error, until the process reopened the
// file by hand; the writer now reopens the database itself.
#[tokio::test]
async fn a_failed_write_changes_nothing_and_the_queue_carries_on() {
    for (errno, text) in [(ENOSPC, "os error 28"), (EIO, "os error 5")] {
        let clock = ManualClock::new(1_000_000);
        let disk = SimDisk::new();
        let q = open_reopenable(&format!("wfault{errno}"), &disk, &clock).await;
        let a = q.add(NewItem::new(b"a".to_vec())).await.unwrap().id;
        q.add(NewItem::new(b"b".to_vec())).await.unwrap();
        let held = q.claim(1, Duration::ZERO, ClaimFrom::All).await.unwrap();
        assert_eq!(held[0].item.id, a);
        let before = q.dump_tables().await.unwrap();

        disk.fail_writes(Some(errno));
        let e = q.add(NewItem::new(b"c".to_vec())).await.unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(e.is_retryable());
        assert!(os_error_of(&e).contains(text), "{}", os_error_of(&e));
        let e = q.ack(held[0].receipt).await.unwrap_err();
        assert!(e.is_retryable(), "{e:?}");
        let e = q
            .claim(1, Duration::ZERO, ClaimFrom::All)
            .await
            .unwrap_err();
        assert!(e.is_retryable(), "{e:?}");

        disk.fail_writes(None);
        assert_eq!(q.dump_tables().await.unwrap(), before, "errno {errno}");
        // The claim made before the fault is still this consumer's.
        q.ack(held[0].receipt).await.unwrap();
        let c = q.add(NewItem::new(b"c".to_vec())).await.unwrap().id;
        let locs = q.locations().await.unwrap();
        assert_eq!(locs.keys().copied().collect::<Vec<_>>(), vec![a + 1, c]);
        check_invariants(&q, "after a write fault").await;
        q.close().await.unwrap();

        // What a crash right now would leave holds the same.
        let again = SimDisk::from_image(disk.image());
        let q = open(&format!("wfault{errno}-again"), &again, &clock, true).await;
        assert_eq!(q.locations().await.unwrap(), locs);
        q.close().await.unwrap();
    }
}

#[tokio::test]
async fn a_failed_fsync_keeps_the_operation_whole_or_not_at_all_and_the_queue_carries_on() {
    for errno in [EIO, ENOSPC] {
        let clock = ManualClock::new(1_000_000);
        let disk = SimDisk::new();
        let q = open_reopenable(&format!("sfault{errno}"), &disk, &clock).await;
        let items = (0..3)
            .map(|i| NewItem::new(vec![i; 10]))
            .collect::<Vec<_>>();
        let first = q.add_batch(items.clone()).await.unwrap();
        let before = q.locations().await.unwrap();

        disk.fail_syncs(Some(errno));
        let e = q.add_batch(items.clone()).await.unwrap_err();
        assert!(matches!(e, Error::Io { .. }), "{e:?}");
        assert!(e.is_retryable());
        disk.fail_syncs(None);

        // The batch's pages reached the page cache before the fsync failed,
        // so it may be there: whole or not at all.
        let after = q.locations().await.unwrap();
        let extra: Vec<u64> = after
            .keys()
            .filter(|id| !before.contains_key(id))
            .copied()
            .collect();
        assert!(
            extra.is_empty() || extra.len() == items.len(),
            "errno {errno}: the failed batch left {extra:?}"
        );
        for id in first.iter().map(|a| a.id) {
            assert_eq!(after.get(&id), Some(&vec![Location::Backlog]));
        }
        check_invariants(&q, "after an fsync fault").await;
        q.add(NewItem::new(b"z".to_vec())).await.unwrap();
        q.close().await.unwrap();
    }
}
