//! File size under churn: each cycle adds 10 000 items of 1 KiB, claims
//! them and acks them (batches of 1000), so the queue is empty again at the
//! end of every cycle. The file size after 10 and after 100 cycles shows
//! whether freed space is reused. SQLite WAL does the same (size = database
//! plus WAL file).
//!
//! Not a time measurement: `harness = false` with its own main.

mod common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::EMBEDDED;
use common::baselines::Sqlite;
use workjournal::{ClaimFrom, NewItem, WorkQueue};

const ITEMS_PER_CYCLE: usize = 10_000;
const BATCH: usize = 1000;
const PAYLOAD: usize = 1024;

fn size(paths: &[&Path]) -> u64 {
    paths
        .iter()
        .map(|p| std::fs::metadata(p).map(|m| m.len()).unwrap_or(0))
        .sum()
}

fn mib(bytes: u64) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

fn main() {
    let cycles: usize = std::env::var("WJ_CHURN_CYCLES")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(100);
    let checkpoint = cycles.min(10);
    let rt = common::runtime();
    let dir = common::temp_dir();
    let body = common::payload(PAYLOAD);

    let path = dir.path().join("churn.redb");
    let t = Instant::now();
    let sizes = rt.block_on(async {
        let q = common::embedded(dir.path(), "churn").await;
        let mut sizes = Vec::new();
        for cycle in 1..=cycles {
            for _ in 0..ITEMS_PER_CYCLE / BATCH {
                let items = (0..BATCH).map(|_| NewItem::new(body.clone())).collect();
                q.add_batch(items).await.expect("add_batch");
            }
            for _ in 0..ITEMS_PER_CYCLE / BATCH {
                let got = q
                    .claim(BATCH, Duration::ZERO, ClaimFrom::All)
                    .await
                    .expect("claim");
                assert_eq!(got.len(), BATCH);
                q.ack_batch(got.iter().map(|c| c.receipt).collect())
                    .await
                    .expect("ack");
            }
            if cycle == checkpoint || cycle == cycles {
                sizes.push((cycle, size(&[&path])));
            }
        }
        q.close().await.expect("close");
        sizes
    });
    println!("embedded churn: {cycles} cycles in {:.1?}", t.elapsed());
    for (cycle, bytes) in &sizes {
        common::record(
            &format!("file MiB after {cycle} cycles"),
            EMBEDDED,
            mib(*bytes),
            "MiB",
        );
    }

    let db = dir.path().join("churn.sqlite");
    let wal = dir.path().join("churn.sqlite-wal");
    let mut s = Sqlite::open(&db);
    let t = Instant::now();
    for cycle in 1..=cycles {
        for _ in 0..ITEMS_PER_CYCLE / BATCH {
            s.fill(BATCH as u64, &body);
        }
        for _ in 0..ITEMS_PER_CYCLE / BATCH {
            assert_eq!(s.claim_ack_once(BATCH), BATCH);
        }
        if cycle == checkpoint || cycle == cycles {
            common::record(
                &format!("file MiB after {cycle} cycles"),
                "sqlite-wal",
                mib(size(&[&db, &wal])),
                "MiB",
            );
        }
    }
    println!("sqlite churn: {cycles} cycles in {:.1?}", t.elapsed());
}
