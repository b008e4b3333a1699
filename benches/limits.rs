//! Flow limits (SPEC 3): claim + ack in batches of 100 on a backlog of ten
//! flows, with one flow rate-limited beside the same workload unlimited
//! (the others' throughput), and with one limited flow holding 100 000
//! items ahead of the rest (no claim walks them: they wait in the flow's
//! held lane). Both backends; the backlog is filled before each timed
//! stretch, outside the timing.

mod common;

use std::time::{Duration, Instant};

use common::{EMBEDDED, PAYLOAD_BYTES, REDIS};
use criterion::{Throughput, criterion_main};
use workjournal::testing::RedisServer;
use workjournal::{BoxQueue, ClaimFrom, FlowLimit, NewItem, RateLimit, WorkQueue};

const FLOWS: u64 = 10;
/// The limited flow's rate: far below what the bench claims, so that
/// almost every one of its items waits on the limit.
const LIMIT: RateLimit = RateLimit {
    permits: 10,
    period_ms: 1_000,
};

fn flow(i: u64) -> String {
    format!("f{}", i % FLOWS)
}

/// Add `n` items of the nine free flows, and as many more of `f0` as its
/// share of a round-robin over all ten.
async fn fill_flows<Q: WorkQueue>(q: &Q, n: u64, body: &[u8]) {
    let total = n + n / (FLOWS - 1) + 1;
    let mut i = 0u64;
    while i < total {
        let k = (total - i).min(1000);
        let items = (i..i + k)
            .map(|j| NewItem::new(body.to_vec()).flow(flow(j)))
            .collect();
        q.add_batch(items).await.expect("fill");
        i += k;
    }
}

/// `iters` rounds of claim `batch` + ack_batch, counting only the rounds'
/// time; a round may hand out fewer than `batch` items when the limited
/// flow's are what is left.
async fn claim_ack_n<Q: WorkQueue>(q: &Q, batch: usize, iters: u64) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let got = q
            .claim(batch, Duration::ZERO, ClaimFrom::All)
            .await
            .expect("claim");
        assert!(!got.is_empty(), "backlog ran dry");
        q.ack_batch(got.iter().map(|c| c.receipt).collect())
            .await
            .expect("ack_batch");
    }
    start.elapsed()
}

async fn limit<Q: WorkQueue>(q: &Q) {
    q.set_flow_limit("f0", FlowLimit::Rate(Some(LIMIT)))
        .await
        .expect("rate limit");
}

/// `hot` (rate-limited) holds `n` items added before every other one.
async fn fill_hot<Q: WorkQueue>(q: &Q, n: u64, body: &[u8]) {
    q.set_flow_limit("hot", FlowLimit::Rate(Some(LIMIT)))
        .await
        .expect("rate limit");
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        let items = (0..k)
            .map(|_| NewItem::new(body.to_vec()).flow("hot"))
            .collect();
        q.add_batch(items).await.expect("fill hot");
        left -= k;
    }
}

/// `WJ_PROFILE=case:rounds` (case `unlimited`, `limited` or `behind`)
/// runs just `rounds` claims of 100 with their `ack_batch` on an embedded
/// queue filled as that case's bench fills it, and exits: for
/// `valgrind --tool=callgrind`, where the difference between two values of
/// `rounds` gives the cost of a round without the setup and the fill.
fn profile(spec: &str) {
    let (case, rounds) = spec
        .split_once(':')
        .expect("WJ_PROFILE=unlimited|limited|behind:rounds");
    let rounds: u64 = rounds.parse().expect("WJ_PROFILE rounds");
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD_BYTES);
    let batch = 100usize;
    rt.block_on(async {
        let q = common::embedded(dir.path(), "profile").await;
        match case {
            "unlimited" => fill_flows(&q, 20_000, &body).await,
            "limited" => {
                limit(&q).await;
                fill_flows(&q, 20_000, &body).await;
            }
            "behind" => {
                fill_hot(&q, 100_000, &body).await;
                let items: Vec<NewItem> = (0..20_000u64)
                    .map(|j| NewItem::new(body.clone()).flow(flow(j % 9 + 1)))
                    .collect();
                for chunk in items.chunks(1000) {
                    q.add_batch(chunk.to_vec()).await.expect("fill");
                }
            }
            other => panic!("unknown WJ_PROFILE case {other}"),
        }
        let took = claim_ack_n(&q, batch, rounds).await;
        eprintln!("{case}: {rounds} rounds in {took:?}");
    });
}

fn benches() {
    if let Ok(spec) = std::env::var("WJ_PROFILE") {
        profile(&spec);
        return;
    }
    let mut c = common::criterion();
    let rt = common::runtime();
    let dir = common::temp_dir();
    let server = RedisServer::start().expect("start redis-server (apt-get install redis-server)");
    let url = server.url();
    let body = common::payload(PAYLOAD_BYTES);
    let body = body.as_slice();
    let batch = 100usize;
    for limited in [false, true] {
        let name = if limited {
            "ten_flows_one_limited"
        } else {
            "ten_flows_unlimited"
        };
        let embedded = rt.block_on(common::embedded(dir.path(), name));
        let redis = rt.block_on(common::redis(&url, name));
        if limited {
            rt.block_on(limit(&embedded));
            rt.block_on(limit(&redis));
        }
        let mut g = c.benchmark_group(format!("claim_ack_100_{name}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    fill_flows(&embedded, n * batch as u64, body).await;
                    claim_ack_n(&embedded, batch, n).await
                })
            })
        });
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    fill_flows(&redis, n * batch as u64, body).await;
                    claim_ack_n(&redis, batch, n).await
                })
            })
        });
        g.finish();
    }
    let embedded = rt.block_on(common::embedded(dir.path(), "hot"));
    let redis = rt.block_on(common::redis(&url, "hot"));
    rt.block_on(fill_hot(&embedded, 100_000, body));
    rt.block_on(fill_hot(&redis, 100_000, body));
    let hot = [
        (EMBEDDED, BoxQueue::new(embedded)),
        (REDIS, BoxQueue::new(redis)),
    ];
    let mut g = c.benchmark_group("claim_ack_100_behind_100k_limited");
    g.throughput(Throughput::Elements(batch as u64));
    for (name, q) in &hot {
        g.bench_function(*name, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    let items: Vec<NewItem> = (0..n * batch as u64)
                        .map(|j| NewItem::new(body.to_vec()).flow(flow(j % 9 + 1)))
                        .collect();
                    for chunk in items.chunks(1000) {
                        q.add_batch(chunk.to_vec()).await.expect("fill");
                    }
                    claim_ack_n(q, batch, n).await
                })
            })
        });
    }
    g.finish();
}

criterion_main!(benches);
