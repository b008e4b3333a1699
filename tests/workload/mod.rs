//! The random workload shared by the crash and fault tests: operations
//! drawn with their arguments, so that a queue under test and its twin get
//! exactly the same calls, and their replies as comparable text.

#![allow(dead_code)]

use std::time::Duration;

use workjournal::{ClaimFrom, Claimed, Error, NewItem, Receipt, WorkQueue};

/// The seeded generator the workload draws from (splitmix64), the one
/// the simulated disk uses.
pub use workjournal::testing::Rng;

pub fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

pub const FLOWS: [&str; 3] = ["", "a", "b"];

/// One operation of the workload, with its arguments drawn already, so
/// that the queue and its twin get exactly the same call.
#[derive(Debug, Clone)]
pub enum Op {
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
pub fn draw(rng: &mut Rng, held: &mut Vec<Receipt>, max_id: u64, now: u64) -> Op {
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
pub struct Reply {
    pub text: String,
    pub receipts: Vec<Receipt>,
    pub max_id: u64,
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
pub async fn apply(q: &impl WorkQueue, op: &Op) -> Result<Reply, Error> {
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
        Op::Reclaim(idle, n) => claimed(q.reclaim(Duration::from_millis(*idle), *n).await?.claimed),
        Op::Pause(f) => s(&q.pause(f).await?),
        Op::Resume(f) => s(&q.resume(f).await?),
        Op::Park(r) => s(&q.park(*r).await?),
        Op::Step(f) => claimed(q.step(f).await?.into_iter().collect()),
        Op::ClearFlow(f) => s(&q.clear_flow(f).await?),
        Op::MarkDone(id) => s(&q.mark_done(*id, "sent").await?),
        Op::Redrive(id) => s(&q.redrive(*id).await?),
        Op::PurgeDead => s(&q.purge_dead_letters().await?),
        Op::Promote => s(&q.promote_due().await?),
        // Whether compaction found space to free depends on the file's
        // layout, which differs between a queue and a twin that did not
        // reopen when it did; only the queue state must agree.
        Op::Compact => {
            q.compact().await?;
            s(&())
        }
        // The caller moved the clock already, once for both queues.
        Op::Advance(_) => s(&q.stats().await?),
    })
}

/// Run `op` on the twin that never fails and check that the queue under test
/// answered the same (`got`); then remember the receipts and ids the answer
/// handed out, so that later operations can name them.
pub async fn agree_with_twin(
    twin: &impl WorkQueue,
    op: &Op,
    got: &Result<Reply, Error>,
    seed: u64,
    held: &mut Vec<Receipt>,
    max_id: &mut u64,
) {
    let want = apply(twin, op).await;
    assert_eq!(
        got.as_ref().map_err(|e| e.to_string()),
        want.as_ref().map_err(|e| e.to_string()),
        "seed {seed}: {op:?}: the queue and its twin disagree"
    );
    if let Ok(reply) = &want {
        held.extend(reply.receipts.iter().copied());
        *max_id = (*max_id).max(reply.max_id);
    }
}
