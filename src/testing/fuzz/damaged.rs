//! Target `open_damaged_file`: a valid queue file with bytes flipped or
//! cut off, opened and used.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use std::sync::OnceLock;
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use super::{disk_name, runtime};
use crate::EmbeddedQueue;
use crate::clock::ManualClock;
use crate::item::{ClaimFrom, NewItem, Receipt};
use crate::queue::WorkQueue;
use crate::testing::faults::SimDisk;
use crate::testing::ops::START_MS;

/// How long one queue call of a fuzz target may take before it counts as a
/// hang (wall-clock time; generous, the fuzzer's own timeout is the backstop).
const HANG: Duration = Duration::from_secs(20);

/// Damage to a queue file.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct Damage {
    /// (offset, xor mask) pairs; offsets wrap around the file's length.
    /// Flips of the first 4 KiB (redb's header) are drawn more often.
    pub flips: Vec<(u32, u8)>,
    /// Cut the file to this many bytes (wrapped around its length).
    pub truncate: Option<u32>,
    /// Open with redb's integrity check (the default) or without it.
    pub verify: bool,
}

/// The bytes of a queue file holding items in every state (backlog, due,
/// delayed, pending, parked, paused, done, dedup, dead letters), built once,
/// on a simulated disk (so with the small regions of `--cfg fuzzing`, which
/// every damaged copy's open and close then walk). A clean close leaves
/// the whole queue in this file: its redo log holds nothing to replay.
fn pristine_file() -> &'static [u8] {
    static FILE: OnceLock<Vec<u8>> = OnceLock::new();
    FILE.get_or_init(|| {
        let disk = SimDisk::new();
        #[allow(clippy::expect_used)]
        runtime()
            .block_on(build_pristine(&disk))
            .expect("build the pristine queue file");
        disk.image().queue
    })
}

async fn build_pristine(disk: &SimDisk) -> crate::Result<()> {
    let clock = ManualClock::new(START_MS);
    let config = crate::Config::default()
        .max_deliveries(1)
        .clock(clock.clone());
    let q = EmbeddedQueue::open_on_backend(&disk_name(), disk.backend(), config, false).await?;
    for n in 0..8u8 {
        let flow = ["", "a", "b"][usize::from(n % 3)];
        q.add(
            NewItem::new(vec![n; 40])
                .flow(flow)
                .dedup_key(format!("key{n}")),
        )
        .await?;
    }
    q.add_delayed(NewItem::new(b"later".to_vec()), START_MS + 60_000)
        .await?;
    q.add_delayed(NewItem::new(b"due".to_vec()), START_MS)
        .await?;
    q.promote_due().await?;
    let claimed = q.claim(4, Duration::ZERO, ClaimFrom::All).await?;
    if let Some(c) = claimed.first() {
        q.dead_letter(c.receipt, "fuzz").await?;
        q.mark_done(c.item.id, "step").await?;
    }
    if let Some(c) = claimed.get(1) {
        q.retry(c.receipt, START_MS + 1_000).await?;
    }
    q.pause("a").await?;
    let _ = q.claim(3, Duration::ZERO, ClaimFrom::All).await?;
    q.close().await
}

async fn timed<T>(what: &str, f: impl std::future::Future<Output = T>) -> T {
    match tokio::time::timeout(HANG, f).await {
        Ok(v) => v,
        Err(_) => panic!("{what} hung for {HANG:?} on a damaged file"),
    }
}

/// For the fuzz binaries of targets that feed damaged files to redb:
/// libFuzzer aborts on every panic, even one that is caught. The embedded
/// backend runs every redb call under `catch_unwind` and turns a panic of
/// redb on a damaged file into `Error::Corrupt` (SPEC section 5), so this
/// hook lets panics raised inside redb's own source pass and keeps
/// libFuzzer's abort for every other panic. Installed once; call it at the
/// top of the target.
pub fn let_redb_panics_be_caught() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let outer = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let in_redb = info
                .location()
                .is_some_and(|l| l.file().replace('\\', "/").contains("/redb-"));
            if !in_redb {
                outer(info);
            }
        }));
    });
}

/// Target `open_damaged_file`: a valid queue file with bytes flipped or cut
/// off; opening it, `stats`, `claim` and the other calls give errors or
/// work, never a panic and never a hang.
///
/// # Panics
///
/// When a call hangs (the crate's own panics are the finding).
pub fn open_damaged_file(data: &[u8]) {
    let Ok(damage) = Damage::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let mut bytes = pristine_file().to_vec();
    let len = bytes.len();
    for (n, (offset, mask)) in damage.flips.iter().take(64).enumerate() {
        // Half of the flips land in the first 4 KiB (header and the
        // commit slots), where a flip matters most.
        let span = if n % 2 == 0 { len.min(4096) } else { len };
        if span > 0 {
            bytes[*offset as usize % span] ^= *mask;
        }
    }
    if let Some(t) = damage.truncate {
        bytes.truncate(t as usize % (len + 1));
    }
    runtime().block_on(async {
        let config = crate::Config::default().clock(ManualClock::new(START_MS + 10_000));
        // The damaged bytes on a simulated disk: redb reads them as it would
        // a file, without the file system's calls and fsyncs.
        let disk = SimDisk::from_image(bytes);
        let name = disk_name();
        let open = EmbeddedQueue::open_on_backend(&name, disk.backend(), config, damage.verify);
        let Ok(q) = timed("open", open).await else {
            return;
        };
        let _ = timed("stats", q.stats()).await;
        let _ = timed("peek", q.peek(10)).await;
        let _ = timed("backlog_by_flow", q.backlog_by_flow(10)).await;
        let _ = timed("dead_letters", q.dead_letters(10)).await;
        let _ = timed("paused_flows", q.paused_flows()).await;
        let _ = timed("next_due", q.next_due()).await;
        let _ = timed("was_done", q.was_done(1, "step")).await;
        if let Ok(claimed) = timed("claim", q.claim(10, Duration::ZERO, ClaimFrom::All)).await {
            for c in claimed {
                let _ = timed("ack", q.ack(c.receipt)).await;
            }
        }
        if let Ok(stale) = timed("reclaim", q.reclaim(Duration::ZERO, 10)).await {
            let rs: Vec<Receipt> = stale.claimed.iter().map(|c| c.receipt).collect();
            let _ = timed("ack_batch", q.ack_batch(rs)).await;
        }
        let _ = timed("resume", q.resume("a")).await;
        let _ = timed("step", q.step("a")).await;
        let _ = timed("redrive", q.redrive(1)).await;
        let _ = timed("add", q.add(NewItem::new(b"after".to_vec()))).await;
        let _ = timed("purge", q.purge_dead_letters()).await;
        let _ = timed("close", q.close()).await;
    });
}
