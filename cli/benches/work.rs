//! The worker path against `xargs -P`: `workjournal work --exec true
//! --until-empty` over 5 000 items of a queue file, at `--concurrency 2`
//! and `8`, timed from start to exit (the queue drained), next to `xargs -P
//! N -n1` running the same command 5 000 times from the same run: `true`
//! (the plain program) and `sh -c true` (what `--exec true` runs under its
//! supervisor, SPEC section 9), and the same `work` with `--prefetch 0`,
//! the lever's own baseline.
//!
//! Each figure is the median of `WJ_WORK_RUNS` rounds (default 3; the
//! four run in turn in each round) of
//! `WJ_WORK_ITEMS` items (default 5 000), in ms for the whole run; the rows
//! go to `WJ_BENCH_OUT/extra.tsv` for `benches/report.rs`, and the ratios
//! are printed here as well. Temp files go to `WJ_BENCH_DIR`, as for every
//! bench. `benches/run.sh` runs it with the others.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Instant;

use workjournal::{Config, EmbeddedQueue, NewItem, WorkQueue};

mod common;
use common::{record, temp_dir};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

/// A queue file at `path` holding `items` items, added in one `add_batch`.
fn fill(rt: &tokio::runtime::Runtime, path: &Path, items: usize) {
    rt.block_on(async {
        let q = EmbeddedQueue::open(path, Config::default())
            .await
            .expect("open queue file");
        let batch = (0..items)
            .map(|i| NewItem::new(format!("item {i}").into_bytes()))
            .collect();
        q.add_batch(batch).await.expect("add_batch");
        q.close().await.expect("close");
    });
}

/// Whether the queue file at `path` holds nothing: backlog, delayed and
/// pending all empty, and nothing dead-lettered.
fn drained(rt: &tokio::runtime::Runtime, path: &Path) -> bool {
    rt.block_on(async {
        let q = EmbeddedQueue::open(path, Config::default())
            .await
            .expect("reopen queue file");
        let s = q.stats().await.expect("stats");
        q.close().await.expect("close");
        s.backlog + s.delayed + s.pending + s.dead_letters == 0
    })
}

/// One timed `work --exec true --until-empty` over a fresh file of `items`,
/// with `extra` arguments (`--prefetch 0` for the lever's own baseline).
fn workjournal_ms(
    rt: &tokio::runtime::Runtime,
    items: usize,
    concurrency: usize,
    extra: &[&str],
) -> f64 {
    let dir = temp_dir();
    let db = dir.path().join("q.redb");
    fill(rt, &db, items);
    let start = Instant::now();
    let status = Command::new(env!("CARGO_BIN_EXE_workjournal"))
        .arg("--db")
        .arg(&db)
        .args(["work", "--exec", "true", "--until-empty", "--concurrency"])
        .arg(concurrency.to_string())
        .args(extra)
        .env_remove("RUST_LOG")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .expect("run workjournal work");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "workjournal work failed: {status}");
    assert!(drained(rt, &db), "work --until-empty left items behind");
    ms
}

/// One timed `xargs -P N -n1 CMD...` over `items` input lines.
fn xargs_ms(items: usize, concurrency: usize, cmd: &[&str]) -> f64 {
    let input: String = (0..items).map(|i| format!("item{i}\n")).collect();
    let start = Instant::now();
    let mut child = Command::new("xargs")
        .args(["-P", &concurrency.to_string(), "-n1"])
        .args(cmd)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start xargs");
    child
        .stdin
        .take()
        .expect("xargs stdin")
        .write_all(input.as_bytes())
        .expect("feed xargs");
    let status = child.wait().expect("wait for xargs");
    let ms = start.elapsed().as_secs_f64() * 1e3;
    assert!(status.success(), "xargs failed: {status}");
    ms
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

fn main() {
    // `cargo bench` passes `--bench`; a filter or `--list` runs nothing.
    if std::env::args().any(|a| a == "--list") {
        return;
    }
    let items = env_or("WJ_WORK_ITEMS", 5_000);
    let runs = env_or("WJ_WORK_RUNS", 3).max(1);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    for concurrency in [2usize, 8] {
        let workload = format!("work_exec_true_c{concurrency}");
        // The four are run in turn, once per round, rather than each `runs`
        // times in a row: a machine whose speed drifts within the minute (a
        // shared VM does) then weighs on all four alike.
        let (mut ours, mut no_prefetch, mut plain, mut sh) =
            (Vec::new(), Vec::new(), Vec::new(), Vec::new());
        for _ in 0..runs {
            ours.push(workjournal_ms(&rt, items, concurrency, &[]));
            // The same without prefetch (SPEC 9): what the lever gives, in
            // this run.
            no_prefetch.push(workjournal_ms(
                &rt,
                items,
                concurrency,
                &["--prefetch", "0"],
            ));
            plain.push(xargs_ms(items, concurrency, &["true"]));
            sh.push(xargs_ms(items, concurrency, &["sh", "-c", "true"]));
        }
        let (ours, no_prefetch, plain, sh) =
            (median(ours), median(no_prefetch), median(plain), median(sh));
        record(&workload, "workjournal-cli", ours);
        record(&workload, "workjournal-cli-prefetch-0", no_prefetch);
        record(&workload, "xargs-true", plain);
        record(&workload, "xargs-sh-c-true", sh);
        let rate = |ms: f64| items as f64 / (ms / 1e3);
        println!(
            "{workload}: workjournal {:.0} items/s ({ours:.0} ms); with --prefetch 0 {:.0} items/s ({:.2}x); xargs -P{concurrency} true {:.0} items/s ({:.2}x); xargs -P{concurrency} sh -c true {:.0} items/s ({:.2}x)",
            rate(ours),
            rate(no_prefetch),
            no_prefetch / ours,
            rate(plain),
            plain / ours,
            rate(sh),
            sh / ours,
        );
    }
}
