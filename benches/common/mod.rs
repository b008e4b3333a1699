//! Shared by every bench file: criterion settings, the runtime, the one
//! generic body of each workload over [`WorkQueue`], and the sink for the
//! measurements criterion does not make (percentiles, file sizes).
//!
//! Naming: a criterion group is a workload (`add_1_producer`), a function in
//! it is a subject (`workjournal-embedded`, `sqlite-wal`, ...). The peers
//! project uses the same names, and `benches/report.rs` pairs them up.

#![allow(dead_code)]

pub mod baselines;

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::Criterion;
use workjournal::{ClaimFrom, Config, EmbeddedQueue, NewItem, RedisOptions, RedisQueue, WorkQueue};

/// Payload of the throughput workloads, in bytes.
pub const PAYLOAD_BYTES: usize = 256;

/// Subject names, shared with the peers project and the report.
pub const EMBEDDED: &str = "workjournal-embedded";
/// The Redis backend.
pub const REDIS: &str = "workjournal-redis";

/// Criterion as every bench uses it: 10 samples, flat sampling (the
/// operations are milliseconds, not nanoseconds), short windows so that the
/// whole table takes minutes. `WJ_BENCH_SECS` sets the measurement window
/// per function (default 3 s).
pub fn criterion() -> Criterion {
    let secs: f64 = std::env::var("WJ_BENCH_SECS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3.0);
    Criterion::default()
        .sample_size(10)
        .warm_up_time(Duration::from_secs_f64((secs / 3.0).max(0.2)))
        .measurement_time(Duration::from_secs_f64(secs))
        .without_plots()
        .configure_from_args()
}

/// A multi-threaded runtime, built once per bench binary, outside `b.iter`.
pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime")
}

/// `n` bytes of payload.
/// What the benches that compare embedded with Redis start from: criterion,
/// a runtime, a temp dir for files, a Redis server of their own (on a free
/// loopback port; stopped when this is dropped), its URL and a payload of
/// [`PAYLOAD_BYTES`].
pub struct Setup {
    /// The criterion instance, configured by [`criterion`].
    pub c: Criterion,
    /// The runtime of [`runtime`].
    pub rt: tokio::runtime::Runtime,
    /// Where the embedded files go ([`temp_dir`]).
    pub dir: tempfile::TempDir,
    /// The bench's own Redis server: keep it alive for the whole bench.
    pub redis: workjournal::testing::RedisServer,
    /// Its URL.
    pub url: String,
    /// One payload of [`PAYLOAD_BYTES`].
    pub body: Vec<u8>,
}

/// The [`Setup`] of one bench; panics (a bench, not the library) when
/// redis-server cannot start, saying how to install it.
pub fn setup() -> Setup {
    let redis = workjournal::testing::RedisServer::start()
        .expect("start redis-server (apt-get install redis-server)");
    let url = redis.url();
    Setup {
        c: criterion(),
        rt: runtime(),
        dir: temp_dir(),
        redis,
        url,
        body: payload(PAYLOAD_BYTES),
    }
}

pub fn payload(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// Where the bench temp dirs go: `WJ_BENCH_DIR`, else the system temp dir.
/// Point it at the disk you care about: the fsync rate is the disk's.
pub fn temp_dir() -> tempfile::TempDir {
    match std::env::var_os("WJ_BENCH_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).expect("create WJ_BENCH_DIR");
            tempfile::tempdir_in(d).expect("temp dir")
        }
        None => tempfile::tempdir().expect("temp dir"),
    }
}

/// A fresh embedded queue in `dir`.
pub async fn embedded(dir: &std::path::Path, name: &str) -> EmbeddedQueue {
    EmbeddedQueue::open(dir.join(format!("{name}.redb")), Config::default())
        .await
        .expect("open embedded queue")
}

/// A Redis queue in a namespace of its own on `url`.
pub async fn redis(url: &str, namespace: &str) -> RedisQueue {
    RedisQueue::connect(url, namespace, Config::default(), RedisOptions::default())
        .await
        .expect("connect redis queue")
}

// ---- the generic bodies, one per workload --------------------------------

/// `iters` single adds, one after the other.
pub async fn add_1<Q: WorkQueue>(q: &Q, iters: u64, body: &[u8]) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        q.add(NewItem::new(body.to_vec())).await.expect("add");
    }
    start.elapsed()
}

/// `producers` tasks, each doing `iters` single adds: one iteration is one
/// add from every producer.
pub async fn add_concurrent<Q: WorkQueue + Clone + 'static>(
    q: &Q,
    producers: usize,
    iters: u64,
    body: &[u8],
) -> Duration {
    let body: Arc<[u8]> = body.into();
    let barrier = Arc::new(tokio::sync::Barrier::new(producers + 1));
    let mut tasks = Vec::with_capacity(producers);
    for _ in 0..producers {
        let (q, body, barrier) = (q.clone(), body.clone(), barrier.clone());
        tasks.push(tokio::spawn(async move {
            barrier.wait().await;
            for _ in 0..iters {
                q.add(NewItem::new(body.to_vec())).await.expect("add");
            }
        }));
    }
    barrier.wait().await;
    let start = Instant::now();
    for t in tasks {
        t.await.expect("producer task");
    }
    start.elapsed()
}

/// `iters` calls of `add_batch` with `size` items each.
pub async fn add_batch<Q: WorkQueue>(q: &Q, size: usize, iters: u64, body: &[u8]) -> Duration {
    let start = Instant::now();
    for _ in 0..iters {
        let items = (0..size).map(|_| NewItem::new(body.to_vec())).collect();
        q.add_batch(items).await.expect("add_batch");
    }
    start.elapsed()
}

/// Put `n` items in the backlog, in batches of 1000 (not timed).
pub async fn fill<Q: WorkQueue>(q: &Q, n: u64, body: &[u8]) {
    fill_tiers(q, n, body, 1).await;
}

/// As [`fill`], the items spread over priority tiers `0..tiers` in turn.
pub async fn fill_tiers<Q: WorkQueue>(q: &Q, n: u64, body: &[u8], tiers: u8) {
    let mut left = n;
    let mut i = 0u64;
    while left > 0 {
        let k = left.min(1000);
        let items = (0..k)
            .map(|j| {
                NewItem::new(body.to_vec()).priority(((i + j) % u64::from(tiers.max(1))) as u8)
            })
            .collect();
        q.add_batch(items).await.expect("fill");
        left -= k;
        i += k;
    }
}

/// `iters` rounds of claim `batch` + ack them (one `ack` for a batch of 1,
/// one `ack_batch` otherwise), on a backlog filled beforehand (not timed).
pub async fn claim_ack<Q: WorkQueue>(q: &Q, batch: usize, iters: u64, body: &[u8]) -> Duration {
    claim_ack_tiers(q, batch, iters, body, 1).await
}

/// As [`claim_ack`], on a backlog spread over `tiers` priority tiers.
pub async fn claim_ack_tiers<Q: WorkQueue>(
    q: &Q,
    batch: usize,
    iters: u64,
    body: &[u8],
    tiers: u8,
) -> Duration {
    fill_tiers(q, iters * batch as u64, body, tiers).await;
    let start = Instant::now();
    for _ in 0..iters {
        let got = q
            .claim(batch, Duration::ZERO, ClaimFrom::All)
            .await
            .expect("claim");
        assert_eq!(got.len(), batch, "backlog ran dry");
        if batch == 1 {
            q.ack(got[0].receipt).await.expect("ack");
        } else {
            let n = q
                .ack_batch(got.iter().map(|c| c.receipt).collect())
                .await
                .expect("ack_batch");
            assert_eq!(n, batch as u64);
        }
    }
    start.elapsed()
}

/// One full lifecycle: add an item, claim it, ack it. Returns its latency.
pub async fn lifecycle<Q: WorkQueue>(q: &Q, body: &[u8]) -> Duration {
    let start = Instant::now();
    q.add(NewItem::new(body.to_vec())).await.expect("add");
    let got = q
        .claim(1, Duration::from_secs(5), ClaimFrom::All)
        .await
        .expect("claim");
    assert_eq!(got.len(), 1, "the item just added was not claimed");
    q.ack(got[0].receipt).await.expect("ack");
    start.elapsed()
}

// ---- measurements outside criterion ---------------------------------------

/// Where results that criterion does not make are appended:
/// `WJ_BENCH_OUT/extra.tsv` (default `target/wj-bench`).
pub fn out_dir() -> PathBuf {
    std::env::var_os("WJ_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target/wj-bench"))
}

/// Append one measurement: `workload`, `subject`, `value` in `unit`.
pub fn record(workload: &str, subject: &str, value: f64, unit: &str) {
    let dir = out_dir();
    std::fs::create_dir_all(&dir).expect("create bench output dir");
    let mut f = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("extra.tsv"))
        .expect("open extra.tsv");
    writeln!(f, "{workload}\t{subject}\t{value}\t{unit}").expect("write extra.tsv");
    println!("{workload:<28} {subject:<22} {value:>12.3} {unit}");
}

/// The `p`-th percentile (0..=100) of `samples`, nearest rank.
pub fn percentile(samples: &mut [f64], p: f64) -> f64 {
    if samples.is_empty() {
        return f64::NAN;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
    samples[rank.clamp(1, samples.len()) - 1]
}

/// Record p50 and p99 of `samples` (ms) under `workload p50` / `p99`.
pub fn record_percentiles(workload: &str, subject: &str, samples: &mut [f64]) {
    let p50 = percentile(samples, 50.0);
    let p99 = percentile(samples, 99.0);
    record(&format!("{workload} p50"), subject, p50, "ms");
    record(&format!("{workload} p99"), subject, p99, "ms");
}

/// [`record_percentiles`] for each of `subjects`, from `samples` of
/// (subject, ms) pairs kept while criterion ran.
pub fn record_percentiles_of(workload: &str, subjects: &[&str], samples: &[(&str, f64)]) {
    for name in subjects {
        let mut v: Vec<f64> = samples
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, x)| *x)
            .collect();
        record_percentiles(workload, name, &mut v);
    }
}
