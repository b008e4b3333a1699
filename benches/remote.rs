//! Through the socket (SPEC section 10): a `RemoteQueue` talking to a
//! server over a real Unix socket, against the same embedded queue used
//! in-process, for add with 1 producer, add with 64 concurrent producers
//! (the pool opens one connection per producer in flight) and claim+ack in
//! batches of 100. Baseline: a SQLite WAL queue table written by two
//! processes at once (this bench binary run again as the second writer),
//! the obvious way to share a queue between processes without a server.
//!
//! The server runs on a thread of its own with a runtime of its own, as
//! `workjournal serve` runs in a process of its own: it shares no runtime
//! thread with the callers. The second SQLite writer runs only while its
//! own subject is measured: its fsyncs and CPU would slow the others too.

mod common;

use std::process::{Child, Command, Stdio};
use std::time::Duration;

use common::baselines::Sqlite;
use common::{EMBEDDED, PAYLOAD_BYTES};
use criterion::Throughput;
use workjournal::server::ServerOptions;
use workjournal::testing::ServedQueue;
use workjournal::{Config, RemoteOptions};

const REMOTE: &str = "workjournal-remote";
const PRODUCERS: usize = 64;
const BATCH: usize = 100;
/// Set in the second SQLite writer: the file to write into.
const SQLITE_WRITER_ENV: &str = "WJ_SQLITE_SECOND_WRITER";

/// The second process of the SQLite baseline: single-insert transactions
/// until killed, each followed by a pause of `SECOND_WRITER_PAUSE`. Without
/// the pause it took the write lock again the moment it let go of it, and
/// the measured process, whose busy handler sleeps and looks again, could
/// wait out its whole 10 s busy timeout (SQLite has no fair lock: one run
/// failed with `database is locked`).
fn second_writer(path: &str) {
    let sqlite = Sqlite::open_shared(std::path::Path::new(path));
    let body = common::payload(PAYLOAD_BYTES);
    loop {
        sqlite.adds(1, 1, &body);
        std::thread::sleep(SECOND_WRITER_PAUSE);
    }
}

/// How long the second SQLite writer waits between its transactions.
const SECOND_WRITER_PAUSE: Duration = Duration::from_millis(1);

/// The second writer's process, killed when this is dropped: also when the
/// bench fails part-way, which once left one writing (and syncing) under
/// every later run.
struct SecondWriter(Child);

impl Drop for SecondWriter {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn spawn_second_writer(path: &std::path::Path) -> SecondWriter {
    SecondWriter(
        Command::new(std::env::current_exe().expect("bench executable"))
            .env(SQLITE_WRITER_ENV, path)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .spawn()
            .expect("spawn the second sqlite writer"),
    )
}

fn benches() {
    let mut c = common::criterion();
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD_BYTES);
    let body = body.as_slice();

    let embedded = rt.block_on(common::embedded(dir.path(), "in-process"));
    // The server's tasks run on the workers of a runtime of their own.
    let server_rt = common::runtime();
    let served = server_rt
        .block_on(ServedQueue::start_in(
            &dir.path().join(""),
            Config::default(),
            ServerOptions::default(),
        ))
        .expect("serve an embedded queue");
    let remote = rt
        .block_on(served.client(RemoteOptions::default()))
        .expect("connect to the server");
    let sqlite_path = dir.path().join("shared.sqlite");
    let sqlite = Sqlite::open_shared(&sqlite_path);

    {
        let mut g = c.benchmark_group("remote_add_1_producer");
        g.throughput(Throughput::Elements(1));
        g.bench_function(REMOTE, |b| {
            b.iter_custom(|n| rt.block_on(common::add_1(&remote, n, body)))
        });
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::add_1(&embedded, n, body)))
        });
        let second = spawn_second_writer(&sqlite_path);
        // Let the second writer start writing before anything is timed.
        std::thread::sleep(Duration::from_millis(200));
        g.bench_function("sqlite-wal-2-processes", |b| {
            b.iter_custom(|n| sqlite.adds(n, 1, body))
        });
        drop(second);
        g.finish();
    }
    {
        let mut g = c.benchmark_group("remote_add_64_producers");
        g.throughput(Throughput::Elements(PRODUCERS as u64));
        g.bench_function(REMOTE, |b| {
            b.iter_custom(|n| rt.block_on(common::add_concurrent(&remote, PRODUCERS, n, body)))
        });
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::add_concurrent(&embedded, PRODUCERS, n, body)))
        });
        g.finish();
    }
    {
        let mut g = c.benchmark_group("remote_claim_ack_100");
        g.throughput(Throughput::Elements(BATCH as u64));
        g.bench_function(REMOTE, |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&remote, BATCH, n, body)))
        });
        g.bench_function(EMBEDDED, |b| {
            b.iter_custom(|n| rt.block_on(common::claim_ack(&embedded, BATCH, n, body)))
        });
        g.finish();
    }
    server_rt.block_on(served.stop());
}

fn main() {
    if let Ok(path) = std::env::var(SQLITE_WRITER_ENV) {
        second_writer(&path);
        return;
    }
    benches();
    criterion::Criterion::default()
        .configure_from_args()
        .final_summary();
}
