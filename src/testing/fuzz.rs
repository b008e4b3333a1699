//! The bodies of the cargo-fuzz targets in `fuzz/` (SPEC section 5: no
//! input, stored byte or reply may panic the process or lose work).
//!
//! Each target in `fuzz/fuzz_targets/` is a one-line call into this module,
//! so `tests/fuzz_regressions.rs` replays the committed corpus and every
//! past finding on stable Rust in a plain `cargo test`. Every function here
//! takes the fuzzer's raw bytes, never fails on them, and panics only when
//! the crate broke its contract (that panic is the finding).
//!
//! Not part of the stable API.

// A broken contract panics: that panic is what the fuzzer reports.
#![allow(clippy::panic)]

use std::collections::BTreeMap;
use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use arbitrary::{Arbitrary, Unstructured};

use crate::EmbeddedQueue;
use crate::backend::embedded::codec::{self, DeadRecord, ItemRecordV1, LeaseRecord};
use crate::browse::ItemState;
use crate::clock::ManualClock;
use crate::error::Error;
use crate::item::{ClaimFrom, NewItem, Receipt, Stats};
use crate::queue::{BoxFuture, BoxQueue, WorkQueue};
use crate::testing::faults::{DiskImage, SimDisk};
use crate::testing::ops::{self, Op, Reference, START_MS, Setup, System, Target};

/// Most ops one fuzz input runs, so one execution stays short.
pub const MAX_OPS: usize = 64;

/// How long one queue call of a fuzz target may take before it counts as a
/// hang (wall-clock time; generous, the fuzzer's own timeout is the backstop).
const HANG: Duration = Duration::from_secs(20);

fn runtime() -> &'static tokio::runtime::Runtime {
    static RT: OnceLock<tokio::runtime::Runtime> = OnceLock::new();
    RT.get_or_init(|| {
        #[allow(clippy::expect_used)]
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .expect("a tokio runtime for the fuzz targets")
    })
}

/// Target `decode_record`: `bytes` into every stored-record decoder of the
/// embedded file (SPEC section 6) gives a value or `Error::Decode`, never a
/// panic; what decodes encodes back to itself.
///
/// # Panics
///
/// On any other error, or a record that does not round-trip.
pub fn decode_record(bytes: &[u8]) {
    fn check<T>(bytes: &[u8])
    where
        T: bincode::Encode + bincode::Decode<()> + PartialEq + std::fmt::Debug,
    {
        match codec::decode::<T>("fuzz", bytes) {
            Ok(v) => {
                let again = codec::encode(&v)
                    .and_then(|b| codec::decode::<T>("fuzz", &b))
                    .map_err(|e| e.to_string());
                assert_eq!(again.as_ref(), Ok(&v), "record does not round-trip");
            }
            Err(Error::Decode { .. }) => {}
            Err(other) => panic!("decoder gave a non-Decode error: {other:?}"),
        }
    }
    check::<ItemRecordV1>(bytes);
    // Item records are written from borrowed parts (`ItemRecordRef`) and
    // read as `ItemRecord`: what decodes must come back through both.
    match codec::decode_item("fuzz", bytes) {
        Ok(v) => {
            let again = codec::encode_item(&v)
                .and_then(|b| codec::decode_item("fuzz", &b))
                .map_err(|e| e.to_string());
            assert_eq!(again.as_ref(), Ok(&v), "item record does not round-trip");
        }
        Err(Error::Decode { .. }) => {}
        Err(other) => panic!("item decoder gave a non-Decode error: {other:?}"),
    }
    check::<LeaseRecord>(bytes);
    check::<DeadRecord>(bytes);
    if let Ok(lease) = codec::decode::<LeaseRecord>("fuzz", bytes) {
        match codec::lane_from_u8(lease.lane, "fuzz") {
            Ok(_) | Err(Error::Decode { .. }) => {}
            Err(other) => panic!("lane decoder gave a non-Decode error: {other:?}"),
        }
    }
}

/// A run of ops: the limits and the sequence.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct OpsInput {
    /// The limits.
    pub setup: Setup,
    /// The sequence (at most [`MAX_OPS`] are run).
    pub ops: Vec<Op>,
}

/// Target `ops_vs_model`: a sequence of ops on the embedded backend (a file
/// on a [`SimDisk`], in memory, with close-and-reopen) and on the model;
/// every result, `stats()` and the file's recount must equal the model's
/// after every step. (`tests/model.rs` runs the same comparison on a real
/// file.)
///
/// # Panics
///
/// On the first difference.
pub fn ops_vs_model(data: &[u8]) {
    let Ok(input) = OpsInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    let ops = &input.ops[..input.ops.len().min(MAX_OPS)];
    let disk = SimDisk::from_image(fresh_image().clone());
    if let Err(e) = runtime().block_on(ops::run_embedded_on_disk(
        disk_name(),
        disk,
        &input.setup,
        ops,
    )) {
        panic!("embedded backend differs from the model: {e}");
    }
}

/// Both files of a queue just created and closed, with nothing ever added,
/// made once per process: an input opens a copy of it rather than creating
/// a database, whose creation is no part of what the targets check and
/// cost more than a short input's ops. The limits are not stored in the
/// file, so one image serves every input's setup.
fn fresh_image() -> &'static DiskImage {
    static IMAGE: OnceLock<DiskImage> = OnceLock::new();
    IMAGE.get_or_init(|| {
        let disk = SimDisk::new();
        #[allow(clippy::expect_used)]
        runtime()
            .block_on(async {
                let q = EmbeddedQueue::open_on_backend(
                    &disk_name(),
                    disk.backend(),
                    crate::Config::default(),
                    false,
                )
                .await?;
                q.close().await
            })
            .expect("create the fresh queue image");
        disk.image()
    })
}

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
        if let Ok(stale) = timed("reclaim", q.reclaim_stale(Duration::ZERO, 10)).await {
            let rs: Vec<Receipt> = stale.iter().map(|c| c.receipt).collect();
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

// ---- crash recovery ---------------------------------------------------------

/// A crash run: the limits, the sequence, when the process dies (after how
/// many mutating disk calls), and which unsynced writes survive the cut.
#[derive(Debug, Clone, PartialEq, Eq, Arbitrary)]
pub struct CrashInput {
    /// The limits.
    pub setup: Setup,
    /// The sequence (at most [`MAX_OPS`] are run; reopen steps are stats).
    pub ops: Vec<Op>,
    /// Writes and syncs allowed after the open (taken modulo 400); `None`:
    /// the power goes after the last op.
    pub fail_after: Option<u16>,
    /// Seeds what the power cut keeps of the unsynced writes (whole, lost
    /// or torn at 512 B or 4 KiB; [`SimDisk::after_power_loss`]).
    pub keep_seed: u64,
}

struct OnDisk {
    queue: EmbeddedQueue,
    boxed: BoxQueue,
}

impl Target for OnDisk {
    fn queue(&self) -> &BoxQueue {
        &self.boxed
    }

    fn recount(&self) -> BoxFuture<'_, Option<crate::Result<BTreeMap<u64, ItemState>>>> {
        Box::pin(async move { Some(self.queue.audit().await) })
    }
}

fn disk_name() -> String {
    static N: AtomicU64 = AtomicU64::new(0);
    format!(
        "fuzz-disk-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    )
}

/// Target `crash_recovery`: ops on the embedded backend over a [`SimDisk`]
/// whose power is cut after N writes and syncs; the cut keeps a random part
/// of the unsynced writes (some torn), the file is opened again, and its
/// state must be the model's after the last acknowledged operation, or
/// after the one in flight when the process died (SPEC section 4).
///
/// # Panics
///
/// When the results before the crash differ from the model, the reopened
/// file cannot be opened, or its state is neither of the two allowed.
pub fn crash_recovery(data: &[u8]) {
    let Ok(input) = CrashInput::arbitrary_take_rest(Unstructured::new(data)) else {
        return;
    };
    crash_recovery_with(&input);
}

/// The body of [`crash_recovery`] for an input built by hand.
///
/// # Panics
///
/// As [`crash_recovery`].
pub fn crash_recovery_with(input: &CrashInput) {
    // Built outside the runtime: building it blocks on the runtime.
    let image = fresh_image();
    if let Err(e) = runtime().block_on(crash_run(input, image)) {
        panic!("crash recovery: {e}");
    }
}

/// A queue on `backend` (opened once, verified at open, as by
/// `open_on_backend`), with adds of `ahead` items or more written ahead of
/// their run.
async fn open_once(
    backend: crate::testing::faults::SimBackend,
    config: crate::Config,
    ahead: usize,
) -> crate::Result<EmbeddedQueue> {
    EmbeddedQueue::open_on_backend_with_options(
        &disk_name(),
        crate::backend::embedded::opened_once(backend),
        config,
        crate::EmbeddedOptions::default()
            .verify_on_open(true)
            .write_ahead_from(ahead),
    )
    .await
}

async fn crash_run(input: &CrashInput, fresh: &DiskImage) -> Result<(), String> {
    let clock = ManualClock::new(START_MS);
    let config = input.setup.config().clock(clock.clone());
    // A copy of a fresh queue: what a create leaves, without creating.
    let disk = SimDisk::from_image(fresh.clone());
    // Half the inputs have every add's redo record written ahead of its
    // run (SPEC 6, redo log), half only the default's large batches.
    let ahead = if input.keep_seed.is_multiple_of(2) {
        1
    } else {
        32
    };
    let queue = open_once(disk.backend(), config.clone(), ahead)
        .await
        .map_err(|e| format!("open a fresh queue: {e}"))?;
    if let Some(n) = input.fail_after {
        // A run of MAX_OPS ops makes a few hundred writes and syncs: fold
        // the fault point into that range so most inputs crash mid-run.
        disk.cut_power_after(u64::from(n % 400));
    }
    let target = OnDisk {
        boxed: BoxQueue::new(queue.clone()),
        queue: queue.clone(),
    };
    let mut reference = Reference::new(&input.setup, true, false);
    let mut system = System::new(Box::new(target), clock.clone(), true);
    // The states the disk may hold after the cut: the last acknowledged one,
    // and the one of the operation in flight when the power went.
    let mut allowed = vec![reference.clone()];
    for op in input.ops.iter().take(MAX_OPS) {
        let before = reference.clone();
        let (call, expected) = reference.apply(op);
        let got = system.run(&call, &reference).await;
        if system.normalise(&got) == system.normalise(&expected) {
            continue;
        }
        if disk.is_dead() {
            allowed = vec![before, reference.clone()];
            break;
        }
        return Err(format!(
            "before any fault, {call:?}\n  model:  {expected:?}\n  system: {got:?}"
        ));
    }
    if !disk.is_dead() {
        allowed = vec![reference.clone()];
        // The power goes now: nothing the queue does from here on reaches
        // the disk.
        disk.cut_power_after(0);
    }
    let _ = queue.close().await;
    drop(system);
    let (image, _) = disk.after_power_loss(input.keep_seed);
    let reopened = open_once(SimDisk::from_image(image).backend(), config, ahead)
        .await
        .map_err(|e| format!("the file does not open after the cut: {e}"))?;
    let located = reopened
        .audit()
        .await
        .map_err(|e| format!("recount after the cut: {e}"))?;
    let stats = reopened
        .stats()
        .await
        .map_err(|e| format!("stats after the cut: {e}"))?;
    let paused = reopened
        .paused_flows()
        .await
        .map_err(|e| format!("paused flows after the cut: {e}"))?;
    let _ = reopened.close().await;
    let now = crate::Clock::now_ms(&clock);
    let matches = |r: &Reference| {
        let m = r.model();
        m.locations() == located && m.stats(now) == stats && m.paused_flows() == paused
    };
    if allowed.iter().any(matches) {
        return Ok(());
    }
    let want: Vec<(BTreeMap<u64, ItemState>, Stats)> = allowed
        .iter()
        .map(|r| (r.model().locations(), r.model().stats(now)))
        .collect();
    Err(format!(
        "state after the cut is none of the allowed ones\n  allowed: {want:?}\n  found:   {located:?} {stats:?}"
    ))
}

/// Deepest nesting of arrays, maps and sets a `redis_reply` input builds.
#[cfg(feature = "redis")]
const REPLY_DEPTH: usize = 4;

/// Most values (all levels) one `redis_reply` input builds.
#[cfg(feature = "redis")]
const REPLY_NODES: usize = 256;

/// An arbitrary reply the Redis client can hand the backend: every variant of
/// `redis::Value` in redis 1.8 (without `num-bigint`, so `BigNumber` holds
/// bytes), nested at most [`REPLY_DEPTH`] deep and [`REPLY_NODES`] in all.
/// Decimal text and lane names are drawn often so the item and claim
/// parsers get past their first field.
#[cfg(feature = "redis")]
fn reply_value(
    u: &mut Unstructured<'_>,
    depth: usize,
    nodes: &mut usize,
) -> arbitrary::Result<redis::Value> {
    use redis::{PushKind, Value, VerbatimFormat};
    *nodes = nodes.saturating_sub(1);
    let nested = depth < REPLY_DEPTH && *nodes > 0;
    let top = if nested { 19 } else { 13 };
    let children = |u: &mut Unstructured<'_>, nodes: &mut usize| {
        let n = u.int_in_range(0..=12usize)?;
        let mut out = Vec::with_capacity(n);
        for _ in 0..n {
            if *nodes == 0 {
                break;
            }
            out.push(reply_value(u, depth + 1, nodes)?);
        }
        arbitrary::Result::Ok(out)
    };
    let pairs = |u: &mut Unstructured<'_>, nodes: &mut usize| {
        let flat = children(u, nodes)?;
        let mut it = flat.into_iter();
        let mut out = Vec::new();
        while let (Some(k), Some(v)) = (it.next(), it.next()) {
            out.push((k, v));
        }
        arbitrary::Result::Ok(out)
    };
    Ok(match u.int_in_range(0..=top)? {
        0 => Value::Nil,
        1 => Value::Int(u.arbitrary()?),
        2 => Value::BulkString(u.arbitrary()?),
        3 => Value::SimpleString(u.arbitrary()?),
        4 => Value::Okay,
        5 => Value::Double(u.arbitrary()?),
        6 => Value::Boolean(u.arbitrary()?),
        7 => Value::VerbatimString {
            format: match u.int_in_range(0..=2u8)? {
                0 => VerbatimFormat::Text,
                1 => VerbatimFormat::Markdown,
                _ => VerbatimFormat::Unknown(u.arbitrary()?),
            },
            text: u.arbitrary()?,
        },
        8 => Value::BigNumber(u.arbitrary()?),
        9 => {
            let code: String = u.arbitrary()?;
            let detail: Option<String> = u.arbitrary()?;
            match redis::ServerError::try_from(redis::make_extension_error(code, detail)) {
                Ok(e) => Value::ServerError(e),
                Err(_) => Value::Nil,
            }
        }
        // Numbers as the scripts send them: decimal text, in and out of
        // range, with and without padding.
        10 => {
            let n: i128 = match u.int_in_range(0..=3u8)? {
                0 => i128::from(u.arbitrary::<u64>()?),
                1 => i128::from(u.arbitrary::<i64>()?),
                2 => i128::from(u.int_in_range(0..=10u8)?),
                _ => u.arbitrary()?,
            };
            let pad = if u.arbitrary()? { " " } else { "" };
            Value::BulkString(format!("{pad}{n}{pad}").into_bytes())
        }
        11 => Value::BulkString(Vec::new()),
        12 => {
            let word = *u.choose(&["backlog", "due", "parked", "Due", "", "due\0"])?;
            Value::BulkString(word.as_bytes().to_vec())
        }
        13 => Value::Int(i64::from(u.int_in_range(0..=10u8)?)),
        14 | 15 => Value::Array(children(u, nodes)?),
        16 => Value::Set(children(u, nodes)?),
        17 => Value::Map(pairs(u, nodes)?),
        18 => Value::Attribute {
            data: Box::new(reply_value(u, depth + 1, nodes)?),
            attributes: pairs(u, nodes)?,
        },
        _ => Value::Push {
            kind: match u.int_in_range(0..=2u8)? {
                0 => PushKind::Message,
                1 => PushKind::Invalidate,
                _ => PushKind::Other(u.arbitrary()?),
            },
            data: children(u, nodes)?,
        },
    })
}

/// Every parser of `backend::redis::reply` on `v`: each gives a value or an
/// error (`Decode`, or `Backend` for a server error), and the results agree
/// with each other.
#[cfg(feature = "redis")]
fn every_reply_parser(v: &redis::Value, index: usize) {
    use crate::backend::redis::reply;
    fn ok<T>(r: crate::error::Result<T>) -> Option<T> {
        match r {
            Ok(t) => Some(t),
            Err(Error::Decode { .. } | Error::Backend { .. }) => None,
            Err(other) => panic!("reply parser gave an unexpected error: {other:?}"),
        }
    }
    if let Some(a) = ok(reply::array(v, "fuzz")) {
        for i in [0, 1, 5, 8, 9, index] {
            let got = ok(reply::at(a, i, "fuzz"));
            assert_eq!(
                got.is_some(),
                i < a.len(),
                "at({i}) of {} elements",
                a.len()
            );
        }
    }
    let raw = ok(reply::bytes(v, "fuzz"));
    if let Some(t) = ok(reply::text(v, "fuzz")) {
        assert_eq!(
            raw.as_deref(),
            Some(t.as_bytes()),
            "text disagrees with bytes"
        );
    }
    let int = ok(reply::int(v, "fuzz"));
    let uint = ok(reply::uint(v, "fuzz"));
    if let Some(n) = uint {
        assert_eq!(
            int.and_then(|i| u64::try_from(i).ok()),
            Some(n),
            "uint disagrees with int"
        );
    }
    if let Some(n) = ok(reply::u32_of(v, "fuzz")) {
        assert_eq!(uint, Some(u64::from(n)), "u32 disagrees with uint");
    }
    if let Some(Some(n)) = ok(reply::opt_uint(v, "fuzz")) {
        assert_eq!(uint, Some(n), "opt_uint disagrees with uint");
    }
    let _ = ok(reply::lane(v));
    // Peeked items carry the tier at 6, dead letters at 8, claims at 9.
    let _ = ok(reply::item(v, 6));
    let _ = ok(reply::item(v, 8));
    let item = ok(reply::item(v, 9));
    if let Some(c) = ok(reply::claimed(v)) {
        assert_eq!(item.as_ref(), Some(&c.item), "claim disagrees with item");
        assert_eq!(
            (c.receipt.id, c.receipt.delivery),
            (c.item.id, c.item.deliveries)
        );
    }
    if let Some(cs) = ok(reply::claims(v)) {
        let n = ok(reply::array(v, "fuzz")).map(<[redis::Value]>::len);
        assert_eq!(Some(cs.len()), n, "one claim per element");
    }
}

/// Target `redis_reply`: an arbitrary Redis reply (every `redis::Value`
/// variant, bounded depth and size) into every parser of the Redis backend's
/// script replies (SPEC section 5: no reply may panic the process) gives a
/// value or an error; the parsers agree with each other.
///
/// # Panics
///
/// When a parser panics, gives an error other than `Decode`/`Backend`, or
/// two parsers disagree.
#[cfg(feature = "redis")]
pub fn redis_reply(bytes: &[u8]) {
    let mut u = Unstructured::new(bytes);
    let index = usize::from(u.arbitrary::<u8>().unwrap_or(0));
    let mut nodes = REPLY_NODES;
    let Ok(root) = reply_value(&mut u, 0, &mut nodes) else {
        return;
    };
    every_reply_parser(&root, index);
    if let redis::Value::Array(a) | redis::Value::Set(a) = &root {
        for v in a {
            every_reply_parser(v, index);
        }
    }
}

/// Target `decode_request`: the first byte picks an operation of
/// [`wire::OPS`](crate::wire::OPS) (or, past the list, takes the next bytes
/// as an operation name), the rest is the request body. Decoding never
/// panics (SPEC section 10: a malformed request is a 400, never a crash);
/// an error is one line; a decoded request encodes back to the same
/// request.
///
/// # Panics
///
/// When decoding panics, an error spans lines, or the round trip differs.
#[cfg(any(feature = "server", feature = "remote"))]
pub fn decode_request(data: &[u8]) {
    use crate::wire::{OPS, Request};
    let Some((&pick, rest)) = data.split_first() else {
        return;
    };
    let (op, body): (String, &[u8]) = match OPS.get(usize::from(pick)) {
        Some(op) => ((*op).to_string(), rest),
        None => {
            let cut = rest.iter().position(|&b| b == b' ').unwrap_or(rest.len());
            let (name, body) = rest.split_at(cut);
            (String::from_utf8_lossy(name).into_owned(), body)
        }
    };
    match Request::decode(&op, body) {
        Ok(request) => {
            let (again_op, again_body) = request.encode();
            assert_eq!(again_op, op, "operation changed in the round trip");
            let again = Request::decode(again_op, &again_body)
                .unwrap_or_else(|e| panic!("re-encoded request does not decode: {e}"));
            assert_eq!(again, request, "request changed in the round trip");
            // The contract's request it carries goes back to the same wire
            // request once normalised (a cost of 0 reads as 1).
            let max = std::time::Duration::MAX;
            if let Ok(queue) = request.into_queue(max) {
                let name = queue.name();
                let once =
                    Request::from_queue(queue).unwrap_or_else(|| panic!("{name} has no wire form"));
                assert_eq!(once.encode().0, name, "route and operation name differ");
                let twice = once
                    .clone()
                    .into_queue(max)
                    .ok()
                    .and_then(Request::from_queue);
                assert_eq!(twice, Some(once), "contract round trip is not stable");
            }
        }
        Err(e) => {
            let text = e.to_string();
            assert!(
                !text.contains('\n') && !text.is_empty(),
                "error is not one line: {text:?}"
            );
        }
    }
}
