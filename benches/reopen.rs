//! Reopen time of a 1M-item file after SIGKILL.
//!
//! A child process (this binary again, with `WJ_REOPEN_CHILD` set) fills a
//! queue with 1 000 000 items, claims 1000 of them (so the open has orphans
//! to record), says "ready" and is killed with SIGKILL mid-life. Each timed
//! iteration copies that killed file (not timed) and opens it: open plus
//! one claim, i.e. until the queue does work again. SQLite WAL gets the
//! same treatment (same items, same kill, open plus one claim).

mod common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::EMBEDDED;
use common::baselines::Sqlite;
use criterion::criterion_main;
use workjournal::{ClaimFrom, Config, EmbeddedOptions, EmbeddedQueue, WorkQueue};

/// The reopen with a verification of the whole file at every open.
const VERIFY_EVERY_OPEN: &str = "workjournal-embedded-verify-every-open";

/// Items in the file; `WJ_REOPEN_ITEMS` overrides it for a smoke run.
fn items() -> u64 {
    std::env::var("WJ_REOPEN_ITEMS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000)
}
const PAYLOAD: usize = 64;

/// In the child: fill the file at `path` (kind "embedded" or "sqlite"),
/// then wait to be killed.
fn child(kind: &str, path: &Path) {
    let body = common::payload(PAYLOAD);
    if kind == "embedded" {
        let rt = common::runtime();
        rt.block_on(async {
            let q = EmbeddedQueue::open(path, Config::default())
                .await
                .expect("open");
            let mut left = items();
            while left > 0 {
                let k = left.min(10_000);
                let items = (0..k)
                    .map(|_| workjournal::NewItem::new(body.clone()))
                    .collect();
                q.add_batch(items).await.expect("fill");
                left -= k;
            }
            let got = q
                .claim(1000, Duration::ZERO, ClaimFrom::All)
                .await
                .expect("claim");
            assert_eq!(got.len(), 1000);
            println!("ready");
            std::future::pending::<()>().await;
        });
    } else {
        let mut s = Sqlite::open(path);
        s.fill(items(), &body);
        assert_eq!(s.claim_only(1000), 1000);
        println!("ready");
        loop {
            std::thread::sleep(Duration::from_secs(60));
        }
    }
}

/// Run the child for `kind`, kill it with SIGKILL once ready; returns the
/// dir holding the killed file(s).
fn killed(kind: &str, dir: &Path, file: &str) -> PathBuf {
    let out = dir.join(kind);
    std::fs::create_dir_all(&out).expect("mkdir");
    let mut child = Command::new(std::env::current_exe().expect("current exe"))
        .env("WJ_REOPEN_CHILD", kind)
        .env("WJ_REOPEN_PATH", out.join(file))
        .stdout(Stdio::piped())
        .spawn()
        .expect("spawn filler");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("stdout"))
        .read_line(&mut line)
        .expect("read from filler");
    assert_eq!(line.trim(), "ready", "filler failed");
    child.kill().expect("SIGKILL the filler");
    child.wait().expect("reap the filler");
    out
}

/// Copy every file of `from` into a fresh `to`, and sync the copies.
///
/// The sync (not timed) puts the copy where a killed process leaves its
/// file: on disk up to its last sync, with only what it wrote since then
/// dirty in the page cache. Unsynced, the whole copy would be dirty, and
/// the first fsync of the file during the timed open (a checkpoint, a
/// repair's commit) would write all of it: the copy's cost, not the
/// reopen's.
fn copy_dir(from: &Path, to: &Path) {
    let _ = std::fs::remove_dir_all(to);
    std::fs::create_dir_all(to).expect("mkdir");
    for e in std::fs::read_dir(from).expect("read dir") {
        let e = e.expect("dir entry");
        let copy = to.join(e.file_name());
        std::fs::copy(e.path(), &copy).expect("copy");
        std::fs::File::open(&copy)
            .and_then(|f| f.sync_all())
            .expect("sync the copy");
    }
    std::fs::File::open(to)
        .and_then(|d| d.sync_all())
        .expect("sync the copy's directory");
}

fn benches() {
    if let Ok(kind) = std::env::var("WJ_REOPEN_CHILD") {
        let path = std::env::var_os("WJ_REOPEN_PATH").expect("WJ_REOPEN_PATH");
        child(&kind, Path::new(&path));
        return;
    }
    let mut c = common::criterion();
    let rt = common::runtime();
    let dir = common::temp_dir();
    let t = Instant::now();
    let emb = killed("embedded", dir.path(), "queue.redb");
    let size = std::fs::metadata(emb.join("queue.redb"))
        .expect("stat")
        .len();
    println!(
        "filled and killed {}-item embedded file ({} MB) in {:.1?}",
        items(),
        size >> 20,
        t.elapsed()
    );
    let t = Instant::now();
    let sql = killed("sqlite", dir.path(), "queue.sqlite");
    println!(
        "filled and killed {}-item SQLite file in {:.1?}",
        items(),
        t.elapsed()
    );
    let work = dir.path().join("work");

    let mut g = c.benchmark_group("reopen_1m_after_sigkill");
    // The default open verifies the whole file once a day (SPEC 6,
    // Verification): the killed process's file was verified when it was
    // created, so this open trusts it. `verify_on_open(true)` verifies at
    // every open, as the default did before.
    for (name, every_open) in [(EMBEDDED, false), (VERIFY_EVERY_OPEN, true)] {
        g.bench_function(name, |b| {
            b.iter_custom(|n| {
                let mut total = Duration::ZERO;
                for _ in 0..n {
                    copy_dir(&emb, &work);
                    total += rt.block_on(async {
                        let start = Instant::now();
                        let opts = if every_open {
                            EmbeddedOptions::default().verify_on_open(true)
                        } else {
                            EmbeddedOptions::default()
                        };
                        let q = EmbeddedQueue::open_with(
                            work.join("queue.redb"),
                            Config::default(),
                            opts,
                        )
                        .await
                        .expect("reopen");
                        let got = q
                            .claim(1, Duration::ZERO, ClaimFrom::All)
                            .await
                            .expect("claim");
                        assert_eq!(got.len(), 1);
                        let d = start.elapsed();
                        q.close().await.expect("close");
                        d
                    });
                }
                total
            })
        });
    }
    g.bench_function("sqlite-wal", |b| {
        b.iter_custom(|n| {
            let mut total = Duration::ZERO;
            for _ in 0..n {
                copy_dir(&sql, &work);
                let start = Instant::now();
                let mut s = Sqlite::open(&work.join("queue.sqlite"));
                assert_eq!(s.claim_only(1), 1);
                total += start.elapsed();
            }
            total
        })
    });
    g.finish();
}

criterion_main!(benches);
