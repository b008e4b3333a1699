//! SPEC 13, Exactly once, checked by killing real processes: a child
//! fires an embedded queue's schedules from three tasks at once and is
//! killed with SIGKILL at random moments, again and again; after every
//! kill the file's items of each schedule are exactly one per slot, from
//! its first slot to its last fired one, with no slot twice and none
//! missing, and the schedule's `fired` count is their number.
//!
//! The child is this test binary run again with
//! `WORKJOURNAL_SCHED_CRASH_CHILD` set to the queue file.
//! `WORKJOURNAL_SCHED_CRASH_CYCLES` sets the kill cycles (default 30),
//! `WORKJOURNAL_SCHED_CRASH_SEED` replays one run.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader, Write};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use workjournal::testing::Rng;
use workjournal::{
    CatchUp, Config, EmbeddedOptions, EmbeddedQueue, Schedule, ScheduleQueue, WorkQueue,
};

const CHILD_ENV: &str = "WORKJOURNAL_SCHED_CRASH_CHILD";
const CHILD_SEED_ENV: &str = "WORKJOURNAL_SCHED_CRASH_CHILD_SEED";
/// The slot length of the schedules, ms: short, so that a kill cycle
/// covers many slots.
const SLOT_MS: u64 = 5;
/// Schedules in the file, fired together.
const SCHEDULES: usize = 3;

fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// The child side: fire the schedules of the file from three tasks until
/// killed (or 60 s pass).
#[test]
fn schedule_child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    say("");
    rt.block_on(async move {
        // Checkpoints every operation, every 4, or at the defaults, so
        // kills land before, inside and after them.
        let options = match seed % 3 {
            0 => EmbeddedOptions::default(),
            k => EmbeddedOptions::default().checkpoint_ops([1, 4][k as usize - 1]),
        };
        let q = EmbeddedQueue::open_with(&path, Config::default(), options)
            .await
            .unwrap();
        if q.schedules().await.unwrap().is_empty() {
            for n in 0..SCHEDULES {
                // Every slot fires, however long the file sat between
                // children (at most 10 s of slots).
                let s = Schedule::every(format!("s{n}"), Duration::from_millis(SLOT_MS))
                    .unwrap()
                    .payload(format!("s{n}").into_bytes())
                    .catch_up(CatchUp::All { cap: 2000 });
                q.upsert_schedule(s).await.unwrap();
            }
        }
        say("opened");
        let mut tasks = Vec::new();
        for _ in 0..3 {
            let q = q.clone();
            tasks.push(tokio::spawn(async move {
                let started = std::time::Instant::now();
                while started.elapsed() < Duration::from_secs(60) {
                    say("F");
                    let fired = q.fire_schedules().await.unwrap();
                    say(&format!("f {}", fired.items));
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    std::process::exit(0);
}

fn spawn_child(path: &Path, seed: u64) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "schedule_child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap()
}

/// The slots (not_before) of every item in the file, by schedule payload
/// (each schedule's items carry its name), after promoting them all.
async fn slots_on_file(q: &EmbeddedQueue) -> BTreeMap<String, Vec<u64>> {
    q.promote_due().await.unwrap();
    let mut out: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for item in q.peek(1_000_000).await.unwrap() {
        out.entry(String::from_utf8(item.payload.clone()).unwrap())
            .or_default()
            .push(item.not_before_ms.unwrap());
    }
    for v in out.values_mut() {
        v.sort_unstable();
    }
    out
}

#[test]
fn sigkill_while_firing_makes_each_slot_exactly_once() {
    let cycles: u64 = std::env::var("WORKJOURNAL_SCHED_CRASH_CYCLES")
        .map(|s| s.parse().unwrap())
        .unwrap_or(30);
    let seed: u64 = match std::env::var("WORKJOURNAL_SCHED_CRASH_SEED") {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    };
    eprintln!("WORKJOURNAL_SCHED_CRASH_SEED={seed}");
    let mut rng = Rng(seed);
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("scheduled.redb");
    let mut kills_mid_fire = 0u64;
    let mut fires_acknowledged = 0u64;
    for cycle in 0..cycles {
        let mut child = spawn_child(&path, rng.next());
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while lines.next().unwrap().unwrap() != "opened" {}
        // Read the protocol on a thread, so the kill lands while the
        // child works, not while it waits on a full pipe.
        let reader = std::thread::spawn(move || {
            let (mut open, mut done) = (0i64, 0u64);
            for line in lines.map_while(Result::ok) {
                if line == "F" {
                    open += 1;
                } else if line.starts_with("f ") {
                    open -= 1;
                    done += 1;
                }
            }
            (open, done)
        });
        std::thread::sleep(Duration::from_millis(5 + rng.below(60)));
        child.kill().unwrap();
        child.wait().unwrap();
        let (open, done) = reader.join().unwrap();
        fires_acknowledged += done;
        if open > 0 {
            kills_mid_fire += 1;
        }
        rt.block_on(async {
            let q = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
            let slots = slots_on_file(&q).await;
            for s in q.schedules().await.unwrap() {
                let name = s.schedule.name().to_string();
                let got = slots.get(&name).cloned().unwrap_or_default();
                assert_eq!(
                    got.len() as u64,
                    s.fired,
                    "cycle {cycle}, {name}: items vs fired"
                );
                if let (Some(first), Some(last)) = (got.first(), s.last_fired_ms) {
                    let want: Vec<u64> = (0..)
                        .map(|k| first + k * SLOT_MS)
                        .take_while(|t| *t <= last)
                        .collect();
                    assert_eq!(got, want, "cycle {cycle}, {name}: a slot twice or missing");
                }
            }
            q.close().await.unwrap();
        });
    }
    let q = rt
        .block_on(EmbeddedQueue::open(&path, Config::default()))
        .unwrap();
    let fired: u64 = rt
        .block_on(q.schedules())
        .unwrap()
        .iter()
        .map(|s| s.fired)
        .sum();
    eprintln!(
        "{cycles} kills ({kills_mid_fire} with a firing in flight), {fires_acknowledged} firings acknowledged, {fired} slots fired, each once"
    );
    assert!(fired > 0, "the children fired nothing");
    rt.block_on(q.close()).unwrap();
}
