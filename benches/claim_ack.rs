//! Claim + ack in batches of 1 and of 100 on a filled backlog, for both
//! backends, with SQLite WAL and raw Streams beside them. The backlog is
//! filled before each timed stretch, outside the timing. Each backend
//! also runs keeping no finished items (`no-history`, `redis-no-history`):
//! what the history (SPEC 3, History; on by default) costs an ack.

mod common;

use common::baselines::{Sqlite, Streams};
use common::{EMBEDDED, REDIS};
use criterion::{Throughput, criterion_main};
use workjournal::{Config, EmbeddedQueue, RedisOptions, RedisQueue, Retention};

fn no_history() -> Config {
    Config::default()
        .completed_retention(Retention::none())
        .cancelled_retention(Retention::none())
}

fn benches() {
    let common::Setup {
        mut c,
        rt,
        dir,
        redis: _redis,
        url,
        body,
    } = common::setup();
    let body = body.as_slice();

    for batch in [1usize, 100] {
        let embedded = rt.block_on(common::embedded(dir.path(), &format!("claim{batch}")));
        let redis = rt.block_on(common::redis(&url, &format!("claim{batch}")));
        let mut sqlite = Sqlite::open(&dir.path().join(format!("claim{batch}.sqlite")));
        let streams = rt.block_on(Streams::new(&url, &format!("claim{batch}")));
        let embedded_bare = rt
            .block_on(EmbeddedQueue::open(
                dir.path().join(format!("bare{batch}.redb")),
                no_history(),
            ))
            .expect("open embedded queue");
        let redis_bare = rt
            .block_on(RedisQueue::connect(
                &url,
                &format!("bare{batch}"),
                no_history(),
                RedisOptions::default(),
            ))
            .expect("connect redis queue");
        let mut g = c.benchmark_group(format!("claim_ack_{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&embedded, batch, n, body)))
        });
        g.bench_function("sqlite-wal", |b| {
            b.iter_custom(|n| sqlite.claim_ack(batch, n, body))
        });
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&redis, batch, n, body)))
        });
        g.bench_function("no-history", |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&embedded_bare, batch, n, body)))
        });
        g.bench_function("redis-no-history", |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&redis_bare, batch, n, body)))
        });
        g.bench_function("raw-streams", |b| {
            b.iter_custom(|n| rt.block_on(streams.claim_ack(batch, n, body)))
        });
        g.finish();
    }
}

criterion_main!(benches);
