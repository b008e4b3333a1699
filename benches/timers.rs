//! Timer lateness: 1000 delayed items due over 2 s; a consumer claims due
//! items as they come; lateness = when the claim handed the item out minus
//! its `not_before_ms`. p50 / p99 per backend, beside a tokio `sleep` for
//! the same instants (the timer an async program reaches for; it fires on
//! millisecond ticks, and the embedded and memory backends sleep the last
//! 2 ms of a wait on the operating system's timer instead: SPEC 3, Timers).
//!
//! Not a criterion measurement (a lateness distribution is not a time per
//! iteration): `harness = false` with its own main.

mod common;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::{EMBEDDED, REDIS};
use workjournal::testing::RedisServer;
use workjournal::{ClaimFrom, NewItem, WorkQueue};

const TIMERS: u64 = 1000;
const SPREAD_MS: u64 = 2000;
/// Time to journal the timers before the first one is due.
const LEAD_MS: u64 = 4000;
const ROUNDS: usize = 2;

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn due_at(t0: u64, i: u64) -> u64 {
    t0 + i * SPREAD_MS / TIMERS
}

/// One round on `q`: the lateness of each timer, in ms.
async fn lateness<Q: WorkQueue + Clone + 'static>(q: &Q) -> Vec<f64> {
    let t0 = q.now_ms().await.expect("now") + LEAD_MS;
    // Journal the timers from 16 producers (group commit on embedded).
    let mut adds = Vec::new();
    for p in 0..16u64 {
        let q = q.clone();
        adds.push(tokio::spawn(async move {
            for i in (p..TIMERS).step_by(16) {
                q.add_delayed(NewItem::new(i.to_le_bytes().to_vec()), due_at(t0, i))
                    .await
                    .expect("add_delayed");
            }
        }));
    }
    for a in adds {
        a.await.expect("producer");
    }
    assert!(
        q.now_ms().await.expect("now") < t0,
        "journaling {TIMERS} timers took longer than {LEAD_MS} ms: the machine is too loaded"
    );
    let mut out = Vec::with_capacity(TIMERS as usize);
    while (out.len() as u64) < TIMERS {
        let got = q
            .claim(100, Duration::from_secs(10), ClaimFrom::DueOnly)
            .await
            .expect("claim");
        let now = wall_ms();
        assert!(!got.is_empty(), "no timer fired within 10 s");
        for c in &got {
            out.push(now - c.item.not_before_ms.expect("a delayed item") as f64);
        }
        // Ack off the claim path, as a worker that runs items would.
        let q = q.clone();
        let receipts = got.iter().map(|c| c.receipt).collect();
        tokio::spawn(async move { q.ack_batch(receipts).await.expect("ack") });
    }
    out
}

/// The baseline: tokio timers at the same instants.
async fn sleep_lateness() -> Vec<f64> {
    let t0 = wall_ms() as u64 + 500;
    let mut tasks = Vec::new();
    for i in 0..TIMERS {
        tasks.push(tokio::spawn(async move {
            let due = due_at(t0, i);
            let wait = (due as f64 - wall_ms()).max(0.0);
            tokio::time::sleep(Duration::from_secs_f64(wait / 1e3)).await;
            wall_ms() - due as f64
        }));
    }
    let mut out = Vec::new();
    for t in tasks {
        out.push(t.await.expect("sleeper"));
    }
    out
}

fn main() {
    let rt = common::runtime();
    let dir = common::temp_dir();
    let server = RedisServer::start().expect("start redis-server (apt-get install redis-server)");
    let url = server.url();
    let mut emb = Vec::new();
    let mut red = Vec::new();
    let mut tokio_sleep = Vec::new();
    rt.block_on(async {
        let embedded = common::embedded(dir.path(), "timers").await;
        let redis = common::redis(&url, "timers").await;
        for _ in 0..ROUNDS {
            emb.extend(lateness(&embedded).await);
            red.extend(lateness(&redis).await);
            tokio_sleep.extend(sleep_lateness().await);
        }
    });
    common::record_percentiles("timer lateness", EMBEDDED, &mut emb);
    common::record_percentiles("timer lateness", REDIS, &mut red);
    common::record_percentiles("timer lateness", "tokio-sleep", &mut tokio_sleep);
}
