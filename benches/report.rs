//! The one table: reads what the other benches (and the peers project)
//! left behind in this run — criterion's estimates under `CRITERION_HOME`
//! and the percentiles and sizes in `WJ_BENCH_OUT/extra.tsv` — and prints
//! workload, workjournal, baseline or peer, ratio; then the targets, each
//! met or missed. `benches/run.sh` runs everything and then this.

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{EMBEDDED, REDIS};

/// The forwarder's subject name (benches/forward.rs).
const FORWARD: &str = "workjournal-forward";

/// A measured value and whether more is better.
#[derive(Debug, Clone, Copy)]
struct Value {
    v: f64,
    unit: &'static str,
    higher_better: bool,
}

impl Value {
    fn show(&self) -> String {
        match self.unit {
            "items/s" => format!("{} items/s", group_digits(self.v)),
            // Only a lateness is ever negative: a timer that fired before
            // its due time, which breaks the not-before promise of a timer.
            u if self.v < 0.0 => format!("{:.2} {u} (early)", self.v),
            u => format!("{:.2} {u}", self.v),
        }
    }
}

fn group_digits(v: f64) -> String {
    let s = format!("{:.0}", v);
    let mut out = String::new();
    for (i, ch) in s.chars().enumerate() {
        if i > 0 && (s.len() - i) % 3 == 0 {
            out.push(' ');
        }
        out.push(ch);
    }
    out
}

type Results = BTreeMap<(String, String), Value>;

fn read_json(p: &Path) -> Option<serde_json::Value> {
    serde_json::from_str(&std::fs::read_to_string(p).ok()?).ok()
}

/// Every criterion result under `home`: time-per-iteration median, turned
/// into items/s where the group declared a throughput, else ms.
fn criterion_results(home: &Path, out: &mut Results) {
    let Ok(groups) = std::fs::read_dir(home) else {
        return;
    };
    for g in groups.flatten() {
        let Ok(funcs) = std::fs::read_dir(g.path()) else {
            continue;
        };
        for f in funcs.flatten() {
            let new = f.path().join("new");
            let (Some(meta), Some(est)) = (
                read_json(&new.join("benchmark.json")),
                read_json(&new.join("estimates.json")),
            ) else {
                continue;
            };
            let group = meta["group_id"].as_str().unwrap_or_default().to_string();
            let func = meta["function_id"].as_str().unwrap_or_default().to_string();
            let Some(ns) = est["median"]["point_estimate"].as_f64() else {
                continue;
            };
            let value = match meta["throughput"]["Elements"].as_f64() {
                Some(n) if group != "lifecycle" && !group.starts_with("reopen") => Value {
                    v: n / (ns * 1e-9),
                    unit: "items/s",
                    higher_better: true,
                },
                _ => Value {
                    v: ns / 1e6,
                    unit: "ms",
                    higher_better: false,
                },
            };
            out.insert((group, func), value);
        }
    }
}

/// The rows of `extra.tsv`; a later row of the same key wins.
fn extra_results(path: &Path, out: &mut Results) {
    let Ok(text) = std::fs::read_to_string(path) else {
        return;
    };
    for line in text.lines() {
        let f: Vec<&str> = line.split('\t').collect();
        if let [w, s, v, u] = f[..]
            && let Ok(v) = v.parse::<f64>()
        {
            let unit = match u {
                "ms" => "ms",
                "MiB" => "MiB",
                _ => "commits/s",
            };
            out.insert(
                (w.to_string(), s.to_string()),
                Value {
                    v,
                    unit,
                    higher_better: false,
                },
            );
        }
    }
}

/// Workloads in table order, with their display names.
const WORKLOADS: &[(&str, &str)] = &[
    ("add_1_producer", "add, 1 producer"),
    ("add_64_producers", "add, 64 producers"),
    ("add_batch_100", "add_batch of 100"),
    ("claim_ack_1", "claim+ack, batch 1"),
    ("claim_ack_100", "claim+ack, batch 100"),
    ("lifecycle p50", "lifecycle latency p50"),
    ("lifecycle p99", "lifecycle latency p99"),
    ("timer lateness p50", "timer lateness p50"),
    ("timer lateness p99", "timer lateness p99"),
    ("schedule fire lateness p50", "schedule fire lateness p50"),
    ("schedule fire lateness p99", "schedule fire lateness p99"),
    (
        "10k schedules every 1s: items/s",
        "10 000 schedules every second: items made/s",
    ),
    (
        "10k schedules every 1s: lateness p99",
        "10 000 schedules every second: firing lateness p99",
    ),
    (
        "10k schedules every 1s: CPU %",
        "10 000 schedules every second: firer's CPU, % of a core",
    ),
    (
        "10k schedules every 1s: redis-server CPU %",
        "10 000 schedules every second: redis-server CPU, % of a core",
    ),
    ("reopen_1m_after_sigkill", "reopen 1M items after SIGKILL"),
    (
        "file MiB after 10 cycles",
        "file size after 10 churn cycles",
    ),
    (
        "file MiB after 100 cycles",
        "file size after 100 churn cycles",
    ),
    (
        "redis namespace MiB after 1 cycles",
        "redis namespace memory after 1 churn cycle",
    ),
    (
        "redis namespace MiB after 10 cycles",
        "redis namespace memory after 10 churn cycles",
    ),
    ("rpc p50", "request-response round trip p50"),
    ("rpc p99", "request-response round trip p99"),
    (
        "claim_ack_100_tiers_1",
        "claim+ack, batch 100, one priority tier",
    ),
    (
        "claim_ack_100_tiers_10",
        "claim+ack, batch 100, ten tiers mixed",
    ),
    (
        "claim_ack_100_ten_flows_unlimited",
        "claim+ack, batch 100, ten flows unlimited",
    ),
    (
        "claim_ack_100_ten_flows_one_limited",
        "claim+ack, batch 100, one of ten flows rate-limited",
    ),
    (
        "claim_ack_100_behind_100k_limited",
        "claim+ack, batch 100, behind 100 000 rate-limited items",
    ),
    (
        "remote_add_1_producer",
        "through the socket: add, 1 producer",
    ),
    (
        "remote_add_64_producers",
        "through the socket: add, 64 producers",
    ),
    (
        "remote_claim_ack_100",
        "through the socket: claim+ack, batch 100",
    ),
];

const EMBEDDED_OTHERS: &[&str] = &[
    "raw-fsync",
    "raw-redb",
    "sqlite-wal",
    "effectum",
    "tokio-sleep",
    "no-history",
];
/// `raw-zadd-pubsub` is the gateway's request-response pattern (benches/rpc.rs).
/// `redis-no-history` (and `no-history` for a file): the same workload
/// keeping no finished items (benches/churn.rs, benches/claim_ack.rs).
const REDIS_OTHERS: &[&str] = &[
    "raw-streams",
    "omniqueue",
    "tokio-sleep",
    "raw-zadd-pubsub",
    "redis-no-history",
];
/// The remote backend's rows compare it with the same queue in-process and
/// with a SQLite table shared by two writer processes.
const REMOTE: &str = "workjournal-remote";
const REMOTE_OTHERS: &[&str] = &[EMBEDDED, "sqlite-wal-2-processes"];

/// How much better workjournal is than the other: > 1 means better. For
/// a lower-is-better figure the sizes compare: a timer lateness is
/// negative when the timer fired early (effectum keeps due times in whole
/// seconds and starts a job up to a second before it), and firing 250 ms
/// early is as far off as 250 ms late, not a negative ratio. The table
/// marks an early figure as such.
fn ratio(ours: Value, other: Value) -> f64 {
    if ours.higher_better {
        ours.v / other.v
    } else {
        other.v.abs() / ours.v.abs()
    }
}

fn main() {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("target"));
    let home = std::env::var_os("CRITERION_HOME")
        .map(PathBuf::from)
        .unwrap_or_else(|| target.join("criterion"));
    let mut r = Results::new();
    criterion_results(&home, &mut r);
    extra_results(&common::out_dir().join("extra.tsv"), &mut r);
    if r.is_empty() {
        eprintln!(
            "no results under {} or {}: run benches/run.sh",
            home.display(),
            common::out_dir().display()
        );
        std::process::exit(1);
    }

    if let Some(v) = get(&r, "fsync rate", "raw-fsync") {
        println!(
            "measured fsync rate (4 KiB write + fdatasync, bench temp dir): {} commits/s",
            group_digits(v.v)
        );
        println!();
    }
    println!("| workload | workjournal | baseline or peer | ratio |");
    println!("|---|---|---|---|");
    for (key, label) in WORKLOADS {
        for (ours, others) in [
            (EMBEDDED, EMBEDDED_OTHERS),
            (REDIS, REDIS_OTHERS),
            (REMOTE, REMOTE_OTHERS),
        ] {
            // In the remote groups the in-process embedded queue is the
            // baseline, not a subject of its own.
            if key.starts_with("remote_") != (ours == REMOTE) {
                continue;
            }
            let Some(&o) = r.get(&(key.to_string(), ours.to_string())) else {
                continue;
            };
            let short = ours.trim_start_matches("workjournal-");
            let mut any = false;
            for other in others.iter() {
                if let Some(&x) = r.get(&(key.to_string(), other.to_string())) {
                    any = true;
                    println!(
                        "| {label} | {short}: {} | {other}: {} | {:.2}x |",
                        o.show(),
                        x.show(),
                        ratio(o, x)
                    );
                }
            }
            if !any {
                println!("| {label} | {short}: {} | - | - |", o.show());
            }
        }
        if *key == "reopen_1m_after_sigkill"
            && let Some(&x) = r.get(&(
                key.to_string(),
                "workjournal-embedded-verify-every-open".into(),
            ))
        {
            println!(
                "| {label} | embedded, verify_on_open(true): {} | - | - |",
                x.show()
            );
        }
    }
    forwarding_rows(&r);
    worker_rows(&r);
    cancel_rows(&r);
    println!();
    println!("ratio: how many times better workjournal is (its throughput over the other's,");
    println!("or the other's time, size or lateness over its own); above 1 = workjournal ahead.");
    println!("A lateness marked early is a timer that fired before it was due; its ratio");
    println!("compares how far off each is, early or late.");
    println!();
    targets(&r);
}

/// Store and forward: throughput next to the Redis backend's
/// `add_batch` of 100 on the same server in the same run, and the lag rows.
fn forwarding_rows(r: &Results) {
    if let Some(f) = get(r, "forwarding", FORWARD) {
        for (w, label) in [
            ("forwarding", "redis add_batch of 100, same server"),
            ("add_batch_100", "redis add_batch of 100"),
        ] {
            if let Some(x) = get(r, w, REDIS) {
                println!(
                    "| forwarding | forward: {} | {label}: {} | {:.2}x |",
                    f.show(),
                    x.show(),
                    ratio(f, x)
                );
            }
        }
    }
    for (w, label) in [
        (
            "forward 10k backlog drain",
            "forward: drain of a 10 000-item backlog",
        ),
        (
            "forward lag after drain p50",
            "forward: lag (oldest age) after the drain, p50",
        ),
        (
            "forward lag after drain p99",
            "forward: lag (oldest age) after the drain, p99",
        ),
    ] {
        if let Some(v) = get(r, w, FORWARD) {
            println!("| {label} | {} | - | - |", v.show());
        }
    }
}

/// The command's worker (cli/benches/work.rs): `work
/// --exec true` over 5 000 items against `xargs -P N -n1` of `true` and of
/// `sh -c true` (what `--exec true` runs), whole runs in ms.
const WORK: &str = "workjournal-cli";
/// The others of each worker row: subject, label, and whether the label
/// takes the row's `-P N` (xargs does; our own `--prefetch 0` run has the
/// row's `--concurrency`).
const WORK_OTHERS: &[(&str, &str, bool)] = &[
    ("workjournal-cli-prefetch-0", "cli --prefetch 0", false),
    ("xargs-true", "xargs -n1 true", true),
    ("xargs-sh-c-true", "xargs -n1 sh -c true", true),
];

fn worker_rows(r: &Results) {
    for n in [2, 8] {
        let key = format!("work_exec_true_c{n}");
        let Some(ours) = get(r, &key, WORK) else {
            continue;
        };
        for (other, label, takes_p) in WORK_OTHERS {
            if let Some(x) = get(r, &key, other) {
                let label = if *takes_p {
                    format!("{label} -P{n}")
                } else {
                    (*label).to_string()
                };
                println!(
                    "| work --exec true, 5 000 items, --concurrency {n} | cli: {} | {label}: {} | {:.2}x |",
                    ours.show(),
                    x.show(),
                    ratio(ours, x)
                );
            }
        }
    }
}

/// Cancel to SIGTERM (cli/benches/cancel.rs): from `cancel(id)` in
/// another process to the running command's SIGTERM trap, against a
/// `kill -TERM` of its group sent straight from the bench (the floor).
const CANCEL_ROWS: &[(&str, &str)] = &[
    (
        "cancel_to_sigterm_file",
        "cancel to SIGTERM, file (through work's socket)",
    ),
    ("cancel_to_sigterm_redis", "cancel to SIGTERM, redis"),
];

fn cancel_rows(r: &Results) {
    for (w, label) in CANCEL_ROWS {
        for q in ["p50", "p99"] {
            let (Some(ours), Some(floor)) = (
                get(r, w, &format!("workjournal-{q}")),
                get(r, w, &format!("kill-term-{q}")),
            ) else {
                continue;
            };
            println!(
                "| {label}, {q} | {} | kill -TERM of the group: {} | {:.2}x |",
                ours.show(),
                floor.show(),
                ratio(ours, floor)
            );
        }
    }
}

fn get(r: &Results, w: &str, s: &str) -> Option<Value> {
    r.get(&(w.to_string(), s.to_string())).copied()
}

fn verdict(what: &str, figure: Option<f64>, goal: f64, higher: bool, unit: &str) {
    match figure {
        None => println!("- {what}: not measured"),
        Some(f) => {
            let met = if higher { f >= goal } else { f <= goal };
            let cmp = if higher { ">=" } else { "<=" };
            println!(
                "- {what}: {f:.2}{unit} (goal {cmp} {goal}{unit}): {}",
                if met { "met" } else { "MISSED" }
            );
        }
    }
}

fn targets(r: &Results) {
    println!("Targets:");
    let rat = |w: &str, a: &str, b: &str| Some(ratio(get(r, w, a)?, get(r, w, b)?));
    verdict(
        "embedded add, 1 producer vs raw redb single-insert commits",
        rat("add_1_producer", EMBEDDED, "raw-redb"),
        0.9,
        true,
        "x",
    );
    verdict(
        "embedded add, 64 producers vs 1 producer",
        (|| Some(get(r, "add_64_producers", EMBEDDED)?.v / get(r, "add_1_producer", EMBEDDED)?.v))(
        ),
        10.0,
        true,
        "x",
    );
    for (s, name) in [(EMBEDDED, "embedded"), (REDIS, "redis")] {
        verdict(
            &format!("{name} claim+ack in batches of 100, items/s"),
            get(r, "claim_ack_100", s).map(|v| v.v),
            100_000.0,
            true,
            "",
        );
    }
    for (key, goal) in [
        ("remote_add_1_producer", 0.8),
        ("remote_add_64_producers", 0.5),
        ("remote_claim_ack_100", 0.5),
    ] {
        verdict(
            &format!("{key}: through the socket vs in-process embedded"),
            rat(key, REMOTE, EMBEDDED),
            goal,
            true,
            "x",
        );
    }
    for (key, label) in WORKLOADS.iter().take(9) {
        verdict(
            &format!("embedded vs effectum, {label}"),
            rat(key, EMBEDDED, "effectum"),
            3.0,
            true,
            "x",
        );
    }
    for (key, label) in WORKLOADS.iter().take(7) {
        verdict(
            &format!("redis vs raw Streams, {label}"),
            rat(key, REDIS, "raw-streams"),
            0.5,
            true,
            "x",
        );
    }
    for (key, label) in WORKLOADS.iter().take(9) {
        verdict(
            &format!("redis vs omniqueue, {label}"),
            rat(key, REDIS, "omniqueue"),
            1.0,
            true,
            "x",
        );
    }
    for (s, name) in [(EMBEDDED, "embedded"), (REDIS, "redis")] {
        verdict(
            &format!("{name} claim+ack, ten priority tiers mixed vs one tier"),
            (|| {
                Some(get(r, "claim_ack_100_tiers_10", s)?.v / get(r, "claim_ack_100_tiers_1", s)?.v)
            })(),
            0.8,
            true,
            "x",
        );
    }
    for (s, name) in [(EMBEDDED, "embedded"), (REDIS, "redis")] {
        verdict(
            &format!("{name} claim+ack, one of ten flows rate-limited vs unlimited"),
            (|| {
                Some(
                    get(r, "claim_ack_100_ten_flows_one_limited", s)?.v
                        / get(r, "claim_ack_100_ten_flows_unlimited", s)?.v,
                )
            })(),
            0.8,
            true,
            "x",
        );
        verdict(
            &format!("{name} claim+ack behind 100 000 limited items vs unlimited"),
            (|| {
                Some(
                    get(r, "claim_ack_100_behind_100k_limited", s)?.v
                        / get(r, "claim_ack_100_ten_flows_unlimited", s)?.v,
                )
            })(),
            0.8,
            true,
            "x",
        );
    }
    verdict(
        "embedded timer lateness p99, ms",
        get(r, "timer lateness p99", EMBEDDED).map(|v| v.v),
        2.0,
        false,
        "",
    );
    verdict(
        "redis request-response p50 vs raw ZADD + pub/sub",
        (|| Some(get(r, "rpc p50", REDIS)?.v / get(r, "rpc p50", "raw-zadd-pubsub")?.v))(),
        1.5,
        false,
        "x",
    );
    verdict(
        "redis timer lateness p99, ms",
        get(r, "timer lateness p99", REDIS).map(|v| v.v),
        5.0,
        false,
        "",
    );
    verdict(
        "embedded file size after 100 cycles / after 10",
        (|| {
            Some(
                get(r, "file MiB after 100 cycles", EMBEDDED)?.v
                    / get(r, "file MiB after 10 cycles", EMBEDDED)?.v,
            )
        })(),
        1.5,
        false,
        "x",
    );
    verdict(
        "forwarding vs redis add_batch of 100 on the same server",
        rat("forwarding", FORWARD, REDIS),
        0.5,
        true,
        "x",
    );
    for n in [2, 8] {
        verdict(
            &format!("work --exec true, --concurrency {n}, vs xargs -P{n} true"),
            rat(&format!("work_exec_true_c{n}"), WORK, "xargs-true"),
            0.8,
            true,
            "x",
        );
    }
    for ((w, _), goal) in CANCEL_ROWS.iter().zip([100.0, 250.0]) {
        verdict(
            &format!("{w}, p99, ms"),
            get(r, w, "workjournal-p99").map(|v| v.v),
            goal,
            false,
            " ms",
        );
    }
    // The embedded backend against its baselines: every single-consumer
    // row and both latencies at or above SQLite WAL, group commit still
    // well ahead, one producer near the disk's own fsync rate, and a fast
    // reopen after SIGKILL.
    for (key, label) in WORKLOADS.iter().take(7) {
        verdict(
            &format!("embedded vs SQLite WAL (level or better), {label}"),
            rat(key, EMBEDDED, "sqlite-wal"),
            1.0,
            true,
            "x",
        );
    }
    verdict(
        "embedded vs SQLite WAL, add, 64 producers",
        rat("add_64_producers", EMBEDDED, "sqlite-wal"),
        5.0,
        true,
        "x",
    );
    verdict(
        "embedded add, 1 producer vs raw fsync",
        rat("add_1_producer", EMBEDDED, "raw-fsync"),
        0.8,
        true,
        "x",
    );
    // The target is the default's; `verify_on_open(true)` (a read of the
    // whole file per open) is printed in the table for comparison.
    verdict(
        "embedded reopen of 1M items after SIGKILL, default (verified once a day), ms",
        get(r, "reopen_1m_after_sigkill", EMBEDDED).map(|v| v.v),
        50.0,
        false,
        "",
    );
}
