//! The cost of one embedded operation, for `valgrind --tool=callgrind` and
//! `strace -f`: runs `N` operations of one workload on a fresh queue file
//! and exits. Running it twice, with `N` and with 0, and subtracting gives
//! the cost of `N` operations without the setup (open, the backlog fill,
//! close); `benches/checks/per_op.sh` does that for every workload and
//! prints instructions, write calls, bytes written and syncs per operation.
//!
//! `cargo bench --bench per_op -- WORKLOAD N`
//!
//! Workloads (the bodies of `benches/add.rs` and `benches/claim_ack.rs`,
//! 256-byte payloads, default configuration):
//!
//! - `add1`: `N` single adds;
//! - `add100`: `N` `add_batch` calls of 100 items;
//! - `claim_ack1`: `N` claims of 1 and acks, on a backlog of `FILL` items;
//! - `claim_ack100`: `N` claims of 100 and `ack_batch`es, on the same
//!   backlog.
//!
//! The backlog is the same whatever `N` (`FILL` = 20 000 items, added in
//! batches of 100 before the measured part), so that it cancels out in the
//! difference. The checkpoint interval is set to an hour: under valgrind a
//! run is about 50 times slower, and a time-based checkpoint would come 50
//! times as often as in a real run; checkpoints by size and operation count
//! (4 MiB, 8192 operations) and the one at close stay.

use std::time::{Duration, Instant};

use workjournal::{ClaimFrom, Config, EmbeddedOptions, EmbeddedQueue, NewItem, WorkQueue};

/// Payload of every item, in bytes (as `benches/common`'s `PAYLOAD_BYTES`).
const PAYLOAD_BYTES: usize = 256;
/// Backlog of the claim+ack workloads, in items.
const FILL: usize = 20_000;

type BoxError = Box<dyn std::error::Error>;

async fn run(workload: &str, n: usize) -> Result<Duration, BoxError> {
    let dir = std::env::temp_dir().join(format!("workjournal-per-op-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join("q.redb");
    let options = EmbeddedOptions::default().checkpoint_interval(Duration::from_secs(3600));
    let q = EmbeddedQueue::open_with(&path, Config::default(), options).await?;
    let body = vec![7u8; PAYLOAD_BYTES];
    let batch = |k: usize| -> Vec<NewItem> { (0..k).map(|_| NewItem::new(body.clone())).collect() };
    if workload.starts_with("claim_ack") {
        for _ in 0..FILL / 100 {
            q.add_batch(batch(100)).await?;
        }
    }
    let start = Instant::now();
    match workload {
        "add1" => {
            for _ in 0..n {
                q.add(NewItem::new(body.clone())).await?;
            }
        }
        "add100" => {
            for _ in 0..n {
                q.add_batch(batch(100)).await?;
            }
        }
        "claim_ack1" | "claim_ack100" => {
            let size = if workload == "claim_ack1" { 1 } else { 100 };
            if n * size > FILL {
                return Err(format!("{workload}: at most {} operations", FILL / size).into());
            }
            for _ in 0..n {
                let got = q.claim(size, Duration::ZERO, ClaimFrom::All).await?;
                if got.len() != size {
                    return Err("the backlog ran dry".into());
                }
                if size == 1 {
                    q.ack(got[0].receipt).await?;
                } else {
                    q.ack_batch(got.iter().map(|c| c.receipt).collect()).await?;
                }
            }
        }
        other => {
            return Err(
                format!("workload {other}: one of add1, add100, claim_ack1, claim_ack100").into(),
            );
        }
    }
    let took = start.elapsed();
    q.close().await?;
    std::fs::remove_dir_all(&dir)?;
    Ok(took)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), BoxError> {
    // `cargo bench` passes `--bench`: the arguments are the others.
    let args: Vec<String> = std::env::args()
        .skip(1)
        .filter(|a| !a.starts_with("--"))
        .collect();
    let (Some(workload), Some(n)) = (args.first(), args.get(1)) else {
        return Err("usage: per_op WORKLOAD N".into());
    };
    let n: usize = n.parse()?;
    let took = run(workload, n).await?;
    eprintln!("{workload}: {n} operations in {took:?}");
    Ok(())
}
