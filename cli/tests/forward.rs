//! Store and forward (SPEC section 11) on real `redis-server` processes and
//! real queue files: what a forwarded item keeps, that a batch sent again
//! journals nothing twice, and the failure runs of issue 16, each checking
//! that every item whose local add returned `Ok` arrives in Redis exactly
//! once, in local id order per origin, and that the local queue ends empty.
//!
//! - a link proxy cutting or stalling the connection at random moments
//!   (`WORKJOURNAL_FORWARD_LINK_FAULTS` faults, default 40);
//! - SIGKILL of a forwarding child process at random moments
//!   (`WORKJOURNAL_FORWARD_KILL_CYCLES` cycles, default 100); the child is
//!   this test binary run again with `WORKJOURNAL_FORWARD_CHILD` set;
//! - SIGKILL of Redis with `appendfsync always`
//!   (`WORKJOURNAL_FORWARD_REDIS_KILLS` kills, default 12);
//! - two origins forwarding into one namespace at once.
//!
//! `WORKJOURNAL_FORWARD_SEED` replays one run's random choices.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

#[path = "../../tests/workload/mod.rs"]
mod workload;

use workjournal::forward::{ForwardOptions, Forwarder, RunUntil};
use workjournal::testing::RedisServer;
use workjournal::testing::RedisServerOptions;
use workjournal::testing::proxy::LinkProxy;
use workjournal::{
    ClaimFrom, Config, EmbeddedQueue, Error, Lane, ManualClock, NewItem, Origin, RedisOptions,
    RedisQueue, RetryPolicy, WorkQueue,
};
use workload::{Rng, seed_from_env};

const CHILD_ENV: &str = "WORKJOURNAL_FORWARD_CHILD";
const CHILD_URL_ENV: &str = "WORKJOURNAL_FORWARD_CHILD_URL";
const CHILD_NS_ENV: &str = "WORKJOURNAL_FORWARD_CHILD_NS";

fn count_from_env(var: &str, default: u64) -> u64 {
    std::env::var(var)
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(default)
}

fn seed() -> u64 {
    let s = seed_from_env("WORKJOURNAL_FORWARD_SEED");
    eprintln!("WORKJOURNAL_FORWARD_SEED={s}");
    s
}

/// Short bounds, so that a cut or stalled link fails a call quickly.
fn fast_options() -> RedisOptions {
    RedisOptions::default()
        .connect_timeout(Duration::from_millis(300))
        .response_timeout(Duration::from_millis(300))
}

async fn fleet(url: &str, ns: &str, config: Config) -> RedisQueue {
    RedisQueue::connect(url, ns, config, fast_options())
        .await
        .unwrap()
}

/// Small batches (more of them, more moments to fail at) and a quick
/// back-off.
fn test_forward_options(rng: &mut Rng) -> ForwardOptions {
    ForwardOptions::default()
        .max_batch_items(1 + rng.below(24) as usize)
        .max_batch_bytes(4096)
        .backoff(
            RetryPolicy::default()
                .base(Duration::from_millis(5))
                .max_delay(Duration::from_millis(60)),
        )
        .idle_wait(Duration::from_millis(20))
}

/// One item as Redis holds it, read with plain commands.
#[derive(Debug, Clone)]
struct Row {
    id: u64,
    fields: HashMap<String, Vec<u8>>,
}

impl Row {
    fn text(&self, f: &str) -> Option<String> {
        self.fields
            .get(f)
            .map(|v| String::from_utf8_lossy(v).into_owned())
    }

    fn num(&self, f: &str) -> Option<u64> {
        self.text(f).and_then(|t| t.parse().ok())
    }
}

async fn rows(url: &str, ns: &str) -> Vec<Row> {
    let mut conn = workjournal::testing::raw_connection(url).await.unwrap();
    let prefix = format!("{{{ns}}}:item:");
    let keys: Vec<String> = redis::cmd("KEYS")
        .arg(format!("{prefix}*"))
        .query_async(&mut conn)
        .await
        .unwrap();
    let mut out = Vec::new();
    for k in keys {
        let fields: HashMap<String, Vec<u8>> = redis::cmd("HGETALL")
            .arg(&k)
            .query_async(&mut conn)
            .await
            .unwrap();
        let id = k[prefix.len()..].parse().unwrap();
        out.push(Row { id, fields });
    }
    out.sort_by_key(|r| r.id);
    out
}

/// What the producers know: payloads of adds that returned `Ok` (by local
/// id), and payloads of adds whose outcome is unknown (killed in flight).
#[derive(Debug, Default)]
struct Known {
    acked: BTreeMap<u64, Vec<u8>>,
    unknown: BTreeSet<Vec<u8>>,
}

/// The checks of issue 16, for one origin: every acknowledged add arrived
/// exactly once with its payload, in local id order; nothing else arrived
/// but adds whose outcome is unknown, each at most once.
fn check_origin(rows: &[Row], origin: &str, known: &Known) {
    let mine: Vec<&Row> = rows
        .iter()
        .filter(|r| r.text("origin").as_deref() == Some(origin))
        .collect();
    let mut last = 0u64;
    let mut seen = BTreeSet::new();
    for r in &mine {
        let oid = r.num("oid").unwrap();
        assert!(
            oid > last,
            "origin {origin}: local id {oid} arrived after {last} (redis id {})",
            r.id
        );
        last = oid;
        seen.insert(oid);
        let payload = r.fields.get("payload").cloned().unwrap_or_default();
        match known.acked.get(&oid) {
            Some(p) => assert_eq!(p, &payload, "origin {origin}: payload of local id {oid}"),
            None => assert!(
                known.unknown.contains(&payload),
                "origin {origin}: local id {oid} arrived but no add of it was made"
            ),
        }
    }
    let missing: Vec<u64> = known
        .acked
        .keys()
        .filter(|id| !seen.contains(id))
        .copied()
        .collect();
    assert!(
        missing.is_empty(),
        "origin {origin}: acknowledged local adds never arrived: {missing:?}"
    );
}

async fn assert_local_empty(q: &EmbeddedQueue) {
    let s = q.stats().await.unwrap();
    assert_eq!(
        (s.backlog, s.delayed, s.pending, s.parked),
        (0, 0, 0, 0),
        "local queue not empty: {s:?}"
    );
    assert!(q.audit().await.unwrap().is_empty());
}

/// Forward everything left, through a link without faults.
async fn drain(local: &EmbeddedQueue, url: &str, ns: &str, origin: &str) {
    let p = forward_all(&forwarder(local, url, ns, origin).await).await;
    assert_eq!(p.lag.count, 0);
}

/// A fresh queue file `edge.redb` in `dir`.
async fn edge(dir: &Path) -> EmbeddedQueue {
    EmbeddedQueue::open(dir.join("edge.redb"), Config::default())
        .await
        .unwrap()
}

/// Add one item with `payload` to `flow`; its id.
async fn add_in(q: &EmbeddedQueue, payload: &str, flow: &str) -> u64 {
    q.add(NewItem::new(payload.as_bytes().to_vec()).flow(flow))
        .await
        .unwrap()
        .id
}

/// A forwarder of every flow of `local` into namespace `ns` at `url`.
async fn forwarder(local: &EmbeddedQueue, url: &str, ns: &str, origin: &str) -> Forwarder {
    Forwarder::new(
        local.clone(),
        fleet(url, ns, Config::default()).await,
        origin,
    )
    .await
    .unwrap()
}

/// Forward until nothing waits.
async fn forward_all(f: &Forwarder) -> workjournal::forward::Progress {
    f.run(RunUntil::Empty, std::future::pending(), |_| {})
        .await
        .unwrap()
}

/// Forward on a task until the returned sender fires (or is dropped).
fn forward_in_background(
    f: Forwarder,
) -> (
    tokio::sync::oneshot::Sender<()>,
    tokio::task::JoinHandle<workjournal::forward::Progress>,
) {
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        f.run(
            RunUntil::Stopped,
            async {
                let _ = stop_rx.await;
            },
            |_| {},
        )
        .await
        .unwrap()
    });
    (stop_tx, task)
}

// ---- what a forwarded item keeps ------------------------------------------

#[tokio::test]
async fn a_forwarded_item_keeps_its_fields_and_names_its_origin() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let now = local.now_ms().await.unwrap();
    let later = now + 3_600_000;
    let plain = local.add(NewItem::new(b"plain".to_vec())).await.unwrap().id;
    let delayed = local
        .add_delayed(NewItem::new(b"later".to_vec()).flow("mail"), later)
        .await
        .unwrap()
        .id;
    let keyed = local
        .add(NewItem::new(b"keyed".to_vec()).dedup_key("k-1"))
        .await
        .unwrap()
        .id;
    let due = local
        .add_delayed(NewItem::new(b"due".to_vec()), now.saturating_sub(10))
        .await
        .unwrap()
        .id;
    local.promote_due().await.unwrap();
    let before = local.peek(10).await.unwrap();

    let remote = fleet(&server.url(), "edge", Config::default()).await;
    let f = Forwarder::new(local.clone(), remote.clone(), "site-1")
        .await
        .unwrap();
    assert_eq!(f.lag().await.unwrap().count, 4);
    let p = forward_all(&f).await;
    assert_eq!((p.items, p.added, p.skipped), (4, 4, 0));
    assert_eq!(p.lag.count, 0);
    assert_local_empty(&local).await;

    let rows = rows(&server.url(), "edge").await;
    let by_oid: BTreeMap<u64, &Row> = rows.iter().map(|r| (r.num("oid").unwrap(), r)).collect();
    assert_eq!(by_oid.len(), 4);
    let d = by_oid[&delayed];
    assert_eq!(d.text("flow").as_deref(), Some("mail"));
    assert_eq!(d.num("nb"), Some(later));
    assert_eq!(d.text("st").as_deref(), Some("delayed"));
    for item in &before {
        assert_eq!(by_oid[&item.id].num("enq"), Some(item.enqueued_at_ms));
    }
    assert_eq!(by_oid[&plain].text("st").as_deref(), Some("backlog"));
    assert_eq!(
        remote.origin(by_oid[&keyed].id).await.unwrap(),
        Some(Origin {
            name: "site-1".into(),
            id: keyed
        })
    );
    // The dedup key travelled: the fleet refuses a second item under it.
    assert!(
        remote
            .add(NewItem::new(b"again".to_vec()).dedup_key("k-1"))
            .await
            .unwrap()
            .duplicate
    );
    // A delayed item stays delayed; the one already due comes first.
    let got = remote
        .claim(10, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    let order: Vec<u64> = got.iter().map(|c| by_oid_of(&rows, c.item.id)).collect();
    assert_eq!(order, vec![due, plain, keyed]);
    let added_here = remote.add(NewItem::new(b"x".to_vec())).await.unwrap().id;
    assert_eq!(remote.origin(added_here).await.unwrap(), None);
}

// Issue 16 with issue 14: a forwarded item keeps its priority tier (and
// its rate-limit cost), in
// the backlog and through delayed, and the fleet ranks it by that tier.
#[tokio::test]
async fn a_forwarded_item_keeps_its_priority_tier() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let now = local.now_ms().await.unwrap();
    let low = add_in(&local, "low", "").await;
    let high = local
        .add(NewItem::new(b"high".to_vec()).priority(7).cost(3))
        .await
        .unwrap()
        .id;
    let timer = local
        .add_delayed(NewItem::new(b"timer".to_vec()).priority(3), now + 3_600_000)
        .await
        .unwrap()
        .id;
    let clock = ManualClock::new(now);
    let remote = fleet(
        &server.url(),
        "edge",
        Config::default().clock(clock.clone()),
    )
    .await;
    let f = Forwarder::new(local.clone(), remote.clone(), "site-1")
        .await
        .unwrap();
    assert_eq!(forward_all(&f).await.added, 3);
    assert_local_empty(&local).await;
    let rows = rows(&server.url(), "edge").await;
    let tier_of = |oid: u64| {
        rows.iter()
            .find(|r| r.num("oid") == Some(oid))
            .and_then(|r| r.num("pri"))
    };
    assert_eq!(
        (tier_of(low), tier_of(high), tier_of(timer)),
        (None, Some(7), Some(3))
    );
    let got = remote
        .claim(10, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    let order: Vec<(u64, u8)> = got
        .iter()
        .map(|c| (by_oid_of(&rows, c.item.id), c.item.priority))
        .collect();
    assert_eq!(order, vec![(high, 7), (low, 0)]);
    // Its cost in rate-limit permits too (SPEC 3, Flow limits).
    assert_eq!((got[0].item.cost, got[1].item.cost), (3, 1));
    assert_eq!(remote.stats().await.unwrap().delayed, 1);
    // The timer comes due by the fleet's clock with its tier.
    clock.advance(Duration::from_secs(2 * 3600));
    let got = remote
        .claim(10, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(by_oid_of(&rows, got[0].item.id), timer);
    assert_eq!((got[0].item.priority, got[0].lane), (3, Lane::Due));
}

fn by_oid_of(rows: &[Row], redis_id: u64) -> u64 {
    rows.iter()
        .find(|r| r.id == redis_id)
        .and_then(|r| r.num("oid"))
        .unwrap()
}

#[tokio::test]
async fn a_batch_sent_again_after_a_crash_journals_nothing_twice() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("edge.redb");
    let backup = dir.path().join("backup.redb");
    let local = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    let mut known = Known::default();
    for i in 0..30u32 {
        let p = format!("item {i}").into_bytes();
        let id = local.add(NewItem::new(p.clone())).await.unwrap().id;
        known.acked.insert(id, p);
    }
    // Make the journal id, then keep a copy of the file: restoring it later
    // is the state of a forwarder that crashed after Redis took its batches
    // and before it removed them locally.
    forwarder(&local, &server.url(), "ns", "o").await;
    local.close().await.unwrap();
    std::fs::copy(&path, &backup).unwrap();
    let local = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    drain(&local, &server.url(), "ns", "o").await;
    local.close().await.unwrap();
    drop(local);
    std::fs::copy(&backup, &path).unwrap();

    let local = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    let f = forwarder(&local, &server.url(), "ns", "o")
        .await
        .options(ForwardOptions::default().max_batch_items(7));
    let p = forward_all(&f).await;
    assert_eq!((p.items, p.added, p.skipped), (30, 0, 30));
    assert_local_empty(&local).await;
    let rows = rows(&server.url(), "ns").await;
    assert_eq!(rows.len(), 30);
    check_origin(&rows, "o", &known);
}

#[tokio::test]
async fn another_file_under_the_same_origin_name_is_refused() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    for (i, name) in ["one.redb", "two.redb"].into_iter().enumerate() {
        let local = EmbeddedQueue::open(dir.path().join(name), Config::default())
            .await
            .unwrap();
        local.add(NewItem::new(b"x".to_vec())).await.unwrap();
        let f = forwarder(&local, &server.url(), "ns", "dup").await;
        let r = f.forward_batch(false).await;
        if i == 0 {
            assert_eq!(r.unwrap().unwrap().added, 1);
        } else {
            let e = r.unwrap_err();
            assert!(matches!(e, Error::InvalidInput(_)), "{e}");
            assert!(e.to_string().contains("another journal"), "{e}");
            // Nothing left the file.
            assert_eq!(local.stats().await.unwrap().backlog, 1);
        }
    }
    assert!(
        Forwarder::new(
            EmbeddedQueue::open(dir.path().join("three.redb"), Config::default())
                .await
                .unwrap(),
            fleet(&server.url(), "ns", Config::default()).await,
            "bad name"
        )
        .await
        .is_err()
    );
}

#[tokio::test]
async fn only_the_named_flows_leave_and_a_local_claim_is_forwarded_late() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let a1 = add_in(&local, "a1", "a").await;
    let b1 = add_in(&local, "b1", "b").await;
    let a2 = add_in(&local, "a2", "a").await;
    // A local consumer holds a1 when forwarding starts.
    let held = local
        .claim(1, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(held.item.id, a1);
    let remote = fleet(&server.url(), "ns", Config::default()).await;
    let f = Forwarder::new(local.clone(), remote.clone(), "edge")
        .await
        .unwrap()
        .flows(vec!["a".into()]);
    let p = forward_all(&f).await;
    assert_eq!(
        p.added, 1,
        "only a2 may leave: a1 is held, b1 is not forwarded"
    );
    let s = local.stats().await.unwrap();
    assert_eq!((s.backlog, s.pending), (1, 1));
    // The local attempt fails: a1 comes back below the mark and goes late.
    local.retry(held.receipt, 0).await.unwrap();
    // Keep the file as it is now: restored, it is a forwarder that crashed
    // after Redis took the late batch and before it removed it.
    drop(f);
    local.close().await.unwrap();
    drop(local);
    let path = dir.path().join("edge.redb");
    let backup = dir.path().join("backup.redb");
    std::fs::copy(&path, &backup).unwrap();
    for round in 0..2 {
        let local = edge(dir.path()).await;
        let f = forwarder(&local, &server.url(), "ns", "edge")
            .await
            .flows(vec!["a".into()]);
        let p = forward_all(&f).await;
        assert_eq!(
            (p.added, p.skipped),
            if round == 0 { (1, 0) } else { (0, 1) }
        );
        let rows = rows(&server.url(), "ns").await;
        let oids: Vec<u64> = rows.iter().map(|r| r.num("oid").unwrap()).collect();
        assert_eq!(oids, vec![a2, a1]);
        let left = local.peek(10).await.unwrap();
        assert_eq!(left.iter().map(|i| i.id).collect::<Vec<_>>(), vec![b1]);
        drop(f);
        local.close().await.unwrap();
        drop(local);
        std::fs::copy(&backup, &path).unwrap();
    }
}

#[tokio::test]
async fn an_item_whose_dedup_key_the_fleet_holds_is_taken_as_a_duplicate() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let remote = fleet(&server.url(), "ns", Config::default()).await;
    let first = remote
        .add(NewItem::new(b"fleet".to_vec()).dedup_key("order-7"))
        .await
        .unwrap()
        .id;
    local
        .add(NewItem::new(b"edge".to_vec()).dedup_key("order-7"))
        .await
        .unwrap();
    local.add(NewItem::new(b"other".to_vec())).await.unwrap();
    let p = forward_all(&forwarder(&local, &server.url(), "ns", "edge").await).await;
    assert_eq!((p.items, p.added, p.duplicates), (2, 1, 1));
    assert_local_empty(&local).await;
    let rows = rows(&server.url(), "ns").await;
    assert_eq!(rows.len(), 2);
    assert_eq!(rows[0].id, first);
    assert_eq!(rows[1].text("payload").as_deref(), Some("other"));
}

#[tokio::test]
async fn a_full_fleet_queue_backs_off_until_consumers_make_room() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let mut known = Known::default();
    for i in 0..40u32 {
        let p = format!("{i}").into_bytes();
        known
            .acked
            .insert(local.add(NewItem::new(p.clone())).await.unwrap().id, p);
    }
    let config = Config::default().max_backlog(Some(10));
    let remote = fleet(&server.url(), "ns", config).await;
    let mut rng = Rng(seed());
    let f = Forwarder::new(local.clone(), remote.clone(), "edge")
        .await
        .unwrap()
        .options(test_forward_options(&mut rng).max_batch_items(8));
    let consumer = {
        let remote = remote.clone();
        tokio::spawn(async move {
            let mut done = 0;
            while done < 40 {
                tokio::time::sleep(Duration::from_millis(20)).await;
                for c in remote
                    .claim(3, Duration::ZERO, ClaimFrom::All)
                    .await
                    .unwrap()
                {
                    remote.ack(c.receipt).await.unwrap();
                    done += 1;
                }
            }
        })
    };
    let full = Arc::new(Mutex::new(0u64));
    let seen = full.clone();
    let p = f
        .run(RunUntil::Empty, std::future::pending(), move |p| {
            if p.last_error.as_deref().is_some_and(|e| e.contains("full")) {
                *seen.lock().unwrap() += 1;
            }
        })
        .await
        .unwrap();
    assert!(*full.lock().unwrap() > 0, "the fleet queue was never full");
    assert_eq!(p.items, 40);
    consumer.await.unwrap();
    assert_local_empty(&local).await;
}

// ---- failure runs ---------------------------------------------------------

/// Add items (some delayed, some in a flow, some in batches) until `stop`,
/// recording what was acknowledged.
async fn produce(
    local: EmbeddedQueue,
    known: Arc<Mutex<Known>>,
    mut rng: Rng,
    n: u64,
    tag: String,
) {
    let mut made = 0u64;
    while made < n {
        let k = 1 + rng.below(4);
        let items: Vec<NewItem> = (0..k)
            .map(|j| {
                let item = NewItem::new(format!("{tag}-{}", made + j).into_bytes());
                if rng.below(3) == 0 {
                    item.flow("f")
                } else {
                    item
                }
            })
            .collect();
        made += k;
        let payloads: Vec<Vec<u8>> = items.iter().map(|i| i.payload().to_vec()).collect();
        let ids: Vec<u64> = if rng.below(4) == 0 {
            let now = local.now_ms().await.unwrap();
            let mut ids = Vec::new();
            for item in items {
                ids.push(
                    local
                        .add_delayed(item, now + rng.below(2000))
                        .await
                        .unwrap()
                        .id,
                );
            }
            ids
        } else {
            local
                .add_batch(items)
                .await
                .unwrap()
                .into_iter()
                .map(|a| a.id)
                .collect()
        };
        {
            let mut kn = known.lock().unwrap();
            for (id, p) in ids.into_iter().zip(payloads) {
                kn.acked.insert(id, p);
            }
        }
        tokio::time::sleep(Duration::from_micros(rng.below(2000))).await;
    }
}

/// One failure run: a producer adds `n` items to a fresh file while a
/// forwarder hands them over through `forward_url`, and `faults` runs
/// meanwhile; then whatever is left is forwarded through `check_url` (a
/// link without faults) and the issue 16 checks run. The forwarder's totals.
async fn fault_run(
    forward_url: &str,
    check_url: &str,
    n: u64,
    rng: &mut Rng,
    faults: impl std::future::Future<Output = ()>,
) -> workjournal::forward::Progress {
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let known = Arc::new(Mutex::new(Known::default()));
    let producer = tokio::spawn(produce(
        local.clone(),
        known.clone(),
        Rng(rng.next()),
        n,
        "p".into(),
    ));
    let f = forwarder(&local, forward_url, "ns", "edge")
        .await
        .options(test_forward_options(rng));
    let (stop_tx, forwarding) = forward_in_background(f);
    faults.await;
    producer.await.unwrap();
    let _ = stop_tx.send(());
    let p = forwarding.await.unwrap();
    drain(&local, check_url, "ns", "edge").await;
    assert_local_empty(&local).await;
    let rows = rows(check_url, "ns").await;
    check_origin(&rows, "edge", &known.lock().unwrap());
    eprintln!(
        "{} acknowledged adds arrived once; the forwarder failed {} times, and Redis skipped {} items sent again",
        known.lock().unwrap().acked.len(),
        p.failures,
        p.skipped
    );
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_link_cut_or_stalled_at_random_moments_loses_and_duplicates_nothing() {
    let faults = count_from_env("WORKJOURNAL_FORWARD_LINK_FAULTS", 40);
    let mut rng = Rng(seed());
    let server = RedisServer::start().unwrap();
    let proxy = LinkProxy::start(server.port()).await.unwrap();
    let mut chaos = Rng(rng.next());
    let p = fault_run(
        &proxy.redis_url(),
        &server.url(),
        faults * 12,
        &mut rng,
        async {
            // The first fault is a cut as soon as the forwarder has
            // connected, while the producer has most of its items still to
            // add: with the faults left to chance, a seed whose first second
            // held only stalls let the whole run go through before any cut,
            // and the forwarder never had to connect again.
            let deadline = std::time::Instant::now() + Duration::from_secs(10);
            while proxy.accepted() == 0 && std::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2)).await;
            }
            proxy.cut();
            for _ in 1..faults {
                tokio::time::sleep(Duration::from_millis(chaos.below(40))).await;
                if chaos.below(2) == 0 {
                    proxy.cut();
                } else {
                    proxy.stall(true);
                    tokio::time::sleep(Duration::from_millis(chaos.below(700))).await;
                    proxy.stall(false);
                }
            }
        },
    )
    .await;
    assert!(p.failures > 0, "no fault reached the forwarder: {p:?}");
    assert!(proxy.accepted() > 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_redis_with_aof_always_loses_and_duplicates_nothing() {
    let kills = count_from_env("WORKJOURNAL_FORWARD_REDIS_KILLS", 12);
    let mut rng = Rng(seed());
    let mut server = RedisServer::start_with(RedisServerOptions {
        aof_always: true,
        ..RedisServerOptions::default()
    })
    .unwrap();
    let url = server.url();
    let mut chaos = Rng(rng.next());
    let p = fault_run(&url, &url, kills * 40, &mut rng, async {
        for _ in 0..kills {
            tokio::time::sleep(Duration::from_millis(5 + chaos.below(80))).await;
            server.kill();
            tokio::time::sleep(Duration::from_millis(chaos.below(50))).await;
            server.restart().unwrap();
        }
    })
    .await;
    assert!(p.failures > 0, "no kill reached the forwarder: {p:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_origins_forward_into_one_namespace_at_once() {
    let mut rng = Rng(seed());
    let server = RedisServer::start().unwrap();
    let proxy = LinkProxy::start(server.port()).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut runs = Vec::new();
    for origin in ["north", "south"] {
        let local =
            EmbeddedQueue::open(dir.path().join(format!("{origin}.redb")), Config::default())
                .await
                .unwrap();
        let known = Arc::new(Mutex::new(Known::default()));
        let producer = tokio::spawn(produce(
            local.clone(),
            known.clone(),
            Rng(rng.next()),
            400,
            origin.to_string(),
        ));
        let f = forwarder(&local, &proxy.redis_url(), "shared", origin)
            .await
            .options(test_forward_options(&mut rng));
        let forwarding = tokio::spawn(async move {
            producer.await.unwrap();
            forward_all(&f).await
        });
        runs.push((origin, local, known, forwarding));
    }
    for _ in 0..10 {
        tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        proxy.cut();
    }
    let mut all = Vec::new();
    for (origin, local, known, forwarding) in runs {
        forwarding.await.unwrap();
        drain(&local, &server.url(), "shared", origin).await;
        assert_local_empty(&local).await;
        all.push((origin, known));
    }
    let rows = rows(&server.url(), "shared").await;
    for (origin, known) in &all {
        check_origin(&rows, origin, &known.lock().unwrap());
    }
    let total: usize = all.iter().map(|(_, k)| k.lock().unwrap().acked.len()).sum();
    assert_eq!(rows.len(), total);
}

// ---- SIGKILL of the forwarder ---------------------------------------------

/// One protocol line to the parent; a parent that has gone ends the child.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(0);
    }
}

/// The child side: does nothing unless started by the kill test with
/// `WORKJOURNAL_FORWARD_CHILD` set; then it adds items to that file (`B`
/// before an add with its payloads, `K id=payload...` after it returned
/// `Ok`) while a forwarder hands them over, until it is killed.
#[test]
fn forward_child_process_entry() {
    let Ok(path) = std::env::var(CHILD_ENV) else {
        return;
    };
    let url = std::env::var(CHILD_URL_ENV).unwrap();
    let ns = std::env::var(CHILD_NS_ENV).unwrap();
    let seed: u64 = std::env::var("WORKJOURNAL_FORWARD_CHILD_SEED")
        .unwrap()
        .parse()
        .unwrap();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    say("");
    rt.block_on(async move {
        let mut rng = Rng(seed);
        let local = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
        let f = forwarder(&local, &url, &ns, "edge")
            .await
            .options(test_forward_options(&mut rng));
        tokio::spawn(async move {
            f.run(RunUntil::Stopped, std::future::pending(), |_| {})
                .await
        });
        say("opened");
        let mut n = 0u64;
        loop {
            let k = 1 + rng.below(3);
            let payloads: Vec<String> = (0..k).map(|j| format!("{seed}-{}", n + j)).collect();
            n += k;
            say(&format!("B {}", payloads.join(" ")));
            let added = local
                .add_batch(
                    payloads
                        .iter()
                        .map(|p| NewItem::new(p.clone().into_bytes()))
                        .collect(),
                )
                .await
                .unwrap();
            let pairs: Vec<String> = added
                .iter()
                .zip(&payloads)
                .map(|(a, p)| format!("{}={p}", a.id))
                .collect();
            say(&format!("K {}", pairs.join(" ")));
            tokio::time::sleep(Duration::from_micros(rng.below(3000))).await;
        }
    });
}

fn spawn_child(path: &Path, url: &str, ns: &str, seed: u64, stderr: &Path) -> std::process::Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "forward_child_process_entry",
            "--exact",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(CHILD_ENV, path)
        .env(CHILD_URL_ENV, url)
        .env(CHILD_NS_ENV, ns)
        .env("WORKJOURNAL_FORWARD_CHILD_SEED", seed.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(std::fs::File::create(stderr).unwrap())
        .spawn()
        .unwrap()
}

/// Read the child's lines into `known`: `K` lines are acknowledged adds;
/// payloads of a `B` line without its `K` have an unknown outcome.
fn take_lines(out: impl std::io::Read, known: &mut Known) {
    let mut announced: Vec<String> = Vec::new();
    for line in BufReader::new(out).lines() {
        let Ok(line) = line else { break };
        if let Some(rest) = line.strip_prefix("B ") {
            announced = rest.split(' ').map(str::to_string).collect();
        } else if let Some(rest) = line.strip_prefix("K ") {
            for pair in rest.split(' ') {
                let (id, p) = pair.split_once('=').unwrap();
                known
                    .acked
                    .insert(id.parse().unwrap(), p.as_bytes().to_vec());
            }
            announced.clear();
        }
    }
    known
        .unknown
        .extend(announced.into_iter().map(String::into_bytes));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_of_the_forwarder_at_random_moments_loses_and_duplicates_nothing() {
    let cycles = count_from_env("WORKJOURNAL_FORWARD_KILL_CYCLES", 100);
    let mut rng = Rng(seed());
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let path: PathBuf = dir.path().join("edge.redb");
    let stderr = dir.path().join("child.stderr");
    let mut known = Known::default();
    for cycle in 0..cycles {
        let mut child = spawn_child(&path, &server.url(), "ns", rng.next(), &stderr);
        let out = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            let mut k = Known::default();
            let mut lines = BufReader::new(out);
            // libtest's own lines, then "opened", then the adds.
            let mut line = String::new();
            let opened = loop {
                line.clear();
                match lines.read_line(&mut line) {
                    Ok(0) | Err(_) => break false,
                    Ok(_) if line.trim() == "opened" => break true,
                    Ok(_) => {}
                }
            };
            let _ = tx.send(opened);
            take_lines(lines, &mut k);
            k
        });
        let opened = rx.recv_timeout(Duration::from_secs(30)).unwrap_or(false);
        if opened {
            tokio::time::sleep(Duration::from_millis(rng.below(60))).await;
        }
        child.kill().unwrap();
        let status = child.wait().unwrap();
        let k = reader.join().unwrap();
        assert!(
            opened,
            "cycle {cycle}: the child did not start ({status}): {}",
            std::fs::read_to_string(&stderr).unwrap_or_default()
        );
        known.acked.extend(k.acked);
        known.unknown.extend(k.unknown);
    }
    let local = EmbeddedQueue::open(&path, Config::default()).await.unwrap();
    drain(&local, &server.url(), "ns", "edge").await;
    assert_local_empty(&local).await;
    let rows = rows(&server.url(), "ns").await;
    assert!(!known.acked.is_empty());
    check_origin(&rows, "edge", &known);
    eprintln!(
        "{cycles} kill cycles: {} acknowledged adds, {} in flight at a kill, {} items in redis",
        known.acked.len(),
        known.unknown.len(),
        rows.len()
    );
}

// ---- the `forward` command ------------------------------------------------

fn workjournal(db: &Path, args: &[&str]) -> Command {
    let mut c = Command::new(env!("CARGO_BIN_EXE_workjournal"));
    c.arg("--db").arg(db).args(args);
    c
}

/// `workjournal forward` of `db` into namespace `fleet` at `url`, origin
/// `edge-1`, with `extra` flags.
fn forward_command(db: &Path, url: &str, extra: &[&str]) -> Command {
    let mut c = workjournal(
        db,
        &[
            "--redis",
            url,
            "--namespace",
            "fleet",
            "forward",
            "--origin",
            "edge-1",
        ],
    );
    c.args(extra);
    c
}

#[tokio::test]
async fn the_forward_command_hands_the_file_over_and_stops_when_empty() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    let mut add = workjournal(&db, &["add", "--lines"])
        .stdin(Stdio::piped())
        .spawn()
        .unwrap();
    add.stdin
        .take()
        .unwrap()
        .write_all(b"one\ntwo\nthree\n")
        .unwrap();
    assert!(add.wait().unwrap().success());
    let url = server.url();
    let out = forward_command(&db, &url, &["--until-empty"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("done: forwarded 3 (3 added"), "{stderr}");
    assert!(stderr.contains("lag 0 items"), "{stderr}");
    let rows = rows(&url, "fleet").await;
    let payloads: Vec<String> = rows.iter().map(|r| r.text("payload").unwrap()).collect();
    assert_eq!(payloads, ["one", "two", "three"]);
    assert!(
        rows.iter()
            .all(|r| r.text("origin").as_deref() == Some("edge-1"))
    );
    let stats = workjournal(&db, &["stats", "--json"]).output().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&stats.stdout).unwrap();
    assert_eq!(v["backlog"], 0);
}

/// `stats --json` of `db` with `extra` flags.
fn stats_json(db: &Path, extra: &[&str]) -> serde_json::Value {
    let mut args = vec!["stats", "--json"];
    args.extend_from_slice(extra);
    let out = workjournal(db, &args).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).unwrap()
}

#[tokio::test]
async fn stats_shows_the_forwarding_lag_once_the_file_has_been_forwarded() {
    let server = RedisServer::start().unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    let add = |args: &[&str]| {
        let out = workjournal(&db, args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
    };
    add(&["add", "one"]);
    add(&["add", "two"]);
    add(&["add", "kept here", "--flow", "local"]);
    let added = std::time::Instant::now();

    // Never forwarded: no lag, unless asked for with --forward-flow.
    let v = stats_json(&db, &[]);
    assert_eq!(v["forward_lag"], serde_json::Value::Null, "{v}");
    let out = workjournal(&db, &["stats"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(!text.contains("forward lag"), "{text}");
    tokio::time::sleep(Duration::from_millis(200)).await;
    let v = stats_json(&db, &["--forward-flow", ""]);
    assert_eq!(v["forward_lag"]["count"], 2, "{v}");
    let age = v["forward_lag"]["oldest_age_ms"].as_u64().unwrap();
    assert!(age >= 200, "{v}");
    assert!(age <= added.elapsed().as_millis() as u64 + 1000, "{v}");

    // Forward the default flow; "local" stays, and one more item arrives.
    let out = forward_command(&db, &url, &["--until-empty", "--flow", ""])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("done: forwarded 2"), "{stderr}");
    let v = stats_json(&db, &["--forward-flow", ""]);
    assert_eq!(v["forward_lag"]["count"], 0, "{v}");
    assert_eq!(
        v["forward_lag"]["oldest_age_ms"],
        serde_json::Value::Null,
        "{v}"
    );
    add(&["add", "three"]);

    // Forwarded once: the lag shows without asking, over every flow...
    let v = stats_json(&db, &[]);
    assert_eq!(v["forward_lag"]["count"], 2, "{v}");
    assert!(
        v["forward_lag"]["oldest_age_ms"].as_u64().unwrap() >= 200,
        "{v}"
    );
    let out = workjournal(&db, &["stats"]).output().unwrap();
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(text.contains("\nforward lag   2 items (oldest "), "{text}");
    // ... or over the flows the forwarder forwards.
    let v = stats_json(&db, &["--forward-flow", ""]);
    assert_eq!(v["forward_lag"]["count"], 1, "{v}");
    let v = stats_json(&db, &["--forward-flow", "local", "--forward-flow", ""]);
    assert_eq!(v["forward_lag"]["count"], 2, "{v}");

    // The next run hands the new item over; the lag of its flow is 0.
    let out = forward_command(&db, &url, &["--until-empty", "--flow", ""])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v = stats_json(&db, &["--forward-flow", ""]);
    assert_eq!(v["forward_lag"]["count"], 0, "{v}");
    assert_eq!(rows(&url, "fleet").await.len(), 3);

    // While `work` serves the file, stats goes through it and still shows
    // the lag (the file has been forwarded): one item runs, one waits
    // (not prefetched, so that it waits in the backlog).
    add(&["add", "four"]);
    let mut work = workjournal(
        &db,
        &[
            "work",
            "--exec",
            "sleep 30",
            "--concurrency",
            "1",
            "--prefetch",
            "0",
        ],
    )
    .stdin(Stdio::null())
    .stdout(Stdio::null())
    .stderr(Stdio::null())
    .spawn()
    .unwrap();
    wait_for_socket(&db, &mut work);
    let v = stats_until(&db, "the claim", |v| v["pending"] == 1).await;
    assert_eq!(v["forward_lag"]["count"], 1, "{v}");
    assert!(v["forward_lag"]["oldest_age_ms"].is_u64(), "{v}");
    let text = stats_text(&db);
    assert!(text.contains("\nforward lag   1 items (oldest "), "{text}");
    // Stop at once (the command sleeps): a second SIGTERM.
    sigterm(&work);
    tokio::time::sleep(Duration::from_millis(300)).await;
    sigterm(&work);
    assert_eq!(work.wait().unwrap().code(), Some(130));
}

#[tokio::test]
async fn the_forward_command_stops_gracefully_on_sigterm() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    assert!(workjournal(&db, &["add", "x"]).status().unwrap().success());
    let url = server.url();
    let child = forward_command(&db, &url, &[])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // Wait until the item has arrived: the forwarder then idles.
    let mut arrived = false;
    for _ in 0..200 {
        if rows(&url, "fleet").await.len() == 1 {
            arrived = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    assert!(arrived, "the item never arrived");
    let pid = child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("done: forwarded 1"), "{stderr}");
}

#[test]
fn the_forward_command_refuses_a_bad_origin_a_missing_redis_url_or_a_missing_file() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    let out = workjournal(&db, &["forward", "--origin", "edge"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--redis"));
    let server = RedisServer::start().unwrap();
    let out = workjournal(
        &db,
        &["--redis", &server.url(), "forward", "--origin", "a b"],
    )
    .output()
    .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("origin name"));
    // Only `add` makes a queue file: a mistyped --db is exit 3.
    let out = forward_command(&db, &server.url(), &["--until-empty"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3));
    assert!(!db.exists());
}

#[tokio::test]
async fn parked_and_dead_items_stay_local_and_leave_late_once_they_wait_again() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let a1 = add_in(&local, "a1", "a").await;
    let b1 = add_in(&local, "b1", "b").await;
    local.pause("a").await.unwrap();
    let got = local
        .claim(10, Duration::ZERO, ClaimFrom::All)
        .await
        .unwrap();
    assert_eq!(got.iter().map(|c| c.item.id).collect::<Vec<_>>(), vec![b1]);
    local
        .dead_letter(got[0].receipt, "failed here")
        .await
        .unwrap();
    let a2 = add_in(&local, "a2", "a").await;
    let f = forwarder(&local, &server.url(), "ns", "edge").await;
    // a1 is parked and b1 dead: only a2 leaves, and the mark passes them.
    let p = forward_all(&f).await;
    assert_eq!(p.added, 1);
    assert_eq!(local.parked("a").await.unwrap(), 1);
    assert_eq!(local.dead_letters(10).await.unwrap().len(), 1);
    local.resume("a").await.unwrap();
    assert!(local.redrive(b1).await.unwrap());
    let p = forward_all(&f).await;
    assert_eq!(p.added, 2);
    assert_local_empty(&local).await;
    let oids: Vec<u64> = rows(&server.url(), "ns")
        .await
        .iter()
        .map(|r| r.num("oid").unwrap())
        .collect();
    assert_eq!(oids, vec![a2, a1, b1]);
}

#[tokio::test]
async fn with_min_replicas_local_items_stay_until_wait_confirms() {
    let server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    let mut known = Known::default();
    for i in 0..3u8 {
        known.acked.insert(
            local.add(NewItem::new(vec![b'0' + i])).await.unwrap().id,
            vec![b'0' + i],
        );
    }
    // No replica will ever confirm: Redis applied the batch, WAIT fails.
    let lonely = RedisQueue::connect(
        &server.url(),
        "ns",
        Config::default(),
        fast_options()
            .min_replicas(1)
            .replica_timeout(Duration::from_millis(20)),
    )
    .await
    .unwrap();
    let f = Forwarder::new(local.clone(), lonely, "edge").await.unwrap();
    let e = f.forward_batch(false).await.unwrap_err();
    assert!(
        matches!(e, Error::Backend { .. }) && e.to_string().contains("replicas"),
        "{e}"
    );
    assert_eq!(local.stats().await.unwrap().backlog, 3);
    assert_eq!(rows(&server.url(), "ns").await.len(), 3);
    // Once the hand-over is confirmed the batch is not journaled again.
    let f = forwarder(&local, &server.url(), "ns", "edge").await;
    let p = forward_all(&f).await;
    assert_eq!((p.added, p.skipped), (0, 3));
    assert_local_empty(&local).await;
    check_origin(&rows(&server.url(), "ns").await, "edge", &known);
}

#[tokio::test]
async fn the_forward_command_waits_for_a_redis_that_is_away_at_start() {
    let mut server = RedisServer::start().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    assert!(workjournal(&db, &["add", "x"]).status().unwrap().success());
    let url = server.url();
    server.kill();
    let child = forward_command(&db, &url, &["--until-empty"])
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    server.restart().unwrap();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains("cannot reach Redis yet"), "{stderr}");
    assert!(stderr.contains("done: forwarded 1"), "{stderr}");
    assert_eq!(rows(&url, "fleet").await.len(), 1);
}

/// Wait until the process serving `db` answers on its socket.
fn wait_for_socket(db: &Path, child: &mut std::process::Child) {
    let socket = workjournal::socket_path_for(db);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            child.try_wait().unwrap().is_none(),
            "the process exited before serving {}",
            socket.display()
        );
        assert!(
            std::time::Instant::now() < deadline,
            "nothing served {} within 30 s",
            socket.display()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// `stats` (text) of `db`.
fn stats_text(db: &Path) -> String {
    let out = workjournal(db, &["stats"]).output().unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Poll `stats --json` of `db` until `done` holds for it (at most 60 s).
async fn stats_until(
    db: &Path,
    what: &str,
    done: impl Fn(&serde_json::Value) -> bool,
) -> serde_json::Value {
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    loop {
        let v = stats_json(db, &[]);
        if done(&v) {
            return v;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what} never happened: {v}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn sigterm(child: &std::process::Child) {
    assert!(
        Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .unwrap()
            .success()
    );
}

#[tokio::test]
async fn a_running_forwarder_serves_the_file_and_stats_shows_its_lag_while_redis_is_away() {
    let mut server = RedisServer::start().unwrap();
    let url = server.url();
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("edge.redb");
    let run = |args: &[&str]| {
        let out = workjournal(&db, args)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{args:?}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    };
    run(&["add", "one"]);
    run(&["add", "two", "--flow", "other"]);
    let added = std::time::Instant::now();
    // Redis is away when the forwarder starts; the file was never
    // forwarded before.
    server.kill();
    let stderr_path = dir.path().join("forward.stderr");
    let mut child = forward_command(&db, &url, &["--progress-every", "100ms"])
        .stdin(Stdio::null())
        .stderr(std::fs::File::create(&stderr_path).unwrap())
        .spawn()
        .unwrap();
    wait_for_socket(&db, &mut child);
    tokio::time::sleep(Duration::from_millis(200)).await;

    // stats goes through the forwarder's socket and carries the lag.
    let v = stats_json(&db, &[]);
    assert_eq!(v["backlog"], 2, "{v}");
    assert_eq!(v["forward_lag"]["count"], 2, "{v}");
    let age = v["forward_lag"]["oldest_age_ms"].as_u64().unwrap();
    assert!(age >= 200, "{v}");
    assert!(age <= added.elapsed().as_millis() as u64 + 1000, "{v}");
    let text = stats_text(&db);
    assert!(text.contains("\nforward lag   2 items (oldest "), "{text}");
    let v = stats_json(&db, &["--forward-flow", "other"]);
    assert_eq!(v["forward_lag"]["count"], 1, "{v}");

    // add, peek and pause work beside the forwarder, through its socket.
    run(&["add", "three"]);
    let peeked = run(&["peek", "--json"]);
    let peeked: serde_json::Value = serde_json::from_str(&peeked).unwrap();
    assert_eq!(peeked.as_array().unwrap().len(), 3, "{peeked}");
    run(&["pause", "nothing-here"]);
    run(&["resume", "nothing-here"]);
    let v = stats_json(&db, &[]);
    assert_eq!(v["forward_lag"]["count"], 3, "{v}");
    assert!(child.try_wait().unwrap().is_none(), "the forwarder stopped");

    // Once Redis is back everything arrives, the added item too, and the
    // lag drains to 0. `stats --json` reads the counts and the lag in two
    // calls, so a hand-over between them can show a lag of 0 beside a
    // backlog the next read no longer has: wait for both.
    server.restart().unwrap();
    let v = stats_until(&db, "the drain", |v| {
        v["forward_lag"]["count"] == 0 && v["backlog"] == 0
    })
    .await;
    assert_eq!(
        v["forward_lag"]["oldest_age_ms"],
        serde_json::Value::Null,
        "{v}"
    );
    assert_eq!(v["backlog"], 0, "{v}");
    assert!(stats_text(&db).contains("\nforward lag   0 items"));
    let mut payloads: Vec<String> = rows(&url, "fleet")
        .await
        .iter()
        .map(|r| r.text("payload").unwrap())
        .collect();
    payloads.sort();
    assert_eq!(payloads, ["one", "three", "two"]);

    sigterm(&child);
    let status = child.wait().unwrap();
    let stderr = std::fs::read_to_string(&stderr_path).unwrap();
    assert!(status.success(), "{stderr}");
    assert!(stderr.contains("cannot reach Redis yet"), "{stderr}");
    assert!(stderr.contains("done: forwarded 3"), "{stderr}");
    assert!(!workjournal::socket_path_for(&db).exists());
    // Read from the file again: forwarded, nothing left.
    let v = stats_json(&db, &[]);
    assert_eq!(v["forward_lag"]["count"], 0, "{v}");
}

/// A server on a real socket: `forward_lag` answers from its lag source,
/// counted over the forwarder's flows unless the request names others,
/// and `None` (cannot know) without one.
#[tokio::test]
async fn a_server_answers_forward_lag_from_its_lag_source_and_none_without_one() {
    use workjournal::forward::LagSource;
    use workjournal::server::{Listener, Server, ServerOptions, SocketPermissions};
    use workjournal::{BoxQueue, RemoteOptions, RemoteQueue};

    let dir = tempfile::tempdir().unwrap();
    let local = edge(dir.path()).await;
    add_in(&local, "a1", "a").await;
    add_in(&local, "b1", "b").await;
    add_in(&local, "b2", "b").await;
    let serve = |name: &str, source: Option<LagSource>| {
        let socket = dir.path().join(name);
        let local = local.clone();
        async move {
            let listener = Listener::bind_unix(&socket, &SocketPermissions::default())
                .await
                .unwrap();
            let mut server = Server::new(BoxQueue::new(local), ServerOptions::default());
            if let Some(source) = source {
                server = server.forward_lag(source);
            }
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            tokio::spawn(server.run(vec![listener], async {
                let _ = stopped.await;
            }));
            let client = RemoteQueue::connect_unix(&socket, RemoteOptions::default())
                .await
                .unwrap();
            (client, stop)
        }
    };
    let (plain, _stop1) = serve("plain.sock", Some(LagSource::file(local.clone()))).await;
    let l = plain.forward_lag(None).await.unwrap().unwrap();
    assert_eq!(l.lag.count, 3);
    assert!(l.lag.oldest_age_ms.is_some());
    assert!(!l.forwarded && !l.forwarding);
    let b = ["b".to_string()];
    assert_eq!(
        plain
            .forward_lag(Some(&b))
            .await
            .unwrap()
            .unwrap()
            .lag
            .count,
        2
    );

    let source = LagSource::forwarder(local.clone(), vec!["a".to_string()]);
    let (fwd, _stop2) = serve("forwarder.sock", Some(source)).await;
    let l = fwd.forward_lag(None).await.unwrap().unwrap();
    assert_eq!(l.lag.count, 1);
    assert!(l.forwarding);
    assert_eq!(
        fwd.forward_lag(Some(&b)).await.unwrap().unwrap().lag.count,
        2
    );
    assert_eq!(
        fwd.forward_lag(Some(&[])).await.unwrap().unwrap().lag.count,
        1
    );

    let (none, _stop3) = serve("none.sock", None).await;
    assert_eq!(none.forward_lag(None).await.unwrap(), None);
    none.close().await.unwrap();
    assert!(matches!(none.forward_lag(None).await, Err(Error::Closed)));
}
