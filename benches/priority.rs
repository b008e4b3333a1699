//! Issue 14, item 7: claim + ack in batches of 100 on a backlog spread over
//! ten priority tiers, beside the same workload at one tier, for both
//! backends. The backlog is filled before each timed stretch, outside the
//! timing.

mod common;

use common::{EMBEDDED, PAYLOAD_BYTES, REDIS};
use criterion::{Throughput, criterion_main};
use workjournal::testing::RedisServer;

fn benches() {
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
