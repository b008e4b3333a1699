//! Schedules (SPEC 13): fire lateness, and ten thousand schedules firing
//! every second.
//!
//! - `schedule fire lateness`: 20 schedules every 100 ms, staggered by
//!   5 ms, fired and run by a `Worker` for 4 s; lateness = when the
//!   worker's handler got the item minus its slot (`not_before_ms`), so
//!   it counts the firer's sleep, the firing's commit and the claim.
//! - `10k schedules every 1s`: 10 000 schedules every second, fired by
//!   one firer (`fire_schedules` in a loop, sleeping until the next fire
//!   time; no worker) for 6 s: the items per second it made (10 000 when
//!   it keeps up), the firing lateness (the queue's clock at the firing
//!   minus the slot, per schedule), the share of one core the bench
//!   process used, and on Redis the share the server used.
//!
//! Not a criterion measurement: `harness = false` with its own main.

mod common;

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use common::{EMBEDDED, REDIS};
use workjournal::testing::RedisServer;
use workjournal::{Schedule, ScheduleQueue, WorkQueue, Worker};

fn wall_ms() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64() * 1e3)
        .unwrap_or(0.0)
}

/// CPU time of this process so far (user + system), from /proc.
fn cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // Fields after the command's closing parenthesis: utime is the 12th,
    // stime the 13th (in clock ticks, 100 a second on Linux).
    let rest = stat.rsplit(')').next().unwrap_or("");
    let f: Vec<&str> = rest.split_whitespace().collect();
    let tick = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok()).unwrap_or(0.0);
    (tick(11) + tick(12)) / 100.0
}

/// Run a worker on `q` for `secs`, recording each item's lateness (ms).
async fn run_worker<Q: WorkQueue + Clone + 'static>(q: &Q, secs: f64) -> Vec<f64> {
    let late = Arc::new(Mutex::new(Vec::new()));
    let seen = late.clone();
    Worker::new(q.clone())
        .concurrency(32)
        .run(
            move |c| {
                let seen = seen.clone();
                async move {
                    let slot = c.item.not_before_ms.unwrap_or(0) as f64;
                    seen.lock().unwrap().push(wall_ms() - slot);
                    Ok::<(), String>(())
                }
            },
            tokio::time::sleep(Duration::from_secs_f64(secs)),
        )
        .await
        .expect("worker");
    late.lock().unwrap().clone()
}

async fn lateness<Q: WorkQueue + Clone + 'static>(q: &Q) -> Vec<f64> {
    let now = q.now_ms().await.expect("now");
    let start = (now / 100 + 10) * 100;
    for n in 0..20u64 {
        let s = Schedule::every(format!("lateness-{n}"), Duration::from_millis(100))
            .expect("schedule")
            .start_ms(start + n * 5);
        q.upsert_schedule(s).await.expect("upsert");
    }
    let mut v = run_worker(q, 4.0).await;
    for n in 0..20u64 {
        q.remove_schedule(&format!("lateness-{n}"))
            .await
            .expect("remove");
    }
    // Drop the first second: the worker's start.
    v.retain(|l| *l < 1_000.0);
    v
}

/// 10 000 schedules every second, fired by one firer for 6 s: (items
/// made per second, firing lateness samples in ms, CPU share of one core
/// of this process in %, and of the Redis server at `redis_url` if any).
async fn ten_thousand<Q: WorkQueue + Clone + 'static>(
    q: &Q,
    redis_url: Option<&str>,
) -> (f64, Vec<f64>, f64, Option<f64>) {
    let now = q.now_ms().await.expect("now");
    let start = (now / 1000 + 3) * 1000;
    let mut ups = Vec::new();
    for p in 0..16u64 {
        let q = q.clone();
        ups.push(tokio::spawn(async move {
            for n in (p..10_000).step_by(16) {
                let s = Schedule::every(format!("tenk-{n}"), Duration::from_secs(1))
                    .expect("schedule")
                    .start_ms(start);
                q.upsert_schedule(s).await.expect("upsert");
            }
        }));
    }
    for u in ups {
        u.await.expect("upserts");
    }
    let wait = start.saturating_sub(q.now_ms().await.expect("now"));
    tokio::time::sleep(Duration::from_millis(wait)).await;
    let server0 = match redis_url {
        Some(url) => Some(redis_cpu_seconds(url).await),
        None => None,
    };
    let cpu0 = cpu_seconds();
    let t0 = Instant::now();
    let mut items = 0u64;
    let mut late = Vec::new();
    while t0.elapsed() < Duration::from_secs(6) {
        let fired = q.fire_schedules().await.expect("fire");
        items += fired.items;
        late.extend(fired.schedules.iter().map(|s| s.lateness_ms as f64));
        if let Some(next) = fired.next_fire_ms {
            let now = q.now_ms().await.expect("now");
            if next > now {
                tokio::time::sleep(Duration::from_millis(next - now)).await;
            }
        }
    }
    let wall = t0.elapsed().as_secs_f64();
    let cpu = cpu_seconds() - cpu0;
    let server = match (redis_url, server0) {
        (Some(url), Some(s0)) => Some(100.0 * (redis_cpu_seconds(url).await - s0) / wall),
        _ => None,
    };
    (items as f64 / wall, late, 100.0 * cpu / wall, server)
}

/// The Redis server's CPU time so far (user + system), s.
async fn redis_cpu_seconds(url: &str) -> f64 {
    let client = redis::Client::open(url).expect("redis url");
    let mut c = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect to redis");
    let info: String = redis::cmd("INFO")
        .arg("cpu")
        .query_async(&mut c)
        .await
        .expect("INFO cpu");
    info.lines()
        .filter_map(|l| {
            l.strip_prefix("used_cpu_sys:")
                .or_else(|| l.strip_prefix("used_cpu_user:"))
        })
        .filter_map(|v| v.trim().parse::<f64>().ok())
        .sum()
}

fn main() {
    let rt = common::runtime();
    let dir = common::temp_dir();
    let server = RedisServer::start().expect("start redis-server (apt-get install redis-server)");
    let url = server.url();
    rt.block_on(async {
        let embedded = common::embedded(dir.path(), "schedules").await;
        let redis = common::redis(&url, "schedules").await;
        let mut emb = lateness(&embedded).await;
        let mut red = lateness(&redis).await;
        common::record_percentiles("schedule fire lateness", EMBEDDED, &mut emb);
        common::record_percentiles("schedule fire lateness", REDIS, &mut red);

        let embedded = common::embedded(dir.path(), "tenk").await;
        let redis = common::redis(&url, "tenk").await;
        for (name, (per_s, mut late, cpu, server)) in [
            (EMBEDDED, ten_thousand(&embedded, None).await),
            (REDIS, ten_thousand(&redis, Some(&url)).await),
        ] {
            common::record("10k schedules every 1s: items/s", name, per_s, "items/s");
            common::record_percentiles("10k schedules every 1s: lateness", name, &mut late);
            common::record("10k schedules every 1s: CPU %", name, cpu, "%");
            if let Some(server) = server {
                common::record(
                    "10k schedules every 1s: redis-server CPU %",
                    name,
                    server,
                    "%",
                );
            }
        }
    });
}
