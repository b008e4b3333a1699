//! Peers on workjournal's workloads, with the same criterion group and
//! subject names as the root benches, so `benches/report.rs` puts them in
//! the same table:
//!
//! - effectum 0.7 (an embedded SQLite job queue), with its defaults. It has
//!   no claim call: a worker pulls jobs and completes them when the job
//!   function returns, so "claim+ack, batch n" is a worker with
//!   `max_concurrency(n)` draining the same number of jobs, and a lifecycle
//!   ends when the worker counts the job finished.
//! - omniqueue 0.3's Redis Streams backend, on a harness-started
//!   `redis-server` (same settings as the root benches' server).

use std::io::Write;
use std::path::PathBuf;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use criterion::{Criterion, Throughput, criterion_main};
use effectum::{Job, JobRunner, Queue, RunningJob, Worker};
use omniqueue::backends::{RedisBackend, RedisConfig};
use workjournal::testing::RedisServer;

const PAYLOAD_BYTES: usize = 256;
const PRODUCERS: usize = 64;
const BATCH: usize = 100;
const JOB: &str = "bench";

fn criterion() -> Criterion {
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

fn out_dir() -> PathBuf {
    std::env::var_os("WJ_BENCH_OUT")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/wj-bench"))
}

fn record(workload: &str, subject: &str, value: f64, unit: &str) {
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

fn percentiles(workload: &str, subject: &str, samples: &mut [f64]) {
    if samples.is_empty() {
        return;
    }
    samples.sort_by(|a, b| a.total_cmp(b));
    for p in [50.0, 99.0] {
        let rank = ((p / 100.0) * samples.len() as f64).ceil() as usize;
        let v = samples[rank.clamp(1, samples.len()) - 1];
        record(&format!("{workload} p{p}"), subject, v, "ms");
    }
}

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

fn temp_dir() -> tempfile::TempDir {
    match std::env::var_os("WJ_BENCH_DIR") {
        Some(d) => {
            std::fs::create_dir_all(&d).expect("create WJ_BENCH_DIR");
            tempfile::tempdir_in(d).expect("temp dir")
        }
        None => tempfile::tempdir().expect("temp dir"),
    }
}

// ---- effectum ----------------------------------------------------------------

/// What the job function sees: a lateness log for the timer workload.
#[derive(Debug, Clone, Default)]
struct Ctx {
    lateness: Arc<Mutex<Vec<f64>>>,
}

async fn run_job(job: RunningJob, ctx: Ctx) -> Result<(), String> {
    // Timer jobs carry their due time (ms since the epoch) as 8 bytes.
    if let Ok(b) = <[u8; 8]>::try_from(job.payload.as_slice()) {
        let due = u64::from_le_bytes(b) as f64;
        ctx.lateness.lock().expect("lateness").push(wall_ms() - due);
    }
    Ok(())
}

fn job(body: &[u8]) -> Job {
    Job::builder(JOB).payload(body.to_vec()).build()
}

async fn worker(queue: &Queue, ctx: Ctx, concurrency: u16) -> Worker {
    let runner = JobRunner::builder(JOB, run_job).build();
    Worker::builder(queue, ctx)
        .max_concurrency(concurrency)
        .jobs([runner])
        .build()
        .await
        .expect("effectum worker")
}

/// Wait until `w` has finished `n` jobs in all. Polls every 50 us from the
/// bench thread, so the wait adds at most that to a measurement.
fn wait_finished(w: &Worker, n: u64) {
    let deadline = Instant::now() + Duration::from_secs(120);
    while w.counts().finished < n {
        assert!(
            Instant::now() < deadline,
            "effectum did not finish {n} jobs"
        );
        std::thread::sleep(Duration::from_micros(50));
    }
}

async fn effectum_fill(q: &Queue, n: u64, body: &[u8]) {
    let mut left = n;
    while left > 0 {
        let k = left.min(1000);
        q.add_jobs((0..k).map(|_| job(body)).collect())
            .await
            .expect("effectum fill");
        left -= k;
    }
}

fn effectum(c: &mut Criterion, rt: &tokio::runtime::Runtime, body: &[u8]) {
    let dir = temp_dir();
    let q = Arc::new(
        rt.block_on(Queue::new(&dir.path().join("effectum.db")))
            .expect("effectum queue"),
    );
    let name = "effectum";

    let mut g = c.benchmark_group("add_1_producer");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    q.add_job(job(body)).await.expect("add");
                }
                start.elapsed()
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("add_64_producers");
    g.throughput(Throughput::Elements(PRODUCERS as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                let tasks: Vec<_> = (0..PRODUCERS)
                    .map(|_| {
                        let (q, body) = (q.clone(), body.to_vec());
                        tokio::spawn(async move {
                            for _ in 0..n {
                                q.add_job(job(&body)).await.expect("add");
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("producer");
                }
                start.elapsed()
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("add_batch_100");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    q.add_jobs((0..BATCH).map(|_| job(body)).collect())
                        .await
                        .expect("add_jobs");
                }
                start.elapsed()
            })
        })
    });
    g.finish();
    // The adds above are still pending: a fresh queue for the rest.
    rt.block_on(q.close(Duration::from_secs(5)))
        .expect("close effectum");
    let dir = temp_dir();
    let q = rt
        .block_on(Queue::new(&dir.path().join("effectum.db")))
        .expect("effectum queue");

    for batch in [1usize, BATCH] {
        let mut g = c.benchmark_group(format!("claim_ack_{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                rt.block_on(effectum_fill(&q, n * batch as u64, body));
                let start = Instant::now();
                let w = rt.block_on(worker(&q, Ctx::default(), batch as u16));
                wait_finished(&w, n * batch as u64);
                let d = start.elapsed();
                rt.block_on(w.unregister(Some(Duration::from_secs(5))))
                    .expect("unregister");
                d
            })
        });
        g.finish();
    }

    // Lifecycle: add, run (the claim), finish (the ack), one at a time.
    let w = rt.block_on(worker(&q, Ctx::default(), 1));
    let mut samples = Vec::new();
    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                let before = w.counts().finished;
                let start = Instant::now();
                rt.block_on(q.add_job(job(body))).expect("add");
                wait_finished(&w, before + 1);
                let d = start.elapsed();
                samples.push(d.as_secs_f64() * 1e3);
                total += d;
            }
            total
        })
    });
    g.finish();
    rt.block_on(w.unregister(Some(Duration::from_secs(5))))
        .expect("unregister");
    percentiles("lifecycle", name, &mut samples);

    // Timers: 1000 jobs with run_at spread over 2 s, lateness measured in
    // the job function (when effectum started it minus its run_at).
    let ctx = Ctx::default();
    let w = rt.block_on(worker(&q, ctx.clone(), 100));
    for _ in 0..2 {
        let t0 = wall_ms() as u64 + 4000;
        let jobs: Vec<Job> = (0..1000u64)
            .map(|i| {
                let due = t0 + i * 2;
                Job::builder(JOB)
                    .payload(due.to_le_bytes().to_vec())
                    .run_at(
                        time::OffsetDateTime::from_unix_timestamp_nanos(due as i128 * 1_000_000)
                            .expect("timestamp"),
                    )
                    .build()
            })
            .collect();
        let before = w.counts().finished;
        rt.block_on(q.add_jobs(jobs)).expect("add timers");
        assert!((wall_ms() as u64) < t0, "adding the timers took too long");
        wait_finished(&w, before + 1000);
    }
    rt.block_on(w.unregister(Some(Duration::from_secs(5))))
        .expect("unregister");
    let mut late = ctx.lateness.lock().expect("lateness").clone();
    percentiles("timer lateness", name, &mut late);
    rt.block_on(q.close(Duration::from_secs(5)))
        .expect("close effectum");
}

// ---- omniqueue ---------------------------------------------------------------

fn omni_config(url: &str, name: &str) -> RedisConfig {
    RedisConfig {
        dsn: url.to_string(),
        max_connections: 64,
        reinsert_on_nack: false,
        queue_key: format!("omni:{name}"),
        delayed_queue_key: format!("omni:{name}:delayed"),
        delayed_lock_key: format!("omni:{name}:delayed_lock"),
        consumer_group: "g".into(),
        consumer_name: "c".into(),
        payload_key: "payload".into(),
        ack_deadline_ms: 30_000,
        dlq_config: None,
        sentinel_config: None,
    }
}

/// omniqueue expects the consumer group to exist: create it with a raw
/// inline command (no second redis client in this project).
fn create_group(port: u16, name: &str) {
    use std::io::{Read, Write as _};
    let mut s = std::net::TcpStream::connect(("127.0.0.1", port)).expect("connect redis");
    write!(s, "XGROUP CREATE omni:{name} g $ MKSTREAM\r\n").expect("XGROUP");
    let mut buf = [0u8; 64];
    let n = s.read(&mut buf).expect("XGROUP reply");
    assert!(buf[..n].starts_with(b"+OK"), "XGROUP CREATE failed");
}

fn omniqueue(c: &mut Criterion, rt: &tokio::runtime::Runtime, server: &RedisServer, body: &[u8]) {
    let url = &server.url();
    for name in ["add", "claim1", "claim100", "latency", "timers"] {
        create_group(server.port(), name);
    }
    let name = "omniqueue";
    let (p, _consumer) = rt
        .block_on(RedisBackend::builder(omni_config(url, "add")).build_pair())
        .expect("omniqueue pair");
    let p = Arc::new(p);

    let mut g = c.benchmark_group("add_1_producer");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                for _ in 0..n {
                    p.send_raw(body).await.expect("send");
                }
                start.elapsed()
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("add_64_producers");
    g.throughput(Throughput::Elements(PRODUCERS as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let start = Instant::now();
                let tasks: Vec<_> = (0..PRODUCERS)
                    .map(|_| {
                        let (p, body) = (p.clone(), body.to_vec());
                        tokio::spawn(async move {
                            for _ in 0..n {
                                p.send_raw(&body).await.expect("send");
                            }
                        })
                    })
                    .collect();
                for t in tasks {
                    t.await.expect("producer");
                }
                start.elapsed()
            })
        })
    });
    g.finish();

    let mut g = c.benchmark_group("add_batch_100");
    g.throughput(Throughput::Elements(BATCH as u64));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                use omniqueue::QueueProducer as _;
                let start = Instant::now();
                for _ in 0..n {
                    let batch: Vec<Vec<u8>> = (0..BATCH).map(|_| body.to_vec()).collect();
                    p.send_raw_batch(batch).await.expect("send batch");
                }
                start.elapsed()
            })
        })
    });
    g.finish();

    for batch in [1usize, BATCH] {
        let (p, mut consumer) = rt
            .block_on(
                RedisBackend::builder(omni_config(url, &format!("claim{batch}"))).build_pair(),
            )
            .expect("omniqueue pair");
        let mut g = c.benchmark_group(format!("claim_ack_{batch}"));
        g.throughput(Throughput::Elements(batch as u64));
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                rt.block_on(async {
                    use omniqueue::QueueProducer as _;
                    let total = n * batch as u64;
                    let mut left = total;
                    while left > 0 {
                        let k = left.min(1000);
                        let fill: Vec<Vec<u8>> = (0..k).map(|_| body.to_vec()).collect();
                        p.send_raw_batch(fill).await.expect("fill");
                        left -= k;
                    }
                    let start = Instant::now();
                    for _ in 0..n {
                        let got = if batch == 1 {
                            vec![consumer.receive().await.expect("receive")]
                        } else {
                            consumer
                                .receive_all(batch, Duration::from_secs(5))
                                .await
                                .expect("receive_all")
                        };
                        assert_eq!(got.len(), batch, "omniqueue backlog ran dry");
                        // No batch ack: ack them all concurrently.
                        let mut acks = tokio::task::JoinSet::new();
                        for d in got {
                            acks.spawn(async move { d.ack().await.map_err(|(e, _)| e) });
                        }
                        while let Some(r) = acks.join_next().await {
                            r.expect("ack task").expect("ack");
                        }
                    }
                    start.elapsed()
                })
            })
        });
        g.finish();
    }

    let (p, mut consumer) = rt
        .block_on(RedisBackend::builder(omni_config(url, "latency")).build_pair())
        .expect("omniqueue pair");
    let mut samples = Vec::new();
    let mut g = c.benchmark_group("lifecycle");
    g.throughput(Throughput::Elements(1));
    g.bench_function(name, |b| {
        b.iter_custom(|n| {
            rt.block_on(async {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    let start = Instant::now();
                    p.send_raw(body).await.expect("send");
                    let d = consumer.receive().await.expect("receive");
                    d.ack().await.map_err(|(e, _)| e).expect("ack");
                    let d = start.elapsed();
                    samples.push(d.as_secs_f64() * 1e3);
                    total += d;
                }
                total
            })
        })
    });
    g.finish();
    percentiles("lifecycle", name, &mut samples);

    // Timers: omniqueue schedules with a delay (whole seconds in its sorted
    // set) and moves due items every 500 ms.
    let (p, mut consumer) = rt
        .block_on(RedisBackend::builder(omni_config(url, "timers")).build_pair())
        .expect("omniqueue pair");
    let mut late = Vec::new();
    rt.block_on(async {
        for _ in 0..2 {
            let t0 = wall_ms() as u64 + 4000;
            for i in 0..1000u64 {
                let due = t0 + i * 2;
                let delay = Duration::from_secs_f64(((due as f64 - wall_ms()) / 1e3).max(0.0));
                p.send_raw_scheduled(&due.to_le_bytes(), delay)
                    .await
                    .expect("schedule");
            }
            assert!((wall_ms() as u64) < t0, "adding the timers took too long");
            let mut got = 0;
            while got < 1000 {
                let ds = consumer
                    .receive_all(100, Duration::from_secs(10))
                    .await
                    .expect("receive_all");
                let now = wall_ms();
                assert!(!ds.is_empty(), "no timer fired within 10 s");
                for d in ds {
                    let b: [u8; 8] = d
                        .borrow_payload()
                        .and_then(|p| p.try_into().ok())
                        .expect("8-byte payload");
                    late.push(now - u64::from_le_bytes(b) as f64);
                    got += 1;
                    d.ack().await.map_err(|(e, _)| e).expect("ack");
                }
            }
        }
    });
    percentiles("timer lateness", name, &mut late);
}

fn benches() {
    let mut c = criterion();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    // Drops of the peers' pooled connections need a runtime context.
    let _enter = rt.enter();
    let body: Vec<u8> = (0..PAYLOAD_BYTES).map(|i| (i % 251) as u8).collect();
    let only = std::env::var("WJ_PEERS").unwrap_or_default();
    if only.is_empty() || only.contains("effectum") {
        effectum(&mut c, &rt, &body);
    }
    if only.is_empty() || only.contains("omniqueue") {
        let server =
            RedisServer::start().expect("start redis-server (apt-get install redis-server)");
        omniqueue(&mut c, &rt, &server, &body);
    }
}

criterion_main!(benches);
