//! The soak: N minutes under load with faults, then a check that nothing
//! acknowledged was lost. `scripts/soak.sh` runs it; see there for the
//! arguments.
//!
//! ```sh
//! cargo run --example soak --features redis,server,remote,testing -- embedded 60 /tmp/soak
//! ```
//!
//! Each run has 64 producers (random priorities, 30% timers due 0-5 s
//! later) and 8 workers (random handler delays and failures; three
//! deliveries, then a dead letter), and one backend:
//!
//! - `embedded`: one process (the "host") holds the file, with the 64
//!   producers and 8 workers in it; the driver SIGKILLs the whole host
//!   every 45 s and starts it again.
//! - `serve`: one process serves the file on a Unix socket with 32
//!   producers in it; the driver runs the other 32 through the socket, and
//!   8 worker processes claim through it. The driver SIGKILLs a worker
//!   every 20 s and the server every 60 s.
//! - `redis`: a `redis-server` with `appendfsync always`; the driver runs
//!   the 64 producers, 8 worker processes claim. The driver SIGKILLs a
//!   worker every 20 s and redis-server every 90 s.
//!
//! The embedded file lives on a 256 MiB tmpfs (when the driver may mount
//! one: it runs as root), which the driver fills to the last byte for 10 s
//! every 2 minutes: a disk-full episode. A run shorter than 5 minutes
//! (CI's) has every fault more often (host 20 s, server and redis-server
//! 30 s, worker 10 s, disk full every minute), so it meets each.
//!
//! Every add that returned is logged (one line, written before anything
//! else happens, so a SIGKILL cannot drop a line of an add that returned),
//! and so is every item a handler finished (before its ack). At the end
//! producers stop, faults stop, the workers drain the queue, and the
//! driver checks that every logged add was handled or is a dead letter:
//! `lost` must be 0. Every 10 s it samples throughput, the RSS and open
//! file descriptors of the process holding the queue, and the file size
//! (embedded) or Redis's memory; timers' lateness is claimed_at minus
//! not_before of each first delivery of a timer. Every add that failed,
//! in whichever process, is logged too (`add-errors-*.log`, its error
//! kind): the `add_errors` column counts them all.

use std::collections::HashSet;
use std::fs::{File, OpenOptions};
use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
use workjournal::testing::{RedisServer, RedisServerOptions};
use workjournal::{
    BoxQueue, Claimed, Config, EmbeddedQueue, HandlerError, NewItem, RedisOptions, RedisQueue,
    RemoteOptions, RemoteQueue, RetryPolicy, WorkQueue, Worker,
};

type AnyError = Box<dyn std::error::Error + Send + Sync>;

const PRODUCERS: usize = 64;
const WORKERS: usize = 8;
/// Pause between two adds of one producer.
const ADD_PAUSE: Duration = Duration::from_millis(100);
/// The namespace of the Redis run.
const NS: &str = "soak";

/// One line per event, appended with one `write` each, so that lines of
/// concurrent writers never mix and a SIGKILL loses no written line.
#[derive(Clone)]
struct Log(Arc<File>);

impl Log {
    fn open(path: &Path) -> std::io::Result<Log> {
        let f = OpenOptions::new().create(true).append(true).open(path)?;
        Ok(Log(Arc::new(f)))
    }

    fn line(&self, v: impl std::fmt::Display) {
        let s = format!("{v}\n");
        // A failed log write would make the end check report a loss that
        // did not happen: say so loudly.
        if let Err(e) = (&*self.0).write_all(s.as_bytes()) {
            eprintln!("soak: log write failed: {e}");
        }
    }
}

fn config() -> Config {
    // Outcomes are not what the soak checks; a short ttl keeps Redis's
    // memory flat after warm-up.
    Config::default()
        .max_deliveries(3)
        .result_ttl(Duration::from_secs(60))
}

fn stop_file(dir: &Path) -> PathBuf {
    dir.join("stop-producing")
}

/// Add items until `stop` or the stop file appears, logging every id an
/// add returned.
async fn produce(q: BoxQueue, acked: Log, dir: PathBuf, stop: Arc<AtomicBool>, errors: Log) {
    let mut rng = fastrand::Rng::new();
    let payload = vec![b'x'; 100];
    let mut n = 0u64;
    loop {
        n += 1;
        if stop.load(Ordering::Acquire) || (n.is_multiple_of(10) && stop_file(&dir).exists()) {
            return;
        }
        let item = NewItem::new(payload.clone()).priority(rng.u8(0..4));
        let added = if rng.u8(0..10) < 3 {
            match q.now_ms().await {
                Ok(now) => q.add_delayed(item, now + rng.u64(0..5_000)).await,
                Err(e) => Err(e),
            }
        } else {
            q.add(item).await
        };
        match added {
            Ok(a) => acked.line(a.id),
            Err(e) => {
                errors.line(e.kind());
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        tokio::time::sleep(ADD_PAUSE).await;
    }
}

/// Run a worker on `q` until `shutdown`: random delays, 5% failed attempts.
async fn work(
    q: BoxQueue,
    handled: Log,
    lateness: Log,
    shutdown: impl std::future::Future<Output = ()> + Send,
) {
    let worker = Worker::new(q)
        .concurrency(8)
        .lease(Duration::from_secs(5))
        .retry_policy(
            RetryPolicy::default()
                .base(Duration::from_millis(200))
                .max_delay(Duration::from_secs(2)),
        );
    let run = worker.run(
        move |c: Claimed| {
            let (handled, lateness) = (handled.clone(), lateness.clone());
            async move {
                if c.item.deliveries == 1
                    && let Some(nb) = c.item.not_before_ms
                {
                    lateness.line(c.claimed_at_ms.saturating_sub(nb));
                }
                tokio::time::sleep(Duration::from_millis(fastrand::u64(0..10))).await;
                if fastrand::u8(0..100) < 5 {
                    return Err(HandlerError::failed("soak: a random failure"));
                }
                handled.line(c.item.id);
                Ok(())
            }
        },
        shutdown,
    );
    if let Err(e) = run.await {
        eprintln!("soak: worker ended: {e}");
    }
}

fn env(name: &str) -> Result<String, AnyError> {
    std::env::var(name).map_err(|_| format!("{name} is not set").into())
}

fn logs(dir: &Path, what: &str) -> Result<Log, AnyError> {
    Ok(Log::open(
        &dir.join(format!("{what}-{}.log", std::process::id())),
    )?)
}

async fn open_file(disk: &Path) -> Result<EmbeddedQueue, AnyError> {
    // After a SIGKILL the old process's lock goes with it; retry a little
    // while the kernel lets go, and while the disk is full.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match EmbeddedQueue::open(disk.join("q.redb"), config()).await {
            Ok(q) => return Ok(q),
            Err(e) if Instant::now() < deadline => {
                eprintln!("soak: open: {e}");
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// A child process: `host` (embedded: file, producers, workers), `server`
/// (serve: file, socket, producers) or `worker` (serve, redis).
async fn child(role: &str) -> Result<(), AnyError> {
    let dir = PathBuf::from(env("SOAK_DIR")?);
    let disk = PathBuf::from(env("SOAK_DISK")?);
    let stop = Arc::new(AtomicBool::new(false));
    let errors = logs(&dir, "add-errors")?;
    match role {
        "host" | "server" => {
            let q = BoxQueue::new(open_file(&disk).await?);
            let producers = if role == "host" {
                PRODUCERS
            } else {
                PRODUCERS / 2
            };
            let acked = logs(&dir, "acked")?;
            for _ in 0..producers {
                tokio::spawn(produce(
                    q.clone(),
                    acked.clone(),
                    dir.clone(),
                    stop.clone(),
                    errors.clone(),
                ));
            }
            if role == "host" {
                let (handled, lateness) = (logs(&dir, "handled")?, logs(&dir, "lateness")?);
                for _ in 0..WORKERS {
                    tokio::spawn(work(
                        q.clone(),
                        handled.clone(),
                        lateness.clone(),
                        std::future::pending(),
                    ));
                }
                // The driver cannot open the file while the host holds
                // it: the host tells it what is left to run.
                loop {
                    tokio::time::sleep(Duration::from_secs(2)).await;
                    if let Ok(s) = q.stats().await {
                        let left = s.backlog + s.delayed + s.pending + s.parked;
                        let tmp = dir.join("host-left.tmp");
                        std::fs::write(&tmp, left.to_string())?;
                        std::fs::rename(&tmp, dir.join("host-left"))?;
                    }
                }
            }
            let socket = dir.join("q.sock");
            let listener = Listener::bind_unix(&socket, &SocketPermissions::default()).await?;
            Server::new(q, ServerOptions::default())
                .run(vec![listener], std::future::pending())
                .await?;
        }
        "worker" => {
            let q = match env("SOAK_REDIS") {
                Ok(url) => BoxQueue::new(
                    RedisQueue::connect(&url, NS, config(), RedisOptions::default()).await?,
                ),
                Err(_) => BoxQueue::new(remote(&dir).await?),
            };
            let (handled, lateness) = (logs(&dir, "handled")?, logs(&dir, "lateness")?);
            work(q, handled, lateness, std::future::pending()).await;
        }
        other => return Err(format!("unknown role {other}").into()),
    }
    Ok(())
}

async fn remote(dir: &Path) -> Result<RemoteQueue, AnyError> {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        match RemoteQueue::connect_unix(dir.join("q.sock"), RemoteOptions::default()).await {
            Ok(q) => return Ok(q),
            Err(e) if Instant::now() < deadline => {
                let _ = e;
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

#[derive(Clone, Copy, PartialEq, Debug)]
enum Kind {
    Embedded,
    Serve,
    Redis,
}

/// The processes and servers of one run.
struct Run {
    kind: Kind,
    dir: PathBuf,
    disk: PathBuf,
    mounted: bool,
    holder: Option<Child>,
    workers: Vec<Child>,
    redis: Option<RedisServer>,
    kills: u64,
    faults: u64,
}

impl Run {
    fn spawn(&self, role: &str) -> Result<Child, AnyError> {
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.env("SOAK_ROLE", role)
            .env("SOAK_DIR", &self.dir)
            .env("SOAK_DISK", &self.disk);
        if let Some(r) = &self.redis {
            cmd.env("SOAK_REDIS", r.url());
        }
        Ok(cmd.spawn()?)
    }

    fn start_holder(&mut self) -> Result<(), AnyError> {
        self.holder = match self.kind {
            Kind::Embedded => Some(self.spawn("host")?),
            Kind::Serve => Some(self.spawn("server")?),
            Kind::Redis => None,
        };
        Ok(())
    }

    fn kill_holder(&mut self) {
        if let Some(mut c) = self.holder.take() {
            let _ = c.kill();
            let _ = c.wait();
            self.kills += 1;
        }
    }

    fn kill_worker(&mut self, i: usize) -> Result<(), AnyError> {
        if let Some(c) = self.workers.get_mut(i) {
            let _ = c.kill();
            let _ = c.wait();
            self.kills += 1;
        }
        let new = self.spawn("worker")?;
        if let Some(c) = self.workers.get_mut(i) {
            *c = new;
        }
        Ok(())
    }

    /// The pid whose RSS and fds stand for the queue's holder: the host or
    /// the server, or for Redis the driver with its 64 producers (Redis's
    /// own memory is the queue's size).
    fn holder_pid(&self) -> Option<u32> {
        match self.kind {
            Kind::Redis => Some(std::process::id()),
            _ => self.holder.as_ref().map(Child::id),
        }
    }

    /// The embedded file and its redo log, or Redis's `used_memory`.
    async fn queue_bytes(&self) -> u64 {
        match (&self.kind, &self.redis) {
            (Kind::Redis, Some(r)) => redis_memory(&r.url()).await.unwrap_or(0),
            _ => dir_bytes(&self.disk, "ballast"),
        }
    }

    /// Stop every process, counting no kill.
    fn stop_all(&mut self) {
        for mut c in self.workers.drain(..).chain(self.holder.take()) {
            let _ = c.kill();
            let _ = c.wait();
        }
    }
}

async fn redis_memory(url: &str) -> Result<u64, AnyError> {
    let client = redis::Client::open(url)?;
    let mut conn = client.get_multiplexed_async_connection().await?;
    let info: String = redis::cmd("INFO")
        .arg("memory")
        .query_async(&mut conn)
        .await?;
    Ok(info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0))
}

fn dir_bytes(dir: &Path, except: &str) -> u64 {
    std::fs::read_dir(dir)
        .map(|d| {
            d.flatten()
                .filter(|e| e.file_name() != except)
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn rss_kib(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("VmRSS:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        })
        .unwrap_or(0)
}

fn fds(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| d.count())
        .unwrap_or(0)
}

/// The lines of the `what-*.log` files of `dir`.
fn count_lines(dir: &Path, what: &str) -> u64 {
    let mut n = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{what}-")) && name.ends_with(".log") {
            let bytes = std::fs::read(e.path()).unwrap_or_default();
            n += bytes.iter().filter(|&&b| b == b'\n').count() as u64;
        }
    }
    n
}

/// Ids in the `what-*.log` files of `dir`, with how many lines there were.
fn read_ids(dir: &Path, what: &str) -> (HashSet<u64>, u64) {
    let mut ids = HashSet::new();
    let mut lines = 0;
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with(&format!("{what}-")) && name.ends_with(".log") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            for l in text.lines() {
                // A line cut by a SIGKILL mid-write is not a whole id.
                if let Ok(id) = l.parse() {
                    ids.insert(id);
                    lines += 1;
                }
            }
        }
    }
    (ids, lines)
}

fn p99(dir: &Path) -> (u64, u64, usize) {
    let mut all = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.starts_with("lateness-") {
            let text = std::fs::read_to_string(e.path()).unwrap_or_default();
            all.extend(text.lines().filter_map(|l| l.parse::<u64>().ok()));
        }
    }
    all.sort_unstable();
    let at = |q: f64| {
        all.get(((all.len() as f64 * q) as usize).min(all.len().saturating_sub(1)))
            .copied()
            .unwrap_or(0)
    };
    (at(0.5), at(0.99), all.len())
}

/// Fill `disk` to the last byte, hold `hold`, then free it again.
async fn disk_full(disk: &Path, hold: Duration) {
    let path = disk.join("ballast");
    if let Ok(mut f) = File::create(&path) {
        let chunk = vec![0u8; 1 << 20];
        while f.write_all(&chunk).is_ok() {}
        // The last partial chunk: byte by byte is too slow, 4 KiB will do.
        while f.write_all(&chunk[..4096]).is_ok() {}
    }
    tokio::time::sleep(hold).await;
    let _ = std::fs::remove_file(&path);
}

async fn driver(kind: Kind, minutes: f64, dir: PathBuf) -> Result<bool, AnyError> {
    std::fs::create_dir_all(&dir)?;
    let disk = dir.join("disk");
    std::fs::create_dir_all(&disk)?;
    let mounted = kind != Kind::Redis
        && Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=256m", "tmpfs"])
            .arg(&disk)
            .status()
            .map(|s| s.success())
            .unwrap_or(false);
    if kind != Kind::Redis && !mounted {
        eprintln!("soak: no tmpfs (not root?): the disk-full episodes are left out");
    }
    let mut run = Run {
        kind,
        dir: dir.clone(),
        disk: disk.clone(),
        mounted,
        holder: None,
        workers: Vec::new(),
        redis: None,
        kills: 0,
        faults: 0,
    };
    if kind == Kind::Redis {
        run.redis = Some(RedisServer::start_with(RedisServerOptions {
            aof_always: true,
            ..Default::default()
        })?);
    }
    run.start_holder()?;
    if kind != Kind::Embedded {
        for _ in 0..WORKERS {
            let w = run.spawn("worker")?;
            run.workers.push(w);
        }
    }
    // The driver's own producers and its handle for stats.
    let stop = Arc::new(AtomicBool::new(false));
    let errors = Log::open(&dir.join("add-errors-driver.log"))?;
    let own: Option<BoxQueue> = match kind {
        Kind::Embedded => None,
        Kind::Serve => Some(BoxQueue::new(remote(&dir).await?)),
        Kind::Redis => {
            let url = run.redis.as_ref().map(RedisServer::url).unwrap_or_default();
            Some(BoxQueue::new(
                RedisQueue::connect(&url, NS, config(), RedisOptions::default()).await?,
            ))
        }
    };
    let mut producers = Vec::new();
    if let Some(q) = &own {
        let n = if kind == Kind::Serve {
            PRODUCERS / 2
        } else {
            PRODUCERS
        };
        let acked = Log::open(&dir.join("acked-driver.log"))?;
        for _ in 0..n {
            producers.push(tokio::spawn(produce(
                q.clone(),
                acked.clone(),
                dir.clone(),
                stop.clone(),
                errors.clone(),
            )));
        }
    }
    let started = Instant::now();
    let end = started + Duration::from_secs_f64(minutes * 60.0);
    let mut tick = 0u64;
    // Fault periods (s): a short run (CI's) meets every fault at least once.
    let short = minutes < 5.0;
    let (host_every, server_every, redis_every, worker_every, full_every) = if short {
        (20, 30, 30, 10, 60)
    } else {
        (45, 60, 90, 20, 120)
    };
    let mut last_acked = 0u64;
    let mut last_at = started;
    println!("# soak {kind:?}, {minutes} min, dir {}", dir.display());
    println!(
        "min\tadds/min\tholder_rss_kib\tholder_fds\tworker_rss_kib\tqueue_bytes\tkills\tfaults\tadd_errors"
    );
    while Instant::now() < end {
        tokio::time::sleep(Duration::from_secs(5)).await;
        tick += 1;
        let secs = tick * 5;
        // Faults.
        match kind {
            Kind::Embedded if secs.is_multiple_of(host_every) => {
                run.kill_holder();
                run.start_holder()?;
            }
            Kind::Serve if secs.is_multiple_of(server_every) => {
                run.kill_holder();
                run.start_holder()?;
            }
            Kind::Redis if secs.is_multiple_of(redis_every) => {
                if let Some(r) = run.redis.as_mut() {
                    r.kill();
                    run.kills += 1;
                    tokio::time::sleep(Duration::from_secs(1)).await;
                    r.restart()?;
                }
            }
            _ => {}
        }
        if kind != Kind::Embedded && secs.is_multiple_of(worker_every) {
            run.kill_worker(fastrand::usize(0..WORKERS))?;
        }
        if run.mounted && secs % full_every == full_every / 2 {
            run.faults += 1;
            disk_full(&disk, Duration::from_secs(10)).await;
        }
        if secs.is_multiple_of(10) {
            let acked = count_lines(&dir, "acked");
            let now = Instant::now();
            let per_min = (acked - last_acked) as f64 * 60.0 / (now - last_at).as_secs_f64();
            last_acked = acked;
            last_at = now;
            let pid = run.holder_pid();
            let worker = run.workers.first().map(Child::id).or(pid);
            println!(
                "{:.1}\t{:.0}\t{}\t{}\t{}\t{}\t{}\t{}\t{}",
                started.elapsed().as_secs_f64() / 60.0,
                per_min,
                pid.map(rss_kib).unwrap_or(0),
                pid.map(fds).unwrap_or(0),
                worker.map(rss_kib).unwrap_or(0),
                run.queue_bytes().await,
                run.kills,
                run.faults,
                count_lines(&dir, "add-errors"),
            );
        }
    }
    // Drain: producers stop, faults stop, every process is up.
    stop.store(true, Ordering::Release);
    File::create(stop_file(&dir))?;
    for p in producers {
        let _ = p.await;
    }
    if run.holder.is_none() && kind != Kind::Redis {
        run.start_holder()?;
    }
    let drained = drain(&run, own.as_ref()).await;
    // Every process stops; the driver reads what is left.
    run.stop_all();
    let q = match own {
        Some(q) if kind == Kind::Redis => q,
        _ => BoxQueue::new(open_file(&disk).await?),
    };
    let s = q.stats().await?;
    println!("# final stats {s:?}");
    let dead = dead_ids(&q).await?;
    q.close().await?;
    let (acked, acked_lines) = read_ids(&dir, "acked");
    let (handled, handled_lines) = read_ids(&dir, "handled");
    let lost: Vec<u64> = acked
        .iter()
        .filter(|id| !handled.contains(id) && !dead.contains(id))
        .copied()
        .collect();
    let (p50, p99, timers) = p99(&dir);
    println!(
        "# {kind:?}: {:.1} min, adds acknowledged {acked_lines}, handled {} ({} runs, {} again), dead letters {}, kills {}, disk-full episodes {}, drained {drained}, lost {}",
        started.elapsed().as_secs_f64() / 60.0,
        handled.len(),
        handled_lines,
        handled_lines.saturating_sub(handled.len() as u64),
        dead.len(),
        run.kills,
        run.faults,
        lost.len()
    );
    println!("# timer lateness: p50 {p50} ms, p99 {p99} ms over {timers} first deliveries");
    if !lost.is_empty() {
        let mut some = lost.clone();
        some.sort_unstable();
        some.truncate(20);
        println!("# LOST (first 20): {some:?}");
    }
    if run.mounted {
        let _ = Command::new("umount").arg(&disk).status();
    }
    Ok(lost.is_empty() && drained)
}

/// Wait (up to 5 min) until nothing is left to run; whether it got there.
async fn drain(run: &Run, own: Option<&BoxQueue>) -> bool {
    let deadline = Instant::now() + Duration::from_secs(300);
    let _ = std::fs::remove_file(run.dir.join("host-left"));
    // Three looks in a row at an empty queue: one could come between an
    // add that is still landing and its item.
    let mut empty = 0;
    while Instant::now() < deadline {
        tokio::time::sleep(Duration::from_secs(2)).await;
        let left = match (run.kind, own) {
            (Kind::Embedded, _) => host_left(&run.dir),
            (_, Some(q)) => q
                .stats()
                .await
                .ok()
                .map(|s| s.backlog + s.delayed + s.pending + s.parked),
            _ => None,
        };
        empty = if left == Some(0) { empty + 1 } else { 0 };
        if empty == 3 {
            return true;
        }
    }
    false
}

/// What the embedded host last said was left to run.
fn host_left(dir: &Path) -> Option<u64> {
    std::fs::read_to_string(dir.join("host-left"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

async fn dead_ids(q: &BoxQueue) -> Result<HashSet<u64>, AnyError> {
    Ok(q.dead_letters(1_000_000)
        .await?
        .into_iter()
        .map(|d| d.item.id)
        .collect())
}

fn main() -> Result<(), AnyError> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(4)
        .enable_all()
        .build()?;
    if let Ok(role) = std::env::var("SOAK_ROLE") {
        return rt.block_on(child(&role));
    }
    let args: Vec<String> = std::env::args().skip(1).collect();
    let [kind, minutes, dir] = args.as_slice() else {
        return Err("usage: soak embedded|serve|redis MINUTES DIR".into());
    };
    let kind = match kind.as_str() {
        "embedded" => Kind::Embedded,
        "serve" => Kind::Serve,
        "redis" => Kind::Redis,
        other => return Err(format!("unknown backend {other}").into()),
    };
    let minutes: f64 = minutes.parse()?;
    let ok = rt.block_on(driver(kind, minutes, PathBuf::from(dir)))?;
    if !ok {
        std::process::exit(1);
    }
    Ok(())
}
