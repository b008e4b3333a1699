//! Cancel to SIGTERM (SPEC 3, Cancelling; SPEC 9): from just before
//! `cancel(id)` is called, in another process than the worker, until the
//! running command's
//! SIGTERM trap has run, for a `workjournal work --exec` on a queue file
//! (the cancel goes through the socket `work` serves) and on Redis (a
//! `redis-server` of the test harness on a free port). The baseline, in
//! the same run: the same trap after a `kill -TERM` of the command's
//! process group sent straight from this process (the floor: signal
//! delivery, the trap, its clock read).
//!
//! `WJ_CANCEL_RUNS` cancels per backend (default 50) and half as many
//! direct kills; the p50, p99 and max go to `WJ_BENCH_OUT/extra.tsv` for
//! `benches/report.rs`, and are printed here with their ratios.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use workjournal::{BoxQueue, Config, NewItem, WorkQueue};

mod common;
use common::{record, temp_dir};

/// The command: it records its process id (its group's), then waits; on
/// SIGTERM it records the time (ns since the epoch) and exits 0.
const CMD: &str = r#"trap 'date +%s%N > "$WJ_D/term.$WORKJOURNAL_ID"; exit 0' TERM; echo $$ > "$WJ_D/pid.$WORKJOURNAL_ID"; while :; do sleep 0.005; done"#;

fn now_ns() -> u128 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos()
}

/// Wait (polling every ms, up to 30 s) for `path` to hold a whole line.
fn read_line(path: &Path) -> String {
    let start = Instant::now();
    loop {
        if let Ok(s) = std::fs::read_to_string(path)
            && s.ends_with('\n')
        {
            return s.trim().to_string();
        }
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "{} never came",
            path.display()
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// The value at quantile `q` of `v` (sorted here).
fn quantile(v: &mut [f64], q: f64) -> f64 {
    v.sort_by(f64::total_cmp);
    let i = ((v.len() as f64 - 1.0) * q).round() as usize;
    v[i.min(v.len() - 1)]
}

/// `workjournal TARGET work --exec CMD` (one slot, a long lease, so that
/// nothing but the cancel stops a command).
fn start_work(target: &[String], dir: &Path) -> Child {
    Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .args(target)
        .args([
            "work",
            "--exec",
            CMD,
            "--lease",
            "10m",
            "--kill-grace",
            "10s",
        ])
        .env("WJ_D", dir)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start workjournal work")
}

/// Add an item and wait for its command to run; its id and process group.
async fn running(q: &BoxQueue, dir: &Path) -> (u64, i32) {
    let id = q.add(NewItem::new(b"x".to_vec())).await.expect("add").id;
    let pid = read_line(&dir.join(format!("pid.{id}")));
    // The trap is set before the pid is written; give the shell its loop.
    tokio::time::sleep(Duration::from_millis(20)).await;
    (id, pid.parse().expect("a process id"))
}

/// Cancel latencies (ms) over `runs` items, then direct-kill latencies
/// over `runs / 2`, against the worker already running on `q`.
async fn measure(q: &BoxQueue, dir: &Path, runs: usize) -> (Vec<f64>, Vec<f64>) {
    let mut cancels = Vec::with_capacity(runs);
    for _ in 0..runs {
        let (id, _) = running(q, dir).await;
        let t0 = now_ns();
        q.cancel(id).await.expect("cancel");
        let t1: u128 = read_line(&dir.join(format!("term.{id}")))
            .parse()
            .expect("a time in ns");
        cancels.push(t1.saturating_sub(t0) as f64 / 1e6);
    }
    let mut kills = Vec::with_capacity(runs / 2);
    for _ in 0..(runs / 2).max(1) {
        let (id, pgid) = running(q, dir).await;
        let t0 = now_ns();
        if let Some(pid) = rustix::process::Pid::from_raw(pgid) {
            rustix::process::kill_process_group(pid, rustix::process::Signal::TERM)
                .expect("kill -TERM the command's group");
        }
        let t1: u128 = read_line(&dir.join(format!("term.{id}")))
            .parse()
            .expect("a time in ns");
        kills.push(t1.saturating_sub(t0) as f64 / 1e6);
    }
    (cancels, kills)
}

fn report(workload: &str, goal_ms: f64, mut cancels: Vec<f64>, mut kills: Vec<f64>) {
    let (p50, p99, max) = (
        quantile(&mut cancels, 0.5),
        quantile(&mut cancels, 0.99),
        quantile(&mut cancels, 1.0),
    );
    let (k50, k99) = (quantile(&mut kills, 0.5), quantile(&mut kills, 0.99));
    record(workload, "workjournal-p50", p50);
    record(workload, "workjournal-p99", p99);
    record(workload, "workjournal-max", max);
    record(workload, "kill-term-p50", k50);
    record(workload, "kill-term-p99", k99);
    println!(
        "{workload}: cancel to SIGTERM p50 {p50:.1} ms, p99 {p99:.1} ms, max {max:.1} ms over {} cancels; a direct kill -TERM p50 {k50:.1} ms, p99 {k99:.1} ms ({:.1}x at p50); goal p99 {goal_ms:.0} ms ({:.2}x of it)",
        cancels.len(),
        p50 / k50.max(0.001),
        p99 / goal_ms
    );
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` runs nothing.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let runs: usize = std::env::var("WJ_CANCEL_RUNS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(50)
        .max(2);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");

    // On a queue file, served by `work` itself.
    let dir = temp_dir();
    let db = dir.path().join("q.redb");
    let target = vec!["--db".to_string(), db.display().to_string()];
    // The file exists before `work` opens it (work refuses a missing one).
    rt.block_on(async {
        let q = workjournal::EmbeddedQueue::open(&db, Config::default())
            .await
            .expect("create the queue file");
        q.close().await.expect("close");
    });
    let mut worker = start_work(&target, dir.path());
    let socket = workjournal::socket_path_for(&db);
    let start = Instant::now();
    while !socket.exists() {
        assert!(
            start.elapsed() < Duration::from_secs(30),
            "work never served the file"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    let (cancels, kills) = rt.block_on(async {
        let q = workjournal::connect(&db.display().to_string(), Config::default())
            .await
            .expect("connect to work's socket");
        measure(&q, dir.path(), runs).await
    });
    let _ = worker.kill();
    let _ = worker.wait();
    report("cancel_to_sigterm_file", 100.0, cancels, kills);

    // On Redis.
    let server = workjournal::testing::RedisServer::start().expect("start redis-server");
    let url = server.url();
    let dir = temp_dir();
    let target = vec!["--redis".to_string(), url.clone()];
    let mut worker = start_work(&target, dir.path());
    let (cancels, kills) = rt.block_on(async {
        let q = workjournal::connect(&url, Config::default())
            .await
            .expect("connect to redis");
        measure(&q, dir.path(), runs).await
    });
    let _ = worker.kill();
    let _ = worker.wait();
    report("cancel_to_sigterm_redis", 250.0, cancels, kills);
}
