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

use workjournal::{
    ClaimFrom, Config, EmbeddedQueue, Location, NewItem, Receipt, RetryOutcome, WorkQueue,
};

/// Set in the child: the queue file to work on.
const CHILD_ENV: &str = "WORKJOURNAL_CRASH_CHILD";
/// Set in the child: the seed of its workload.
const CHILD_SEED_ENV: &str = "WORKJOURNAL_CRASH_CHILD_SEED";
/// How many concurrent tasks the child runs, so that kills also land in the
/// middle of group commits of several operations.
const CHILD_TASKS: u64 = 3;
/// A child that outlives this (its parent died) stops on its own.
const CHILD_LIFETIME: Duration = Duration::from_secs(60);

/// splitmix64: enough randomness for workloads, no dependency.
#[derive(Debug, Clone)]
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0).
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn seed_from_env(var: &str) -> u64 {
    match std::env::var(var) {
        Ok(s) => s.parse().unwrap(),
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64,
    }
}

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
            0..=19 => {
                let it = item(&mut rng, &flow);
                say(&format!("B {task} add 1"));
                q.add(it)
                    .await
                    .map(|a| format!("add {}", ids((!a.duplicate).then_some(a.id))))
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
                q.reclaim_stale(idle, n).await.map(|v| {
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
            60..=61 => {
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
    rt.block_on(async move {
        let q = match EmbeddedQueue::open(&path, Config::default()).await {
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
                    "ack" => self.gone.extend(parse_ids(arg)),
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
            "ack" => in_flight_acks.extend(args.iter().copied()),
            _ => {}
        }
    }
    let mut count: BTreeMap<Location, u64> = BTreeMap::new();
    for (id, places) in &locs {
        assert_eq!(
            places.len(),
            1,
            "cycle {cycle}: item {id} is in {places:?}, not in exactly one state"
        );
        *count.entry(places[0]).or_default() += 1;
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
    let n = |l: Location| count.get(&l).copied().unwrap_or(0);
    assert_eq!(
        (
            stats.backlog,
            stats.due,
            stats.pending,
            stats.delayed,
            stats.parked,
            stats.dead_letters
        ),
        (
            n(Location::Backlog) + n(Location::Due),
            n(Location::Due),
            n(Location::Pending),
            n(Location::Delayed),
            n(Location::Parked),
            n(Location::DeadLetter)
        ),
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
        (a, vec![Location::Pending]),
        (b, vec![Location::DeadLetter]),
        (c, vec![Location::Delayed]),
        (d, vec![Location::Backlog]),
        (e, vec![Location::Backlog]),
    ]
    .into_iter()
    .collect();
    assert_eq!(got, want);
    q.ack(claimed[0].receipt).await.unwrap();
    assert!(!q.locations().await.unwrap().contains_key(&a));
}
