//! Full lifecycle latency: add one item, claim it, ack it, one after the
//! other on an empty queue. Criterion times the mean; every single
//! lifecycle is also kept, and p50 / p99 go to the report.

mod common;

use std::cell::RefCell;
use std::time::Duration;

use common::baselines::{Sqlite, Streams};
use common::{EMBEDDED, REDIS};
use criterion::{Throughput, criterion_main};

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1e3
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

    let embedded = rt.block_on(common::embedded(dir.path(), "latency"));
    let redis = rt.block_on(common::redis(&url, "latency"));
    let sqlite = RefCell::new(Sqlite::new(dir.path()));
    let streams = rt.block_on(Streams::new(&url, "latency"));
    let samples: RefCell<Vec<(&str, f64)>> = RefCell::new(Vec::new());

    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    let keep = |name: &'static str, d: Duration| samples.borrow_mut().push((name, ms(d)));
    g.bench_function(EMBEDDED, |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| {
                    let d = rt.block_on(common::lifecycle(&embedded, body));
                    keep(EMBEDDED, d);
                    d
                })
                .sum()
        })
    });
    g.bench_function("sqlite-wal", |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| {
                    let d = sqlite.borrow_mut().lifecycle(body);
                    keep("sqlite-wal", d);
                    d
                })
                .sum()
        })
    });
    g.bench_function(REDIS, |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| {
                    let d = rt.block_on(common::lifecycle(&redis, body));
                    keep(REDIS, d);
                    d
                })
                .sum()
        })
    });
    g.bench_function("raw-streams", |b| {
        b.iter_custom(|n| {
            (0..n)
                .map(|_| {
                    let d = rt.block_on(streams.lifecycle(body));
                    keep("raw-streams", d);
                    d
                })
                .sum()
        })
    });
    g.finish();

    common::record_percentiles_of(
        "lifecycle",
        &[EMBEDDED, "sqlite-wal", REDIS, "raw-streams"],
        &samples.into_inner(),
    );
}

criterion_main!(benches);
