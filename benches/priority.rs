//! Priority tiers: claim + ack in batches of 100 on a backlog spread over
//! ten priority tiers, beside the same workload at one tier, for both
//! backends. The backlog is filled before each timed stretch, outside the
//! timing.

mod common;

use common::{EMBEDDED, PAYLOAD_BYTES, REDIS};
use criterion::{Throughput, criterion_main};
use workjournal::testing::RedisServer;
use workjournal::{ClaimFrom, WorkQueue};

/// Items in the backlog before a profile's claims start.
const PROFILE_BACKLOG: u64 = 20_000;

/// `WJ_PROFILE=tiers:rounds` fills an embedded queue with
/// `PROFILE_BACKLOG` items spread over `tiers` tiers, runs just `rounds`
/// claims of 100 each followed by their `ack_batch`, and exits: for
/// `valgrind --tool=callgrind`, where the difference between two values of
/// `rounds` gives the cost of a round without the setup and the fill.
fn profile(spec: &str) {
    let (tiers, rounds) = spec.split_once(':').expect("WJ_PROFILE=tiers:rounds");
    let tiers: u8 = tiers.parse().expect("WJ_PROFILE tiers");
    let rounds: u64 = rounds.parse().expect("WJ_PROFILE rounds");
    assert!(
        rounds * 100 <= PROFILE_BACKLOG,
        "at most {} rounds",
        PROFILE_BACKLOG / 100
    );
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD_BYTES);
    rt.block_on(async {
        let q = common::embedded(dir.path(), "profile").await;
        common::fill_tiers(&q, PROFILE_BACKLOG, &body, tiers).await;
        let start = std::time::Instant::now();
        for _ in 0..rounds {
            let got = q
                .claim(100, std::time::Duration::ZERO, ClaimFrom::All)
                .await
                .expect("claim");
            assert_eq!(got.len(), 100, "backlog ran dry");
            let n = q
                .ack_batch(got.iter().map(|c| c.receipt).collect())
                .await
                .expect("ack_batch");
            assert_eq!(n, 100);
        }
        eprintln!("{tiers} tiers: {rounds} rounds in {:?}", start.elapsed());
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
    for tiers in [1u8, 10] {
        let embedded = rt.block_on(common::embedded(dir.path(), &format!("tiers{tiers}")));
        let redis = rt.block_on(common::redis(&url, &format!("tiers{tiers}")));
        let mut g = c.benchmark_group(format!("claim_ack_100_tiers_{tiers}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| {
                rt.block_on(common::claim_ack_tiers(&embedded, batch, n, body, tiers))
            })
        });
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack_tiers(&redis, batch, n, body, tiers)))
        });
        g.finish();
    }
}

criterion_main!(benches);
