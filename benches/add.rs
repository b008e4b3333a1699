//! Adds: 1 producer, 64 concurrent producers, `add_batch` of 100, for both
//! backends, with the baselines of each (raw fsync, raw redb, SQLite WAL;
//! raw Streams) in the same groups.

mod common;

use common::baselines::{Fsync, RawRedb, Sqlite, Streams};
use common::{EMBEDDED, PAYLOAD_BYTES, REDIS};
use criterion::{Throughput, criterion_main};

const PRODUCERS: usize = 64;
const BATCH: usize = 100;

/// `WJ_PROFILE=subject:n` runs just `n` single adds of one subject
/// (`embedded`, `raw-redb`, `sqlite-wal`) and exits: for `strace -c -f` and
/// `valgrind --tool=callgrind`, where the difference between two values of
/// `n` gives the cost of one add without the setup.
fn profile(spec: &str) {
    let (subject, n) = spec.split_once(':').expect("WJ_PROFILE=subject:n");
    let n: u64 = n.parse().expect("WJ_PROFILE count");
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD_BYTES);
    let d = match subject {
        "embedded" => rt.block_on(async {
            let q = common::embedded(dir.path(), "profile").await;
            common::add_1(&q, n, &body).await
        }),
        "raw-redb" => RawRedb::new(dir.path()).commits(n, 1, &body),
        "sqlite-wal" => Sqlite::new(dir.path()).adds(n, 1, &body),
        other => panic!("WJ_PROFILE subject {other}: embedded, raw-redb or sqlite-wal"),
    };
    eprintln!("{subject}: {n} adds in {d:?}");
}

fn benches() {
    if let Ok(spec) = std::env::var("WJ_PROFILE") {
        profile(&spec);
        return;
    }
    let common::Setup {
        mut c,
        rt,
        dir,
        redis: _redis,
        url,
        body,
    } = common::setup();
    let body = body.as_slice();

    let embedded = rt.block_on(common::embedded(dir.path(), "add"));
    let redis = rt.block_on(common::redis(&url, "add"));
    let mut fsync = Fsync::new(dir.path());
    let mut raw = RawRedb::new(dir.path());
    let sqlite = Sqlite::new(dir.path());
    let streams = rt.block_on(Streams::new(&url, "add"));
    common::record("fsync rate", "raw-fsync", fsync.rate(3.0), "commits/s");

    {
        let mut g = c.benchmark_group("add_1_producer");
        g.throughput(Throughput::Elements(1));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::add_1(&embedded, n, body)))
        });
        g.bench_function("raw-fsync", |b| {
            b.iter_custom(|n| fsync.commits(n, 1, PAYLOAD_BYTES))
        });
        g.bench_function("raw-redb", |b| b.iter_custom(|n| raw.commits(n, 1, body)));
        g.bench_function("sqlite-wal", |b| b.iter_custom(|n| sqlite.adds(n, 1, body)));
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| rt.block_on(common::add_1(&redis, n, body)))
        });
        g.bench_function("raw-streams", |b| {
            b.iter_custom(|n| rt.block_on(streams.add_1(n, body)))
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("add_64_producers");
        g.throughput(Throughput::Elements(PRODUCERS as u64));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::add_concurrent(&embedded, PRODUCERS, n, body)))
        });
        // The ideal group commit: every producer's item in one commit.
        g.bench_function("raw-fsync", |b| {
            b.iter_custom(|n| fsync.commits(n, PRODUCERS, PAYLOAD_BYTES))
        });
        g.bench_function("raw-redb", |b| {
            b.iter_custom(|n| raw.commits(n, PRODUCERS, body))
        });
        g.bench_function("sqlite-wal", |b| {
            b.iter_custom(|n| sqlite.adds_concurrent(PRODUCERS, n, body))
        });
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| rt.block_on(common::add_concurrent(&redis, PRODUCERS, n, body)))
        });
        g.bench_function("raw-streams", |b| {
            b.iter_custom(|n| rt.block_on(streams.add_concurrent(PRODUCERS, n, body)))
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("add_batch_100");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::add_batch(&embedded, BATCH, n, body)))
        });
        g.bench_function("raw-fsync", |b| {
            b.iter_custom(|n| fsync.commits(n, BATCH, PAYLOAD_BYTES))
        });
        g.bench_function("raw-redb", |b| {
            b.iter_custom(|n| raw.commits(n, BATCH, body))
        });
        g.bench_function("sqlite-wal", |b| {
            b.iter_custom(|n| sqlite.adds(n, BATCH, body))
        });
        g.bench_function(REDIS, |b| {
            b.iter_custom(|n| rt.block_on(common::add_batch(&redis, BATCH, n, body)))
        });
        g.bench_function("raw-streams", |b| {
            b.iter_custom(|n| rt.block_on(streams.add_batch(BATCH, n, body)))
        });
        g.finish();
    }
}

criterion_main!(benches);
