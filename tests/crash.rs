//! Crash safety of the embedded backend, checked by killing real processes
//! (SPEC section 4: after any crash every acknowledged add is still there,
//! every acknowledged ack stays acked, no item is in two places).
//!
//! The child is this test binary run again with `WORKJOURNAL_CRASH_CHILD`
//! set to a queue file: [`child_process_entry`] then runs a random workload
//! in a few concurrent tasks, and writes one line to stdout before each
//! operation starts and one after it returns, so the parent always knows
//! which operations were acknowledged and which were in flight when it
//! sent SIGKILL. `WORKJOURNAL_CRASH_CYCLES` sets how many kill cycles the
//! parent runs (default 50); `WORKJOURNAL_CRASH_SEED` replays one run.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};
use workjournal::testing::StateCounts;

mod workload;

use workjournal::{
    ClaimFrom, Config, EmbeddedOptions, EmbeddedQueue, ItemState, ListQuery, NewItem, Receipt,
    RetryOutcome, WorkQueue,
};
use workload::{Rng, seed_from_env};

/// Set in the child: the queue file to work on.
const CHILD_ENV: &str = "WORKJOURNAL_CRASH_CHILD";
/// Set in the child: the seed of its workload.
const CHILD_SEED_ENV: &str = "WORKJOURNAL_CRASH_CHILD_SEED";
/// How many concurrent tasks the child runs, so that kills also land in the
/// middle of group commits of several operations.
const CHILD_TASKS: u64 = 3;
/// A child that outlives this (its parent died) stops on its own.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

// ---- the child ------------------------------------------------------------

/// One protocol line to the parent, written whole and flushed before the
/// caller goes on. A parent that has gone (broken pipe) ends the child.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    let ok = writeln!(out, "{line}").and_then(|()| out.flush());
    if ok.is_err() {
        std::process::exit(0);
    }
}

fn ids(v: impl IntoIterator<Item = u64>) -> String {
    v.into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

const FLOWS: [&str; 3] = ["", "a", "b"];

/// One task of the child's workload: a random operation at a time, each
/// announced (`B`) before it starts and reported (`K` for `Ok`, `E` for an
/// expected error) after it returns.
async fn child_task(q: EmbeddedQueue, task: u64, mut rng: Rng) {
    let mut held: Vec<(Receipt, String)> = Vec::new();
    let started = Instant::now();
    while started.elapsed() < CHILD_LIFETIME {
        let now = q.now_ms().await.unwrap();
        let pick = rng.below(100);
        let flow = FLOWS[rng.below(3) as usize].to_string();
        let item = |rng: &mut Rng, flow: &str| {
            let mut it = NewItem::new(format!("payload {}", rng.next()).into_bytes()).flow(flow);
            if rng.below(10) == 0 {
                it = it.dedup_key(format!("k{}", rng.below(20)));
            }
            it
        };
        let result: workjournal::Result<String> = match pick {
            0..=17 => {
                let it = item(&mut rng, &flow);
                say(&format!("B {task} add 1"));
                q.add(it)
                    .await
                    .map(|a| format!("add {}", ids((!a.duplicate).then_some(a.id))))
            }
            18 => {
                // SPEC 3, Timers: a delayed item (if any) due now.
                let state = ItemState::Delayed;
                match q.list(ListQuery::new(state).limit(3)).await {
                    Ok(page) => {
                        let pick = page.items.get(rng.below(3) as usize).map(|l| l.item.id);
                        say(&format!("B {task} promote"));
                        match pick {
                            Some(id) => q.promote(id).await.map(|b| format!("promote {b}")),
                            None => Ok("promote none".into()),
                        }
                    }
                    Err(e) => Err(e),
                }
            }
            19 => {
                // SPEC 3, Flow limits: the atomic back-off of one flow.
                let f = FLOWS[1 + rng.below(2) as usize];
                let d = Duration::from_millis(rng.below(30));
                say(&format!("B {task} back_off"));
                q.back_off(f, d).await.map(|()| format!("back_off {f}"))
            }
            20..=27 => {
                let n = 1 + rng.below(4);
                let items: Vec<NewItem> = (0..n).map(|_| item(&mut rng, &flow)).collect();
                say(&format!("B {task} add {n}"));
                q.add_batch(items).await.map(|v| {
                    format!(
                        "add {}",
                        ids(v.iter().filter(|a| !a.duplicate).map(|a| a.id))
                    )
                })
            }
            28..=32 => {
                let it = item(&mut rng, &flow);
                say(&format!("B {task} add 1"));
                q.add_delayed(it, now + rng.below(40))
                    .await
                    .map(|a| format!("add {}", ids((!a.duplicate).then_some(a.id))))
            }
            33..=47 => {
                let n = 1 + rng.below(3) as usize;
                say(&format!("B {task} claim"));
                q.claim(n, Duration::ZERO, ClaimFrom::All).await.map(|v| {
                    let got = ids(v.iter().map(|c| c.item.id));
                    held.extend(v.into_iter().map(|c| (c.receipt, c.item.flow)));
                    format!("claim {got}")
                })
            }
            48..=52 => {
                let n = 1 + rng.below(3) as usize;
                let idle = Duration::from_millis(rng.below(60));
                say(&format!("B {task} reclaim"));
                q.reclaim(idle, n).await.map(|r| r.claimed).map(|v| {
                    let got = ids(v.iter().map(|c| c.item.id));
                    held.extend(v.into_iter().map(|c| (c.receipt, c.item.flow)));
                    format!("reclaim {got}")
                })
            }
            53..=54 => {
                say(&format!("B {task} step"));
                q.step("a").await.map(|c| {
                    let got = ids(c.iter().map(|c| c.item.id));
                    held.extend(c.into_iter().map(|c| (c.receipt, c.item.flow)));
                    format!("step {got}")
                })
            }
            55..=56 => {
                let f = FLOWS[1 + rng.below(2) as usize];
                say(&format!("B {task} pause"));
                q.pause(f).await.map(|()| format!("pause {f}"))
            }
            57..=59 => {
                let f = FLOWS[1 + rng.below(2) as usize];
                say(&format!("B {task} resume"));
                q.resume(f).await.map(|n| format!("resume {f} {n}"))
            }
            60 => {
                // SPEC 3, Removing: an item waiting, delayed or dead (one
                // another task claims meanwhile is refused, changing
                // nothing). Announced with its id: in flight at the kill,
                // it may or may not have happened, like an ack.
                let state = [
                    ItemState::Backlog,
                    ItemState::Delayed,
                    ItemState::DeadLetter,
                ][rng.below(3) as usize];
                match q.list(ListQuery::new(state).limit(3)).await {
                    Ok(page) => match page.items.get(rng.below(3) as usize).map(|l| l.item.id) {
                        Some(id) => {
                            say(&format!("B {task} remove {id}"));
                            match q.remove(id).await {
                                Ok(true) => Ok(format!("removed {id}")),
                                Ok(false) => Ok("remove false".into()),
                                Err(workjournal::Error::InvalidInput(_)) => {
                                    Ok("remove pending".into())
                                }
                                Err(e) => Err(e),
                            }
                        }
                        None => {
                            say(&format!("B {task} remove -"));
                            Ok("remove none".into())
                        }
                    },
                    Err(e) => Err(e),
                }
            }
            61 => {
                say(&format!("B {task} redrive"));
                match q.dead_letters(1).await {
                    Ok(d) => match d.first() {
                        Some(d) => q.redrive(d.item.id).await.map(|b| format!("redrive {b}")),
                        None => Ok("redrive none".into()),
                    },
                    Err(e) => Err(e),
                }
            }
            62..=63 => {
                say(&format!("B {task} mark_done"));
                q.mark_done(1 + rng.below(50), "s")
                    .await
                    .map(|()| "mark_done".into())
            }
            _ if held.is_empty() => {
                say(&format!("B {task} stats"));
                q.stats().await.map(|s| format!("stats {}", s.backlog))
            }
            64..=81 => {
                let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                say(&format!("B {task} ack {}", r.id));
                q.ack(r).await.map(|()| format!("ack {}", r.id))
            }
            82..=85 => {
                let n = (1 + rng.below(3) as usize).min(held.len());
                let rs: Vec<Receipt> = held.drain(..n).map(|(r, _)| r).collect();
                say(&format!("B {task} ack {}", ids(rs.iter().map(|r| r.id))));
                let all = rs.len() as u64;
                q.ack_batch(rs.clone()).await.map(|n| {
                    if n == all {
                        format!("ack {}", ids(rs.iter().map(|r| r.id)))
                    } else {
                        format!("ackpart {}", ids(rs.iter().map(|r| r.id)))
                    }
                })
            }
            86..=88 => {
                let rs: Vec<Receipt> = held.iter().map(|(r, _)| *r).collect();
                say(&format!("B {task} touch"));
                q.touch(rs).await.map(|()| "touch".into())
            }
            89..=93 => {
                let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                say(&format!("B {task} retry"));
                q.retry(r, now + rng.below(40)).await.map(|o| match o {
                    RetryOutcome::Delayed => format!("retry {} delayed", r.id),
                    RetryOutcome::DeadLettered => format!("retry {} dead", r.id),
                })
            }
            94..=96 => {
                let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                say(&format!("B {task} dead_letter"));
                q.dead_letter(r, "given up")
                    .await
                    .map(|()| format!("dead_letter {}", r.id))
            }
            _ => {
                let i = rng.below(held.len() as u64) as usize;
                let (r, f) = held.swap_remove(i);
                say(&format!("B {task} park"));
                if f.is_empty() {
                    Ok("park skipped".into())
                } else {
                    q.park(r).await.map(|()| format!("park {}", r.id))
                }
            }
        };
        match result {
            Ok(line) => say(&format!("K {task} {line}")),
            Err(e) if e.is_lease_lost() => say(&format!("E {task} {e}")),
            Err(e) => {
                say(&format!("FATAL {task} {e}"));
                std::process::exit(3);
            }
        }
    }
}

/// The child side: does nothing unless this binary was started by
/// [`run_kill_cycles`] with `WORKJOURNAL_CRASH_CHILD` set, in which case
/// it works on that queue file until it is killed.
#[test]
fn child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let seed: u64 = std::env::var(CHILD_SEED_ENV).unwrap().parse().unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    // End the line libtest started ("test child_process_entry ... ").
    say("");
    say("opening");
    rt.block_on(async move {
        // Checkpoints of the redo log every 1, 4 or 32 operations, or at
        // the defaults: kills land before, inside and after them, and on
        // a log written from its start again.
        let options = match seed % 4 {
            0 => EmbeddedOptions::default(),
            k => EmbeddedOptions::default().checkpoint_ops([1, 4, 32][k as usize - 1]),
        };
        // Every add's record written ahead of its run (SPEC 6, redo log), or only
        // those of batches of 32 items or more (the default).
        let options = if (seed / 4).is_multiple_of(2) {
            options.write_ahead_from(1)
        } else {
            options
        };
        let q = match EmbeddedQueue::open_with(&path, Config::default(), options).await {
            Ok(q) => q,
            Err(e) => {
                say(&format!("FATAL open {e}"));
                std::process::exit(3);
            }
        };
        say("opened");
        let mut tasks = Vec::new();
        for task in 0..CHILD_TASKS {
            let rng = Rng(seed ^ (task + 1).wrapping_mul(0x2545_F491_4F6C_DD1D));
            tasks.push(tokio::spawn(child_task(q.clone(), task, rng)));
        }
        for t in tasks {
            t.await.unwrap();
        }
    });
    std::process::exit(0);
}

// ---- the parent -----------------------------------------------------------

/// What the parent knows from the lines of all children so far.
#[derive(Debug, Default)]
struct Knowledge {
    /// Ids whose add returned `Ok` (or that a check found on disk).
    added: BTreeSet<u64>,
    /// Ids whose ack returned `Ok`: they must never come back.
    gone: BTreeSet<u64>,
    /// Ids that an unfinished or partly failed ack may have removed.
    unsure: BTreeSet<u64>,
    /// Acknowledged operations, over all cycles.
    acknowledged: u64,
    /// Kills that found at least one operation in flight.
    kills_mid_operation: u64,
}

/// The operation each task has in flight (announced, not yet reported).
#[derive(Debug, Default)]
struct InFlight {
    by_task: BTreeMap<u64, (String, Vec<u64>)>,
}

fn parse_ids(s: &str) -> Vec<u64> {
    s.split(',')
        .filter(|p| !p.is_empty())
        .map(|p| p.parse().unwrap())
        .collect()
}

impl Knowledge {
    /// Take in one line of the child's protocol.
    fn take(&mut self, line: &str, flight: &mut InFlight) {
        let mut words = line.split(' ');
        let tag = words.next().unwrap_or("");
        let words: Vec<&str> = words.collect();
        match tag {
            "B" => {
                let task: u64 = words[0].parse().unwrap();
                let kind = words[1].to_string();
                let args = match kind.as_str() {
                    "add" => vec![words[2].parse().unwrap()],
                    "ack" => parse_ids(words[2]),
                    "remove" => parse_ids(words[2].trim_start_matches('-')),
                    _ => Vec::new(),
                };
                flight.by_task.insert(task, (kind, args));
            }
            "K" | "E" => {
                let task: u64 = words[0].parse().unwrap();
                flight.by_task.remove(&task);
                self.acknowledged += 1;
                if tag == "E" {
                    return;
                }
                let arg = words.get(2).copied().unwrap_or("");
                match words[1] {
                    "add" => self.added.extend(parse_ids(arg)),
                    // A removed item is gone for good, as an acked one.
                    "ack" | "removed" => self.gone.extend(parse_ids(arg)),
                    "ackpart" => self.unsure.extend(parse_ids(arg)),
                    _ => {}
                }
            }
            _ => {}
        }
    }
}

fn spawn_child(path: &Path, seed: u64, stderr: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env(CHILD_SEED_ENV, seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

/// When the parent kills the child in one cycle.
#[derive(Debug, Clone, Copy)]
enum KillAt {
    /// Right after spawning it: before it has written anything.
    Spawn,
    /// This long after it said it opened the file.
    AfterOpen(Duration),
    /// After this many acknowledged operations (plus up to 1 ms).
    AfterOps(u64, Duration),
}

/// Check the reopened file against what the children acknowledged.
async fn check(path: &Path, know: &mut Knowledge, flight: &InFlight, cycle: u64) {
    let q = EmbeddedQueue::open(path, Config::default())
        .await
        .unwrap_or_else(|e| panic!("cycle {cycle}: reopen after SIGKILL failed: {e}"));
    let locs = q.locations().await.unwrap();
    let stats = q.stats().await.unwrap();
    let mut in_flight_adds = 0;
    let mut in_flight_acks = BTreeSet::new();
    for (kind, args) in flight.by_task.values() {
        match kind.as_str() {
            "add" => in_flight_adds += args[0],
            // An unfinished remove, like an unfinished ack, may or may
            // not have taken its item.
            "ack" | "remove" => in_flight_acks.extend(args.iter().copied()),
            _ => {}
        }
    }
    for (id, places) in &locs {
        assert_eq!(
            places.len(),
            1,
            "cycle {cycle}: item {id} is in {places:?}, not in exactly one state"
        );
        assert!(
            !know.gone.contains(id),
            "cycle {cycle}: item {id} was acked (Ok) but is back, in {places:?}"
        );
    }
    for id in know.added.difference(&know.gone) {
        if know.unsure.contains(id) || in_flight_acks.contains(id) {
            continue;
        }
        assert!(
            locs.contains_key(id),
            "cycle {cycle}: item {id} was added (Ok) and never acked, but is gone"
        );
    }
    let unknown: Vec<u64> = locs
        .keys()
        .filter(|id| !know.added.contains(id))
        .copied()
        .collect();
    assert!(
        unknown.len() as u64 <= in_flight_adds,
        "cycle {cycle}: items {unknown:?} appeared, but only {in_flight_adds} adds were in flight"
    );
    assert_eq!(
        StateCounts::of_stats(&stats),
        StateCounts::recount(locs.values().map(|places| &places[0])),
        "cycle {cycle}: stats do not match a recount"
    );
    // An add that was in flight and is on disk now is as durable as any.
    know.added.extend(unknown);
    // An ack that was in flight and did take effect is final too.
    for id in in_flight_acks {
        if locs.contains_key(&id) {
            continue;
        }
        know.gone.insert(id);
    }
    q.close().await.unwrap();
}

/// Run `cycles` kill cycles on one file; returns what the parent learnt.
fn run_kill_cycles(cycles: u64, seed: u64) -> Knowledge {
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("queue.redb");
    let stderr = dir.path().join("child-stderr.txt");
    let mut rng = Rng(seed);
    let mut know = Knowledge::default();
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    for cycle in 0..cycles {
        let kill_at = match cycle {
            0 => KillAt::Spawn,
            1 => KillAt::AfterOpen(Duration::ZERO),
            _ => match rng.below(3) {
                0 => KillAt::AfterOpen(Duration::from_micros(rng.below(30_000))),
                _ => KillAt::AfterOps(1 + rng.below(150), Duration::from_micros(rng.below(1000))),
            },
        };
        let mut child = spawn_child(&path, rng.next(), &stderr);
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = mpsc::channel::<String>();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        let mut flight = InFlight::default();
        let mut fatal = None;
        let mut take = |line: String, know: &mut Knowledge, flight: &mut InFlight| {
            if line.starts_with("FATAL") {
                fatal = Some(line.clone());
            }
            know.take(&line, flight);
            line
        };
        let limit = Instant::now() + Duration::from_secs(30);
        let next = |rx: &mpsc::Receiver<String>| {
            rx.recv_timeout(limit.saturating_duration_since(Instant::now()))
                .unwrap_or_else(|_| {
                    panic!(
                        "cycle {cycle}: the child went quiet; its stderr:\n{}",
                        std::fs::read_to_string(&stderr).unwrap_or_default()
                    )
                })
        };
        match kill_at {
            KillAt::Spawn => {}
            KillAt::AfterOpen(after) => {
                while take(next(&rx), &mut know, &mut flight) != "opened" {}
                std::thread::sleep(after);
            }
            KillAt::AfterOps(ops, after) => {
                let start = know.acknowledged;
                while know.acknowledged - start < ops {
                    take(next(&rx), &mut know, &mut flight);
                }
                std::thread::sleep(after);
            }
        }
        child.kill().unwrap();
        child.wait().unwrap();
        // Every line the child wrote before it died is still in the pipe.
        for line in rx.iter() {
            take(line, &mut know, &mut flight);
        }
        reader.join().unwrap();
        if let Some(line) = fatal {
            panic!("cycle {cycle}: the child failed: {line}");
        }
        if !flight.by_task.is_empty() {
            know.kills_mid_operation += 1;
        }
        rt.block_on(check(&path, &mut know, &flight, cycle));
        if (cycle + 1) % 100 == 0 {
            eprintln!("{} kill cycles checked", cycle + 1);
        }
    }
    know
}

#[test]
fn sigkill_loses_no_acknowledged_add_or_ack() {
    let cycles: u64 = std::env::var("WORKJOURNAL_CRASH_CYCLES")
        .map(|s| s.parse().unwrap())
        .unwrap_or(50);
    let seed = seed_from_env("WORKJOURNAL_CRASH_SEED");
    eprintln!("kill cycles: {cycles}, WORKJOURNAL_CRASH_SEED={seed}");
    let started = Instant::now();
    let know = run_kill_cycles(cycles, seed);
    let ops = know.acknowledged;
    eprintln!(
        "{cycles} kill cycles ({} with operations in flight), {ops} acknowledged operations, \
         {} ids added, {} acked, {:.1} s",
        know.kills_mid_operation,
        know.added.len(),
        know.gone.len(),
        started.elapsed().as_secs_f64()
    );
    assert!(
        ops > cycles,
        "the children acknowledged only {ops} operations"
    );
}

// Regression: redb initialises a new file in place and writes its magic
// number last, so a process killed while it first opened a queue left a
// file that every later open refused as corrupt; the file is now built
// under a temporary name and linked into place.
#[test]
fn sigkill_while_creating_the_queue_file_leaves_it_openable() {
    let tries: u64 = 40;
    let mut rng = Rng(seed_from_env("WORKJOURNAL_CRASH_SEED"));
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let mut failures = Vec::new();
    for t in 0..tries {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("queue.redb");
        let stderr = dir.path().join("child-stderr.txt");
        let mut child = spawn_child(&path, rng.next(), &stderr);
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        while lines.next().unwrap().unwrap() != "opening" {}
        std::thread::sleep(Duration::from_micros(rng.below(4000)));
        child.kill().unwrap();
        child.wait().unwrap();
        let len = std::fs::metadata(&path).map(|m| m.len()).ok();
        if let Err(e) = rt.block_on(EmbeddedQueue::open(&path, Config::default())) {
            failures.push(format!("try {t}: file of {len:?} bytes: {e}"));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[tokio::test]
async fn locations_names_every_item_once() {
    let dir = tempfile::tempdir().unwrap();
    let q = EmbeddedQueue::open(dir.path().join("q.redb"), Config::default())
        .await
        .unwrap();
    let a = q.add(NewItem::new(b"a".to_vec())).await.unwrap().id;
    let b = q
        .add(NewItem::new(b"b".to_vec()).flow("f"))
        .await
        .unwrap()
        .id;
    let c = q
        .add_delayed(NewItem::new(b"c".to_vec()), u64::MAX / 2)
        .await
        .unwrap()
        .id;
    let d = q.add(NewItem::new(b"d".to_vec())).await.unwrap().id;
    let claimed = q.claim(2, Duration::ZERO, ClaimFrom::All).await.unwrap();
    q.dead_letter(claimed[1].receipt, "test").await.unwrap();
    let e = q.add(NewItem::new(b"e".to_vec())).await.unwrap().id;
    let got = q.locations().await.unwrap();
    let want = [
        (a, vec![ItemState::Pending]),
        (b, vec![ItemState::DeadLetter]),
        (c, vec![ItemState::Delayed]),
        (d, vec![ItemState::Backlog]),
        (e, vec![ItemState::Backlog]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    q.ack(claimed[0].receipt).await.unwrap();
    assert!(!q.locations().await.unwrap().contains_key(&a));
}

/// Redis faults (SPEC section 4): a `redis-server` with AOF `appendfsync
/// always` killed with SIGKILL under a concurrent workload, and connections
/// cut in the middle of a script call.
///
/// On one server only (issue 17 lists why): the kill cycles restart the
/// one server under a workload and recount every key with `KEYS` and
/// `XPENDING` on a plain connection; on a cluster the same promise (no
/// acknowledged add lost with `appendfsync always`) is
/// tests/redis_cluster.rs `killing_the_primary_mid_workload_loses_no_acknowledged_add`.
/// The connection cuts go through a TCP proxy in front of the server, and
/// a cluster client leaves any proxy at once for the node addresses that
/// `CLUSTER SLOTS` names.
#[cfg(feature = "redis")]
mod redis_faults {
    use std::collections::{BTreeMap, BTreeSet};
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use std::sync::{Arc, Mutex};
    use std::time::{Duration, Instant};

    use redis::AsyncCommands;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};
    use workjournal::ItemState;
    use workjournal::testing::StateCounts;
    use workjournal::testing::{RedisServer, RedisServerOptions, raw_connection};
    use workjournal::{
        ClaimFrom, Clock, Config, Error, ManualClock, NewItem, Receipt, RedisOptions, RedisQueue,
        WorkQueue,
    };

    use super::workload::{Op, agree_with_twin, apply, draw};
    use super::{Rng, seed_from_env};

    fn options() -> RedisOptions {
        RedisOptions::default()
            .connect_timeout(Duration::from_millis(300))
            .response_timeout(Duration::from_millis(1000))
    }

    /// Every key of namespace `ns`, prefix removed.
    async fn keys(conn: &mut redis::aio::MultiplexedConnection, ns: &str) -> Vec<String> {
        let prefix = format!("{{{ns}}}:");
        let mut out = Vec::new();
        let mut cursor = 0u64;
        loop {
            let (next, batch): (u64, Vec<String>) = redis::cmd("SCAN")
                .arg(cursor)
                .arg("MATCH")
                .arg(format!("{prefix}*"))
                .arg("COUNT")
                .arg(1000)
                .query_async(conn)
                .await
                .unwrap();
            out.extend(batch.into_iter().map(|k| k[prefix.len()..].to_string()));
            if next == 0 {
                break;
            }
            cursor = next;
        }
        out.sort();
        out
    }

    /// Ready-lane members as (member, item id), in rank order.
    async fn ranked(conn: &mut redis::aio::MultiplexedConnection, key: &str) -> Vec<(String, u64)> {
        let members: Vec<String> = conn.zrange(key, 0, -1).await.unwrap();
        members
            .into_iter()
            .map(|m| {
                let id = m
                    .split_once(':')
                    .and_then(|(_, id)| id.parse().ok())
                    .unwrap();
                (m, id)
            })
            .collect()
    }

    /// Where every item of `ns` is, recounted from the raw keys, plus every
    /// inconsistency found (an item whose `st` disagrees with its index, a
    /// delivered stream entry whose item is not pending).
    async fn recount(url: &str, ns: &str) -> (BTreeMap<u64, Vec<ItemState>>, Vec<String>) {
        let mut conn = raw_connection(url).await.unwrap();
        let p = format!("{{{ns}}}:");
        let mut locs: BTreeMap<u64, Vec<ItemState>> = BTreeMap::new();
        let mut bad = Vec::new();
        for (lane, loc) in [("ready", ItemState::Backlog), ("ready:due", ItemState::Due)] {
            for (_, id) in ranked(&mut conn, &format!("{p}{lane}")).await {
                locs.entry(id).or_default().push(loc);
            }
        }
        for (key, loc) in [
            ("delayed", ItemState::Delayed),
            ("pending", ItemState::Pending),
        ] {
            let members: Vec<String> = conn.zrange(format!("{p}{key}"), 0, -1).await.unwrap();
            for m in members {
                locs.entry(m.parse().unwrap()).or_default().push(loc);
            }
        }
        for key in keys(&mut conn, ns).await {
            if key.starts_with("parked:") {
                let ids: Vec<u64> = conn.lrange(format!("{p}{key}"), 0, -1).await.unwrap();
                for id in ids {
                    locs.entry(id).or_default().push(ItemState::Parked);
                }
            }
        }
        let dead: Vec<u64> = conn.lrange(format!("{p}dead"), 0, -1).await.unwrap();
        for id in dead {
            locs.entry(id).or_default().push(ItemState::DeadLetter);
        }
        let mut states = BTreeMap::new();
        for key in keys(&mut conn, ns).await {
            if let Some(id) = key.strip_prefix("item:") {
                let st: Option<String> = conn.hget(format!("{p}{key}"), "st").await.unwrap();
                states.insert(id.parse::<u64>().unwrap(), st.unwrap_or_default());
            }
        }
        for (id, places) in &locs {
            let want = match places.as_slice() {
                [ItemState::Backlog] => "backlog",
                [ItemState::Due] => "due",
                [ItemState::Delayed] => "delayed",
                [ItemState::Pending] => "pending",
                [ItemState::Parked] => "parked",
                [ItemState::DeadLetter] => "dead",
                _ => continue,
            };
            match states.get(id) {
                Some(st) if st == want => {}
                other => bad.push(format!(
                    "item {id} is in {places:?} but its st is {other:?}"
                )),
            }
        }
        for id in states.keys() {
            locs.entry(*id).or_default();
        }
        (locs, bad)
    }

    /// What the workload tasks learnt, shared between them.
    #[derive(Debug, Default)]
    struct Knowledge {
        added: BTreeSet<u64>,
        gone: BTreeSet<u64>,
        unsure: BTreeSet<u64>,
        /// Items of adds that failed with a backend error: each may or may
        /// not be there.
        maybe_added: u64,
        acknowledged: u64,
    }

    async fn worker(
        q: RedisQueue,
        know: Arc<Mutex<Knowledge>>,
        stop: Arc<AtomicBool>,
        mut rng: Rng,
        flows: [&'static str; 3],
    ) {
        let mut held: Vec<(Receipt, String)> = Vec::new();
        while !stop.load(Ordering::Relaxed) {
            let flow = flows[rng.below(3) as usize];
            let pick = rng.below(100);
            let r: Result<(), Error> = match pick {
                0..=29 => {
                    let n = 1 + rng.below(3);
                    let items = (0..n)
                        .map(|i| NewItem::new(format!("p{i}").into_bytes()).flow(flow))
                        .collect();
                    match q.add_batch(items).await {
                        Ok(v) => {
                            let mut k = know.lock().unwrap();
                            k.added.extend(v.iter().map(|a| a.id));
                            k.acknowledged += 1;
                            Ok(())
                        }
                        Err(e) => {
                            know.lock().unwrap().maybe_added += n;
                            Err(e)
                        }
                    }
                }
                30..=49 => q
                    .claim(1 + rng.below(3) as usize, Duration::ZERO, ClaimFrom::All)
                    .await
                    .map(|v| held.extend(v.into_iter().map(|c| (c.receipt, c.item.flow)))),
                50..=54 => q
                    .reclaim(Duration::from_millis(rng.below(200)), 2)
                    .await
                    .map(|r| r.claimed)
                    .map(|v| held.extend(v.into_iter().map(|c| (c.receipt, c.item.flow)))),
                55..=56 => q.pause("a").await,
                57..=58 => q.resume("a").await.map(|_| ()),
                59..=60 => q
                    .step("a")
                    .await
                    .map(|c| held.extend(c.into_iter().map(|c| (c.receipt, c.item.flow)))),
                61..=62 => match q.dead_letters(1).await {
                    Ok(d) => match d.first() {
                        Some(d) => q.redrive(d.item.id).await.map(|_| ()),
                        None => Ok(()),
                    },
                    Err(e) => Err(e),
                },
                _ if held.is_empty() => q.promote_due().await.map(|_| ()),
                63..=84 => {
                    let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                    match q.ack(r).await {
                        Ok(()) => {
                            let mut k = know.lock().unwrap();
                            k.gone.insert(r.id);
                            k.acknowledged += 1;
                            Ok(())
                        }
                        Err(e) => {
                            if !e.is_lease_lost() {
                                know.lock().unwrap().unsure.insert(r.id);
                            }
                            Err(e)
                        }
                    }
                }
                85..=89 => {
                    let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                    q.retry(r, q.now_ms().await.unwrap_or(0) + rng.below(50))
                        .await
                        .map(|_| ())
                }
                90..=93 => {
                    let (r, _) = held.swap_remove(rng.below(held.len() as u64) as usize);
                    q.dead_letter(r, "given up").await
                }
                94..=96 => q.touch(held.iter().map(|(r, _)| *r).collect()).await,
                _ => {
                    let (r, f) = held.swap_remove(rng.below(held.len() as u64) as usize);
                    if f.is_empty() {
                        Ok(())
                    } else {
                        q.park(r).await
                    }
                }
            };
            if let Err(e) = r {
                if !e.is_lease_lost() && !matches!(e, Error::Backend { .. }) {
                    panic!("unexpected error from the workload: {e:?}");
                }
                if matches!(e, Error::Backend { .. }) {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        }
    }

    /// The raw keys that name item `id`, for a failure message.
    async fn evidence(url: &str, ns: &str, id: u64) -> String {
        let mut conn = raw_connection(url).await.unwrap();
        let p = format!("{{{ns}}}:");
        let item: BTreeMap<String, Vec<u8>> = conn.hgetall(format!("{p}item:{id}")).await.unwrap();
        let item: BTreeMap<String, String> = item
            .into_iter()
            .map(|(k, v)| (k, String::from_utf8_lossy(&v).into_owned()))
            .collect();
        let mut out = format!("item:{id} = {item:?}");
        for lane in ["ready", "ready:due"] {
            let entries: Vec<(String, u64)> = ranked(&mut conn, &format!("{p}{lane}"))
                .await
                .into_iter()
                .filter(|e| e.1 == id)
                .collect();
            out.push_str(&format!("\n{lane} members naming it: {entries:?}"));
        }
        out
    }

    /// Check the namespace after a restart against what was acknowledged.
    async fn check(url: &str, ns: &str, know: &Knowledge, cycle: u64) -> BTreeSet<u64> {
        let (locs, bad) = recount(url, ns).await;
        assert!(bad.is_empty(), "cycle {cycle}: {bad:#?}");
        for (id, places) in &locs {
            if places.len() != 1 {
                panic!(
                    "cycle {cycle}: item {id} is in {places:?}, not in exactly one state\n{}",
                    evidence(url, ns, *id).await
                );
            }
            assert!(
                !know.gone.contains(id),
                "cycle {cycle}: item {id} was acked (Ok) but is back, in {places:?}"
            );
        }
        for id in know.added.difference(&know.gone) {
            if !know.unsure.contains(id) {
                assert!(
                    locs.contains_key(id),
                    "cycle {cycle}: item {id} was added (Ok) and never acked, but is gone"
                );
            }
        }
        let unknown: BTreeSet<u64> = locs
            .keys()
            .filter(|id| !know.added.contains(id))
            .copied()
            .collect();
        assert!(
            unknown.len() as u64 <= know.maybe_added,
            "cycle {cycle}: {} items appeared that no add acknowledged, but only {} were in doubt",
            unknown.len(),
            know.maybe_added
        );
        let patient = RedisOptions::default().response_timeout(Duration::from_secs(30));
        let q = RedisQueue::connect(url, ns, Config::default(), patient)
            .await
            .unwrap();
        let stats = q.stats().await.unwrap();
        assert_eq!(
            StateCounts::of_stats(&stats),
            StateCounts::recount(locs.values().map(|places| &places[0])),
            "cycle {cycle}: stats do not match a recount"
        );
        q.close().await.unwrap();
        unknown
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn sigkill_of_redis_with_aof_always_loses_no_acknowledged_add_or_ack() {
        let cycles: u64 = std::env::var("WORKJOURNAL_REDIS_KILL_CYCLES")
            .map(|s| s.parse().unwrap())
            .unwrap_or(8);
        let seed = seed_from_env("WORKJOURNAL_CRASH_SEED");
        eprintln!("redis kill cycles: {cycles}, WORKJOURNAL_CRASH_SEED={seed}");
        let mut rng = Rng(seed);
        let mut server = RedisServer::start_with(RedisServerOptions {
            aof_always: true,
            ..Default::default()
        })
        .expect("start redis-server (apt-get install redis-server)");
        let url = server.url();
        let ns = "crash";
        let know = Arc::new(Mutex::new(Knowledge::default()));
        let started = Instant::now();
        for cycle in 0..cycles {
            let stop = Arc::new(AtomicBool::new(false));
            let mut tasks = Vec::new();
            for t in 0..3u64 {
                let q = RedisQueue::connect(&url, ns, Config::default(), options())
                    .await
                    .unwrap();
                tasks.push(tokio::spawn(worker(
                    q,
                    know.clone(),
                    stop.clone(),
                    Rng(rng.next() ^ t),
                    ["", "a", "b"],
                )));
            }
            tokio::time::sleep(Duration::from_millis(50 + rng.below(400))).await;
            tokio::task::block_in_place(|| server.kill());
            stop.store(true, Ordering::Relaxed);
            for t in tasks {
                t.await.unwrap();
            }
            tokio::task::block_in_place(|| server.restart()).unwrap();
            let snapshot = {
                let k = know.lock().unwrap();
                Knowledge {
                    added: k.added.clone(),
                    gone: k.gone.clone(),
                    unsure: k.unsure.clone(),
                    maybe_added: k.maybe_added,
                    acknowledged: k.acknowledged,
                }
            };
            let unknown = check(&url, ns, &snapshot, cycle).await;
            // Adds in doubt that did happen are as durable as any now.
            let mut k = know.lock().unwrap();
            k.maybe_added -= unknown.len() as u64;
            k.added.extend(unknown);
        }
        let k = know.lock().unwrap();
        eprintln!(
            "{cycles} redis kill cycles, {} acknowledged operations, {} ids added, {} acked, {:.1} s",
            k.acknowledged,
            k.added.len(),
            k.gone.len(),
            started.elapsed().as_secs_f64()
        );
        assert!(k.acknowledged > cycles);
    }

    /// Redis 7.0 cuts a short write inside a `MULTI` block at the last whole
    /// command, not before the `MULTI`, so the next script's `EXEC`
    /// replays half of the cut one after a second restart (seen in CI: an
    /// item journaled with no lane). The harness's restart mends the file
    /// as SPEC 6 tells operators to; this is that case, written by hand:
    /// one script's two writes cut mid-command, a restart, one more
    /// script, a kill and a restart, and the cut script stays undone.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_script_cut_short_in_the_aof_stays_undone_across_restarts() {
        let mut server = RedisServer::start_with(RedisServerOptions {
            aof_always: true,
            ..Default::default()
        })
        .expect("start redis-server (apt-get install redis-server)");
        let url = server.url();
        let two_writes = |a: &str, b: &str| {
            let mut c = redis::cmd("EVAL");
            c.arg("redis.call('SET', KEYS[1], '1'); redis.call('SET', KEYS[2], '1'); return 1")
                .arg(2)
                .arg(a)
                .arg(b);
            c
        };
        let mut conn = raw_connection(&url).await.unwrap();
        let _: () = conn.set("before", "1").await.unwrap();
        let _: i64 = two_writes("cut-a", "cut-b")
            .query_async(&mut conn)
            .await
            .unwrap();
        drop(conn);
        tokio::task::block_in_place(|| server.kill());
        // Cut five bytes into the script's last SET: a short write.
        let dir = server.dir().join("appendonlydir");
        let incr = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .find(|p| p.to_string_lossy().ends_with(".incr.aof"))
            .unwrap();
        let bytes = std::fs::read(&incr).unwrap();
        let exec = b"*1\r\n$4\r\nEXEC\r\n";
        let at = bytes
            .windows(exec.len())
            .rposition(|w| w == exec)
            .expect("the script was written inside MULTI/EXEC");
        std::fs::OpenOptions::new()
            .write(true)
            .open(&incr)
            .unwrap()
            .set_len(at as u64 - 5)
            .unwrap();
        tokio::task::block_in_place(|| server.restart()).unwrap();
        let mut conn = raw_connection(&url).await.unwrap();
        let _: i64 = two_writes("next-a", "next-b")
            .query_async(&mut conn)
            .await
            .unwrap();
        drop(conn);
        tokio::task::block_in_place(|| server.kill());
        tokio::task::block_in_place(|| server.restart()).unwrap();
        let mut conn = raw_connection(&url).await.unwrap();
        let got: Vec<Option<String>> = redis::cmd("MGET")
            .arg(&["before", "cut-a", "cut-b", "next-a", "next-b"])
            .query_async(&mut conn)
            .await
            .unwrap();
        assert_eq!(
            got,
            vec![
                Some("1".into()),
                None,
                None,
                Some("1".into()),
                Some("1".into())
            ],
            "before, the cut script's two keys, the next script's two keys"
        );
    }

    /// A TCP proxy in front of a Redis server that cuts a connection when
    /// an armed byte budget (both directions together) runs out: the bytes
    /// up to the budget go through, the rest never arrives, both sockets
    /// close.
    struct Proxy {
        port: u16,
        budget: Arc<Mutex<Option<u64>>>,
        cuts: Arc<AtomicU64>,
    }

    impl Proxy {
        async fn start(target: u16) -> Proxy {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let port = listener.local_addr().unwrap().port();
            let budget = Arc::new(Mutex::new(None));
            let cuts = Arc::new(AtomicU64::new(0));
            let (b, c) = (budget.clone(), cuts.clone());
            tokio::spawn(async move {
                while let Ok((client, _)) = listener.accept().await {
                    let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                        continue;
                    };
                    tokio::spawn(pump(client, server, b.clone(), c.clone()));
                }
            });
            Proxy { port, budget, cuts }
        }

        fn url(&self) -> String {
            format!("redis://127.0.0.1:{}/", self.port)
        }

        fn arm(&self, bytes: u64) {
            *self.budget.lock().unwrap() = Some(bytes);
        }

        /// Disarm; returns how many cuts happened so far.
        fn disarm(&self) -> u64 {
            *self.budget.lock().unwrap() = None;
            self.cuts.load(Ordering::SeqCst)
        }
    }

    /// How many of `n` bytes may pass; `None` once the budget is spent
    /// (the connection is then cut after the bytes that may pass).
    fn spend(budget: &Mutex<Option<u64>>, n: usize) -> Option<usize> {
        let mut b = budget.lock().unwrap();
        match *b {
            None => Some(n),
            Some(left) if (n as u64) <= left => {
                *b = Some(left - n as u64);
                Some(n)
            }
            Some(_) => None,
        }
    }

    async fn pump(
        client: TcpStream,
        server: TcpStream,
        budget: Arc<Mutex<Option<u64>>>,
        cuts: Arc<AtomicU64>,
    ) {
        let (mut cr, mut cw) = client.into_split();
        let (mut sr, mut sw) = server.into_split();
        let mut a = vec![0u8; 16 * 1024];
        let mut b = vec![0u8; 16 * 1024];
        loop {
            let (n, to_server) = tokio::select! {
                r = cr.read(&mut a) => (r.unwrap_or(0), true),
                r = sr.read(&mut b) => (r.unwrap_or(0), false),
            };
            if n == 0 {
                return;
            }
            let (buf, out) = if to_server {
                (&a, &mut sw as &mut _)
            } else {
                (&b, &mut cw as &mut _)
            };
            let out: &mut (dyn tokio::io::AsyncWrite + Unpin + Send) = out;
            match spend(&budget, n) {
                Some(n) => {
                    if out.write_all(&buf[..n]).await.is_err() {
                        return;
                    }
                }
                None => {
                    let left = budget.lock().unwrap().take().unwrap_or(0) as usize;
                    let _ = out.write_all(&buf[..left.min(n)]).await;
                    let _ = out.flush().await;
                    cuts.fetch_add(1, Ordering::SeqCst);
                    return;
                }
            }
        }
    }

    /// The namespace's whole state as text, with what legitimately differs
    /// between two namespaces fed the same calls left out: consumer names,
    /// the wake-up stream.
    async fn state(url: &str, ns: &str) -> BTreeMap<String, String> {
        let mut conn = raw_connection(url).await.unwrap();
        let p = format!("{{{ns}}}:");
        let mut out = BTreeMap::new();
        for key in keys(&mut conn, ns).await {
            if key == "wake" || key == "consumers" {
                continue;
            }
            let full = format!("{p}{key}");
            let kind: String = redis::cmd("TYPE")
                .arg(&full)
                .query_async(&mut conn)
                .await
                .unwrap();
            let text = match kind.as_str() {
                "string" => conn.get::<_, String>(&full).await.unwrap(),
                "hash" => {
                    let mut m: BTreeMap<String, Vec<u8>> = conn.hgetall(&full).await.unwrap();
                    if key.starts_with("item:") {
                        m.remove("sid");
                        m.remove("owner");
                    }
                    format!("{m:?}")
                }
                "list" => format!(
                    "{:?}",
                    conn.lrange::<_, Vec<String>>(&full, 0, -1).await.unwrap()
                ),
                "set" => {
                    let m: BTreeSet<String> = conn.smembers(&full).await.unwrap();
                    format!("{m:?}")
                }
                "zset" => format!(
                    "{:?}",
                    conn.zrange_withscores::<_, Vec<(String, f64)>>(&full, 0, -1)
                        .await
                        .unwrap()
                ),
                "stream" => {
                    let len: u64 = conn.xlen(&full).await.unwrap();
                    format!("<stream of {len}>")
                }
                other => format!("<{other}>"),
            };
            out.insert(key, text);
        }
        out
    }

    fn mk_config(clock: &ManualClock) -> Config {
        Config::default()
            .clock(clock.clone())
            .max_deliveries(3)
            .dead_letter_cap(6)
            .max_backlog(Some(40))
            .done_ttl(Duration::from_millis(200))
            .dedup_window(Duration::from_millis(150))
    }

    /// Seeds that once failed [`cut_connections`], replayed by
    /// `connection_cut_pinned_seeds_apply_the_change_whole_or_not_at_all`.
    /// The cut points follow from the seed alone (byte counts of requests
    /// and replies), so a seed replays the same cuts.
    const PINNED_CUT_SEEDS: [u64; 3] = [
        // The first call (an add, then an add_delayed) was cut before its
        // script ran; the recovery probe (stats, a script) then wrote
        // `{cut}:clock` while the twin, which never got the probe, had no
        // clock yet.
        1796127637973099684,
        1796128601790296660,
        // A retry (and a park) of a lost receipt: its script answered lost,
        // and the cut fell in the second call, the look for a cancel mark;
        // the failed look was taken for LeaseLost instead of the backend
        // error a cut call answers.
        1796677093726688744,
    ];

    // A queue talks to Redis through a proxy that cuts its connection after
    // a random number of bytes, in the request or in the reply; a twin
    // namespace on a direct connection gets the same calls. After each cut
    // the queue's namespace must equal the twin's before the call (the
    // script never ran) or after it (it ran whole), and the queue must
    // carry on over a new connection.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_cut_mid_script_applies_the_change_whole_or_not_at_all() {
        let cuts_wanted: u64 = std::env::var("WORKJOURNAL_REDIS_CUTS")
            .map(|s| s.parse().unwrap())
            .unwrap_or(60);
        let seed = seed_from_env("WORKJOURNAL_CRASH_SEED");
        cut_connections(seed, cuts_wanted).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn connection_cut_pinned_seeds_apply_the_change_whole_or_not_at_all() {
        for seed in PINNED_CUT_SEEDS {
            cut_connections(seed, 60).await;
        }
    }

    /// One run of the connection-cut check: `cuts_wanted` cuts of the
    /// workload drawn from `seed`, each checked against the twin.
    async fn cut_connections(seed: u64, cuts_wanted: u64) {
        eprintln!("redis connection cuts: {cuts_wanted}, WORKJOURNAL_CRASH_SEED={seed}");
        let mut rng = Rng(seed);
        let server =
            RedisServer::start().expect("start redis-server (apt-get install redis-server)");
        let proxy = Proxy::start(server.port()).await;
        let clock = ManualClock::new(1_700_000_000_000);
        let q = RedisQueue::connect(&proxy.url(), "cut", mk_config(&clock), options())
            .await
            .unwrap();
        let twin = RedisQueue::connect(&server.url(), "twin", mk_config(&clock), options())
            .await
            .unwrap();
        let mut held: Vec<Receipt> = Vec::new();
        let mut max_id = 0;
        let (mut whole, mut none, mut ops) = (0u64, 0u64, 0u64);
        let started = Instant::now();
        let mut cuts = 0;
        while cuts < cuts_wanted {
            let op = draw(&mut rng, &mut held, max_id, clock.now_ms());
            if let Op::Advance(ms) = op {
                clock.advance(Duration::from_millis(ms));
            }
            let armed = rng.below(2) == 0;
            if armed {
                proxy.arm(rng.below(700));
            }
            let got = apply(&q, &op).await;
            ops += 1;
            let cut = proxy.disarm() > cuts;
            if !cut {
                agree_with_twin(&twin, &op, &got, seed, &mut held, &mut max_id).await;
                continue;
            }
            cuts += 1;
            if let Err(e) = &got {
                assert!(
                    matches!(e, Error::Backend { .. }),
                    "seed {seed}: {op:?}: {e:?}"
                );
            }
            // The queue carries on over a new connection.
            let deadline = Instant::now() + Duration::from_secs(10);
            while let Err(e) = q.stats().await {
                assert!(
                    Instant::now() < deadline,
                    "seed {seed}: no recovery after a cut: {e}"
                );
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            // The probe is a call too: stats is a script (which writes
            // nothing, SPEC 3, Clock steps). The twin gets it as well, so
            // that the two namespaces differ by the cut call alone.
            // Repeating it changes nothing, so one twin call stands for the
            // queue's tries.
            twin.stats().await.unwrap();
            let found = state(&server.url(), "cut").await;
            let before = state(&server.url(), "twin").await;
            if found == before {
                assert!(
                    got.is_err(),
                    "seed {seed}: {op:?} returned Ok but changed nothing"
                );
                none += 1;
                continue;
            }
            let want = apply(&twin, &op).await;
            if let Ok(r) = &want {
                held.extend(r.receipts.iter().copied());
                max_id = max_id.max(r.max_id);
            }
            let after = state(&server.url(), "twin").await;
            assert_eq!(
                found, after,
                "seed {seed}: after a cut during {op:?} the namespace is neither as before nor as after"
            );
            whole += 1;
        }
        eprintln!(
            "{cuts} connection cuts ({none} before the script ran, {whole} after), {ops} operations, {:.1} s",
            started.elapsed().as_secs_f64()
        );
    }
}
